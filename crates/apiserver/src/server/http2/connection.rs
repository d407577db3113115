//! The connection task of one HTTP/2 connection: reads and checks frames, keeps the stream
//! table, collects request bodies, starts a task per request, and writes the shared send queue
//! out.
//!
//! Errors follow RFC 9113 §5.4: a broken connection-level rule ends the connection with a
//! GOAWAY; a malformed request or a frame for a closed stream resets only that stream. A
//! client that disappears (EOF, I/O error, no PING answer) ends the connection; every running
//! request of it is aborted, which ends its watches.

use super::frame::{self, flag, kind, setting, ConnError, ErrorCode, FrameHead, HEAD_LEN, PREFACE};
use super::hpack;
use super::send_queue::SendQueue;
use super::stream;
use super::writer::{ConnWriter, StreamSink};
use crate::auth::user_info::{Authenticated, UserInfo};
use crate::handlers::MAX_BODY_BYTES;
use crate::server::{loopback_guard, ApiServer, ServeOptions};
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::Full;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The largest frame payload we accept (we never raise SETTINGS_MAX_FRAME_SIZE).
const MAX_FRAME: usize = frame::DEFAULT_MAX_FRAME;
/// The dynamic table size we allow the client's encoder (the default).
const HEADER_TABLE_SIZE: usize = 4096;
/// The largest request header list (decoded) and header block (encoded) we accept.
const MAX_HEADER_LIST: usize = 256 * 1024;
/// Most bytes of requests not yet complete (their headers and bodies so far) one connection
/// may have us hold. Windows are handed back as DATA arrives, so without a bound a client
/// could open thousands of streams and never end them; past it the connection ends with
/// ENHANCE_YOUR_CALM. Far above what real clients keep in flight.
const MAX_RECEIVING_BYTES: usize = 64 * 1024 * 1024;
/// At most this many iovecs per write.
const MAX_IOVECS: usize = 1024;
/// Read-and-process rounds before the task yields to others.
const ROUNDS_PER_POLL: usize = 32;

/// Serves one HTTP/2 connection until the client leaves, breaks the protocol, or stops
/// answering PINGs. `io` must be positioned at the start of the client's preface;
/// `client_user` is the user its client certificate names, if any; `peer` the client's
/// address.
pub async fn serve_connection<IO>(
    io: IO,
    srv: Arc<ApiServer>,
    opts: Arc<ServeOptions>,
    client_user: Option<Arc<UserInfo>>,
    peer: Option<std::net::SocketAddr>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut conn = Connection::new(io, srv, opts);
    conn.client_user = client_user;
    conn.peer = peer;
    let result = std::future::poll_fn(|cx| conn.poll(cx)).await;
    conn.shutdown();
    if let Err(e) = result {
        tracing::debug!("HTTP/2 connection ended: {e}");
        if matches!(e, Ended::Protocol(_)) {
            conn.linger().await;
        }
    }
}

/// After a GOAWAY for a connection error, how long and how much the client's further bytes
/// are read and dropped before the socket closes.
const LINGER_TIME: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 1 << 20;

