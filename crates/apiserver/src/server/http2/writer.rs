//! The send side of one HTTP/2 connection, shared by everyone who produces frames for it: the
//! connection task (control frames), the request tasks (response headers and bodies) and the
//! watch cache's dispatcher (watch events, appended straight from the fan-out).
//!
//! Why shared: a connection carrying a hundred watch streams gets, for each event, a DATA frame
//! per stream. Appending them here — a header and a shared payload each, no copy, no task
//! wake-up per stream — and waking the connection task once per dispatch pass (see [`batch`])
//! puts all of them into one vectored write.
//!
//! Flow control (RFC 9113 §5.2) is accounted here: DATA leaves only within both the stream's
//! and the connection's send window; what does not fit stays with its producer, who waits with
//! [`ConnWriter::poll_window`]. Ordering: frames of one stream leave in the order they were
//! appended; frames are never reordered across streams either (one queue).

use super::frame::{self, flag, kind, ErrorCode, FrameHead, HEAD_LEN, MAX_WINDOW};
use super::send_queue::SendQueue;
use crate::cacher::sink::{SinkClosed, WatchSink};
use bytes::{Buf, Bytes, BytesMut};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Unwritten bytes at which producers stop appending (a client that does not read must
/// not make the server buffer whatever its flow-control windows would allow).
pub const HIGH_WATER: usize = 4 << 20;

/// The stream (or the whole connection) is gone: reset by the client, ended, or closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the HTTP/2 stream is closed")]
pub struct StreamClosed;

/// The client made a window larger than 2^31 - 1 (a FLOW_CONTROL_ERROR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("flow-control window overflow")]
pub struct WindowOverflow;

/// The send side of one connection (see the module docs).
#[derive(Debug)]
pub struct ConnWriter {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Bytes waiting for the connection task, in order.
    out: SendQueue,
    conn_window: i64,
    initial_window: i64,
    max_frame: usize,
    streams: HashMap<u32, SendStream, StreamIds>,
    /// Producers waiting for the connection window or for the queue to drain.
    conn_waiters: Vec<Waker>,
    /// Bytes queued (DATA payloads and other frames) and not yet written by the connection
    /// task.
    unwritten: usize,
    /// The connection task.
    waker: Option<Waker>,
    wake_scheduled: bool,
    closed: bool,
    /// Streams whose response ended since the connection task last looked.
    finished: Vec<u32>,
}

/// Stream ids are unique small integers chosen by the client: they hash to themselves (a
/// client cannot make them collide more than sequential ids do).
#[derive(Debug, Default, Clone, Copy)]
struct StreamIds;

impl std::hash::BuildHasher for StreamIds {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

#[derive(Debug)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // Odd client ids: drop the constant low bit, spread the rest for hashbrown's top bits.
        (self.0 >> 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n);
    }
}

#[derive(Debug)]
struct SendStream {
    shared: Arc<StreamWindow>,
    waker: Option<Waker>,
}

/// One stream's send window, shared by the connection's stream table and the stream's
/// [`StreamSink`]: the watch fan-out reaches it through the sink without a table lookup, and can
/// prefetch it (a table slot is one more cold cache line per stream and event). Read and
/// written only under the writer's lock; the atomics only make the sharing safe.
#[derive(Debug)]
pub struct StreamWindow {
    window: AtomicI64,
    /// False once the stream left the table (ended, reset, connection closed).
    open: AtomicBool,
}

impl StreamWindow {
    fn get(&self) -> i64 {
        self.window.load(Ordering::Relaxed)
    }

    fn set(&self, v: i64) {
        self.window.store(v, Ordering::Relaxed);
    }
}

thread_local! {
    /// Depth of [`batch`] scopes on this thread, and the wakes they hold back.
    static BATCH: RefCell<(usize, Vec<Waker>)> = const { RefCell::new((0, Vec::new())) };
}

/// Runs `f`; connection tasks that frames were appended for during `f` (on this thread) are
/// woken once, when it returns, instead of at the first append — so a fan-out's frames for
/// one connection leave in one write. `f` must not block on those tasks.
pub fn batch<R>(f: impl FnOnce() -> R) -> R {
    BATCH.with(|b| b.borrow_mut().0 += 1);
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            let wakers = BATCH.with(|b| {
                let mut b = b.borrow_mut();
                b.0 = b.0.saturating_sub(1);
                if b.0 == 0 {
                    std::mem::take(&mut b.1)
                } else {
                    Vec::new()
                }
            });
            for w in wakers {
                w.wake();
            }
        }
    }
    let _release = Release;
    f()
}

