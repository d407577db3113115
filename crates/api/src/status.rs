//! Kubernetes `Status` errors: every failure that crosses the wire is one of these.
//!
//! A [`Status`] carries the HTTP code, the machine-readable [`Reason`] and a human message,
//! and serializes to exactly the `{"kind":"Status","apiVersion":"v1",...}` shape kubectl and
//! client-go decode. Constructors are named after the reason so call sites read like the
//! Kubernetes errors package (`Status::not_found("pods", "x")`).

use serde::Serialize;
use serde_json::{json, Value};

/// The `reason` field of a failed `Status`. Each reason implies one HTTP code (see [`Reason::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// 400: the request itself is malformed.
    BadRequest,
    /// 401: no or bad credentials.
    Unauthorized,
    /// 403: authenticated but not allowed.
    Forbidden,
    /// 404: the object or path does not exist.
    NotFound,
    /// 405: the verb is not supported on this path.
    MethodNotAllowed,
    /// 406: none of the accepted media types can be produced.
    NotAcceptable,
    /// 409: create of a name that exists.
    AlreadyExists,
    /// 409: optimistic-concurrency failure (stale resourceVersion).
    Conflict,
    /// 410: the resource is gone (continue token or watch version compacted away).
    Expired,
    /// 410: generic gone.
    Gone,
    /// 413: request body too large.
    RequestEntityTooLarge,
    /// 415: the body's content type is not supported.
    UnsupportedMediaType,
    /// 422: the object fails validation.
    Invalid,
    /// 429: throttled; carries a Retry-After.
    TooManyRequests,
    /// 500: a server-side bug or storage failure.
    InternalError,
    /// 503: the server (or its storage) is not available right now.
    ServiceUnavailable,
    /// 504: the server gave up waiting (e.g. for a resourceVersion).
    Timeout,
}

impl Reason {
    /// The HTTP status code that goes with this reason.
    pub fn code(self) -> u16 {
        match self {
            Reason::BadRequest => 400,
            Reason::Unauthorized => 401,
            Reason::Forbidden => 403,
            Reason::NotFound => 404,
            Reason::MethodNotAllowed => 405,
            Reason::NotAcceptable => 406,
            Reason::AlreadyExists | Reason::Conflict => 409,
            Reason::Expired | Reason::Gone => 410,
            Reason::RequestEntityTooLarge => 413,
            Reason::UnsupportedMediaType => 415,
            Reason::Invalid => 422,
            Reason::TooManyRequests => 429,
            Reason::InternalError => 500,
            Reason::ServiceUnavailable => 503,
            Reason::Timeout => 504,
        }
    }

    /// The wire spelling of the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BadRequest => "BadRequest",
            Reason::Unauthorized => "Unauthorized",
            Reason::Forbidden => "Forbidden",
            Reason::NotFound => "NotFound",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::NotAcceptable => "NotAcceptable",
            Reason::AlreadyExists => "AlreadyExists",
            Reason::Conflict => "Conflict",
            Reason::Expired => "Expired",
            Reason::Gone => "Gone",
            Reason::RequestEntityTooLarge => "RequestEntityTooLarge",
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::Invalid => "Invalid",
            Reason::TooManyRequests => "TooManyRequests",
            Reason::InternalError => "InternalError",
            Reason::ServiceUnavailable => "ServiceUnavailable",
            Reason::Timeout => "Timeout",
        }
    }
}

/// One entry of `details.causes`: which field is wrong and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusCause {
    /// Machine-readable cause, e.g. `FieldValueInvalid`.
    #[serde(rename = "reason", skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable description.
    pub message: String,
    /// The field path, e.g. `metadata.name`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field: String,
}

/// A failed Kubernetes `Status`: the error type of every handler.
///
/// `details_name`/`details_kind` fill `details.name`/`details.kind` (kubectl prints them);
/// `retry_after` becomes both `details.retryAfterSeconds` and a `Retry-After` header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} ({reason:?})")]
pub struct Status {
    /// Why it failed.
    pub reason: Reason,
    /// Human-readable message.
    pub message: String,
    /// `details.name`, if the failure is about one object.
    pub details_name: Option<String>,
    /// `details.group`.
    pub details_group: Option<String>,
    /// `details.kind` (Kubernetes puts the resource name here, e.g. `pods`).
    pub details_kind: Option<String>,
    /// `details.causes`.
    pub causes: Vec<StatusCause>,
    /// `details.retryAfterSeconds`.
    pub retry_after: Option<u32>,
}

