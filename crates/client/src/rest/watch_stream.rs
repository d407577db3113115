//! A watch response as a stream of events: [`WatchStream`] reads the body, cuts it into lines
//! ([`LineDecoder`]) and decodes each line ([`parse_event`]), with an optional idle timeout.
//! A protobuf watch (`application/vnd.kubernetes.protobuf;stream=watch`) is cut into
//! length-prefixed frames instead ([`FrameDecoder`], [`parse_protobuf_event`]).
//!
//! Decoding is the expensive part: every byte of a JSON object is validated, and a protobuf
//! object's metadata is read and its message copied out of the received chunk. When events
//! arrive faster than one thread decodes them — a replay after a reconnect, the initial
//! events of a streaming list, a burst of writes — the stream hands runs of received lines
//! or frames to the process's decode threads (see `decode_pool.rs`) and goes on receiving
//! while they are decoded. A few events at a time are decoded in the caller's task, adding
//! no latency.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future as _;
use std::time::Duration;

use bytes::Bytes;
use http_body::Body as _;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt as _;

use super::error::{BoxError, Error};
use super::protobuf_decoder::{parse_protobuf_event, FrameDecoder, ProtobufDecodeFn};
use super::watch_decoder::{
    parse_event, parse_event_with, DecodeFn, LineDecoder, SharedDecodeFn, WatchEvent,
};
use crate::object_interner::Scope;

/// The body type a [`WatchStream`] reads.
pub type WatchBody = UnsyncBoxBody<Bytes, BoxError>;

/// A [`WatchStream`] as a [`futures_core::Stream`] of its events, from
/// [`WatchStream::into_stream`].
pub type WatchEvents<T> = crate::stream::NextStream<WatchStream<T>, Result<WatchEvent<T>, Error>>;

/// Received bytes at which a run of complete lines is decoded on a decode thread instead
/// of in the reading task: about 10 µs of decoding, well above what handing the work over
/// costs. Lines received in several pieces (HTTP/2 DATA frames are 16 KiB) add up.
const PARALLEL_DECODE_BYTES: usize = 32 << 10;

/// Runs of lines in decoding at once per stream: enough to keep every decode thread busy
/// while the reading task receives the next run.
const PARALLEL_DECODE_JOBS: usize = 4;

/// Received bytes a stream holds before handing them out (lines queued, being decoded or
/// decoded): past this it stops reading ahead until its consumer catches up.
const MAX_READ_AHEAD: usize = 1 << 20;

/// The most cache lines of the next event a decode thread prefetches (a 2 KB object is 32).
const PREFETCH_LINES: usize = 64;

/// The decoded results of a run of lines, in **reverse** line order: they are taken with
/// `pop`, which leaves the emptied vector to be filled again by a later run (see
/// [`Spares`]).
type Decoded<T> = Vec<Result<WatchEvent<T>, Error>>;

/// Spare vectors a stream keeps at most, of each kind: one per run that may be in decoding.
const MAX_SPARES: usize = PARALLEL_DECODE_JOBS;

/// The most bytes a spare vector may hold room for; a larger one is freed. A run of 32 KiB
/// of 2 KB events needs about 2 KiB of results. What an idle stream keeps after a burst of
/// small events is then at most 8 × 16 KiB.
const MAX_SPARE_BYTES: usize = 16 << 10;

/// Emptied vectors of runs already handed out, filled again by later runs.
///
/// Why: a run's vectors are allocated on one thread and freed on another. With glibc, each
/// new vector of results (kilobytes) made the decode thread's allocator first sort through
/// every small block the other thread had freed into its arena — 2.5 % of a protobuf
/// replay's client CPU in `malloc_consolidate` (`perf`, BENCHMARKS.md, session 19).
struct Spares<T> {
    lines: Vec<Vec<Bytes>>,
    events: Vec<Decoded<T>>,
}

/// Keeps `v`, emptied, among `spares` if there is room for it.
fn keep_spare<E>(spares: &mut Vec<Vec<E>>, mut v: Vec<E>) {
    v.clear();
    if spares.len() < MAX_SPARES && v.capacity() * std::mem::size_of::<E>() <= MAX_SPARE_BYTES {
        spares.push(v);
    }
}

/// How the body is cut into events: JSON lines or protobuf length-prefixed frames.
#[derive(Debug)]
enum Framer {
    Lines(LineDecoder),
    Frames(FrameDecoder),
}

impl Framer {
    fn push(&mut self, chunk: Bytes) {
        match self {
            Framer::Lines(d) => d.push(chunk),
            Framer::Frames(d) => d.push(chunk),
        }
    }

    fn next(&mut self) -> Result<Option<Bytes>, Error> {
        match self {
            Framer::Lines(d) => d.next_line(),
            Framer::Frames(d) => d.next_frame(),
        }
    }

