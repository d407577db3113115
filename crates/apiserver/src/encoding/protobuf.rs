//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`): the `k8s\0` envelope
//! around a `runtime.Unknown`, whose `raw` bytes are the object's protobuf encoding.
//!
//! kubectl sends its typed creates only this way (`kubectl create namespace`, `create
//! configmap`, `create secret`, `create service`, `create deployment`), and Go controllers
//! configured for protobuf send everything so: every served kind is decoded into the JSON
//! form the handlers work on ([`crate::schema::protobuf_generic`]).

use crate::registry::ResourceInfo;
use api::protobuf_wire::MAGIC;
use api::Status;
use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message as _;
use serde_json::{json, Map, Value};

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// True if `content_type` names the Kubernetes protobuf media type.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|m| m.trim().eq_ignore_ascii_case(MEDIA_TYPE))
}

fn bad(msg: impl std::fmt::Display) -> Status {
    Status::bad_request(format!("invalid protobuf body: {msg}"))
}

/// Unwraps the envelope: the (apiVersion, kind) it declares and the raw object bytes.
pub fn unwrap_envelope(body: &[u8]) -> Result<(String, String, Vec<u8>), Status> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("missing the k8s\\0 prefix"))?;
    let unknown = Unknown::decode(rest).map_err(bad)?;
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(bad("content encodings are not supported"));
    }
    let tm = unknown.type_meta.unwrap_or_default();
    Ok((
        tm.api_version.unwrap_or_default(),
        tm.kind.unwrap_or_default(),
        unknown.raw.unwrap_or_default(),
    ))
}

fn meta_json(m: Option<ObjectMeta>) -> Value {
    let m = m.unwrap_or_default();
    let mut out = Map::new();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            out.insert(k.into(), Value::String(v));
        }
    };
    put("name", m.name);
    put("generateName", m.generate_name);
    put("namespace", m.namespace);
    put("uid", m.uid);
    put("resourceVersion", m.resource_version);
    if !m.labels.is_empty() {
        out.insert("labels".into(), json!(m.labels));
    }
    if !m.annotations.is_empty() {
        out.insert("annotations".into(), json!(m.annotations));
    }
    if !m.finalizers.is_empty() {
        out.insert("finalizers".into(), json!(m.finalizers));
    }
    if !m.owner_references.is_empty() {
        let refs: Vec<Value> = m
            .owner_references
            .into_iter()
            .map(|r| {
                let mut o = json!({
                    "apiVersion": r.api_version.unwrap_or_default(),
                    "kind": r.kind.unwrap_or_default(),
                    "name": r.name.unwrap_or_default(),
                    "uid": r.uid.unwrap_or_default(),
                });
                if let Some(c) = r.controller {
                    o["controller"] = json!(c);
                }
                if let Some(b) = r.block_owner_deletion {
                    o["blockOwnerDeletion"] = json!(b);
                }
                o
            })
            .collect();
        out.insert("ownerReferences".into(), Value::Array(refs));
    }
    Value::Object(out)
}

/// Decodes a protobuf body for resource `info` into the object's JSON. 400 for a malformed
/// body or one of another kind; 415 for kinds not decoded here.
pub fn decode_to_json(info: &ResourceInfo, body: &[u8]) -> Result<Vec<u8>, Status> {
    decode_kind_to_json(&[&info.api_version()], info.kind, info.resource, body)
}

/// [`decode_to_json`] for the body of a request to `info`'s `subresource`: a pod's `binding`
/// takes a core `v1` Binding and its `eviction` a `policy/v1` (or `v1beta1`) Eviction (what client-go's
/// scheduler and `kubectl drain` send); everything else the resource's own kind.
pub fn decode_request_to_json(
    info: &ResourceInfo,
    subresource: Option<&str>,
    body: &[u8],
) -> Result<Vec<u8>, Status> {
    match subresource {
        Some("binding") => decode_kind_to_json(&["v1"], "Binding", "bindings", body),
        Some("eviction") => decode_kind_to_json(
            &["policy/v1", "policy/v1beta1"],
            "Eviction",
            "evictions",
            body,
        ),
        Some("token") => decode_token_request_to_json(body),
        _ => decode_to_json(info, body),
    }
}

