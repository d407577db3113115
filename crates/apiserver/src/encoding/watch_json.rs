//! The JSON encoding of watch events: one `{"type":…,"object":…}` line per frame, the object
//! as its cached JSON or rendered by an [`ObjectEncoder`] (a Table row, a
//! PartialObjectMetadata). Used by every transport's framing; it assumes the cached JSON is
//! the complete object with its resourceVersion stamped.

use crate::cacher::{CachedObject, WatchFrame};
use bytes::{BufMut, BytesMut};

impl WatchFrame {
    /// Appends this frame as one JSON line, the object as plain JSON.
    pub fn encode(&self, api_version: &str, kind: &str, out: &mut BytesMut) {
        self.encode_with(api_version, kind, None, &mut false, out);
    }

    /// Appends this frame as one JSON line, the object rendered by `encoder` if given.
    /// `first` is true until the stream's first object has been written (a Table's column
    /// definitions go only into the first); this clears it.
    pub fn encode_with(
        &self,
        api_version: &str,
        kind: &str,
        encoder: Option<&dyn ObjectEncoder>,
        first: &mut bool,
        out: &mut BytesMut,
    ) {
        match self {
            WatchFrame::Event { event_type, object } => {
                out.reserve(object.json.len() + 32);
                out.put_slice(b"{\"type\":\"");
                out.put_slice(event_type.as_bytes());
                out.put_slice(b"\",\"object\":");
                match encoder {
                    Some(e) => e.object(object, *first, out),
                    None => out.put_slice(&object.json),
                }
                *first = false;
                out.put_slice(b"}\n");
            }
            WatchFrame::Bookmark {
                resource_version,
                initial_events_end,
            } if encoder.is_some() => {
                out.put_slice(b"{\"type\":\"BOOKMARK\",\"object\":");
                if let Some(e) = encoder {
                    e.bookmark(*resource_version, *initial_events_end, out);
                }
                out.put_slice(b"}\n");
            }
            WatchFrame::Bookmark {
                resource_version,
                initial_events_end,
            } => {
                let ann = if *initial_events_end {
                    ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}"
                } else {
                    ""
                };
                let line = format!(
                    "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"{kind}\",\"apiVersion\":\"{api_version}\",\"metadata\":{{\"resourceVersion\":\"{resource_version}\",\"creationTimestamp\":null{ann}}}}}}}\n"
                );
                out.put_slice(line.as_bytes());
            }
            WatchFrame::Error(status) => {
                out.put_slice(b"{\"type\":\"ERROR\",\"object\":");
                out.put_slice(status);
                out.put_slice(b"}\n");
            }
        }
    }
}

/// Renders watch event objects in another form than their JSON (a Table row, a
/// PartialObjectMetadata), for clients that asked for it.
pub trait ObjectEncoder: Send + Sync {
    /// Appends the `object` of an event about `obj`; `first` is true for the stream's first.
    fn object(&self, obj: &CachedObject, first: bool, out: &mut BytesMut);
    /// Appends the `object` of a BOOKMARK at `resource_version`.
    fn bookmark(&self, resource_version: u64, initial_events_end: bool, out: &mut BytesMut);
}
