//! The parameter builders of the verbs: [`ListParams`], [`WatchParams`], [`PostParams`],
//! [`PatchParams`] (with [`PatchType`]) and [`DeleteParams`] (with [`PropagationPolicy`]
//! and [`Preconditions`]), each rendering its query string or request body.

use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

use api::list_options::ResourceVersionMatch;

use super::error::Error;
use super::selection::Selection;
use super::verbs::encode;

/// The page size [`Client::list_all`](super::Client::list_all) uses when
/// [`ListParams::limit`] is unset (kubectl's).
pub const DEFAULT_PAGE_SIZE: u32 = 500;

/// The parameters of a list request. `Default` lists everything at the most recent version
/// in one page (or pages of [`DEFAULT_PAGE_SIZE`] with `list_all`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct ListParams {
    /// `labelSelector` and `fieldSelector`: which objects are listed (see [`Selection`]).
    pub selection: Selection,
    /// `limit`: the maximum number of items per page.
    pub limit: Option<u32>,
    /// `continue`: the opaque token of the previous page.
    pub continue_token: Option<String>,
    /// `resourceVersion`: unset = most recent; `"0"` = any (cached); `"N"` = not older
    /// than N.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<u32>,
}

impl ListParams {
    /// Sets the label selector, replacing any set before (`""` = none): [`Selection::labels`].
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.selection = std::mem::take(&mut self.selection).labels(selector);
        self
    }

    /// Sets the field selector, replacing any set before (`""` = none): [`Selection::fields`].
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.selection = std::mem::take(&mut self.selection).fields(selector);
        self
    }

    /// Sets both selectors at once, replacing any set before.
    pub fn selection(mut self, selection: Selection) -> Self {
        self.selection = selection;
        self
    }

    /// Sets the page size.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Sets the continue token.
    pub fn continue_token(mut self, token: impl Into<String>) -> Self {
        self.continue_token = Some(token.into());
        self
    }

    /// Sets `resourceVersion`.
    pub fn resource_version(mut self, rv: impl Into<String>) -> Self {
        self.resource_version = Some(rv.into());
        self
    }

    /// `resourceVersion=0`: any version, possibly stale, served from the watch cache.
    pub fn any_version(self) -> Self {
        self.resource_version("0")
    }

    /// Sets `resourceVersionMatch`.
    pub fn resource_version_match(mut self, m: ResourceVersionMatch) -> Self {
        self.resource_version_match = Some(m);
        self
    }

    /// The query string (without `?`).
    pub fn to_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        self.selection.append_to_query(&mut q);
        if let Some(l) = self.limit.filter(|&l| l > 0) {
            q.append_pair("limit", &l.to_string());
        }
        if let Some(c) = self.continue_token.as_deref().filter(|c| !c.is_empty()) {
            q.append_pair("continue", c);
        }
        if let Some(rv) = &self.resource_version {
            q.append_pair("resourceVersion", rv);
        }
        if let Some(m) = self.resource_version_match {
            q.append_pair("resourceVersionMatch", m.as_str());
        }
        if let Some(t) = self.timeout_seconds {
            q.append_pair("timeoutSeconds", &t.to_string());
        }
        q.finish()
    }
}

/// The parameters of a watch request. `Default` watches from "now" (current state as ADDED
/// events first), with bookmarks, no server timeout requested, no idle timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct WatchParams {
    /// `labelSelector` and `fieldSelector`: which objects are watched (see [`Selection`]).
    pub selection: Selection,
    /// `resourceVersion`: unset/`"0"` = current state first; `"N"` = changes after N.
    pub resource_version: Option<String>,
    /// `allowWatchBookmarks` (default true).
    pub allow_bookmarks: bool,
    /// `timeoutSeconds`: the server ends the watch cleanly after this long.
    pub timeout_seconds: Option<u32>,
    /// `sendInitialEvents=true` with `resourceVersionMatch=NotOlderThan`: a streaming list,
    /// ending its initial ADDED events with a bookmark annotated
    /// `k8s.io/initial-events-end`.
    pub send_initial_events: bool,
    /// Client side: end the stream with [`Error::IdleTimeout`] if no bytes arrive for this
    /// long. With bookmarks (about one a minute) a healthy watch is never idle long.
    pub idle_timeout: Option<Duration>,
    /// Client side: the longest event line (or protobuf frame) accepted (default 64 MiB).
    pub max_line: Option<usize>,
}

