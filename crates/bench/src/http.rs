//! A deliberately tiny HTTP/1.1 client for the benchmarks: response-head parsing, a streaming
//! chunked-transfer decoder that never allocates, byte searches for the few fields the
//! benchmarks need, and [`HttpConn`], one keep-alive connection that sends a request and reads
//! the whole response body into a caller-owned buffer.
//!
//! It does not parse JSON and does not pipeline: one request at a time per connection.

use std::fmt;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The bytes that precede an object's resourceVersion value in listwatch's JSON output.
pub const RV_MARKER: &[u8] = b"\"resourceVersion\":\"";

/// A response head larger than this is treated as a protocol error.
const MAX_HEAD: usize = 64 * 1024;

/// Everything that can go wrong talking to the server with this client.
#[derive(Debug)]
pub enum HttpError {
    /// A socket operation failed.
    Io(std::io::Error),
    /// The server closed the connection before the response was complete.
    Closed,
    /// The response head is not valid HTTP/1.1 (the message says what was wrong).
    BadHead(&'static str),
    /// The chunked body framing is broken (the message says what was wrong).
    BadChunk(&'static str),
    /// A WebSocket frame is not one a server may send (the message says what was wrong).
    BadFrame(&'static str),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Io(e) => write!(f, "i/o error: {e}"),
            HttpError::Closed => f.write_str("connection closed before the response was complete"),
            HttpError::BadHead(m) => write!(f, "bad response head: {m}"),
            HttpError::BadChunk(m) => write!(f, "bad chunked body: {m}"),
            HttpError::BadFrame(m) => write!(f, "bad WebSocket frame: {m}"),
        }
    }
}

impl std::error::Error for HttpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HttpError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for HttpError {
    fn from(e: std::io::Error) -> Self {
        HttpError::Io(e)
    }
}

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `Content-Length: n`.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither: the body runs until the server closes the connection.
    UntilClose,
}

/// The parts of a response head the benchmarks look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code.
    pub status: u16,
    /// How the body is delimited.
    pub body: BodyKind,
    /// The number of bytes of the head, including the blank line that ends it.
    pub head_len: usize,
    /// False when the server said `Connection: close`.
    pub keep_alive: bool,
}

/// Index of the first occurrence of `needle` in `haystack`; `None` if absent or `needle` is
/// empty.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut from = 0;
    while from + needle.len() <= haystack.len() {
        let rel = haystack[from..=haystack.len() - needle.len()]
            .iter()
            .position(|&b| b == first)?;
        let at = from + rel;
        if &haystack[at..at + needle.len()] == needle {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The number of non-overlapping occurrences of `needle` in `haystack` (0 for an empty
/// needle).
pub fn count(haystack: &[u8], needle: &[u8]) -> usize {
    let mut n = 0;
    let mut rest = haystack;
    while let Some(at) = find(rest, needle) {
        n += 1;
        rest = &rest[at + needle.len()..];
    }
    n
}

/// The number of `\n` bytes in `bytes`.
pub fn count_newlines(bytes: &[u8]) -> u64 {
    // SIMD: a watcher's whole body goes through here.
    memchr::memchr_iter(b'\n', bytes).count() as u64
}

/// The resourceVersion of the first `"resourceVersion":"<digits>"` in `bytes`, or `None` if
/// there is none, its value is not a decimal number, or it does not fit a `u64`.
pub fn find_rv(bytes: &[u8]) -> Option<u64> {
    let at = find(bytes, RV_MARKER)? + RV_MARKER.len();
    let rest = &bytes[at..];
    let end = rest.iter().position(|&b| b == b'"')?;
    parse_decimal(&rest[..end])
}

/// Parses a non-empty run of ASCII digits as a `u64`; `None` on anything else or overflow.
fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// Parses a response head at the start of `buf`. `Ok(None)` means the head is not complete
/// yet (read more); an error means it never will be valid.
pub fn parse_head(buf: &[u8]) -> Result<Option<ResponseHead>, HttpError> {
    let Some(end) = find(buf, b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD {
            Err(HttpError::BadHead("head too large"))
        } else {
            Ok(None)
        };
    };
    let head = &buf[..end];
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status_line = lines.next().ok_or(HttpError::BadHead("empty head"))?;
    let mut parts = status_line.splitn(3, |&b| b == b' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with(b"HTTP/1.") {
        return Err(HttpError::BadHead("not an HTTP/1.x status line"));
    }
    let status = parts
        .next()
        .and_then(parse_decimal)
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (100..1000).contains(s))
        .ok_or(HttpError::BadHead("bad status code"))?;
    let mut keep_alive = version != b"HTTP/1.0";
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(HttpError::BadHead("header line without a colon"));
        };
        let name = &line[..colon];
        let value = line[colon + 1..].trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_decimal(value)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or(HttpError::BadHead("bad content-length"))?;
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = value
                .split(|&b| b == b',')
                .any(|v| v.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"connection") {
            if value.eq_ignore_ascii_case(b"close") {
                keep_alive = false;
            } else if value.eq_ignore_ascii_case(b"keep-alive") {
                keep_alive = true;
            }
        }
    }
    let body = if chunked {
        BodyKind::Chunked
    } else if let Some(n) = length {
        BodyKind::Length(n)
    } else if status == 204 || status == 304 || status < 200 {
        BodyKind::Length(0)
    } else {
        BodyKind::UntilClose
    };
    Ok(Some(ResponseHead {
        status,
        body,
        head_len: end + 4,
        keep_alive,
    }))
}

