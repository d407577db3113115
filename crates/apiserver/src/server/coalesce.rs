//! Write coalescing for HTTP/2 connections.
//!
//! Why: the h2 crate writes every DATA frame larger than 256 bytes with its own vectored write
//! and flush, so a connection carrying a hundred watch streams still made one `writev` per
//! event per stream. [`CoalescingIo`] accepts those writes into a buffer and turns the flush
//! that follows into a deferred one: the bytes go out at the first flush in a *later* poll of
//! the connection (or when the buffer is large), and the connection's task is woken so that
//! poll happens at once. Everything the connection produced in one poll — typically a DATA
//! frame for every stream an event went to — then leaves in one write.
//!
//! [`PollCounted`] wraps the connection's future and counts its polls; the transport reads
//! the count to tell "a later poll" from "the same poll". Only for HTTP/2: an HTTP/1.1
//! connection may be upgraded (WebSocket) or written to directly, and neither must find bytes
//! waiting in here.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes buffered before a write is forced even within one poll.
const HIGH_WATER: usize = 512 * 1024;

/// A transport that gathers the writes of one poll of its connection (see the module docs).
#[derive(Debug)]
pub struct CoalescingIo<IO> {
    inner: IO,
    buf: Vec<u8>,
    written: usize,
    polls: Arc<AtomicU64>,
    deferred_at: Option<u64>,
}

impl<IO> CoalescingIo<IO> {
    /// Wraps `inner`; `polls` must be the counter of the [`PollCounted`] driving it.
    pub fn new(inner: IO, polls: Arc<AtomicU64>) -> CoalescingIo<IO> {
        CoalescingIo {
            inner,
            buf: Vec::new(),
            written: 0,
            polls,
            deferred_at: None,
        }
    }
}

impl<IO: AsyncWrite + Unpin> CoalescingIo<IO> {
    /// Writes out everything buffered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buf.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.buf.clear();
        self.written = 0;
        self.deferred_at = None;
        if self.buf.capacity() > 4 * HIGH_WATER {
            self.buf.shrink_to(HIGH_WATER);
        }
        Poll::Ready(Ok(()))
    }

    fn make_room(&mut self, cx: &mut Context<'_>, more: usize) -> Poll<io::Result<()>> {
        if self.buf.len() + more > HIGH_WATER && !self.buf.is_empty() {
            ready!(self.poll_drain(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for CoalescingIo<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // A deferred flush from an earlier poll goes out as soon as the connection is polled
        // again, whatever it does first.
        if this
            .deferred_at
            .is_some_and(|at| at != this.polls.load(Ordering::Relaxed))
        {
            if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
                return Poll::Ready(Err(e));
            }
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for CoalescingIo<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.make_room(cx, data.len()))?;
        this.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        ready!(this.make_room(cx, total))?;
        for b in bufs {
            this.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.buf.is_empty() {
            return Pin::new(&mut this.inner).poll_flush(cx);
        }
        let now = this.polls.load(Ordering::Relaxed);
        match this.deferred_at {
            None if this.buf.len() < HIGH_WATER => {
                // Let the rest of this poll add to the write; the next poll sends it all.
                this.deferred_at = Some(now);
                cx.waker().wake_by_ref();
                return Poll::Ready(Ok(()));
            }
            Some(at) if at == now && this.buf.len() < HIGH_WATER => return Poll::Ready(Ok(())),
            _ => {}
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// A future that counts its polls in a shared counter (read by [`CoalescingIo`]).
#[derive(Debug)]
pub struct PollCounted<F> {
    inner: Pin<Box<F>>,
    polls: Arc<AtomicU64>,
}

impl<F> PollCounted<F> {
    /// Wraps `inner`, counting into `polls`.
    pub fn new(inner: F, polls: Arc<AtomicU64>) -> PollCounted<F> {
        PollCounted {
            inner: Box::pin(inner),
            polls,
        }
    }
}

impl<F: Future> Future for PollCounted<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.polls.fetch_add(1, Ordering::Relaxed);
        self.inner.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn writes_of_one_poll_leave_together_at_the_next() {
        let (client, mut server) = tokio::io::duplex(1 << 20);
        let polls = Arc::new(AtomicU64::new(1));
        let mut io = CoalescingIo::new(client, polls.clone());
        io.write_all(b"frame-1;").await.unwrap();
        io.write_all(b"frame-2;").await.unwrap();
        io.flush().await.unwrap();
        // Same poll: still held.
        io.flush().await.unwrap();
        let mut got = [0u8; 16];
        let quick =
            tokio::time::timeout(std::time::Duration::from_millis(50), server.read(&mut got)).await;
        assert!(quick.is_err(), "nothing on the wire within the same poll");
        // A later poll: everything at once.
        polls.fetch_add(1, Ordering::Relaxed);
        io.flush().await.unwrap();
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"frame-1;frame-2;");
        // Past the high-water mark, writes go out without waiting for a flush.
        let big = vec![7u8; HIGH_WATER];
        io.write_all(b"x").await.unwrap();
        io.write_all(&big).await.unwrap();
        let mut first = [0u8; 1];
        server.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"x");
        io.shutdown().await.unwrap();
        let mut rest = Vec::new();
        server.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest.len(), HIGH_WATER);
    }
}
