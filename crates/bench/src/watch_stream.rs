//! Byte-level decoders of watch streams for the transports other than HTTP/1.1 chunked:
//! [`LineScanner`] counts newline-terminated events in a raw body (HTTP/2 DATA frames carry the
//! body without any framing of its own), and [`WsParser`] counts the text messages of a
//! WebSocket stream (one watch event each). Neither parses JSON: a sampled watcher only finds
//! each event's resourceVersion with a byte search, as the HTTP/1.1 path does.

use super::http::{self, HttpError};
use base64::Engine as _;

/// Counts the events (newline-terminated lines) of a watch body fed in pieces of any size.
/// When sampling, it also finds each event's resourceVersion and records
/// `(resourceVersion, arrival ns)`, reusing one line buffer (no allocation per event).
#[derive(Debug, Default)]
pub struct LineScanner {
    sampled: bool,
    line: Vec<u8>,
    /// Samples found by [`LineScanner::feed`] and not yet taken.
    pub samples: Vec<(u64, u64)>,
}

impl LineScanner {
    /// A scanner at the start of a body; `sampled` turns on resourceVersion sampling.
    pub fn new(sampled: bool) -> Self {
        LineScanner {
            sampled,
            ..Self::default()
        }
    }

    /// Consumes body bytes received at `now_ns`; returns the number of events they complete.
    pub fn feed(&mut self, data: &[u8], now_ns: u64) -> u64 {
        if !self.sampled {
            return http::count_newlines(data);
        }
        let mut events = 0;
        let mut rest = data;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            self.line.extend_from_slice(&rest[..nl]);
            if let Some(rv) = http::find_rv(&self.line) {
                self.samples.push((rv, now_ns));
            }
            self.line.clear();
            events += 1;
            rest = &rest[nl + 1..];
        }
        self.line.extend_from_slice(rest);
        events
    }
}

/// The `Sec-WebSocket-Key` every benchmark watcher sends (the base64 of 16 bytes; the server
/// only checks its form, so one fixed key serves all connections).
pub fn ws_key() -> String {
    base64::engine::general_purpose::STANDARD.encode(b"listwatch-bench!")
}

/// The HTTP/1.1 request that opens a WebSocket watch of `path_and_query` on `host`.
pub fn ws_request(host: &str, path_and_query: &str) -> Vec<u8> {
    format!(
        "GET {path_and_query} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {}\r\nSec-WebSocket-Version: 13\r\n\r\n",
        ws_key()
    )
    .into_bytes()
}

/// The value of header `name` (ASCII, any case) in a response head, trimmed; `None` if absent.
pub fn header_value<'a>(head: &'a [u8], name: &str) -> Option<&'a [u8]> {
    head.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(name.as_bytes())
            .then(|| line[colon + 1..].trim_ascii())
    })
}

/// WebSocket opcodes.
mod op {
    pub const CONTINUATION: u8 = 0x0;
    pub const TEXT: u8 = 0x1;
    pub const BINARY: u8 = 0x2;
    pub const CLOSE: u8 = 0x8;
    pub const PING: u8 = 0x9;
    pub const PONG: u8 = 0xA;
}

/// A sampled message longer than this is not kept whole (its resourceVersion is then looked
/// for in its first bytes only).
const MAX_SAMPLED_MESSAGE: usize = 1 << 20;

/// Where a [`WsParser`] is in the frame stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WsState {
    /// Collecting a frame header: `have` bytes of it are in the parser's header buffer.
    Header { have: usize },
    /// Inside a frame's payload.
    Payload { remaining: u64 },
    /// The server sent a close frame; nothing more is read.
    Closed,
}

/// Counts the text messages of the server side of a WebSocket connection (unmasked frames, as
/// RFC 6455 requires of servers), fed in pieces of any size. Each complete text message is one
/// watch event. Ping and pong frames are skipped (not answered); a close frame ends the stream.
#[derive(Debug)]
pub struct WsParser {
    state: WsState,
    header: [u8; 10],
    /// Opcode and FIN bit of the frame whose payload is being read.
    frame_op: u8,
    frame_fin: bool,
    /// The opcode of the data message in progress (`None` between messages).
    message: Option<u8>,
    sampled: bool,
    msg: Vec<u8>,
    /// Samples found by [`WsParser::feed`] and not yet taken.
    pub samples: Vec<(u64, u64)>,
}

