//! One client's watch: its filter, its bounded queue, and the frames it is sent.
//!
//! Ordering contract: a client sees first its initial frames (replay or current state, in
//! resourceVersion order), then live frames in the order the cacher dispatched them — which is
//! storage revision order. Bookmarks travel through the same queue, so a bookmark's version is
//! never older than an event already delivered.

use super::cached_object::CachedObject;
use super::filter::{Bucket, Filter};
use super::outbox::Outbox;
pub use super::outbox::{BatchOutcome, DeliverError, Delivered, DirectTarget, Framing};
use super::sink::WatchConnection;
use super::watch_cache::{EventType, WatchCacheEvent};
pub use super::watch_frame::WatchFrame;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The wire bytes (in each transport's [`Framing`]) of the frames of one event, encoded once
/// and shared by every watcher that gets the same frame: an event reaches each watcher as the same event
/// type and object, or as a DELETED with the restamped previous object — at most a few forms.
#[derive(Debug)]
pub struct WireCache<'a> {
    api_version: &'a str,
    kind: &'a str,
    /// The entry used last: one event's fan-out asks for the same frame watcher after watcher,
    /// and comparing the key beats hashing it.
    last: Option<(WireKey, Bytes)>,
    entries: std::collections::HashMap<WireKey, Bytes>,
}

/// (object address, event type, framing).
type WireKey = (usize, &'static str, Framing);

impl<'a> WireCache<'a> {
    /// An empty cache for frames of `kind` in `api_version`.
    pub fn new(api_version: &'a str, kind: &'a str) -> WireCache<'a> {
        WireCache {
            api_version,
            kind,
            last: None,
            entries: std::collections::HashMap::new(),
        }
    }

    /// The wire bytes of `frame` in `framing`, encoded on first use.
    pub fn wire(&mut self, frame: &WatchFrame, framing: Framing) -> Bytes {
        let WatchFrame::Event { event_type, object } = frame else {
            return framing.wire(frame, self.api_version, self.kind);
        };
        // The objects outlive the cache (their events hold them), so addresses are unique.
        let key: WireKey = (Arc::as_ptr(object) as usize, event_type, framing);
        if let Some((k, b)) = &self.last {
            if k.0 == key.0 && k.2 == key.2 && std::ptr::eq(k.1, key.1) {
                return b.clone();
            }
        }
        let (api_version, kind) = (self.api_version, self.kind);
        let bytes = self
            .entries
            .entry(key)
            .or_insert_with(|| framing.wire(frame, api_version, kind))
            .clone();
        self.last = Some((key, bytes.clone()));
        bytes
    }
}

/// The cacher's side of one client watch: what to send it and where.
///
/// Laid out for the fan-out: what every event reads (version, bucket shortcut, queue, last
/// version sent) comes first and fits one cache line, which starts the struct, so one
/// prefetch covers it (see [`super::prefetch`]); the filter and bookmark state follow.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct CacheWatcher {
    outbox: Arc<Outbox>,
    /// Events at or below this version were part of the initial frames.
    pub start_rv: u64,
    /// Highest version queued to the client (events or bookmarks).
    pub last_sent_rv: AtomicU64,
    /// Unique id within the cacher.
    pub id: u64,
    /// The filter matches exactly the objects of its bucket (see [`CacheWatcher::frame_for`]).
    bucket_is_filter: bool,
    /// Send bookmarks?
    pub allow_bookmarks: bool,
    /// The client's predicate.
    pub filter: Filter,
    /// The index bucket this watcher lives in.
    pub bucket: Bucket,
    /// When the stream ends (for the pre-timeout bookmark).
    pub deadline: Instant,
    /// When the next periodic bookmark is due.
    pub next_bookmark: Mutex<Instant>,
}

impl Drop for CacheWatcher {
    fn drop(&mut self) {
        // Removed from the cacher: the response ends after what is queued.
        self.outbox.close();
    }
}

