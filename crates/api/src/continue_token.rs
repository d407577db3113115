//! Continue tokens: where the next page of a paginated list starts.
//!
//! A token is the unpadded URL-safe base64 of a small JSON document,
//! `{"v":"meta.k8s.io/v1","rv":N,"start":"<key>"}`, the same shape kube-apiserver uses, so
//! tokens look familiar to anyone who has decoded one. Clients treat it as opaque.
//!
//! * `rv` is the resourceVersion the first page was served at; every later page is served
//!   at that same version (if it has been compacted away, the server answers 410 Expired).
//! * `start` is the storage key **relative to the resource's key prefix** (for example
//!   `default/pod-7\u{0}`), and resumption is **inclusive**: the next page holds the keys
//!   `>= start`. To resume after the last returned key `k`, encode `k` followed by a NUL
//!   byte ([`ContinueToken::after`] does this), which sorts immediately after `k`.
//!
//! Decoding rejects anything the server did not produce: bad base64 or JSON, an unknown
//! version, `rv` 0, an empty start key, and start keys that could escape the resource's
//! prefix once joined to it (a leading `/`, `.` or `..` segments, empty segments).

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::status::Status;

/// The only token version this module writes and reads.
const VERSION: &str = "meta.k8s.io/v1";

/// Decoded tokens are small; refuse to base64-decode anything absurdly large.
const MAX_TOKEN_LEN: usize = 64 * 1024;

/// URL-safe alphabet; writes no padding, accepts input with or without it.
const ENGINE: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The decoded content of a `continue` parameter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContinueToken {
    /// The resourceVersion every page of this list is served at. Never 0 in a decoded token.
    pub resource_version: u64,
    /// The key (relative to the resource's key prefix) the next page starts AT, inclusive.
    /// Never empty, never starts with `/`, has no empty, `.` or `..` segments in a decoded
    /// token.
    pub start_key: String,
}

#[derive(Serialize)]
struct Wire<'a> {
    v: &'a str,
    rv: u64,
    start: &'a str,
}

/// The owned variant, for decoding strings that contain escapes.
#[derive(Deserialize)]
struct WireOwned {
    v: String,
    rv: u64,
    start: String,
}

impl ContinueToken {
    /// The token that resumes a list at `resource_version` just after `last_key`, the last key
    /// (relative to the resource prefix) returned on the current page.
    pub fn after(resource_version: u64, last_key: &str) -> ContinueToken {
        ContinueToken {
            resource_version,
            start_key: format!("{last_key}\u{0}"),
        }
    }

    /// The wire form: unpadded URL-safe base64 of the JSON document.
    pub fn encode(&self) -> String {
        let wire = Wire {
            v: VERSION,
            rv: self.resource_version,
            start: &self.start_key,
        };
        // Serializing a struct of strings and an integer cannot fail.
        let json = serde_json::to_vec(&wire).unwrap_or_default();
        ENGINE.encode(json)
    }

    /// Parses a `continue` parameter.
    ///
    /// # Errors
    /// 400 BadRequest (`invalid continue token: ...`) if the token is not base64 of the JSON
    /// document, has another version, has `rv` 0, or has an empty or unsafe start key (see
    /// the type's invariants).
    pub fn decode(token: &str) -> Result<ContinueToken, Status> {
        let bad = |why: &str| Status::bad_request(format!("invalid continue token: {why}"));
        if token.len() > MAX_TOKEN_LEN {
            return Err(bad("too long"));
        }
        let bytes = ENGINE
            .decode(token)
            .map_err(|e| bad(&format!("not base64: {e}")))?;
        let wire: WireOwned =
            serde_json::from_slice(&bytes).map_err(|e| bad(&format!("not a token: {e}")))?;
        if wire.v != VERSION {
            return Err(bad(&format!("unrecognized version {:?}", wire.v)));
        }
        if wire.rv == 0 {
            return Err(bad("the encoded resourceVersion must not be 0"));
        }
        check_start_key(&wire.start).map_err(|why| bad(&why))?;
        Ok(ContinueToken {
            resource_version: wire.rv,
            start_key: wire.start,
        })
    }
}

