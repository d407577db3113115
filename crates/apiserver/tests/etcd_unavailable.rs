//! The API server on etcd while etcd is unreachable: `/readyz` fails with a reason,
//! `/livez` does not, and requests that need etcd get a Kubernetes Status 503/504 (never a
//! hang or a success that was not stored); once etcd is back, everything works again.

mod common;

use apiserver::{ApiServer, ServerConfig};
use bytes::Bytes;
use common::*;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use storage::Storage;
use storage_etcd::testing::EtcdServer;
use storage_etcd::{EtcdOptions, EtcdStorage};

const CM: &str = "/api/v1/namespaces/default/configmaps";

/// GET `uri`; the status and the body as text.
async fn get_text(srv: &Arc<ApiServer>, uri: &str) -> (StatusCode, String) {
    let resp = send(srv, Method::GET, uri, None, Bytes::new()).await;
    let code = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&body).into_owned())
}

fn assert_unavailable(what: &str, code: StatusCode, v: &serde_json::Value) {
    assert!(
        code == StatusCode::SERVICE_UNAVAILABLE || code == StatusCode::GATEWAY_TIMEOUT,
        "{what}: expected 503 or 504, got {code} {v}"
    );
    assert_eq!(v["kind"], "Status", "{what}: {v}");
    assert_eq!(v["code"], code.as_u16(), "{what}: {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_and_requests_while_etcd_is_down() {
    let mut etcd = EtcdServer::start().await;
    let opts = EtcdOptions {
        request_timeout: Duration::from_secs(2),
        ..EtcdOptions::default()
    };
    let store = EtcdStorage::connect(&[etcd.endpoint()], opts)
        .await
        .unwrap();
    let storage: Arc<dyn Storage> = Arc::new(store);
    let srv = ApiServer::new(storage, ServerConfig::default())
        .await
        .unwrap();
    ok(
        "create before",
        post(&srv, CM, &configmap("before", json!({}), json!({"a": "1"}))).await,
    );
    assert_eq!(
        get_text(&srv, "/readyz").await,
        (StatusCode::OK, "ok".into())
    );

    etcd.kill();
    // Let the cached readiness answer from before the kill expire.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let t = Instant::now();
    let (code, text) = get_text(&srv, "/readyz").await;
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR, "readyz: {text}");
    assert!(
        text.contains("storage") && text.contains("readyz check failed"),
        "readyz gives a reason: {text}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "readyz is quick: {:?}",
        t.elapsed()
    );
    let (code, text) = get_text(&srv, "/livez").await;
    assert_eq!(
        code,
        StatusCode::OK,
        "livez does not depend on etcd: {text}"
    );

    let (code, v) = post(&srv, CM, &configmap("during", json!({}), json!({}))).await;
    assert_unavailable("create while etcd is down", code, &v);
    let (code, v) = get(&srv, CM).await;
    assert_unavailable("consistent list while etcd is down", code, &v);

    etcd.restart().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, _) = get_text(&srv, "/readyz").await;
        if code == StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "readyz did not recover");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Nothing acknowledged was lost, and the failed create was not stored.
    let deadline = Instant::now() + Duration::from_secs(20);
    let list = loop {
        let (code, v) = get(&srv, CM).await;
        if code.is_success() {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "lists did not recover: {code} {v}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(name_of)
        .collect();
    assert_eq!(names, vec!["before"]);
    ok(
        "create after",
        post(&srv, CM, &configmap("after", json!({}), json!({}))).await,
    );
}
