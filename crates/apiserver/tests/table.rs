//! Table and PartialObjectMetadata renderings of get, list and watch, and Accept
//! negotiation failures.

mod common;

use bytes::Bytes;
use common::{ok, post, Factory, Memory, Watch};
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const KUBECTL: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
const META_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const META: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

async fn send(
    srv: &Arc<apiserver::ApiServer>,
    uri: &str,
    accept: &str,
) -> http::Response<apiserver::encoding::body::Body> {
    let req = Request::builder()
        .method(Method::GET)
        .uri(uri)
        .header(
            http::header::ACCEPT,
            http::HeaderValue::from_bytes(accept.as_bytes()).unwrap(),
        )
        .body(Full::new(Bytes::new()))
        .unwrap();
    srv.clone().handle(req).await
}

async fn get_as(srv: &Arc<apiserver::ApiServer>, uri: &str, accept: &str) -> (u16, Value) {
    let resp = send(srv, uri, accept).await;
    let code = resp.status().as_u16();
    let b = resp.into_body().collect().await.unwrap().to_bytes();
    (
        code,
        serde_json::from_slice(&b)
            .unwrap_or_else(|e| panic!("{uri}: not JSON ({e}): {}", String::from_utf8_lossy(&b))),
    )
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "t"}},
           "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "nginx"}]},
           "status": {"phase": "Running", "podIP": "10.1.2.3", "containerStatuses": [
               {"name": "c", "ready": true, "restartCount": 4, "state": {"running": {}}}]}})
}

/// Creates a pod and sets its status (create ignores `.status`).
async fn create_running_pod(srv: &Arc<apiserver::ApiServer>, name: &str) {
    let p = pod(name);
    ok(
        "create pod",
        post(srv, "/api/v1/namespaces/default/pods", &p).await,
    );
    ok(
        "pod status",
        common::merge_patch(
            srv,
            &format!("/api/v1/namespaces/default/pods/{name}/status"),
            &json!({"status": p["status"]}),
        )
        .await,
    );
}