/// Decodes a protobuf `authentication.k8s.io/v1` TokenRequest (what `kubectl create token`
/// sends) into JSON.
fn decode_token_request_to_json(body: &[u8]) -> Result<Vec<u8>, Status> {
    use k8s_pb::api::authentication::v1 as authn;
    let (api_version, kind, raw) = unwrap_envelope(body)?;
    if (!api_version.is_empty() && api_version != "authentication.k8s.io/v1")
        || (!kind.is_empty() && kind != "TokenRequest")
    {
        return Err(bad(format!(
            "the body is a {api_version} {kind}, not an authentication.k8s.io/v1 TokenRequest"
        )));
    }
    let r = authn::TokenRequest::decode(raw.as_slice()).map_err(bad)?;
    let spec = r.spec.unwrap_or_default();
    let mut out = json!({"audiences": spec.audiences});
    if let Some(e) = spec.expiration_seconds {
        out["expirationSeconds"] = json!(e);
    }
    if let Some(b) = spec.bound_object_ref {
        let mut m = Map::new();
        for (k, v) in [
            ("kind", b.kind),
            ("apiVersion", b.api_version),
            ("name", b.name),
            ("uid", b.u_id),
        ] {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                m.insert(k.into(), Value::String(v));
            }
        }
        out["boundObjectRef"] = Value::Object(m);
    }
    let obj = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                     "metadata": meta_json(r.metadata), "spec": out});
    Ok(serde_json::to_vec(&obj).unwrap_or_default())
}

/// Decodes a protobuf `kind` of one of `versions` (the first is the one the JSON names; the
/// others have the same fields) into JSON. `resource` names the kind in a 415.
fn decode_kind_to_json(
    versions: &[&str],
    kind: &str,
    resource: &str,
    body: &[u8],
) -> Result<Vec<u8>, Status> {
    let (api_version, given_kind, raw) = unwrap_envelope(body)?;
    let want_version = versions.first().copied().unwrap_or_default();
    if (!api_version.is_empty() && !versions.contains(&api_version.as_str()))
        || (!given_kind.is_empty() && given_kind != kind)
    {
        return Err(bad(format!(
            "the body is a {api_version} {given_kind}, not a {want_version} {kind}"
        )));
    }
    let Some(index) = crate::schema::protobuf_generic::root(want_version, kind) else {
        return Err(Status::unsupported_media_type(
            &format!("{MEDIA_TYPE} ({resource} are not accepted as protobuf; send JSON)"),
            &super::JSON_OR_YAML,
        ));
    };
    let fields = crate::schema::protobuf_generic::decode(index, &raw).map_err(bad)?;
    let mut obj = Map::with_capacity(fields.len() + 2);
    obj.insert("apiVersion".into(), Value::String(want_version.to_string()));
    obj.insert("kind".into(), Value::String(kind.to_string()));
    obj.extend(fields);
    let obj = Value::Object(obj);
    Ok(serde_json::to_vec(&obj).unwrap_or_default())
}

