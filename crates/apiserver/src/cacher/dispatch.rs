//! The cacher's dispatcher: hands each change to the watchers whose bucket and filter match,
//! without waiting, then waits within the shared
//! [`TimeBudget`](super::time_budget::TimeBudget) for those whose queue was full and
//! terminates those that stay full; also the periodic bookmarks and progress checks. It
//! assumes the change has already been applied to the watch cache, in revision order.

use super::cache_watcher::{CacheWatcher, DeliverError, Delivered, Framing, WatchFrame, WireCache};
use super::cached_object::CachedObject;
use super::cacher::Cacher;
use super::filter::{object_buckets, Bucket};
use super::sink::{self, WatchConnection};
use super::watch_cache::WatchCacheEvent;
use crate::registry::ResourceInfo;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Cacher {
    /// Hands `event` to every watcher whose bucket and filter match. A watcher with a full
    /// queue is waited for, but only within the shared
    /// [`TimeBudget`](super::time_budget::TimeBudget): a reader that pauses
    /// briefly keeps its watch, one that stays stuck is terminated (and resumes later from
    /// its last resourceVersion), and healthy watchers are delayed by at most the budget.
    pub(super) async fn dispatch(&self, event: &WatchCacheEvent) {
        let mut buckets = Vec::with_capacity(8);
        object_buckets(self.info, &event.object, &mut buckets);
        if let Some(p) = &event.prev {
            object_buckets(self.info, p, &mut buckets);
        }
        // Snapshot the candidates so the index is not locked while writing to sockets.
        let mut targets: Vec<Arc<[Arc<CacheWatcher>]>> = Vec::new();
        {
            let mut index = self.watchers.lock();
            for b in &buckets {
                if let Some(ws) = index.buckets.get_mut(b) {
                    targets.push(ws.snapshot());
                }
            }
        }
        // One task delivers: splitting the writes over the runtime's workers was measured to
        // help nothing on a busy machine and to delay request handling (writes) behind it.
        // HTTP/2 connections are woken once, after the whole fan-out, to write all their
        // streams' frames together.
        let out = sink::batch(|| fan_out(self.info, &targets, event));
        self.settle(out).await;
    }

    /// Like [`Cacher::dispatch`] for several events at once: each watcher gets its frames of
    /// all of them, in order, in one push (so one socket write in direct mode).
    pub(super) async fn dispatch_batch(&self, events: &[Arc<WatchCacheEvent>]) {
        let mut per: HashMap<u64, WatcherFrames> = HashMap::new();
        {
            let index = self.watchers.lock();
            let mut buckets = Vec::with_capacity(8);
            for ev in events {
                buckets.clear();
                object_buckets(self.info, &ev.object, &mut buckets);
                if let Some(p) = &ev.prev {
                    object_buckets(self.info, p, &mut buckets);
                }
                for b in &buckets {
                    let Some(ws) = index.buckets.get(b) else {
                        continue;
                    };
                    for w in ws.by_id.values() {
                        if let Some(f) = w.frame_for(ev, true, || restamped_prev(self.info, ev)) {
                            per.entry(w.id)
                                .or_insert_with(|| (w.clone(), Vec::new()))
                                .1
                                .push((f, ev.resource_version));
                        }
                    }
                }
            }
        }
        let api_version = self.info.api_version();
        let mut wire = WireCache::new(&api_version, self.info.kind);
        let mut wire = |f: &WatchFrame, fr: Framing| wire.wire(f, fr);
        let out = sink::batch(|| {
            let mut out = FanOut::default();
            for (_, (w, frames)) in per {
                let n = frames.len();
                let (o, rest_rvs) = w.deliver_many(frames, &mut wire);
                if o.closed {
                    out.gone.push((w.bucket.clone(), w.id, false));
                    continue;
                }
                out.sent += (n - o.rest.len()) as u64;
                out.written += o.written as u64;
                out.deferred += o.deferred as u64;
                for (f, rv) in o.rest.into_iter().zip(rest_rvs) {
                    out.blocked.push((w.clone(), f, rv));
                }
            }
            out
        });
        self.settle(out).await;
    }

    /// Finishes a fan-out: waits (within the shared
    /// [`TimeBudget`](super::time_budget::TimeBudget)) for watchers whose queue
    /// was full, in order per watcher, terminates those that stay full, counts. A watcher
    /// whose client has taken nothing for a progress period is terminated without a wait.
    pub(super) async fn settle(&self, mut out: FanOut) {
        let api_version = self.info.api_version();
        let mut wire = WireCache::new(&api_version, self.info.kind);
        let mut wire = |f: &WatchFrame, fr: Framing| wire.wire(f, fr);
        let mut failed: Vec<u64> = Vec::new();
        for (w, frame, rv) in std::mem::take(&mut out.blocked) {
            if failed.contains(&w.id) {
                continue;
            }
            // A client that has read nothing for a while gets no wait: it would only delay
            // the others (and use up the budget meant for clients briefly behind).
            let budget = if w.is_stalled() {
                Duration::ZERO
            } else {
                self.budget.lock().take()
            };
            let started = Instant::now();
            if w.deliver_within(frame, rv, &mut wire, budget).await {
                out.sent += 1;
            } else {
                failed.push(w.id);
                out.gone.push((w.bucket.clone(), w.id, true));
            }
            self.budget
                .lock()
                .give_back(budget.saturating_sub(started.elapsed()));
        }
        self.counters.events.fetch_add(out.sent, Ordering::Relaxed);
        if out.written > 0 {
            self.counters
                .direct_written
                .fetch_add(out.written, Ordering::Relaxed);
        }
        if out.deferred > 0 {
            self.counters
                .direct_deferred
                .fetch_add(out.deferred, Ordering::Relaxed);
        }
        if !out.gone.is_empty() {
            self.drop_watchers(out.gone);
        }
    }

    pub(super) fn drop_watchers(&self, gone: Vec<(Bucket, u64, bool)>) {
        let mut index = self.watchers.lock();
        for (b, id, too_slow) in gone {
            let Some(w) = index.remove(&b, id) else {
                continue;
            };
            self.counters.watchers.fetch_sub(1, Ordering::Relaxed);
            if too_slow {
                self.counters.terminated.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    resource = self.info.resource,
                    watcher = id,
                    "terminating watcher: it cannot keep up (queue full)"
                );
                if let Some(conn) = w.terminate() {
                    reset_if_still_unread(conn, self.info.resource, id);
                }
            }
        }
    }

    /// Ends every watcher (after a relist their view may have a gap; they resume and get 410
    /// if their version is gone).
    pub(super) fn terminate_all(&self) {
        let mut index = self.watchers.lock();
        let n = index.count;
        index.buckets.clear();
        index.count = 0;
        self.counters
            .watchers
            .fetch_sub(n as i64, Ordering::Relaxed);
    }

    /// Once a second: bookmarks to the watchers due one, and each watcher's progress check
    /// (see [`CacheWatcher::check_progress`]).
    pub(super) fn send_bookmarks(&self) {
        let now = Instant::now();
        let api_version = self.info.api_version();
        let mut wire = |f: &WatchFrame, fr: Framing| fr.wire(f, &api_version, self.info.kind);
        let rv = self.state.read().resource_version();
        let mut gone = Vec::new();
        {
            let index = self.watchers.lock();
            for (b, ws) in &index.buckets {
                for w in ws.by_id.values() {
                    w.check_progress();
                    if w.bookmark_due(now) && rv >= w.last_sent_rv.load(Ordering::Relaxed) {
                        let frame = WatchFrame::Bookmark {
                            resource_version: rv,
                            initial_events_end: false,
                        };
                        // A full queue just skips this bookmark; events matter, bookmarks are hints.
                        if let Err(DeliverError::Closed) = w.deliver(frame, rv, &mut wire) {
                            gone.push((b.clone(), w.id, false));
                        }
                    }
                }
            }
        }
        if !gone.is_empty() {
            self.drop_watchers(gone);
        }
    }
}

