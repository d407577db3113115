//! HTTP/2 frames (RFC 9113 §4 and §6): the 9-byte frame header, the frame types and flags the
//! server handles, error codes, and encoders for the frames the server sends.
//!
//! Parsing is split in two: [`FrameHead::parse`] reads the fixed header (the caller then waits
//! for the whole payload), and the per-type helpers check a payload's length and strip its
//! padding. Nothing here panics on any input.

use bytes::{BufMut, Bytes, BytesMut};

/// Size of every frame header.
pub const HEAD_LEN: usize = 9;

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The largest frame payload anyone may send before SETTINGS_MAX_FRAME_SIZE says otherwise.
pub const DEFAULT_MAX_FRAME: usize = 16_384;

/// The largest legal flow-control window (2^31 - 1).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

/// The window of every stream and of the connection before SETTINGS or WINDOW_UPDATE.
pub const DEFAULT_WINDOW: i64 = 65_535;

/// Frame types (RFC 9113 §6).
pub mod kind {
    /// DATA.
    pub const DATA: u8 = 0x0;
    /// HEADERS.
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY (deprecated; parsed and ignored).
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE (never valid from a client).
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING.
    pub const PING: u8 = 0x6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION.
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags (their meaning depends on the frame type).
pub mod flag {
    /// DATA, HEADERS: the sender's last frame on the stream.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING: an acknowledgement.
    pub const ACK: u8 = 0x1;
    /// HEADERS, CONTINUATION: the header block is complete.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA, HEADERS: the payload is padded.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: a priority block precedes the header block fragment.
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers (RFC 9113 §6.5.2).
pub mod setting {
    /// SETTINGS_HEADER_TABLE_SIZE.
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    /// SETTINGS_ENABLE_PUSH.
    pub const ENABLE_PUSH: u16 = 0x2;
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    /// SETTINGS_INITIAL_WINDOW_SIZE.
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    /// SETTINGS_MAX_FRAME_SIZE.
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    /// SETTINGS_MAX_HEADER_LIST_SIZE.
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// Error codes (RFC 9113 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ErrorCode {
    /// Graceful shutdown.
    NoError = 0x0,
    /// A protocol rule was broken.
    ProtocolError = 0x1,
    /// Something went wrong inside the server.
    InternalError = 0x2,
    /// The peer broke flow control.
    FlowControlError = 0x3,
    /// A frame arrived for a stream that was already closed.
    StreamClosed = 0x5,
    /// A frame had the wrong size.
    FrameSizeError = 0x6,
    /// The stream was refused before any processing (safe to retry).
    RefusedStream = 0x7,
    /// The stream is no longer needed.
    Cancel = 0x8,
    /// The header compression state broke.
    CompressionError = 0x9,
    /// The peer is generating excessive load.
    EnhanceYourCalm = 0xb,
}

/// A connection error: the connection ends with a GOAWAY carrying this code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("HTTP/2 connection error {code:?}: {reason}")]
pub struct ConnError {
    /// The GOAWAY error code.
    pub code: ErrorCode,
    /// Why (for the GOAWAY debug data and the log).
    pub reason: &'static str,
}

impl ConnError {
    /// A PROTOCOL_ERROR.
    pub fn protocol(reason: &'static str) -> ConnError {
        ConnError {
            code: ErrorCode::ProtocolError,
            reason,
        }
    }