    /// At the end of the body: a last line without its newline, or an error for a frame cut
    /// short.
    fn finish(&mut self) -> Result<Option<Bytes>, Error> {
        match self {
            Framer::Lines(d) => d.finish(),
            Framer::Frames(d) => d.finish().map(|()| None),
        }
    }

    fn buffered(&self) -> usize {
        match self {
            Framer::Lines(d) => d.buffered(),
            Framer::Frames(d) => d.buffered(),
        }
    }

    /// An empty framer of the same kind that accepts nothing more.
    fn closed(&self) -> Framer {
        match self {
            Framer::Lines(_) => Framer::Lines(LineDecoder::new(0)),
            Framer::Frames(_) => Framer::Frames(FrameDecoder::new(0)),
        }
    }
}

/// How one cut-out line or frame becomes an event; which one also decides the encoding a
/// watch asks for and how its body is cut.
pub(crate) enum EventDecoder<T> {
    /// JSON lines.
    Json(DecodeFn<T>),
    /// JSON lines whose objects are shared with the other streams of a scope.
    JsonShared(SharedDecodeFn<T>, Scope),
    /// Protobuf length-prefixed frames.
    Protobuf(ProtobufDecodeFn<T>),
}

impl<T> Clone for EventDecoder<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for EventDecoder<T> {}

impl<T> EventDecoder<T> {
    fn event(self, frame: &Bytes) -> Result<WatchEvent<T>, Error> {
        match self {
            EventDecoder::Json(decode) => parse_event(frame, decode),
            EventDecoder::JsonShared(decode, scope) => {
                parse_event_with(frame, &|line, v| decode(line, v, scope))
            }
            EventDecoder::Protobuf(decode) => parse_protobuf_event(frame, decode),
        }
    }
}

/// Received lines waiting to be handed out, in stream order, each with the bytes of the
/// lines it came from.
enum Batch<T> {
    /// Few lines: decoded one by one as they are taken.
    Lines(VecDeque<Bytes>, usize),
    /// A long run being decoded on a decode thread.
    Decoding(
        tokio::sync::oneshot::Receiver<(Vec<Bytes>, Decoded<T>)>,
        usize,
    ),
    /// A run whose decoding finished; its events in reverse order.
    Decoded(Decoded<T>, usize),
}

impl<T> Batch<T> {
    fn bytes(&self) -> usize {
        match self {
            Batch::Lines(_, b) | Batch::Decoding(_, b) | Batch::Decoded(_, b) => *b,
        }
    }
}

/// The events of one watch, read from the response body as they arrive.
///
/// `next().await` yields each event in order; `None` means the server ended the stream
/// (e.g. `timeoutSeconds` elapsed, or after an ERROR event). A decode error on one event
/// is yielded and the stream continues with the next line; a transport error, an
/// over-long line or an idle timeout is yielded once and then the stream ends.
///
/// When events arrive faster than one thread decodes them (32 KiB or more of complete lines
/// or protobuf frames received and not yet taken), the run is decoded on the process's
/// decode threads (one per core) — at most four runs at once — while this stream goes on
/// receiving, up to 1 MiB ahead of its consumer. The order of the events is unchanged.
///
/// `next` is cancel-safe: dropping its future (e.g. in `tokio::select!`) loses no data,
/// because bytes are only consumed once they are in the stream's buffer and runs being
/// decoded stay queued. The stream is `Send` when `T` is.
pub struct WatchStream<T> {
    body: WatchBody,
    lines: Framer,
    decode: EventDecoder<T>,
    idle_timeout: Option<Duration>,
    context: String,
    /// Received complete lines not yet handed out, oldest first.
    batches: VecDeque<Batch<T>>,
    /// Runs handed to the decode threads so far.
    offloaded: u64,
    /// Vectors of runs already handed out, for the next runs.
    spares: Spares<T>,
    /// How many lines the last read cut: the next one likely cuts about as many, so its
    /// list is sized for them up front instead of growing (and copying) as it fills.
    last_cut: usize,
    /// The stream ended; nothing more is yielded.
    done: bool,
    /// The body's end (`None`) or failure (`Some`), to be reported once `batches` is empty.
    pending_end: Option<Option<Error>>,
}

