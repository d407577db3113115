//! Validation of `events.k8s.io/v1` Events, as kube-apiserver 1.32 applies it to writes
//! through that API (core `v1` events keep their lenient, legacy rules and are not checked
//! here).
//!
//! Create: `eventTime` is required, `type` is `Normal` or `Warning`, the deprecated fields
//! stay unset, `reportingController` (a qualified name), `reportingInstance`, `action` and
//! `reason` are required (each at most 128 characters; `note` at most 1 KiB), a `series` has
//! a `count` of at least 2 and a `lastObservedTime`, and an event about a cluster-scoped
//! object lives in `default` or `kube-system`. Update: the same rules on the new object, and
//! only `series` (and metadata) may change.
//!
//! Field paths in the messages are Kubernetes' own, which name some fields by their core
//! names (`involvedObject.namespace`, `message`).

use api::status::FieldError;
use api::{Object, Status};
use serde_json::Value;

/// The longest `reportingInstance`, `action` and `reason`.
const SHORT_LIMIT: usize = 128;
/// The longest `note`.
const NOTE_LIMIT: usize = 1024;

fn text<'a>(obj: &'a Object, field: &str) -> &'a str {
    obj.get(field).and_then(Value::as_str).unwrap_or("")
}

fn set(obj: &Object, field: &str) -> bool {
    obj.get(field).is_some_and(|v| {
        !(v.is_null()
            || v.as_str() == Some("")
            || v.as_i64() == Some(0)
            || v.as_object()
                .is_some_and(|m| m.values().all(|x| x.is_null() || x == "")))
    })
}

/// The rules every write of an `events.k8s.io/v1` Event must pass.
fn common(obj: &Object, errs: &mut Vec<FieldError>) {
    let ns = obj.namespace();
    let regarding_ns = obj
        .get("regarding")
        .and_then(|r| r.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let ns_mismatch = || {
        FieldError::invalid(
            "involvedObject.namespace",
            &Value::String(regarding_ns.into()),
            "does not match event.namespace",
        )
    };
    if !set(obj, "eventTime") {
        let ok = if regarding_ns.is_empty() {
            ns.is_empty() || ns == "default"
        } else {
            ns == regarding_ns
        };
        if !ok {
            errs.push(ns_mismatch());
        }
        return;
    }
    if regarding_ns.is_empty() && ns != "default" && ns != "kube-system" {
        errs.push(ns_mismatch());
    }
    let controller = text(obj, "reportingController");
    if controller.is_empty() {
        errs.push(FieldError::required("reportingController", ""));
    } else if let Err(e) = api::labels::validate_label_key(controller) {
        errs.push(FieldError::invalid(
            "reportingController",
            &Value::String(controller.into()),
            &e.to_string(),
        ));
    }
    for field in ["reportingInstance", "action", "reason"] {
        let v = text(obj, field);
        if v.is_empty() {
            errs.push(FieldError::required(field, ""));
        } else if v.chars().count() > SHORT_LIMIT {
            errs.push(FieldError::invalid(
                field,
                &Value::String(String::new()),
                &format!("can have at most {SHORT_LIMIT} characters"),
            ));
        }
    }
    if text(obj, "note").chars().count() > NOTE_LIMIT {
        errs.push(FieldError::invalid(
            "message",
            &Value::String(String::new()),
            &format!("can have at most {NOTE_LIMIT} characters"),
        ));
    }
}

fn series(obj: &Object, errs: &mut Vec<FieldError>) {
    let Some(s) = obj.get("series").filter(|s| !s.is_null()) else {
        return;
    };
    if s.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
        errs.push(FieldError::invalid(
            "series.count",
            &Value::String(String::new()),
            "should be at least 2",
        ));
    }
    if s.get("lastObservedTime")
        .is_none_or(|t| t.is_null() || t == "")
    {
        errs.push(FieldError::required("series.lastObservedTime", ""));
    }
}

fn refuse(obj: &Object, errs: Vec<FieldError>) -> Result<(), Status> {
    if errs.is_empty() {
        return Ok(());
    }
    Err(Status::invalid_fields(
        "Event",
        "events.k8s.io",
        obj.name(),
        &errs,
    ))
}