fn wake_now_or_after_batch(w: Waker) {
    let held = BATCH.with(|b| {
        let mut b = b.borrow_mut();
        if b.0 > 0 {
            b.1.push(w.clone());
            true
        } else {
            false
        }
    });
    if !held {
        w.wake();
    }
}

impl State {
    fn schedule_wake(&mut self) {
        if self.wake_scheduled {
            return;
        }
        if let Some(w) = self.waker.clone() {
            self.wake_scheduled = true;
            wake_now_or_after_batch(w);
        }
    }

    fn push_head(&mut self, head: FrameHead) {
        self.unwritten += HEAD_LEN;
        self.out.push_frame(head.encode(), &Bytes::new(), 0, 0);
    }

    fn push_frame_bytes(&mut self, f: BytesMut) {
        self.unwritten += f.len();
        self.out.push_raw(f.freeze());
        self.schedule_wake();
    }

    /// Takes stream `id` out of the table; its sink sees it closed from now on.
    fn remove_stream(&mut self, id: u32) -> Option<SendStream> {
        let st = self.streams.remove(&id)?;
        st.shared.open.store(false, Ordering::Relaxed);
        Some(st)
    }

    fn wake_all(&mut self) {
        for w in self.conn_waiters.drain(..) {
            w.wake();
        }
        for s in self.streams.values_mut() {
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
    }
}

impl ConnWriter {
    /// A writer for a connection whose peer has not sent SETTINGS yet (default windows and
    /// frame size).
    pub fn new() -> Arc<ConnWriter> {
        Arc::new(ConnWriter {
            state: Mutex::new(State {
                out: SendQueue::new(),
                conn_window: frame::DEFAULT_WINDOW,
                initial_window: frame::DEFAULT_WINDOW,
                max_frame: frame::DEFAULT_MAX_FRAME,
                streams: HashMap::default(),
                conn_waiters: Vec::new(),
                unwritten: 0,
                waker: None,
                wake_scheduled: false,
                closed: false,
                finished: Vec::new(),
            }),
        })
    }

    /// Registers a new stream with the peer's current initial window; the returned window is
    /// the stream's, for [`StreamSink`].
    pub fn open_stream(&self, id: u32) -> Arc<StreamWindow> {
        let mut s = self.state.lock();
        let shared = Arc::new(StreamWindow {
            window: AtomicI64::new(s.initial_window),
            open: AtomicBool::new(true),
        });
        let old = s.streams.insert(
            id,
            SendStream {
                shared: shared.clone(),
                waker: None,
            },
        );
        if let Some(old) = old {
            old.shared.open.store(false, Ordering::Relaxed);
        }
        shared
    }

    /// Queues a control frame (SETTINGS, PING, WINDOW_UPDATE, GOAWAY, RST_STREAM …) already
    /// encoded. Control frames are not flow-controlled.
    pub fn push_control(&self, frames: BytesMut) {
        if frames.is_empty() {
            return;
        }
        self.state.lock().push_frame_bytes(frames);
    }

    /// Queues a response header block for stream `id`, split into HEADERS and CONTINUATION
    /// frames as the peer's frame size requires; with `end_stream` the stream ends there.
    pub fn send_headers(
        &self,
        id: u32,
        block: &[u8],
        end_stream: bool,
    ) -> Result<(), StreamClosed> {
        let mut s = self.state.lock();
        if s.closed || !s.streams.contains_key(&id) {
            return Err(StreamClosed);
        }
        let mut out = BytesMut::new();
        frame::put_header_block(id, block, end_stream, s.max_frame, &mut out);
        s.push_frame_bytes(out);
        if end_stream {
            s.remove_stream(id);
            s.finished.push(id);
        }
        Ok(())
    }

