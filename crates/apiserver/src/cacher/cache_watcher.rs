//! One client's watch: its filter, its bounded queue, and the response body that drains it.
//!
//! Ordering contract: a client sees first its initial frames (replay or current state, in
//! resourceVersion order), then live frames in the order the cacher dispatched them — which is
//! storage revision order. Bookmarks travel through the same queue, so a bookmark's version is
//! never older than an event already delivered.

use super::cached_object::CachedObject;
use super::direct_conn::DirectConn;
use super::filter::{Bucket, Filter};
use super::outbox::Outbox;
pub use super::outbox::{BatchOutcome, DeliverError, Delivered, DirectTarget, Framing};
use super::watch_cache::{EventType, WatchCacheEvent};
use bytes::{BufMut, Bytes, BytesMut};
use http_body::Frame;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// One unit of a watch stream. Event payloads are shared: the JSON of the object was
/// produced once when the change entered the cache, and other encodings are cached on the
/// object the first time a watcher needs them.
#[derive(Debug, Clone)]
pub enum WatchFrame {
    /// `{"type":T,"object":<object>}`.
    Event {
        /// `ADDED`, `MODIFIED` or `DELETED`.
        event_type: &'static str,
        /// The object.
        object: Arc<CachedObject>,
    },
    /// A BOOKMARK at this resourceVersion; `initial_events_end` adds the
    /// `k8s.io/initial-events-end` annotation.
    Bookmark {
        /// The version the client has now seen everything up to.
        resource_version: u64,
        /// True for the bookmark that ends a streaming list's initial events.
        initial_events_end: bool,
    },
    /// A `{"type":"ERROR","object":<Status>}` frame; the stream ends after it.
    Error(Bytes),
}

impl WatchFrame {
    /// About how many bytes the frame takes in JSON (exact for events without an encoder);
    /// for sizing buffers only.
    pub fn encoded_len_hint(&self) -> usize {
        match self {
            WatchFrame::Event { object, .. } => object.json.len() + 32,
            WatchFrame::Bookmark { .. } => 256,
            WatchFrame::Error(status) => status.len() + 32,
        }
    }

    /// Prefetches the line of an event's object that says where its body is (the JSON, or
    /// the protobuf body when `protobuf`), and the object's first line, which its reference
    /// count is next to (a hint, see [`super::prefetch`]).
    #[inline]
    fn prefetch_object(&self, protobuf: bool) {
        if let WatchFrame::Event { object, .. } = self {
            super::prefetch::prefetch(Arc::as_ptr(object));
            if protobuf {
                super::prefetch::prefetch(&object.derived.protobuf);
            } else {
                super::prefetch::prefetch(&object.json);
            }
        }
    }

    /// Prefetches the first lines of an event's body (a hint). Reads the object, so prefetch
    /// it first ([`WatchFrame::prefetch_object`]).
    #[inline]
    fn prefetch_body(&self, protobuf: bool) {
        let WatchFrame::Event { object, .. } = self else {
            return;
        };
        let body = if protobuf {
            object.derived.protobuf.get().and_then(Option::as_ref)
        } else {
            Some(&object.json)
        };
        if let Some(body) = body {
            super::prefetch::prefetch_bytes(body, BODY_PREFETCH_LINES);
        }
    }

    /// The wire name of a cache event type.
    pub fn type_name(t: EventType) -> &'static str {
        match t {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }

    /// Appends this frame as one JSON line, the object as plain JSON.
    pub fn encode(&self, api_version: &str, kind: &str, out: &mut BytesMut) {
        self.encode_with(api_version, kind, None, &mut false, out);
    }