impl Default for WatchParams {
    fn default() -> Self {
        WatchParams {
            selection: Selection::default(),
            resource_version: None,
            allow_bookmarks: true,
            timeout_seconds: None,
            send_initial_events: false,
            idle_timeout: None,
            max_line: None,
        }
    }
}

impl WatchParams {
    /// Sets the label selector, replacing any set before (`""` = none): [`Selection::labels`].
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.selection = std::mem::take(&mut self.selection).labels(selector);
        self
    }

    /// Sets the field selector, replacing any set before (`""` = none): [`Selection::fields`].
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.selection = std::mem::take(&mut self.selection).fields(selector);
        self
    }

    /// Sets both selectors at once, replacing any set before.
    pub fn selection(mut self, selection: Selection) -> Self {
        self.selection = selection;
        self
    }

    /// Watches changes after `rv`.
    pub fn resource_version(mut self, rv: impl Into<String>) -> Self {
        self.resource_version = Some(rv.into());
        self
    }

    /// Sets `timeoutSeconds`.
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.timeout_seconds = Some(seconds);
        self
    }

    /// Turns bookmarks off.
    pub fn disable_bookmarks(mut self) -> Self {
        self.allow_bookmarks = false;
        self
    }

    /// Asks for a streaming list (see [`send_initial_events`](Self::send_initial_events)).
    pub fn streaming_list(mut self) -> Self {
        self.send_initial_events = true;
        self
    }

    /// Sets the client-side idle timeout.
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.idle_timeout = Some(d);
        self
    }

    /// The query string (without `?`), starting with `watch=true`.
    pub fn to_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("watch", "true");
        self.selection.append_to_query(&mut q);
        if self.allow_bookmarks {
            q.append_pair("allowWatchBookmarks", "true");
        }
        if let Some(rv) = &self.resource_version {
            q.append_pair("resourceVersion", rv);
        }
        if self.send_initial_events {
            q.append_pair("sendInitialEvents", "true");
            q.append_pair(
                "resourceVersionMatch",
                ResourceVersionMatch::NotOlderThan.as_str(),
            );
        }
        if let Some(t) = self.timeout_seconds {
            q.append_pair("timeoutSeconds", &t.to_string());
        }
        q.finish()
    }
}

/// Query parameters of create and replace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct PostParams {
    /// `dryRun=All`: validate without persisting.
    pub dry_run: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
}

impl PostParams {
    /// The query string (without `?`).
    pub fn to_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if self.dry_run {
            q.append_pair("dryRun", "All");
        }
        if let Some(m) = &self.field_manager {
            q.append_pair("fieldManager", m);
        }
        q.finish()
    }
}

/// The format of a patch body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// JSON merge patch (RFC 7386): `application/merge-patch+json`.
    Merge,
    /// JSON patch (RFC 6902), an array of operations: `application/json-patch+json`.
    Json,
    /// Kubernetes strategic merge patch: `application/strategic-merge-patch+json`.
    Strategic,
    /// Server-side apply (needs a field manager): `application/apply-patch+yaml`.
    Apply,
}

impl PatchType {
    /// The `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Json => "application/json-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

/// Query parameters of a patch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct PatchParams {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldManager` (required by server-side apply).
    pub field_manager: Option<String>,
    /// `force=true` (server-side apply: take over conflicting fields).
    pub force: bool,
}

impl PatchParams {
    /// Parameters for server-side apply as `manager`.
    pub fn apply(manager: impl Into<String>) -> Self {
        PatchParams {
            field_manager: Some(manager.into()),
            ..PatchParams::default()
        }
    }

    /// The query string (without `?`).
    pub fn to_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if self.dry_run {
            q.append_pair("dryRun", "All");
        }
        if let Some(m) = &self.field_manager {
            q.append_pair("fieldManager", m);
        }
        if self.force {
            q.append_pair("force", "true");
        }
        q.finish()
    }
}

/// `propagationPolicy` of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum PropagationPolicy {
    /// Dependents are orphaned.
    Orphan,
    /// Dependents are deleted in the background.
    Background,
    /// The owner waits for its dependents (foreground deletion).
    Foreground,
}