    /// Appends as much of `data` as the windows allow as DATA frames of stream `id`, whose
    /// window (from [`ConnWriter::open_stream`]) is at hand, so no table lookup. The rest
    /// stays in `data`. `Ok(true)` when all of it was appended.
    pub fn try_send_data(
        &self,
        id: u32,
        window: &StreamWindow,
        data: &mut Bytes,
    ) -> Result<bool, StreamClosed> {
        let mut guard = self.state.lock();
        let State {
            out,
            conn_window,
            max_frame,
            closed,
            unwritten,
            ..
        } = &mut *guard;
        if *closed || !window.open.load(Ordering::Relaxed) {
            return Err(StreamClosed);
        }
        let mut stream_window = window.get();
        let mut sent = 0;
        while sent < data.len() {
            let room = stream_window.min(*conn_window);
            if room <= 0 || *unwritten >= HIGH_WATER {
                break;
            }
            let n = (data.len() - sent).min(room as usize).min(*max_frame);
            stream_window -= n as i64;
            *conn_window -= n as i64;
            let head = FrameHead {
                len: n,
                kind: kind::DATA,
                flags: 0,
                stream: id,
            };
            out.push_frame(head.encode(), data, sent, n);
            *unwritten += HEAD_LEN + n;
            sent += n;
        }
        if sent > 0 {
            window.set(stream_window);
            data.advance(sent);
            guard.schedule_wake();
        }
        Ok(data.is_empty())
    }