/// How long a terminated watcher's client has to take another byte of its connection
/// before the connection is reset.
pub const UNREAD_RESET_GRACE: Duration = Duration::from_secs(5);

/// Resets `conn` (see [`WatchConnection::abort`]) unless it takes a byte within
/// [`UNREAD_RESET_GRACE`]: a terminated watcher's response can only end once its client reads
/// what the socket holds, and one that never reads would keep the connection, its kernel
/// buffers and its place among the running requests forever.
fn reset_if_still_unread(conn: Arc<dyn WatchConnection>, resource: &'static str, watcher: u64) {
    let mark = conn.writes();
    tokio::spawn(async move {
        tokio::time::sleep(UNREAD_RESET_GRACE).await;
        if conn.writes() == mark {
            tracing::info!(
                resource,
                watcher,
                "resetting the connection of a terminated watcher: its client reads nothing"
            );
            conn.abort();
        }
    });
}

/// Events the dispatcher wrote straight to an HTTP/1.1 watch's socket (`result="written"`),
/// or handed to the connection's task because the socket was full (`result="deferred"`).
pub(super) const DIRECT_WRITES_METRIC: &str = "listwatch_watch_direct_writes_total";
pub(super) const DIRECT_WRITES_HELP: &str =
    "Watch events the watch cache wrote directly to HTTP/1.1 sockets, by whether the socket took them at once";