/// Conditions a delete must meet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    /// The object's uid must be this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The object's resourceVersion must be this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

/// The `DeleteOptions` of a delete, sent as the request body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct DeleteParams {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<u32>,
    /// `propagationPolicy`.
    pub propagation_policy: Option<PropagationPolicy>,
    /// `preconditions`.
    pub preconditions: Option<Preconditions>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireDeleteOptions<'a> {
    kind: &'static str,
    api_version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    grace_period_seconds: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    propagation_policy: Option<PropagationPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preconditions: Option<&'a Preconditions>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    dry_run: Vec<&'static str>,
}

impl DeleteParams {
    pub(super) fn body(&self) -> Result<Bytes, Error> {
        encode(&WireDeleteOptions {
            kind: "DeleteOptions",
            api_version: "v1",
            grace_period_seconds: self.grace_period_seconds,
            propagation_policy: self.propagation_policy,
            preconditions: self.preconditions.as_ref(),
            dry_run: if self.dry_run {
                vec!["All"]
            } else {
                Vec::new()
            },
        })
    }

    pub(super) fn dry_run_query(&self) -> String {
        if self.dry_run {
            "dryRun=All".to_string()
        } else {
            String::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_query_strings() {
        assert_eq!(ListParams::default().to_query(), "");
        let q = ListParams::default()
            .labels("app in (a,b),tier!=db")
            .fields("spec.nodeName=n1")
            .limit(2)
            .continue_token("abc=")
            .to_query();
        assert_eq!(
            q,
            "labelSelector=app+in+%28a%2Cb%29%2Ctier%21%3Ddb&fieldSelector=spec.nodeName%3Dn1&limit=2&continue=abc%3D"
        );
        // What the server's parser makes of it.
        let o =
            api::list_options::ListOptions::from_query(&q.replace("continue=abc%3D", "")).unwrap();
        assert_eq!(o.limit, Some(2));
        assert_eq!(o.field_selector.requires_exact("spec.nodeName"), Some("n1"));
        let q = ListParams::default()
            .resource_version("7")
            .resource_version_match(ResourceVersionMatch::Exact)
            .to_query();
        assert_eq!(q, "resourceVersion=7&resourceVersionMatch=Exact");
    }

    #[test]
    fn watch_query_strings() {
        assert_eq!(
            WatchParams::default().to_query(),
            "watch=true&allowWatchBookmarks=true"
        );
        let w = WatchParams::default()
            .resource_version("12")
            .timeout(30)
            .labels("a=b")
            .disable_bookmarks();
        assert_eq!(
            w.to_query(),
            "watch=true&labelSelector=a%3Db&resourceVersion=12&timeoutSeconds=30"
        );
        // The selector builders and `selection` set the same field.
        let w = WatchParams::default().labels("a=b").fields("c=d");
        assert_eq!(
            w.selection,
            Selection::default().fields("c=d").labels("a=b")
        );
        assert_eq!(w.selection(Selection::default()), WatchParams::default());
        let w = WatchParams::default().streaming_list();
        let o = api::list_options::ListOptions::from_query(&w.to_query()).unwrap();
        assert!(o.watch && o.allow_watch_bookmarks);
        assert_eq!(o.send_initial_events, Some(true));
        assert_eq!(
            o.resource_version_match,
            Some(ResourceVersionMatch::NotOlderThan)
        );
    }

    #[test]
    fn write_params() {
        assert_eq!(PostParams::default().to_query(), "");
        let p = PostParams {
            dry_run: true,
            field_manager: Some("me".into()),
        };
        assert_eq!(p.to_query(), "dryRun=All&fieldManager=me");
        let mut a = PatchParams::apply("ctl");
        a.force = true;
        assert_eq!(a.to_query(), "fieldManager=ctl&force=true");
        let d = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: None,
                resource_version: Some("5".into()),
            }),
            ..DeleteParams::default()
        };
        let v: serde_json::Value = serde_json::from_slice(&d.body().unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground","preconditions":{"resourceVersion":"5"}})
        );
        assert_eq!(
            PatchType::Strategic.content_type(),
            "application/strategic-merge-patch+json"
        );
    }
}