impl Status {
    /// A Status with only a reason and a message.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Status {
            reason,
            message: message.into(),
            details_name: None,
            details_group: None,
            details_kind: None,
            causes: Vec::new(),
            retry_after: None,
        }
    }

    /// Sets `details.name` and `details.kind` (builder style).
    #[must_use]
    pub fn with_details(mut self, kind: &str, name: &str) -> Self {
        self.details_kind = Some(kind.to_string());
        self.details_name = Some(name.to_string());
        self
    }

    /// Sets `details.group` (builder style; empty for the core group is left out).
    #[must_use]
    pub fn with_group(mut self, group: &str) -> Self {
        if !group.is_empty() {
            self.details_group = Some(group.to_string());
        }
        self
    }

    /// Adds a cause (builder style).
    #[must_use]
    pub fn with_cause(mut self, reason: &str, field: &str, message: &str) -> Self {
        self.causes.push(StatusCause {
            reason: reason.to_string(),
            field: field.to_string(),
            message: message.to_string(),
        });
        self
    }

    /// The HTTP code of this failure.
    pub fn code(&self) -> u16 {
        self.reason.code()
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Status::new(Reason::BadRequest, message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Status::new(Reason::Unauthorized, "Unauthorized")
    }

    /// 404 NotFound for `resource` `name`: `pods "x" not found`.
    pub fn not_found(resource: &str, name: &str) -> Self {
        Status::new(Reason::NotFound, format!("{resource} \"{name}\" not found"))
            .with_details(resource, name)
    }

    /// 404 for a path that serves nothing.
    pub fn path_not_found() -> Self {
        Status::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        )
    }

    /// 405 for a verb a path does not serve.
    pub fn method_not_allowed(method: &str, what: &str) -> Self {
        Status::new(
            Reason::MethodNotAllowed,
            format!(
                "the server does not allow this method on the requested resource: {method} {what}"
            ),
        )
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(accept: &str) -> Self {
        Status::new(
            Reason::NotAcceptable,
            format!("only the following media types are accepted: application/json, application/yaml; got {accept:?}"),
        )
    }

    /// 409 AlreadyExists: `pods "x" already exists`.
    pub fn already_exists(resource: &str, name: &str) -> Self {
        Status::new(
            Reason::AlreadyExists,
            format!("{resource} \"{name}\" already exists"),
        )
        .with_details(resource, name)
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(resource: &str, name: &str, why: &str) -> Self {
        Status::new(
            Reason::Conflict,
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
        )
        .with_details(resource, name)
    }

    /// 410 Expired for a watch or list version older than the oldest one kept.
    pub fn too_old_resource_version(requested: u64, oldest: u64) -> Self {
        Status::new(
            Reason::Expired,
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    /// 410 Expired for a continue token whose version was compacted.
    pub fn continue_expired() -> Self {
        Status::new(
            Reason::Expired,
            "The provided continue parameter is too old to display a consistent list result. \
             You can start a new list without the continue parameter.",
        )
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Status::new(
            Reason::RequestEntityTooLarge,
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 415 UnsupportedMediaType: a body in `content_type`, where only the `accepted` media
    /// types are read.
    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> Self {
        Status::new(
            Reason::UnsupportedMediaType,
            format!(
                "the body of the request was in an unknown format - accepted media types \
                 include: {}; got {content_type:?}",
                accepted.join(", ")
            ),
        )
    }

    /// 422 Invalid: `Kind "name" is invalid: field: message`.
    pub fn invalid(kind: &str, name: &str, field: &str, message: &str) -> Self {
        Status::new(
            Reason::Invalid,
            format!("{kind} \"{name}\" is invalid: {field}: {message}"),
        )
        .with_details(kind, name)
        .with_cause("FieldValueInvalid", field, message)
    }

    /// 429 TooManyRequests with a retry hint.
    pub fn too_many_requests(retry_after: u32) -> Self {
        let mut s = Status::new(
            Reason::TooManyRequests,
            "Too many requests, please try again later.",
        );
        s.retry_after = Some(retry_after);
        s
    }

    /// 500 InternalError.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Status::new(
            Reason::InternalError,
            format!("Internal error occurred: {message}"),
        )
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Status::new(Reason::ServiceUnavailable, message)
    }

    /// 504 Timeout with cause `ResourceVersionTooLarge`: the requested version is ahead of
    /// what the cache has seen after waiting.
    pub fn resource_version_too_large(requested: u64, current: u64) -> Self {
        let mut s = Status::new(
            Reason::Timeout,
            format!("Too large resource version: {requested}, current: {current}"),
        )
        .with_cause(
            "ResourceVersionTooLarge",
            "",
            &format!("Too large resource version: {requested}, current: {current}"),
        );
        s.retry_after = Some(1);
        s
    }

    /// The JSON form of this Status as a `serde_json::Value`.
    pub fn to_value(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason.as_str(),
            "code": self.code(),
        });
        let mut details = serde_json::Map::new();
        if let Some(n) = &self.details_name {
            details.insert("name".into(), json!(n));
        }
        if let Some(g) = &self.details_group {
            details.insert("group".into(), json!(g));
        }
        if let Some(k) = &self.details_kind {
            details.insert("kind".into(), json!(k));
        }
        if !self.causes.is_empty() {
            details.insert("causes".into(), json!(self.causes));
        }
        if let Some(r) = self.retry_after {
            details.insert("retryAfterSeconds".into(), json!(r));
        }
        if !details.is_empty() {
            v["details"] = Value::Object(details);
        }
        v
    }

    /// The JSON bytes of this Status.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing a Value built from strings and integers cannot fail.
        serde_json::to_vec(&self.to_value()).unwrap_or_default()
    }
}