    /// Appends this frame as one JSON line, the object rendered by `encoder` if given.
    /// `first` is true until the stream's first object has been written (a Table's column
    /// definitions go only into the first); this clears it.
    pub fn encode_with(
        &self,
        api_version: &str,
        kind: &str,
        encoder: Option<&dyn ObjectEncoder>,
        first: &mut bool,
        out: &mut BytesMut,
    ) {
        match self {
            WatchFrame::Event { event_type, object } => {
                out.reserve(object.json.len() + 32);
                out.put_slice(b"{\"type\":\"");
                out.put_slice(event_type.as_bytes());
                out.put_slice(b"\",\"object\":");
                match encoder {
                    Some(e) => e.object(object, *first, out),
                    None => out.put_slice(&object.json),
                }
                *first = false;
                out.put_slice(b"}\n");
            }
            WatchFrame::Bookmark {
                resource_version,
                initial_events_end,
            } if encoder.is_some() => {
                out.put_slice(b"{\"type\":\"BOOKMARK\",\"object\":");
                if let Some(e) = encoder {
                    e.bookmark(*resource_version, *initial_events_end, out);
                }
                out.put_slice(b"}\n");
            }
            WatchFrame::Bookmark {
                resource_version,
                initial_events_end,
            } => {
                let ann = if *initial_events_end {
                    ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}"
                } else {
                    ""
                };
                let line = format!(
                    "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"{kind}\",\"apiVersion\":\"{api_version}\",\"metadata\":{{\"resourceVersion\":\"{resource_version}\",\"creationTimestamp\":null{ann}}}}}}}\n"
                );
                out.put_slice(line.as_bytes());
            }
            WatchFrame::Error(status) => {
                out.put_slice(b"{\"type\":\"ERROR\",\"object\":");
                out.put_slice(status);
                out.put_slice(b"}\n");
            }
        }
    }
}

/// Renders watch event objects in another form than their JSON (a Table row, a
/// PartialObjectMetadata), for clients that asked for it.
pub trait ObjectEncoder: Send + Sync {
    /// Appends the `object` of an event about `obj`; `first` is true for the stream's first.
    fn object(&self, obj: &CachedObject, first: bool, out: &mut BytesMut);
    /// Appends the `object` of a BOOKMARK at `resource_version`.
    fn bookmark(&self, resource_version: u64, initial_events_end: bool, out: &mut BytesMut);
}

/// Appends `line` as one HTTP/1.1 chunk (`{len:x}\r\n{line}\r\n`).
pub fn put_chunk(line: &[u8], out: &mut BytesMut) {
    out.reserve(line.len() + 12);
    out.put_slice(format!("{:x}\r\n", line.len()).as_bytes());
    out.put_slice(line);
    out.put_slice(b"\r\n");
}

/// A frame as it goes on a direct connection with `framing`.
pub fn wire_of(frame: &WatchFrame, framing: Framing, api_version: &str, kind: &str) -> Bytes {
    let mut line = BytesMut::new();
    frame.encode(api_version, kind, &mut line);
    let mut out = BytesMut::new();
    match framing {
        Framing::Http2 => return line.freeze(),
        Framing::Chunked => put_chunk(&line, &mut out),
        Framing::WebSocket => {
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            crate::server::websocket::encode_frame(
                crate::server::websocket::opcode::TEXT,
                text,
                &mut out,
            )
        }
    }
    out.freeze()
}

/// The wire bytes (one HTTP/1.1 chunk) of the frames of one event, encoded once and shared
/// by every watcher that gets the same frame: an event reaches each watcher as the same event
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
            return wire_of(frame, framing, self.api_version, self.kind);
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
            .or_insert_with(|| wire_of(frame, framing, api_version, kind))
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
    /// Creates the watcher and its queue of `capacity` frames (the response body drains it).
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
    pub fn terminate(&self) -> Option<Arc<super::DirectConn>> {
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

/// Called when a watch body is dropped (client gone or stream ended).
pub type OnClose = Box<dyn FnOnce() + Send>;

/// Where a body with a direct connection is in its hand-over from hyper to the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Frames go out through hyper (initial frames; or no direct connection at all).
    Hyper,
    /// Initial frames yielded; waiting for hyper's next flush past this count.
    AwaitFlush(u64),
    /// The dispatcher writes chunks to the socket; the body only drains what did not fit.
    Direct,
    /// Direct mode ended (deadline or watcher removed): drain, then end the response.
    Finishing,
}

