//! A plain TCP connection that hyper serves and that the cacher may also write to directly
//! (it is a [`WatchSink`] and a [`WatchConnection`]).
//!
//! Why: an HTTP/1.1 watch response is, after its headers, nothing but chunks the cacher
//! produces. Handing each event to the connection's task (queue push, wake-up, hyper's body
//! poll, chunk framing, flush) costs more CPU than the `write` itself. Once hyper has flushed a
//! watch response's headers and the response body goes quiet, the dispatcher writes each
//! event's pre-framed chunk straight to the socket with one non-blocking `write`, and only
//! falls back to the connection's task when the socket is full.
//!
//! Safety of the interleaving rests on one hyper fact: its HTTP/1 connection calls the
//! transport's `poll_flush` only when its own write buffer is empty. [`DirectConn::flushes`]
//! counts those calls, so a body that stops yielding data and then sees the count advance
//! knows every byte hyper buffered for the response (headers, earlier chunks) is on the wire,
//! and hyper will write nothing more until the body yields again or ends.

use crate::cacher::sink::{SinkClosed, WatchConnection, WatchSink};
use bytes::{Buf, Bytes};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The shared state of one accepted TCP connection.
///
/// Every HTTP/1.1 connection (plain or under TLS) is served through one, so that a watch
/// whose client stopped reading can have its connection reset ([`DirectConn::abort`]): a
/// connection whose socket is full would otherwise stay open, with megabytes of kernel
/// buffers, for as long as the client keeps it. Only plain ones are written to directly.
#[derive(Debug)]
pub struct DirectConn {
    stream: TcpStream,
    flushes: AtomicU64,
    flush_waiter: Mutex<Option<Waker>>,
    /// Writes that moved bytes, by anyone: whether the client still reads.
    writes: AtomicU64,
}

/// The connection of a request, for the request's handler: set on every HTTP/1.1 request
/// (plain or TLS), so that a watch can reset it if its client stops reading. Unlike the
/// bare `Arc<DirectConn>` extension, it does not allow direct writes.
#[derive(Debug, Clone)]
pub struct ConnHandle(pub Arc<DirectConn>);

impl DirectConn {
    /// Wraps an accepted stream; returns the shared state and the transport to give hyper
    /// (or TLS).
    pub fn new(stream: TcpStream) -> (Arc<DirectConn>, ConnIo) {
        let conn = Arc::new(DirectConn {
            stream,
            flushes: AtomicU64::new(0),
            flush_waiter: Mutex::new(None),
            writes: AtomicU64::new(0),
        });
        (conn.clone(), ConnIo(conn))
    }

    /// How many writes so far moved bytes to the socket: unchanged over a while that had
    /// bytes to send means the client does not read.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    fn wrote<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if r.is_ok() {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Resets the connection: whatever waits to be written is dropped (the kernel frees the
    /// socket's buffers at once instead of trying to deliver them), reads and writes fail
    /// from now on, and the client gets an RST once the server lets go of the socket.
    pub fn abort(&self) {
        let sock = socket2::SockRef::from(&self.stream);
        let _ = sock.set_linger(Some(std::time::Duration::ZERO));
        let _ = sock.shutdown(std::net::Shutdown::Both);
    }

    /// How many times hyper has flushed with an empty write buffer so far.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::Acquire)
    }

    /// Wakes `waker` at hyper's next flush (replacing any earlier waiter).
    pub fn wake_on_flush(&self, waker: &Waker) {
        let mut w = self.flush_waiter.lock();
        match w.as_ref() {
            Some(cur) if cur.will_wake(waker) => {}
            _ => *w = Some(waker.clone()),
        }
    }

    /// Writes as much of `buf` as the socket takes now, without waiting: the dispatcher's
    /// hot path.
    ///
    /// A plain non-blocking `send` on the descriptor that skips tokio's readiness bookkeeping
    /// (measured: ~6 % of the fan-out's CPU). Sound because whoever waits for the socket
    /// afterwards writes with [`DirectConn::try_write`] first, which finds the socket full
    /// and clears tokio's stale readiness before [`DirectConn::poll_write_ready`] waits.
    pub fn send_now(&self, buf: &[u8]) -> io::Result<usize> {
        self.wrote(socket2::SockRef::from(&self.stream).send(buf))
    }

    /// Vectored [`DirectConn::send_now`].
    pub fn send_now_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.wrote(socket2::SockRef::from(&self.stream).send_vectored(bufs))
    }

    /// Writes as much of `buf` as the socket takes now, through tokio (a `WouldBlock` clears
    /// the readiness [`DirectConn::poll_write_ready`] then waits on).
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.wrote(self.stream.try_write(buf))
    }

    /// Ready when the socket can take more bytes; registers `cx` otherwise.
    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream.poll_write_ready(cx)
    }
}