    /// Ready when stream `id` may send at least one byte of DATA; otherwise registers `cx` to
    /// be woken when a WINDOW_UPDATE or SETTINGS makes room (or the stream closes).
    pub fn poll_window(&self, id: u32, cx: &mut Context<'_>) -> Poll<Result<(), StreamClosed>> {
        let mut guard = self.state.lock();
        let s = &mut *guard;
        if s.closed {
            return Poll::Ready(Err(StreamClosed));
        }
        let conn_window = s.conn_window;
        let Some(st) = s.streams.get_mut(&id) else {
            return Poll::Ready(Err(StreamClosed));
        };
        let window = st.shared.get();
        if window > 0 && conn_window > 0 && s.unwritten < HIGH_WATER {
            return Poll::Ready(Ok(()));
        }
        if window <= 0 {
            st.waker = Some(cx.waker().clone());
        } else {
            s.conn_waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Ends stream `id` with an empty DATA frame flagged END_STREAM.
    pub fn end_stream(&self, id: u32) {
        let mut s = self.state.lock();
        if s.closed || s.remove_stream(id).is_none() {
            return;
        }
        s.push_head(FrameHead {
            len: 0,
            kind: kind::DATA,
            flags: flag::END_STREAM,
            stream: id,
        });
        s.finished.push(id);
        s.schedule_wake();
    }

    /// Ends stream `id` from our side with RST_STREAM `code` (a response that failed).
    pub fn reset_stream(&self, id: u32, code: ErrorCode) {
        let mut s = self.state.lock();
        if s.closed || s.remove_stream(id).is_none() {
            return;
        }
        let mut out = BytesMut::new();
        frame::put_rst_stream(id, code, &mut out);
        s.push_frame_bytes(out);
        s.finished.push(id);
    }

    /// The client reset stream `id`: nothing more may be sent on it.
    pub fn remote_reset(&self, id: u32) {
        let mut s = self.state.lock();
        if let Some(mut st) = s.remove_stream(id) {
            if let Some(w) = st.waker.take() {
                w.wake();
            }
            s.finished.push(id);
        }
    }

    /// Applies a WINDOW_UPDATE (`id` 0: the connection). Updates for unknown (closed) streams
    /// are ignored, as RFC 9113 allows.
    pub fn window_update(&self, id: u32, increment: u32) -> Result<(), WindowOverflow> {
        let mut guard = self.state.lock();
        let s = &mut *guard;
        if id == 0 {
            s.conn_window += i64::from(increment);
            if s.conn_window > MAX_WINDOW {
                return Err(WindowOverflow);
            }
            for w in s.conn_waiters.drain(..) {
                w.wake();
            }
            return Ok(());
        }
        if let Some(st) = s.streams.get_mut(&id) {
            let window = st.shared.get() + i64::from(increment);
            st.shared.set(window);
            if window > MAX_WINDOW {
                return Err(WindowOverflow);
            }
            if let Some(w) = st.waker.take() {
                w.wake();
            }
        }
        Ok(())
    }

    /// Applies the peer's SETTINGS_INITIAL_WINDOW_SIZE: every open stream's window moves by the
    /// difference (RFC 9113 §6.9.2).
    pub fn set_initial_window(&self, value: u32) -> Result<(), WindowOverflow> {
        let value = i64::from(value);
        if value > MAX_WINDOW {
            return Err(WindowOverflow);
        }
        let mut s = self.state.lock();
        let delta = value - s.initial_window;
        s.initial_window = value;
        for st in s.streams.values_mut() {
            let window = st.shared.get() + delta;
            st.shared.set(window);
            if window > MAX_WINDOW {
                return Err(WindowOverflow);
            }
            if delta > 0 {
                if let Some(w) = st.waker.take() {
                    w.wake();
                }
            }
        }
        Ok(())
    }

    /// Applies the peer's SETTINGS_MAX_FRAME_SIZE (already validated).
    pub fn set_max_frame(&self, value: usize) {
        self.state.lock().max_frame = value;
    }

    /// The connection task wrote `n` bytes of what it took: producers held back by the queue's
    /// high-water mark may go on once it has drained to half.
    pub fn written(&self, n: usize) {
        let mut s = self.state.lock();
        s.unwritten = s.unwritten.saturating_sub(n);
        if !s.conn_waiters.is_empty() && s.unwritten < HIGH_WATER / 2 {
            for w in s.conn_waiters.drain(..) {
                w.wake();
            }
        }
    }

    /// Moves everything queued into `into` (which the connection task writes out; it must be
    /// empty, or nothing is moved), registers
    /// `cx` as the connection task, and returns the streams that finished since the last call.
    pub fn take_out(&self, into: &mut SendQueue, cx: &mut Context<'_>) -> Vec<u32> {
        let mut s = self.state.lock();
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        s.wake_scheduled = false;
        // The connection task asks only once it wrote everything it took before.
        if into.is_empty() {
            std::mem::swap(into, &mut s.out);
        }
        std::mem::take(&mut s.finished)
    }

    /// True while the queue is past its high-water mark: the connection task stops reading
    /// requests (and answering PINGs and SETTINGS) from a client that does not read.
    pub fn backlogged(&self) -> bool {
        self.state.lock().unwritten >= HIGH_WATER
    }

    /// True if stream `id` is open for sending.
    pub fn is_open(&self, id: u32) -> bool {
        let s = self.state.lock();
        !s.closed && s.streams.contains_key(&id)
    }

    /// The connection is gone: every producer gets [`StreamClosed`] from now on.
    pub fn close(&self) {
        let mut s = self.state.lock();
        s.closed = true;
        s.out.clear();
        s.wake_all();
        for (_, st) in s.streams.drain() {
            st.shared.open.store(false, Ordering::Relaxed);
        }
    }
}

/// The watch cache's direct appends to an HTTP/2 stream (flow control decides what is taken
/// now; the response's task waits for window).
impl WatchSink for StreamSink {
    /// The sink (the dispatcher holds it apart from the stream's handle) and its window.
    fn hot_addresses(&self) -> [usize; 2] {
        [self as *const StreamSink as usize, self.window_address()]
    }

    fn offer(&self, bytes: &mut Bytes) -> Result<bool, SinkClosed> {
        self.try_send(bytes).map_err(|_| SinkClosed)
    }

    fn poll_send(&self, bytes: &mut Bytes, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        loop {
            match self.try_send(bytes) {
                Ok(true) => return Poll::Ready(Ok(())),
                Ok(false) => match self.poll_window(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Err(std::io::Error::new(
                            std::io::ErrorKind::BrokenPipe,
                            e,
                        )))
                    }
                    Poll::Pending => return Poll::Pending,
                },
                Err(e) => {
                    return Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, e)))
                }
            }
        }
    }
}

/// [`batch`] as the watch cache's batch hook (see [`crate::cacher::sink::set_batch_hook`]).
pub fn batch_hook(f: &mut dyn FnMut()) {
    batch(f)
}

/// One response stream's handle on its connection's writer: what a request task and the watch
/// cache use to send.
#[derive(Debug, Clone)]
pub struct StreamSink {
    writer: Arc<ConnWriter>,
    id: u32,
    window: Arc<StreamWindow>,
}

