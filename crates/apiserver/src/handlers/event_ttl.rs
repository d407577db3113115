//! The time-to-live of events (kube-apiserver's `--event-ttl`, one hour by default), so that
//! events, which every component writes all the time, never grow without bound.
//!
//! kube-apiserver attaches each event to an etcd lease that expires the TTL after its last
//! write. Here a sweep in the background deletes, every [`sweep_interval`], the events whose
//! last activity — the latest of `series.lastObservedTime`, `lastTimestamp`, `eventTime` and
//! `metadata.creationTimestamp` — is at least the TTL ago. Events of both APIs are one
//! object (see [`crate::registry::cohabitation`]), so one sweep over the core events does.
//! An event written again meanwhile is left alone (the delete is conditional on the version
//! that was judged).

use serde_json::Value;
use std::time::Duration;
use storage::{RangeRequest, Storage, StorageError};

/// kube-apiserver's default `--event-ttl`.
pub const DEFAULT_EVENT_TTL: Duration = Duration::from_secs(3600);

/// Events read per page while sweeping. Large, because every range counts the keys to the
/// end of its span (as etcd's does): a sweep costs about pages × events.
const PAGE: usize = 5_000;

/// How often events are swept for a TTL: a quarter of it, between 100 ms and one minute (an
/// event outlives its TTL by at most that much).
pub fn sweep_interval(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_millis(100), Duration::from_secs(60))
}

/// The fields of a stored event that tell its last activity; a sweep reads only these and
/// skips the rest of each event unallocated.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Activity {
    #[serde(default)]
    metadata: Option<Stamps>,
    #[serde(default)]
    series: Option<Stamps>,
    #[serde(default)]
    last_timestamp: Option<Value>,
    #[serde(default)]
    event_time: Option<Value>,
}

/// `metadata.creationTimestamp` or `series.lastObservedTime`, whichever the object holds.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stamps {
    #[serde(default)]
    creation_timestamp: Option<Value>,
    #[serde(default)]
    last_observed_time: Option<Value>,
}

/// The Unix second of a stored event's last activity (its core form, as stored): the latest
/// of `series.lastObservedTime`, `lastTimestamp`, `eventTime` and
/// `metadata.creationTimestamp` that is a readable timestamp. `None` when none is, or when
/// the bytes are not an event object (whose `metadata` and `series` are objects).
pub fn last_activity(stored: &[u8]) -> Option<i64> {
    let a: Activity = serde_json::from_slice(stored).ok()?;
    let at = |v: &Option<Value>| {
        v.as_ref()
            .and_then(Value::as_str)
            .and_then(api::time::parse_rfc3339)
    };
    [
        a.series.as_ref().and_then(|s| at(&s.last_observed_time)),
        at(&a.last_timestamp),
        at(&a.event_time),
        a.metadata.as_ref().and_then(|m| at(&m.creation_timestamp)),
    ]
    .into_iter()
    .flatten()
    .max()
}

/// Whether the stored event `stored` has outlived `ttl` at Unix second `now`. An event
/// without any readable timestamp never expires (it cannot be judged).
pub fn expired(stored: &[u8], now: i64, ttl: Duration) -> bool {
    let ttl = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
    last_activity(stored).is_some_and(|last| last.saturating_add(ttl) <= now)
}

