//! One unit of a watch stream as the cacher hands it out: an event (its type and the shared
//! cached object), a bookmark, or an ERROR. It assumes nothing about how a transport encodes
//! it (see `encoding::watch_json` and the server's wire framing).

use super::cached_object::CachedObject;
use super::watch_cache::EventType;
use bytes::Bytes;
use std::sync::Arc;

/// One unit of a watch stream. Event payloads are shared: the JSON of the object was
/// produced once when the change entered the cache, and other encodings are cached on the
/// object the first time a watcher needs them.
#[derive(Debug, Clone)]
pub enum WatchFrame {
    /// `{"type":T,"object":<object>}`.
    Event {
        /// `ADDED`, `MODIFIED` or `DELETED`.
        event_type: &'static str,
        /// The object.
        object: Arc<CachedObject>,
    },
    /// A BOOKMARK at this resourceVersion; `initial_events_end` adds the
    /// `k8s.io/initial-events-end` annotation.
    Bookmark {
        /// The version the client has now seen everything up to.
        resource_version: u64,
        /// True for the bookmark that ends a streaming list's initial events.
        initial_events_end: bool,
    },
    /// A `{"type":"ERROR","object":<Status>}` frame; the stream ends after it.
    Error(Bytes),
}

impl WatchFrame {
    /// About how many bytes the frame takes in JSON (exact for events without an encoder);
    /// for sizing buffers only.
    pub fn encoded_len_hint(&self) -> usize {
        match self {
            WatchFrame::Event { object, .. } => object.json.len() + 32,
            WatchFrame::Bookmark { .. } => 256,
            WatchFrame::Error(status) => status.len() + 32,
        }
    }

    /// Prefetches the line of an event's object that says where its body is (the JSON, or
    /// the protobuf body when `protobuf`), and the object's first line, which its reference
    /// count is next to (a hint, see [`super::prefetch`]).
    #[inline]
    pub fn prefetch_object(&self, protobuf: bool) {
        if let WatchFrame::Event { object, .. } = self {
            super::prefetch::prefetch(Arc::as_ptr(object));
            if protobuf {
                super::prefetch::prefetch(&object.derived.protobuf);
            } else {
                super::prefetch::prefetch(&object.json);
            }
        }
    }

    /// Prefetches the first lines of an event's body (a hint). Reads the object, so prefetch
    /// it first ([`WatchFrame::prefetch_object`]).
    #[inline]
    pub fn prefetch_body(&self, protobuf: bool) {
        let WatchFrame::Event { object, .. } = self else {
            return;
        };
        let body = if protobuf {
            object.derived.protobuf.get().and_then(Option::as_ref)
        } else {
            Some(&object.json)
        };
        if let Some(body) = body {
            super::prefetch::prefetch_bytes(body, BODY_PREFETCH_LINES);
        }
    }

    /// The wire name of a cache event type.
    pub fn type_name(t: EventType) -> &'static str {
        match t {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// The most cache lines of a body [`WatchFrame::prefetch_body`] prefetches (a typical body
/// is 25–40).
const BODY_PREFETCH_LINES: usize = 64;