/// At most this many chunks go into one vectored write.
const MAX_IOVECS: usize = 256;

/// The dispatcher's writes to a plain socket: the non-blocking `send` of its hot path,
/// vectored for a batch, and tokio's readiness for the response's task.
impl WatchSink for DirectConn {
    fn hot_addresses(&self) -> [usize; 2] {
        [self as *const DirectConn as usize, 0]
    }

    fn offer(&self, bytes: &mut Bytes) -> Result<bool, SinkClosed> {
        match self.send_now(bytes) {
            Ok(n) => {
                bytes.advance(n.min(bytes.len()));
                Ok(bytes.is_empty())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(_) => Err(SinkClosed),
        }
    }

    /// Writes `chunks` with as few vectored writes as the socket allows.
    fn offer_all(&self, chunks: &mut VecDeque<Bytes>) -> Result<(), SinkClosed> {
        while !chunks.is_empty() {
            let (result, full_batch) = {
                let slices: Vec<io::IoSlice<'_>> = chunks
                    .iter()
                    .take(MAX_IOVECS)
                    .map(|b| io::IoSlice::new(b))
                    .collect();
                (self.send_now_vectored(&slices), slices.len() == MAX_IOVECS)
            };
            match result {
                Ok(mut k) => {
                    while k > 0 {
                        let Some(front) = chunks.front_mut() else {
                            break;
                        };
                        if k >= front.len() {
                            k -= front.len();
                            chunks.pop_front();
                        } else {
                            front.advance(k);
                            k = 0;
                        }
                    }
                    if full_batch || chunks.is_empty() {
                        continue;
                    }
                    // A short write: the socket is full.
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(_) => return Err(SinkClosed),
            }
        }
        Ok(())
    }

    fn poll_send(&self, bytes: &mut Bytes, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match self.try_write(bytes) {
                Ok(n) => {
                    bytes.advance(n.min(bytes.len()));
                    if bytes.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match self.poll_write_ready(cx) {
                        Poll::Ready(Ok(())) => {}
                        other => return other,
                    }
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl WatchConnection for DirectConn {
    fn writes(&self) -> u64 {
        DirectConn::writes(self)
    }

    fn abort(&self) {
        DirectConn::abort(self)
    }
}

/// The connection as hyper's transport: reads and writes go to the shared socket.
#[derive(Debug)]
pub struct ConnIo(Arc<DirectConn>);

impl AsyncRead for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let stream = &self.0.stream;
        loop {
            ready!(stream.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match stream.try_read(unfilled) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let stream = &self.0.stream;
        loop {
            ready!(stream.poll_write_ready(cx))?;
            match stream.try_write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(self.0.wrote(r)),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let stream = &self.0.stream;
        loop {
            ready!(stream.poll_write_ready(cx))?;
            match stream.try_write_vectored(bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(self.0.wrote(r)),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // TCP has nothing to flush; this call is hyper saying its buffer is empty.
        self.0.flushes.fetch_add(1, Ordering::AcqRel);
        if let Some(w) = self.0.flush_waiter.lock().take() {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = socket2::SockRef::from(&self.0.stream).shutdown(std::net::Shutdown::Write);
        Poll::Ready(match r {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            r => r,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_writes_and_counts_flushes() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let client = tokio::spawn(async move { TcpStream::connect(addr).await.unwrap() });
        let (server, _) = l.accept().await.unwrap();
        let mut client = client.await.unwrap();
        let (conn, mut io) = DirectConn::new(server);
        io.write_all(b"via hyper;").await.unwrap();
        assert_eq!(conn.flushes(), 0);
        io.flush().await.unwrap();
        assert_eq!(conn.flushes(), 1);
        assert_eq!(conn.try_write(b"direct").unwrap(), 6);
        let mut got = vec![0u8; 16];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"via hyper;direct");
        client.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        io.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ping");
        io.shutdown().await.unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    use crate::cacher::outbox::test_frames::{bookmark, wire_of};
    use crate::cacher::outbox::{ControlRefused, Delivered, Outbox};

    async fn pair() -> (Arc<DirectConn>, ConnIo, tokio::net::TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let client =
            tokio::spawn(async move { tokio::net::TcpStream::connect(addr).await.unwrap() });
        let (server, _) = l.accept().await.unwrap();
        let (conn, io) = DirectConn::new(server);
        (conn, io, client.await.unwrap())
    }

    #[tokio::test]
    async fn control_frames_are_refused_once_a_client_that_does_not_read_fills_the_queue() {
        let (conn, _io, _client) = pair().await;
        let ob = Outbox::new(8);
        assert!(matches!(
            ob.push_control(Bytes::from_static(b"pong")),
            Err(ControlRefused::NotDirect(_))
        ));
        ob.start_direct(conn, crate::server::wire::WEBSOCKET, |_| Bytes::new());
        // 64 KB replies to a client that never reads: the socket fills, then the queue.
        let reply = Bytes::from(vec![0x8a; 64 * 1024]);
        let mut queued = 0;
        let refused = loop {
            match ob.push_control(reply.clone()) {
                Ok(()) => queued += 1,
                Err(e) => break e,
            }
            assert!(queued < 10_000, "the queue never refused");
        };
        assert!(matches!(refused, ControlRefused::Backlogged), "{refused:?}");
    }

    #[tokio::test]
    async fn direct_mode_writes_in_order_and_defers_what_the_socket_refuses() {
        let (conn, _io, mut client) = pair().await;
        let ob = Arc::new(Outbox::new(100_000));
        let size = 64 * 1024;
        let mut wire = wire_of(size);
        // Frames queued before the hand-over are converted first, in order.
        ob.push(bookmark(1), &mut wire).unwrap();
        let mut encode = wire_of(size);
        ob.start_direct(conn, crate::server::wire::CHUNKED, |f| {
            encode(f, crate::server::wire::CHUNKED)
        });
        // Nothing is written directly while converted frames wait.
        assert_eq!(
            ob.push(bookmark(2), &mut wire).unwrap(),
            Delivered::Deferred
        );
        std::future::poll_fn(|cx| ob.poll_drain(cx)).await.unwrap();
        // Far more than loopback socket buffers hold, so some is deferred.
        let mut written = 0;
        let mut deferred = 0;
        for batch in 0..20u64 {
            let frames = (0..10).map(|i| bookmark(3 + batch * 10 + i)).collect();
            let out = ob.push_many(frames, &mut wire);
            assert!(!out.closed && out.rest.is_empty());
            written += out.written;
            deferred += out.deferred;
        }
        assert!(
            written >= 1 && deferred >= 1,
            "written {written}, deferred {deferred}"
        );
        // Drain with the body's loop while the client reads everything.
        let drainer = {
            let ob = ob.clone();
            tokio::spawn(async move { std::future::poll_fn(|cx| ob.poll_drain(cx)).await })
        };
        let mut got = vec![0u8; 202 * size];
        client.read_exact(&mut got).await.unwrap();
        drainer.await.unwrap().unwrap();
        let rvs: Vec<u64> = got
            .chunks(size)
            .map(|c| {
                std::str::from_utf8(&c[..size - 1])
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        assert_eq!(rvs, (1..=202).collect::<Vec<u64>>());
    }

    async fn socket_pair() -> (Arc<DirectConn>, tokio::net::TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let client = tokio::spawn(async move { tokio::net::TcpStream::connect(addr).await });
        let (server, _) = l.accept().await.unwrap();
        let (conn, _io) = DirectConn::new(server);
        (conn, client.await.unwrap().unwrap())
    }

    #[tokio::test]
    async fn a_client_that_takes_nothing_while_frames_wait_is_stalled_after_one_period() {
        let (conn, mut client) = socket_pair().await;
        let ob = Outbox::new(8);
        // Without a known connection there is no evidence either way.
        ob.push(bookmark(1), &mut wire_of(8)).unwrap();
        ob.check_progress();
        ob.check_progress();
        assert!(!ob.is_stalled());
        ob.set_connection(conn.clone());
        ob.check_progress();
        assert!(!ob.is_stalled(), "the first check only takes a mark");
        ob.check_progress();
        assert!(
            ob.is_stalled(),
            "frames waited a whole period and nothing moved"
        );
        // The client reads again: bytes move, and the watcher is no longer stalled.
        conn.try_write(b"x").unwrap();
        let mut b = [0u8; 1];
        client.read_exact(&mut b).await.unwrap();
        ob.check_progress();
        assert!(!ob.is_stalled());
        // Nothing waiting: not stalled, whatever moved.
        while ob.try_frame().ok().flatten().is_some() {}
        ob.check_progress();
        ob.check_progress();
        assert!(!ob.is_stalled());
    }
}