/// Deletes the events below `prefix` (the core events' key prefix) that have outlived `ttl`
/// now. Returns how many were deleted.
///
/// # Errors
/// A storage failure while listing (deletes that lose a race are skipped).
pub async fn sweep(
    storage: &dyn Storage,
    prefix: &str,
    ttl: Duration,
) -> Result<usize, StorageError> {
    let now = api::time::unix_now();
    let end = storage::prefix_end(prefix.as_bytes());
    let mut start = bytes::Bytes::from(prefix.as_bytes().to_vec());
    let mut revision = 0;
    let mut deleted = 0;
    loop {
        let page = storage
            .range(RangeRequest {
                start: start.clone(),
                end: end.clone(),
                revision,
                limit: PAGE,
            })
            .await?;
        revision = page.revision;
        for kv in &page.kvs {
            if !expired(&kv.value, now, ttl) {
                continue;
            }
            match storage.delete(kv.key.clone(), Some(kv.mod_revision)).await {
                Ok(_) => deleted += 1,
                Err(StorageError::NotFound | StorageError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        match page.kvs.last() {
            Some(last) if page.more => {
                let mut next = last.key.to_vec();
                next.push(0);
                start = next.into();
            }
            _ => return Ok(deleted),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;
    use storage::memory::MemoryStorage;

    const T0: &str = "2024-03-01T12:00:00Z";

    fn t0() -> i64 {
        api::time::parse_rfc3339(T0).unwrap()
    }

    #[test]
    fn the_latest_timestamp_counts() {
        let ttl = Duration::from_secs(3600);
        let bytes = |v: Value| serde_json::to_vec(&v).unwrap();
        let created = bytes(json!({"metadata": {"creationTimestamp": T0}}));
        assert!(!expired(&created, t0() + 3599, ttl));
        assert!(expired(&created, t0() + 3600, ttl));
        // A recurring event lives on from its last observation.
        let recurring = bytes(json!({"metadata": {"creationTimestamp": T0, "name": "e"},
            "lastTimestamp": "2024-03-01T12:30:00Z",
            "series": {"count": 3, "lastObservedTime": "2024-03-01T12:45:00.123456Z"},
            "eventTime": "2024-03-01T12:00:00.000000Z", "message": "x"}));
        assert_eq!(last_activity(&recurring), Some(t0() + 45 * 60));
        assert!(!expired(&recurring, t0() + 3600, ttl));
        assert!(expired(&recurring, t0() + 45 * 60 + 3600, ttl));
        assert!(!expired(&bytes(json!({"metadata": {}})), i64::MAX, ttl));
        // A timestamp that is not a string, or null, is no activity; the others still count.
        let odd = bytes(json!({"metadata": {"creationTimestamp": 5},
            "eventTime": null, "series": null, "lastTimestamp": T0}));
        assert_eq!(last_activity(&odd), Some(t0()));
        assert_eq!(last_activity(b"[1]"), None);
        assert_eq!(last_activity(b"{\"metadata\": 3}"), None);
    }

    #[test]
    fn intervals_follow_the_ttl() {
        assert_eq!(sweep_interval(DEFAULT_EVENT_TTL), Duration::from_secs(60));
        assert_eq!(
            sweep_interval(Duration::from_secs(2)),
            Duration::from_millis(500)
        );
        assert_eq!(sweep_interval(Duration::ZERO), Duration::from_millis(100));
    }

    #[tokio::test]
    async fn a_sweep_deletes_only_expired_events_across_pages() {
        let s: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let now = api::time::unix_now();
        let old = api::time::format_rfc3339(now - 7200);
        let fresh = api::time::format_rfc3339(now);
        for i in 0..(PAGE + 10) {
            let at = if i % 2 == 0 { &old } else { &fresh };
            let v = json!({"metadata": {"name": format!("e{i}"), "creationTimestamp": at}});
            s.create(
                format!("/registry/events/default/e{i:04}").into(),
                serde_json::to_vec(&v).unwrap().into(),
            )
            .await
            .unwrap();
        }
        s.create(
            "/registry/eventsx/default/old".into(),
            serde_json::to_vec(&json!({"metadata": {"creationTimestamp": old}}))
                .unwrap()
                .into(),
        )
        .await
        .unwrap();
        let n = sweep(s.as_ref(), "/registry/events/", DEFAULT_EVENT_TTL)
            .await
            .unwrap();
        assert_eq!(n, PAGE.div_ceil(2) + 5);
        let left = s
            .range(RangeRequest::prefix(&b"/registry/events/"[..]))
            .await
            .unwrap();
        assert_eq!(left.kvs.len(), PAGE / 2 + 5);
        assert!(s
            .get(b"/registry/eventsx/default/old")
            .await
            .unwrap()
            .is_some());
    }
}
