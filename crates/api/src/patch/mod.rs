//! The three Kubernetes PATCH formats, as pure functions on [`serde_json::Value`].
//!
//! A PATCH request names its format in `Content-Type`; [`PatchType::from_content_type`] maps
//! that header to one of:
//!
//! - [`PatchType::Merge`]: RFC 7386 JSON merge patch ([`merge_patch`]);
//! - [`PatchType::Json`]: RFC 6902 JSON patch, a list of operations ([`json_patch`]);
//! - [`PatchType::StrategicMerge`]: Kubernetes' strategic merge patch, kubectl's default, which
//!   merges some lists element by element using per-field merge keys
//!   ([`strategic_merge_patch`]).
//!
//! [`apply_patch`] decodes the body and applies it to the stored object, returning the new
//! object or a [`PatchError`]. The error tells the server which HTTP status to answer with
//! ([`PatchError::status_code`], [`PatchError::to_status`]), following kube-apiserver: a body
//! that is not a well-formed patch document is a 400 `BadRequest`, a well-formed patch that
//! cannot be applied to this object is a 422 `Invalid`.
//!
//! Nothing here looks at `metadata.resourceVersion` or validates the result; the handler does
//! that after patching, exactly as for an update.

pub mod json_patch;
pub mod merge_patch;
pub mod strategic_merge_patch;

use serde_json::Value;

use crate::status::{Reason, Status};

/// Which of the patch formats a request body is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// `application/merge-patch+json`: RFC 7386 JSON merge patch.
    Merge,
    /// `application/json-patch+json`: RFC 6902 JSON patch.
    Json,
    /// `application/strategic-merge-patch+json`: Kubernetes strategic merge patch.
    StrategicMerge,
}

impl PatchType {
    /// Every format, in the order a `415` lists their media types.
    pub const ALL: [PatchType; 3] = [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge];

    /// Maps a `Content-Type` header value to a patch format.
    ///
    /// Parameters (`; charset=utf-8`), surrounding whitespace and letter case are ignored.
    /// Returns `None` for any other media type, including server-side apply's
    /// `application/apply-patch+yaml`, which this module does not implement; the server
    /// answers those with 415 `UnsupportedMediaType`.
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        let media = ct.split(';').next().unwrap_or("").trim();
        PatchType::ALL
            .into_iter()
            .find(|t| media.eq_ignore_ascii_case(t.content_type()))
    }

    /// The canonical `Content-Type` of this format (what clients send).
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Json => "application/json-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
        }
    }
}

/// The API group and kind of the object being patched, e.g. `("", "Pod")` or
/// `("apps", "Deployment")`.
///
/// Only strategic merge patch uses it, to look up which lists merge by which key (see
/// [`strategic_merge_patch`]). A kind that the strategy table does not know, such as a custom
/// resource, or [`PatchKindHint::UNKNOWN`], makes every list replace as a whole while maps
/// still merge. The core group may be spelled `""` or `"core"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PatchKindHint<'a> {
    /// The API group, `""` for the core group.
    pub group: &'a str,
    /// The kind, e.g. `Deployment`.
    pub kind: &'a str,
}

impl<'a> PatchKindHint<'a> {
    /// A hint that matches no known kind: every list is replaced as a whole.
    pub const UNKNOWN: PatchKindHint<'static> = PatchKindHint {
        group: "",
        kind: "",
    };

    /// A hint for the given group and kind.
    pub const fn new(group: &'a str, kind: &'a str) -> Self {
        PatchKindHint { group, kind }
    }
}

impl<'a> From<(&'a str, &'a str)> for PatchKindHint<'a> {
    /// `(group, kind)`.
    fn from((group, kind): (&'a str, &'a str)) -> Self {
        PatchKindHint { group, kind }
    }
}

