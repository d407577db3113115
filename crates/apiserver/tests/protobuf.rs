//! Protobuf request bodies through the whole request path: accepted for every served kind,
//! clear errors (and nothing stored) for malformed ones.

mod common;

use common::{call, get, ok, Factory, Memory};
use http::Method;
use prost::Message as _;

const PB: &str = "application/vnd.kubernetes.protobuf";

fn envelope(kind: &str, raw: Vec<u8>) -> Vec<u8> {
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    let u = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("v1".into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: None,
        content_type: None,
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(u.encode_to_vec());
    out
}

fn namespace(name: &str) -> Vec<u8> {
    let ns = k8s_pb::api::core::v1::Namespace {
        metadata: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    envelope("Namespace", ns.encode_to_vec())
}

#[tokio::test]
async fn protobuf_creates_and_malformed_bodies() {
    let h = Memory.start(common::config(1000, 100)).await;
    let srv = &h.srv;
    let (code, v) = call(
        srv,
        Method::POST,
        "/api/v1/namespaces",
        Some(PB),
        namespace("pb-ns"),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["metadata"]["name"], "pb-ns");
    ok("get", get(srv, "/api/v1/namespaces/pb-ns").await);
    let before = ok("list", get(srv, "/api/v1/namespaces").await);
    for body in [
        b"not protobuf".to_vec(),
        b"k8s\0\xff\xff".to_vec(),
        envelope("Namespace", vec![0x0a, 0x20, 0x01]),
        envelope("ConfigMap", vec![]),
    ] {
        let (code, v) = call(srv, Method::POST, "/api/v1/namespaces", Some(PB), body).await;
        common::assert_status("malformed protobuf", code, &v, 400, "BadRequest");
    }
    // Every served kind decodes; an empty pod then fails validation like a JSON one.
    let (code, v) = call(
        srv,
        Method::POST,
        "/api/v1/namespaces/default/pods",
        Some(PB),
        envelope("Pod", vec![]),
    )
    .await;
    common::assert_status("protobuf pod", code, &v, 422, "Invalid");
    let after = ok("list", get(srv, "/api/v1/namespaces").await);
    assert_eq!(before["items"], after["items"], "nothing stored");

    use k8s_pb::api::core::v1 as core;
    let pod = core::Pod {
        metadata: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("pb-pod".into()),
            ..Default::default()
        }),
        spec: Some(core::PodSpec {
            containers: vec![core::Container {
                name: Some("main".into()),
                image: Some("nginx".into()),
                ..Default::default()
            }],
            node_selector: [("disk".to_string(), "ssd".to_string())].into(),
            ..Default::default()
        }),
        status: None,
    };
    let (code, v) = call(
        srv,
        Method::POST,
        "/api/v1/namespaces/default/pods",
        Some(PB),
        envelope("Pod", pod.encode_to_vec()),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let stored = ok(
        "get",
        get(srv, "/api/v1/namespaces/default/pods/pb-pod").await,
    );
    assert_eq!(stored["spec"]["containers"][0]["image"], "nginx");
    assert_eq!(stored["spec"]["nodeSelector"]["disk"], "ssd");
    assert_eq!(stored["status"]["phase"], "Pending");
}

/// Sends a request with an Accept header (and an optional body of `content_type`); the
/// status, the response content type and the body bytes.
async fn send_accept(
    srv: &std::sync::Arc<apiserver::ApiServer>,
    method: Method,
    uri: &str,
    accept: &str,
    body: Option<(&str, Vec<u8>)>,
) -> (u16, String, bytes::Bytes) {
    use http_body_util::BodyExt as _;
    let mut b = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::ACCEPT, accept);
    let payload = match body {
        Some((ct, bytes)) => {
            b = b.header(http::header::CONTENT_TYPE, ct);
            bytes
        }
        None => Vec::new(),
    };
    let req = b
        .body(http_body_util::Full::new(bytes::Bytes::from(payload)))
        .unwrap();
    let resp = srv.clone().handle(req).await;
    let code = resp.status().as_u16();
    let ct = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, ct, body)
}

/// The (apiVersion, kind, raw message) of an enveloped protobuf body.
fn unwrap_pb(body: &[u8]) -> (String, String, Vec<u8>) {
    use k8s_pb::apimachinery::pkg::runtime::Unknown;
    let rest = body.strip_prefix(b"k8s\0").expect("k8s\\0 prefix");
    let u = Unknown::decode(rest).expect("runtime.Unknown");
    let tm = u.type_meta.unwrap_or_default();
    (
        tm.api_version.unwrap_or_default(),
        tm.kind.unwrap_or_default(),
        u.raw.unwrap_or_default(),
    )
}