impl<T> fmt::Debug for WatchStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchStream")
            .field("context", &self.context)
            .field("idle_timeout", &self.idle_timeout)
            .field("buffered", &self.lines.buffered())
            .field("batches", &self.batches.len())
            .field("offloaded", &self.offloaded)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<T> WatchStream<T> {
    /// A stream over `body`. `context` names the request in errors (e.g. the URL);
    /// `idle_timeout`, when set, ends the stream with [`Error::IdleTimeout`] if no bytes
    /// arrive for that long (bookmarks keep a healthy watch alive).
    pub fn new(
        body: WatchBody,
        decode: DecodeFn<T>,
        idle_timeout: Option<Duration>,
        max_line: usize,
        context: impl Into<String>,
    ) -> WatchStream<T> {
        WatchStream::with_decoder(
            body,
            EventDecoder::Json(decode),
            idle_timeout,
            max_line,
            context.into(),
        )
    }

    /// A stream over the body of a protobuf watch (`application/vnd.kubernetes.protobuf;
    /// stream=watch`): length-prefixed `WatchEvent` frames, each object decoded by `decode`.
    /// `max_frame` bounds one frame; the rest is as [`WatchStream::new`].
    pub fn new_protobuf(
        body: WatchBody,
        decode: ProtobufDecodeFn<T>,
        idle_timeout: Option<Duration>,
        max_frame: usize,
        context: impl Into<String>,
    ) -> WatchStream<T> {
        WatchStream::with_decoder(
            body,
            EventDecoder::Protobuf(decode),
            idle_timeout,
            max_frame,
            context.into(),
        )
    }

    /// A stream over `body` framed and decoded as `decode` says; `max` bounds one line or
    /// frame.
    pub(crate) fn with_decoder(
        body: WatchBody,
        decode: EventDecoder<T>,
        idle_timeout: Option<Duration>,
        max: usize,
        context: String,
    ) -> WatchStream<T> {
        let lines = match decode {
            EventDecoder::Json(_) | EventDecoder::JsonShared(..) => {
                Framer::Lines(LineDecoder::new(max))
            }
            EventDecoder::Protobuf(_) => Framer::Frames(FrameDecoder::new(max)),
        };
        WatchStream {
            body,
            lines,
            decode,
            idle_timeout,
            context,
            batches: VecDeque::new(),
            offloaded: 0,
            spares: Spares {
                lines: Vec::new(),
                events: Vec::new(),
            },
            last_cut: 0,
            done: false,
            pending_end: None,
        }
    }

    /// Sets or clears the idle timeout.
    pub fn set_idle_timeout(&mut self, idle_timeout: Option<Duration>) {
        self.idle_timeout = idle_timeout;
    }
}