/// The most JSON-patch operations one request may carry, as in kube-apiserver.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Why a patch could not be applied.
///
/// Every message says what is wrong in terms of the patch the client sent. Use
/// [`PatchError::status_code`] or [`PatchError::to_status`] to answer the request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PatchError {
    /// The body is not valid JSON (400).
    #[error("invalid JSON in patch body: {0}")]
    InvalidJson(String),
    /// The body is JSON but not a patch document of the declared format, e.g. a JSON patch
    /// that is not an array of objects, or a strategic merge patch with a malformed
    /// directive (400).
    #[error("invalid patch document: {0}")]
    InvalidDocument(String),
    /// A JSON-patch operation is malformed or names a path that cannot be used, e.g. a
    /// missing `path`, an unknown `op`, an array index out of bounds (422).
    #[error("json patch operation {index} ({op}): {message}")]
    InvalidOperation {
        /// Position of the operation in the patch array, from 0.
        index: usize,
        /// The operation name as sent (may be empty when it is missing).
        op: String,
        /// What is wrong.
        message: String,
    },
    /// A JSON-patch operation refers to a location that does not exist (422).
    #[error("json patch operation {index} ({op}): path {path:?} does not exist")]
    PathNotFound {
        /// Position of the operation in the patch array, from 0.
        index: usize,
        /// The operation name.
        op: String,
        /// The JSON pointer that was not found.
        path: String,
    },
    /// A JSON-patch `test` operation found a different value (422).
    #[error("json patch operation {index} (test): value at {path:?} does not match")]
    TestFailed {
        /// Position of the operation in the patch array, from 0.
        index: usize,
        /// The JSON pointer that was tested.
        path: String,
    },
    /// A well-formed strategic merge patch that cannot be applied to this object, e.g. a
    /// list of lists (422).
    #[error("strategic merge patch cannot be applied: {0}")]
    Unprocessable(String),
    /// The patch exceeds a size limit: too many operations, or `copy` operations that would
    /// grow the object past the limit (413).
    #[error("patch too large: {0}")]
    TooLarge(String),
}

impl PatchError {
    /// True if the patch body itself is malformed (invalid JSON, or not a document of the
    /// declared format): the server answers 400 `BadRequest`. False for patches that are
    /// well-formed but cannot be applied (422) or are too large (413).
    pub fn is_invalid_document(&self) -> bool {
        matches!(
            self,
            PatchError::InvalidJson(_) | PatchError::InvalidDocument(_)
        )
    }

    /// The HTTP status code kube-apiserver uses for this failure: 400, 413 or 422.
    pub fn status_code(&self) -> u16 {
        self.reason().code()
    }

    /// The `Status` reason for this failure: `BadRequest`, `RequestEntityTooLarge` or
    /// `Invalid`.
    pub fn reason(&self) -> Reason {
        match self {
            PatchError::InvalidJson(_) | PatchError::InvalidDocument(_) => Reason::BadRequest,
            PatchError::TooLarge(_) => Reason::RequestEntityTooLarge,
            PatchError::InvalidOperation { .. }
            | PatchError::PathNotFound { .. }
            | PatchError::TestFailed { .. }
            | PatchError::Unprocessable(_) => Reason::Invalid,
        }
    }

    /// The `Status` to answer the request with: [`PatchError::reason`] and this error's
    /// message.
    pub fn to_status(&self) -> Status {
        Status::new(self.reason(), self.to_string())
    }
}

/// Decodes `patch_body` as JSON and applies it to `original` in the given format.
///
/// `original` is not modified; the patched object is returned. `kind` is used only by
/// [`PatchType::StrategicMerge`]. Errors: [`PatchError::InvalidJson`] if the body is not
/// JSON; otherwise whatever the format's `apply` reports (see [`merge_patch::apply`],
/// [`json_patch::apply`], [`strategic_merge_patch::apply`]).
///
/// ```
/// use api::patch::{apply_patch, PatchKindHint, PatchType};
/// use serde_json::json;
///
/// let pod = json!({"metadata": {"name": "x", "labels": {"a": "1"}}});
/// let out = apply_patch(
///     PatchKindHint::new("", "Pod"),
///     &pod,
///     br#"{"metadata":{"labels":{"a":null,"b":"2"}}}"#,
///     PatchType::StrategicMerge,
/// )
/// .unwrap();
/// assert_eq!(out, json!({"metadata": {"name": "x", "labels": {"b": "2"}}}));
/// ```
pub fn apply_patch(
    kind: PatchKindHint<'_>,
    original: &Value,
    patch_body: &[u8],
    patch_type: PatchType,
) -> Result<Value, PatchError> {
    apply_patch_to(kind, original.clone(), patch_body, patch_type)
}

