//! WATCH: a watch registered with the watch cache, for the transport to stream.

use super::state::ApiServer;
use super::{build_filter, RequestInfo};
use crate::cacher::cacher::WatchStart;
use crate::cacher::WatchRegistration;
use api::list_options::{ListOptions, ResourceVersion};
use api::Status;
use std::time::{Duration, Instant};

/// The longest watch a `timeoutSeconds` can ask for.
const MAX_WATCH_TIMEOUT_SECONDS: u64 = 365 * 24 * 3600;

/// Without `timeoutSeconds`, a watch lasts a random 30–60 minutes (as kube-apiserver's
/// `--min-request-timeout` spreading does), so reconnections do not synchronize.
fn default_timeout() -> Duration {
    let jitter = uuid::Uuid::new_v4().as_u128() % 1800;
    Duration::from_secs(1800 + jitter as u64)
}

/// Handles a watch request (`?watch=true` or the legacy `/watch/` path): checks it, picks
/// where the watch starts and how long it lasts, and registers it with the resource's
/// cacher. The transport streams the registration (see `server::watch_response`).
pub async fn watch(
    srv: &ApiServer,
    req: &RequestInfo,
    opts: &ListOptions,
) -> Result<WatchRegistration, Status> {
    let cacher = srv.cacher(req.info)?;
    let mut filter = build_filter(req, opts)?;
    if let Some(name) = &req.name {
        // Legacy `/watch/namespaces/{ns}/{resource}/{name}`: a watch of one object.
        let sel = format!("metadata.name={}", api::fields::escape_value(name));
        let extra = api::fields::FieldSelector::parse(&sel)
            .map_err(|e| Status::bad_request(e.to_string()))?;
        if !filter.fields.is_empty() {
            return Err(Status::bad_request(
                "a field selector cannot be combined with a named watch",
            ));
        }
        filter.fields = extra;
    }
    let start = match (opts.send_initial_events, opts.resource_version) {
        (Some(true), ResourceVersion::AtLeast(n)) => WatchStart::InitialEvents(n),
        (Some(true), ResourceVersion::Any) => WatchStart::InitialEvents(0),
        (Some(true), ResourceVersion::Unset) => {
            WatchStart::InitialEvents(cacher_consistent_rv(srv, req).await?)
        }
        (Some(false), ResourceVersion::Unset | ResourceVersion::Any) => {
            // A cache loaded on demand has no version until it has loaded.
            cacher.wait_until_fresh(0).await?;
            WatchStart::After(cacher.resource_version())
        }
        (_, ResourceVersion::Unset) => WatchStart::CurrentState { consistent: true },
        (_, ResourceVersion::Any) => WatchStart::CurrentState { consistent: false },
        (_, ResourceVersion::AtLeast(n)) => WatchStart::After(n),
    };
    // 0 is "the server picks", as in kube-apiserver; beyond a year is a year (a deadline
    // past what `Instant` can hold would otherwise panic).
    let timeout = match opts.timeout_seconds {
        None | Some(0) => default_timeout(),
        Some(s) => Duration::from_secs(s.min(MAX_WATCH_TIMEOUT_SECONDS)),
    };
    let deadline = Instant::now() + timeout;
    cacher
        .watch(filter, start, opts.allow_watch_bookmarks, deadline)
        .await
}

async fn cacher_consistent_rv(srv: &ApiServer, req: &RequestInfo) -> Result<u64, Status> {
    srv.cacher(req.info)?.wait_consistent().await
}
