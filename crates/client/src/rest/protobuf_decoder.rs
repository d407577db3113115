//! Decoding protobuf responses (`application/vnd.kubernetes.protobuf`): watch streams, lists
//! and `Status` errors, at the wire level ([`crate::protobuf_wire`]).
//!
//! Wire facts (apimachinery's protobuf serializer and its stream framing):
//! - a watch response (`;stream=watch`) is a sequence of frames, each a 4-byte big-endian
//!   length and a bare `meta.v1.WatchEvent` (`type` = 1, `object` = 2, a `RawExtension`
//!   whose `raw` = 1 is a complete enveloped body: `k8s\0` + `runtime.Unknown`);
//! - a list body is enveloped; its message has `metadata` = 1 (`ListMeta`: resourceVersion
//!   = 2, continue = 3, remainingItemCount = 4) and `items` = 2, each item a bare object
//!   message (no envelope);
//! - a `Status` has status = 2, message = 3, reason = 4, details = 5 (name = 1, group = 2,
//!   kind = 3, causes = 4, retryAfterSeconds = 5, uid = 6) and code = 6.

use std::collections::BTreeMap;

use bytes::{Buf as _, Bytes};
use serde::de::Error as _;

use super::error::{status_from_wire, Error, WireCause, WireDetails, WireStatus};
use super::watch_decoder::{subslice, Chunks, WatchEvent};
use super::ObjectList;
use crate::object::ObjectError;
use crate::protobuf_object::map_entry;
use crate::protobuf_wire::{envelope, fields_at, Value, WireError};
use api::status::{Reason, Status};

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What a client that reads protobuf accepts: protobuf first, JSON for kinds that have no
/// protobuf encoding (as client-go sends it).
pub const ACCEPT_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

/// How a protobuf watch stream turns an event's object message into its item type; for the
/// caches' objects, [`DecodeObject::decode_protobuf`](crate::object::DecodeObject::decode_protobuf).
pub type ProtobufDecodeFn<T> = fn(&[u8]) -> Result<T, ObjectError>;

/// Bytes of `context` that are not the protobuf expected, as a decode error.
pub(crate) fn wire(context: &str, e: WireError) -> Error {
    Error::decode(context, serde_json::Error::custom(e))
}

/// Cuts a stream of chunks into length-prefixed frames: a 4-byte big-endian length, then
/// that many bytes. Like [`super::LineDecoder`], a frame within one chunk is handed out as
/// a zero-copy slice of it and only frames that span chunks are copied once; a frame longer
/// than the limit is an error (found from its length, before its bytes are buffered).
#[derive(Debug)]
pub struct FrameDecoder {
    chunks: Chunks,
    max_frame: usize,
}

impl FrameDecoder {
    /// A decoder refusing frames longer than `max_frame` bytes.
    pub fn new(max_frame: usize) -> FrameDecoder {
        FrameDecoder {
            chunks: Chunks::default(),
            max_frame,
        }
    }

    /// Adds the next chunk of the stream.
    pub fn push(&mut self, chunk: Bytes) {
        self.chunks.push(chunk);
    }

