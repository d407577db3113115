//! The query parameters of list and watch requests, parsed and validated.
//!
//! [`ListOptions::from_query`] takes the raw query string (without `?`) and follows
//! kube-apiserver:
//!
//! * Empty pairs and a leading `&` are tolerated (kube-rs sends `?&watch=true`); names and
//!   values are percent- and `+`-decoded; when a parameter repeats, the first one counts.
//! * Unknown parameters are ignored, among them the ones kubectl and other clients send on
//!   various verbs (`pretty`, `fieldManager`, `fieldValidation`, `dryRun`,
//!   `propagationPolicy`, `gracePeriodSeconds`, `orphanDependents`, `includeObject`,
//!   `timeout`, ...).
//! * Booleans (`watch`, `allowWatchBookmarks`, `sendInitialEvents`) are false for `0` or
//!   `false` (any case) and true for anything else, including an empty value (`?watch`).
//! * A value that cannot be converted (a non-numeric `limit` or `resourceVersion`, a bad
//!   selector, a garbage `continue` token) is a 400 BadRequest.
//! * Combinations Kubernetes forbids are a 422 Invalid on kind `ListOptions.meta.k8s.io`,
//!   with one cause per violated rule, naming the field (see [`ListOptions::validate`]).
//!
//! The field selector is only parsed here; which fields exist depends on the resource, so
//! the caller checks it with [`FieldSelector::validate`](crate::fields::FieldSelector::validate).

use std::fmt;

use crate::continue_token::ContinueToken;
use crate::fields::FieldSelector;
use crate::labels::LabelSelector;
use crate::status::{Reason, Status};

/// The `resourceVersion` parameter of a list or watch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ResourceVersion {
    /// Absent or empty. List: the most recent state (a consistent read). Watch: send the
    /// current state as ADDED events, then changes.
    #[default]
    Unset,
    /// `"0"`. List: any version (may be served from the cache, may be stale). Watch: like
    /// `Unset`, but the starting state may be any version.
    Any,
    /// `"N"` with N > 0. List: a state not older than N (or exactly N with
    /// [`ResourceVersionMatch::Exact`]). Watch: every change strictly after N.
    AtLeast(u64),
}

impl ResourceVersion {
    /// Parses the parameter value: `""` is `Unset`, `"0"` is `Any`, other decimal numbers are
    /// `AtLeast`.
    ///
    /// # Errors
    /// 400 BadRequest `invalid resource version: ...` for anything but ASCII digits, or a
    /// number that does not fit in 64 bits.
    pub fn parse(s: &str) -> Result<ResourceVersion, Status> {
        if s.is_empty() {
            return Ok(ResourceVersion::Unset);
        }
        let n = parse_u64(s)
            .ok_or_else(|| Status::bad_request(format!("invalid resource version: {s:?}")))?;
        Ok(if n == 0 {
            ResourceVersion::Any
        } else {
            ResourceVersion::AtLeast(n)
        })
    }

    /// The number, if one was given (`Any` is 0).
    pub fn as_u64(self) -> Option<u64> {
        match self {
            ResourceVersion::Unset => None,
            ResourceVersion::Any => Some(0),
            ResourceVersion::AtLeast(n) => Some(n),
        }
    }

    /// Whether the parameter was absent or empty.
    pub fn is_unset(self) -> bool {
        self == ResourceVersion::Unset
    }
}

impl fmt::Display for ResourceVersion {
    /// The wire form: `""`, `"0"` or the number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResourceVersion::Unset => Ok(()),
            ResourceVersion::Any => f.write_str("0"),
            ResourceVersion::AtLeast(n) => write!(f, "{n}"),
        }
    }
}

/// The `resourceVersionMatch` parameter: how a list interprets `resourceVersion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceVersionMatch {
    /// `NotOlderThan`: any state at least as new as the version.
    NotOlderThan,
    /// `Exact`: the state at exactly that version (410 if it was compacted).
    Exact,
}