/// A watcher and the frames (with their versions) one batch of events has for it, in order.
type WatcherFrames = (Arc<CacheWatcher>, Vec<(WatchFrame, u64)>);

/// What delivering one event to some watchers left to do.
#[derive(Default)]
pub(super) struct FanOut {
    sent: u64,
    written: u64,
    deferred: u64,
    gone: Vec<(Bucket, u64, bool)>,
    blocked: Vec<(Arc<CacheWatcher>, WatchFrame, u64)>,
}

/// Delivers `event` to each of `targets` that wants it, without waiting: watchers with a
/// full queue come back in `blocked`, departed ones in `gone`.
fn fan_out(
    info: &'static ResourceInfo,
    targets: &[Arc<[Arc<CacheWatcher>]>],
    event: &WatchCacheEvent,
) -> FanOut {
    let api_version = info.api_version();
    let mut wire = WireCache::new(&api_version, info.kind);
    let mut wire = |f: &WatchFrame, fr: Framing| wire.wire(f, fr);
    let mut out = FanOut::default();
    let watchers = targets.iter().flat_map(|bucket| {
        bucket.iter().enumerate().map(move |(i, w)| {
            // The watchers ahead of this one are cold in cache: start fetching them, each
            // link of the chain (watcher, queue, direct target) a step before the next, whose
            // address it holds.
            if let Some(next) = bucket.get(i + 3 * PREFETCH_AHEAD) {
                CacheWatcher::prefetch(next);
            }
            if let Some(next) = bucket.get(i + 2 * PREFETCH_AHEAD) {
                next.prefetch_queue();
            }
            if let Some(next) = bucket.get(i + PREFETCH_AHEAD) {
                next.prefetch_target();
            }
            w
        })
    });
    for w in watchers {
        let Some(frame) = w.frame_for(event, true, || restamped_prev(info, event)) else {
            continue;
        };
        match w.deliver(frame, event.resource_version, &mut wire) {
            Ok(d) => {
                out.sent += 1;
                match d {
                    Delivered::Written => out.written += 1,
                    Delivered::Deferred => out.deferred += 1,
                    Delivered::Queued => {}
                }
            }
            Err(DeliverError::Full(frame)) => {
                out.blocked.push((w.clone(), frame, event.resource_version))
            }
            Err(DeliverError::Closed) => out.gone.push((w.bucket.clone(), w.id, false)),
        }
    }
    out
}

/// How many watchers ahead [`fan_out`] prefetches each step of the chain (watcher, queue,
/// stream window): enough for a memory access to complete while that many are delivered.
const PREFETCH_AHEAD: usize = 8;

/// `ev.prev` stamped with the event's version (computed once per event), or the object.
pub(super) fn restamped_prev(info: &ResourceInfo, ev: &WatchCacheEvent) -> Arc<CachedObject> {
    match &ev.prev {
        Some(p) => ev
            .prev_restamped
            .get_or_init(|| Arc::new(p.restamped(info, ev.resource_version)))
            .clone(),
        None => ev.object.clone(),
    }
}