#[tokio::test]
async fn list_as_table_has_kubectl_columns_and_list_metadata() {
    let h = Memory.start(common::config(1000, 100)).await;
    let srv = &h.srv;
    for n in ["a", "b", "c"] {
        create_running_pod(srv, n).await;
    }
    let (code, t) = get_as(srv, "/api/v1/namespaces/default/pods?limit=2", KUBECTL).await;
    assert_eq!(code, 200, "{t}");
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates"
        ]
    );
    assert_eq!(t["columnDefinitions"][5]["priority"], 1);
    assert!(t["metadata"]["resourceVersion"].as_str().is_some());
    assert!(t["metadata"]["continue"].as_str().is_some());
    assert_eq!(t["metadata"]["remainingItemCount"], 1);
    let rows = t["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let cells = rows[0]["cells"].as_array().unwrap();
    assert_eq!(cells[0], "a");
    assert_eq!(cells[1], "1/1");
    assert_eq!(cells[2], "Running");
    assert_eq!(cells[3], "4");
    let age = cells[4].as_str().unwrap();
    assert!(age.ends_with('s') && age.len() <= 3, "fresh age: {age}");
    assert_eq!(cells[5], "10.1.2.3");
    assert_eq!(cells[6], "n1");
    assert_eq!(rows[0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(rows[0]["object"]["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(rows[0]["object"]["metadata"]["name"], "a");
    assert!(rows[0]["object"].get("spec").is_none());
    // includeObject=Object carries the whole pod; None carries nothing.
    let (_, t) = get_as(
        srv,
        "/api/v1/namespaces/default/pods?includeObject=Object",
        KUBECTL,
    )
    .await;
    assert_eq!(t["rows"][2]["object"]["kind"], "Pod");
    assert_eq!(t["rows"][2]["object"]["spec"]["nodeName"], "n1");
    let (_, t) = get_as(
        srv,
        "/api/v1/namespaces/default/pods?includeObject=None",
        KUBECTL,
    )
    .await;
    assert!(t["rows"][0].get("object").is_none());
    let (code, s) = get_as(
        srv,
        "/api/v1/namespaces/default/pods?includeObject=Everything",
        KUBECTL,
    )
    .await;
    common::assert_status(
        "bad includeObject",
        code.try_into().unwrap(),
        &s,
        400,
        "BadRequest",
    );
    // Namespaces and other kinds.
    let (_, t) = get_as(srv, "/api/v1/namespaces", KUBECTL).await;
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Status", "Age"]);
    assert!(t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["cells"][0] == "default" && r["cells"][1] == "Active"));
    let (_, t) = get_as(srv, "/api/v1/namespaces/default/configmaps", KUBECTL).await;
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Data", "Age"]);
    assert_eq!(t["rows"], json!([]));
}

#[tokio::test]
async fn get_renders_as_table_and_partial_metadata() {
    let h = Memory.start(common::config(1000, 100)).await;
    let srv = &h.srv;
    ok(
        "create pod",
        post(srv, "/api/v1/namespaces/default/pods", &pod("one")).await,
    );
    let (code, t) = get_as(srv, "/api/v1/namespaces/default/pods/one", KUBECTL).await;
    assert_eq!(code, 200);
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["rows"].as_array().unwrap().len(), 1);
    assert_eq!(t["rows"][0]["cells"][0], "one");
    let (code, m) = get_as(srv, "/api/v1/namespaces/default/pods/one", META).await;
    assert_eq!(code, 200);
    assert_eq!(m["kind"], "PartialObjectMetadata");
    assert_eq!(m["metadata"]["name"], "one");
    assert_eq!(m["metadata"]["labels"]["app"], "t");
    assert!(m.get("spec").is_none());
    let (code, s) = get_as(srv, "/api/v1/namespaces/default/pods/missing", KUBECTL).await;
    assert_eq!(code, 404, "{s}");
    assert_eq!(s["kind"], "Status");
    let (_, l) = get_as(srv, "/api/v1/namespaces/default/pods", META_LIST).await;
    assert_eq!(l["kind"], "PartialObjectMetadataList");
    assert_eq!(l["apiVersion"], "meta.k8s.io/v1");
    assert!(l["metadata"]["resourceVersion"].is_string());
    assert_eq!(l["items"][0]["kind"], "PartialObjectMetadata");
    assert_eq!(l["items"][0]["metadata"]["name"], "one");
    assert!(l["items"][0].get("status").is_none());
}

#[tokio::test]
async fn unacceptable_accept_headers_are_406() {
    let h = Memory.start(common::config(1000, 100)).await;
    let srv = &h.srv;
    for (uri, accept) in [
        ("/api/v1/namespaces/default/pods", "application/yaml"),
        ("/api/v1/namespaces/default/pods", "text/html;q=1, */*;q=0"),
        ("/api/v1/namespaces/default/pods", META),
        ("/api/v1/namespaces/default", META_LIST),
        (
            "/api/v1/namespaces/default/pods?watch=1",
            "application/json;as=Table;v=v2;g=meta.k8s.io",
        ),
        ("/api/v1/namespaces", "garbage"),
    ] {
        let (code, s) = get_as(srv, uri, accept).await;
        common::assert_status(accept, code.try_into().unwrap(), &s, 406, "NotAcceptable");
    }
    // A header that is not even text.
    let req = Request::builder()
        .uri("/api/v1/namespaces")
        .header(
            http::header::ACCEPT,
            http::HeaderValue::from_bytes(b"application/json\xff").unwrap(),
        )
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(srv.clone().handle(req).await.status(), 406);
}

async fn watch_as(srv: &Arc<apiserver::ApiServer>, uri: &str, accept: &str) -> Watch {
    let resp = send(srv, uri, accept).await;
    assert_eq!(resp.status(), 200);
    Watch::from_body(resp.into_body())
}

#[tokio::test]
async fn watch_events_are_one_row_tables_with_columns_only_first() {
    let h = Memory.start(common::config(1000, 100)).await;
    let srv = &h.srv;
    ok(
        "create pod",
        post(srv, "/api/v1/namespaces/default/pods", &pod("first")).await,
    );
    let mut w = watch_as(
        srv,
        "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=5",
        KUBECTL,
    )
    .await;
    let mut w2 = watch_as(
        srv,
        "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=5&resourceVersion=0",
        META,
    )
    .await;
    let ev = w.expect(Duration::from_secs(5)).await;
    assert_eq!(ev["type"], "ADDED");
    let t = &ev["object"];
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 9);
    assert_eq!(t["rows"].as_array().unwrap().len(), 1);
    assert_eq!(t["rows"][0]["cells"][0], "first");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let rv = t["rows"][0]["object"]["metadata"]["resourceVersion"].clone();
    assert_eq!(t["metadata"]["resourceVersion"], rv);
    let ev = w2.expect(Duration::from_secs(5)).await;
    assert_eq!(ev["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(ev["object"]["metadata"]["name"], "first");
    ok(
        "create pod",
        post(srv, "/api/v1/namespaces/default/pods", &pod("second")).await,
    );
    let ev = w.expect(Duration::from_secs(5)).await;
    assert_eq!(ev["type"], "ADDED");
    assert!(ev["object"]["columnDefinitions"].is_null(), "{ev}");
    assert_eq!(ev["object"]["rows"][0]["cells"][0], "second");
    assert_eq!(
        w2.expect(Duration::from_secs(5)).await["object"]["metadata"]["name"],
        "second"
    );
    // A bound pod is deleted gracefully; at grace 0 it goes at once.
    common::delete(
        srv,
        "/api/v1/namespaces/default/pods/second?gracePeriodSeconds=0",
    )
    .await;
    let ev = w.expect(Duration::from_secs(5)).await;
    assert_eq!(ev["type"], "DELETED");
    assert_eq!(ev["object"]["rows"][0]["cells"][0], "second");
    let ev = w2.expect(Duration::from_secs(5)).await;
    assert_eq!(ev["type"], "DELETED");
    assert_eq!(ev["object"]["kind"], "PartialObjectMetadata");
}

#[tokio::test]
async fn table_encoding_is_computed_once_per_object() {
    let h = Memory.start(common::config(1000, 100)).await;
    let srv = &h.srv;
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(
            watch_as(
                srv,
                "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=5&resourceVersion=0",
                KUBECTL,
            )
            .await,
        );
    }
    ok(
        "create pod",
        post(srv, "/api/v1/namespaces/default/pods", &pod("shared")).await,
    );
    for w in &mut watches {
        let ev = w.expect(Duration::from_secs(5)).await;
        assert_eq!(ev["object"]["rows"][0]["cells"][0], "shared");
    }
    let info = apiserver::registry::resources::find("", "v1", "pods").unwrap();
    let obj = srv
        .cacher(info)
        .unwrap()
        .get_cached("default/shared")
        .unwrap();
    assert!(obj.derived.table_row.get().is_some(), "row parts cached");
    assert!(obj.derived.metadata.get().is_some(), "metadata cached");
}