    /// The number of bytes buffered but not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.chunks.buffered()
    }

    /// The next complete frame without its length, or `None` if more input is needed.
    ///
    /// # Errors
    /// [`Error::LineTooLong`] for a frame over the limit; the decoder should then be
    /// dropped.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, Error> {
        if !self.chunks.partial.is_empty() {
            // Complete the frame begun earlier, taking from the chunk only what it lacks.
            if self.chunks.partial.len() < 4 {
                let take = (4 - self.chunks.partial.len()).min(self.chunks.current.len());
                self.chunks
                    .partial
                    .extend_from_slice(&self.chunks.current.split_to(take));
            }
            let Some(len) = frame_len(self.max_frame, &self.chunks.partial)? else {
                return Ok(None);
            };
            let take = (4 + len)
                .saturating_sub(self.chunks.partial.len())
                .min(self.chunks.current.len());
            self.chunks
                .partial
                .extend_from_slice(&self.chunks.current.split_to(take));
            if self.chunks.partial.len() < 4 + len {
                return Ok(None);
            }
            let mut frame = self.chunks.partial.split_to(4 + len);
            frame.advance(4);
            return Ok(Some(frame.freeze()));
        }
        match frame_len(self.max_frame, &self.chunks.current)? {
            Some(len) if self.chunks.current.len() >= 4 + len => {
                self.chunks.current.advance(4);
                Ok(Some(self.chunks.current.split_to(len)))
            }
            _ => {
                // What is left begins a frame that ends in a later chunk.
                let rest = std::mem::take(&mut self.chunks.current);
                self.chunks.partial.extend_from_slice(&rest);
                Ok(None)
            }
        }
    }

    /// At the end of the stream: an error if a partial frame is left.
    ///
    /// # Errors
    /// A decode error naming the truncated frame.
    pub fn finish(&mut self) -> Result<(), Error> {
        let left = self.buffered();
        if left == 0 {
            return Ok(());
        }
        Err(wire(
            "the end of a protobuf watch stream",
            WireError {
                what: "the stream ended inside a frame",
                at: left,
            },
        ))
    }
}

/// The length of the frame at the start of `bytes`, once its 4 bytes are there.
fn frame_len(max_frame: usize, bytes: &[u8]) -> Result<Option<usize>, Error> {
    let Some(head) = bytes.get(..4).and_then(|h| <[u8; 4]>::try_from(h).ok()) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(head) as usize;
    if len > max_frame {
        return Err(Error::LineTooLong { limit: max_frame });
    }
    Ok(Some(len))
}

/// Decodes one protobuf watch frame (a bare `meta.v1.WatchEvent`): object events' objects
/// with `decode`, bookmarks into their resourceVersion and annotations, ERROR events into
/// their `Status`.
///
/// # Errors
/// [`Error::Decode`] for a malformed frame, an unknown event type or an object that
/// `decode` refuses.
pub fn parse_protobuf_event<T>(
    frame: &Bytes,
    decode: ProtobufDecodeFn<T>,
) -> Result<WatchEvent<T>, Error> {
    let context = "a protobuf watch event";
    let (mut type_, mut raw) = ("", None::<&[u8]>);
    for field in fields_at(frame, 0) {
        let (at, number, value) = field.map_err(|e| wire(context, e))?;
        match number {
            1 => type_ = value.string(at).map_err(|e| wire(context, e))?,
            2 => {
                let ext = value
                    .bytes("expected the event's object", at)
                    .map_err(|e| wire(context, e))?;
                for field in fields_at(ext, at) {
                    let (at, number, value) = field.map_err(|e| wire(context, e))?;
                    if number == 1 {
                        raw = Some(
                            value
                                .bytes("expected raw bytes", at)
                                .map_err(|e| wire(context, e))?,
                        );
                    }
                }
            }
            _ => {}
        }
    }
    let body = raw.ok_or_else(|| {
        Error::decode(context, serde_json::Error::custom("missing field `object`"))
    })?;
    let message = envelope(body).map_err(|e| wire(context, e))?.raw;
    let object = |e: ObjectError| {
        Error::decode(
            format!("the object of a {type_} event"),
            serde_json::Error::custom(e),
        )
    };
    match type_ {
        "ADDED" => decode(message).map(WatchEvent::Added).map_err(object),
        "MODIFIED" => decode(message).map(WatchEvent::Modified).map_err(object),
        "DELETED" => decode(message).map(WatchEvent::Deleted).map_err(object),
        "BOOKMARK" => bookmark(message).map_err(|e| wire("a BOOKMARK event", e)),
        "ERROR" => Ok(WatchEvent::Error(status_of(message).unwrap_or_else(|| {
            Status::new(
                Reason::InternalError,
                "watch ERROR event without a readable Status",
            )
        }))),
        other => Err(Error::decode(
            context,
            serde_json::Error::custom(format!("unknown watch event type {other:?}")),
        )),
    }
}