    /// A FRAME_SIZE_ERROR.
    pub fn frame_size(reason: &'static str) -> ConnError {
        ConnError {
            code: ErrorCode::FrameSizeError,
            reason,
        }
    }
}

/// The fixed header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    /// Payload length.
    pub len: usize,
    /// Frame type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream identifier (the reserved bit cleared).
    pub stream: u32,
}

impl FrameHead {
    /// Reads a header from the first [`HEAD_LEN`] bytes of `b`; `None` if `b` is shorter.
    pub fn parse(b: &[u8]) -> Option<FrameHead> {
        let h: &[u8; HEAD_LEN] = b.get(..HEAD_LEN)?.try_into().ok()?;
        Some(FrameHead {
            len: (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]),
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    /// True if `f` is set.
    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    /// The 9 header bytes.
    pub fn encode(&self) -> [u8; HEAD_LEN] {
        let l = self.len as u32;
        let s = self.stream.to_be_bytes();
        [
            (l >> 16) as u8,
            (l >> 8) as u8,
            l as u8,
            self.kind,
            self.flags,
            s[0] & 0x7f,
            s[1],
            s[2],
            s[3],
        ]
    }
}

/// The payload of a DATA or HEADERS frame without its padding (when `PADDED` is set).
pub fn unpad(head: &FrameHead, payload: Bytes) -> Result<Bytes, ConnError> {
    if !head.has(flag::PADDED) {
        return Ok(payload);
    }
    let Some(&pad) = payload.first() else {
        return Err(ConnError::frame_size("padded frame without a pad length"));
    };
    let pad = usize::from(pad);
    if pad + 1 > payload.len() {
        return Err(ConnError::protocol("padding longer than the frame"));
    }
    Ok(payload.slice(1..payload.len() - pad))
}

/// One SETTINGS entry.
pub type Setting = (u16, u32);

/// The entries of a (non-ACK) SETTINGS payload.
pub fn parse_settings(payload: &[u8]) -> Result<Vec<Setting>, ConnError> {
    if !payload.len().is_multiple_of(6) {
        return Err(ConnError::frame_size("SETTINGS length not a multiple of 6"));
    }
    Ok(payload
        .chunks_exact(6)
        .map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            )
        })
        .collect())
}

/// A 4-byte big-endian value (the payload of RST_STREAM and WINDOW_UPDATE) with the reserved
/// bit cleared; `None` unless `payload` is exactly 4 bytes.
pub fn parse_u31(payload: &[u8]) -> Option<u32> {
    let b: [u8; 4] = payload.try_into().ok()?;
    Some(u32::from_be_bytes(b) & 0x7fff_ffff)
}

/// Appends a frame with `payload`.
pub fn put_frame(kind: u8, flags: u8, stream: u32, payload: &[u8], out: &mut BytesMut) {
    let head = FrameHead {
        len: payload.len(),
        kind,
        flags,
        stream,
    };
    out.reserve(HEAD_LEN + payload.len());
    out.put_slice(&head.encode());
    out.put_slice(payload);
}

