//! The client's JSON watch decoder: a chunked response body cut into event lines, each line
//! parsed into a watch event.

use crate::input::chunks;
use bytes::Bytes;
use client::object::DynamicObject;
use client::rest::watch_decoder::{
    cache_object, parse_event, raw_object, typed_object, LineDecoder, WatchEvent,
};
use k8s_openapi::api::core::v1::Pod;

/// The longest line the target's decoders accept: small, so that the "line too long" path is
/// reached by inputs of fuzzer size.
const MAX_LINE: usize = 4096;

/// Input: `chunking body`. The first byte sets the chunk sizes the body (a watch response:
/// newline-delimited JSON events) is delivered in. The lines [`LineDecoder`] cuts must be the
/// same as when the body comes in one chunk; every line goes through [`parse_event`] with the
/// three object decoders the client uses (raw text, cache object, typed `Pod`). The raw
/// object of an object event must be JSON that `serde_json` accepts (but for numbers beyond
/// `f64`, which the validator accepts on purpose, and `serde_json`'s own raw-value key).
pub fn watch_decoder(data: &[u8]) {
    let Some((&sizes, body)) = data.split_first() else {
        return;
    };
    let whole = lines(&[body]);
    let cut = lines(&chunks(body, &[sizes, sizes.rotate_left(3), 0]));
    assert_eq!(whole, cut, "lines depend on chunk boundaries");
    for line in &whole.0 {
        if let Ok(ev) = parse_event(line, raw_object) {
            if let Some(raw) = ev.object() {
                if let Err(e) = serde_json::from_slice::<serde_json::Value>(raw) {
                    assert!(
                        crate::json_yaml::serde_json_quirk(&e, raw),
                        "an event's object is not JSON ({e}): {}",
                        String::from_utf8_lossy(raw)
                    );
                }
            }
            if let WatchEvent::Bookmark {
                resource_version, ..
            } = &ev
            {
                let _ = resource_version.len();
            }
        }
        let _ = parse_event(line, cache_object::<DynamicObject>);
        let _ = parse_event(line, typed_object::<Pod>);
    }
}

/// The lines a [`LineDecoder`] cuts from `parts` pushed one after another, and how the
/// stream ended (its last unterminated line, or the error).
fn lines(parts: &[&[u8]]) -> (Vec<Bytes>, Result<Option<Bytes>, String>) {
    let mut d = LineDecoder::new(MAX_LINE);
    let mut out = Vec::new();
    for p in parts {
        d.push(Bytes::copy_from_slice(p));
        loop {
            match d.next_line() {
                Ok(Some(l)) => out.push(l),
                Ok(None) => break,
                Err(e) => return (out, Err(e.to_string())),
            }
        }
    }
    let end = d.finish().map_err(|e| e.to_string());
    (out, end)
}
