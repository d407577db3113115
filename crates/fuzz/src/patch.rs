//! The three PATCH formats, on a base object the input carries.
//!
//! Input framing: `base \0 patch`. Without a NUL the whole input is the patch and the base is
//! a small Deployment (so that strategic merge patches meet lists with merge keys).

use crate::input::split_nul;
use api::patch::{apply_patch, PatchKindHint, PatchType};
use serde_json::Value;

/// The base object when the input has none.
const DEFAULT_BASE: &str = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default","labels":{"app":"web"},"finalizers":["a"]},"spec":{"replicas":2,"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":80,"protocol":"TCP"}],"env":[{"name":"A","value":"1"}]}],"volumes":[{"name":"v","emptyDir":{}}]}}}}"#;

/// The base object and the patch body of an input, or `None` when the base is not a JSON
/// object (the server only patches stored objects, which are).
fn parts(data: &[u8]) -> Option<(Value, &[u8])> {
    let (base, patch): (Value, &[u8]) = match split_nul(data) {
        (base, Some(patch)) => (serde_json::from_slice(base).ok()?, patch),
        (patch, None) => (serde_json::from_str(DEFAULT_BASE).ok()?, patch),
    };
    base.is_object().then_some((base, patch))
}

/// Serializes `v` and reads it back: the result of a patch is stored as JSON text.
fn assert_reads_back(v: &Value) {
    let text = serde_json::to_vec(v).unwrap_or_else(|e| panic!("{v:?} does not serialize: {e}"));
    if crate::json_yaml::holds_serde_json_raw_value_key(&text) {
        // serde_json's private key does not read back; the server refuses to store an
        // object holding it (`encode_for_storage`; found by this target, RELIABILITY.md).
        return;
    }
    let back: Value = serde_json::from_slice(&text)
        .unwrap_or_else(|e| panic!("{} does not read back: {e}", String::from_utf8_lossy(&text)));
    assert!(
        crate::input::json_same(&back, v),
        "the patched object changes through JSON: {v} became {back}"
    );
}

/// Applies an RFC 6902 JSON patch (`application/json-patch+json`) to the base with
/// [`apply_patch`]. A result must serialize to JSON that reads back equal.
pub fn json_patch(data: &[u8]) {
    let Some((base, patch)) = parts(data) else {
        return;
    };
    if let Ok(out) = apply_patch(PatchKindHint::UNKNOWN, &base, patch, PatchType::Json) {
        assert_reads_back(&out);
    }
}

/// Applies an RFC 7386 merge patch (`application/merge-patch+json`) to the base. The result
/// must read back equal through JSON, and applying the same patch to it must change nothing
/// (merge patches are idempotent).
pub fn merge_patch(data: &[u8]) {
    let Some((base, patch)) = parts(data) else {
        return;
    };
    let Ok(out) = apply_patch(PatchKindHint::UNKNOWN, &base, patch, PatchType::Merge) else {
        return;
    };
    assert_reads_back(&out);
    let again = apply_patch(PatchKindHint::UNKNOWN, &out, patch, PatchType::Merge)
        .unwrap_or_else(|e| panic!("the patch applied once but not twice: {e}"));
    assert_eq!(again, out, "applying a merge patch twice differs from once");
}

/// Applies a strategic merge patch (`application/strategic-merge-patch+json`, kubectl's
/// default) to the base, with the list strategies of the base's own `apiVersion` and `kind`
/// (a Deployment merges its containers by name, an unknown kind replaces lists). A result
/// must serialize to JSON that reads back equal.
pub fn strategic_merge_patch(data: &[u8]) {
    let Some((base, patch)) = parts(data) else {
        return;
    };
    let api_version = base.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = base.get("kind").and_then(Value::as_str).unwrap_or("");
    let hint = PatchKindHint::new(group, kind);
    if let Ok(out) = apply_patch(hint, &base, patch, PatchType::StrategicMerge) {
        assert_reads_back(&out);
    }
}
