//! What a StatefulSet keeps in its ControllerRevisions: the pod template, as the strategic
//! merge patch `{"spec": {"template": {…, "$patch": "replace"}}}` that puts it back into
//! the set (the patch `kubectl rollout undo` sends). The revisions themselves are kept by
//! [`crate::controller_history`].

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;

/// The data of the revision that records `set`'s template now.
pub fn revision_data(set: &StatefulSet) -> Value {
    let mut template = serde_json::to_value(&set.spec.template).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut template {
        map.insert("$patch".to_string(), Value::String("replace".to_string()));
    } else {
        template = serde_json::json!({"$patch": "replace"});
    }
    serde_json::json!({"spec": {"template": template}})
}

/// The template `revision` records: its data's `spec.template`, which replaces the set's.
///
/// # Errors
/// The revision records no template a pod could be made from.
pub fn template_of(revision: &ControllerRevision) -> Result<PodTemplateSpec, String> {
    let name = revision.metadata.name.as_deref().unwrap_or("");
    let mut template = revision
        .data
        .0
        .get("spec")
        .and_then(|s| s.get("template"))
        .cloned()
        .ok_or_else(|| format!("revision {name} records no template"))?;
    if let Value::Object(map) = &mut template {
        map.remove("$patch");
    }
    serde_json::from_value(template).map_err(|e| format!("revision {name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::runtime::RawExtension;

    fn set(image: &str) -> StatefulSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": image}]}
                }
            }
        }))
        .unwrap()
    }

    fn revision(data: Value) -> ControllerRevision {
        ControllerRevision {
            data: RawExtension(data),
            ..Default::default()
        }
    }

    #[test]
    fn the_data_replaces_the_template_and_reads_back() {
        let s = set("nginx:1");
        let data = revision_data(&s);
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        assert_eq!(
            data["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:1"
        );
        assert_eq!(data.as_object().unwrap().len(), 1);
        assert_eq!(data["spec"].as_object().unwrap().len(), 1);
        let r = revision(data);
        assert_eq!(template_of(&r).unwrap(), s.spec.template);
        assert_eq!(
            revision_data(&set("nginx:1")),
            r.data.0,
            "the same template, the same data"
        );
        assert_ne!(revision_data(&set("nginx:2")), r.data.0);
        assert!(template_of(&ControllerRevision::default()).is_err());
        assert!(template_of(&revision(serde_json::json!({"spec": {}}))).is_err());
    }
}