/// The HTTP response body of one watch: initial frames, then the live queue, until the
/// deadline, termination by the cacher, or the client going away.
///
/// Ready frames are coalesced into one chunk (up to 64 KiB of live frames, 256 KiB of initial
/// frames) to save syscalls. With a non-zero `flush_interval`, live frames are written at most
/// once per interval: the first frame after a quiet period goes out at once, frames arriving
/// sooner wait (at most the interval) and leave together — fewer, larger writes for busy
/// watchers, unchanged latency for idle ones.
///
/// With a [`DirectConn`] (plain HTTP/1.1, JSON, no flush interval) the live frames bypass
/// hyper: once the initial frames and headers are flushed, the dispatcher writes each event's
/// chunk to the socket itself (see [`Outbox`]); the body then only writes what the socket
/// could not take at once, and ends the response when the watch ends.
pub struct WatchBody {
    initial: VecDeque<WatchFrame>,
    rx: Option<Arc<Outbox>>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    api_version: String,
    kind: String,
    done: bool,
    on_close: Option<OnClose>,
    pending: BytesMut,
    flush_interval: Duration,
    last_flush: Option<Instant>,
    flush_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    encoder: Option<Arc<dyn ObjectEncoder>>,
    first: bool,
    direct: Option<DirectTarget>,
    framing: Framing,
    phase: Phase,
    protobuf: bool,
}

impl std::fmt::Debug for WatchBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchBody")
            .field("initial", &self.initial.len())
            .field("done", &self.done)
            .field("phase", &self.phase)
            .finish()
    }
}

/// Bytes of live frames gathered into one chunk before it is written.
const CHUNK_LIMIT: usize = 64 * 1024;
/// The same for initial frames (a replay, a current state): a long replay written in larger
/// chunks costs both ends fewer writes, reads and wake-ups (measured: BENCHMARKS.md, session
/// 17). The initial frames waiting to be written already take far more memory than a chunk.
const INITIAL_CHUNK_LIMIT: usize = 256 * 1024;
/// Room past a chunk's limit for the event that crosses it without a reallocation, for
/// objects of typical size.
const CHUNK_SLACK: usize = 8 * 1024;

/// How many frames apart the initial frames' encoding prefetches each step of a frame's
/// chain: its object, then its body's first [`BODY_PREFETCH_LINES`] cache lines.
const BODY_PREFETCH_STEP: usize = 4;
/// The most cache lines of a body prefetched (a typical body is 25–40).
const BODY_PREFETCH_LINES: usize = 64;

impl WatchBody {
    /// A body that sends `initial`, then whatever arrives in `rx`, until `deadline`.
    pub fn new(
        initial: VecDeque<WatchFrame>,
        rx: Option<Arc<Outbox>>,
        deadline: Instant,
        api_version: String,
        kind: String,
        on_close: Option<OnClose>,
    ) -> WatchBody {
        WatchBody {
            initial,
            rx,
            deadline: Box::pin(tokio::time::sleep_until(deadline.into())),
            api_version,
            kind,
            done: false,
            on_close,
            pending: BytesMut::new(),
            flush_interval: Duration::ZERO,
            last_flush: None,
            flush_timer: None,
            encoder: None,
            first: true,
            direct: None,
            framing: Framing::Chunked,
            phase: Phase::Hyper,
            protobuf: false,
        }
    }

    /// Sends Kubernetes' protobuf watch framing (length-prefixed `WatchEvent`s) instead of
    /// JSON lines (builder style). The direct path is JSON only, so it is not used.
    #[must_use]
    pub fn with_protobuf_frames(mut self) -> WatchBody {
        self.protobuf = true;
        self
    }

    /// Appends `frame` in this stream's encoding.
    fn encode_into(&mut self, frame: &WatchFrame, out: &mut BytesMut) {
        if !self.protobuf {
            frame.encode_with(
                &self.api_version,
                &self.kind,
                self.encoder.as_deref(),
                &mut self.first,
                out,
            );
            return;
        }
        use crate::encoding::protobuf_encode as pb;
        let r = match frame {
            WatchFrame::Event { event_type, object } => {
                pb::cached_body(object).map(|raw| pb::put_watch_frame_raw(event_type, raw, out))
            }
            WatchFrame::Bookmark {
                resource_version,
                initial_events_end,
            } => pb::put_watch_frame_value(
                "BOOKMARK",
                &pb::bookmark_object(
                    &self.api_version,
                    &self.kind,
                    *resource_version,
                    *initial_events_end,
                ),
                out,
            ),
            WatchFrame::Error(status) => pb::put_watch_frame("ERROR", status, out),
        };
        if let Err(e) = r {
            tracing::error!(kind = %self.kind, "watch event dropped: {}", e.message);
        }
    }