impl WsParser {
    /// A parser at the first frame after the handshake; `sampled` turns on resourceVersion
    /// sampling.
    pub fn new(sampled: bool) -> Self {
        WsParser {
            state: WsState::Header { have: 0 },
            header: [0; 10],
            frame_op: 0,
            frame_fin: false,
            message: None,
            sampled,
            msg: Vec::new(),
            samples: Vec::new(),
        }
    }

    /// True once the server's close frame has been read.
    pub fn is_done(&self) -> bool {
        self.state == WsState::Closed
    }

    /// Consumes bytes received at `now_ns`; returns the number of text messages they complete.
    /// Errors on a frame a server must not send (masked, reserved bits, unknown opcode, bad
    /// control frame, broken fragmentation); the parser is then unusable.
    pub fn feed(&mut self, data: &[u8], now_ns: u64) -> Result<u64, HttpError> {
        let mut events = 0;
        let mut i = 0;
        while i < data.len() {
            match self.state {
                WsState::Closed => break,
                WsState::Header { have } => {
                    self.header[have] = data[i];
                    i += 1;
                    let have = have + 1;
                    match self.header_len(have)? {
                        Some(len) => {
                            self.state = WsState::Payload { remaining: len };
                            if len == 0 {
                                events += self.end_frame(now_ns);
                            }
                        }
                        None => self.state = WsState::Header { have },
                    }
                }
                WsState::Payload { remaining } => {
                    let avail = data.len() - i;
                    let take = usize::try_from(remaining).map_or(avail, |r| r.min(avail));
                    if self.sampled
                        && self.message == Some(op::TEXT)
                        && self.frame_op < op::CLOSE
                        && self.msg.len() < MAX_SAMPLED_MESSAGE
                    {
                        self.msg.extend_from_slice(&data[i..i + take]);
                    }
                    i += take;
                    let left = remaining - take as u64;
                    self.state = WsState::Payload { remaining: left };
                    if left == 0 {
                        events += self.end_frame(now_ns);
                    }
                }
            }
        }
        Ok(events)
    }