impl ResourceVersionMatch {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceVersionMatch::NotOlderThan => "NotOlderThan",
            ResourceVersionMatch::Exact => "Exact",
        }
    }
}

/// Parsed and validated list/watch query parameters. `Default` is a plain list of
/// everything at the most recent version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// `labelSelector`; empty = everything.
    pub label_selector: LabelSelector,
    /// `fieldSelector`; empty = everything. Not yet checked against the resource's fields.
    pub field_selector: FieldSelector,
    /// `watch`: stream changes instead of returning a list.
    pub watch: bool,
    /// `allowWatchBookmarks`: the client accepts BOOKMARK events.
    pub allow_watch_bookmarks: bool,
    /// `resourceVersion`.
    pub resource_version: ResourceVersion,
    /// `resourceVersionMatch`; `None` when absent or empty.
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// `timeoutSeconds` as sent; `None` when absent or empty. For a watch, `Some(0)` means
    /// the same as `None`: the server picks the duration.
    pub timeout_seconds: Option<u64>,
    /// `limit`: the maximum number of items on one page; `None` when absent, empty or 0
    /// (Kubernetes treats 0 as "no limit").
    pub limit: Option<u64>,
    /// `continue`, decoded; `None` when absent or empty.
    pub continue_token: Option<ContinueToken>,
    /// `sendInitialEvents`; `None` when absent (which differs from `false` for validation).
    pub send_initial_events: Option<bool>,
}

impl ListOptions {
    /// Parses and validates a raw query string (without the leading `?`).
    ///
    /// # Errors
    /// 400 BadRequest for a parameter that cannot be converted or for `continue` combined
    /// with a `resourceVersion` other than unset/`"0"`; 422 Invalid for forbidden
    /// combinations (see [`validate`](Self::validate)).
    pub fn from_query(query: &str) -> Result<ListOptions, Status> {
        let opts = ListOptions::parse_query(query)?;
        opts.validate()?;
        Ok(opts)
    }

    /// Like [`from_query`](Self::from_query) for the legacy `/watch/` paths: the request is
    /// a watch whatever the `watch` parameter says.
    ///
    /// # Errors
    /// As [`from_query`](Self::from_query).
    pub fn from_watch_query(query: &str) -> Result<ListOptions, Status> {
        let mut opts = ListOptions::parse_query(query)?;
        opts.watch = true;
        opts.validate()?;
        Ok(opts)
    }

