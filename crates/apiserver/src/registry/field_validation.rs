//! Server-side field validation (`?fieldValidation=Strict|Warn|Ignore`): fields a kind does
//! not have are refused (Strict, 400 with every unknown field named), reported in `Warning`
//! headers (Warn), or dropped silently (Ignore).
//!
//! How: the object is decoded into its typed Kubernetes definition (k8s-openapi, which keeps
//! every field the kind has and drops the rest) and encoded again; a key of the request that
//! is missing from the round trip is a field the kind does not have. Explicit `null`s are not
//! reported (they mean "unset"). Duplicate fields are not detected (the JSON parser keeps the
//! last one). Without the parameter nothing is checked: kube-apiserver would warn, but the
//! check costs a typed decode per write, and clients that care (kubectl) always ask.

use super::ResourceInfo;
use api::Status;
use serde_json::Value;

/// What the client asked for unknown fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Do not check (also: the parameter was absent).
    #[default]
    Ignore,
    /// Check, and report unknown fields as warnings.
    Warn,
    /// Check, and refuse the request if there are any.
    Strict,
}

impl FieldValidation {
    /// Parses the query parameter's value; 400 for anything else than the three names.
    pub fn parse(v: &str) -> Result<FieldValidation, Status> {
        match v {
            "" | "Ignore" => Ok(FieldValidation::Ignore),
            "Warn" => Ok(FieldValidation::Warn),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(Status::bad_request(format!(
                "fieldValidation: Invalid value: {other:?}: must be one of Ignore, Warn or Strict"
            ))),
        }
    }
}

/// Checks `obj` of kind `info` as `mode` says: 400 BadRequest under Strict; under Warn the
/// unknown fields are removed (as kube-apiserver drops what its types do not have) and the
/// warnings to send are returned.
pub fn check(
    info: &ResourceInfo,
    obj: &mut serde_json::Map<String, Value>,
    mode: FieldValidation,
) -> Result<Vec<String>, Status> {
    if mode == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    let mut given = Value::Object(std::mem::take(obj));
    // One typed round trip serves both finding the unknown fields and dropping them.
    let mut unknown = Vec::new();
    if let Some(kept) = typed_round_trip(info, &given) {
        missing(&given, &kept, "", &mut unknown);
        if mode == FieldValidation::Warn && !unknown.is_empty() {
            prune(&mut given, &kept);
        }
    }
    if let Value::Object(m) = given {
        *obj = m;
    }
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let each: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field \"{p}\""))
        .collect();
    match mode {
        FieldValidation::Strict => Err(Status::bad_request(format!(
            "strict decoding error: {}",
            each.join(", ")
        ))),
        _ => Ok(each),
    }
}

/// The paths (`spec.containers[0].imagePullPolicyy`) of fields in `obj` that its kind does
/// not have. Empty if the object does not decode as its kind at all (type errors are other
/// validation's business) or the kind has no typed definition here.
pub fn unknown_fields(info: &ResourceInfo, obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(t) = typed_round_trip(info, obj) {
        missing(obj, &t, "", &mut out);
    }
    out
}

/// `obj` decoded as its kind's type and encoded again; `None` if it does not decode.
fn typed_round_trip(info: &ResourceInfo, obj: &Value) -> Option<Value> {
    use k8s_openapi::api::{apps::v1 as apps, coordination::v1 as coord, core::v1 as core};
    match (info.group, info.kind) {
        ("", "Namespace") => round_trip::<core::Namespace>(obj),
        ("", "Pod") => round_trip::<core::Pod>(obj),
        ("", "Node") => round_trip::<core::Node>(obj),
        ("", "ConfigMap") => round_trip::<core::ConfigMap>(obj),
        ("", "Secret") => round_trip::<core::Secret>(obj),
        ("", "Service") => round_trip::<core::Service>(obj),
        ("", "Event") => round_trip::<core::Event>(obj),
        ("apps", "ReplicaSet") => round_trip::<apps::ReplicaSet>(obj),
        ("apps", "Deployment") => round_trip::<apps::Deployment>(obj),
        ("coordination.k8s.io", "Lease") => round_trip::<coord::Lease>(obj),
        _ => None,
    }
}

/// Removes from `given` every non-null key that `kept` lacks, recursively.
fn prune(given: &mut Value, kept: &Value) {
    match (given, kept) {
        (Value::Object(g), Value::Object(k)) => {
            g.retain(|key, v| v.is_null() || k.contains_key(key));
            for (key, v) in g.iter_mut() {
                if let Some(kv) = k.get(key) {
                    prune(v, kv);
                }
            }
        }
        (Value::Array(g), Value::Array(k)) if g.len() == k.len() => {
            for (gv, kv) in g.iter_mut().zip(k) {
                prune(gv, kv);
            }
        }
        _ => {}
    }
}

fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(obj: &Value) -> Option<Value> {
    let typed: T = serde_json::from_value(obj.clone()).ok()?;
    serde_json::to_value(&typed).ok()
}

fn missing(given: &Value, kept: &Value, path: &str, out: &mut Vec<String>) {
    match (given, kept) {
        (Value::Object(g), Value::Object(k)) => {
            for (key, v) in g {
                if v.is_null() {
                    continue;
                }
                let p = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match k.get(key) {
                    Some(kv) => missing(v, kv, &p, out),
                    None => out.push(p),
                }
            }
        }
        (Value::Array(g), Value::Array(k)) if g.len() == k.len() => {
            for (i, (gv, kv)) in g.iter().zip(k).enumerate() {
                missing(gv, kv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::find;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_named_with_their_paths() {
        let pods = find("", "v1", "pods").unwrap();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"any-key": "ok"}, "colour": "red", "uid": null},
            "spec": {"containers": [{"name": "c", "image": "i", "imagee": "typo"}],
                     "nodeName": "n1", "bogus": {"x": 1}}});
        let mut got = unknown_fields(pods, &pod);
        got.sort();
        assert_eq!(
            got,
            vec![
                "metadata.colour".to_string(),
                "spec.bogus".to_string(),
                "spec.containers[0].imagee".to_string(),
            ]
        );
        let good = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"cpu": "100m"}}, "ports": [{"containerPort": 80}]}]},
            "status": {"phase": "Pending"}});
        assert!(unknown_fields(pods, &good).is_empty());
        let cms = find("", "v1", "configmaps").unwrap();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"whatever": "goes"}, "dta": {}});
        assert_eq!(unknown_fields(cms, &cm), vec!["dta".to_string()]);
    }

    #[test]
    fn modes_refuse_warn_or_ignore() {
        let cms = find("", "v1", "configmaps").unwrap();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "extra": 1});
        let mut cm = cm.as_object().unwrap().clone();
        let err = check(cms, &mut cm, FieldValidation::Strict).unwrap_err();
        assert_eq!(err.code(), 400);
        assert!(
            err.message.contains("unknown field \"extra\""),
            "{}",
            err.message
        );
        assert!(cm.contains_key("extra"), "Strict leaves the object alone");
        assert!(check(cms, &mut cm, FieldValidation::Ignore)
            .unwrap()
            .is_empty());
        assert!(cm.contains_key("extra"));
        assert_eq!(
            check(cms, &mut cm, FieldValidation::Warn).unwrap(),
            vec!["unknown field \"extra\"".to_string()]
        );
        assert!(!cm.contains_key("extra"), "Warn drops the unknown field");
        assert_eq!(cm["metadata"]["name"], "c");
        assert_eq!(
            FieldValidation::parse("Strict").unwrap(),
            FieldValidation::Strict
        );
        assert_eq!(FieldValidation::parse("strict").unwrap_err().code(), 400);
    }
}
