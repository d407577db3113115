//! `Status` bodies for the errors hyper answers by itself.
//!
//! hyper answers an HTTP/1.1 request it cannot parse — a malformed request line or header
//! (400), a request URI over 64 KiB (414), a header section larger than its read buffer or
//! of more than 100 fields (431) — before any service sees a request: a bare status line
//! with `content-length: 0`, after which it closes the connection. Clients of the API expect
//! a `Status` on every error, so the connection's transport recognises that answer as hyper
//! writes it (a response head that starts a write, has one of those codes and names no
//! content type, which every answer of ours does) and writes it with a `Status` body
//! instead. Only the first bytes of each write are compared, and the watch events the cache
//! writes straight to a socket (`server::direct_conn`) do not pass here at all.

use api::{Reason, Status};
use bytes::{BufMut, Bytes, BytesMut};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An HTTP/1.1 connection's transport that puts a `Status` body into hyper's own error
/// answers (see the module documentation). Reads pass through.
#[derive(Debug)]
pub struct StatusOnParseError<IO> {
    io: IO,
    /// The answer being written in place of hyper's.
    pending: Option<Replacement>,
}

#[derive(Debug)]
struct Replacement {
    bytes: Bytes,
    written: usize,
    /// How many of hyper's bytes it stands for (reported written once it is).
    stands_for: usize,
}

impl<IO> StatusOnParseError<IO> {
    /// Wraps a connection's transport.
    pub fn new(io: IO) -> Self {
        StatusOnParseError { io, pending: None }
    }
}

/// The `Status` for a code hyper answers a request it cannot parse with.
fn status_for(code: u16) -> Status {
    let message = match code {
        414 => "the request URI is too long (the limit is 65,534 bytes)",
        431 => {
            "the request's header section is too large (over about 400 KiB, or more than 100 \
             header fields)"
        }
        _ => "the request could not be parsed: malformed request line or header field",
    };
    Status::new(Reason::BadRequest, message)
}

/// The answer to write instead of `buf`, if `buf` is hyper's bare answer to a request it
/// could not parse: the same head with a content type and length, and a `Status` body.
fn replacement(buf: &[u8]) -> Option<Replacement> {
    let code = match buf.get(..13)? {
        b"HTTP/1.1 400 " => 400,
        b"HTTP/1.1 414 " => 414,
        b"HTTP/1.1 431 " => 431,
        _ => return None,
    };
    // The head alone, all of it: hyper's answer has no body.
    let head = std::str::from_utf8(buf.strip_suffix(b"\r\n\r\n")?).ok()?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let mut kept = Vec::new();
    for line in lines {
        let name = line.split(':').next().unwrap_or("");
        if name.eq_ignore_ascii_case("content-type") {
            return None;
        }
        if !name.eq_ignore_ascii_case("content-length") {
            kept.push(line);
        }
    }
    let mut value = status_for(code).to_value();
    value["code"] = code.into();
    if code != 400 {
        // Kubernetes names no reason for these codes.
        if let Some(o) = value.as_object_mut() {
            o.remove("reason");
        }
    }
    let body = serde_json::to_vec(&value).ok()?;
    let mut out = BytesMut::with_capacity(head.len() + body.len() + 64);
    out.put_slice(status_line.as_bytes());
    out.put_slice(b"\r\ncontent-type: application/json\r\ncontent-length: ");
    out.put_slice(body.len().to_string().as_bytes());
    out.put_slice(b"\r\n");
    for line in kept {
        out.put_slice(line.as_bytes());
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
    out.put_slice(&body);
    Some(Replacement {
        bytes: out.freeze(),
        written: 0,
        stands_for: buf.len(),
    })
}

impl<IO: AsyncWrite + Unpin> StatusOnParseError<IO> {
    /// Writes the pending replacement out; then reports hyper's bytes written.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some(r) = self.pending.as_mut() else {
            return Poll::Ready(Ok(0));
        };
        while r.written < r.bytes.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &r.bytes[r.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            r.written += n;
        }
        let n = r.stands_for;
        self.pending = None;
        Poll::Ready(Ok(n))
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for StatusOnParseError<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for StatusOnParseError<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.pending.is_none() {
            match replacement(buf) {
                Some(r) => this.pending = Some(r),
                None => return Pin::new(&mut this.io).poll_write(cx, buf),
            }
        }
        this.poll_replacement(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.pending.is_none() {
            let first = bufs.iter().find(|b| !b.is_empty());
            match first.and_then(|b| replacement(b)) {
                Some(r) => this.pending = Some(r),
                None => return Pin::new(&mut this.io).poll_write_vectored(cx, bufs),
            }
        }
        this.poll_replacement(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hyper_s_bare_error_heads_are_replaced() {
        let hyper_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\n";
        let r = replacement(hyper_431).unwrap();
        assert_eq!(r.stands_for, hyper_431.len());
        let text = String::from_utf8(r.bytes.to_vec()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{head}"
        );
        assert!(
            head.contains("\r\ncontent-type: application/json\r\n"),
            "{head}"
        );
        assert!(
            head.contains(&format!("\r\ncontent-length: {}\r\n", body.len())),
            "{head}"
        );
        assert!(head.contains("\r\ndate: Thu"), "{head}");
        assert_eq!(head.matches("content-length").count(), 1, "{head}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            (v["kind"].as_str(), v["code"].as_u64()),
            (Some("Status"), Some(431))
        );
        for not_hyper in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n{}",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
            b"3f\r\n{\"type\":\"ADDED\"}",
            b"",
        ] {
            assert!(replacement(not_hyper).is_none(), "{not_hyper:?}");
        }
    }
}