    /// Converts every known parameter without checking how they combine.
    fn parse_query(query: &str) -> Result<ListOptions, Status> {
        let mut raw = RawParams::default();
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            let slot = match name.as_ref() {
                "labelSelector" => &mut raw.label_selector,
                "fieldSelector" => &mut raw.field_selector,
                "watch" => &mut raw.watch,
                "allowWatchBookmarks" => &mut raw.allow_watch_bookmarks,
                "resourceVersion" => &mut raw.resource_version,
                "resourceVersionMatch" => &mut raw.resource_version_match,
                "timeoutSeconds" => &mut raw.timeout_seconds,
                "limit" => &mut raw.limit,
                "continue" => &mut raw.continue_,
                "sendInitialEvents" => &mut raw.send_initial_events,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(value.into_owned());
            }
        }
        raw.convert()
    }

    /// Whether this is a watch request.
    pub fn is_watch(&self) -> bool {
        self.watch
    }

    /// Checks the combination rules of kube-apiserver (with the WatchList feature on).
    ///
    /// Lists: `resourceVersionMatch` needs `resourceVersion` and cannot be combined with
    /// `continue`; `Exact` is forbidden with `resourceVersion=0`; `sendInitialEvents` is
    /// forbidden. Watches: `sendInitialEvents` needs `resourceVersionMatch=NotOlderThan`;
    /// `resourceVersionMatch` is forbidden without `sendInitialEvents`, must be
    /// `NotOlderThan`, and cannot be combined with `continue`. Then, for lists, `continue`
    /// with a `resourceVersion` other than unset or `"0"` is refused.
    ///
    /// # Errors
    /// 422 Invalid listing every broken rule as a cause on its field; or 400 BadRequest
    /// `specifying resource version is not allowed when using continue`.
    pub fn validate(&self) -> Result<(), Status> {
        let mut errs = Vec::new();
        let rv_match = self.resource_version_match;
        let has_continue = self.continue_token.is_some();
        if self.watch {
            if self.send_initial_events.is_some()
                && rv_match != Some(ResourceVersionMatch::NotOlderThan)
            {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if let Some(m) = rv_match {
                if self.send_initial_events.is_none() {
                    errs.push(FieldError::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if m != ResourceVersionMatch::NotOlderThan {
                    errs.push(FieldError::not_supported(
                        "resourceVersionMatch",
                        m.as_str(),
                        &["NotOlderThan"],
                    ));
                }
                if has_continue {
                    errs.push(FieldError::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
        } else {
            if let Some(m) = rv_match {
                if self.resource_version.is_unset() {
                    errs.push(FieldError::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                if has_continue {
                    errs.push(FieldError::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
                if m == ResourceVersionMatch::Exact && self.resource_version == ResourceVersion::Any
                {
                    errs.push(FieldError::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
            }
            if self.send_initial_events.is_some() {
                errs.push(FieldError::forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for list",
                ));
            }
        }
        if !errs.is_empty() {
            return Err(invalid_list_options(&errs));
        }
        if !self.watch
            && has_continue
            && matches!(self.resource_version, ResourceVersion::AtLeast(_))
        {
            return Err(Status::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        Ok(())
    }

    /// The query string (without `?`) that [`from_query`](Self::from_query) parses back
    /// into these options; parameters at their default are left out.
    pub fn to_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if !self.label_selector.is_empty() {
            q.append_pair("labelSelector", &self.label_selector.to_string());
        }
        if !self.field_selector.is_empty() {
            q.append_pair("fieldSelector", &self.field_selector.to_string());
        }
        if self.watch {
            q.append_pair("watch", "true");
        }
        if self.allow_watch_bookmarks {
            q.append_pair("allowWatchBookmarks", "true");
        }
        if !self.resource_version.is_unset() {
            q.append_pair("resourceVersion", &self.resource_version.to_string());
        }
        if let Some(m) = self.resource_version_match {
            q.append_pair("resourceVersionMatch", m.as_str());
        }
        if let Some(t) = self.timeout_seconds {
            q.append_pair("timeoutSeconds", &t.to_string());
        }
        if let Some(l) = self.limit {
            q.append_pair("limit", &l.to_string());
        }
        if let Some(c) = &self.continue_token {
            q.append_pair("continue", &c.encode());
        }
        if let Some(s) = self.send_initial_events {
            q.append_pair("sendInitialEvents", if s { "true" } else { "false" });
        }
        q.finish()
    }
}

/// The first value of each known parameter, decoded but not converted.
#[derive(Default)]
struct RawParams {
    label_selector: Option<String>,
    field_selector: Option<String>,
    watch: Option<String>,
    allow_watch_bookmarks: Option<String>,
    resource_version: Option<String>,
    resource_version_match: Option<String>,
    timeout_seconds: Option<String>,
    limit: Option<String>,
    continue_: Option<String>,
    send_initial_events: Option<String>,
}

impl RawParams {
    fn convert(self) -> Result<ListOptions, Status> {
        let label_selector = match self.label_selector.as_deref() {
            None => LabelSelector::everything(),
            Some(s) => LabelSelector::parse(s).map_err(|e| {
                Status::bad_request(format!("unable to parse labelSelector {s:?}: {e}"))
            })?,
        };
        let field_selector = match self.field_selector.as_deref() {
            None => FieldSelector::everything(),
            Some(s) => FieldSelector::parse(s).map_err(|e| {
                Status::bad_request(format!("unable to parse fieldSelector {s:?}: {e}"))
            })?,
        };
        let resource_version = match self.resource_version.as_deref() {
            None => ResourceVersion::Unset,
            Some(s) => ResourceVersion::parse(s)?,
        };
        let resource_version_match = match self.resource_version_match.as_deref() {
            None | Some("") => None,
            Some("NotOlderThan") => Some(ResourceVersionMatch::NotOlderThan),
            Some("Exact") => Some(ResourceVersionMatch::Exact),
            Some(other) => {
                return Err(invalid_list_options(&[FieldError::not_supported(
                    "resourceVersionMatch",
                    other,
                    &["Exact", "NotOlderThan", ""],
                )]))
            }
        };
        let continue_token = match self.continue_.as_deref() {
            None | Some("") => None,
            Some(s) => Some(ContinueToken::decode(s)?),
        };
        Ok(ListOptions {
            label_selector,
            field_selector,
            watch: self.watch.as_deref().is_some_and(parse_bool),
            allow_watch_bookmarks: self
                .allow_watch_bookmarks
                .as_deref()
                .is_some_and(parse_bool),
            resource_version,
            resource_version_match,
            timeout_seconds: parse_count("timeoutSeconds", self.timeout_seconds.as_deref())?,
            limit: parse_limit(self.limit.as_deref())?,
            continue_token,
            send_initial_events: self.send_initial_events.as_deref().map(parse_bool),
        })
    }
}

/// Kubernetes' query-parameter boolean: false only for `0` and `false` (any case); anything
/// else, `2` and `yes` too, is true. (apimachinery converts query booleans so, not with Go's
/// `strconv.ParseBool`, and kube-apiserver's request info takes `watch` the same way.)
fn parse_bool(s: &str) -> bool {
    !(s == "0" || s.eq_ignore_ascii_case("false"))
}

/// A non-empty run of ASCII digits that fits in a u64 (no sign, no spaces).
fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// An optional non-negative integer parameter; empty counts as absent.
fn parse_count(name: &str, value: Option<&str>) -> Result<Option<u64>, Status> {
    match value {
        None | Some("") => Ok(None),
        Some(s) => parse_u64(s).map(Some).ok_or_else(|| {
            Status::bad_request(format!(
                "invalid value for {name}: {s:?}: must be a non-negative integer"
            ))
        }),
    }
}

/// `limit`: an integer, where 0 and negative numbers mean no limit, as kube-apiserver reads
/// it (it parses an int64 and pages only when it is positive).
fn parse_limit(value: Option<&str>) -> Result<Option<u64>, Status> {
    let Some(s) = value.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    match s.strip_prefix('-') {
        Some(digits) if parse_u64(digits).is_some_and(|n| n <= 1 << 63) => Ok(None),
        Some(_) => Err(Status::bad_request(format!(
            "invalid value for limit: {s:?}: must be an integer"
        ))),
        None => parse_count("limit", Some(s)).map(|n| n.filter(|&n| n > 0)),
    }
}

/// One violated rule, in the shape of Kubernetes' `field.Error`.
struct FieldError {
    /// `FieldValueForbidden` or `FieldValueNotSupported`.
    reason: &'static str,
    field: &'static str,
    /// The body after `field: `, e.g. `Forbidden: ...`.
    body: String,
}

impl FieldError {
    fn forbidden(field: &'static str, detail: &str) -> FieldError {
        FieldError {
            reason: "FieldValueForbidden",
            field,
            body: format!("Forbidden: {detail}"),
        }
    }

    fn not_supported(field: &'static str, value: &str, supported: &[&str]) -> FieldError {
        let list = supported
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        FieldError {
            reason: "FieldValueNotSupported",
            field,
            body: format!("Unsupported value: {value:?}: supported values: {list}"),
        }
    }
}

/// 422 Invalid on `ListOptions.meta.k8s.io ""`, one cause per error, worded like
/// kube-apiserver (`... is invalid: field: body`, or a bracketed list when several).
fn invalid_list_options(errs: &[FieldError]) -> Status {
    let parts: Vec<String> = errs
        .iter()
        .map(|e| format!("{}: {}", e.field, e.body))
        .collect();
    let summary = match parts.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let mut status = Status::new(
        Reason::Invalid,
        format!("ListOptions.meta.k8s.io \"\" is invalid: {summary}"),
    )
    .with_group("meta.k8s.io");
    status.details_kind = Some("ListOptions".to_string());
    for e in errs {
        status = status.with_cause(e.reason, e.field, &e.body);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(q: &str) -> ListOptions {
        ListOptions::from_query(q).unwrap_or_else(|e| panic!("{q}: {e}"))
    }

    fn err(q: &str) -> Status {
        ListOptions::from_query(q).expect_err(q)
    }

    fn token(rv: u64) -> String {
        ContinueToken::after(rv, "default/a").encode()
    }

    #[test]
    fn empty_query_is_a_plain_list() {
        for q in ["", "&", "&&", "&&&=", "=x"] {
            let o = ok(q);
            assert_eq!(o, ListOptions::default(), "{q}");
            assert!(!o.is_watch());
        }
    }

    #[test]
    fn kube_rs_style_leading_ampersand() {
        let o = ok("&watch=true&resourceVersion=10&timeoutSeconds=290&allowWatchBookmarks=true");
        assert!(o.is_watch());
        assert!(o.allow_watch_bookmarks);
        assert_eq!(o.resource_version, ResourceVersion::AtLeast(10));
        assert_eq!(o.timeout_seconds, Some(290));
    }

    #[test]
    fn booleans() {
        for (v, want) in [
            ("true", true),
            ("1", true),
            ("True", true),
            ("", true),
            ("2", true),
            ("yes", true),
            ("false", false),
            ("FALSE", false),
            ("0", false),
        ] {
            assert_eq!(ok(&format!("watch={v}")).watch, want, "{v}");
        }
        assert!(ok("watch").watch);
        assert!(!ok("allowWatchBookmarks=0").allow_watch_bookmarks);
        // The first occurrence wins.
        assert!(ok("watch=1&watch=0").watch);
    }

    #[test]
    fn resource_versions() {
        assert_eq!(
            ok("resourceVersion=").resource_version,
            ResourceVersion::Unset
        );
        assert_eq!(
            ok("resourceVersion=0").resource_version,
            ResourceVersion::Any
        );
        assert_eq!(
            ok("resourceVersion=12345").resource_version,
            ResourceVersion::AtLeast(12345)
        );
        for bad in ["abc", "-1", "+1", " 1", "1.5", "99999999999999999999"] {
            let e = ListOptions::from_query(&format!(
                "resourceVersion={}",
                form_urlencoded::byte_serialize(bad.as_bytes()).collect::<String>()
            ))
            .unwrap_err();
            assert_eq!(e.code(), 400, "{bad}");
            assert!(
                e.message.starts_with("invalid resource version: "),
                "{}",
                e.message
            );
        }
        assert_eq!(ResourceVersion::AtLeast(7).to_string(), "7");
        assert_eq!(ResourceVersion::Any.as_u64(), Some(0));
        assert_eq!(ResourceVersion::Unset.as_u64(), None);
    }

    #[test]
    fn selectors_are_decoded_and_parsed() {
        let o =
            ok("labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&fieldSelector=spec.nodeName%3Dn1");
        assert_eq!(o.label_selector.to_string(), "app=web,tier in (a,b)");
        assert_eq!(o.field_selector.requires_exact("spec.nodeName"), Some("n1"));
        let e = err("labelSelector=a+in+x");
        assert_eq!(e.code(), 400);
        assert!(e.message.contains("labelSelector"), "{}", e.message);
        let e = err("fieldSelector=oops");
        assert_eq!(e.code(), 400);
        assert!(e.message.contains("fieldSelector"), "{}", e.message);
        // Unknown fields pass here; the handler validates against the resource.
        assert!(!ok("fieldSelector=foo%3Dbar").field_selector.is_empty());
    }

    #[test]
    fn limits_and_timeouts() {
        assert_eq!(ok("limit=500").limit, Some(500));
        assert_eq!(ok("limit=0").limit, None);
        assert_eq!(ok("limit=").limit, None);
        // kube-apiserver pages only for a positive limit.
        assert_eq!(ok("limit=-1").limit, None);
        assert_eq!(ok("limit=-9223372036854775808").limit, None);
        assert_eq!(ok("limit=7").limit, Some(7));
        assert_eq!(ok("timeoutSeconds=0").timeout_seconds, Some(0));
        for bad in [
            "limit=-",
            "limit=--1",
            "limit=-1x",
            "limit=-9223372036854775809",
        ] {
            let e = err(bad);
            assert_eq!(e.code(), 400, "{bad}");
            assert!(e.message.contains("must be an integer"), "{}", e.message);
        }
        for bad in [
            "limit=abc",
            "limit=1e3",
            "timeoutSeconds=-5",
            "timeoutSeconds=x",
        ] {
            let e = err(bad);
            assert_eq!(e.code(), 400, "{bad}");
            assert!(
                e.message.contains("must be a non-negative integer"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn ignored_parameters() {
        let o = ok(
            "pretty=true&fieldManager=kubectl&fieldValidation=Strict&dryRun=All\
                    &propagationPolicy=Background&gracePeriodSeconds=abc&orphanDependents=x\
                    &includeObject=Object&timeout=32s&somethingNew=1&limit=5",
        );
        assert_eq!(o.limit, Some(5));
    }

    #[test]
    fn continue_tokens() {
        let t = ContinueToken::after(9, "default/a");
        let o = ok(&format!("limit=2&continue={}", t.encode()));
        assert_eq!(o.continue_token, Some(t));
        assert_eq!(ok("continue=").continue_token, None);
        let e = err("continue=garbage!");
        assert_eq!(e.code(), 400);
        assert!(
            e.message.starts_with("invalid continue token"),
            "{}",
            e.message
        );
        // Only unset or "0" may come with continue on a list.
        ok(&format!("continue={}&resourceVersion=0", token(9)));
        let e = err(&format!("continue={}&resourceVersion=9", token(9)));
        assert_eq!(e.code(), 400);
        assert_eq!(
            e.message,
            "specifying resource version is not allowed when using continue"
        );
    }

    #[test]
    fn list_resource_version_match_rules() {
        let o = ok("resourceVersion=5&resourceVersionMatch=Exact");
        assert_eq!(o.resource_version_match, Some(ResourceVersionMatch::Exact));
        ok("resourceVersion=0&resourceVersionMatch=NotOlderThan");
        ok("resourceVersionMatch=");

        let e = err("resourceVersionMatch=NotOlderThan");
        assert_eq!(e.code(), 422);
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: \
             resourceVersionMatch is forbidden unless resourceVersion is provided"
        );
        assert_eq!(e.causes[0].field, "resourceVersionMatch");
        assert_eq!(e.causes[0].reason, "FieldValueForbidden");
        assert_eq!(e.details_kind.as_deref(), Some("ListOptions"));
        assert_eq!(e.details_group.as_deref(), Some("meta.k8s.io"));

        let e = err("resourceVersion=0&resourceVersionMatch=Exact");
        assert_eq!(e.code(), 422);
        assert!(
            e.message.contains("forbidden for resourceVersion \"0\""),
            "{}",
            e.message
        );

        let e = err(&format!(
            "resourceVersion=0&resourceVersionMatch=Exact&continue={}",
            token(3)
        ));
        assert_eq!(e.causes.len(), 2);
        assert!(e.message.contains(": ["), "{}", e.message);

        let e = err("resourceVersion=1&resourceVersionMatch=exact");
        assert_eq!(e.code(), 422);
        assert_eq!(e.causes[0].reason, "FieldValueNotSupported");
        assert!(
            e.message.contains("Unsupported value: \"exact\""),
            "{}",
            e.message
        );
    }

    #[test]
    fn send_initial_events_rules() {
        let o = ok("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=1");
        assert_eq!(o.send_initial_events, Some(true));
        let o = ok(
            "watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&resourceVersion=5",
        );
        assert_eq!(o.send_initial_events, Some(false));

        let e = err("sendInitialEvents=true");
        assert_eq!(e.code(), 422);
        assert_eq!(e.causes[0].field, "sendInitialEvents");
        assert!(e.message.contains("forbidden for list"), "{}", e.message);

        let e = err("watch=true&sendInitialEvents=true");
        assert_eq!(e.code(), 422);
        assert!(e
            .message
            .contains("requires setting resourceVersionMatch to NotOlderThan"));

        let e =
            err("watch=true&sendInitialEvents=true&resourceVersionMatch=Exact&resourceVersion=4");
        assert_eq!(e.causes.len(), 2);
    }

    #[test]
    fn watch_resource_version_match_rules() {
        let e = err("watch=true&resourceVersion=4&resourceVersionMatch=NotOlderThan");
        assert_eq!(e.code(), 422);
        assert!(
            e.message.contains("unless sendInitialEvents is provided"),
            "{}",
            e.message
        );
        let e = err(&format!(
            "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&continue={}",
            token(3)
        ));
        assert!(
            e.message.contains("when continue is provided"),
            "{}",
            e.message
        );
        // A watch ignores continue otherwise, even with a resourceVersion.
        ok(&format!(
            "watch=true&resourceVersion=4&continue={}",
            token(3)
        ));
    }

    #[test]
    fn legacy_watch_paths_force_watch() {
        let o = ListOptions::from_watch_query("resourceVersion=3").unwrap();
        assert!(o.is_watch());
        // Rules are checked as for a watch: sendInitialEvents is allowed there.
        ListOptions::from_watch_query("sendInitialEvents=true&resourceVersionMatch=NotOlderThan")
            .unwrap();
        assert!(ListOptions::from_query(
            "sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        )
        .is_err());
    }

    #[test]
    fn to_query_round_trips() {
        let o = ok(&format!(
            "labelSelector=a%3D1&fieldSelector=metadata.name%3Dx%5C%2Cy&limit=3&continue={}&timeoutSeconds=7",
            token(4)
        ));
        assert_eq!(
            o.field_selector.requires_exact("metadata.name"),
            Some("x,y")
        );
        assert_eq!(ok(&o.to_query()), o);
        let w = ok("watch=1&allowWatchBookmarks=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&resourceVersion=8");
        assert_eq!(ok(&w.to_query()), w);
        assert_eq!(ListOptions::default().to_query(), "");
    }

    proptest! {
        #[test]
        fn from_query_never_panics(q in any::<String>()) {
            let _ = ListOptions::from_query(&q);
        }

        #[test]
        fn from_query_never_panics_on_known_names(
            pairs in proptest::collection::vec(
                (
                    prop_oneof![
                        Just("watch"), Just("limit"), Just("resourceVersion"),
                        Just("resourceVersionMatch"), Just("continue"), Just("labelSelector"),
                        Just("fieldSelector"), Just("sendInitialEvents"), Just("timeoutSeconds"),
                        Just("allowWatchBookmarks"),
                    ],
                    "[a-zA-Z0-9=,!()% +-]{0,12}",
                ),
                0..6,
            )
        ) {
            let q = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
            if let Ok(o) = ListOptions::from_query(&q) {
                prop_assert_eq!(ListOptions::from_query(&o.to_query()).unwrap(), o);
            }
        }
    }
}