/// One violated validation rule, in the shape of Kubernetes' `field.Error`: the field path,
/// the cause reason (`FieldValueInvalid`, …) and the text after `field: ` in the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The cause reason: `FieldValueInvalid`, `FieldValueRequired`, `FieldValueForbidden`,
    /// `FieldValueNotSupported`, `FieldValueDuplicate` or `FieldValueNotFound`.
    pub reason: &'static str,
    /// The field path, e.g. `spec.containers[0].image`.
    pub field: String,
    /// The message body, starting with the error type (`Invalid value: …`, `Required value`).
    pub body: String,
}

impl FieldError {
    /// `field: Invalid value: <value>: detail`; `value` is rendered as JSON (strings quoted).
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> FieldError {
        FieldError {
            reason: "FieldValueInvalid",
            field: field.into(),
            body: format!("Invalid value: {value}: {detail}"),
        }
    }

    /// `field: Required value` (with `: detail` when there is one).
    pub fn required(field: impl Into<String>, detail: &str) -> FieldError {
        let body = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        FieldError {
            reason: "FieldValueRequired",
            field: field.into(),
            body,
        }
    }

    /// `field: Forbidden: detail`.
    pub fn forbidden(field: impl Into<String>, detail: &str) -> FieldError {
        FieldError {
            reason: "FieldValueForbidden",
            field: field.into(),
            body: format!("Forbidden: {detail}"),
        }
    }

    /// `field: Duplicate value: "v"`.
    pub fn duplicate(field: impl Into<String>, value: &str) -> FieldError {
        FieldError {
            reason: "FieldValueDuplicate",
            field: field.into(),
            body: format!("Duplicate value: {value:?}"),
        }
    }

    /// `field: Not found: "v"`.
    pub fn not_found(field: impl Into<String>, value: &str) -> FieldError {
        FieldError {
            reason: "FieldValueNotFound",
            field: field.into(),
            body: format!("Not found: {value:?}"),
        }
    }

    /// `field: Unsupported value: "v": supported values: "a", "b"`.
    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> FieldError {
        let list = supported
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        FieldError {
            reason: "FieldValueNotSupported",
            field: field.into(),
            body: format!("Unsupported value: {value:?}: supported values: {list}"),
        }
    }
}