impl<T: Send + 'static> WatchStream<T> {
    /// The next event, `None` at the end of the stream (see the type's docs).
    pub async fn next(&mut self) -> Option<Result<WatchEvent<T>, Error>> {
        loop {
            if let Some(event) = self.take_ready() {
                return Some(event);
            }
            let read_ahead = self.may_read();
            let WatchStream { batches, body, .. } = self;
            if let Some(Batch::Decoding(job, _)) = batches.front_mut() {
                // Receive the next run while this one is decoded.
                let frame = if read_ahead {
                    tokio::select! {
                        biased;
                        done = job => Err(done),
                        frame = body.frame() => Ok(frame),
                    }
                } else {
                    Err(job.await)
                };
                match frame {
                    Ok(frame) => self.take_frames(frame),
                    Err(done) => self.finish_front(done),
                }
                continue;
            }
            if self.done {
                return None;
            }
            if let Some(end) = self.pending_end.take() {
                return match end {
                    Some(e) => self.fail(e),
                    None => {
                        self.done = true;
                        None
                    }
                };
            }
            let frame = match self.idle_timeout {
                Some(d) => match tokio::time::timeout(d, self.body.frame()).await {
                    Ok(f) => f,
                    Err(_) => return self.fail(Error::IdleTimeout(d)),
                },
                None => self.body.frame().await,
            };
            self.take_frames(frame);
        }
    }

    /// This stream as a [`futures_core::Stream`], to compose with `futures::StreamExt`: the
    /// same events as [`next`](Self::next), in the same order, ending where `next` returns
    /// `None` (see [`NextStream`](crate::stream::NextStream); each event costs one small
    /// allocation more than `next`). [`NextStream::into_inner`](crate::stream::NextStream::into_inner)
    /// gives the `WatchStream` back between events.
    ///
    /// ```no_run
    /// # async fn demo(client: client::rest::Client) -> Result<(), client::rest::Error> {
    /// use client::rest::{resource::PODS, WatchEvent, WatchParams};
    /// use futures::{StreamExt as _, TryStreamExt as _};
    ///
    /// let watch = client
    ///     .watch::<serde_json::Value>(&PODS, Some("default"), &WatchParams::default())
    ///     .await?;
    /// // The first five events that are not bookmarks, or the first error.
    /// let first: Vec<WatchEvent<serde_json::Value>> = watch
    ///     .into_stream()
    ///     .try_filter(|e| std::future::ready(!matches!(e, WatchEvent::Bookmark { .. })))
    ///     .take(5)
    ///     .try_collect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_stream(self) -> WatchEvents<T> {
        crate::stream::NextStream::new(self, |mut stream| {
            Box::pin(async move {
                let event = stream.next().await;
                (stream, event)
            })
        })
    }

    /// The next event if one can be had without waiting: from a complete line already
    /// buffered, a finished decode, or from body data that is already available (the body is
    /// polled without registering for a wake-up). `None` means nothing is ready now — call
    /// [`WatchStream::next`] to wait, and to learn about the end of the stream (an end, a
    /// transport error or an over-long line met here is kept for `next` to report).
    pub fn try_next(&mut self) -> Option<Result<WatchEvent<T>, Error>> {
        use std::task::{Context, Poll, Waker};
        loop {
            if let Some(event) = self.take_ready() {
                return Some(event);
            }
            let mut cx = Context::from_waker(Waker::noop());
            let decoding = match self.batches.front_mut() {
                Some(Batch::Decoding(job, _)) => match std::pin::Pin::new(job).poll(&mut cx) {
                    Poll::Ready(done) => {
                        self.finish_front(done);
                        continue;
                    }
                    Poll::Pending => true,
                },
                _ => false,
            };
            if !self.may_read() {
                return None;
            }
            match std::pin::Pin::new(&mut self.body).poll_frame(&mut cx) {
                Poll::Ready(frame) => self.take_frames(frame),
                Poll::Pending => return None,
            }
            // What was read queues behind the run still being decoded.
            if decoding {
                return None;
            }
        }
    }

    /// Whether more of the body may be read now: the stream goes on, does not hold as many
    /// runs in decoding as it may, and is not too far ahead of its consumer.
    fn may_read(&self) -> bool {
        !self.done
            && self.pending_end.is_none()
            && self
                .batches
                .iter()
                .filter(|b| matches!(b, Batch::Decoding(..)))
                .count()
                < PARALLEL_DECODE_JOBS
            && self.batches.iter().map(Batch::bytes).sum::<usize>() < MAX_READ_AHEAD
    }

    /// The next event of the oldest batch, if it is not still being decoded.
    fn take_ready(&mut self) -> Option<Result<WatchEvent<T>, Error>> {
        loop {
            let event = match self.batches.front_mut()? {
                Batch::Lines(lines, bytes) => lines.pop_front().map(|l| {
                    *bytes = bytes.saturating_sub(l.len());
                    self.decode.event(&l)
                }),
                Batch::Decoded(events, _) => events.pop(),
                Batch::Decoding(..) => return None,
            };
            if event.is_some() {
                return event;
            }
            match self.batches.pop_front() {
                Some(Batch::Decoded(events, _)) => keep_spare(&mut self.spares.events, events),
                Some(Batch::Lines(lines, _)) => keep_spare(&mut self.spares.lines, lines.into()),
                _ => {}
            }
        }
    }

    /// The oldest batch's decoding ended.
    fn finish_front(
        &mut self,
        done: Result<(Vec<Bytes>, Decoded<T>), tokio::sync::oneshot::error::RecvError>,
    ) {
        match done {
            Ok((lines, events)) => {
                keep_spare(&mut self.spares.lines, lines);
                if let Some(front) = self.batches.front_mut() {
                    let bytes = front.bytes();
                    *front = Batch::Decoded(events, bytes);
                }
            }
            Err(_) => {
                // Only a panic in the decoder gets here (its thread dropped the result's
                // sender); the stream cannot go on without the run's events.
                self.batches.clear();
                let context = format!("decoding the watch {}", self.context);
                self.pending_end = Some(Some(Error::transport(
                    context,
                    "a decode thread failed on this run of events",
                )));
            }
        }
    }

    /// Takes what a poll of the body returned (see [`WatchStream::take_frame`]), then
    /// whatever more the body already holds while the lines waiting to be taken are fewer
    /// than a run worth decoding apart: pieces that arrived together are decoded together.
    fn take_frames(&mut self, frame: Option<Result<http_body::Frame<Bytes>, BoxError>>) {
        use std::task::{Context, Poll, Waker};
        self.take_frame(frame);
        let mut cx = Context::from_waker(Waker::noop());
        while matches!(self.batches.back(), Some(Batch::Lines(_, b)) if *b < PARALLEL_DECODE_BYTES)
            && self.may_read()
        {
            match std::pin::Pin::new(&mut self.body).poll_frame(&mut cx) {
                Poll::Ready(frame) => self.take_frame(frame),
                Poll::Pending => break,
            }
        }
    }

    /// Takes one poll's result: data is cut into lines and queued, the end or a failure is
    /// kept for reporting after the queued lines.
    fn take_frame(&mut self, frame: Option<Result<http_body::Frame<Bytes>, BoxError>>) {
        match frame {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    self.lines.push(data);
                    self.cut_lines(false);
                }
            }
            Some(Err(e)) => {
                let context = format!("reading the watch {}", self.context);
                self.pending_end = Some(Some(Error::transport(context, e)));
            }
            // A last line without its newline is still an event.
            None => self.cut_lines(true),
        }
    }

    /// Queues the complete lines in the buffer (and at the `end` of the body, the rest).
    fn cut_lines(&mut self, end: bool) {
        let mut lines = self
            .spares
            .lines
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.last_cut.clamp(4, 256)));
        let mut bytes = 0;
        let mut failed = None;
        loop {
            match self.lines.next() {
                Ok(Some(line)) => {
                    bytes += line.len();
                    lines.push(line);
                }
                Ok(None) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if end && failed.is_none() {
            match self.lines.finish() {
                Ok(Some(line)) => {
                    bytes += line.len();
                    lines.push(line);
                }
                Ok(None) => {}
                Err(e) => failed = Some(e),
            }
        }
        if !lines.is_empty() {
            self.last_cut = lines.len();
        }
        self.queue_lines(lines, bytes);
        if let Some(e) = failed {
            self.lines = self.lines.closed();
            self.pending_end = Some(Some(e));
        } else if end {
            self.pending_end = Some(None);
        }
    }

    /// Adds lines to the queue. Together with the lines still waiting at its back, a run
    /// of [`PARALLEL_DECODE_BYTES`] or more goes to a decode thread; fewer are decoded as
    /// they are taken.
    fn queue_lines(&mut self, mut lines: Vec<Bytes>, mut bytes: usize) {
        if lines.is_empty() {
            keep_spare(&mut self.spares.lines, lines);
            return;
        }
        if let Some(Batch::Lines(queued, queued_bytes)) = self.batches.back_mut() {
            bytes += *queued_bytes;
            let mut all: Vec<Bytes> = std::mem::take(queued).into();
            all.append(&mut lines);
            keep_spare(&mut self.spares.lines, std::mem::replace(&mut lines, all));
            self.batches.pop_back();
        }
        let lines = if bytes >= PARALLEL_DECODE_BYTES && lines.len() > 1 {
            let decode = self.decode;
            let events = self.spares.events.pop().unwrap_or_default();
            match super::decode_pool::submit((lines, events), move |(mut lines, mut events)| {
                events.extend(lines.iter().enumerate().map(|(i, l)| {
                    // The bytes were received on another thread: fetch the next event's
                    // while this one is decoded.
                    if let Some(next) = lines.get(i + 1) {
                        crate::prefetch::prefetch_bytes(next, PREFETCH_LINES);
                    }
                    decode.event(l)
                }));
                events.reverse();
                // The received bytes are let go here, off the reading task.
                lines.clear();
                (lines, events)
            }) {
                Ok(job) => {
                    self.offloaded += 1;
                    self.batches.push_back(Batch::Decoding(job, bytes));
                    return;
                }
                // No decode thread: decoded as they are taken.
                Err((lines, events)) => {
                    keep_spare(&mut self.spares.events, events);
                    lines
                }
            }
        } else {
            lines
        };
        self.batches.push_back(Batch::Lines(lines.into(), bytes));
    }

    fn fail(&mut self, e: Error) -> Option<Result<WatchEvent<T>, Error>> {
        self.done = true;
        self.batches.clear();
        self.lines = self.lines.closed();
        Some(Err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::watch_decoder::raw_object;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A body fed from a channel, for driving a WatchStream in tests.
    struct ChanBody(tokio::sync::mpsc::Receiver<Result<Bytes, BoxError>>);

    impl http_body::Body for ChanBody {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
            self.0
                .poll_recv(cx)
                .map(|o| o.map(|r| r.map(http_body::Frame::data)))
        }
    }

    fn stream(
        idle: Option<Duration>,
    ) -> (
        tokio::sync::mpsc::Sender<Result<Bytes, BoxError>>,
        WatchStream<Bytes>,
    ) {
        stream_with_max_line(idle, 1024)
    }

    fn stream_with_max_line(
        idle: Option<Duration>,
        max_line: usize,
    ) -> (
        tokio::sync::mpsc::Sender<Result<Bytes, BoxError>>,
        WatchStream<Bytes>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let body = UnsyncBoxBody::new(ChanBody(rx));
        (
            tx,
            WatchStream::new(body, raw_object, idle, max_line, "test"),
        )
    }

    #[tokio::test]
    async fn stream_yields_events_then_ends() {
        let (tx, mut s) = stream(None);
        tx.send(Ok(Bytes::from_static(
            b"{\"type\":\"ADDED\",\"object\":{\"n\":1}}\n{\"type\":\"MOD",
        )))
        .await
        .unwrap();
        tx.send(Ok(Bytes::from_static(
            b"IFIED\",\"object\":{\"n\":2}}\nnonsense\n",
        )))
        .await
        .unwrap();
        tx.send(Ok(Bytes::from_static(
            b"{\"type\":\"DELETED\",\"object\":{\"n\":3}}",
        )))
        .await
        .unwrap();
        drop(tx);
        assert!(matches!(s.next().await, Some(Ok(WatchEvent::Added(_)))));
        assert!(matches!(s.next().await, Some(Ok(WatchEvent::Modified(_)))));
        // A bad line is reported and the stream goes on.
        assert!(matches!(s.next().await, Some(Err(Error::Decode { .. }))));
        // The last event lacks its newline: still delivered at the end.
        assert!(matches!(s.next().await, Some(Ok(WatchEvent::Deleted(_)))));
        assert!(s.next().await.is_none());
        assert!(s.next().await.is_none());
    }

    /// The stream form hands out what `next` does, in order, and composes with `StreamExt`
    /// while events are still arriving.
    #[tokio::test]
    async fn into_stream_composes_with_stream_ext() {
        use futures::StreamExt as _;
        let (tx, s) = stream(None);
        let feeder = tokio::spawn(async move {
            for n in 1..=6 {
                let kind = if n % 2 == 0 { "MODIFIED" } else { "ADDED" };
                let line = format!("{{\"type\":\"{kind}\",\"object\":{{\"n\":{n}}}}}\n");
                tx.send(Ok(Bytes::from(line))).await.unwrap();
                tokio::task::yield_now().await;
            }
            tx.send(Ok(Bytes::from_static(b"nonsense\n")))
                .await
                .unwrap();
        });
        let mut events = s.into_stream();
        // Only the modifications, their objects' text, the first two.
        let modified: Vec<Bytes> = events
            .by_ref()
            .filter_map(|e| {
                std::future::ready(match e {
                    Ok(WatchEvent::Modified(o)) => Some(o),
                    _ => None,
                })
            })
            .take(2)
            .collect()
            .await;
        assert_eq!(modified, [&b"{\"n\":2}"[..], b"{\"n\":4}"]);
        // The rest, then the end (the sender is gone once the feeder is done).
        let rest: Vec<_> = events.by_ref().collect().await;
        assert_eq!(rest.len(), 3, "{rest:?}");
        assert!(matches!(&rest[0], Ok(WatchEvent::Added(o)) if o == &b"{\"n\":5}"[..]));
        assert!(matches!(&rest[1], Ok(WatchEvent::Modified(_))));
        assert!(matches!(&rest[2], Err(Error::Decode { .. })));
        assert!(events.next().await.is_none());
        // Between events the WatchStream can be had back.
        let mut back = events.into_inner().unwrap();
        assert!(back.next().await.is_none());
        feeder.await.unwrap();
    }

    #[tokio::test]
    async fn try_next_takes_only_what_is_there_and_leaves_the_end_to_next() {
        let (tx, mut s) = stream(None);
        assert!(s.try_next().is_none(), "nothing sent yet");
        tx.send(Ok(Bytes::from_static(
            b"{\"type\":\"ADDED\",\"object\":{\"n\":1}}\n{\"type\":\"MODIFIED\",\"obj",
        )))
        .await
        .unwrap();
        assert!(matches!(s.try_next(), Some(Ok(WatchEvent::Added(_)))));
        // Half a line is not an event.
        assert!(s.try_next().is_none());
        tx.send(Ok(Bytes::from_static(b"ect\":{\"n\":2}}\n")))
            .await
            .unwrap();
        assert!(matches!(s.try_next(), Some(Ok(WatchEvent::Modified(_)))));
        // The end of the body is met by `try_next`, which still hands out the last line
        // (it lacks its newline), but only `next` reports the end.
        tx.send(Ok(Bytes::from_static(
            b"{\"type\":\"DELETED\",\"object\":{\"n\":3}}",
        )))
        .await
        .unwrap();
        drop(tx);
        assert!(matches!(s.try_next(), Some(Ok(WatchEvent::Deleted(_)))));
        assert!(s.try_next().is_none());
        assert!(s.try_next().is_none());
        assert!(s.next().await.is_none());
        assert!(s.next().await.is_none());
        // A transport error met by `try_next` is reported by `next`.
        let (tx, mut s) = stream(None);
        tx.send(Err("reset".into())).await.unwrap();
        assert!(s.try_next().is_none());
        assert!(matches!(s.next().await, Some(Err(Error::Transport { .. }))));
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn transport_errors_end_the_stream() {
        let (tx, mut s) = stream(None);
        tx.send(Err("connection reset".into())).await.unwrap();
        let e = s.next().await.unwrap().unwrap_err();
        assert!(matches!(e, Error::Transport { .. }), "{e}");
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn over_long_lines_end_the_stream() {
        let (tx, mut s) = stream(None);
        tx.send(Ok(Bytes::from(vec![b'x'; 2000]))).await.unwrap();
        assert!(matches!(
            s.next().await,
            Some(Err(Error::LineTooLong { limit: 1024 }))
        ));
        assert!(s.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn idle_timeout_fires_only_without_bytes() {
        let (tx, mut s) = stream(Some(Duration::from_secs(10)));
        let feeder = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(6)).await;
                let line = b"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"1\"}}}\n";
                tx.send(Ok(Bytes::from_static(line))).await.unwrap();
            }
            // Then silence, with the sender kept open.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(tx);
        });
        for _ in 0..3 {
            assert!(matches!(
                s.next().await,
                Some(Ok(WatchEvent::Bookmark { .. }))
            ));
        }
        let start = tokio::time::Instant::now();
        let e = s.next().await.unwrap().unwrap_err();
        assert!(matches!(e, Error::IdleTimeout(d) if d == Duration::from_secs(10)));
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert!(s.next().await.is_none());
        feeder.abort();
    }

    #[test]
    fn streams_and_clients_are_send() {
        fn send<X: Send>() {}
        fn sync<X: Send + Sync>() {}
        send::<WatchStream<k8s_openapi::api::core::v1::Pod>>();
        sync::<crate::rest::Client>();
        sync::<crate::rest::Api<k8s_openapi::api::core::v1::Pod>>();
    }

    #[tokio::test]
    async fn next_is_cancel_safe() {
        let (tx, mut s) = stream(None);
        // Cancel a pending `next` before any byte arrives.
        let r = tokio::time::timeout(Duration::from_millis(10), s.next()).await;
        assert!(r.is_err());
        tx.send(Ok(Bytes::from_static(
            b"{\"type\":\"ADDED\",\"object\":{}}\n",
        )))
        .await
        .unwrap();
        assert!(matches!(s.next().await, Some(Ok(WatchEvent::Added(_)))));
    }

    /// `n` ADDED lines of about 1 KiB whose objects carry their number, from `first`; the
    /// line of number `bad` is malformed.
    fn padded_lines(first: usize, n: usize, bad: Option<usize>) -> String {
        let pad = "p".repeat(1000);
        (first..first + n)
            .map(|i| {
                if Some(i) == bad {
                    format!("{{\"type\":\"ADDED\",\"object\":{{\"n\":{i},\"pad\":\"{pad}\"}}\n")
                } else {
                    format!("{{\"type\":\"ADDED\",\"object\":{{\"n\":{i},\"pad\":\"{pad}\"}}}}\n")
                }
            })
            .collect()
    }

    /// The number an event of [`padded_lines`] carries, or `None` for a decode error.
    fn number(event: Result<WatchEvent<Bytes>, Error>) -> Option<usize> {
        match event {
            Ok(WatchEvent::Added(o)) => {
                let v: serde_json::Value = serde_json::from_slice(&o).unwrap();
                Some(v["n"].as_u64().unwrap() as usize)
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(Error::Decode { .. }) => None,
            Err(e) => panic!("unexpected error {e}"),
        }
    }

    /// Long runs (decoded on the decode threads) and short ones (decoded in place) come out
    /// in stream order, decode errors where their line was, the unterminated last line and
    /// the end after everything else.
    #[tokio::test]
    async fn long_runs_decoded_off_the_task_keep_stream_order() {
        let (tx, mut s) = stream_with_max_line(None, 1 << 20);
        let mut want = Vec::new();
        let mut first = 0;
        for (n, bad) in [(40, None), (60, Some(70)), (2, None), (50, None)] {
            let text = padded_lines(first, n, bad);
            want.extend((first..first + n).map(|i| (Some(i) != bad).then_some(i)));
            // A chunk boundary inside a line, too.
            let bytes = Bytes::from(text.into_bytes());
            let cut = bytes.len() / 3;
            tx.send(Ok(bytes.slice(..cut))).await.unwrap();
            tx.send(Ok(bytes.slice(cut..))).await.unwrap();
            first += n;
        }
        let last = padded_lines(first, 1, None);
        tx.send(Ok(Bytes::from(last.trim_end().to_string())))
            .await
            .unwrap();
        want.push(Some(first));
        drop(tx);
        let mut got = Vec::new();
        loop {
            // A `next` dropped after one poll (as a `select!` would) loses nothing.
            if let Ok(event) = tokio::time::timeout(Duration::ZERO, s.next()).await {
                match event {
                    Some(event) => got.push(number(event)),
                    None => break,
                }
            }
            let decoding = s
                .batches
                .iter()
                .filter(|b| matches!(b, Batch::Decoding(..)))
                .count();
            assert!(
                decoding <= PARALLEL_DECODE_JOBS,
                "{decoding} runs in decoding"
            );
            match s.next().await {
                Some(event) => got.push(number(event)),
                None => break,
            }
        }
        assert_eq!(got, want);
        assert!(s.offloaded >= 2, "{s:?}");
        assert!(s.next().await.is_none());
    }

    /// Spares are kept emptied, up to their number and size.
    #[test]
    fn spares_are_kept_emptied_up_to_their_number_and_size() {
        let mut spares: Vec<Vec<u64>> = Vec::new();
        keep_spare(&mut spares, Vec::with_capacity(MAX_SPARE_BYTES / 8 + 1));
        assert!(spares.is_empty(), "a vector over the size is freed");
        for _ in 0..MAX_SPARES + 2 {
            keep_spare(&mut spares, vec![7; 10]);
        }
        assert_eq!(spares.len(), MAX_SPARES);
        assert!(spares.iter().all(|v| v.is_empty() && v.capacity() >= 10));
    }

    /// The vectors of a run handed out are kept and filled again by the next run, whose
    /// events still come out in order.
    #[tokio::test]
    async fn the_vectors_of_a_run_are_filled_again_by_the_next() {
        let (tx, mut s) = stream_with_max_line(None, 1 << 20);
        let mut kept = None;
        for run in 0..3 {
            let text = padded_lines(run * 40, 40, None);
            tx.send(Ok(Bytes::from(text.into_bytes()))).await.unwrap();
            for i in 0..40 {
                assert_eq!(number(s.next().await.unwrap()), Some(run * 40 + i));
            }
            // Taking nothing more lets the emptied run go.
            assert!(s.try_next().is_none());
            assert_eq!(s.offloaded, run as u64 + 1, "{s:?}");
            assert_eq!(s.spares.events.len(), 1);
            let events = s.spares.events[0].as_ptr();
            if let Some(kept) = kept {
                assert_eq!(events, kept, "run {run} was decoded into a new vector");
            }
            kept = Some(events);
            assert!(!s.spares.lines.is_empty());
        }
        drop(tx);
        assert!(s.next().await.is_none());
    }

    /// Long runs of protobuf frames go to the decode threads too, and come out in stream
    /// order with a frame that fails to decode where it was.
    #[tokio::test]
    async fn long_runs_of_protobuf_frames_decoded_off_the_task_keep_stream_order() {
        use crate::object::{DecodeObject as _, KubeObject as _};
        use crate::protobuf_object::ProtobufObject;
        use crate::rest::protobuf_decoder::tests::{event, framed, pod};
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut s = WatchStream::new_protobuf(
            UnsyncBoxBody::new(ChanBody(rx)),
            ProtobufObject::decode_protobuf,
            None,
            1 << 20,
            "test",
        );
        let pad = "p".repeat(1000);
        let bad = 70;
        let frames: Vec<Vec<u8>> = (0..200)
            .map(|i| {
                if i == bad {
                    // A name that is not UTF-8: the object is refused.
                    let mut message = pod("x", "1");
                    let at = message.iter().position(|&b| b == b'x').unwrap();
                    message[at] = 0xff;
                    event("ADDED", "Pod", message)
                } else {
                    event("ADDED", "Pod", pod(&format!("{i:03}-{pad}"), "1"))
                }
            })
            .collect();
        let bytes = Bytes::from(framed(&frames));
        // Pieces that cut frames anywhere, as a socket's reads do; more than the channel
        // holds, so they are sent while the stream reads.
        tokio::spawn(async move {
            for piece in bytes.chunks(5000) {
                tx.send(Ok(bytes.slice_ref(piece))).await.unwrap();
            }
        });
        let mut got = Vec::new();
        while let Some(event) = s.next().await {
            got.push(match event {
                Ok(WatchEvent::Added(o)) => o.name()[..3].parse::<usize>().ok(),
                Ok(other) => panic!("unexpected {other:?}"),
                Err(Error::Decode { .. }) => None,
                Err(e) => panic!("unexpected error {e}"),
            });
        }
        let want: Vec<_> = (0..200).map(|i| (i != bad).then_some(i)).collect();
        assert_eq!(got, want);
        assert!(s.offloaded >= 2, "{s:?}");
    }

    /// Lines that arrive in small pieces (as HTTP/2 DATA frames of 16 KiB, or one event per
    /// chunk from kube-apiserver) but together are decoded on the decode threads too.
    #[tokio::test]
    async fn small_pieces_received_together_are_decoded_together() {
        let (tx, mut s) = stream_with_max_line(None, 1 << 20);
        let text = Bytes::from(padded_lines(0, 200, None).into_bytes());
        for piece in text.chunks(16 << 10) {
            tx.send(Ok(text.slice_ref(piece))).await.unwrap();
        }
        drop(tx);
        let mut got = Vec::new();
        while let Some(event) = s.next().await {
            got.push(number(event));
        }
        assert_eq!(got, (0..200).map(Some).collect::<Vec<_>>());
        assert!(s.offloaded >= 2, "{s:?}");
    }

    /// `try_next` hands out decoded runs in order without waiting, and leaves a transport
    /// error met behind them for `next`, after the events.
    #[tokio::test]
    async fn try_next_takes_decoded_runs_in_order_and_errors_come_last() {
        let (tx, mut s) = stream_with_max_line(None, 1 << 20);
        for first in [0, 40] {
            tx.send(Ok(Bytes::from(padded_lines(first, 40, None).into_bytes())))
                .await
                .unwrap();
        }
        tx.send(Err("reset".into())).await.unwrap();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while got.len() < 80 && std::time::Instant::now() < deadline {
            match s.try_next() {
                Some(event) => got.push(number(event)),
                None => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
        assert_eq!(got, (0..80).map(Some).collect::<Vec<_>>());
        assert_eq!(s.offloaded, 2);
        assert!(s.try_next().is_none());
        assert!(matches!(s.next().await, Some(Err(Error::Transport { .. }))));
        assert!(s.next().await.is_none());
    }
}