/// Where a [`ChunkedDecoder`] is in the framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading the hex size; `digits` counts the digits seen.
    Size { value: u64, digits: u8 },
    /// Skipping a chunk extension up to the end of the size line.
    SizeExt { value: u64 },
    /// Saw `\r` after the size; expecting `\n`.
    SizeLf { value: u64 },
    /// Inside a chunk's data.
    Data { remaining: u64 },
    /// Expecting the `\r` after a chunk's data.
    DataCr,
    /// Expecting the `\n` after a chunk's data.
    DataLf,
    /// At the start of a trailer line (after the last chunk).
    TrailerStart,
    /// Inside a trailer field line.
    TrailerLine,
    /// Saw `\r` at the start of a trailer line; expecting the final `\n`.
    TrailerEnd,
    /// The body is complete.
    Done,
}

/// A streaming decoder of `Transfer-Encoding: chunked`: feed it raw body bytes as they
/// arrive, in pieces of any size, and it hands back the data bytes as sub-slices of the input
/// (no copying, no allocation).
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: ChunkState,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a chunked body.
    pub fn new() -> Self {
        ChunkedDecoder {
            state: ChunkState::Size {
                value: 0,
                digits: 0,
            },
        }
    }

    /// True once the last (zero-length) chunk and its trailer have been consumed.
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Consumes framing and data from `input`, calling `sink` with each run of data bytes in
    /// order. Stops at the end of the body; returns how many bytes of `input` were consumed
    /// (less than `input.len()` only when the body ended inside it). Errors on malformed
    /// framing; the decoder is then unusable.
    pub fn feed<'a>(
        &mut self,
        input: &'a [u8],
        mut sink: impl FnMut(&'a [u8]),
    ) -> Result<usize, HttpError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            self.state = match self.state {
                ChunkState::Size { value, digits } => {
                    i += 1;
                    match b {
                        b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                            if digits >= 15 {
                                return Err(HttpError::BadChunk("chunk size too large"));
                            }
                            let d = (b as char).to_digit(16).unwrap_or_default();
                            ChunkState::Size {
                                value: value * 16 + u64::from(d),
                                digits: digits + 1,
                            }
                        }
                        _ if digits == 0 => {
                            return Err(HttpError::BadChunk("chunk size missing"));
                        }
                        b'\r' => ChunkState::SizeLf { value },
                        b'\n' => Self::after_size(value),
                        b';' | b' ' | b'\t' => ChunkState::SizeExt { value },
                        _ => return Err(HttpError::BadChunk("bad byte in chunk size")),
                    }
                }
                ChunkState::SizeExt { value } => {
                    i += 1;
                    match b {
                        b'\r' => ChunkState::SizeLf { value },
                        b'\n' => Self::after_size(value),
                        _ => ChunkState::SizeExt { value },
                    }
                }
                ChunkState::SizeLf { value } => {
                    i += 1;
                    if b != b'\n' {
                        return Err(HttpError::BadChunk("expected LF after chunk size"));
                    }
                    Self::after_size(value)
                }
                ChunkState::Data { remaining } => {
                    let avail = input.len() - i;
                    let take = usize::try_from(remaining).map_or(avail, |r| r.min(avail));
                    sink(&input[i..i + take]);
                    i += take;
                    let left = remaining - take as u64;
                    if left == 0 {
                        ChunkState::DataCr
                    } else {
                        ChunkState::Data { remaining: left }
                    }
                }
                ChunkState::DataCr => {
                    i += 1;
                    match b {
                        b'\r' => ChunkState::DataLf,
                        b'\n' => Self::size_start(),
                        _ => return Err(HttpError::BadChunk("expected CRLF after chunk data")),
                    }
                }
                ChunkState::DataLf => {
                    i += 1;
                    if b != b'\n' {
                        return Err(HttpError::BadChunk("expected LF after chunk data"));
                    }
                    Self::size_start()
                }
                ChunkState::TrailerStart => {
                    i += 1;
                    match b {
                        b'\r' => ChunkState::TrailerEnd,
                        b'\n' => ChunkState::Done,
                        _ => ChunkState::TrailerLine,
                    }
                }
                ChunkState::TrailerLine => {
                    i += 1;
                    if b == b'\n' {
                        ChunkState::TrailerStart
                    } else {
                        ChunkState::TrailerLine
                    }
                }
                ChunkState::TrailerEnd => {
                    i += 1;
                    if b != b'\n' {
                        return Err(HttpError::BadChunk("expected LF at end of trailer"));
                    }
                    ChunkState::Done
                }
                ChunkState::Done => return Ok(i),
            };
        }
        Ok(i)
    }

    fn size_start() -> ChunkState {
        ChunkState::Size {
            value: 0,
            digits: 0,
        }
    }

    fn after_size(value: u64) -> ChunkState {
        if value == 0 {
            ChunkState::TrailerStart
        } else {
            ChunkState::Data { remaining: value }
        }
    }
}