/// Refuses start keys that, appended to a resource's key prefix, could name a key outside it.
fn check_start_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("the encoded start key is empty".into());
    }
    if key.starts_with('/') {
        return Err(format!("the start key {key:?} must be relative"));
    }
    if key
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(format!(
            "the start key {key:?} has an empty, '.' or '..' path segment"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Reason;
    use proptest::prelude::*;

    fn raw(json: &str) -> String {
        ENGINE.encode(json)
    }

    #[test]
    fn round_trip() {
        let t = ContinueToken::after(42, "default/pod-1");
        assert_eq!(t.start_key, "default/pod-1\u{0}");
        let s = t.encode();
        assert!(!s.contains('='));
        assert!(s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(ContinueToken::decode(&s).unwrap(), t);
    }

    #[test]
    fn wire_shape_is_kubernetes_like() {
        let t = ContinueToken {
            resource_version: 7,
            start_key: "ns/a\u{0}".into(),
        };
        let json = ENGINE.decode(t.encode()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"v": "meta.k8s.io/v1", "rv": 7, "start": "ns/a\u{0}"})
        );
        // A token written by another encoder with padding is accepted too.
        let padded = base64::engine::general_purpose::URL_SAFE.encode(&json);
        assert_eq!(ContinueToken::decode(&padded).unwrap(), t);
    }

    fn rejected(token: &str, needle: &str) {
        let e = ContinueToken::decode(token).unwrap_err();
        assert_eq!(e.reason, Reason::BadRequest, "{token}");
        assert!(
            e.message.starts_with("invalid continue token: "),
            "{}",
            e.message
        );
        assert!(e.message.contains(needle), "{token}: {}", e.message);
    }

    #[test]
    fn garbage_is_rejected() {
        rejected("", "not a token");
        rejected("!!!", "not base64");
        rejected(&raw("hello"), "not a token");
        rejected(&raw("{}"), "not a token");
        rejected(
            &raw(r#"{"v":"meta.k8s.io/v1","rv":-1,"start":"a"}"#),
            "not a token",
        );
        rejected(&"A".repeat(MAX_TOKEN_LEN + 1), "too long");
    }

    #[test]
    fn wrong_version_rv_zero_and_empty_key_are_rejected() {
        rejected(
            &raw(r#"{"v":"meta.k8s.io/v2","rv":1,"start":"a"}"#),
            "unrecognized version",
        );
        rejected(
            &raw(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#),
            "must not be 0",
        );
        rejected(&raw(r#"{"v":"meta.k8s.io/v1","rv":1,"start":""}"#), "empty");
    }

    #[test]
    fn path_traversal_is_rejected() {
        for key in ["/etc", "..", "../x", "a/../b", "a/./b", "a//b", "a/", "."] {
            let t = ContinueToken {
                resource_version: 3,
                start_key: key.into(),
            };
            let e = ContinueToken::decode(&t.encode()).unwrap_err();
            assert_eq!(e.code(), 400, "{key}");
        }
        for key in ["a..b/c", "ns/.hidden", "x\u{0}"] {
            let t = ContinueToken {
                resource_version: 3,
                start_key: key.into(),
            };
            assert_eq!(ContinueToken::decode(&t.encode()).unwrap(), t, "{key}");
        }
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(
            rv in 1..u64::MAX,
            segs in proptest::collection::vec("[^/]{1,6}", 1..4),
        ) {
            prop_assume!(segs.iter().all(|s| s != "." && s != ".."));
            let t = ContinueToken::after(rv, &segs.join("/"));
            prop_assert_eq!(ContinueToken::decode(&t.encode()).unwrap(), t);
        }

        #[test]
        fn decode_never_panics(s in any::<String>()) {
            let _ = ContinueToken::decode(&s);
        }

        #[test]
        fn decode_never_panics_on_base64_alphabet(s in "[A-Za-z0-9_=-]{0,80}") {
            if let Ok(t) = ContinueToken::decode(&s) {
                prop_assert!(t.resource_version > 0);
                prop_assert!(!t.start_key.is_empty());
            }
        }
    }
}