/// [`apply_patch`] on an `original` the caller gives up: merge and strategic merge patches
/// change it in place instead of copying it first (a server patching a copy of what it
/// read saves a deep copy of the object per patch).
///
/// # Errors
/// As [`apply_patch`].
pub fn apply_patch_to(
    kind: PatchKindHint<'_>,
    original: Value,
    patch_body: &[u8],
    patch_type: PatchType,
) -> Result<Value, PatchError> {
    let patch: Value =
        serde_json::from_slice(patch_body).map_err(|e| PatchError::InvalidJson(e.to_string()))?;
    match patch_type {
        PatchType::Merge => {
            let mut target = original;
            merge_patch::merge_into(&mut target, &patch);
            Ok(target)
        }
        PatchType::Json => json_patch::apply(&original, &patch),
        PatchType::StrategicMerge => strategic_merge_patch::apply_to(original, &patch, kind),
    }
}

/// JSON value equality with numbers compared by numeric value (`1` equals `1.0`), as RFC 6902
/// asks for `test` and as merge-key matching needs.
pub(crate) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(i), Some(j)) = (x.as_i64(), y.as_i64()) {
                i == j
            } else if let (Some(i), Some(j)) = (x.as_u64(), y.as_u64()) {
                i == j
            } else {
                match (x.as_f64(), y.as_f64()) {
                    (Some(i), Some(j)) => i == j,
                    _ => x == y,
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types_map_to_formats() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("application/json-patch+json; charset=utf-8"),
            Some(PatchType::Json)
        );
        assert_eq!(
            PatchType::from_content_type(" Application/Strategic-Merge-Patch+JSON ;x=y"),
            Some(PatchType::StrategicMerge)
        );
        assert_eq!(PatchType::from_content_type("application/json"), None);
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml"),
            None
        );
        assert_eq!(PatchType::from_content_type(""), None);
        for t in [PatchType::Merge, PatchType::Json, PatchType::StrategicMerge] {
            assert_eq!(PatchType::from_content_type(t.content_type()), Some(t));
        }
    }

    #[test]
    fn invalid_json_body_is_a_bad_request() {
        let err = apply_patch(
            PatchKindHint::UNKNOWN,
            &json!({}),
            b"{nope",
            PatchType::Merge,
        )
        .unwrap_err();
        assert!(matches!(err, PatchError::InvalidJson(_)));
        assert!(err.is_invalid_document());
        assert_eq!(err.status_code(), 400);
        assert_eq!(err.to_status().reason, Reason::BadRequest);
    }

    #[test]
    fn failing_test_op_is_unprocessable() {
        let err = apply_patch(
            PatchKindHint::UNKNOWN,
            &json!({"a": 1}),
            br#"[{"op":"test","path":"/a","value":2}]"#,
            PatchType::Json,
        )
        .unwrap_err();
        assert!(!err.is_invalid_document());
        assert_eq!(err.status_code(), 422);
        assert_eq!(err.to_status().reason, Reason::Invalid);
        assert!(err.to_string().contains("/a"), "{err}");
    }

    #[test]
    fn each_format_is_dispatched() {
        let orig = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b"}]}});
        let body = br#"{"spec":{"containers":[{"name":"a","image":"2"}]}}"#;
        let merged = apply_patch(("", "Pod").into(), &orig, body, PatchType::Merge).unwrap();
        assert_eq!(
            merged,
            json!({"spec": {"containers": [{"name": "a", "image": "2"}]}})
        );
        let smp = apply_patch(("", "Pod").into(), &orig, body, PatchType::StrategicMerge).unwrap();
        assert_eq!(
            smp,
            json!({"spec": {"containers": [{"name": "a", "image": "2"}, {"name": "b"}]}})
        );
        let jp = apply_patch(
            ("", "Pod").into(),
            &orig,
            br#"[{"op":"replace","path":"/spec/containers/1/name","value":"c"}]"#,
            PatchType::Json,
        )
        .unwrap();
        assert_eq!(jp["spec"]["containers"][1]["name"], "c");
    }

    #[test]
    fn numeric_equality_ignores_representation() {
        assert!(json_equal(&json!(1), &json!(1.0)));
        assert!(json_equal(
            &json!({"a": [1, 2.5]}),
            &json!({"a": [1.0, 2.5]})
        ));
        assert!(!json_equal(&json!(1), &json!("1")));
        assert!(!json_equal(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
        assert!(!json_equal(&json!(-1), &json!(u64::MAX)));
    }
}