impl StreamSink {
    /// Opens stream `id` on `writer` (see [`ConnWriter::open_stream`]) and returns its sink.
    pub fn open(writer: Arc<ConnWriter>, id: u32) -> StreamSink {
        let window = writer.open_stream(id);
        StreamSink { writer, id, window }
    }

    /// The address of the state [`StreamSink::try_send`] reads first, for prefetching (see
    /// [`crate::cacher::prefetch`]).
    pub fn window_address(&self) -> usize {
        Arc::as_ptr(&self.window) as usize
    }

    /// The stream identifier.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// See [`ConnWriter::try_send_data`].
    pub fn try_send(&self, data: &mut Bytes) -> Result<bool, StreamClosed> {
        self.writer.try_send_data(self.id, &self.window, data)
    }

    /// See [`ConnWriter::poll_window`].
    pub fn poll_window(&self, cx: &mut Context<'_>) -> Poll<Result<(), StreamClosed>> {
        self.writer.poll_window(self.id, cx)
    }

    /// Sends all of `data`, waiting for window as needed.
    pub async fn send(&self, mut data: Bytes) -> Result<(), StreamClosed> {
        while !self.try_send(&mut data)? {
            std::future::poll_fn(|cx| self.poll_window(cx)).await?;
        }
        Ok(())
    }

    /// See [`ConnWriter::send_headers`].
    pub fn send_headers(&self, block: &[u8], end_stream: bool) -> Result<(), StreamClosed> {
        self.writer.send_headers(self.id, block, end_stream)
    }

    /// See [`ConnWriter::end_stream`].
    pub fn end(&self) {
        self.writer.end_stream(self.id)
    }

    /// See [`ConnWriter::reset_stream`].
    pub fn reset(&self, code: ErrorCode) {
        self.writer.reset_stream(self.id, code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    impl ConnWriter {
        /// [`ConnWriter::try_send_data`] for stream `id`, its window looked up.
        fn try_send_id(&self, id: u32, data: &mut Bytes) -> Result<bool, StreamClosed> {
            let window = self
                .state
                .lock()
                .streams
                .get(&id)
                .map(|st| st.shared.clone());
            match window {
                Some(w) => self.try_send_data(id, &w, data),
                None => Err(StreamClosed),
            }
        }
    }

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn frames(out: &SendQueue) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let all = out.to_vec();
        let mut rest = &all[..];
        let mut v = Vec::new();
        while let Some(h) = FrameHead::parse(rest) {
            v.push((
                h.kind,
                h.flags,
                h.stream,
                rest[HEAD_LEN..HEAD_LEN + h.len].to_vec(),
            ));
            rest = &rest[HEAD_LEN + h.len..];
        }
        assert!(rest.is_empty());
        v
    }

    #[test]
    fn a_sink_shares_its_streams_window_and_sees_it_close() {
        let w = ConnWriter::new();
        let a = StreamSink::open(w.clone(), 1);
        let b = StreamSink::open(w.clone(), 3);
        w.set_initial_window(10).unwrap();
        // The sink spends the stream's window as the table sees it, and the other way round.
        let mut d = Bytes::from_static(b"0123456789abc");
        assert_eq!(a.try_send(&mut d), Ok(false));
        assert_eq!(&d[..], b"abc");
        w.window_update(1, 3).unwrap();
        assert_eq!(w.try_send_id(1, &mut d), Ok(true));
        assert_eq!(a.try_send(&mut Bytes::from_static(b"x")), Ok(false));
        // Ended, reset by the client, or with the connection closed: no more DATA.
        w.end_stream(1);
        assert_eq!(a.try_send(&mut Bytes::from_static(b"x")), Err(StreamClosed));
        assert_eq!(b.try_send(&mut Bytes::from_static(b"y")), Ok(true));
        w.remote_reset(3);
        assert_eq!(b.try_send(&mut Bytes::from_static(b"y")), Err(StreamClosed));
        let c = StreamSink::open(w.clone(), 5);
        w.close();
        assert_eq!(c.try_send(&mut Bytes::from_static(b"z")), Err(StreamClosed));
    }

    #[test]
    fn data_respects_both_windows_and_frame_size() {
        let w = ConnWriter::new();
        w.open_stream(1);
        w.open_stream(3);
        w.set_max_frame(16_384);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut out = SendQueue::new();
        w.take_out(&mut out, &mut cx);
        // 70,000 bytes against a 65,535 stream and connection window.
        let mut big = Bytes::from(vec![1u8; 70_000]);
        assert_eq!(w.try_send_id(1, &mut big), Ok(false));
        assert_eq!(big.len(), 70_000 - 65_535);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "one wake for the appends"
        );
        // Stream 3 has its own window but the connection's is spent.
        assert!(w.poll_window(3, &mut cx).is_pending());
        w.window_update(0, 10_000).unwrap();
        assert!(w.poll_window(3, &mut cx).is_ready());
        assert!(
            w.poll_window(1, &mut cx).is_pending(),
            "stream 1's own window is spent"
        );
        w.window_update(1, 100_000).unwrap();
        assert_eq!(w.try_send_id(1, &mut big), Ok(true));
        w.end_stream(1);
        let finished = w.take_out(&mut out, &mut cx);
        assert_eq!(finished, vec![1]);
        let f = frames(&out);
        let sizes: Vec<usize> = f.iter().map(|x| x.3.len()).collect();
        assert_eq!(sizes, vec![16_384, 16_384, 16_384, 16_383, 4_465, 0]);
        assert!(f.iter().all(|x| x.0 == kind::DATA && x.2 == 1));
        assert_eq!(f.last().map(|x| x.1), Some(flag::END_STREAM));
        assert_eq!(
            w.try_send_id(1, &mut Bytes::from_static(b"x")),
            Err(StreamClosed)
        );
    }

