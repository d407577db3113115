//! Pod conditions as Kubernetes' `UpdatePodCondition` writes them (the binding's
//! `PodScheduled`, the eviction's `DisruptionTarget`).

use api::Object;
use serde_json::{json, Map, Value};

/// Sets pod condition `type_` as Kubernetes' `UpdatePodCondition` does: the new condition
/// replaces the old one of that type (or is appended), with `now` as its transition time
/// unless the status stays the same; no probe time.
pub fn set(pod: &mut Object, type_: &str, status: &str, reason: &str, message: &str, now: &str) {
    let mut condition = Map::new();
    condition.insert("type".into(), json!(type_));
    condition.insert("status".into(), json!(status));
    condition.insert("lastProbeTime".into(), Value::Null);
    condition.insert("lastTransitionTime".into(), json!(now));
    if !reason.is_empty() {
        condition.insert("reason".into(), json!(reason));
    }
    if !message.is_empty() {
        condition.insert("message".into(), json!(message));
    }
    let pod_status = pod.0.entry("status").or_insert_with(|| json!({}));
    if !pod_status.is_object() {
        *pod_status = json!({});
    }
    let Some(pod_status) = pod_status.as_object_mut() else {
        return;
    };
    let list = pod_status.entry("conditions").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(list) = list.as_array_mut() else {
        return;
    };
    match list
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
    {
        Some(old) => {
            if old.get("status").and_then(Value::as_str) == Some(status) {
                if let Some(t) = old.get("lastTransitionTime") {
                    condition.insert("lastTransitionTime".into(), t.clone());
                }
            }
            *old = Value::Object(condition);
        }
        None => list.push(Value::Object(condition)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn a_condition_that_keeps_its_status_keeps_its_transition_time() {
        let mut p = pod(json!({"metadata": {"name": "p"}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "old"}]}}));
        set(&mut p, "Ready", "True", "Fine", "", "new");
        assert_eq!(p.0["status"]["conditions"][0]["lastTransitionTime"], "old");
        assert_eq!(p.0["status"]["conditions"][0]["reason"], "Fine");
        set(&mut p, "Ready", "False", "", "", "newer");
        assert_eq!(
            p.0["status"]["conditions"][0]["lastTransitionTime"],
            "newer"
        );
        assert!(p.0["status"]["conditions"][0].get("reason").is_none());
    }
}
