//! The bounded queue between the cacher's dispatcher and one watch response.
//!
//! Two modes. Normally the dispatcher queues [`WatchFrame`]s and the response body (polled by
//! the connection's task) takes and encodes them. In direct mode the dispatcher hands each
//! frame's wire bytes to the [`DirectTarget`] itself — a transport's [`WatchSink`] whose
//! response headers are on the wire (the server's HTTP/1.1 and WebSocket sockets, HTTP/2
//! streams); only bytes the target could not take at once (a full socket, a closed
//! flow-control window) are queued, and the body's task hands them over when the target has
//! room. Either way the queue holds at most
//! `capacity` entries, order is the order of `push`, and nothing is written out of order: a
//! direct write happens only when nothing is queued ahead of it.

pub use super::sink::Framing;
use super::sink::{WatchConnection, WatchSink};
use super::watch_frame::WatchFrame;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::sync::Notify;

/// Why a frame could not be queued.
#[derive(Debug)]
pub enum DeliverError {
    /// The queue is full; the frame is handed back so the caller may wait for room.
    Full(WatchFrame),
    /// The client went away.
    Closed,
}

/// Where a direct-mode outbox hands its frames' bytes: a transport's sink.
pub type DirectTarget = Arc<dyn WatchSink>;

/// Why the owner of a WebSocket connection could not hand a control frame to the outbox.
#[derive(Debug)]
pub enum ControlRefused {
    /// Direct mode is off: the caller writes the frame itself.
    NotDirect(Bytes),
    /// The queue is at capacity (the client sends but does not read): the caller ends the
    /// watch rather than let replies pile up.
    Backlogged,
}

/// What became of a pushed frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// Queued for the response body's task.
    Queued,
    /// Written to the socket by the caller (direct mode).
    Written,
    /// Direct mode, but the socket was full: (the rest of) its bytes wait for the body's task.
    Deferred,
}

/// What became of a batch of frames pushed with [`Outbox::push_many`].
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// Frames queued for the response body's task.
    pub queued: usize,
    /// Frames written to the socket by the caller.
    pub written: usize,
    /// Frames (partly) left for the body's task because the socket was full.
    pub deferred: usize,
    /// Frames not taken because the queue is full, in order; the caller may wait for room.
    pub rest: Vec<WatchFrame>,
    /// The client went away; nothing was taken.
    pub closed: bool,
}

/// The progress mark before the first check (see [`Outbox::check_progress`]).
const NO_MARK: u64 = u64::MAX;

/// One watcher's queue; shared by the dispatcher (sender) and the response body (receiver).
///
/// Laid out for the fan-out: what a push reads (the hint, the capacity, the lock, the mode
/// flags, the target, the direct-mode backlog) comes first, in the struct's first two cache
/// lines, so two prefetches cover it (see [`Outbox::prefetch`]).
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Outbox {
    /// In direct mode, the addresses of the target's hot state (0: none): read without the
    /// lock, only ever prefetched, so a stale address is harmless.
    target_hint: [AtomicUsize; 2],
    capacity: usize,
    inner: Mutex<Inner>,
    room: Notify,
    /// The connection the response goes out on, when it can be reset (HTTP/1.1, WebSocket).
    connection: std::sync::OnceLock<Arc<dyn WatchConnection>>,
    /// The connection's write count at the last progress check (see
    /// [`Outbox::check_progress`]).
    progress_writes: AtomicU64,
    /// Progress checks in a row that found frames waiting and no byte written since the one
    /// before.
    stalled_checks: AtomicU32,
}

#[derive(Debug, Default)]
#[repr(C)]
struct Inner {
    receiver_closed: bool,
    direct: bool,
    sender_closed: bool,
    pusher_waiting: bool,
    framing: Framing,
    conn: Option<DirectTarget>,
    wire: VecDeque<Bytes>,
    frames: VecDeque<WatchFrame>,
    waker: Option<Waker>,
}

impl Inner {
    fn len(&self) -> usize {
        self.frames.len() + self.wire.len()
    }