    /// Renders event objects with `encoder` instead of their JSON (builder style).
    #[must_use]
    pub fn with_encoder(mut self, encoder: Arc<dyn ObjectEncoder>) -> WatchBody {
        self.encoder = Some(encoder);
        self
    }

    /// Sets the minimum time between two writes of live frames (builder style).
    #[must_use]
    pub fn with_flush_interval(mut self, interval: Duration) -> WatchBody {
        self.flush_interval = interval;
        self
    }

    /// Names the connection this response goes out on, so that it can be reset if the
    /// watcher is terminated and its client then reads nothing (builder style).
    #[must_use]
    pub fn with_connection(self, conn: Arc<DirectConn>) -> WatchBody {
        if let Some(rx) = &self.rx {
            rx.set_connection(conn);
        }
        self
    }

    /// Lets the dispatcher write live frames straight to `conn` (builder style). Only for a
    /// chunked HTTP/1.1 response that hyper serves on `conn`; ignored with an encoder or a
    /// flush interval.
    #[must_use]
    pub fn with_direct_conn(mut self, conn: Arc<DirectConn>) -> WatchBody {
        self.direct = Some(DirectTarget::Socket(conn));
        self
    }

    /// Lets the dispatcher write live frames as WebSocket text messages straight to `conn`,
    /// once the initial frames have been taken from this body (which the WebSocket pump
    /// writes itself). Returns the queue through which the pump must send its control frames
    /// while that is so (see [`Outbox::push_control`]); `None` if this body has no queue.
    pub fn with_direct_websocket(
        mut self,
        conn: Arc<DirectConn>,
    ) -> (WatchBody, Option<Arc<Outbox>>) {
        self.direct = Some(DirectTarget::Socket(conn));
        self.framing = Framing::WebSocket;
        let control = self.rx.clone();
        (self, control)
    }

    /// Lets the dispatcher append live frames as DATA frames of an HTTP/2 stream to its
    /// connection's writer, once the initial frames have been taken from this body. The
    /// caller must have handed every chunk it took to `sink` before polling again, so that
    /// the dispatcher's frames follow them. Ignored with an encoder or a flush interval.
    #[must_use]
    pub fn with_direct_http2(
        mut self,
        sink: crate::server::http2::writer::StreamSink,
    ) -> WatchBody {
        self.direct = Some(DirectTarget::Http2(sink));
        self.framing = Framing::Http2;
        self
    }

    fn encode_pending(&mut self, frame: &WatchFrame) {
        let mut pending = std::mem::take(&mut self.pending);
        self.encode_into(frame, &mut pending);
        self.pending = pending;
        if matches!(frame, WatchFrame::Error(_)) {
            // Nothing follows an ERROR event.
            self.end_rx();
        }
    }

    /// No more live frames: the dispatcher's pushes fail from now on.
    fn end_rx(&mut self) {
        if let Some(rx) = self.rx.take() {
            rx.close_receiver();
        }
    }