    #[test]
    fn initial_window_changes_move_open_streams() {
        let w = ConnWriter::new();
        w.open_stream(1);
        let mut d = Bytes::from(vec![0u8; 65_535]);
        assert_eq!(w.try_send_id(1, &mut d), Ok(true));
        w.window_update(0, 1 << 20).unwrap();
        // Shrinking makes the window negative; growing past it again re-opens the stream.
        w.set_initial_window(1_000).unwrap();
        let mut one = Bytes::from_static(b"y");
        assert_eq!(w.try_send_id(1, &mut one), Ok(false));
        w.set_initial_window(70_000).unwrap();
        assert_eq!(w.try_send_id(1, &mut one), Ok(true));
        assert_eq!(w.set_initial_window(1 << 31), Err(WindowOverflow));
        assert_eq!(w.window_update(0, 0x7fff_ffff), Err(WindowOverflow));
    }

    #[test]
    fn batch_defers_the_wake_until_the_scope_ends() {
        let w = ConnWriter::new();
        w.open_stream(1);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut out = SendQueue::new();
        w.take_out(&mut out, &mut cx);
        batch(|| {
            for _ in 0..10 {
                w.try_send_id(1, &mut Bytes::from_static(b"event")).unwrap();
            }
            assert_eq!(count.0.load(Ordering::SeqCst), 0);
        });
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        w.take_out(&mut out, &mut cx);
        assert_eq!(frames(&out).len(), 10);
    }

    #[test]
    fn a_connection_that_is_not_written_out_stops_taking_data() {
        let w = ConnWriter::new();
        w.open_stream(1);
        w.window_update(0, 1 << 30).unwrap();
        w.set_initial_window(1 << 30).unwrap();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut taken = 0;
        loop {
            let mut d = Bytes::from(vec![0u8; 64 * 1024]);
            if !w.try_send_id(1, &mut d).unwrap() {
                break;
            }
            taken += 64 * 1024;
            assert!(taken <= HIGH_WATER + 64 * 1024, "no bound");
        }
        assert!(taken >= HIGH_WATER);
        assert!(w.poll_window(1, &mut cx).is_pending());
        let before = count.0.load(Ordering::SeqCst);
        w.written(taken / 4);
        assert_eq!(count.0.load(Ordering::SeqCst), before, "still above half");
        w.written(taken);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            before + 1,
            "woken once drained"
        );
        assert!(w.poll_window(1, &mut cx).is_ready());
    }

    #[test]
    fn closed_connection_fails_every_producer() {
        let w = ConnWriter::new();
        w.open_stream(1);
        w.close();
        assert_eq!(w.send_headers(1, b"", false), Err(StreamClosed));
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(
            w.poll_window(1, &mut cx),
            Poll::Ready(Err(StreamClosed))
        ));
    }
}
