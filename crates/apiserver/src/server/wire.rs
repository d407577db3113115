//! The wire framing of watch events on each transport the dispatcher writes to directly: one
//! HTTP/1.1 chunk, one WebSocket text message, or the payload of HTTP/2 DATA frames (whose
//! headers the connection's writer adds), each around the event's JSON line
//! ([`crate::encoding::watch_json`]). The cacher shares one event's bytes among the watchers
//! of the same [`Framing`]; it assumes nothing about them.

use super::websocket;
use crate::cacher::sink::{Framing, WireFormat};
use crate::cacher::WatchFrame;
use bytes::{BufMut, Bytes, BytesMut};

/// Appends `line` as one HTTP/1.1 chunk (`{len:x}\r\n{line}\r\n`).
pub fn put_chunk(line: &[u8], out: &mut BytesMut) {
    out.reserve(line.len() + 12);
    out.put_slice(format!("{:x}\r\n", line.len()).as_bytes());
    out.put_slice(line);
    out.put_slice(b"\r\n");
}

// The formats are told apart by address (see [`Framing`]), so none is zero-sized: distinct
// statics of a zero-sized type may share one.

/// Each frame is one HTTP/1.1 chunk holding its JSON line.
#[derive(Debug)]
#[allow(dead_code)] // only shown by Debug
struct Chunked(&'static str);

/// Each frame is one WebSocket text message holding its JSON (no newline).
#[derive(Debug)]
#[allow(dead_code)] // only shown by Debug
struct WebSocketText(&'static str);

/// Each frame is its JSON line; the HTTP/2 writer adds the DATA frame headers.
#[derive(Debug)]
#[allow(dead_code)] // only shown by Debug
struct Http2Data(&'static str);

fn json_line(frame: &WatchFrame, api_version: &str, kind: &str) -> BytesMut {
    let mut line = BytesMut::new();
    frame.encode(api_version, kind, &mut line);
    line
}

impl WireFormat for Chunked {
    fn wire(&self, frame: &WatchFrame, api_version: &str, kind: &str) -> Bytes {
        let line = json_line(frame, api_version, kind);
        let mut out = BytesMut::new();
        put_chunk(&line, &mut out);
        out.freeze()
    }
}

impl WireFormat for WebSocketText {
    fn wire(&self, frame: &WatchFrame, api_version: &str, kind: &str) -> Bytes {
        let line = json_line(frame, api_version, kind);
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let mut out = BytesMut::new();
        websocket::encode_frame(websocket::opcode::TEXT, text, &mut out);
        out.freeze()
    }
}

impl WireFormat for Http2Data {
    fn wire(&self, frame: &WatchFrame, api_version: &str, kind: &str) -> Bytes {
        json_line(frame, api_version, kind).freeze()
    }
}

static CHUNKED_FORMAT: Chunked = Chunked("HTTP/1.1 chunks");
static WEBSOCKET_FORMAT: WebSocketText = WebSocketText("WebSocket text messages");
static HTTP2_FORMAT: Http2Data = Http2Data("HTTP/2 DATA payloads");

/// HTTP/1.1 chunks.
pub static CHUNKED: Framing = Framing(&CHUNKED_FORMAT);
/// WebSocket text messages.
pub static WEBSOCKET: Framing = Framing(&WEBSOCKET_FORMAT);
/// HTTP/2 DATA payloads.
pub static HTTP2: Framing = Framing(&HTTP2_FORMAT);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_framing_wraps_the_same_json_line() {
        let frame = WatchFrame::Error(Bytes::from_static(b"{\"kind\":\"Status\"}"));
        let line = b"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\"}}\n";
        assert_eq!(&HTTP2.wire(&frame, "v1", "Pod")[..], &line[..]);
        let mut chunk = format!("{:x}\r\n", line.len()).into_bytes();
        chunk.extend_from_slice(line);
        chunk.extend_from_slice(b"\r\n");
        assert_eq!(&CHUNKED.wire(&frame, "v1", "Pod")[..], &chunk[..]);
        let ws = WEBSOCKET.wire(&frame, "v1", "Pod");
        assert_eq!(ws[0], 0x81, "a final text frame");
        assert_eq!(&ws[2..], &line[..line.len() - 1]);
        assert_ne!(CHUNKED, WEBSOCKET);
        assert_eq!(CHUNKED, CHUNKED);
    }
}