/// Checks an `events.k8s.io/v1` Event about to be created (see the module docs).
///
/// # Errors
/// 422 Invalid naming every broken rule.
pub fn validate_create(obj: &Object) -> Result<(), Status> {
    let mut errs = Vec::new();
    common(obj, &mut errs);
    series(obj, &mut errs);
    if !set(obj, "eventTime") {
        errs.push(FieldError::required("eventTime", ""));
    }
    let ty = text(obj, "type");
    if ty != "Normal" && ty != "Warning" {
        errs.push(FieldError::invalid(
            "type",
            &Value::String(String::new()),
            &format!("has invalid value: {ty}"),
        ));
    }
    for (field, name) in [
        ("deprecatedFirstTimestamp", "deprecatedFirstTimestamp"),
        ("deprecatedLastTimestamp", "deprecatedLastTimestamp"),
        ("deprecatedCount", "deprecatedCount"),
        ("deprecatedSource", "deprecatedSource"),
    ] {
        if set(obj, field) {
            errs.push(FieldError::invalid(
                name,
                &Value::String(String::new()),
                "needs to be unset",
            ));
        }
    }
    refuse(obj, errs)
}

/// Checks an update of an `events.k8s.io/v1` Event from `old` to `new`.
///
/// # Errors
/// 422 Invalid naming every broken rule, among them each changed field other than `series`.
pub fn validate_update(old: &Object, new: &Object) -> Result<(), Status> {
    let mut errs = Vec::new();
    common(new, &mut errs);
    let unset = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
    if unset(old.get("series")) != unset(new.get("series")) {
        series(new, &mut errs);
    }
    for (field, path) in [
        ("regarding", "involvedObject"),
        ("reason", "reason"),
        ("note", "message"),
        ("deprecatedSource", "source"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
        ("type", "type"),
        ("eventTime", "eventTime"),
        ("action", "action"),
        ("related", "related"),
        ("reportingController", "reportingController"),
        ("reportingInstance", "reportingInstance"),
    ] {
        let (a, b) = (unset(old.get(field)), unset(new.get(field)));
        if a != b {
            errs.push(FieldError::invalid(
                path,
                &b.unwrap_or(Value::Null),
                "field is immutable",
            ));
        }
    }
    refuse(new, errs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(extra: Value) -> Object {
        let mut v = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default"},
            "eventTime": "2024-05-01T10:00:00.000000Z", "type": "Normal",
            "reportingController": "example.com/scheduler", "reportingInstance": "s-1",
            "action": "Binding", "reason": "Scheduled", "note": "assigned",
            "regarding": {"kind": "Pod", "namespace": "default", "name": "p"},
        });
        if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
            m.extend(e);
        }
        Object::from_value(v).unwrap()
    }

    fn fields(r: Result<(), Status>) -> Vec<String> {
        r.err()
            .map(|s| s.causes.iter().map(|c| c.field.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn create_rules() {
        validate_create(&event(json!({}))).unwrap();
        assert_eq!(
            fields(validate_create(&event(
                json!({"eventTime": null, "type": "Odd"})
            ))),
            ["eventTime", "type"]
        );
        assert_eq!(
            fields(validate_create(&event(json!({
                "reportingController": "", "action": "", "deprecatedCount": 3,
                "series": {"count": 1}
            })))),
            [
                "reportingController",
                "action",
                "series.count",
                "series.lastObservedTime",
                "deprecatedCount"
            ]
        );
        let s = validate_create(&event(json!({"reason": "x".repeat(129)}))).unwrap_err();
        assert_eq!(s.code(), 422);
        assert!(s
            .message
            .starts_with("Event.events.k8s.io \"e\" is invalid: reason:"));
        // A cluster-scoped subject belongs in default or kube-system.
        let mut node_event = event(json!({"regarding": {"kind": "Node", "name": "n1"}}));
        validate_create(&node_event).unwrap();
        node_event.set_meta("namespace", "apps");
        assert_eq!(
            fields(validate_create(&node_event)),
            ["involvedObject.namespace"]
        );
    }

    #[test]
    fn updates_may_change_the_series_only() {
        let old = event(json!({}));
        let counted = event(
            json!({"series": {"count": 2, "lastObservedTime": "2024-05-01T10:01:00.000000Z"}}),
        );
        validate_update(&old, &counted).unwrap();
        assert_eq!(
            fields(validate_update(
                &old,
                &event(json!({"note": "changed", "type": "Warning"}))
            )),
            ["message", "type"]
        );
    }
}