impl Status {
    /// `Ok` when `errs` is empty, else [`Status::invalid_fields`] for them.
    ///
    /// # Errors
    /// The 422 naming every error.
    pub fn invalid_if_any(
        kind: &str,
        group: &str,
        name: &str,
        errs: &[FieldError],
    ) -> Result<(), Status> {
        if errs.is_empty() {
            Ok(())
        } else {
            Err(Status::invalid_fields(kind, group, name, errs))
        }
    }

    /// 422 Invalid for `errs` (at least one) on the object `name` of `kind` in `group`
    /// (`""` for the core group), worded as kube-apiserver words it: `Kind.group "name" is
    /// invalid: field: body`, or the errors in brackets when there are several; one cause per
    /// error, `details.kind` the kind and `details.group` the group.
    pub fn invalid_fields(kind: &str, group: &str, name: &str, errs: &[FieldError]) -> Status {
        let parts: Vec<String> = errs
            .iter()
            .map(|e| format!("{}: {}", e.field, e.body))
            .collect();
        let summary = match parts.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut status = Status::new(
            Reason::Invalid,
            format!("{qualified} {name:?} is invalid: {summary}"),
        )
        .with_details(kind, name)
        .with_group(group);
        for e in errs {
            status = status.with_cause(e.reason, &e.field, &e.body);
        }
        status
    }
}

/// The JSON of a successful `Status` (e.g. the body of some deletes).
pub fn success_status(details_kind: &str, details_name: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": details_name, "kind": details_kind},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_matches_the_recorded_wire_shape() {
        let s = Status::too_old_resource_version(1, 4213);
        let v = s.to_value();
        assert_eq!(v["code"], 410);
        assert_eq!(v["reason"], "Expired");
        assert_eq!(v["message"], "too old resource version: 1 (4213)");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["kind"], "Status");
        assert!(v.get("details").is_none());
    }

    #[test]
    fn invalid_fields_name_the_kind_group_and_every_field() {
        let one = Status::invalid_fields(
            "Pod",
            "",
            "p",
            &[FieldError::forbidden("spec", "may not change")],
        );
        let v = one.to_value();
        assert_eq!(v["code"], 422);
        assert_eq!(
            v["message"],
            "Pod \"p\" is invalid: spec: Forbidden: may not change"
        );
        assert_eq!(v["details"]["kind"], "Pod");
        assert!(v["details"].get("group").is_none());
        assert_eq!(v["details"]["causes"][0]["reason"], "FieldValueForbidden");
        assert_eq!(v["details"]["causes"][0]["field"], "spec");
        let two = Status::invalid_fields(
            "Binding",
            "",
            "b",
            &[
                FieldError::not_supported("target.kind", "Pod", &["Node", "<empty>"]),
                FieldError::required("target.name", ""),
            ],
        );
        assert_eq!(
            two.message,
            "Binding \"b\" is invalid: [target.kind: Unsupported value: \"Pod\": supported \
             values: \"Node\", \"<empty>\", target.name: Required value]"
        );
        let grouped = Status::invalid_fields(
            "Event",
            "events.k8s.io",
            "e",
            &[FieldError::invalid("type", &json!("Odd"), "bad")],
        );
        assert_eq!(
            grouped.message,
            "Event.events.k8s.io \"e\" is invalid: type: Invalid value: \"Odd\": bad"
        );
        assert_eq!(grouped.to_value()["details"]["group"], "events.k8s.io");
    }

    #[test]
    fn not_found_carries_details() {
        let v = Status::not_found("pods", "x").to_value();
        assert_eq!(v["message"], "pods \"x\" not found");
        assert_eq!(v["details"]["name"], "x");
        assert_eq!(v["details"]["kind"], "pods");
        assert_eq!(v["code"], 404);
    }

    #[test]
    fn too_large_version_has_retry_after_and_cause() {
        let v = Status::resource_version_too_large(10, 5).to_value();
        assert_eq!(v["code"], 504);
        assert_eq!(v["details"]["retryAfterSeconds"], 1);
        assert_eq!(
            v["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
    }
}