impl CacheWatcher {
    /// Creates the watcher and its queue of `capacity` frames (the response drains it).
    pub fn new(
        id: u64,
        filter: Filter,
        start_rv: u64,
        allow_bookmarks: bool,
        deadline: Instant,
        capacity: usize,
    ) -> (CacheWatcher, Arc<Outbox>) {
        let outbox = Arc::new(Outbox::new(capacity));
        let bucket = filter.bucket();
        // An object reaches a Namespace bucket only from that namespace, and the All bucket
        // holds filters without a namespace; with no selectors, the bucket is the filter.
        let bucket_is_filter =
            filter.is_unfiltered() && matches!(bucket, Bucket::Namespace(_) | Bucket::All);
        let now = Instant::now();
        let first = first_bookmark(now, deadline);
        (
            CacheWatcher {
                id,
                filter,
                bucket,
                bucket_is_filter,
                start_rv,
                allow_bookmarks,
                deadline,
                next_bookmark: Mutex::new(first),
                last_sent_rv: AtomicU64::new(start_rv),
                outbox: outbox.clone(),
            },
            outbox,
        )
    }

    /// The frame this watcher should get for `event` under the old/new selector rule, if any.
    ///
    /// `bucketed` says the event was routed here through the watcher index (its object or
    /// previous state falls in this watcher's bucket); a watcher whose filter is its bucket
    /// (a namespace or everything, no selectors) then matches without looking at the filter.
    pub fn frame_for(
        &self,
        event: &WatchCacheEvent,
        bucketed: bool,
        restamp: impl FnOnce() -> Arc<CachedObject>,
    ) -> Option<WatchFrame> {
        if event.resource_version <= self.start_rv {
            return None;
        }
        let (new_matches, old_matches) = if bucketed && self.bucket_is_filter {
            (event.event_type != EventType::Deleted, event.prev.is_some())
        } else {
            (
                event.event_type != EventType::Deleted && self.filter.matches(&event.object),
                event.prev.as_ref().is_some_and(|p| self.filter.matches(p)),
            )
        };
        let (event_type, object) = match (event.event_type, new_matches, old_matches) {
            (EventType::Deleted, _, true) => ("DELETED", event.object.clone()),
            (_, true, true) => ("MODIFIED", event.object.clone()),
            (_, true, false) => ("ADDED", event.object.clone()),
            (_, false, true) => ("DELETED", restamp()),
            _ => return None,
        };
        Some(WatchFrame::Event { event_type, object })
    }

    /// Prefetches the fields [`CacheWatcher::frame_for`] and [`CacheWatcher::deliver`] read
    /// (one cache line; a hint, see [`super::prefetch`]). `self` is not read.
    #[inline]
    pub fn prefetch(this: &Arc<CacheWatcher>) {
        super::prefetch::prefetch(Arc::as_ptr(this));
    }

    /// Prefetches what [`CacheWatcher::deliver`] touches first: the queue (prefetch the
    /// watcher first, see [`CacheWatcher::prefetch`]).
    #[inline]
    pub fn prefetch_queue(&self) {
        self.outbox.prefetch();
    }

    /// Prefetches what [`CacheWatcher::deliver`] touches next: the direct target's state,
    /// whose address is in the queue (so prefetch the queue first).
    #[inline]
    pub fn prefetch_target(&self) {
        self.outbox.prefetch_target();
    }

    /// Queues a frame without waiting (or writes `wire(&frame)` straight to a direct-mode
    /// connection).
    pub fn deliver(
        &self,
        frame: WatchFrame,
        rv: u64,
        wire: &mut impl FnMut(&WatchFrame, Framing) -> Bytes,
    ) -> Result<Delivered, DeliverError> {
        let d = self.outbox.push(frame, wire)?;
        self.last_sent_rv.fetch_max(rv, Ordering::Relaxed);
        Ok(d)
    }

    /// Queues several frames (with their versions) in order, without waiting; see
    /// [`super::outbox::Outbox::push_many`]. Versions of frames not taken are not recorded.
    pub fn deliver_many(
        &self,
        frames: Vec<(WatchFrame, u64)>,
        wire: &mut impl FnMut(&WatchFrame, Framing) -> Bytes,
    ) -> (BatchOutcome, Vec<u64>) {
        let (frames, mut rvs): (Vec<WatchFrame>, Vec<u64>) = frames.into_iter().unzip();
        let out = self.outbox.push_many(frames, wire);
        let taken = rvs.len() - out.rest.len();
        if !out.closed && taken > 0 {
            self.last_sent_rv
                .fetch_max(rvs[taken - 1], Ordering::Relaxed);
        }
        let rest_rvs = rvs.split_off(taken);
        (out, rest_rvs)
    }

