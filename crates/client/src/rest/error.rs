//! The error type of the REST client, and decoding of `Status` bodies.
//!
//! Every failure the server explains with a `Status` body becomes [`Error::Api`], carrying the
//! decoded [`api::Status`]; the `is_*` helpers classify it the way client-go's `errors`
//! package does (`is_not_found`, `is_gone`, `is_conflict`, ...). Failures below HTTP (connect,
//! TLS, reset) are [`Error::Transport`]; bodies that are not what the call expects are
//! [`Error::Decode`].

use std::time::Duration;

use api::status::{Reason, Status, StatusCause};
use serde::Deserialize;

use super::config::ConfigError;

/// A boxed error from the HTTP stack.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a REST call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with a failure `Status` (or an ERROR watch event carried one).
    /// Boxed to keep `Result<_, Error>` small.
    #[error("the server reported {}: {}", .0.reason.as_str(), .0.message)]
    Api(Box<Status>),
    /// The server answered with an error code and a body that is not a `Status` and whose
    /// code maps to no known reason (e.g. an HTML page from a proxy).
    #[error("unexpected HTTP {code} from the server: {body}")]
    UnexpectedResponse {
        /// The HTTP status code.
        code: u16,
        /// The start of the body, lossily decoded as UTF-8.
        body: String,
    },
    /// The request could not be sent or the response could not be read (connect, TLS,
    /// protocol, reset).
    #[error("transport error while {context}: {}", error_chain(.source.as_ref()))]
    Transport {
        /// What the client was doing, e.g. `GET /api/v1/pods`.
        context: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// A response body (or one watch event) could not be decoded as expected.
    #[error("cannot decode {context}: {source}")]
    Decode {
        /// What was being decoded, e.g. `the response of GET /api/v1/pods`.
        context: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// No byte arrived on a watch for the configured idle timeout: the connection is
    /// probably dead. The stream ends after this error.
    #[error("no data received on the watch for {0:?}")]
    IdleTimeout(Duration),
    /// A non-streaming request took longer than the configured timeout.
    #[error("the request timed out after {0:?}")]
    Timeout(Duration),
    /// One watch event line grew beyond the decoder's limit. The stream ends after this
    /// error.
    #[error("a watch event exceeds the maximum line size of {limit} bytes")]
    LineTooLong {
        /// The limit in bytes.
        limit: usize,
    },
    /// The request could not be built (e.g. an object without a name to replace).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The client could not be configured (bad certificates, keys, server URL, token file).
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl Error {
    /// The server's `Status`, if this is an API error.
    pub fn status(&self) -> Option<&Status> {
        match self {
            Error::Api(s) => Some(s),
            _ => None,
        }
    }

    /// The HTTP code of an API error or of an unexpected response.
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::Api(s) => Some(s.code()),
            Error::UnexpectedResponse { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The `reason` of an API error.
    pub fn reason(&self) -> Option<Reason> {
        self.status().map(|s| s.reason)
    }

    /// 404 NotFound.
    pub fn is_not_found(&self) -> bool {
        self.reason() == Some(Reason::NotFound)
    }

    /// 410 Gone or Expired: a watch or list version (or continue token) is too old; the
    /// caller should relist.
    pub fn is_gone(&self) -> bool {
        matches!(self.reason(), Some(Reason::Gone | Reason::Expired))
    }

    /// 409 Conflict: an update carried a stale `resourceVersion`.
    pub fn is_conflict(&self) -> bool {
        self.reason() == Some(Reason::Conflict)
    }

    /// 409 AlreadyExists: a create of a name that exists.
    pub fn is_already_exists(&self) -> bool {
        self.reason() == Some(Reason::AlreadyExists)
    }

    /// 422 Invalid.
    pub fn is_invalid(&self) -> bool {
        self.reason() == Some(Reason::Invalid)
    }

    /// 429 TooManyRequests; see [`retry_after`](Self::retry_after) for the server's hint.
    pub fn is_too_many_requests(&self) -> bool {
        self.reason() == Some(Reason::TooManyRequests)
    }

    /// 504 Timeout from the server (e.g. a resourceVersion ahead of the server).
    pub fn is_server_timeout(&self) -> bool {
        self.reason() == Some(Reason::Timeout)
    }

    /// 504 Timeout because the asked-for resourceVersion is newer than the server has (its
    /// cache lags, or it restarted behind what the client saw): the `ResourceVersionTooLarge`
    /// cause, or, from servers that predate the cause, the "Too large resource version"
    /// message. A list should then ask for the newest state (`""`) instead.
    pub fn is_resource_version_too_large(&self) -> bool {
        self.status().is_some_and(|s| {
            s.causes
                .iter()
                .any(|c| c.reason == "ResourceVersionTooLarge")
                || (s.reason == Reason::Timeout && s.message.contains("Too large resource version"))
        })
    }

    /// How long the server asked the client to wait before retrying
    /// (`details.retryAfterSeconds`, or the `Retry-After` header).
    pub fn retry_after(&self) -> Option<Duration> {
        self.status()
            .and_then(|s| s.retry_after)
            .map(|s| Duration::from_secs(u64::from(s)))
    }

    /// Wraps a transport-level failure.
    pub(crate) fn transport(context: impl Into<String>, source: impl Into<BoxError>) -> Error {
        Error::Transport {
            context: context.into(),
            source: source.into(),
        }
    }

    /// Wraps a JSON decoding failure.
    pub(crate) fn decode(context: impl Into<String>, source: serde_json::Error) -> Error {
        Error::Decode {
            context: context.into(),
            source,
        }
    }
}

impl From<Status> for Error {
    fn from(s: Status) -> Error {
        Error::Api(Box::new(s))
    }
}

/// The shape of a `Status` on the wire, as far as the client reads it: deserialized from
/// JSON, or filled from a protobuf `Status` (`protobuf_decoder.rs`).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireStatus {
    #[serde(default)]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) status: Option<String>,
    #[serde(default)]
    pub(crate) message: Option<String>,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    #[serde(default)]
    pub(crate) code: Option<u16>,
    #[serde(default)]
    pub(crate) details: Option<WireDetails>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireDetails {
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) group: Option<String>,
    #[serde(default)]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) causes: Option<Vec<WireCause>>,
    #[serde(default)]
    pub(crate) retry_after_seconds: Option<u32>,
}

#[derive(Deserialize, Default)]
pub(crate) struct WireCause {
    #[serde(default)]
    pub(crate) reason: Option<String>,
    #[serde(default)]
    pub(crate) message: Option<String>,
    #[serde(default)]
    pub(crate) field: Option<String>,
}

const ALL_REASONS: [Reason; 17] = [
    Reason::BadRequest,
    Reason::Unauthorized,
    Reason::Forbidden,
    Reason::NotFound,
    Reason::MethodNotAllowed,
    Reason::NotAcceptable,
    Reason::AlreadyExists,
    Reason::Conflict,
    Reason::Expired,
    Reason::Gone,
    Reason::RequestEntityTooLarge,
    Reason::UnsupportedMediaType,
    Reason::Invalid,
    Reason::TooManyRequests,
    Reason::InternalError,
    Reason::ServiceUnavailable,
    Reason::Timeout,
];

/// The reason a bare HTTP code implies, if the code has one (the most common reason for
/// codes shared by several reasons: 409 → Conflict, 410 → Gone).
pub fn reason_for_code(code: u16) -> Option<Reason> {
    Some(match code {
        400 => Reason::BadRequest,
        401 => Reason::Unauthorized,
        403 => Reason::Forbidden,
        404 => Reason::NotFound,
        405 => Reason::MethodNotAllowed,
        406 => Reason::NotAcceptable,
        409 => Reason::Conflict,
        410 => Reason::Gone,
        413 => Reason::RequestEntityTooLarge,
        415 => Reason::UnsupportedMediaType,
        422 => Reason::Invalid,
        429 => Reason::TooManyRequests,
        500 => Reason::InternalError,
        503 => Reason::ServiceUnavailable,
        504 => Reason::Timeout,
        _ => return None,
    })
}

/// Parses the wire spelling of a reason (`"NotFound"`, ...).
pub fn parse_reason(s: &str) -> Option<Reason> {
    ALL_REASONS.into_iter().find(|r| r.as_str() == s)
}

/// Decodes a failure `Status` from JSON bytes, or from a protobuf body (`k8s\0` and an
/// enveloped `Status`, as a server answers a request that accepted protobuf).
///
/// Returns `None` unless the bytes are a JSON object with `kind: "Status"` or
/// `status: "Failure"`, and a reason or code the client can classify. The reason is taken
/// from `reason` when it is one [`api::Reason`] knows, else derived from `code` (so an
/// unknown reason with code 500 is `InternalError`); a Status with neither, or with an
/// unknown reason and an unmapped code, falls back to `BadRequest` for 4xx and
/// `InternalError` for 5xx codes, and to `None` otherwise. A `Success` status is `None`.
pub fn decode_status(bytes: &[u8]) -> Option<Status> {
    if bytes.starts_with(crate::protobuf_wire::MAGIC) {
        return super::protobuf_decoder::decode_protobuf_status(bytes);
    }
    status_from_wire(serde_json::from_slice(bytes).ok()?)
}

/// A failure `Status` as [`decode_status`] reads it, from its wire shape.
pub(crate) fn status_from_wire(w: WireStatus) -> Option<Status> {
    let is_status = w.kind.as_deref() == Some("Status");
    let failed = w.status.as_deref() == Some("Failure");
    if !(is_status || failed) || w.status.as_deref() == Some("Success") {
        return None;
    }
    let reason = w
        .reason
        .as_deref()
        .and_then(parse_reason)
        .or_else(|| w.code.and_then(reason_for_code))
        .or(match w.code {
            Some(400..=499) => Some(Reason::BadRequest),
            Some(500..=599) => Some(Reason::InternalError),
            _ => None,
        })?;
    let details = w.details.unwrap_or_default();
    let mut status = Status::new(reason, w.message.unwrap_or_default());
    status.details_name = details.name.filter(|s| !s.is_empty());
    status.details_group = details.group.filter(|s| !s.is_empty());
    status.details_kind = details.kind.filter(|s| !s.is_empty());
    status.retry_after = details.retry_after_seconds;
    status.causes = details
        .causes
        .unwrap_or_default()
        .into_iter()
        .map(|c| StatusCause {
            reason: c.reason.unwrap_or_default(),
            message: c.message.unwrap_or_default(),
            field: c.field.unwrap_or_default(),
        })
        .collect();
    Some(status)
}

/// The error for a non-2xx response: the decoded Status when the body is one (filling
/// `retry_after` from the `Retry-After` header if the body has none), else a Status
/// synthesized from the code, else [`Error::UnexpectedResponse`].
pub fn error_from_response(code: u16, retry_after_header: Option<u32>, body: &[u8]) -> Error {
    if let Some(mut s) = decode_status(body) {
        if s.retry_after.is_none() {
            s.retry_after = retry_after_header;
        }
        return Error::Api(Box::new(s));
    }
    let text = excerpt(body);
    match reason_for_code(code) {
        Some(reason) => {
            let message = if text.is_empty() {
                format!("the server responded with HTTP {code}")
            } else {
                format!("the server responded with HTTP {code}: {text}")
            };
            let mut s = Status::new(reason, message);
            s.retry_after = retry_after_header;
            Error::Api(Box::new(s))
        }
        None => Error::UnexpectedResponse { code, body: text },
    }
}

/// An error and its sources, joined with `: ` (HTTP stack errors are terse at the top).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

/// At most 1 KiB of a body as text, for error messages.
fn excerpt(body: &[u8]) -> String {
    const MAX: usize = 1024;
    let cut = body.len().min(MAX);
    let mut s = String::from_utf8_lossy(&body[..cut]).trim().to_string();
    if body.len() > MAX {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_the_server_writes_round_trips() {
        let samples = [
            Status::not_found("pods", "x"),
            Status::already_exists("pods", "x"),
            Status::conflict("pods", "x", "the object has been modified"),
            Status::too_old_resource_version(1, 4213),
            Status::too_many_requests(7),
            Status::resource_version_too_large(10, 5),
            Status::invalid("Pod", "x", "metadata.name", "Required value"),
            Status::internal("boom"),
        ];
        for s in samples {
            let back = decode_status(&s.to_json()).unwrap();
            assert_eq!(back, s);
        }
    }

    #[test]
    fn recorded_expired_event_object() {
        let wire = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (4213)","reason":"Expired","code":410}"#;
        let err = Error::from(decode_status(wire).unwrap());
        assert!(err.is_gone());
        assert_eq!(err.code(), Some(410));
        assert!(!err.is_not_found());
        assert!(err.to_string().contains("too old resource version"));
    }

    #[test]
    fn unknown_reason_falls_back_to_code() {
        let s = decode_status(
            br#"{"kind":"Status","status":"Failure","reason":"ServerTimeout","code":500,"message":"m"}"#,
        )
        .unwrap();
        assert_eq!(s.reason, Reason::InternalError);
        assert_eq!(s.message, "m");
        let s = decode_status(br#"{"kind":"Status","status":"Failure","code":418}"#).unwrap();
        assert_eq!(s.reason, Reason::BadRequest);
        assert!(decode_status(br#"{"kind":"Status","status":"Failure"}"#).is_none());
    }

    #[test]
    fn non_status_bodies_are_not_statuses() {
        assert!(decode_status(b"<html>bad gateway</html>").is_none());
        assert!(decode_status(br#"{"kind":"Pod","metadata":{}}"#).is_none());
        assert!(decode_status(br#"{"kind":"Status","status":"Success","code":200}"#).is_none());
        assert!(decode_status(b"[]").is_none());
    }

    #[test]
    fn responses_without_status_bodies() {
        let e = error_from_response(404, None, b"404 page not found\n");
        assert!(e.is_not_found());
        assert!(e.to_string().contains("404 page not found"), "{e}");

        let e = error_from_response(429, Some(3), b"");
        assert!(e.is_too_many_requests());
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));

        let e = error_from_response(502, None, b"<html>bad gateway</html>");
        assert!(matches!(e, Error::UnexpectedResponse { code: 502, .. }));
        assert_eq!(e.code(), Some(502));
        assert!(e.status().is_none());
    }

    #[test]
    fn retry_after_prefers_the_body() {
        let body = Status::too_many_requests(9).to_json();
        let e = error_from_response(429, Some(2), &body);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(9)));
        let mut s = Status::too_many_requests(1);
        s.retry_after = None;
        let e = error_from_response(429, Some(2), &s.to_json());
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn classification_helpers() {
        let e = Error::from(Status::conflict("pods", "a", "stale"));
        assert!(e.is_conflict() && !e.is_already_exists());
        let e = Error::from(Status::already_exists("pods", "a"));
        assert!(e.is_already_exists() && !e.is_conflict());
        let e = Error::from(Status::resource_version_too_large(2, 1));
        assert!(e.is_server_timeout() && e.is_resource_version_too_large());
        assert!(
            !Error::from(Status::too_old_resource_version(1, 2)).is_resource_version_too_large()
        );
        assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
        assert!(!Error::IdleTimeout(Duration::from_secs(1)).is_gone());
    }
}