const CLIENT_GO: &str = "application/vnd.kubernetes.protobuf, application/json";

#[tokio::test]
async fn protobuf_responses_for_gets_lists_writes_and_errors() {
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    let h = Memory.start(common::config(1000, 100)).await;
    let srv = &h.srv;
    // A protobuf create answered in protobuf.
    let (code, ct, body) = send_accept(
        srv,
        Method::POST,
        "/api/v1/namespaces",
        CLIENT_GO,
        Some((PB, namespace("pb-out"))),
    )
    .await;
    assert_eq!((code, ct.as_str()), (201, PB));
    let (av, kind, raw) = unwrap_pb(&body);
    assert_eq!((av.as_str(), kind.as_str()), ("v1", "Namespace"));
    let created = core::Namespace::decode(raw.as_slice()).unwrap();
    let m = created.metadata.unwrap();
    assert_eq!(m.name.as_deref(), Some("pb-out"));
    assert!(m.uid.is_some_and(|u| !u.is_empty()));
    assert!(m.creation_timestamp.and_then(|t| t.seconds).is_some());
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));

    // GET of one object.
    ok(
        "create cm",
        common::post(
            srv,
            "/api/v1/namespaces/pb-out/configmaps",
            &serde_json::json!({"metadata": {"name": "c1", "labels": {"a": "b"}}, "data": {"k": "v"}}),
        )
        .await,
    );
    let (code, ct, body) = send_accept(
        srv,
        Method::GET,
        "/api/v1/namespaces/pb-out/configmaps/c1",
        CLIENT_GO,
        None,
    )
    .await;
    assert_eq!((code, ct.as_str()), (200, PB));
    let (_, kind, raw) = unwrap_pb(&body);
    assert_eq!(kind, "ConfigMap");
    let cm = core::ConfigMap::decode(raw.as_slice()).unwrap();
    assert_eq!(cm.data.get("k").map(String::as_str), Some("v"));
    assert_eq!(
        cm.metadata.unwrap().labels.get("a").map(String::as_str),
        Some("b")
    );

    // A paged list: NamespaceList with its list metadata.
    let (code, ct, body) =
        send_accept(srv, Method::GET, "/api/v1/namespaces?limit=2", PB, None).await;
    assert_eq!((code, ct.as_str()), (200, PB));
    let (_, kind, raw) = unwrap_pb(&body);
    assert_eq!(kind, "NamespaceList");
    let list = core::NamespaceList::decode(raw.as_slice()).unwrap();
    assert_eq!(list.items.len(), 2);
    let lm = list.metadata.unwrap();
    assert!(lm.r#continue.is_some_and(|c| !c.is_empty()));
    assert!(lm
        .resource_version
        .is_some_and(|rv| rv.parse::<u64>().is_ok()));

    // Errors come back as a protobuf Status.
    let (code, ct, body) = send_accept(
        srv,
        Method::GET,
        "/api/v1/namespaces/pb-out/configmaps/missing",
        CLIENT_GO,
        None,
    )
    .await;
    assert_eq!((code, ct.as_str()), (404, PB));
    let (_, kind, raw) = unwrap_pb(&body);
    assert_eq!(kind, "Status");
    let st = meta::Status::decode(raw.as_slice()).unwrap();
    assert_eq!(st.code, Some(404));
    assert_eq!(st.reason.as_deref(), Some("NotFound"));

    // Every served kind is encoded, lists included (through the generated field table).
    let (code, ct, body) = send_accept(srv, Method::GET, "/api/v1/pods", PB, None).await;
    assert_eq!((code, ct.as_str()), (200, PB));
    let (_, kind, raw) = unwrap_pb(&body);
    assert_eq!(kind, "PodList");
    let list = k8s_pb::api::core::v1::PodList::decode(raw.as_slice()).unwrap();
    assert!(list.metadata.and_then(|m| m.resource_version).is_some());
}