    /// Queues a frame, waiting at most `budget` for room. `false` if it could not.
    pub async fn deliver_within(
        &self,
        frame: WatchFrame,
        rv: u64,
        wire: &mut impl FnMut(&WatchFrame, Framing) -> Bytes,
        budget: Duration,
    ) -> bool {
        let ok = self.outbox.push_within(frame, wire, budget).await;
        if ok {
            self.last_sent_rv.fetch_max(rv, Ordering::Relaxed);
        }
        ok
    }

    /// See [`Outbox::check_progress`].
    pub fn check_progress(&self) {
        self.outbox.check_progress();
    }

    /// See [`Outbox::is_stalled`].
    pub fn is_stalled(&self) -> bool {
        self.outbox.is_stalled()
    }

    /// Ends this watch because its client does not keep up (see [`Outbox::terminate`]);
    /// returns the connection to reset if the client goes on not reading.
    pub fn terminate(&self) -> Option<Arc<dyn WatchConnection>> {
        self.outbox.terminate()
    }

    /// If a bookmark is due at `now`, schedules the next one and returns true.
    pub fn bookmark_due(&self, now: Instant) -> bool {
        if !self.allow_bookmarks {
            return false;
        }
        let mut next = self.next_bookmark.lock();
        if now < *next {
            return false;
        }
        *next = following_bookmark(now, self.deadline);
        true
    }
}

/// Periodic bookmarks about once a minute, plus one about 2 s before the stream's deadline.
const BOOKMARK_PERIOD: Duration = Duration::from_secs(60);
const BOOKMARK_BEFORE_END: Duration = Duration::from_secs(2);

fn first_bookmark(now: Instant, deadline: Instant) -> Instant {
    let pre_end = deadline
        .checked_sub(BOOKMARK_BEFORE_END)
        .unwrap_or(deadline);
    (now + BOOKMARK_PERIOD).min(pre_end.max(now))
}

fn following_bookmark(now: Instant, deadline: Instant) -> Instant {
    let pre_end = deadline
        .checked_sub(BOOKMARK_BEFORE_END)
        .unwrap_or(deadline);
    let periodic = now + BOOKMARK_PERIOD;
    if pre_end > now {
        periodic.min(pre_end)
    } else {
        periodic
    }
}

/// Called when a watch's response is dropped (client gone or stream ended).
pub type OnClose = Box<dyn FnOnce() + Send>;

/// A watch the cacher has registered, for the transport to stream: what to send first, the
/// queue the dispatcher fills after that, and what to call when the response ends.
///
/// The response must be made from it (and dropped when it ends) so that `on_close` runs: that
/// is what removes the watcher from the cacher.
pub struct WatchRegistration {
    /// Sent first, in order (replay or current state, maybe an initial-events-end bookmark,
    /// or a single ERROR after which nothing follows).
    pub initial: VecDeque<WatchFrame>,
    /// The live frames; `None` when nothing follows the initial frames.
    pub outbox: Option<Arc<Outbox>>,
    /// When the stream ends.
    pub deadline: Instant,
    /// The `apiVersion` of the watched kind (for bookmarks).
    pub api_version: String,
    /// The watched kind (for bookmarks).
    pub kind: String,
    /// Removes the watcher from the cacher.
    pub on_close: Option<OnClose>,
    /// The minimum time between two writes of live frames (0: as they come).
    pub flush_interval: Duration,
}

impl std::fmt::Debug for WatchRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchRegistration")
            .field("initial", &self.initial.len())
            .field("live", &self.outbox.is_some())
            .field("kind", &self.kind)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_fan_out_reads_lies_in_the_first_cache_line() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<CacheWatcher>(), 64);
        for end in [
            offset_of!(CacheWatcher, outbox) + size_of::<Arc<Outbox>>(),
            offset_of!(CacheWatcher, start_rv) + 8,
            offset_of!(CacheWatcher, last_sent_rv) + 8,
            offset_of!(CacheWatcher, id) + 8,
            offset_of!(CacheWatcher, bucket_is_filter) + 1,
        ] {
            assert!(end <= 64, "a hot field ends at {end}");
        }
    }
}