/// Appends a SETTINGS frame with `settings`.
pub fn put_settings(settings: &[Setting], out: &mut BytesMut) {
    let mut p = Vec::with_capacity(settings.len() * 6);
    for (id, v) in settings {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    put_frame(kind::SETTINGS, 0, 0, &p, out);
}

/// Appends a WINDOW_UPDATE of `increment` (1..=2^31-1) for `stream` (0: the connection).
pub fn put_window_update(stream: u32, increment: u32, out: &mut BytesMut) {
    put_frame(
        kind::WINDOW_UPDATE,
        0,
        stream,
        &(increment & 0x7fff_ffff).to_be_bytes(),
        out,
    );
}

/// Appends an RST_STREAM.
pub fn put_rst_stream(stream: u32, code: ErrorCode, out: &mut BytesMut) {
    put_frame(
        kind::RST_STREAM,
        0,
        stream,
        &(code as u32).to_be_bytes(),
        out,
    );
}

/// Appends a GOAWAY naming `last_stream` as the last stream processed.
pub fn put_goaway(last_stream: u32, code: ErrorCode, debug: &[u8], out: &mut BytesMut) {
    let mut p = Vec::with_capacity(8 + debug.len());
    p.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    p.extend_from_slice(&(code as u32).to_be_bytes());
    p.extend_from_slice(debug);
    put_frame(kind::GOAWAY, 0, 0, &p, out);
}

/// Appends a header block as one HEADERS frame and as many CONTINUATION frames as
/// `max_frame` requires.
pub fn put_header_block(
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
    out: &mut BytesMut,
) {
    let max_frame = max_frame.max(1);
    let mut chunks = block.chunks(max_frame).peekable();
    let mut first = true;
    loop {
        let chunk = chunks.next().unwrap_or(&[]);
        let last = chunks.peek().is_none();
        let mut flags = if last { flag::END_HEADERS } else { 0 };
        let kind = if first {
            if end_stream {
                flags |= flag::END_STREAM;
            }
            kind::HEADERS
        } else {
            kind::CONTINUATION
        };
        put_frame(kind, flags, stream, chunk, out);
        first = false;
        if last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn head_round_trip_clears_reserved_bit() {
        let h = FrameHead {
            len: 0x01_02_03,
            kind: kind::HEADERS,
            flags: flag::END_HEADERS | flag::END_STREAM,
            stream: 0x7fff_fff1,
        };
        assert_eq!(FrameHead::parse(&h.encode()), Some(h));
        let mut raw = h.encode();
        raw[5] |= 0x80;
        assert_eq!(FrameHead::parse(&raw).map(|h| h.stream), Some(0x7fff_fff1));
        assert_eq!(FrameHead::parse(&raw[..8]), None);
    }

    #[test]
    fn padding_is_checked_and_stripped() {
        let head = FrameHead {
            len: 6,
            kind: kind::DATA,
            flags: flag::PADDED,
            stream: 1,
        };
        let p = unpad(&head, Bytes::from_static(b"\x02abc\0\0")).unwrap();
        assert_eq!(&p[..], b"abc");
        assert!(unpad(&head, Bytes::from_static(b"\x09abc")).is_err());
        assert!(unpad(&head, Bytes::new()).is_err());
        let plain = FrameHead { flags: 0, ..head };
        assert_eq!(
            &unpad(&plain, Bytes::from_static(b"\x02ab")).unwrap()[..],
            b"\x02ab"
        );
    }

    #[test]
    fn settings_and_u31() {
        let mut out = BytesMut::new();
        put_settings(
            &[(setting::INITIAL_WINDOW_SIZE, 1 << 20), (0x99, 7)],
            &mut out,
        );
        let head = FrameHead::parse(&out).unwrap();
        assert_eq!((head.kind, head.len, head.stream), (kind::SETTINGS, 12, 0));
        assert_eq!(
            parse_settings(&out[HEAD_LEN..]).unwrap(),
            vec![(setting::INITIAL_WINDOW_SIZE, 1 << 20), (0x99, 7)]
        );
        assert!(parse_settings(&[0; 5]).is_err());
        assert_eq!(parse_u31(&[0x80, 0, 1, 0]), Some(256));
        assert_eq!(parse_u31(&[0, 1, 0]), None);
    }

    #[test]
    fn header_blocks_split_into_continuations() {
        let mut out = BytesMut::new();
        put_header_block(3, &[7u8; 10], true, 4, &mut out);
        let mut frames = Vec::new();
        let mut rest = &out[..];
        while let Some(h) = FrameHead::parse(rest) {
            frames.push((h.kind, h.flags, h.len));
            rest = &rest[HEAD_LEN + h.len..];
        }
        assert_eq!(
            frames,
            vec![
                (kind::HEADERS, flag::END_STREAM, 4),
                (kind::CONTINUATION, 0, 4),
                (kind::CONTINUATION, flag::END_HEADERS, 2),
            ]
        );
        let mut one = BytesMut::new();
        put_header_block(5, b"", false, 16_384, &mut one);
        assert_eq!(
            FrameHead::parse(&one).map(|h| (h.kind, h.flags, h.len)),
            Some((kind::HEADERS, flag::END_HEADERS, 0))
        );
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64), flags in any::<u8>()) {
            let _ = FrameHead::parse(&bytes);
            let _ = parse_settings(&bytes);
            let _ = parse_u31(&bytes);
            let head = FrameHead { len: bytes.len(), kind: kind::DATA, flags, stream: 1 };
            let _ = unpad(&head, Bytes::from(bytes));
        }
    }
}
