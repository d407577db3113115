//! Protobuf request bodies through the whole request path: accepted for namespaces and
//! configmaps, clear errors (and nothing stored) for malformed ones.

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
    let (code, v) = call(
        srv,
        Method::POST,
        "/api/v1/namespaces/default/pods",
        Some(PB),
        envelope("Pod", vec![]),
    )
    .await;
    common::assert_status("protobuf pod", code, &v, 415, "UnsupportedMediaType");
    let after = ok("list", get(srv, "/api/v1/namespaces").await);
    assert_eq!(before["items"], after["items"], "nothing stored");
}
