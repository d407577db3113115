//! Shared helpers of the client's integration tests: a real `listwatch serve` child and
//! deadline-bounded waiting (from the `test-server` crate), a test pod, a handler that
//! records what it was told, the typed CRUD sequence run against both our server and a
//! kube-apiserver. (The fault-injecting TCP proxy is `test_server::fault_proxy`.)

#![allow(dead_code, unused_imports)]

use client::cache::{object_key, DeleteEvent, ResourceEventHandler};
use client::object::KubeObject;
use client::rest::{Api, DeleteOutcome, DeleteParams, PatchParams, PatchType, PostParams};
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use parking_lot::Mutex;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

pub use test_server::{metric_in, until, within, Server};

/// A one-container pod `name` (image `nginx:1`) labelled `app=<app>`; its namespace is the
/// one it is created in.
pub fn pod(name: &str, app: &str) -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app".to_string(), app.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("nginx:1".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// A pod's labels (empty if it has none).
pub fn labels(p: &Pod) -> BTreeMap<String, String> {
    p.metadata.labels.clone().unwrap_or_default()
}

/// An event handler that records, per key, the resourceVersion its last notification left
/// (`None` after a delete, direct or by tombstone).
#[derive(Clone, Default)]
pub struct Recorder(pub Arc<Mutex<BTreeMap<String, Option<String>>>>);

impl<K: KubeObject> ResourceEventHandler<K> for Recorder {
    fn on_add(&self, o: &Arc<K>, _initial: bool) {
        let rv = o.resource_version().map(str::to_string);
        self.0.lock().insert(object_key(&**o), rv);
    }
    fn on_update(&self, _old: &Arc<K>, new: &Arc<K>) {
        let rv = new.resource_version().map(str::to_string);
        self.0.lock().insert(object_key(&**new), rv);
    }
    fn on_delete(&self, d: &DeleteEvent<K>) {
        let key = match d {
            DeleteEvent::Object(o) => object_key(&**o),
            DeleteEvent::DeletedFinalStateUnknown { key, .. } => key.clone(),
        };
        self.0.lock().insert(key, None);
    }
}

impl Recorder {
    /// key → resourceVersion of every key whose last notification was not a delete.
    pub fn live(&self) -> BTreeMap<String, String> {
        self.0
            .lock()
            .iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
            .collect()
    }
}

/// Typed pod CRUD through `pods` (a namespace's pods, where no pod `web-1` or `bad` exists)
/// and the `Status` errors it meets: create (with the server's defaults), 409 AlreadyExists,
/// replace and a stale replace's 409 Conflict, the three patch formats, delete, 404s after
/// it, and a 422 for an invalid pod. Leaves no pod behind.
pub async fn typed_pod_crud(pods: &Api<Pod>) {
    let pp = PostParams::default();
    let created = pods.create(&pp, &pod("web-1", "web")).await.unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("web-1"));
    assert_eq!(created.metadata.namespace.as_deref(), pods.namespace());
    assert!(created.metadata.uid.is_some());
    let phase = created.status.as_ref().and_then(|s| s.phase.as_deref());
    assert_eq!(phase, Some("Pending"));
    let rv1 = created.metadata.resource_version.clone().unwrap();

    let got = pods.get("web-1").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);

    let e = pods.create(&pp, &pod("web-1", "web")).await.unwrap_err();
    assert!(e.is_already_exists(), "{e}");
    assert_eq!(e.code(), Some(409));

    let mut changed = got.clone();
    changed
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("tier".into(), "front".into());
    let replaced = pods.replace("web-1", &pp, &changed).await.unwrap();
    assert_eq!(labels(&replaced)["tier"], "front");
    assert_ne!(
        replaced.metadata.resource_version.as_deref(),
        Some(rv1.as_str())
    );
    let e = pods.replace("web-1", &pp, &got).await.unwrap_err();
    assert!(e.is_conflict(), "{e}");
    assert_eq!(e.status().unwrap().details_name.as_deref(), Some("web-1"));

    let pa = PatchParams::default();
    let merged = pods
        .patch(
            "web-1",
            &pa,
            PatchType::Merge,
            &json!({"metadata": {"labels": {"m": "1"}}}),
        )
        .await
        .unwrap();
    assert_eq!(labels(&merged)["m"], "1");
    let jsonp = pods
        .patch(
            "web-1",
            &pa,
            PatchType::Json,
            &json!([{"op": "add", "path": "/metadata/labels/j", "value": "2"}]),
        )
        .await
        .unwrap();
    assert_eq!(labels(&jsonp)["j"], "2");
    let strategic = pods
        .patch(
            "web-1",
            &pa,
            PatchType::Strategic,
            &json!({"metadata": {"labels": {"s": "3", "m": null}}}),
        )
        .await
        .unwrap();
    let l = labels(&strategic);
    assert_eq!(l["s"], "3");
    assert_eq!(l["j"], "2");
    assert!(!l.contains_key("m"));

    // A pod on no node is deleted at once: the object (or a success Status) comes back.
    match pods
        .delete("web-1", &DeleteParams::default())
        .await
        .unwrap()
    {
        DeleteOutcome::Object(p) => assert_eq!(p.metadata.name.as_deref(), Some("web-1")),
        DeleteOutcome::Status(s) => assert_eq!(s.status.as_deref(), Some("Success")),
    }
    let e = pods.get("web-1").await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(e.code(), Some(404));
    let e = pods
        .delete("web-1", &DeleteParams::default())
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let e = pods
        .patch("nope", &pa, PatchType::Merge, &json!({}))
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");

    let mut bad = pod("bad", "web");
    bad.spec = Some(PodSpec::default());
    let e = pods.create(&pp, &bad).await.unwrap_err();
    assert!(e.is_invalid(), "{e}");
    assert_eq!(e.code(), Some(422));
}
