//! WebSocket watches (RFC 6455): the handshake on a watch URL, then one watch event per text
//! message, a close frame when the watch ends, and answers to the client's pings.
//!
//! Only what a watch needs is implemented: the server sends unmasked, unfragmented text
//! frames; it reads the client's frames only to answer pings and closes (data the client
//! sends is read and discarded, as kube-apiserver does for watches), and to hold the client
//! to the protocol: a data frame while a fragmented message is open, or a continuation
//! while none is, ends the connection with 1002, and so does a flood of pings with 1008.

use crate::cacher::outbox::{ControlRefused, Outbox};
use crate::encoding::body::Body;
use base64::Engine as _;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The GUID RFC 6455 appends to the client's key before hashing.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A write the client does not accept within this time ends the watch (a client that stopped
/// reading must not pin the connection forever).
const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

async fn write_within<W: AsyncWrite + Unpin>(w: &mut W, data: &[u8]) -> bool {
    matches!(
        tokio::time::timeout(WRITE_TIMEOUT, w.write_all(data)).await,
        Ok(Ok(()))
    )
}

/// Largest client frame payload accepted (control frames are at most 125 bytes; a watch client
/// has no reason to send big data frames).
const MAX_CLIENT_FRAME: u64 = 64 * 1024;

/// Why a WebSocket upgrade request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// `Sec-WebSocket-Key` is missing or is not the base64 of 16 bytes.
    #[error("missing or invalid Sec-WebSocket-Key header")]
    BadKey,
    /// `Sec-WebSocket-Version` is missing or not 13.
    #[error("unsupported Sec-WebSocket-Version (only 13 is supported)")]
    BadVersion,
    /// The request is not a GET.
    #[error("a WebSocket upgrade must be a GET request")]
    NotGet,
}

/// A validated upgrade request: what the 101 response must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// The `Sec-WebSocket-Accept` value.
    pub accept: String,
    /// The subprotocol to echo: set when the client offered exactly one.
    pub protocol: Option<String>,
}

/// True if the request asks to switch to WebSocket (`Upgrade: websocket`, any case).
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim().eq_ignore_ascii_case("websocket"))
}