/// A bookmark's object: only its metadata's resourceVersion and annotations matter.
fn bookmark<T>(message: &[u8]) -> Result<WatchEvent<T>, WireError> {
    let mut resource_version = String::new();
    let mut annotations = BTreeMap::new();
    for field in fields_at(message, 0) {
        let (at, number, value) = field?;
        if number != 1 {
            continue;
        }
        for field in fields_at(value.bytes("expected the metadata message", at)?, at) {
            let (at, number, value) = field?;
            match number {
                6 => resource_version = value.string(at)?.to_string(),
                12 => {
                    let (k, v) = map_entry(value.bytes("expected an annotation", at)?, at)?;
                    // Checked to be UTF-8: nothing is replaced.
                    annotations.insert(
                        String::from_utf8_lossy(k).into_owned(),
                        String::from_utf8_lossy(v).into_owned(),
                    );
                }
                _ => {}
            }
        }
    }
    Ok(WatchEvent::Bookmark {
        resource_version,
        annotations,
    })
}

/// A `meta.v1.Status` message as the client's `Status`, read into the same wire shape as a
/// JSON Status so that reasons and codes are interpreted alike. `None` if it is not
/// readable.
fn status_of(message: &[u8]) -> Option<Status> {
    let string = |v: Value<'_>, at| v.string(at).ok().map(str::to_string);
    // int32 fields: a negative value is a 10-byte varint, which no field here may hold.
    let int = |v: Value<'_>, at| v.varint(at).ok().and_then(|n| u32::try_from(n).ok());
    let mut w = WireStatus {
        kind: Some("Status".into()),
        ..WireStatus::default()
    };
    for field in fields_at(message, 0) {
        let (at, number, value) = field.ok()?;
        match number {
            2 => w.status = string(value, at),
            3 => w.message = string(value, at),
            4 => w.reason = string(value, at),
            6 => w.code = int(value, at).and_then(|c| u16::try_from(c).ok()),
            5 => {
                let details = w.details.get_or_insert_with(WireDetails::default);
                for field in fields_at(value.bytes("", at).ok()?, at) {
                    let (at, number, value) = field.ok()?;
                    match number {
                        1 => details.name = string(value, at),
                        2 => details.group = string(value, at),
                        3 => details.kind = string(value, at),
                        5 => details.retry_after_seconds = int(value, at),
                        4 => {
                            let mut cause = WireCause::default();
                            for field in fields_at(value.bytes("", at).ok()?, at) {
                                let (at, number, value) = field.ok()?;
                                match number {
                                    1 => cause.reason = string(value, at),
                                    2 => cause.message = string(value, at),
                                    3 => cause.field = string(value, at),
                                    _ => {}
                                }
                            }
                            details.causes.get_or_insert_with(Vec::new).push(cause);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    status_from_wire(w)
}

/// A complete protobuf `Status` body (`k8s\0` + envelope), as an error response carries it
/// when the request accepted protobuf. `None` if `body` is not one.
pub fn decode_protobuf_status(body: &[u8]) -> Option<Status> {
    let e = envelope(body).ok()?;
    if e.kind != "Status" {
        return None;
    }
    status_of(e.raw)
}

/// Reads a `ListMeta` message (`meta`, found at offset `at`) into `out`'s resourceVersion,
/// continue token and remaining item count.
pub(crate) fn read_list_meta<T>(
    meta: &[u8],
    at: usize,
    out: &mut ObjectList<T>,
) -> Result<(), WireError> {
    for field in fields_at(meta, at) {
        let (at, number, value) = field?;
        match number {
            2 => out.resource_version = value.string(at)?.to_string(),
            3 => {
                let token = value.string(at)?;
                out.continue_token = Some(token.to_string()).filter(|t| !t.is_empty());
            }
            // int64 on the wire: the varint is the two's complement.
            4 => out.remaining_item_count = Some(value.varint(at)? as i64),
            _ => {}
        }
    }
    Ok(())
}

/// Decodes a protobuf list body with each item's message as a zero-copy slice of `body`.
///
/// # Errors
/// [`Error::Decode`] if the body is not an enveloped list.
pub fn decode_protobuf_list(body: &Bytes, path: &str) -> Result<ObjectList<Bytes>, Error> {
    let context = format!("the protobuf list from {path}");
    let list = envelope(body).map_err(|e| wire(&context, e))?;
    let mut out = ObjectList {
        items: Vec::new(),
        resource_version: String::new(),
        continue_token: None,
        remaining_item_count: None,
    };
    // Error offsets count from the start of the body.
    let base = (list.raw.as_ptr() as usize).saturating_sub(body.as_ptr() as usize);
    for field in fields_at(list.raw, base) {
        let (at, number, value) = field.map_err(|e| wire(&context, e))?;
        match number {
            1 => {
                let meta = value
                    .bytes("expected the list metadata", at)
                    .map_err(|e| wire(&context, e))?;
                read_list_meta(meta, at, &mut out).map_err(|e| wire(&context, e))?;
            }
            2 => {
                let item = value
                    .bytes("expected an item message", at)
                    .map_err(|e| wire(&context, e))?;
                out.items.push(subslice(body, item));
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::object::{DecodeObject as _, KubeObject};
    use crate::protobuf_object::ProtobufObject;
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta, Unknown};
    use proptest::prelude::*;
    use prost::Message as _;

    fn enveloped(kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let mut out = b"k8s\0".to_vec();
        Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some("v1".into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: None,
            content_type: None,
        }
        .encode(&mut out)
        .unwrap();
        out
    }

    pub(crate) fn event(type_: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        meta::WatchEvent {
            r#type: Some(type_.into()),
            object: Some(RawExtension {
                raw: Some(enveloped(kind, raw)),
            }),
        }
        .encode_to_vec()
    }

    pub(crate) fn pod(name: &str, rv: &str) -> Vec<u8> {
        core::Pod {
            metadata: Some(meta::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    pub(crate) fn framed(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for f in frames {
            out.extend_from_slice(&(f.len() as u32).to_be_bytes());
            out.extend_from_slice(f);
        }
        out
    }

    #[test]
    fn object_events_bookmarks_and_errors() {
        let decode: ProtobufDecodeFn<ProtobufObject> = ProtobufObject::decode_protobuf;
        let added = parse_protobuf_event(&event("ADDED", "Pod", pod("a", "5")).into(), decode);
        match added.unwrap() {
            WatchEvent::Added(o) => assert_eq!((o.name(), o.resource_version()), ("a", Some("5"))),
            other => panic!("{other:?}"),
        }
        let mark = core::Pod {
            metadata: Some(meta::ObjectMeta {
                resource_version: Some("77".into()),
                annotations: [("k8s.io/initial-events-end".into(), "true".into())].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let b = parse_protobuf_event(
            &event("BOOKMARK", "Pod", mark.encode_to_vec()).into(),
            decode,
        )
        .unwrap();
        assert!(b.is_initial_events_end());
        assert!(
            matches!(b, WatchEvent::Bookmark { ref resource_version, .. } if resource_version == "77")
        );
        let gone = meta::Status {
            status: Some("Failure".into()),
            message: Some("too old resource version: 1 (50)".into()),
            reason: Some("Expired".into()),
            code: Some(410),
            ..Default::default()
        };
        match parse_protobuf_event(
            &event("ERROR", "Status", gone.encode_to_vec()).into(),
            decode,
        )
        .unwrap()
        {
            WatchEvent::Error(s) => {
                assert_eq!(s.code(), 410);
                assert_eq!(s.reason, Reason::Expired);
                assert!(s.message.contains("too old"));
            }
            other => panic!("{other:?}"),
        }
        assert!(parse_protobuf_event(&event("NOPE", "Pod", pod("a", "1")).into(), decode).is_err());
        assert!(parse_protobuf_event(&Bytes::from_static(b"\x0a\x05ADDED"), decode).is_err());
    }

    #[test]
    fn retry_after_comes_from_the_details() {
        let busy = meta::Status {
            status: Some("Failure".into()),
            reason: Some("TooManyRequests".into()),
            code: Some(429),
            details: Some(meta::StatusDetails {
                name: Some("p1".into()),
                retry_after_seconds: Some(3),
                causes: vec![meta::StatusCause {
                    field: Some("spec.x".into()),
                    message: Some("busy".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let body = enveloped("Status", busy.encode_to_vec());
        let s = decode_protobuf_status(&body).unwrap();
        assert_eq!((s.code(), s.retry_after), (429, Some(3)));
        assert_eq!(s.details_name.as_deref(), Some("p1"));
        assert_eq!(
            (s.causes[0].field.as_str(), s.causes[0].message.as_str()),
            ("spec.x", "busy")
        );
        // An error response in protobuf reads as its JSON twin would.
        let e = super::super::error::error_from_response(429, None, &body);
        assert!(e.is_too_many_requests(), "{e}");
        assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(3)));
        assert!(decode_protobuf_status(&enveloped("Pod", pod("a", "1"))).is_none());
    }

    #[test]
    fn lists_keep_items_as_slices_of_the_body() {
        let list = core::PodList {
            metadata: Some(meta::ListMeta {
                resource_version: Some("90".into()),
                r#continue: Some("tok".into()),
                remaining_item_count: Some(12),
                ..Default::default()
            }),
            items: vec![
                core::Pod::decode(&pod("a", "1")[..]).unwrap(),
                core::Pod::decode(&pod("b", "2")[..]).unwrap(),
            ],
        };
        let body = Bytes::from(enveloped("PodList", list.encode_to_vec()));
        let l = decode_protobuf_list(&body, "/api/v1/pods").unwrap();
        assert_eq!(l.resource_version, "90");
        assert_eq!(l.continue_token.as_deref(), Some("tok"));
        assert_eq!(l.remaining_item_count, Some(12));
        let names: Vec<_> = l
            .items
            .iter()
            .map(|i| {
                ProtobufObject::from_message(i.clone())
                    .unwrap()
                    .name()
                    .to_string()
            })
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(decode_protobuf_list(&Bytes::from_static(b"{}"), "/x").is_err());
    }

    #[test]
    fn frames_over_the_limit_and_truncated_ends_fail() {
        let mut d = FrameDecoder::new(10);
        d.push(Bytes::from(framed(&[vec![0; 11]])));
        assert!(matches!(
            d.next_frame(),
            Err(Error::LineTooLong { limit: 10 })
        ));
        let mut d = FrameDecoder::new(100);
        d.push(Bytes::from(framed(&[vec![1; 5]])[..7].to_vec()));
        assert_eq!(d.next_frame().unwrap(), None);
        assert!(d.finish().is_err());
    }

    proptest! {
        /// However the stream is cut into chunks, the same frames come out, in order.
        #[test]
        fn frames_survive_any_chunking(
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..50), 0..12),
            cuts in proptest::collection::vec(0usize..400, 0..10),
            drains in proptest::collection::vec(any::<bool>(), 12),
        ) {
            let stream = framed(&frames);
            let mut cuts: Vec<_> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
            cuts.push(0);
            cuts.push(stream.len());
            cuts.sort_unstable();
            let mut d = FrameDecoder::new(1 << 20);
            let mut got = Vec::new();
            for (i, w) in cuts.windows(2).enumerate() {
                d.push(Bytes::copy_from_slice(&stream[w[0]..w[1]]));
                // Sometimes the next chunk comes before this one was drained.
                if drains[i % drains.len()] {
                    while let Some(f) = d.next_frame().unwrap() {
                        got.push(f.to_vec());
                    }
                }
            }
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f.to_vec());
            }
            prop_assert!(d.finish().is_ok());
            prop_assert_eq!(got, frames);
        }
    }
}