/// One keep-alive HTTP/1.1 connection to the server. Requests go out one at a time; the
/// connection is unusable after an error (make a new one).
#[derive(Debug)]
pub struct HttpConn {
    stream: TcpStream,
    /// Bytes read from the socket and not consumed yet.
    pending: Vec<u8>,
    /// The request head is built here, then the body appended, and sent with one write.
    request: Vec<u8>,
    host: String,
    closed: bool,
    /// Header lines sent with every request (each ending in CRLF).
    extra_headers: Vec<u8>,
}

impl HttpConn {
    /// Connects to `addr` (with `TCP_NODELAY`).
    pub async fn connect(addr: SocketAddr) -> Result<HttpConn, HttpError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(HttpConn {
            stream,
            pending: Vec::with_capacity(16 * 1024),
            request: Vec::with_capacity(4 * 1024),
            host: addr.to_string(),
            closed: false,
            extra_headers: Vec::new(),
        })
    }

    /// Sends `name: value` with every request from now on.
    pub fn add_header(&mut self, name: &str, value: &str) {
        self.extra_headers
            .extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }

    /// True after the server announced or performed a close; the next request would fail.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Sends `method path` with an optional JSON `body`, waits for the whole response, and
    /// returns its status with the (de-chunked) body in `out`, which is cleared first.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        out: &mut Vec<u8>,
    ) -> Result<u16, HttpError> {
        self.send(method, path, body.map(|b| (b, "application/json")), out)
            .await
    }

    /// `PATCH path` with a JSON merge patch `body`, as [`HttpConn::request`].
    pub async fn merge_patch(
        &mut self,
        path: &str,
        body: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<u16, HttpError> {
        self.send(
            "PATCH",
            path,
            Some((body, "application/merge-patch+json")),
            out,
        )
        .await
    }

    /// [`HttpConn::request`] with a body of another content type (a merge patch, say).
    pub async fn request_with_type(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
        content_type: &str,
        out: &mut Vec<u8>,
    ) -> Result<u16, HttpError> {
        self.send(method, path, Some((body, content_type)), out)
            .await
    }

    async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: Option<(&[u8], &str)>,
        out: &mut Vec<u8>,
    ) -> Result<u16, HttpError> {
        if self.closed {
            return Err(HttpError::Closed);
        }
        out.clear();
        self.request.clear();
        self.request.extend_from_slice(method.as_bytes());
        self.request.push(b' ');
        self.request.extend_from_slice(path.as_bytes());
        self.request.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        self.request.extend_from_slice(self.host.as_bytes());
        self.request
            .extend_from_slice(b"\r\nAccept: application/json\r\n");
        self.request.extend_from_slice(&self.extra_headers);
        if let Some((b, content_type)) = body {
            self.request.extend_from_slice(b"Content-Type: ");
            self.request.extend_from_slice(content_type.as_bytes());
            self.request.extend_from_slice(b"\r\nContent-Length: ");
            self.request
                .extend_from_slice(b.len().to_string().as_bytes());
            self.request.extend_from_slice(b"\r\n\r\n");
            self.request.extend_from_slice(b);
        } else {
            self.request.extend_from_slice(b"\r\n");
        }
        if let Err(e) = self.stream.write_all(&self.request).await {
            self.closed = true;
            return Err(e.into());
        }
        let result = self.read_response(out).await;
        if result.is_err() {
            self.closed = true;
        }
        result
    }

    async fn read_response(&mut self, out: &mut Vec<u8>) -> Result<u16, HttpError> {
        let head = loop {
            if let Some(h) = parse_head(&self.pending)? {
                break h;
            }
            self.fill().await?;
        };
        self.pending.drain(..head.head_len);
        match head.body {
            BodyKind::Length(n) => {
                let have = self.pending.len().min(n);
                out.extend_from_slice(&self.pending[..have]);
                self.pending.drain(..have);
                out.reserve(n - have);
                while out.len() < n {
                    if self.stream.read_buf(out).await? == 0 {
                        return Err(HttpError::Closed);
                    }
                }
                if out.len() > n {
                    // Bytes past the body: keep them for the next response.
                    self.pending.extend_from_slice(&out[n..]);
                    out.truncate(n);
                }
            }
            BodyKind::Chunked => {
                let mut dec = ChunkedDecoder::new();
                loop {
                    let used = dec.feed(&self.pending, |d| out.extend_from_slice(d))?;
                    self.pending.drain(..used);
                    if dec.is_done() {
                        break;
                    }
                    self.fill().await?;
                }
            }
            BodyKind::UntilClose => {
                out.append(&mut self.pending);
                while self.stream.read_buf(out).await? != 0 {}
                self.closed = true;
            }
        }
        if !head.keep_alive {
            self.closed = true;
        }
        Ok(head.status)
    }

    /// Reads more bytes into `pending`; EOF is an error here.
    async fn fill(&mut self) -> Result<(), HttpError> {
        self.pending.reserve(64 * 1024);
        if self.stream.read_buf(&mut self.pending).await? == 0 {
            return Err(HttpError::Closed);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8], piece: usize) -> (Vec<u8>, bool, usize) {
        let mut dec = ChunkedDecoder::new();
        let mut out = Vec::new();
        let mut consumed = 0;
        for part in input.chunks(piece) {
            consumed += dec.feed(part, |d| out.extend_from_slice(d)).unwrap();
            if dec.is_done() {
                break;
            }
        }
        (out, dec.is_done(), consumed)
    }

    #[test]
    fn chunked_decodes_in_any_split() {
        let body = b"5\r\nhello\r\n1;ext=1\r\n \r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        for piece in 1..body.len() {
            let (out, done, consumed) = decode_all(body, piece);
            assert_eq!(out, b"hello 0123456789", "piece size {piece}");
            assert!(done);
            assert_eq!(consumed, body.len() - 4, "piece size {piece}");
        }
    }

    #[test]
    fn chunked_without_trailer_and_incomplete() {
        let (out, done, consumed) = decode_all(b"3\r\nabc\r\n0\r\n\r\n", 100);
        assert_eq!((out.as_slice(), done, consumed), (&b"abc"[..], true, 13));
        let (out, done, _) = decode_all(b"3\r\nabc\r\n", 100);
        assert_eq!((out.as_slice(), done), (&b"abc"[..], false));
    }

    #[test]
    fn chunked_rejects_garbage() {
        let mut dec = ChunkedDecoder::new();
        assert!(dec.feed(b"zz\r\n", |_| {}).is_err());
        let mut dec = ChunkedDecoder::new();
        assert!(dec.feed(b"2\r\nabX\r\n", |_| {}).is_err());
        let mut dec = ChunkedDecoder::new();
        assert!(dec.feed(b"ffffffffffffffff\r\n", |_| {}).is_err());
    }

    #[test]
    fn head_parsing() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n";
        let h = parse_head(raw).unwrap().unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(h.body, BodyKind::Chunked);
        assert_eq!(h.head_len, raw.len() - 3);
        assert!(h.keep_alive);

        let raw = b"HTTP/1.1 201 Created\r\ncontent-length: 42\r\nconnection: close\r\n\r\n";
        let h = parse_head(raw).unwrap().unwrap();
        assert_eq!(
            (h.status, h.body, h.keep_alive),
            (201, BodyKind::Length(42), false)
        );

        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nA: b\r\n").unwrap(), None);
        assert!(parse_head(b"SSH-2.0\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 abc OK\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
        let h = parse_head(b"HTTP/1.1 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.body, BodyKind::UntilClose);
    }

    #[test]
    fn byte_searches() {
        assert_eq!(find(b"abcabd", b"abd"), Some(3));
        assert_eq!(find(b"ab", b"abc"), None);
        assert_eq!(find(b"abc", b""), None);
        assert_eq!(count(b"xaxaxa", b"xa"), 3);
        assert_eq!(count(b"aaaa", b"aa"), 2);
        assert_eq!(count_newlines(b"a\nb\n\n"), 3);
    }

    #[test]
    fn rv_extraction() {
        let line = br#"{"type":"MODIFIED","object":{"metadata":{"annotations":{"p":"xx"},"name":"a","resourceVersion":"12345","uid":"u"}}}"#;
        assert_eq!(find_rv(line), Some(12345));
        assert_eq!(find_rv(br#"{"resourceVersion":"""#), None);
        assert_eq!(find_rv(br#"{"resourceVersion":"12a"}"#), None);
        assert_eq!(find_rv(br#"{"resourceVersion":"99"#), None);
        assert_eq!(
            find_rv(br#"{"resourceVersion":"99999999999999999999999"}"#),
            None
        );
        assert_eq!(find_rv(b"no marker here"), None);
    }
}