    /// With `have` header bytes collected: `Some(payload length)` once the header is complete
    /// (and checked), `None` if more bytes are needed.
    fn header_len(&mut self, have: usize) -> Result<Option<u64>, HttpError> {
        if have < 2 {
            return Ok(None);
        }
        let (b0, b1) = (self.header[0], self.header[1]);
        let need = match b1 & 0x7F {
            126 => 4,
            127 => 10,
            _ => 2,
        };
        if have < need {
            return Ok(None);
        }
        if b0 & 0x70 != 0 {
            return Err(HttpError::BadFrame("reserved bits set"));
        }
        if b1 & 0x80 != 0 {
            return Err(HttpError::BadFrame("server frames must not be masked"));
        }
        let len = match need {
            4 => u64::from(u16::from_be_bytes([self.header[2], self.header[3]])),
            10 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.header[2..10]);
                u64::from_be_bytes(b)
            }
            _ => u64::from(b1 & 0x7F),
        };
        let fin = b0 & 0x80 != 0;
        let opcode = b0 & 0x0F;
        match opcode {
            op::CLOSE | op::PING | op::PONG => {
                if len > 125 || !fin {
                    return Err(HttpError::BadFrame("invalid control frame"));
                }
            }
            op::TEXT | op::BINARY => {
                if self.message.is_some() {
                    return Err(HttpError::BadFrame("new message inside a fragmented one"));
                }
                self.message = Some(opcode);
            }
            op::CONTINUATION => {
                if self.message.is_none() {
                    return Err(HttpError::BadFrame("continuation without a message"));
                }
            }
            _ => return Err(HttpError::BadFrame("unknown opcode")),
        }
        self.frame_op = opcode;
        self.frame_fin = fin;
        Ok(Some(len))
    }

    /// The current frame's payload is complete: returns 1 if it completed a text message.
    fn end_frame(&mut self, now_ns: u64) -> u64 {
        let mut events = 0;
        match self.frame_op {
            op::CLOSE => {
                self.state = WsState::Closed;
                return 0;
            }
            op::PING | op::PONG => {}
            _ if self.frame_fin => {
                if self.message == Some(op::TEXT) {
                    events = 1;
                    if self.sampled {
                        if let Some(rv) = http::find_rv(&self.msg) {
                            self.samples.push((rv, now_ns));
                        }
                    }
                }
                self.msg.clear();
                self.message = None;
            }
            _ => {}
        }
        self.state = WsState::Header { have: 0 };
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![first];
        match payload.len() {
            n if n < 126 => out.push(n as u8),
            n if n <= usize::from(u16::MAX) => {
                out.push(126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(payload);
        out
    }

    fn event(rv: u64, pad: usize) -> Vec<u8> {
        format!(
            r#"{{"type":"MODIFIED","object":{{"metadata":{{"annotations":{{"p":"{}"}},"resourceVersion":"{rv}"}}}}}}"#,
            "x".repeat(pad)
        )
        .into_bytes()
    }

    #[test]
    fn line_scanner_counts_and_samples_across_splits() {
        let mut body = Vec::new();
        for rv in [7u64, 8, 9] {
            body.extend_from_slice(&event(rv, 10));
            body.push(b'\n');
        }
        for piece in 1..body.len() {
            let mut plain = LineScanner::new(false);
            let mut sampled = LineScanner::new(true);
            let (mut a, mut b) = (0, 0);
            for (i, part) in body.chunks(piece).enumerate() {
                a += plain.feed(part, i as u64);
                b += sampled.feed(part, i as u64);
            }
            assert_eq!((a, b), (3, 3), "piece {piece}");
            assert!(plain.samples.is_empty());
            let rvs: Vec<u64> = sampled.samples.iter().map(|s| s.0).collect();
            assert_eq!(rvs, vec![7, 8, 9], "piece {piece}");
            assert_eq!(sampled.samples[2].1, ((body.len() - 1) / piece) as u64);
        }
    }

    #[test]
    fn ws_counts_text_messages_in_any_split() {
        let mut stream = Vec::new();
        stream.extend_from_slice(&frame(0x81, &event(10, 5)));
        stream.extend_from_slice(&frame(0x89, b"ping")); // ping: skipped
        stream.extend_from_slice(&frame(0x81, &event(11, 300))); // 16-bit length
        stream.extend_from_slice(&frame(0x82, b"binary")); // not an event
                                                           // A text message in two fragments.
        let e = event(12, 70_000); // 64-bit length on the whole, split in two
        let (p1, p2) = e.split_at(40);
        stream.extend_from_slice(&frame(0x01, p1));
        stream.extend_from_slice(&frame(0x8A, b"")); // pong between fragments
        stream.extend_from_slice(&frame(0x80, p2));
        stream.extend_from_slice(&frame(0x88, &1000u16.to_be_bytes()));
        stream.extend_from_slice(&frame(0x81, &event(13, 1))); // after close: ignored
        for piece in [1usize, 2, 3, 7, 100, 4096, stream.len()] {
            for sampled in [false, true] {
                let mut p = WsParser::new(sampled);
                let mut n = 0;
                for part in stream.chunks(piece) {
                    n += p.feed(part, 5).unwrap();
                }
                assert_eq!(n, 3, "piece {piece} sampled {sampled}");
                assert!(p.is_done());
                let rvs: Vec<u64> = p.samples.iter().map(|s| s.0).collect();
                if sampled {
                    assert_eq!(rvs, vec![10, 11, 12], "piece {piece}");
                } else {
                    assert!(rvs.is_empty());
                }
            }
        }
    }

    #[test]
    fn ws_rejects_what_a_server_must_not_send() {
        let bad: [&[u8]; 6] = [
            &[0x81, 0x81, 1, 2, 3, 4, b'a'], // masked
            &[0xC1, 0x00],                   // RSV1
            &[0x83, 0x00],                   // unknown opcode
            &[0x09, 0x00],                   // fragmented ping
            &[0x80, 0x00],                   // continuation with no message
            &[0x01, 0x01, b'a', 0x81, 0x00], // new message inside a fragmented one
        ];
        for b in bad {
            assert!(WsParser::new(false).feed(b, 0).is_err(), "{b:?}");
        }
    }

    #[test]
    fn ws_handshake_pieces() {
        let key = ws_key();
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(&key)
                .unwrap()
                .len(),
            16
        );
        let req = String::from_utf8(ws_request("127.0.0.1:1", "/api/v1/pods?watch=1")).unwrap();
        assert!(req.starts_with("GET /api/v1/pods?watch=1 HTTP/1.1\r\n"));
        assert!(req.contains("Upgrade: websocket\r\n"));
        assert!(req.contains("Sec-WebSocket-Version: 13\r\n"));
        assert!(req.ends_with("\r\n\r\n"));
        let head = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nSec-WebSocket-Accept:  abc= \r\n\r\n";
        assert_eq!(
            header_value(head, "sec-websocket-accept"),
            Some(&b"abc="[..])
        );
        assert_eq!(header_value(head, "sec-websocket-protocol"), None);
    }
}
