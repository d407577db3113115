//! The watch task behind [`crate::EtcdStorage`]'s `watch`: one etcd watch per storage watch,
//! re-established transparently when the connection drops.
//!
//! Contract kept (the storage crate's): every change under the prefix with revision > `after`
//! is delivered exactly once, in revision order, with previous values; one message per etcd
//! revision (one commit); idle periods bring `Progress` messages when etcd sends progress
//! notifications (at its `--experimental-watch-progress-notify-interval`, 10 min by default:
//! run etcd with a few seconds if caches must advance while their keys are idle).
//!
//! Faults: if the etcd stream errors or ends (etcd restarted, connection lost, leader lost
//! and the server cancelled the watch), the task re-opens it just after the last delivered
//! revision, with backoff, forever, and drops anything at or below the last delivered
//! revision, so nothing is duplicated or skipped. It ends the stream with an error only when
//! it cannot continue: the revision it needs was compacted ([`StorageError::Compacted`]) or
//! the consumer is too slow ([`StorageError::WatchOverflow`], once the queue holds
//! [`storage::WATCH_CHANNEL_CAPACITY`] messages).

use crate::keys::{from_etcd, to_etcd, Keyspace};
use bytes::Bytes;
use etcd_client::{EventType, WatchClient, WatchOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use storage::{Event, EventKind, KeyValue, Revision, StorageError, WatchMessage};
use tokio::sync::mpsc;

/// First pause before re-opening a broken watch; doubles up to [`MAX_REOPEN_BACKOFF`].
const FIRST_REOPEN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_REOPEN_BACKOFF: Duration = Duration::from_secs(2);

/// The sending side of a storage watch. One message slot more than
/// [`storage::WATCH_CHANNEL_CAPACITY`] is allocated and kept free for the overflow error, so
/// the consumer always learns why its stream ended.
pub(crate) type Tx = mpsc::Sender<Result<WatchMessage, StorageError>>;

/// The channel capacity for a storage watch (see [`Tx`]).
pub(crate) const CHANNEL_CAPACITY: usize = storage::WATCH_CHANNEL_CAPACITY + 1;

/// Why opening an etcd watch failed.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The start revision is below etcd's compacted revision (carried).
    Compacted(Revision),
    /// Anything transient; retry later.
    Transient(String),
}

/// An open etcd watch. The request sender is kept so that the gRPC stream stays open.
pub(crate) struct Opened {
    _requests: etcd_client::WatchRequestSender,
    responses: etcd_client::WatchResponseStream,
}

