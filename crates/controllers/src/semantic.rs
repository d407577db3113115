//! Semantic equality of pod templates: when two templates mean the same to Kubernetes
//! although their JSON differs, as `equality.Semantic.DeepEqual` decides on Go structs.
//!
//! Kubernetes compares typed Go values, in which an absent field and its zero value are
//! the same thing unless the field is a pointer. Their JSON does not show that: a template
//! written in protobuf (`kubectl create deployment`, Go clients) carries every non-pointer
//! field, `stdin: false` and `generation: 0` included, while the same template read back
//! through Go and written as JSON (`kubectl rollout undo`) leaves them out. So before two
//! templates are compared (and hashed), their JSON is brought to one form: nulls, empty
//! lists and empty maps go, and so do `false`, `0` and `""` in struct fields — except in
//! the fields that are pointers in the Go types, where an explicit zero means something
//! (`runAsUser: 0` is root, `automountServiceAccountToken: false` turns a default off),
//! and except in maps of user data (labels, annotations, node selectors, resource
//! quantities), where `""` is a value.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;

/// Scalar fields of a pod template that are pointers in Kubernetes' Go types (an explicit
/// zero is not the same as absent).
const POINTER_SCALARS: &[&str] = &[
    "activeDeadlineSeconds",
    "allowPrivilegeEscalation",
    "automountServiceAccountToken",
    "defaultMode",
    "enableServiceLinks",
    "expirationSeconds",
    "fsGroup",
    "hostProcess",
    "hostUsers",
    "lun",
    "minDomains",
    "mode",
    "optional",
    "priority",
    "privileged",
    "readOnlyRootFilesystem",
    "runAsGroup",
    "runAsNonRoot",
    "runAsUser",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "terminationGracePeriodSeconds",
    "tolerationSeconds",
];

/// `readOnly` is a pointer only in these volume sources (a plain bool elsewhere, e.g. in
/// volume mounts).
const POINTER_READ_ONLY_IN: &[&str] = &["csi", "azureDisk"];

/// Maps whose entries are user data, kept as they are.
const USER_MAPS: &[&str] = &[
    "labels",
    "annotations",
    "nodeSelector",
    "limits",
    "requests",
    "overhead",
    "matchLabels",
    "volumeAttributes",
    "options",
];

fn is_pointer(key: &str, parent: &str) -> bool {
    POINTER_SCALARS.contains(&key) || (key == "readOnly" && POINTER_READ_ONLY_IN.contains(&parent))
}

fn is_zero_scalar(v: &Value) -> bool {
    match v {
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// Brings `v` (the value of field `key`) to the canonical form of the module docs.
fn normalize(v: &mut Value, key: &str) {
    match v {
        Value::Object(m) => {
            if USER_MAPS.contains(&key) {
                return;
            }
            for (k, x) in m.iter_mut() {
                normalize(x, k);
            }
            m.retain(|k, x| !(is_empty(x) || (is_zero_scalar(x) && !is_pointer(k, key))));
        }
        // List elements belong to the list's field.
        Value::Array(a) => a.iter_mut().for_each(|x| normalize(x, key)),
        _ => {}
    }
}

/// The canonical JSON of a template (see the module docs): equal for templates Kubernetes
/// deems semantically equal.
pub fn template_value(template: &PodTemplateSpec) -> Value {
    let mut v = serde_json::to_value(template).unwrap_or_default();
    normalize(&mut v, "");
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: serde_json::Value) -> PodTemplateSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn zeros_of_plain_fields_are_absent() {
        // As a protobuf create stores it, and as Go writes it back as JSON.
        let from_protobuf = t(serde_json::json!({
            "metadata": {"generation": 0, "labels": {"app": "web"}, "creationTimestamp": null},
            "spec": {
                "hostNetwork": false, "hostPID": false, "hostIPC": false,
                "containers": [{"name": "c", "image": "i", "stdin": false, "tty": false,
                    "workingDir": "", "ports": [{"containerPort": 80, "hostPort": 0}],
                    "volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": false}]}],
            }
        }));
        let from_json = t(serde_json::json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}],
                "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]}
        }));
        assert_eq!(template_value(&from_protobuf), template_value(&from_json));
    }

    #[test]
    fn zeros_that_mean_something_are_kept() {
        let base = serde_json::json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        });
        for (path, value) in [
            ("/spec/securityContext", serde_json::json!({"runAsUser": 0})),
            (
                "/spec/automountServiceAccountToken",
                serde_json::json!(false),
            ),
            ("/spec/terminationGracePeriodSeconds", serde_json::json!(0)),
            (
                "/spec/volumes",
                serde_json::json!([{"name": "v", "csi": {"driver": "d", "readOnly": false}}]),
            ),
            (
                "/spec/volumes",
                serde_json::json!([{"name": "v", "secret": {"secretName": "s", "defaultMode": 0}}]),
            ),
            ("/spec/nodeSelector", serde_json::json!({"disk": ""})),
            ("/metadata/annotations", serde_json::json!({"note": ""})),
        ] {
            let mut with = base.clone();
            let (parent, field) = path.rsplit_once('/').unwrap();
            with.pointer_mut(parent)
                .unwrap()
                .as_object_mut()
                .unwrap()
                .insert(field.to_string(), value);
            assert_ne!(
                template_value(&t(with)),
                template_value(&t(base.clone())),
                "{path} must count"
            );
        }
        // Label values are data too.
        let empty_label = t(serde_json::json!({"metadata": {"labels": {"app": ""}}}));
        assert_ne!(
            template_value(&empty_label),
            template_value(&t(serde_json::json!({})))
        );
    }
}