    fn wake(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

impl Outbox {
    /// An empty queue that holds at most `capacity` frames.
    pub fn new(capacity: usize) -> Outbox {
        Outbox {
            inner: Mutex::new(Inner::default()),
            room: Notify::new(),
            capacity: capacity.max(1),
            target_hint: [AtomicUsize::new(0), AtomicUsize::new(0)],
            connection: std::sync::OnceLock::new(),
            progress_writes: AtomicU64::new(NO_MARK),
            stalled_checks: AtomicU32::new(0),
        }
    }

    /// Called periodically (about once a second): notes whether the client has taken any
    /// byte since the last call while frames wait for it. Only for responses whose
    /// connection is known ([`Outbox::set_connection`]).
    pub fn check_progress(&self) {
        let Some(conn) = self.connection.get() else {
            return;
        };
        let writes = conn.writes();
        let mark = self.progress_writes.swap(writes, Ordering::Relaxed);
        let moved = mark == NO_MARK || mark != writes;
        if moved || self.inner.lock().len() == 0 {
            self.stalled_checks.store(0, Ordering::Relaxed);
        } else {
            self.stalled_checks.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// True when frames have waited for a full progress period without the client taking a
    /// single byte: a client that stopped reading, not one that is briefly behind. Waiting
    /// for room in its queue would only delay everyone else.
    pub fn is_stalled(&self) -> bool {
        self.stalled_checks.load(Ordering::Relaxed) > 0
    }

    /// Records the connection the response goes out on (the first one given counts), so
    /// that [`Outbox::terminate`] can hand it to whoever may have to reset it.
    pub fn set_connection(&self, conn: Arc<dyn WatchConnection>) {
        let _ = self.connection.set(conn);
    }

    /// Ends the watch of a client that does not keep up: what is queued is dropped at once
    /// (but a chunk the socket may have taken part of), the response ends after that, and
    /// later pushes fail. Returns the connection, if known, so that the caller can reset it
    /// should the client go on not reading.
    pub fn terminate(&self) -> Option<Arc<dyn WatchConnection>> {
        let mut inner = self.inner.lock();
        inner.frames.clear();
        inner.wire.truncate(1);
        inner.sender_closed = true;
        inner.wake();
        drop(inner);
        self.room.notify_waiters();
        self.connection.get().cloned()
    }

    /// Queues `frame` (or, in direct mode with nothing queued, writes `wire(&frame)` to the
    /// socket at once) without waiting.
    pub fn push(
        &self,
        frame: WatchFrame,
        wire: &mut impl FnMut(&WatchFrame, Framing) -> Bytes,
    ) -> Result<Delivered, DeliverError> {
        let mut inner = self.inner.lock();
        if inner.receiver_closed {
            return Err(DeliverError::Closed);
        }
        if inner.direct {
            if inner.wire.len() >= self.capacity {
                return Err(DeliverError::Full(frame));
            }
            let mut bytes = wire(&frame, inner.framing);
            if inner.wire.is_empty() {
                let Some(conn) = inner.conn.as_ref() else {
                    return Err(DeliverError::Closed);
                };
                match conn.offer(&mut bytes) {
                    Ok(true) => return Ok(Delivered::Written),
                    Ok(false) => {}
                    Err(_) => {
                        inner.receiver_closed = true;
                        inner.wake();
                        return Err(DeliverError::Closed);
                    }
                }
            }
            // The socket is full: the body's task writes the rest when it drains.
            inner.wire.push_back(bytes);
            inner.wake();
            return Ok(Delivered::Deferred);
        }
        if inner.len() >= self.capacity {
            return Err(DeliverError::Full(frame));
        }
        inner.frames.push_back(frame);
        inner.wake();
        Ok(Delivered::Queued)
    }

    /// Pushes several frames in order, as [`Outbox::push`] would one by one, but in direct
    /// mode writes them with as few (vectored) writes as the socket allows. Frames that do
    /// not fit the queue come back in [`BatchOutcome::rest`].
    pub fn push_many(
        &self,
        frames: Vec<WatchFrame>,
        wire: &mut impl FnMut(&WatchFrame, Framing) -> Bytes,
    ) -> BatchOutcome {
        let mut out = BatchOutcome::default();
        let mut inner = self.inner.lock();
        if inner.receiver_closed {
            out.closed = true;
            return out;
        }
        let room = self.capacity.saturating_sub(inner.len());
        let mut frames = frames.into_iter();
        if !inner.direct {
            for f in frames.by_ref().take(room) {
                inner.frames.push_back(f);
                out.queued += 1;
            }
            out.rest.extend(frames);
            if out.queued > 0 {
                inner.wake();
            }
            return out;
        }
        let framing = inner.framing;
        let mut chunks: VecDeque<Bytes> = frames
            .by_ref()
            .take(room)
            .map(|f| wire(&f, framing))
            .collect();
        out.rest.extend(frames);
        let n = chunks.len();
        if inner.wire.is_empty() {
            let Some(conn) = inner.conn.clone() else {
                out.closed = true;
                return out;
            };
            let sent = conn.offer_all(&mut chunks);
            if sent.is_err() {
                inner.receiver_closed = true;
                inner.wake();
                out.closed = true;
                return out;
            }
        }
        out.deferred = chunks.len();
        out.written = n - out.deferred;
        if !chunks.is_empty() {
            inner.wire.extend(chunks);
            inner.wake();
        }
        out
    }

    /// Like [`Outbox::push`], but waits at most `budget` for room. False if there was none
    /// in time or the client went away.
    pub async fn push_within(
        &self,
        mut frame: WatchFrame,
        wire: &mut impl FnMut(&WatchFrame, Framing) -> Bytes,
        budget: Duration,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + budget;
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            self.inner.lock().pusher_waiting = true;
            match self.push(frame, wire) {
                Ok(_) => return true,
                Err(DeliverError::Closed) => return false,
                Err(DeliverError::Full(f)) => frame = f,
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }

    /// The sender is done (the watcher was removed); the receiver sees the end after the
    /// queued frames.
    pub fn close(&self) {
        let mut inner = self.inner.lock();
        inner.sender_closed = true;
        inner.wake();
    }

    /// The receiver is gone; later pushes fail with [`DeliverError::Closed`].
    pub fn close_receiver(&self) {
        let mut inner = self.inner.lock();
        inner.receiver_closed = true;
        inner.frames.clear();
        inner.wire.clear();
        inner.conn = None;
        inner.direct = false;
        drop(inner);
        self.room.notify_waiters();
    }

    /// True once the sender closed.
    pub fn sender_closed(&self) -> bool {
        self.inner.lock().sender_closed
    }

    fn popped(&self, inner: &mut Inner) {
        if inner.pusher_waiting {
            inner.pusher_waiting = false;
            self.room.notify_waiters();
        }
    }

    /// The next queued frame; `Ready(None)` once the sender closed and the queue is empty.
    pub fn poll_frame(&self, cx: &mut Context<'_>) -> Poll<Option<WatchFrame>> {
        let mut inner = self.inner.lock();
        match inner.frames.pop_front() {
            Some(f) => {
                self.popped(&mut inner);
                Poll::Ready(Some(f))
            }
            None if inner.sender_closed => Poll::Ready(None),
            None => {
                inner.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// The next queued frame without registering for a wake-up: `Ok(None)` when empty,
    /// `Err(())` once the sender closed and the queue is empty.
    #[allow(clippy::result_unit_err)]
    pub fn try_frame(&self) -> Result<Option<WatchFrame>, ()> {
        let mut inner = self.inner.lock();
        match inner.frames.pop_front() {
            Some(f) => {
                self.popped(&mut inner);
                Ok(Some(f))
            }
            None if inner.sender_closed => Err(()),
            None => Ok(None),
        }
    }

    /// Switches to direct mode on `conn`: frames queued so far become wire bytes (via
    /// `encode`, in order) and later pushes may hand their bytes to it themselves.
    pub fn start_direct(
        &self,
        conn: DirectTarget,
        framing: Framing,
        mut encode: impl FnMut(&WatchFrame) -> Bytes,
    ) {
        let mut inner = self.inner.lock();
        if inner.receiver_closed {
            return;
        }
        let frames = std::mem::take(&mut inner.frames);
        inner.wire.extend(frames.iter().map(&mut encode));
        for (hint, addr) in self.target_hint.iter().zip(conn.hot_addresses()) {
            hint.store(addr, Ordering::Relaxed);
        }
        inner.conn = Some(conn);
        inner.direct = true;
        inner.framing = framing;
    }

    /// Prefetches the two cache lines a push reads first (a hint, see [`super::prefetch`]);
    /// `self` is not read.
    #[inline]
    pub fn prefetch(&self) {
        let p: *const Outbox = self;
        super::prefetch::prefetch(p);
        super::prefetch::prefetch(p.cast::<u8>().wrapping_add(64));
    }

    /// Prefetches the direct target's state that the next [`Outbox::push`] writes through (a
    /// hint, see [`super::prefetch`]); nothing before direct mode. Reads the hint, so prefetch
    /// the queue first.
    #[inline]
    pub fn prefetch_target(&self) {
        for hint in &self.target_hint {
            let addr = hint.load(Ordering::Relaxed);
            if addr != 0 {
                super::prefetch::prefetch(addr as *const u8);
            }
        }
    }

    /// Sends `bytes` (a complete WebSocket control frame) in order with the dispatcher's
    /// writes while direct mode is on; otherwise hands them back for the caller to write.
    /// Refused once the queue holds `capacity` entries, like events.
    pub fn push_control(&self, bytes: Bytes) -> Result<(), ControlRefused> {
        let mut inner = self.inner.lock();
        if !inner.direct {
            return Err(ControlRefused::NotDirect(bytes));
        }
        if inner.wire.len() >= self.capacity {
            return Err(ControlRefused::Backlogged);
        }
        let mut bytes = bytes;
        if inner.wire.is_empty() {
            if let Some(conn) = inner.conn.as_ref() {
                if conn.offer(&mut bytes) == Ok(true) {
                    return Ok(());
                }
            }
        }
        inner.wire.push_back(bytes);
        inner.wake();
        Ok(())
    }

    /// Ends direct mode: later pushes are queued as frames (and never written), so the
    /// receiver can finish the stream after draining what is queued.
    pub fn stop_direct(&self) {
        self.inner.lock().direct = false;
    }

    /// Writes queued wire bytes to the socket. `Ready(Ok)` when nothing is left (the waker is
    /// then registered for the next push), `Pending` while the socket is full.
    pub fn poll_drain(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut inner = self.inner.lock();
        let Some(conn) = inner.conn.clone() else {
            return Poll::Ready(Ok(()));
        };
        loop {
            let Some(front) = inner.wire.front_mut() else {
                inner.waker = Some(cx.waker().clone());
                return Poll::Ready(Ok(()));
            };
            match conn.poll_send(front, cx) {
                Poll::Ready(Ok(())) => {
                    inner.wire.pop_front();
                    self.popped(&mut inner);
                }
                Poll::Ready(Err(e)) => {
                    inner.receiver_closed = true;
                    return Poll::Ready(Err(e));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Frames and wire bytes for the tests of the outbox and of the sinks that drain it.
#[cfg(test)]
pub(crate) mod test_frames {
    use super::Framing;
    use crate::cacher::WatchFrame;
    use bytes::Bytes;

    /// A bookmark at `rv`.
    pub(crate) fn bookmark(rv: u64) -> WatchFrame {
        WatchFrame::Bookmark {
            resource_version: rv,
            initial_events_end: false,
        }
    }

    /// The version of a bookmark (0 for any other frame).
    pub(crate) fn rv_of(f: &WatchFrame) -> u64 {
        match f {
            WatchFrame::Bookmark {
                resource_version, ..
            } => *resource_version,
            _ => 0,
        }
    }

    /// Wire bytes of a bookmark: its version, padded to `size` bytes, newline-terminated.
    pub(crate) fn wire_of(size: usize) -> impl FnMut(&WatchFrame, Framing) -> Bytes {
        move |f, _| {
            let mut s = format!("{:0width$}", rv_of(f), width = size - 1);
            s.push('\n');
            Bytes::from(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_frames::{bookmark, rv_of, wire_of};
    use super::*;

    #[test]
    fn what_a_push_reads_lies_in_the_first_two_cache_lines() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<Outbox>(), 64);
        // The lock comes before its data (which may be unsized, so it is last).
        let inner = offset_of!(Outbox, inner) + size_of::<Mutex<Inner>>() - size_of::<Inner>();
        assert!(offset_of!(Outbox, target_hint) + size_of::<[AtomicUsize; 2]>() <= 64);
        assert!(offset_of!(Outbox, capacity) + 8 <= 128);
        assert!(inner + offset_of!(Inner, conn) + size_of::<Option<DirectTarget>>() <= 128);
        assert!(inner + offset_of!(Inner, wire) + size_of::<VecDeque<Bytes>>() <= 128);
        assert!(inner + offset_of!(Inner, pusher_waiting) < 128);
    }

    #[test]
    fn queued_frames_keep_order_and_capacity() {
        let ob = Outbox::new(3);
        let mut wire = wire_of(8);
        assert_eq!(ob.push(bookmark(1), &mut wire).unwrap(), Delivered::Queued);
        let out = ob.push_many(vec![bookmark(2), bookmark(3), bookmark(4)], &mut wire);
        assert_eq!(out.queued, 2);
        assert_eq!(out.rest.iter().map(rv_of).collect::<Vec<_>>(), vec![4]);
        assert!(matches!(
            ob.push(bookmark(5), &mut wire),
            Err(DeliverError::Full(_))
        ));
        let got: Vec<u64> = std::iter::from_fn(|| ob.try_frame().ok().flatten())
            .map(|f| rv_of(&f))
            .collect();
        assert_eq!(got, vec![1, 2, 3]);
        ob.close();
        assert!(ob.try_frame().is_err(), "closed and empty");
        ob.close_receiver();
        assert!(matches!(
            ob.push(bookmark(6), &mut wire),
            Err(DeliverError::Closed)
        ));
    }
}
