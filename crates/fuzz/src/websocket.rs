//! WebSocket (RFC 6455) frames from the client of a watch.

use apiserver::server::websocket::{
    opcode, parse_client_frame, ClientFrame, ClientFrames, FrameError,
};
use bytes::BytesMut;

/// The largest client payload the server accepts (its `MAX_CLIENT_FRAME`).
const MAX_PAYLOAD: usize = 64 * 1024;

/// Feeds the bytes as what a watch client sends after the handshake to
/// [`parse_client_frame`], checking each frame's place in the sequence with
/// [`ClientFrames::accept`], as the server's watch pump does. Parsing the bytes as they come
/// one at a time must give the frames (and the error) that parsing them all at once gives;
/// control frames must be final and at most 125 bytes, and no payload may pass the server's
/// limit.
pub fn websocket(data: &[u8]) {
    let all = frames(data, data.len().max(1));
    let bytewise = frames(data, 1);
    assert_eq!(all, bytewise, "frames depend on how the bytes arrive");
    let mut seq = ClientFrames::default();
    for f in &all.0 {
        assert!(f.payload.len() <= MAX_PAYLOAD, "a frame past the limit");
        if f.opcode >= opcode::CLOSE {
            assert!(
                f.fin && f.payload.len() <= 125,
                "a bad control frame passed"
            );
        }
        if seq.accept(f).is_err() {
            break;
        }
    }
}

/// The frames parsed from `data` arriving `step` bytes at a time, and the error that stopped
/// parsing, if any.
fn frames(data: &[u8], step: usize) -> (Vec<ClientFrame>, Option<FrameError>) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in data.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            match parse_client_frame(&mut buf) {
                Ok(Some(f)) => out.push(f),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}