/// Splits a protobuf watch stream into its `WatchEvent`s: (type, kind, raw object message).
fn frames(mut data: &[u8]) -> Vec<(String, String, Vec<u8>)> {
    use k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent;
    let mut out = Vec::new();
    while !data.is_empty() {
        assert!(data.len() >= 4, "truncated frame header");
        let n = u32::from_be_bytes([data[0], data[1], data[2], data[3]]) as usize;
        assert!(data.len() >= 4 + n, "truncated frame");
        let ev = WatchEvent::decode(&data[4..4 + n]).expect("WatchEvent");
        let raw = ev.object.and_then(|o| o.raw).unwrap_or_default();
        let (_, kind, msg) = unwrap_pb(&raw);
        out.push((ev.r#type.unwrap_or_default(), kind, msg));
        data = &data[4 + n..];
    }
    out
}

#[tokio::test]
async fn protobuf_watch_streams_length_delimited_watch_events() {
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    let h = Memory.start(common::config(5, 100)).await;
    let srv = &h.srv;
    let base = "/api/v1/namespaces/default/configmaps";
    let first = ok(
        "create",
        common::post(
            srv,
            base,
            &serde_json::json!({"metadata": {"name": "w"}, "data": {"n": "0"}}),
        )
        .await,
    );
    let rv0 = common::rv_of(&first);
    ok(
        "update",
        common::put(
            srv,
            &format!("{base}/w"),
            &serde_json::json!({"metadata": {"name": "w"}, "data": {"n": "1"}}),
        )
        .await,
    );
    ok("delete", common::delete(srv, &format!("{base}/w")).await);
    // A bounded watch from the create: the replay, then the stream ends at the timeout.
    let (code, ct, body) = send_accept(
        srv,
        Method::GET,
        &format!("{base}?watch=true&resourceVersion={rv0}&timeoutSeconds=1"),
        "application/vnd.kubernetes.protobuf;stream=watch, application/json",
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(ct, "application/vnd.kubernetes.protobuf;stream=watch");
    let evs = frames(&body);
    let types: Vec<&str> = evs.iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(types, vec!["MODIFIED", "DELETED"]);
    let modified = core::ConfigMap::decode(evs[0].2.as_slice()).unwrap();
    assert_eq!(modified.data.get("n").map(String::as_str), Some("1"));
    assert!(evs.iter().all(|(_, k, _)| k == "ConfigMap"));

    // A streaming list ends its initial events with an annotated BOOKMARK.
    let (_, _, body) = send_accept(
        srv,
        Method::GET,
        &format!("{base}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"),
        PB,
        None,
    )
    .await;
    let evs = frames(&body);
    let bm = evs
        .iter()
        .find(|(t, _, _)| t == "BOOKMARK")
        .expect("a bookmark");
    let m = core::ConfigMap::decode(bm.2.as_slice())
        .unwrap()
        .metadata
        .unwrap();
    assert_eq!(
        m.annotations
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true")
    );

    // A version pushed out of the 5-event ring: an ERROR event with a 410 Status.
    for i in 0..10 {
        ok(
            "create",
            common::post(
                srv,
                base,
                &serde_json::json!({"metadata": {"name": format!("x{i}")}}),
            )
            .await,
        );
    }
    // A consistent list makes the cache catch up with the creates first.
    ok("list", get(srv, base).await);
    let (code, _, body) = send_accept(
        srv,
        Method::GET,
        &format!("{base}?watch=true&resourceVersion={rv0}&timeoutSeconds=5"),
        PB,
        None,
    )
    .await;
    assert_eq!(code, 200);
    let evs = frames(&body);
    assert_eq!(evs.len(), 1);
    assert_eq!((evs[0].0.as_str(), evs[0].1.as_str()), ("ERROR", "Status"));
    let st = meta::Status::decode(evs[0].2.as_slice()).unwrap();
    assert_eq!(st.code, Some(410));
}

/// The kinds kube-scheduler lists and watches beyond the workloads (its volume plugins'
/// CSI objects, and the replication controllers its spreading scores read), in protobuf as
/// its client asks: a protobuf create, lists and a watch decode as Kubernetes' messages.
#[tokio::test]
async fn the_kinds_kube_scheduler_watches_are_served_in_protobuf() {
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::api::storage::v1 as storage;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    let h = Memory.start(common::config(100, 100)).await;
    let srv = &h.srv;
    // A CSINode created in protobuf, as a kubelet's plugin registration writes it.
    let node = storage::CSINode {
        metadata: Some(meta::ObjectMeta {
            name: Some("node-0".into()),
            ..Default::default()
        }),
        spec: Some(storage::CSINodeSpec {
            drivers: vec![storage::CSINodeDriver {
                name: Some("hostpath.csi.k8s.io".into()),
                node_id: Some("node-0".into()),
                topology_keys: vec!["topology.hostpath.csi/node".into()],
                allocatable: Some(storage::VolumeNodeResources { count: Some(10) }),
            }],
        }),
    };
    let body = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("storage.k8s.io/v1".into()),
            kind: Some("CSINode".into()),
        }),
        raw: Some(node.encode_to_vec()),
        content_encoding: None,
        content_type: None,
    };
    let mut pb = b"k8s\0".to_vec();
    pb.extend(body.encode_to_vec());
    let (code, ct, _) = send_accept(
        srv,
        Method::POST,
        "/apis/storage.k8s.io/v1/csinodes",
        CLIENT_GO,
        Some((PB, pb)),
    )
    .await;
    assert_eq!((code, ct.as_str()), (201, PB));
    let rv = ok("list", get(srv, "/apis/storage.k8s.io/v1/csidrivers").await)["metadata"]
        ["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    for (uri, obj) in [
        (
            "/apis/storage.k8s.io/v1/csidrivers",
            serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": "hostpath.csi.k8s.io"}, "spec": {"storageCapacity": true}}),
        ),
        (
            "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities",
            serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
                "metadata": {"name": "cap-1"}, "storageClassName": "fast", "capacity": "10Gi",
                "nodeTopology": {"matchLabels": {"topology.hostpath.csi/node": "node-0"}}}),
        ),
        (
            "/api/v1/namespaces/default/replicationcontrollers",
            serde_json::json!({"apiVersion": "v1", "kind": "ReplicationController",
                "metadata": {"name": "old"}, "spec": {"replicas": 2, "template": {
                    "metadata": {"labels": {"app": "old"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
        ),
    ] {
        ok("create", common::post(srv, uri, &obj).await);
    }

    let list = |uri: &'static str, want: &'static str| async move {
        let (code, ct, body) = send_accept(srv, Method::GET, uri, CLIENT_GO, None).await;
        assert_eq!((code, ct.as_str()), (200, PB), "{uri}");
        let (_, kind, raw) = unwrap_pb(&body);
        assert_eq!(kind, want);
        raw
    };
    let raw = list("/apis/storage.k8s.io/v1/csinodes", "CSINodeList").await;
    let nodes = storage::CSINodeList::decode(raw.as_slice()).unwrap();
    assert_eq!(nodes.items.len(), 1);
    let spec = nodes.items[0].spec.clone().unwrap();
    assert_eq!(spec.drivers[0].node_id.as_deref(), Some("node-0"));
    assert_eq!(
        spec.drivers[0].allocatable.as_ref().and_then(|a| a.count),
        Some(10)
    );
    let raw = list("/apis/storage.k8s.io/v1/csidrivers", "CSIDriverList").await;
    let drivers = storage::CSIDriverList::decode(raw.as_slice()).unwrap();
    let spec = drivers.items[0].spec.clone().unwrap();
    // Kubernetes' defaults, on the wire.
    assert_eq!(
        (
            spec.storage_capacity,
            spec.attach_required,
            spec.fs_group_policy.as_deref()
        ),
        (Some(true), Some(true), Some("ReadWriteOnceWithFSType"))
    );
    assert_eq!(spec.volume_lifecycle_modes, vec!["Persistent".to_string()]);
    let raw = list(
        "/apis/storage.k8s.io/v1/csistoragecapacities",
        "CSIStorageCapacityList",
    )
    .await;
    let caps = storage::CSIStorageCapacityList::decode(raw.as_slice()).unwrap();
    let cap = &caps.items[0];
    assert_eq!(cap.storage_class_name.as_deref(), Some("fast"));
    assert_eq!(
        cap.capacity.as_ref().and_then(|q| q.string.as_deref()),
        Some("10Gi")
    );
    assert_eq!(
        cap.node_topology
            .as_ref()
            .and_then(|t| t.match_labels.get("topology.hostpath.csi/node"))
            .map(String::as_str),
        Some("node-0")
    );
    let raw = list(
        "/api/v1/replicationcontrollers",
        "ReplicationControllerList",
    )
    .await;
    let rcs = core::ReplicationControllerList::decode(raw.as_slice()).unwrap();
    let spec = rcs.items[0].spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(2));
    // The selector defaults to the template's labels.
    assert_eq!(spec.selector.get("app").map(String::as_str), Some("old"));

    // A watch of them, from before the creates, in protobuf frames.
    let (code, _, body) = send_accept(
        srv,
        Method::GET,
        &format!(
            "/apis/storage.k8s.io/v1/csidrivers?watch=true&resourceVersion={rv}&timeoutSeconds=1"
        ),
        "application/vnd.kubernetes.protobuf;stream=watch, application/json",
        None,
    )
    .await;
    assert_eq!(code, 200);
    let evs = frames(&body);
    assert_eq!(evs.len(), 1);
    assert_eq!(
        (evs[0].0.as_str(), evs[0].1.as_str()),
        ("ADDED", "CSIDriver")
    );
    let added = storage::CSIDriver::decode(evs[0].2.as_slice()).unwrap();
    assert_eq!(
        added.metadata.and_then(|m| m.name).as_deref(),
        Some("hostpath.csi.k8s.io")
    );
}

/// ControllerRevisions, the history DaemonSets and StatefulSets keep, as their controllers
/// write and read them in protobuf: the `data` a protobuf create carries (raw JSON in a
/// RawExtension) is the JSON object a JSON client reads; a protobuf list decodes as
/// Kubernetes' message; `data` is required and immutable, `revision` changes and is never
/// negative, and a refused write changes nothing.
#[tokio::test]
async fn controller_revisions_are_served_in_protobuf_and_keep_their_data() {
    use k8s_pb::api::apps::v1 as apps;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta, Unknown};
    let h = Memory.start(common::config(100, 100)).await;
    let srv = &h.srv;
    let data = serde_json::json!({"spec": {"template": {"$patch": "replace",
        "spec": {"containers": [{"name": "a", "image": "busybox:1"}]}}}});
    let rev = apps::ControllerRevision {
        metadata: Some(meta::ObjectMeta {
            name: Some("agent-6b9f7c5d4".into()),
            labels: [(
                "controller-revision-hash".to_string(),
                "6b9f7c5d4".to_string(),
            )]
            .into(),
            owner_references: vec![meta::OwnerReference {
                api_version: Some("apps/v1".into()),
                kind: Some("DaemonSet".into()),
                name: Some("agent".into()),
                uid: Some("u-1".into()),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }],
            ..Default::default()
        }),
        data: Some(RawExtension {
            raw: Some(serde_json::to_vec(&data).unwrap()),
        }),
        revision: Some(1),
    };
    let body = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("apps/v1".into()),
            kind: Some("ControllerRevision".into()),
        }),
        raw: Some(rev.encode_to_vec()),
        content_encoding: None,
        content_type: None,
    };
    let mut pb = b"k8s\0".to_vec();
    pb.extend(body.encode_to_vec());
    let uri = "/apis/apps/v1/namespaces/default/controllerrevisions";
    let (code, ct, _) = send_accept(srv, Method::POST, uri, CLIENT_GO, Some((PB, pb))).await;
    assert_eq!((code, ct.as_str()), (201, PB));

    let one = format!("{uri}/agent-6b9f7c5d4");
    let stored = ok("get", get(srv, &one).await);
    assert_eq!(stored["data"], data);
    assert_eq!(stored["revision"], 1);
    assert_eq!(
        stored["metadata"]["ownerReferences"][0]["kind"],
        "DaemonSet"
    );

    let (code, ct, body) = send_accept(srv, Method::GET, uri, CLIENT_GO, None).await;
    assert_eq!((code, ct.as_str()), (200, PB));
    let (_, kind, raw) = unwrap_pb(&body);
    assert_eq!(kind, "ControllerRevisionList");
    let list = apps::ControllerRevisionList::decode(raw.as_slice()).unwrap();
    assert_eq!(list.items.len(), 1);
    let raw_data = list.items[0].data.clone().and_then(|d| d.raw).unwrap();
    let decoded: serde_json::Value = serde_json::from_slice(&raw_data).unwrap();
    assert_eq!(decoded, data);
    assert_eq!(list.items[0].revision, Some(1));

    // A rollback renumbers a revision: allowed.
    let renumbered = ok(
        "renumber",
        common::merge_patch(srv, &one, &serde_json::json!({"revision": 3})).await,
    );
    assert_eq!(renumbered["revision"], 3);
    // Its data never changes.
    let (code, v) = common::merge_patch(
        srv,
        &one,
        &serde_json::json!({"data": {"spec": {"template": {"spec": {"hostNetwork": true}}}}}),
    )
    .await;
    common::assert_status("change data", code, &v, 422, "Invalid");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("field is immutable"),
        "{v}"
    );
    let (code, v) = common::merge_patch(srv, &one, &serde_json::json!({"revision": -1})).await;
    common::assert_status("negative revision", code, &v, 422, "Invalid");
    let still = ok("get", get(srv, &one).await);
    assert_eq!(
        (&still["data"], &still["revision"]),
        (&data, &serde_json::json!(3))
    );

    // A revision without data is refused and not stored.
    let (code, v) = common::post(
        srv,
        uri,
        &serde_json::json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": "empty"}, "revision": 1}),
    )
    .await;
    common::assert_status("no data", code, &v, 422, "Invalid");
    assert!(
        v["message"].as_str().unwrap().contains("data is mandatory"),
        "{v}"
    );
    let (code, _) = get(srv, &format!("{uri}/empty")).await;
    assert_eq!(code, 404);
}