    /// True when pending frames may be written now; otherwise arms the flush timer.
    fn flush_due(&mut self, cx: &mut Context<'_>) -> bool {
        if self.rx.is_none() || self.flush_interval.is_zero() || self.pending.len() >= CHUNK_LIMIT {
            return true;
        }
        let Some(last) = self.last_flush else {
            return true;
        };
        let at = last + self.flush_interval;
        if Instant::now() >= at {
            return true;
        }
        let timer = self
            .flush_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at.into())));
        if timer.deadline() != at.into() {
            timer.as_mut().reset(at.into());
        }
        timer.as_mut().poll(cx).is_ready()
    }

    /// Drives the hand-over to the dispatcher and the direct phase. `None` when the frames go
    /// through hyper (the caller goes on); otherwise what `poll_frame` returns.
    #[allow(clippy::type_complexity)]
    fn poll_direct(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Option<Poll<Option<Result<Frame<Bytes>, Infallible>>>> {
        let (Some(conn), Some(rx)) = (self.direct.clone(), self.rx.clone()) else {
            return None;
        };
        let deadline_passed = self.deadline.as_mut().poll(cx).is_ready();
        loop {
            match self.phase {
                Phase::Hyper => {
                    if self.encoder.is_some() || self.protobuf || !self.flush_interval.is_zero() {
                        self.direct = None;
                        return None;
                    }
                    let framing = self.framing;
                    let DirectTarget::Socket(sock) = &conn else {
                        // HTTP/2: the request task handed everything taken so far to the
                        // connection's writer before polling again.
                        let (api_version, kind) = (&self.api_version, &self.kind);
                        rx.start_direct(conn.clone(), framing, |f| {
                            wire_of(f, framing, api_version, kind)
                        });
                        self.phase = Phase::Direct;
                        continue;
                    };
                    if framing == Framing::WebSocket {
                        // The pump wrote everything taken so far before polling again.
                        let (api_version, kind) = (&self.api_version, &self.kind);
                        rx.start_direct(conn.clone(), Framing::WebSocket, |f| {
                            wire_of(f, Framing::WebSocket, api_version, kind)
                        });
                        self.phase = Phase::Direct;
                        continue;
                    }
                    // Everything so far went to hyper; its next empty-buffer flush proves
                    // it is on the wire.
                    self.phase = Phase::AwaitFlush(sock.flushes());
                }
                Phase::AwaitFlush(seen) => {
                    if deadline_passed || rx.sender_closed() {
                        // Not worth handing over: finish through hyper.
                        self.direct = None;
                        self.phase = Phase::Hyper;
                        return None;
                    }
                    if let DirectTarget::Socket(sock) = &conn {
                        if sock.flushes() <= seen {
                            sock.wake_on_flush(cx.waker());
                            if sock.flushes() <= seen {
                                return Some(Poll::Pending);
                            }
                        }
                    }
                    let (api_version, kind) = (&self.api_version, &self.kind);
                    rx.start_direct(conn.clone(), Framing::Chunked, |f| {
                        wire_of(f, Framing::Chunked, api_version, kind)
                    });
                    self.phase = Phase::Direct;
                }
                Phase::Direct => {
                    if deadline_passed || rx.sender_closed() {
                        rx.stop_direct();
                        self.phase = Phase::Finishing;
                        continue;
                    }
                    match rx.poll_drain(cx) {
                        Poll::Pending => return Some(Poll::Pending),
                        Poll::Ready(Ok(())) if rx.sender_closed() => continue,
                        Poll::Ready(Ok(())) => return Some(Poll::Pending),
                        Poll::Ready(Err(_)) => {
                            self.done = true;
                            self.end_rx();
                            return Some(Poll::Ready(None));
                        }
                    }
                }
                Phase::Finishing => {
                    return Some(match rx.poll_drain(cx) {
                        Poll::Pending => Poll::Pending,
                        Poll::Ready(_) => {
                            // hyper writes the terminating chunk after this.
                            self.done = true;
                            self.end_rx();
                            Poll::Ready(None)
                        }
                    });
                }
            }
        }
    }
}

impl Drop for WatchBody {
    fn drop(&mut self) {
        self.end_rx();
        if let Some(f) = self.on_close.take() {
            f();
        }
    }
}

