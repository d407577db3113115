//! Validation of `apps/v1` ControllerRevisions, as kube-apiserver 1.32 applies it: `data` is
//! required and, once stored, never changes; `revision` may change (controllers renumber a
//! revision they roll back to) but is never negative.

use api::status::FieldError;
use api::{Object, Status};
use serde_json::Value;

/// `data` as stored: absent and `null` both mean unset.
fn data(obj: &Object) -> Option<&Value> {
    obj.get("data").filter(|d| !d.is_null())
}

fn common(obj: &Object, errs: &mut Vec<FieldError>) {
    if data(obj).is_none() {
        errs.push(FieldError::required("data", "data is mandatory"));
    }
    let revision = obj.get("revision").and_then(Value::as_i64).unwrap_or(0);
    if revision < 0 {
        errs.push(FieldError::invalid(
            "revision",
            &Value::from(revision),
            "must be greater than or equal to 0",
        ));
    }
}

fn refuse(obj: &Object, errs: Vec<FieldError>) -> Result<(), Status> {
    if errs.is_empty() {
        return Ok(());
    }
    Err(Status::invalid_fields(
        "ControllerRevision",
        "apps",
        obj.name(),
        &errs,
    ))
}

/// Checks a ControllerRevision about to be created.
///
/// # Errors
/// 422 Invalid when `data` is unset or `revision` is negative.
pub fn validate_create(obj: &Object) -> Result<(), Status> {
    let mut errs = Vec::new();
    common(obj, &mut errs);
    refuse(obj, errs)
}

/// Checks an update of a ControllerRevision from `old` to `new`.
///
/// # Errors
/// 422 Invalid for the create rules on `new`, and when `data` changed.
pub fn validate_update(old: &Object, new: &Object) -> Result<(), Status> {
    let mut errs = Vec::new();
    common(new, &mut errs);
    if data(old) != data(new) {
        errs.push(FieldError::invalid(
            "data",
            data(new).unwrap_or(&Value::Null),
            "field is immutable",
        ));
    }
    refuse(new, errs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn revision(extra: Value) -> Object {
        let mut v = json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": "r", "namespace": "default"}});
        if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
            m.extend(e);
        }
        Object::from_value(v).unwrap()
    }

    fn message(r: Result<(), Status>) -> String {
        r.unwrap_err().message
    }

    #[test]
    fn data_is_required_and_revision_non_negative() {
        assert!(validate_create(&revision(json!({"data": {"a": 1}, "revision": 0}))).is_ok());
        let m = message(validate_create(&revision(json!({"revision": 1}))));
        assert!(m.contains("data: Required value: data is mandatory"), "{m}");
        let m = message(validate_create(&revision(
            json!({"data": {}, "revision": -1}),
        )));
        assert!(
            m.contains("revision: Invalid value: -1: must be greater than or equal to 0"),
            "{m}"
        );
        assert!(
            m.starts_with("ControllerRevision.apps \"r\" is invalid"),
            "{m}"
        );
    }

    #[test]
    fn data_is_immutable_and_revision_is_not() {
        let old = revision(json!({"data": {"spec": 1}, "revision": 1}));
        let renumbered = revision(json!({"data": {"spec": 1}, "revision": 3}));
        assert!(validate_update(&old, &renumbered).is_ok());
        let changed = revision(json!({"data": {"spec": 2}, "revision": 1}));
        let m = message(validate_update(&old, &changed));
        assert!(m.contains("data: Invalid value"), "{m}");
        assert!(m.contains("field is immutable"), "{m}");
    }
}