/// The `Sec-WebSocket-Accept` value for a client key: base64(SHA-1(key + GUID)).
pub fn accept_key(key: &str) -> String {
    let mut input = Vec::with_capacity(key.len() + ACCEPT_GUID.len());
    input.extend_from_slice(key.as_bytes());
    input.extend_from_slice(ACCEPT_GUID.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// Validates an upgrade request's headers and computes the handshake answer.
pub fn validate(method: &http::Method, headers: &HeaderMap) -> Result<Handshake, HandshakeError> {
    if method != http::Method::GET {
        return Err(HandshakeError::NotGet);
    }
    let version = headers
        .get("sec-websocket-version")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    if version != Some("13") {
        return Err(HandshakeError::BadVersion);
    }
    let key = headers
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .ok_or(HandshakeError::BadKey)?;
    match base64::engine::general_purpose::STANDARD.decode(key) {
        Ok(raw) if raw.len() == 16 => {}
        _ => return Err(HandshakeError::BadKey),
    }
    let offered: Vec<&str> = headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    let protocol = match offered.as_slice() {
        [one] => Some(one.to_string()),
        _ => None,
    };
    Ok(Handshake {
        accept: accept_key(key),
        protocol,
    })
}

/// The `101 Switching Protocols` response for a validated handshake.
pub fn switching_response(hs: &Handshake) -> Response<Body> {
    let mut resp = Response::new(crate::encoding::body::full(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(
        http::header::CONNECTION,
        HeaderValue::from_static("Upgrade"),
    );
    if let Ok(v) = HeaderValue::from_str(&hs.accept) {
        h.insert("sec-websocket-accept", v);
    }
    if let Some(p) = hs
        .protocol
        .as_deref()
        .and_then(|p| HeaderValue::from_str(p).ok())
    {
        h.insert("sec-websocket-protocol", p);
    }
    resp
}

/// Frame opcodes used here.
pub mod opcode {
    #![allow(missing_docs)]
    pub const CONTINUATION: u8 = 0x0;
    pub const TEXT: u8 = 0x1;
    pub const BINARY: u8 = 0x2;
    pub const CLOSE: u8 = 0x8;
    pub const PING: u8 = 0x9;
    pub const PONG: u8 = 0xA;
}

/// Close codes used here.
mod close_code {
    pub const NORMAL: u16 = 1000;
    pub const PROTOCOL_ERROR: u16 = 1002;
    pub const POLICY_VIOLATION: u16 = 1008;
    pub const TOO_BIG: u16 = 1009;
}

/// Appends one unmasked server frame with FIN set.
pub fn encode_frame(op: u8, payload: &[u8], out: &mut BytesMut) {
    out.reserve(payload.len() + 10);
    out.put_u8(0x80 | (op & 0x0F));
    let len = payload.len();
    if len < 126 {
        out.put_u8(len as u8);
    } else if len <= u16::MAX as usize {
        out.put_u8(126);
        out.put_u16(len as u16);
    } else {
        out.put_u8(127);
        out.put_u64(len as u64);
    }
    out.put_slice(payload);
}

/// A frame received from the client, unmasked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFrame {
    /// FIN bit.
    pub fin: bool,
    /// The opcode (low four bits of the first byte).
    pub opcode: u8,
    /// The unmasked payload.
    pub payload: Bytes,
}

/// Why the client's byte stream is not acceptable WebSocket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Client frames must be masked; RSV bits must be zero; control frames ≤ 125 bytes and
    /// unfragmented; opcodes must be known.
    #[error("WebSocket protocol error: {0}")]
    Protocol(&'static str),
    /// A frame's payload is larger than [`MAX_CLIENT_FRAME`].
    #[error("WebSocket frame too large")]
    TooLarge,
    /// The client sent pings faster than [`ClientFrames`] allows.
    #[error("too many WebSocket pings")]
    TooManyPings,
}

impl FrameError {
    fn close_code(&self) -> u16 {
        match self {
            FrameError::Protocol(_) => close_code::PROTOCOL_ERROR,
            FrameError::TooLarge => close_code::TOO_BIG,
            FrameError::TooManyPings => close_code::POLICY_VIOLATION,
        }
    }
}

/// What the sequence of a client's frames must respect: a fragmented message (a data frame
/// without FIN, then continuations, the last with FIN) admits no other data frame before it
/// ends, and a continuation belongs to one (RFC 6455 §5.4); and pings come at most in a
/// burst of [`ClientFrames::PING_BURST`], refilled at [`ClientFrames::PINGS_PER_SECOND`].
/// Each ping costs a pong written back; a client that sends thousands has no use for them.
#[derive(Debug)]
pub struct ClientFrames {
    in_message: bool,
    ping_tokens: f64,
    refilled: tokio::time::Instant,
}

impl Default for ClientFrames {
    fn default() -> Self {
        ClientFrames {
            in_message: false,
            ping_tokens: Self::PING_BURST,
            refilled: tokio::time::Instant::now(),
        }
    }
}

impl ClientFrames {
    /// Pings a client may send at once.
    pub const PING_BURST: f64 = 100.0;
    /// Pings a client may send per second in the long run.
    pub const PINGS_PER_SECOND: f64 = 10.0;

    /// Checks the next frame against the ones before it.
    ///
    /// # Errors
    /// [`FrameError::Protocol`] for a data frame inside a fragmented message or a
    /// continuation outside one; [`FrameError::TooManyPings`] past the ping budget.
    pub fn accept(&mut self, f: &ClientFrame) -> Result<(), FrameError> {
        match f.opcode {
            opcode::TEXT | opcode::BINARY if self.in_message => Err(FrameError::Protocol(
                "a new message began before the fragmented one ended",
            )),
            opcode::CONTINUATION if !self.in_message => Err(FrameError::Protocol(
                "a continuation frame without a fragmented message",
            )),
            opcode::TEXT | opcode::BINARY | opcode::CONTINUATION => {
                self.in_message = !f.fin;
                Ok(())
            }
            opcode::PING => {
                let now = tokio::time::Instant::now();
                let refill =
                    now.duration_since(self.refilled).as_secs_f64() * Self::PINGS_PER_SECOND;
                self.refilled = now;
                self.ping_tokens = (self.ping_tokens + refill).min(Self::PING_BURST) - 1.0;
                if self.ping_tokens < 0.0 {
                    return Err(FrameError::TooManyPings);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Parses one complete client frame from the front of `buf`, consuming it. `Ok(None)` if
/// more bytes are needed.
pub fn parse_client_frame(buf: &mut BytesMut) -> Result<Option<ClientFrame>, FrameError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let (b0, b1) = (buf[0], buf[1]);
    if b0 & 0x70 != 0 {
        return Err(FrameError::Protocol("reserved bits set"));
    }
    let fin = b0 & 0x80 != 0;
    let op = b0 & 0x0F;
    if !matches!(
        op,
        opcode::CONTINUATION
            | opcode::TEXT
            | opcode::BINARY
            | opcode::CLOSE
            | opcode::PING
            | opcode::PONG
    ) {
        return Err(FrameError::Protocol("unknown opcode"));
    }
    if b1 & 0x80 == 0 {
        return Err(FrameError::Protocol("client frames must be masked"));
    }
    let (len, header) = match b1 & 0x7F {
        126 => {
            if buf.len() < 4 {
                return Ok(None);
            }
            (u64::from(u16::from_be_bytes([buf[2], buf[3]])), 4)
        }
        127 => {
            if buf.len() < 10 {
                return Ok(None);
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[2..10]);
            (u64::from_be_bytes(b), 10)
        }
        n => (u64::from(n), 2),
    };
    if op >= opcode::CLOSE && (len > 125 || !fin) {
        return Err(FrameError::Protocol("invalid control frame"));
    }
    if len > MAX_CLIENT_FRAME {
        return Err(FrameError::TooLarge);
    }
    // Bounded by MAX_CLIENT_FRAME above, so this fits in usize.
    let len = len as usize;
    if buf.len() < header + 4 + len {
        return Ok(None);
    }
    let mut mask = [0u8; 4];
    mask.copy_from_slice(&buf[header..header + 4]);
    buf.advance(header + 4);
    let mut payload = buf.split_to(len);
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
    Ok(Some(ClientFrame {
        fin,
        opcode: op,
        payload: payload.freeze(),
    }))
}

fn close_payload(code: u16) -> [u8; 2] {
    code.to_be_bytes()
}

/// Runs a watch over an upgraded connection: every event line of `watch` (a newline-delimited
/// watch body) becomes one text message; when the watch ends a close frame (1000) is sent.
/// Pings are answered with pongs; a close from the client is answered and ends the watch;
/// a protocol violation ends it with close code 1002 (or 1009 for an oversized frame).
pub async fn pump_watch<IO>(io: IO, mut watch: Body, control: Option<Arc<Outbox>>)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let (mut rd, mut wr) = tokio::io::split(io);
    let mut inbuf = BytesMut::with_capacity(256);
    let mut frames = ClientFrames::default();
    let mut out = BytesMut::new();
    let mut line = BytesMut::new();
    let mut client_closed = false;
    let close_code = loop {
        tokio::select! {
            frame = watch.frame() => {
                let data = match frame {
                    Some(Ok(f)) => match f.into_data() {
                        Ok(d) => d,
                        Err(_) => continue,
                    },
                    Some(Err(e)) => match e {},
                    None => break close_code::NORMAL,
                };
                line.extend_from_slice(&data);
                while let Some(pos) = line.iter().position(|&b| b == b'\n') {
                    let ev = line.split_to(pos + 1);
                    let ev = &ev[..pos];
                    if !ev.is_empty() {
                        encode_frame(opcode::TEXT, ev, &mut out);
                    }
                }
                if !out.is_empty() {
                    if !write_within(&mut wr, &out).await {
                        return;
                    }
                    out.clear();
                }
            }
            n = rd.read_buf(&mut inbuf) => {
                match n {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let mut reply = BytesMut::new();
                let mut end = None;
                loop {
                    let parsed = parse_client_frame(&mut inbuf)
                        .and_then(|f| match f {
                            Some(f) => frames.accept(&f).map(|()| Some(f)),
                            None => Ok(None),
                        });
                    match parsed {
                        Ok(None) => break,
                        Ok(Some(f)) => match f.opcode {
                            opcode::PING => encode_frame(opcode::PONG, &f.payload, &mut reply),
                            opcode::CLOSE => {
                                client_closed = true;
                                let code = if f.payload.len() >= 2 {
                                    u16::from_be_bytes([f.payload[0], f.payload[1]])
                                } else {
                                    close_code::NORMAL
                                };
                                end = Some(code);
                                break;
                            }
                            _ => {}
                        },
                        Err(e) => {
                            tracing::debug!("websocket watch: {e}");
                            end = Some(e.close_code());
                            break;
                        }
                    }
                }
                if !reply.is_empty() {
                    // While the watch cache writes events to the socket itself, replies go
                    // through its queue so frames never interleave.
                    let direct = control
                        .as_ref()
                        .map(|c| c.push_control(reply.split().freeze()));
                    let leftover = match direct {
                        Some(Ok(())) => None,
                        Some(Err(ControlRefused::NotDirect(b))) => Some(b),
                        Some(Err(ControlRefused::Backlogged)) => {
                            tracing::debug!("websocket watch: the client does not read its replies");
                            break close_code::POLICY_VIOLATION;
                        }
                        None => Some(reply.split().freeze()),
                    };
                    if let Some(b) = leftover {
                        if !write_within(&mut wr, &b).await {
                            return;
                        }
                    }
                }
                if let Some(code) = end {
                    break code;
                }
            }
        }
    };
    // End the watch first, so the watch cache stops writing to the socket; then echo the
    // client's close code, or send ours.
    drop(watch);
    encode_frame(opcode::CLOSE, &close_payload(close_code), &mut out);
    if !write_within(&mut wr, &out).await {
        return;
    }
    let _ = wr.flush().await;
    if !client_closed {
        // Give the client a moment to answer our close before the socket goes away.
        let mut sink = [0u8; 256];
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
            loop {
                match rd.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
    }
    let _ = wr.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_matches_rfc_example() {
        // The example handshake of RFC 6455 section 1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn validate_checks_key_version_and_protocols() {
        let good = [
            ("upgrade", "websocket"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        let hs = validate(&http::Method::GET, &headers(&good)).unwrap();
        assert_eq!(hs.protocol, None);
        let mut with_one = good.to_vec();
        with_one.push(("sec-websocket-protocol", "v4.channel.k8s.io"));
        let hs = validate(&http::Method::GET, &headers(&with_one)).unwrap();
        assert_eq!(hs.protocol.as_deref(), Some("v4.channel.k8s.io"));
        let mut with_two = good.to_vec();
        with_two.push(("sec-websocket-protocol", "a, b"));
        assert_eq!(
            validate(&http::Method::GET, &headers(&with_two))
                .unwrap()
                .protocol,
            None
        );
        assert_eq!(
            validate(&http::Method::GET, &headers(&good[..2])),
            Err(HandshakeError::BadKey)
        );
        assert_eq!(
            validate(
                &http::Method::GET,
                &headers(&[good[0], good[1], ("sec-websocket-key", "c2hvcnQ=")])
            ),
            Err(HandshakeError::BadKey)
        );
        assert_eq!(
            validate(
                &http::Method::GET,
                &headers(&[good[0], ("sec-websocket-version", "8"), good[2]])
            ),
            Err(HandshakeError::BadVersion)
        );
        assert_eq!(
            validate(&http::Method::POST, &headers(&good)),
            Err(HandshakeError::NotGet)
        );
        assert!(is_upgrade_request(&headers(&[("upgrade", "WebSocket")])));
        assert!(!is_upgrade_request(&headers(&[("upgrade", "h2c")])));
    }

    fn masked(op: u8, fin: bool, payload: &[u8]) -> BytesMut {
        let mask = [1u8, 2, 3, 4];
        let mut out = BytesMut::new();
        out.put_u8(if fin { 0x80 } else { 0 } | op);
        if payload.len() < 126 {
            out.put_u8(0x80 | payload.len() as u8);
        } else {
            out.put_u8(0x80 | 126);
            out.put_u16(payload.len() as u16);
        }
        out.put_slice(&mask);
        for (i, b) in payload.iter().enumerate() {
            out.put_u8(b ^ mask[i % 4]);
        }
        out
    }

    #[test]
    fn parses_masked_frames_incrementally() {
        let mut all = masked(opcode::PING, true, b"hi");
        all.extend_from_slice(&masked(opcode::TEXT, true, &[b'x'; 300]));
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in all.iter() {
            buf.put_u8(*b);
            while let Some(f) = parse_client_frame(&mut buf).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].opcode, opcode::PING);
        assert_eq!(&got[0].payload[..], b"hi");
        assert_eq!(got[1].payload.len(), 300);
        assert!(got[1].payload.iter().all(|&b| b == b'x'));
        assert!(buf.is_empty());
    }

    #[test]
    fn rejects_bad_frames() {
        let mut unmasked = BytesMut::from(&[0x81u8, 0x01, b'a'][..]);
        assert!(parse_client_frame(&mut unmasked).is_err());
        let mut big_ping = masked(opcode::PING, true, &[0u8; 126]);
        assert!(parse_client_frame(&mut big_ping).is_err());
        let mut fragmented_close = masked(opcode::CLOSE, false, &[3, 232]);
        assert!(parse_client_frame(&mut fragmented_close).is_err());
        let mut bad_op = masked(0x3, true, b"");
        assert!(parse_client_frame(&mut bad_op).is_err());
        let mut huge = BytesMut::from(&[0x82u8, 0xFF, 0, 0, 0, 1, 0, 0, 0, 0][..]);
        assert_eq!(parse_client_frame(&mut huge), Err(FrameError::TooLarge));
    }

    fn frame(opcode: u8, fin: bool) -> ClientFrame {
        ClientFrame {
            fin,
            opcode,
            payload: Bytes::new(),
        }
    }

    #[test]
    fn fragmented_messages_admit_no_other_data_frame() {
        let mut c = ClientFrames::default();
        assert!(c.accept(&frame(opcode::TEXT, true)).is_ok());
        assert!(c.accept(&frame(opcode::BINARY, false)).is_ok());
        // Control frames may come between fragments.
        assert!(c.accept(&frame(opcode::PING, true)).is_ok());
        assert!(c.accept(&frame(opcode::CONTINUATION, false)).is_ok());
        assert!(c.accept(&frame(opcode::CONTINUATION, true)).is_ok());
        assert!(matches!(
            ClientFrames::default().accept(&frame(opcode::CONTINUATION, true)),
            Err(FrameError::Protocol(_))
        ));
        let mut c = ClientFrames::default();
        assert!(c.accept(&frame(opcode::TEXT, false)).is_ok());
        let e = c.accept(&frame(opcode::TEXT, false)).unwrap_err();
        assert!(matches!(e, FrameError::Protocol(_)));
        assert_eq!(e.close_code(), 1002);
    }

    #[tokio::test(start_paused = true)]
    async fn pings_are_bounded_by_a_refilling_budget() {
        let mut c = ClientFrames::default();
        for _ in 0..100 {
            assert!(c.accept(&frame(opcode::PING, true)).is_ok());
        }
        let e = c.accept(&frame(opcode::PING, true)).unwrap_err();
        assert_eq!(
            (e.clone(), e.close_code()),
            (FrameError::TooManyPings, 1008)
        );
        let mut c = ClientFrames::default();
        for _ in 0..100 {
            c.accept(&frame(opcode::PING, true)).unwrap();
        }
        // Ten a second go on for ever.
        for _ in 0..1000 {
            tokio::time::advance(std::time::Duration::from_millis(100)).await;
            assert!(c.accept(&frame(opcode::PING, true)).is_ok());
        }
    }

    #[test]
    fn encodes_lengths() {
        for n in [0usize, 125, 126, 65_535, 65_536] {
            let mut out = BytesMut::new();
            encode_frame(opcode::TEXT, &vec![b'a'; n], &mut out);
            assert_eq!(out[0], 0x81);
            let header = match n {
                0..=125 => 2,
                126..=65_535 => 4,
                _ => 10,
            };
            assert_eq!(out.len(), header + n, "{n}");
        }
    }
}