/// Why a connection ended other than by the client closing it.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error(transparent)]
    Protocol(#[from] ConnError),
    #[error("I/O: {0}")]
    Io(#[from] io::Error),
    #[error("no answer to PING within {0:?}")]
    PingTimeout(Duration),
}

enum Stream {
    /// Headers arrived; the body is being collected (kept to the size limit plus one byte,
    /// so the handler answers 413 for more).
    Receiving {
        parts: Box<http::request::Parts>,
        body: BytesMut,
        /// What this stream counts in [`Connection::receiving_bytes`].
        held: usize,
        /// Why the request may not run (no bearer token where one is required, or what the
        /// listener's loopback guard refuses); `None` if it may.
        refusal: Option<Box<api::Status>>,
        /// When its headers arrived: the body must be complete by the options'
        /// `body_timeout` after.
        since: tokio::time::Instant,
    },
    /// The request task runs.
    Running(tokio::task::AbortHandle),
}

/// A header block split over HEADERS and CONTINUATION frames, being collected.
struct PartialBlock {
    stream: u32,
    block: Vec<u8>,
    end_stream: bool,
}

/// The deadline of the oldest request still receiving its body (see [`Stream::Receiving`]).
struct BodyDeadline {
    timer: Pin<Box<tokio::time::Sleep>>,
    armed: bool,
}

struct Keepalive {
    interval: Option<Duration>,
    timeout: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
    awaiting_ack: bool,
}

const PING_PAYLOAD: [u8; 8] = *b"lw-alive";

struct Connection<IO> {
    io: IO,
    srv: Arc<ApiServer>,
    opts: Arc<ServeOptions>,
    /// The user of the connection's client certificate.
    client_user: Option<Arc<UserInfo>>,
    /// The client's address.
    peer: Option<std::net::SocketAddr>,
    writer: Arc<ConnWriter>,
    hpack: hpack::Decoder,
    rbuf: BytesMut,
    scratch: Box<[u8]>,
    preface_seen: bool,
    settings_seen: bool,
    sending: SendQueue,
    streams: HashMap<u32, Stream>,
    /// Bytes held for streams still [`Stream::Receiving`] (see [`MAX_RECEIVING_BYTES`]).
    receiving_bytes: usize,
    last_stream: u32,
    partial: Option<PartialBlock>,
    keepalive: Keepalive,
    body_deadline: BodyDeadline,
    going_away: bool,
    read_closed: bool,
    failed: Option<ConnError>,
    resets: ResetBudget,
    early: EarlyAnswers,
}

/// Requests answered before the client finished sending their body (401 before the body,
/// 504 after the body timeout), whose further body is dropped. Once such an answer is
/// complete, the client is asked to stop sending with RST_STREAM(NO_ERROR) (RFC 9113 §8.1);
/// the few most recent of those are remembered so that body frames already on their way are
/// ignored, as §5.4.2 asks, rather than answered with another reset.
#[derive(Default)]
struct EarlyAnswers {
    /// Answered early; the client has not ended its side yet.
    open: std::collections::HashSet<u32>,
    /// Recently asked to stop sending, oldest first, at most [`EarlyAnswers::RECENT`].
    stopped: std::collections::VecDeque<u32>,
}

impl EarlyAnswers {
    const RECENT: usize = 16;

    /// The answer to `id` is complete: true if the client should now be asked to stop.
    fn answered(&mut self, id: u32) -> bool {
        if !self.open.remove(&id) {
            return false;
        }
        if self.stopped.len() == Self::RECENT {
            self.stopped.pop_front();
        }
        self.stopped.push_back(id);
        true
    }

    /// A body frame (DATA, or trailers) arrived for `id`: true if it is to be dropped
    /// silently; `end_stream` ends the client's side.
    fn drops(&mut self, id: u32, end_stream: bool) -> bool {
        if self.open.contains(&id) {
            if end_stream {
                self.open.remove(&id);
            }
            return true;
        }
        self.stopped.contains(&id)
    }
}

/// How many requests a client may cancel (RST_STREAM while we still serve them): a burst of
/// [`ResetBudget::BURST`], refilled at [`ResetBudget::PER_SECOND`]. Opening and cancelling
/// requests in a loop costs the server a task per request while it costs the client two
/// frames ("rapid reset", CVE-2023-44487); past the budget the connection ends with
/// ENHANCE_YOUR_CALM. Ordinary clients cancel a watch now and then.
#[derive(Debug)]
struct ResetBudget {
    tokens: f64,
    at: tokio::time::Instant,
}

impl ResetBudget {
    const BURST: f64 = 200.0;
    const PER_SECOND: f64 = 100.0;

    fn new() -> ResetBudget {
        ResetBudget {
            tokens: Self::BURST,
            at: tokio::time::Instant::now(),
        }
    }

    /// Spends one reset; `Err` once the client has cancelled too many too fast.
    fn spend(&mut self) -> Result<(), ConnError> {
        let now = tokio::time::Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * Self::PER_SECOND;
        self.at = now;
        self.tokens = (self.tokens + refill).min(Self::BURST) - 1.0;
        if self.tokens < 0.0 {
            return Err(ConnError {
                code: ErrorCode::EnhanceYourCalm,
                reason: "too many cancelled requests",
            });
        }
        Ok(())
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Connection<IO> {
    fn new(io: IO, srv: Arc<ApiServer>, opts: Arc<ServeOptions>) -> Connection<IO> {
        // The dispatcher's appends wake this connection's task; let it hold the wake-ups of
        // one fan-out back until the fan-out ends.
        crate::cacher::sink::set_batch_hook(super::writer::batch_hook);
        let writer = ConnWriter::new();
        let h2 = &opts.http2;
        // The server preface: our SETTINGS, then the connection window we allow.
        let mut out = BytesMut::new();
        frame::put_settings(
            &[
                (setting::MAX_CONCURRENT_STREAMS, h2.max_concurrent_streams),
                (setting::INITIAL_WINDOW_SIZE, h2.initial_stream_window),
                (setting::MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST as u32),
            ],
            &mut out,
        );
        let extra = i64::from(h2.initial_connection_window) - frame::DEFAULT_WINDOW;
        if extra > 0 {
            frame::put_window_update(0, extra.min(frame::MAX_WINDOW) as u32, &mut out);
        }
        writer.push_control(out);
        let interval = h2.keep_alive_interval;
        let timer = Box::pin(tokio::time::sleep(
            interval.unwrap_or(Duration::from_secs(3600)),
        ));
        Connection {
            client_user: None,
            peer: None,
            io,
            keepalive: Keepalive {
                interval,
                timeout: h2.keep_alive_timeout,
                timer,
                awaiting_ack: false,
            },
            body_deadline: BodyDeadline {
                timer: Box::pin(tokio::time::sleep(h2.body_timeout)),
                armed: false,
            },
            srv,
            opts,
            writer,
            hpack: hpack::Decoder::new(HEADER_TABLE_SIZE, MAX_HEADER_LIST),
            rbuf: BytesMut::with_capacity(HEAD_LEN + MAX_FRAME),
            scratch: vec![0u8; 32 * 1024].into_boxed_slice(),
            preface_seen: false,
            settings_seen: false,
            sending: SendQueue::new(),
            streams: HashMap::new(),
            receiving_bytes: 0,
            last_stream: 0,
            partial: None,
            going_away: false,
            read_closed: false,
            failed: None,
            resets: ResetBudget::new(),
            early: EarlyAnswers::default(),
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Ended>> {
        for _ in 0..ROUNDS_PER_POLL {
            let mut progress = false;
            // A client that does not read its responses is not read from either, so it cannot
            // make the queue grow with requests, PINGs or SETTINGS (the connection task is
            // woken when the queue drains).
            if !self.read_closed && self.failed.is_none() && !self.writer.backlogged() {
                match self.poll_read(cx) {
                    Poll::Ready(Ok(0)) => {
                        self.read_closed = true;
                        progress = true;
                    }
                    Poll::Ready(Ok(_)) => {
                        progress = true;
                        if let Err(e) = self.process() {
                            self.fail(e);
                        }
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                    Poll::Pending => {}
                }
            }
            match self.poll_write(cx) {
                Poll::Ready(Ok(wrote)) => progress |= wrote,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => {}
            }
            if let Poll::Ready(Err(e)) = self.poll_keepalive(cx) {
                return Poll::Ready(Err(e));
            }
            self.poll_body_deadline(cx);
            if self.sending.is_empty() {
                if let Some(e) = self.failed.take() {
                    return Poll::Ready(Err(e.into()));
                }
                if self.read_closed {
                    return Poll::Ready(Ok(()));
                }
                if self.going_away && self.streams.is_empty() {
                    return Poll::Ready(Ok(()));
                }
            }
            if !progress {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Reads what the socket has into the frame buffer; `Ok(0)` at end of stream.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut rb = ReadBuf::new(&mut self.scratch);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
        let got = rb.filled();
        self.rbuf.extend_from_slice(got);
        Poll::Ready(Ok(got.len()))
    }

    /// Writes the send queue out; `Ok(true)` if anything was written. Registers for more
    /// frames (the writer wakes us) once the queue is empty.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        let mut wrote = false;
        loop {
            if self.sending.is_empty() {
                for id in self.writer.take_out(&mut self.sending, cx) {
                    self.forget(id);
                    if self.early.answered(id) {
                        // After the answer's last frame, which is already queued.
                        let mut out = BytesMut::new();
                        frame::put_rst_stream(id, ErrorCode::NoError, &mut out);
                        self.writer.push_control(out);
                    }
                }
                if self.sending.is_empty() {
                    ready!(Pin::new(&mut self.io).poll_flush(cx))?;
                    return Poll::Ready(Ok(wrote));
                }
            }
            let n = {
                let slices = self.sending.io_slices(MAX_IOVECS);
                ready!(Pin::new(&mut self.io).poll_write_vectored(cx, &slices))?
            };
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            wrote = true;
            self.writer.written(n);
            self.sending.advance(n);
        }
    }

    fn poll_keepalive(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Ended>> {
        if self.keepalive.interval.is_none() {
            return Poll::Pending;
        }
        while self.keepalive.timer.as_mut().poll(cx).is_ready() {
            if self.keepalive.awaiting_ack {
                return Poll::Ready(Err(Ended::PingTimeout(self.keepalive.timeout)));
            }
            let mut out = BytesMut::new();
            frame::put_frame(kind::PING, 0, 0, &PING_PAYLOAD, &mut out);
            self.writer.push_control(out);
            self.keepalive.awaiting_ack = true;
            let at = tokio::time::Instant::now() + self.keepalive.timeout;
            self.keepalive.timer.as_mut().reset(at);
        }
        Poll::Pending
    }

    /// Answers 504 to the requests whose bodies did not arrive in time (a client that sent
    /// headers and left the stream half-open), as `read_body` does for HTTP/1.1: their
    /// buffers are released and the client learns why.
    fn poll_body_deadline(&mut self, cx: &mut Context<'_>) {
        if !self.body_deadline.armed || self.body_deadline.timer.as_mut().poll(cx).is_pending() {
            return;
        }
        let now = tokio::time::Instant::now();
        let limit = self.opts.http2.body_timeout;
        let late: Vec<u32> = self
            .streams
            .iter()
            .filter_map(|(&id, s)| match s {
                Stream::Receiving { since, .. } if now.duration_since(*since) >= limit => Some(id),
                _ => None,
            })
            .collect();
        for id in late {
            // (Only requests that may run wait for their bodies: the others are answered at
            // once.)
            let Some(Stream::Receiving { .. }) = self.forget(id) else {
                continue;
            };
            let sink = StreamSink::open(self.writer.clone(), id);
            let status = crate::server::body_timeout_status(limit);
            let task = tokio::spawn(stream::respond_status(status, sink));
            self.streams
                .insert(id, Stream::Running(task.abort_handle()));
            self.early.open.insert(id);
        }
        self.arm_body_deadline();
        if self.body_deadline.armed {
            // Registers the re-armed timer with this task.
            let _ = self.body_deadline.timer.as_mut().poll(cx);
        }
    }

    /// Points the body deadline at the oldest request still receiving, if any.
    fn arm_body_deadline(&mut self) {
        let oldest = self
            .streams
            .values()
            .filter_map(|s| match s {
                Stream::Receiving { since, .. } => Some(*since),
                _ => None,
            })
            .min();
        // A deadline beyond the clock's range (a huge `body_timeout`) never comes.
        let deadline = oldest.and_then(|since| since.checked_add(self.opts.http2.body_timeout));
        self.body_deadline.armed = deadline.is_some();
        if let Some(at) = deadline {
            self.body_deadline.timer.as_mut().reset(at);
        }
    }

    /// Sends GOAWAY for `e`; the connection ends once the queue is written.
    fn fail(&mut self, e: ConnError) {
        let mut out = BytesMut::new();
        frame::put_goaway(self.last_stream, e.code, e.reason.as_bytes(), &mut out);
        self.writer.push_control(out);
        self.failed = Some(e);
    }

    /// Handles every complete frame in the read buffer.
    fn process(&mut self) -> Result<(), ConnError> {
        if !self.preface_seen {
            let n = self.rbuf.len().min(PREFACE.len());
            if self.rbuf[..n] != PREFACE[..n] {
                return Err(ConnError::protocol("invalid connection preface"));
            }
            if n < PREFACE.len() {
                return Ok(());
            }
            self.rbuf.advance(PREFACE.len());
            self.preface_seen = true;
        }
        while let Some(head) = FrameHead::parse(&self.rbuf) {
            if head.len > MAX_FRAME {
                return Err(ConnError::frame_size(
                    "frame larger than SETTINGS_MAX_FRAME_SIZE",
                ));
            }
            if self.rbuf.len() < HEAD_LEN + head.len {
                self.rbuf.reserve(HEAD_LEN + head.len - self.rbuf.len());
                break;
            }
            self.rbuf.advance(HEAD_LEN);
            let payload = self.rbuf.split_to(head.len).freeze();
            self.frame(head, payload)?;
            if self.failed.is_some() {
                break;
            }
        }
        Ok(())
    }

    fn frame(&mut self, head: FrameHead, payload: Bytes) -> Result<(), ConnError> {
        if !self.settings_seen {
            if head.kind != kind::SETTINGS || head.has(flag::ACK) {
                return Err(ConnError::protocol(
                    "the preface must be followed by SETTINGS",
                ));
            }
            self.settings_seen = true;
        }
        if let Some(p) = &self.partial {
            if head.kind != kind::CONTINUATION || head.stream != p.stream {
                return Err(ConnError::protocol("expected CONTINUATION"));
            }
        }
        match head.kind {
            kind::DATA => self.on_data(head, payload),
            kind::HEADERS => self.on_headers(head, payload),
            kind::CONTINUATION => self.on_continuation(head, payload),
            kind::PRIORITY => {
                if head.stream == 0 {
                    return Err(ConnError::protocol("PRIORITY on stream 0"));
                }
                if payload.len() != 5 {
                    self.reset(head.stream, ErrorCode::FrameSizeError);
                }
                Ok(())
            }
            kind::RST_STREAM => {
                if head.stream == 0 {
                    return Err(ConnError::protocol("RST_STREAM on stream 0"));
                }
                if frame::parse_u31(&payload).is_none() {
                    return Err(ConnError::frame_size("RST_STREAM must be 4 bytes"));
                }
                if head.stream > self.last_stream {
                    return Err(ConnError::protocol("RST_STREAM on an idle stream"));
                }
                self.early.open.remove(&head.stream);
                if let Some(Stream::Running(task)) = self.forget(head.stream) {
                    task.abort();
                    self.writer.remote_reset(head.stream);
                    return self.resets.spend();
                }
                self.writer.remote_reset(head.stream);
                Ok(())
            }
            kind::SETTINGS => self.on_settings(head, &payload),
            kind::PUSH_PROMISE => Err(ConnError::protocol("clients must not push")),
            kind::PING => {
                if head.stream != 0 {
                    return Err(ConnError::protocol("PING on a stream"));
                }
                if payload.len() != 8 {
                    return Err(ConnError::frame_size("PING must be 8 bytes"));
                }
                if head.has(flag::ACK) {
                    if payload[..] == PING_PAYLOAD && self.keepalive.awaiting_ack {
                        self.keepalive.awaiting_ack = false;
                        if let Some(i) = self.keepalive.interval {
                            let at = tokio::time::Instant::now() + i;
                            self.keepalive.timer.as_mut().reset(at);
                        }
                    }
                } else {
                    let mut out = BytesMut::new();
                    frame::put_frame(kind::PING, flag::ACK, 0, &payload, &mut out);
                    self.writer.push_control(out);
                }
                Ok(())
            }
            kind::GOAWAY => {
                if head.stream != 0 {
                    return Err(ConnError::protocol("GOAWAY on a stream"));
                }
                self.going_away = true;
                Ok(())
            }
            kind::WINDOW_UPDATE => {
                let Some(inc) = frame::parse_u31(&payload) else {
                    return Err(ConnError::frame_size("WINDOW_UPDATE must be 4 bytes"));
                };
                if inc == 0 {
                    if head.stream == 0 {
                        return Err(ConnError::protocol("WINDOW_UPDATE of 0"));
                    }
                    self.reset(head.stream, ErrorCode::ProtocolError);
                    return Ok(());
                }
                if self.writer.window_update(head.stream, inc).is_err() {
                    if head.stream == 0 {
                        return Err(ConnError {
                            code: ErrorCode::FlowControlError,
                            reason: "connection window above 2^31-1",
                        });
                    }
                    self.reset(head.stream, ErrorCode::FlowControlError);
                }
                Ok(())
            }
            // Unknown frame types are ignored (RFC 9113 §5.5).
            _ => Ok(()),
        }
    }

    fn on_settings(&mut self, head: FrameHead, payload: &[u8]) -> Result<(), ConnError> {
        if head.stream != 0 {
            return Err(ConnError::protocol("SETTINGS on a stream"));
        }
        if head.has(flag::ACK) {
            if !payload.is_empty() {
                return Err(ConnError::frame_size("SETTINGS ACK with a payload"));
            }
            return Ok(());
        }
        for (id, value) in frame::parse_settings(payload)? {
            match id {
                setting::ENABLE_PUSH if value > 1 => {
                    return Err(ConnError::protocol("SETTINGS_ENABLE_PUSH above 1"))
                }
                setting::INITIAL_WINDOW_SIZE => {
                    self.writer
                        .set_initial_window(value)
                        .map_err(|_| ConnError {
                            code: ErrorCode::FlowControlError,
                            reason: "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
                        })?
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME as u32..=16_777_215).contains(&value) {
                        return Err(ConnError::protocol("SETTINGS_MAX_FRAME_SIZE out of range"));
                    }
                    self.writer.set_max_frame(value as usize);
                }
                // Our responses use no dynamic table, and we never push: nothing to apply.
                _ => {}
            }
        }
        let mut out = BytesMut::new();
        frame::put_frame(kind::SETTINGS, flag::ACK, 0, &[], &mut out);
        self.writer.push_control(out);
        Ok(())
    }

    fn on_headers(&mut self, head: FrameHead, payload: Bytes) -> Result<(), ConnError> {
        if head.stream == 0 || head.stream.is_multiple_of(2) {
            return Err(ConnError::protocol("HEADERS on an invalid stream id"));
        }
        let mut fragment = frame::unpad(&head, payload)?;
        if head.has(flag::PRIORITY) {
            if fragment.len() < 5 {
                return Err(ConnError::frame_size("HEADERS priority block too short"));
            }
            fragment.advance(5);
        }
        let block = PartialBlock {
            stream: head.stream,
            block: fragment.to_vec(),
            end_stream: head.has(flag::END_STREAM),
        };
        if head.has(flag::END_HEADERS) {
            self.header_block(block)
        } else {
            self.partial = Some(block);
            Ok(())
        }
    }

    fn on_continuation(&mut self, head: FrameHead, payload: Bytes) -> Result<(), ConnError> {
        let Some(mut p) = self.partial.take() else {
            return Err(ConnError::protocol("CONTINUATION without HEADERS"));
        };
        if p.block.len() + payload.len() > MAX_HEADER_LIST {
            return Err(ConnError {
                code: ErrorCode::EnhanceYourCalm,
                reason: "header block too large",
            });
        }
        p.block.extend_from_slice(&payload);
        if head.has(flag::END_HEADERS) {
            self.header_block(p)
        } else {
            self.partial = Some(p);
            Ok(())
        }
    }

    /// A complete header block: new request, trailers, or a frame for a closed stream.
    fn header_block(&mut self, p: PartialBlock) -> Result<(), ConnError> {
        // Decoded even when the stream is refused: the dynamic table must stay in step.
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(16);
        self.hpack
            .decode(&p.block, |n, v| fields.push((n.to_vec(), v.to_vec())))
            .map_err(|_| ConnError {
                code: ErrorCode::CompressionError,
                reason: "header block does not decode",
            })?;
        let id = p.stream;
        if id <= self.last_stream {
            return match self.streams.get_mut(&id) {
                // Trailers end a request body; their content is not used.
                Some(Stream::Receiving { .. }) if p.end_stream => {
                    self.start(id);
                    Ok(())
                }
                Some(Stream::Receiving { .. }) => {
                    Err(ConnError::protocol("second HEADERS without END_STREAM"))
                }
                _ if self.early.drops(id, p.end_stream) => Ok(()),
                _ => {
                    self.reset(id, ErrorCode::StreamClosed);
                    Ok(())
                }
            };
        }
        self.last_stream = id;
        if self.going_away || self.streams.len() >= self.opts.http2.max_concurrent_streams as usize
        {
            self.reset(id, ErrorCode::RefusedStream);
            return Ok(());
        }
        let mut parts = match stream::request_parts(&fields) {
            Ok(parts) => parts,
            Err(e) => {
                tracing::debug!(stream = id, "{e}");
                self.reset(id, ErrorCode::ProtocolError);
                return Ok(());
            }
        };
        // A request that may not run is answered (401, or the loopback guard's refusal) now,
        // not after its body: such a client gets nothing held for it.
        if let Some(p) = self.peer {
            parts
                .extensions
                .insert(crate::server::listeners::PeerAddr(p));
        }
        let guarded = if self.opts.loopback_only {
            loopback_guard::check(&parts.method, &parts.uri, &parts.headers).err()
        } else {
            None
        };
        let refusal = guarded.or_else(|| {
            let authn = self.opts.authenticator.as_ref()?;
            match authn.authenticate(&parts.headers, self.client_user.as_ref(), &*self.srv) {
                Ok(user) => {
                    parts.extensions.insert(Authenticated(user));
                    None
                }
                Err(s) => Some(s),
            }
        });
        let authorized = refusal.is_none();
        self.streams.insert(
            id,
            Stream::Receiving {
                parts: Box::new(parts),
                body: BytesMut::new(),
                held: 0,
                refusal: refusal.map(Box::new),
                since: tokio::time::Instant::now(),
            },
        );
        if !self.body_deadline.armed && authorized && !p.end_stream {
            // No other request is waiting for its body: this one's deadline is the next.
            if let Some(at) = tokio::time::Instant::now().checked_add(self.opts.http2.body_timeout)
            {
                self.body_deadline.timer.as_mut().reset(at);
                self.body_deadline.armed = true;
            }
        }
        // HPACK's own accounting: name, value and 32 bytes per field.
        let header_bytes = fields.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
        self.hold(id, header_bytes)?;
        if p.end_stream || !authorized {
            self.start(id);
        }
        if !p.end_stream && !authorized {
            self.early.open.insert(id);
        }
        Ok(())
    }

    fn on_data(&mut self, head: FrameHead, payload: Bytes) -> Result<(), ConnError> {
        if head.stream == 0 {
            return Err(ConnError::protocol("DATA on stream 0"));
        }
        let flow_len = payload.len();
        let data = frame::unpad(&head, payload)?;
        // The connection window is given back at once: bodies are bounded per stream below.
        let mut out = BytesMut::new();
        if flow_len > 0 {
            frame::put_window_update(0, flow_len as u32, &mut out);
        }
        match self.streams.get_mut(&head.stream) {
            Some(Stream::Receiving { body, .. }) => {
                let room = (MAX_BODY_BYTES + 1).saturating_sub(body.len());
                let kept = data.len().min(room);
                body.extend_from_slice(&data[..kept]);
                if let Err(e) = self.hold(head.stream, kept) {
                    self.writer.push_control(out);
                    return Err(e);
                }
                if head.has(flag::END_STREAM) {
                    self.start(head.stream);
                } else if flow_len > 0 {
                    frame::put_window_update(head.stream, flow_len as u32, &mut out);
                }
            }
            _ if head.stream > self.last_stream => {
                return Err(ConnError::protocol("DATA on an idle stream"));
            }
            // The rest of a body whose request was answered already.
            _ if self.early.drops(head.stream, head.has(flag::END_STREAM)) => {}
            _ => frame::put_rst_stream(head.stream, ErrorCode::StreamClosed, &mut out),
        }
        self.writer.push_control(out);
        Ok(())
    }

    /// The request of stream `id` is complete: run it.
    fn start(&mut self, id: u32) {
        let Some(Stream::Receiving {
            parts,
            body,
            refusal,
            ..
        }) = self.forget(id)
        else {
            return;
        };
        let sink = StreamSink::open(self.writer.clone(), id);
        let mut req = http::Request::from_parts(*parts, Full::new(body.freeze()));
        req.extensions_mut().insert(sink.clone());
        let task = tokio::spawn(stream::respond(
            self.srv.clone(),
            refusal.map(|s| *s),
            req,
            sink,
        ));
        // A request that already finished has its id in the writer's finished list; the
        // entry is dropped when the connection task collects it.
        self.streams
            .insert(id, Stream::Running(task.abort_handle()));
    }

    /// Removes stream `id`, releasing what it held while receiving.
    fn forget(&mut self, id: u32) -> Option<Stream> {
        let stream = self.streams.remove(&id);
        if let Some(Stream::Receiving { held, .. }) = &stream {
            self.receiving_bytes -= held;
        }
        stream
    }

    /// Counts `n` more bytes held for stream `id` while it receives; an error once the
    /// connection holds more than [`MAX_RECEIVING_BYTES`].
    fn hold(&mut self, id: u32, n: usize) -> Result<(), ConnError> {
        if let Some(Stream::Receiving { held, .. }) = self.streams.get_mut(&id) {
            *held += n;
            self.receiving_bytes += n;
        }
        if self.receiving_bytes > MAX_RECEIVING_BYTES {
            return Err(ConnError {
                code: ErrorCode::EnhanceYourCalm,
                reason: "too many unfinished requests",
            });
        }
        Ok(())
    }

    /// Resets stream `id` from our side (and forgets it).
    fn reset(&mut self, id: u32, code: ErrorCode) {
        self.early.open.remove(&id);
        if let Some(Stream::Running(task)) = self.forget(id) {
            task.abort();
        }
        if self.writer.is_open(id) {
            self.writer.reset_stream(id, code);
        } else {
            let mut out = BytesMut::new();
            frame::put_rst_stream(id, code, &mut out);
            self.writer.push_control(out);
        }
    }

    /// Ends our side (FIN after the GOAWAY) and reads what the client still sends for a
    /// moment: closing a socket with unread input makes the kernel send a reset, which can
    /// destroy the GOAWAY before the client reads it.
    async fn linger(&mut self) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        if self.io.shutdown().await.is_err() {
            return;
        }
        let deadline = tokio::time::Instant::now() + LINGER_TIME;
        let mut dropped = 0;
        while dropped < LINGER_BYTES {
            match tokio::time::timeout_at(deadline, self.io.read(&mut self.scratch)).await {
                Ok(Ok(n)) if n > 0 => dropped += n,
                _ => return,
            }
        }
    }

    /// The connection is over: abort every request (ending its watch) and fail every sink.
    fn shutdown(&mut self) {
        for (_, s) in self.streams.drain() {
            if let Stream::Running(task) = s {
                task.abort();
            }
        }
        self.writer.close();
    }
}
