//! One client's watch: its filter, its bounded queue, and the response body that drains it.
//!
//! Ordering contract: a client sees first its initial frames (replay or current state, in
//! resourceVersion order), then live frames in the order the cacher dispatched them — which is
//! storage revision order. Bookmarks travel through the same queue, so a bookmark's version is
//! never older than an event already delivered.

use super::cached_object::CachedObject;
use super::filter::{Bucket, Filter};
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
use tokio::sync::mpsc;

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

/// The cacher's side of one client watch: what to send it and where.
#[derive(Debug)]
pub struct CacheWatcher {
    /// Unique id within the cacher.
    pub id: u64,
    /// The client's predicate.
    pub filter: Filter,
    /// The index bucket this watcher lives in.
    pub bucket: Bucket,
    /// Events at or below this version were part of the initial frames.
    pub start_rv: u64,
    /// Send bookmarks?
    pub allow_bookmarks: bool,
    /// When the stream ends (for the pre-timeout bookmark).
    pub deadline: Instant,
    /// When the next periodic bookmark is due.
    pub next_bookmark: Mutex<Instant>,
    /// Highest version queued to the client (events or bookmarks).
    pub last_sent_rv: AtomicU64,
    sender: mpsc::Sender<WatchFrame>,
}

/// Why a frame could not be queued.
#[derive(Debug)]
pub enum DeliverError {
    /// The queue is full; the frame is handed back so the caller may wait for room.
    Full(WatchFrame),
    /// The client went away.
    Closed,
}

impl CacheWatcher {
    /// Creates the watcher and the receiving end of its queue of `capacity` frames.
    pub fn new(
        id: u64,
        filter: Filter,
        start_rv: u64,
        allow_bookmarks: bool,
        deadline: Instant,
        capacity: usize,
    ) -> (CacheWatcher, mpsc::Receiver<WatchFrame>) {
        let (sender, rx) = mpsc::channel(capacity.max(1));
        let bucket = filter.bucket();
        let now = Instant::now();
        let first = first_bookmark(now, deadline);
        (
            CacheWatcher {
                id,
                filter,
                bucket,
                start_rv,
                allow_bookmarks,
                deadline,
                next_bookmark: Mutex::new(first),
                last_sent_rv: AtomicU64::new(start_rv),
                sender,
            },
            rx,
        )
    }

    /// The frame this watcher should get for `event` under the old/new selector rule, if any.
    pub fn frame_for(
        &self,
        event: &WatchCacheEvent,
        restamp: impl FnOnce() -> Arc<CachedObject>,
    ) -> Option<WatchFrame> {
        if event.resource_version <= self.start_rv {
            return None;
        }
        let new_matches =
            event.event_type != EventType::Deleted && self.filter.matches(&event.object);
        let old_matches = event.prev.as_ref().is_some_and(|p| self.filter.matches(p));
        let (event_type, object) = match (event.event_type, new_matches, old_matches) {
            (EventType::Deleted, _, true) => ("DELETED", event.object.clone()),
            (_, true, true) => ("MODIFIED", event.object.clone()),
            (_, true, false) => ("ADDED", event.object.clone()),
            (_, false, true) => ("DELETED", restamp()),
            _ => return None,
        };
        Some(WatchFrame::Event { event_type, object })
    }

    /// Queues a frame without waiting.
    pub fn deliver(&self, frame: WatchFrame, rv: u64) -> Result<(), DeliverError> {
        match self.sender.try_send(frame) {
            Ok(()) => {
                self.last_sent_rv.fetch_max(rv, Ordering::Relaxed);
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(f)) => Err(DeliverError::Full(f)),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(DeliverError::Closed),
        }
    }

    /// Queues a frame, waiting at most `budget` for room. `false` if it could not.
    pub async fn deliver_within(&self, frame: WatchFrame, rv: u64, budget: Duration) -> bool {
        match self.sender.send_timeout(frame, budget).await {
            Ok(()) => {
                self.last_sent_rv.fetch_max(rv, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
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

/// The HTTP response body of one watch: initial frames, then the live queue, until the
/// deadline, termination by the cacher, or the client going away.
///
/// Ready frames are coalesced into one chunk (up to 64 KiB) to save syscalls. With a non-zero
/// `flush_interval`, live frames are written at most once per interval: the first frame after
/// a quiet period goes out at once, frames arriving sooner wait (at most the interval) and
/// leave together — fewer, larger writes for busy watchers, unchanged latency for idle ones.
pub struct WatchBody {
    initial: VecDeque<WatchFrame>,
    rx: Option<mpsc::Receiver<WatchFrame>>,
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
}

impl std::fmt::Debug for WatchBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchBody")
            .field("initial", &self.initial.len())
            .field("done", &self.done)
            .finish()
    }
}

const CHUNK_LIMIT: usize = 64 * 1024;

impl WatchBody {
    /// A body that sends `initial`, then whatever arrives on `rx`, until `deadline`.
    pub fn new(
        initial: VecDeque<WatchFrame>,
        rx: Option<mpsc::Receiver<WatchFrame>>,
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

    fn encode_pending(&mut self, frame: &WatchFrame) {
        frame.encode_with(
            &self.api_version,
            &self.kind,
            self.encoder.as_deref(),
            &mut self.first,
            &mut self.pending,
        );
        if matches!(frame, WatchFrame::Error(_)) {
            // Nothing follows an ERROR event.
            self.rx = None;
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
}

impl Drop for WatchBody {
    fn drop(&mut self) {
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
            let mut buf = BytesMut::new();
            while buf.len() < CHUNK_LIMIT {
                let Some(f) = this.initial.pop_front() else {
                    break;
                };
                f.encode_with(
                    &this.api_version,
                    &this.kind,
                    this.encoder.as_deref(),
                    &mut this.first,
                    &mut buf,
                );
                if matches!(f, WatchFrame::Error(_)) {
                    this.initial.clear();
                    this.rx = None;
                }
            }
            return Poll::Ready(Some(Ok(Frame::data(buf.freeze()))));
        }
        while this.pending.len() < CHUNK_LIMIT {
            let Some(rx) = this.rx.as_mut() else { break };
            // While frames wait for a flush, take more without registering for wake-ups:
            // the flush timer wakes us, so a busy stream is not woken once per event.
            let next = if this.pending.is_empty() || this.flush_interval.is_zero() {
                rx.poll_recv(cx)
            } else {
                match rx.try_recv() {
                    Ok(f) => Poll::Ready(Some(f)),
                    Err(mpsc::error::TryRecvError::Empty) => Poll::Pending,
                    Err(mpsc::error::TryRecvError::Disconnected) => Poll::Ready(None),
                }
            };
            match next {
                Poll::Ready(Some(f)) => this.encode_pending(&f),
                Poll::Ready(None) => this.rx = None,
                Poll::Pending => break,
            }
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            // Deliver what we have; then the stream ends.
            this.rx = None;
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
