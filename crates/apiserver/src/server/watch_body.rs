//! The HTTP response body of a watch: the initial frames, then the live queue drained through
//! hyper, or — on a transport the dispatcher may write to directly — the hand-over to the
//! dispatcher's writes and the draining of what they could not place. It owns the watch's
//! wire encoding (JSON lines, protobuf frames, Table and metadata renderings) on the way out;
//! it assumes the registration came from [`crate::cacher::Cacher::watch`].

use super::direct_conn::DirectConn;
use super::http2::writer::StreamSink;
use super::wire;
use crate::cacher::cache_watcher::{OnClose, WatchRegistration};
use crate::cacher::outbox::{DirectTarget, Framing, Outbox};
use crate::cacher::WatchFrame;
use crate::encoding::watch_json::ObjectEncoder;
use bytes::{Bytes, BytesMut};
use http_body::Frame;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The transport a body's live frames may be written to directly.
#[derive(Debug, Clone)]
enum Transport {
    /// A plain TCP connection (HTTP/1.1 chunks or WebSocket messages).
    Socket(Arc<DirectConn>),
    /// An HTTP/2 stream on its connection's shared writer.
    Http2(StreamSink),
}

impl Transport {
    /// The sink the dispatcher writes to.
    fn sink(&self) -> DirectTarget {
        match self {
            Transport::Socket(c) => c.clone(),
            Transport::Http2(s) => Arc::new(s.clone()),
        }
    }
}

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
    direct: Option<Transport>,
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
/// chain: its object, then its body's first cache lines (see [`WatchFrame::prefetch_body`]).
const BODY_PREFETCH_STEP: usize = 4;

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
            framing: wire::CHUNKED,
            phase: Phase::Hyper,
            protobuf: false,
        }
    }

    /// The body of a watch the cacher registered: its initial frames, then its queue, until
    /// its deadline, written at most once per its flush interval.
    pub fn from_registration(reg: WatchRegistration) -> WatchBody {
        let WatchRegistration {
            initial,
            outbox,
            deadline,
            api_version,
            kind,
            on_close,
            flush_interval,
        } = reg;
        WatchBody::new(initial, outbox, deadline, api_version, kind, on_close)
            .with_flush_interval(flush_interval)
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
        self.direct = Some(Transport::Socket(conn));
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
        self.direct = Some(Transport::Socket(conn));
        self.framing = wire::WEBSOCKET;
        let control = self.rx.clone();
        (self, control)
    }

    /// Lets the dispatcher append live frames as DATA frames of an HTTP/2 stream to its
    /// connection's writer, once the initial frames have been taken from this body. The
    /// caller must have handed every chunk it took to `sink` before polling again, so that
    /// the dispatcher's frames follow them. Ignored with an encoder or a flush interval.
    #[must_use]
    pub fn with_direct_http2(mut self, sink: StreamSink) -> WatchBody {
        self.direct = Some(Transport::Http2(sink));
        self.framing = wire::HTTP2;
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
                    let Transport::Socket(sock) = &conn else {
                        // HTTP/2: the request task handed everything taken so far to the
                        // connection's writer before polling again.
                        let (api_version, kind) = (&self.api_version, &self.kind);
                        rx.start_direct(conn.sink(), framing, |f| {
                            framing.wire(f, api_version, kind)
                        });
                        self.phase = Phase::Direct;
                        continue;
                    };
                    if framing == wire::WEBSOCKET {
                        // The pump wrote everything taken so far before polling again.
                        let (api_version, kind) = (&self.api_version, &self.kind);
                        rx.start_direct(conn.sink(), framing, |f| {
                            framing.wire(f, api_version, kind)
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
                    if let Transport::Socket(sock) = &conn {
                        if sock.flushes() <= seen {
                            sock.wake_on_flush(cx.waker());
                            if sock.flushes() <= seen {
                                return Some(Poll::Pending);
                            }
                        }
                    }
                    let (api_version, kind) = (&self.api_version, &self.kind);
                    let framing = wire::CHUNKED;
                    rx.start_direct(conn.sink(), framing, |f| framing.wire(f, api_version, kind));
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
    use crate::cacher::CachedObject;

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