/// Decodes a protobuf self-review (`kind` of group version `api_version`) into its JSON form:
/// metadata and the spec fields a review reads. 400 for a malformed body or another kind.
pub fn decode_review_to_json(
    api_version: &str,
    kind: &str,
    body: &[u8],
) -> Result<Vec<u8>, Status> {
    use k8s_pb::api::authentication::v1 as authn;
    use k8s_pb::api::authorization::v1 as authz;
    let (given_version, given_kind, raw) = unwrap_envelope(body)?;
    if (!given_version.is_empty() && given_version != api_version)
        || (!given_kind.is_empty() && given_kind != kind)
    {
        return Err(bad(format!(
            "the body is a {given_version} {given_kind}, not a {api_version} {kind}"
        )));
    }
    let opt = |v: Option<String>| v.filter(|v| !v.is_empty());
    let (metadata, spec) = match kind {
        "SelfSubjectAccessReview" => {
            let r = authz::SelfSubjectAccessReview::decode(raw.as_slice()).map_err(bad)?;
            let spec = r.spec.unwrap_or_default();
            let mut out = Map::new();
            if let Some(a) = spec.resource_attributes {
                let mut m = Map::new();
                for (k, v) in [
                    ("namespace", a.namespace),
                    ("verb", a.verb),
                    ("group", a.group),
                    ("version", a.version),
                    ("resource", a.resource),
                    ("subresource", a.subresource),
                    ("name", a.name),
                ] {
                    if let Some(v) = opt(v) {
                        m.insert(k.into(), Value::String(v));
                    }
                }
                out.insert("resourceAttributes".into(), Value::Object(m));
            }
            if let Some(a) = spec.non_resource_attributes {
                let mut m = Map::new();
                for (k, v) in [("path", a.path), ("verb", a.verb)] {
                    if let Some(v) = opt(v) {
                        m.insert(k.into(), Value::String(v));
                    }
                }
                out.insert("nonResourceAttributes".into(), Value::Object(m));
            }
            (r.metadata, Value::Object(out))
        }
        "SelfSubjectRulesReview" => {
            let r = authz::SelfSubjectRulesReview::decode(raw.as_slice()).map_err(bad)?;
            let ns = r.spec.and_then(|s| opt(s.namespace));
            (
                r.metadata,
                ns.map_or_else(|| json!({}), |n| json!({"namespace": n})),
            )
        }
        "SelfSubjectReview" => {
            let r = authn::SelfSubjectReview::decode(raw.as_slice()).map_err(bad)?;
            (r.metadata, Value::Null)
        }
        _ => return Err(bad(format!("{kind} is not a review"))),
    };
    let mut obj = json!({"apiVersion": api_version, "kind": kind, "metadata": meta_json(metadata)});
    if !spec.is_null() {
        obj["spec"] = spec;
    }
    Ok(serde_json::to_vec(&obj).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::find;
    use k8s_pb::api::core::v1 as core;
    use std::collections::BTreeMap;

    /// Wraps a message the way client-go does.
    pub(crate) fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        crate::encoding::protobuf_encode::envelope(api_version, kind, raw)
    }

    #[test]
    fn namespace_and_configmap_round_trip_to_json() {
        let ns = core::Namespace {
            metadata: Some(ObjectMeta {
                name: Some("team-a".into()),
                labels: BTreeMap::from([("env".to_string(), "dev".to_string())]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let body = envelope("v1", "Namespace", ns.encode_to_vec());
        let info = find("", "v1", "namespaces").unwrap();
        let v: Value = serde_json::from_slice(&decode_to_json(info, &body).unwrap()).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "team-a", "labels": {"env": "dev"}}})
        );
        let cm = core::ConfigMap {
            metadata: Some(ObjectMeta {
                name: Some("cfg".into()),
                namespace: Some("default".into()),
                ..Default::default()
            }),
            data: BTreeMap::from([("k".to_string(), "v".to_string())]),
            binary_data: BTreeMap::from([("b".to_string(), vec![0u8, 1, 2])]),
            immutable: None,
        };
        let body = envelope("v1", "ConfigMap", cm.encode_to_vec());
        let info = find("", "v1", "configmaps").unwrap();
        let v: Value = serde_json::from_slice(&decode_to_json(info, &body).unwrap()).unwrap();
        assert_eq!(v["data"], json!({"k": "v"}));
        assert_eq!(v["binaryData"], json!({"b": "AAEC"}));
        assert_eq!(v["metadata"]["namespace"], "default");
    }

    #[test]
    fn review_bodies_decode_to_their_json_spec() {
        use k8s_pb::api::authorization::v1 as authz;
        let r = authz::SelfSubjectAccessReview {
            spec: Some(authz::SelfSubjectAccessReviewSpec {
                resource_attributes: Some(authz::ResourceAttributes {
                    verb: Some("create".into()),
                    resource: Some("pods".into()),
                    namespace: Some("default".into()),
                    ..Default::default()
                }),
                non_resource_attributes: None,
            }),
            ..Default::default()
        };
        let v = "authorization.k8s.io/v1";
        let body = envelope(v, "SelfSubjectAccessReview", r.encode_to_vec());
        let json: Value = serde_json::from_slice(
            &decode_review_to_json(v, "SelfSubjectAccessReview", &body).unwrap(),
        )
        .unwrap();
        assert_eq!(
            json["spec"],
            json!({"resourceAttributes": {"verb": "create", "resource": "pods", "namespace": "default"}})
        );
        assert_eq!(json["kind"], "SelfSubjectAccessReview");
        let wrong = envelope(v, "SelfSubjectRulesReview", vec![]);
        let err = decode_review_to_json(v, "SelfSubjectAccessReview", &wrong).unwrap_err();
        assert_eq!(err.code(), 400);
        let garbage = envelope(v, "SelfSubjectAccessReview", vec![0xff, 0xff]);
        let err = decode_review_to_json(v, "SelfSubjectAccessReview", &garbage).unwrap_err();
        assert_eq!(err.code(), 400);
    }

    #[test]
    fn malformed_bodies_are_400() {
        let info = find("", "v1", "namespaces").unwrap();
        for body in [
            &b""[..],
            &b"{\"kind\":\"Namespace\"}"[..],
            &b"k8s\0\xff\xff\xff\xff"[..],
            &b"k8s\0\x12\x05ab"[..],
        ] {
            assert_eq!(
                decode_to_json(info, body).unwrap_err().code(),
                400,
                "{body:?}"
            );
        }
        let wrong_kind = envelope("v1", "ConfigMap", vec![]);
        assert_eq!(decode_to_json(info, &wrong_kind).unwrap_err().code(), 400);
        let garbage_raw = envelope("v1", "Namespace", vec![0xff, 0xff, 0xff]);
        assert_eq!(decode_to_json(info, &garbage_raw).unwrap_err().code(), 400);
        // Every served kind decodes; an empty message is an object with nothing set.
        let pods = find("", "v1", "pods").unwrap();
        let pod = envelope("v1", "Pod", vec![]);
        let v: Value = serde_json::from_slice(&decode_to_json(pods, &pod).unwrap()).unwrap();
        assert_eq!(v, json!({"apiVersion": "v1", "kind": "Pod"}));
        assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
        assert!(!is_protobuf("application/json"));
    }
}