impl Opened {
    /// Waits up to `timeout` for etcd to say this watch's start was compacted; returns the
    /// compacted revision, or `None` (no such notice, stream broke).
    pub(crate) async fn next_compaction(&mut self, timeout: Duration) -> Option<Revision> {
        let wait = async {
            loop {
                match self.responses.message().await {
                    Ok(Some(resp)) if resp.compact_revision() > 0 => {
                        return Some(from_etcd(resp.compact_revision()))
                    }
                    Ok(Some(resp)) if !resp.canceled() => continue,
                    _ => return None,
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.ok().flatten()
    }
}

/// Opens an etcd watch on `[start, end)` for changes with revision > `after`, and
/// waits (up to `timeout`) until etcd confirms it was created.
pub(crate) async fn open(
    client: &WatchClient,
    start: &[u8],
    end: &[u8],
    after: Revision,
    timeout: Duration,
) -> Result<Opened, OpenError> {
    let mut client = client.clone();
    let opts = WatchOptions::new()
        .with_range(end.to_vec())
        .with_start_revision(to_etcd(after).saturating_add(1))
        .with_prev_key()
        .with_progress_notify();
    let opening = async {
        let stream = client
            .watch(start.to_vec(), Some(opts))
            .await
            .map_err(|e| OpenError::Transient(e.to_string()))?;
        let (requests, mut responses) = stream.split();
        loop {
            match responses.message().await {
                Ok(Some(resp)) if resp.compact_revision() > 0 => {
                    return Err(OpenError::Compacted(from_etcd(resp.compact_revision())))
                }
                Ok(Some(resp)) if resp.canceled() => {
                    return Err(OpenError::Transient(format!(
                        "watch cancelled by etcd: {}",
                        resp.cancel_reason()
                    )))
                }
                Ok(Some(resp)) if resp.created() => {
                    return Ok(Opened {
                        _requests: requests,
                        responses,
                    })
                }
                // Nothing else comes before "created"; ignore anything unexpected.
                Ok(Some(_)) => continue,
                Ok(None) => return Err(OpenError::Transient("watch stream closed".into())),
                Err(e) => return Err(OpenError::Transient(e.to_string())),
            }
        }
    };
    match tokio::time::timeout(timeout, opening).await {
        Ok(r) => r,
        Err(_) => Err(OpenError::Transient(format!(
            "etcd did not confirm the watch within {timeout:?}"
        ))),
    }
}

/// Everything the watch task needs.
pub(crate) struct WatchTask {
    pub(crate) client: WatchClient,
    pub(crate) keyspace: Keyspace,
    /// The etcd range watched.
    pub(crate) start: Vec<u8>,
    pub(crate) end: Vec<u8>,
    /// The last revision delivered (or the watch's `after` before any delivery).
    pub(crate) last: Revision,
    /// The highest progress revision delivered.
    pub(crate) last_progress: Revision,
    pub(crate) tx: Tx,
    /// The storage's learned compacted revision, updated when etcd reports one.
    pub(crate) compacted: Arc<AtomicU64>,
    /// How long to wait for etcd to confirm a re-opened watch.
    pub(crate) open_timeout: Duration,
}

/// What to do after one etcd response.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    Continue,
    Reopen(String),
    Stop,
}

impl WatchTask {
    /// Forwards `first` (an already opened etcd watch), then re-opens as needed, until the
    /// consumer goes away or the stream has to end with an error.
    pub(crate) async fn run(mut self, first: Opened) {
        let mut current = Some(first);
        // The wait before the next re-open. It keeps growing across watches that deliver
        // nothing: an etcd that keeps ending (or garbling) a watch at once must not be asked
        // again in a busy loop.
        let mut wait = Duration::ZERO;
        loop {
            let mut opened = match current.take() {
                Some(o) => o,
                None => match self.reopen(&mut wait).await {
                    Some(o) => o,
                    None => return,
                },
            };
            let delivered_before = self.last;
            let reason = loop {
                let msg = tokio::select! {
                    _ = self.tx.closed() => return,
                    m = opened.responses.message() => m,
                };
                match msg {
                    Ok(Some(resp)) => match self.handle(resp) {
                        Next::Continue => {}
                        Next::Reopen(reason) => break reason,
                        Next::Stop => return,
                    },
                    Ok(None) => break "etcd closed the watch stream".to_string(),
                    Err(e) => break e.to_string(),
                }
            };
            if self.last > delivered_before {
                wait = Duration::ZERO;
            }
            tracing::warn!(
                after = self.last,
                %reason,
                ?wait,
                "etcd watch broke; re-opening from the last delivered revision"
            );
        }
    }

    /// Re-opens the etcd watch after `self.last`: waits `wait` first, then tries, growing
    /// `wait` (see [`next_backoff`]) after every attempt, failed or not, so the caller can
    /// carry it over when the re-opened watch delivers nothing either. `None` when the
    /// stream has ended (compacted, or the consumer left).
    async fn reopen(&mut self, wait: &mut Duration) -> Option<Opened> {
        let mut attempt = 0u32;
        loop {
            if !wait.is_zero() {
                tokio::select! {
                    _ = self.tx.closed() => return None,
                    _ = tokio::time::sleep(*wait) => {}
                }
            }
            if self.tx.is_closed() {
                return None;
            }
            attempt += 1;
            *wait = next_backoff(*wait);
            match open(
                &self.client,
                &self.start,
                &self.end,
                self.last,
                self.open_timeout,
            )
            .await
            {
                Ok(o) => {
                    tracing::info!(after = self.last, attempt, "etcd watch re-opened");
                    return Some(o);
                }
                Err(OpenError::Compacted(compacted)) => {
                    self.fail_compacted(compacted);
                    return None;
                }
                Err(OpenError::Transient(reason)) => {
                    tracing::warn!(after = self.last, attempt, %reason, "re-opening the etcd watch failed; retrying");
                }
            }
        }
    }

    /// Ends the stream with [`StorageError::Compacted`].
    fn fail_compacted(&mut self, compacted: Revision) {
        self.compacted.fetch_max(compacted, Ordering::SeqCst);
        let _ = self.tx.try_send(Err(StorageError::Compacted {
            requested: self.last,
            compacted,
        }));
    }

    /// Handles one etcd watch response.
    fn handle(&mut self, resp: etcd_client::WatchResponse) -> Next {
        if resp.compact_revision() > 0 {
            self.fail_compacted(from_etcd(resp.compact_revision()));
            return Next::Stop;
        }
        if resp.canceled() {
            return Next::Reopen(format!("watch cancelled by etcd: {}", resp.cancel_reason()));
        }
        if resp.created() {
            return Next::Continue;
        }
        if resp.events().is_empty() {
            let Some(rev) = resp.header().map(|h| from_etcd(h.revision())) else {
                return Next::Continue;
            };
            if rev > self.last && rev > self.last_progress {
                self.last_progress = rev;
                if !self.send(WatchMessage::Progress(rev)) {
                    return Next::Stop;
                }
            }
            return Next::Continue;
        }
        if !in_revision_order(resp.events()) {
            // Delivering part of it could skip the older events for good; a re-open from
            // the last delivered revision has etcd send them again, in order.
            return Next::Reopen("etcd sent events out of revision order".to_string());
        }
        for batch in batches(&self.keyspace, resp.events(), self.last) {
            let Some(rev) = batch.last().map(|e| e.revision) else {
                continue;
            };
            if !self.send(WatchMessage::Events(batch)) {
                return Next::Stop;
            }
            self.last = rev;
        }
        Next::Continue
    }

    /// Queues one message; false if the stream must end (consumer gone, or too slow — then
    /// the overflow error goes into the slot kept for it).
    fn send(&mut self, msg: WatchMessage) -> bool {
        if self.tx.capacity() <= 1 {
            tracing::warn!(after = self.last, "storage watcher fell behind; closing it");
            let _ = self.tx.try_send(Err(StorageError::WatchOverflow));
            return false;
        }
        self.tx.try_send(Ok(msg)).is_ok()
    }
}

/// The wait after `previous`: doubled, from [`FIRST_REOPEN_BACKOFF`] up to
/// [`MAX_REOPEN_BACKOFF`].
fn next_backoff(previous: Duration) -> Duration {
    (previous * 2).clamp(FIRST_REOPEN_BACKOFF, MAX_REOPEN_BACKOFF)
}

/// Whether the revisions of `events` never decrease (as etcd promises; events without a key
/// are not looked at).
fn in_revision_order(events: &[etcd_client::Event]) -> bool {
    let mut revisions = events
        .iter()
        .filter_map(|e| e.kv())
        .map(|kv| kv.mod_revision());
    let Some(mut prev) = revisions.next() else {
        return true;
    };
    revisions.all(|r| {
        let ordered = r >= prev;
        prev = r;
        ordered
    })
}

/// Converts etcd events to storage events, one batch per revision, dropping events at or
/// below `last` (already delivered before a re-open) and events etcd sent without a key.
pub(crate) fn batches(
    keyspace: &Keyspace,
    events: &[etcd_client::Event],
    last: Revision,
) -> Vec<Vec<Event>> {
    let mut out: Vec<Vec<Event>> = Vec::new();
    for ev in events {
        let Some(kv) = ev.kv() else {
            tracing::warn!("etcd watch event without a key; ignored");
            continue;
        };
        // etcd-client's `event_type` panics on a type it does not know.
        if !matches!(ev.0.r#type, 0 | 1) {
            tracing::warn!(
                event_type = ev.0.r#type,
                "etcd watch event of an unknown type; ignored"
            );
            continue;
        }
        let Some(event) = convert(keyspace, ev.event_type(), kv, ev.prev_kv()) else {
            continue;
        };
        if event.revision <= last {
            continue;
        }
        match out.last_mut() {
            Some(batch) if batch.last().is_some_and(|e| e.revision == event.revision) => {
                batch.push(event)
            }
            _ => out.push(vec![event]),
        }
    }
    out
}

/// One etcd event as a storage event. A put whose create and mod revisions are equal is a
/// create; a delete's key state is a tombstone at the deletion's revision, with the last
/// state (from etcd's prev_kv) as `prev`.
pub(crate) fn convert(
    keyspace: &Keyspace,
    kind: EventType,
    kv: &etcd_client::KeyValue,
    prev: Option<&etcd_client::KeyValue>,
) -> Option<Event> {
    let revision = from_etcd(kv.mod_revision());
    let prev = prev.map(|p| key_value(keyspace, p));
    match kind {
        EventType::Put if kv.create_revision() == kv.mod_revision() => Some(Event {
            kind: EventKind::Create,
            revision,
            kv: key_value(keyspace, kv),
            prev: None,
        }),
        EventType::Put => {
            if prev.is_none() {
                tracing::warn!(
                    key = %String::from_utf8_lossy(kv.key()),
                    revision,
                    "etcd update event without its previous value (compacted?)"
                );
            }
            Some(Event {
                kind: EventKind::Update,
                revision,
                kv: key_value(keyspace, kv),
                prev,
            })
        }
        EventType::Delete => Some(Event {
            kind: EventKind::Delete,
            revision,
            kv: KeyValue {
                key: keyspace.strip(kv.key()),
                value: Bytes::new(),
                create_revision: 0,
                mod_revision: revision,
                version: 0,
            },
            prev,
        }),
    }
}

/// A borrowed etcd key-value as a storage one (copies key and value).
pub(crate) fn key_value(keyspace: &Keyspace, kv: &etcd_client::KeyValue) -> KeyValue {
    KeyValue {
        key: keyspace.strip(kv.key()),
        value: Bytes::copy_from_slice(kv.value()),
        create_revision: from_etcd(kv.create_revision()),
        mod_revision: from_etcd(kv.mod_revision()),
        version: u64::try_from(kv.version()).unwrap_or(0),
    }
}

/// An owned etcd key-value as a storage one (no copy of key or value).
pub(crate) fn key_value_owned(keyspace: &Keyspace, kv: etcd_client::KeyValue) -> KeyValue {
    let create_revision = from_etcd(kv.create_revision());
    let mod_revision = from_etcd(kv.mod_revision());
    let version = u64::try_from(kv.version()).unwrap_or(0);
    let (key, value) = kv.into_key_value();
    KeyValue {
        key: keyspace.strip_owned(key),
        value: Bytes::from(value),
        create_revision,
        mod_revision,
        version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_client::proto::{PbEvent, PbKeyValue, PbResponseHeader, PbWatchResponse};

    fn pkv(key: &str, value: &str, create: i64, modr: i64, version: i64) -> PbKeyValue {
        PbKeyValue {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            create_revision: create,
            mod_revision: modr,
            version,
            lease: 0,
        }
    }

    fn put(kv: PbKeyValue, prev: Option<PbKeyValue>) -> etcd_client::Event {
        etcd_client::Event(PbEvent {
            r#type: 0,
            kv: Some(kv),
            prev_kv: prev,
        })
    }

    fn del(key: &str, rev: i64, prev: PbKeyValue) -> etcd_client::Event {
        etcd_client::Event(PbEvent {
            r#type: 1,
            kv: Some(pkv(key, "", 0, rev, 0)),
            prev_kv: Some(prev),
        })
    }

    fn response(events: Vec<etcd_client::Event>, header_rev: i64) -> etcd_client::WatchResponse {
        etcd_client::WatchResponse(PbWatchResponse {
            header: Some(PbResponseHeader {
                revision: header_rev,
                ..Default::default()
            }),
            events: events.into_iter().map(|e| e.0).collect(),
            ..Default::default()
        })
    }

    #[test]
    fn converts_create_update_delete_with_namespace() {
        let ks = Keyspace::new("/ns");
        let evs = vec![
            put(pkv("/ns/a", "1", 5, 5, 1), None),
            put(pkv("/ns/a", "2", 5, 6, 2), Some(pkv("/ns/a", "1", 5, 5, 1))),
            put(pkv("/ns/b", "1", 6, 6, 1), None),
            del("/ns/a", 7, pkv("/ns/a", "2", 5, 6, 2)),
        ];
        let out = batches(&ks, &evs, 0);
        let shape: Vec<Vec<(EventKind, Revision)>> = out
            .iter()
            .map(|b| b.iter().map(|e| (e.kind, e.revision)).collect())
            .collect();
        assert_eq!(
            shape,
            vec![
                vec![(EventKind::Create, 5)],
                vec![(EventKind::Update, 6), (EventKind::Create, 6)],
                vec![(EventKind::Delete, 7)],
            ],
            "one batch per revision, etcd's revisions unchanged"
        );
        let upd = &out[1][0];
        assert_eq!(upd.kv.key, Bytes::from_static(b"/a"));
        assert_eq!(
            (upd.kv.create_revision, upd.kv.mod_revision, upd.kv.version),
            (5, 6, 2)
        );
        assert_eq!(
            upd.prev.as_ref().map(|p| p.value.clone()),
            Some(Bytes::from_static(b"1"))
        );
        let d = &out[2][0];
        assert_eq!(d.kv.key, Bytes::from_static(b"/a"));
        assert!(d.kv.value.is_empty());
        assert_eq!(d.kv.mod_revision, 7);
        assert_eq!(d.prev.as_ref().map(|p| p.mod_revision), Some(6));
        // Events at or below `last` were delivered before a re-open: dropped.
        let out = batches(&ks, &evs, 6);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0][0].revision, 7);
    }

    #[test]
    fn events_of_an_unknown_type_are_skipped_not_a_panic() {
        let ks = Keyspace::new("/ns");
        let odd = etcd_client::Event(PbEvent {
            r#type: 7,
            kv: Some(pkv("/ns/x", "1", 8, 8, 1)),
            prev_kv: None,
        });
        let evs = vec![put(pkv("/ns/a", "1", 5, 5, 1), None), odd];
        let out = batches(&ks, &evs, 0);
        let revisions: Vec<Vec<Revision>> = out
            .iter()
            .map(|b| b.iter().map(|e| e.revision).collect())
            .collect();
        assert_eq!(revisions, vec![vec![5]]);
    }

    fn task(
        capacity: usize,
    ) -> (
        WatchTask,
        mpsc::Receiver<Result<WatchMessage, StorageError>>,
    ) {
        let (tx, rx) = mpsc::channel(capacity);
        // The client is only used to re-open, which these tests never do.
        (
            WatchTask {
                client: unreachable_client(),
                keyspace: Keyspace::new(""),
                start: b"/".to_vec(),
                end: b"0".to_vec(),
                last: 10,
                last_progress: 10,
                tx,
                compacted: Arc::new(AtomicU64::new(0)),
                open_timeout: Duration::from_secs(1),
            },
            rx,
        )
    }

    fn unreachable_client() -> WatchClient {
        // Connecting is lazy: nothing is dialled until the client is used.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            etcd_client::Client::connect(["http://127.0.0.1:1"], None)
                .await
                .unwrap()
                .watch_client()
        })
    }

    #[test]
    fn progress_is_forwarded_only_when_it_advances() {
        let (mut t, mut rx) = task(8);
        assert_eq!(
            t.handle(response(vec![], 10)),
            Next::Continue,
            "rev 10 = last"
        );
        assert_eq!(t.handle(response(vec![], 12)), Next::Continue);
        assert_eq!(
            t.handle(response(vec![], 11)),
            Next::Continue,
            "older: dropped"
        );
        assert_eq!(rx.try_recv().ok(), Some(Ok(WatchMessage::Progress(12))));
        assert!(rx.try_recv().is_err(), "nothing else");
        let evs = vec![put(pkv("/a", "1", 14, 14, 1), None)];
        assert_eq!(t.handle(response(evs.clone(), 14)), Next::Continue);
        assert!(matches!(rx.try_recv(), Ok(Ok(WatchMessage::Events(e))) if e[0].revision == 14));
        // A replay of the same event after a re-open is not delivered twice.
        assert_eq!(t.handle(response(evs, 14)), Next::Continue);
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn reopen_waits_grow_from_the_first_to_the_cap() {
        let mut wait = Duration::ZERO;
        let mut waits = Vec::new();
        for _ in 0..6 {
            wait = next_backoff(wait);
            waits.push(wait.as_millis());
        }
        assert_eq!(waits, vec![100, 200, 400, 800, 1600, 2000]);
    }

    #[test]
    fn events_out_of_revision_order_reopen_without_delivering_any() {
        let (mut t, mut rx) = task(8);
        let evs = vec![
            put(pkv("/a", "1", 12, 12, 1), None),
            put(pkv("/b", "1", 14, 14, 1), None),
            put(pkv("/c", "1", 13, 13, 1), None),
        ];
        assert!(
            matches!(t.handle(response(evs, 14)), Next::Reopen(r) if r.contains("order")),
            "a re-open from the last delivered revision gets them again"
        );
        assert!(rx.try_recv().is_err(), "nothing of it was delivered");
        assert_eq!(t.last, 10);
        // Equal revisions (one transaction) are in order.
        let evs = vec![
            put(pkv("/a", "1", 12, 12, 1), None),
            put(pkv("/b", "1", 12, 12, 1), None),
            put(pkv("/c", "1", 13, 13, 1), None),
        ];
        assert_eq!(t.handle(response(evs, 13)), Next::Continue);
        assert!(matches!(rx.try_recv(), Ok(Ok(WatchMessage::Events(e))) if e.len() == 2));
        assert!(matches!(rx.try_recv(), Ok(Ok(WatchMessage::Events(e))) if e[0].revision == 13));
    }

    #[test]
    fn compaction_and_cancellation() {
        let (mut t, mut rx) = task(8);
        let mut cancelled = response(vec![], 20);
        cancelled.0.canceled = true;
        cancelled.0.cancel_reason = "etcdserver: no leader".into();
        assert!(matches!(t.handle(cancelled), Next::Reopen(r) if r.contains("no leader")));
        let mut compacted = response(vec![], 20);
        compacted.0.canceled = true;
        compacted.0.compact_revision = 16;
        assert_eq!(t.handle(compacted), Next::Stop);
        assert_eq!(
            rx.try_recv().ok(),
            Some(Err(StorageError::Compacted {
                requested: 10,
                compacted: 16
            }))
        );
        assert_eq!(t.compacted.load(Ordering::SeqCst), 16);
    }

    #[test]
    fn a_full_queue_ends_with_overflow_in_the_reserved_slot() {
        let (mut t, mut rx) = task(3);
        for rev in 12..=14 {
            let evs = vec![put(pkv(&format!("/k{rev}"), "v", rev, rev, 1), None)];
            let want = if rev < 14 { Next::Continue } else { Next::Stop };
            assert_eq!(t.handle(response(evs, rev)), want);
        }
        let mut got = Vec::new();
        while let Ok(m) = rx.try_recv() {
            got.push(m);
        }
        assert_eq!(got.len(), 3);
        assert!(matches!(&got[0], Ok(WatchMessage::Events(e)) if e[0].revision == 12));
        assert!(matches!(&got[1], Ok(WatchMessage::Events(e)) if e[0].revision == 13));
        assert_eq!(got[2], Err(StorageError::WatchOverflow));
    }
}