impl http_body::Body for WatchBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if !this.initial.is_empty() {
            // Sized for a full chunk up front: growing by doubling would copy each chunk's
            // bytes about once more and touch fresh pages on every chunk of a long replay.
            let first = this.initial.front().map_or(0, WatchFrame::encoded_len_hint);
            let mut buf = BytesMut::with_capacity(INITIAL_CHUNK_LIMIT.max(first) + CHUNK_SLACK);
            let mut initial = std::mem::take(&mut this.initial);
            let (mut taken, mut ended) = (0, false);
            while buf.len() < INITIAL_CHUNK_LIMIT {
                // A replay's objects and bodies lie across up to hundreds of MB: ask for the
                // next ones while this one is copied.
                if let Some(f) = initial.get(taken + 2 * BODY_PREFETCH_STEP) {
                    f.prefetch_object(this.protobuf);
                }
                if let Some(f) = initial.get(taken + BODY_PREFETCH_STEP) {
                    f.prefetch_body(this.protobuf);
                }
                let Some(f) = initial.get(taken) else {
                    break;
                };
                this.encode_into(f, &mut buf);
                taken += 1;
                if matches!(f, WatchFrame::Error(_)) {
                    ended = true;
                    break;
                }
            }
            // Dropped together, after the copies: dropping a frame decrements its object's
            // count with a locked instruction, which would wait for the stores of the copy
            // before it to drain, frame by frame.
            initial.drain(..taken);
            if ended {
                initial.clear();
                this.end_rx();
            }
            this.initial = initial;
            return Poll::Ready(Some(Ok(Frame::data(buf.freeze()))));
        }
        if let Some(p) = this.poll_direct(cx) {
            return p;
        }
        while this.pending.len() < CHUNK_LIMIT {
            let Some(rx) = this.rx.clone() else { break };
            // While frames wait for a flush, take more without registering for wake-ups:
            // the flush timer wakes us, so a busy stream is not woken once per event.
            let next = if this.pending.is_empty() || this.flush_interval.is_zero() {
                rx.poll_frame(cx)
            } else {
                match rx.try_frame() {
                    Ok(Some(f)) => Poll::Ready(Some(f)),
                    Ok(None) => Poll::Pending,
                    Err(()) => Poll::Ready(None),
                }
            };
            match next {
                Poll::Ready(Some(f)) => this.encode_pending(&f),
                Poll::Ready(None) => this.end_rx(),
                Poll::Pending => break,
            }
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            // Deliver what we have; then the stream ends.
            this.end_rx();
        }
        if !this.pending.is_empty() {
            if !this.flush_due(cx) {
                return Poll::Pending;
            }
            this.last_flush = Some(Instant::now());
            let chunk = this.pending.split().freeze();
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if this.rx.is_none() {
            this.done = true;
            return Poll::Ready(None);
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.done
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

    fn object(i: usize) -> Arc<CachedObject> {
        let json = format!(
            r#"{{"metadata":{{"name":"o{i}"}},"pad":"{}"}}"#,
            "x".repeat(1000)
        );
        Arc::new(CachedObject {
            key: format!("o{i}"),
            namespace: String::new(),
            name: format!("o{i}"),
            resource_version: i as u64,
            labels: Default::default(),
            fields: vec![],
            json: Bytes::from(json),
            derived: Default::default(),
        })
    }

    #[tokio::test]
    async fn a_long_replay_is_sent_in_order_in_several_chunks_and_stops_at_an_error() {
        use http_body_util::BodyExt as _;
        let mut initial: VecDeque<WatchFrame> = (0..600)
            .map(|i| WatchFrame::Event {
                event_type: "MODIFIED",
                object: object(i),
            })
            .collect();
        initial.push_back(WatchFrame::Error(Bytes::from_static(
            b"{\"kind\":\"Status\"}",
        )));
        initial.push_back(WatchFrame::Event {
            event_type: "ADDED",
            object: object(999),
        });
        let mut body = WatchBody::new(
            initial,
            None,
            Instant::now() + Duration::from_secs(60),
            "v1".into(),
            "Thing".into(),
            None,
        );
        let (mut chunks, mut text) = (0, Vec::new());
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.unwrap().into_data() else {
                panic!("only data frames")
            };
            chunks += 1;
            assert!(
                data.len() < INITIAL_CHUNK_LIMIT + CHUNK_SLACK,
                "{}",
                data.len()
            );
            text.extend_from_slice(&data);
        }
        assert!(chunks >= 3, "630 KB in 256 KiB chunks, got {chunks}");
        let lines: Vec<serde_json::Value> = text
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(
            lines.len(),
            601,
            "the events, then the error; nothing after it"
        );
        for (i, line) in lines.iter().take(600).enumerate() {
            assert_eq!(line["object"]["metadata"]["name"], format!("o{i}"));
        }
        assert_eq!(lines[600]["type"], "ERROR");
    }
}
