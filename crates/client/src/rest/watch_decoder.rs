//! Decoding a watch response: newline-delimited JSON events over a chunked body.
//!
//! Three layers, each usable alone:
//!
//! * [`LineDecoder`] cuts a byte stream into lines. Chunk boundaries are arbitrary: one
//!   event may span many chunks and one chunk may hold many events. A line that lies
//!   within one chunk is handed out as a zero-copy [`Bytes`] slice of that chunk; only lines
//!   that span chunks are copied once into a buffer. `\r\n` endings and blank lines are
//!   tolerated; a line longer than the limit (64 MiB by default) is an error.
//! * [`parse_event`] turns one line `{"type":...,"object":...}` into a [`WatchEvent`] in
//!   one validating pass over the line ([`crate::json_validate`]; no `serde_json::Value`
//!   tree). The per-stream decode function ([`DecodeFn`]) is handed the cursor at the
//!   object and reads it within that pass: [`cache_object`] picks a cache object's metadata
//!   out while validating, [`raw_object`] returns the object's bytes as a slice of the line,
//!   [`typed_object`] runs a typed `serde` decode over the validated text.
//!
//! [`super::watch_stream::WatchStream`] drives both over an HTTP body.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use serde::de::Error as _;
use serde::Deserialize;

use super::error::{decode_status, Error};
use crate::json_validate::{JsonError, Validator};
use crate::object::DecodeObject;
use api::status::{Reason, Status};

/// The default maximum size of one event line: 64 MiB.
pub const DEFAULT_MAX_LINE: usize = 64 << 20;

/// The annotation that marks the bookmark ending the initial events of a streaming list.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// One event of a watch.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent<T> {
    /// An object was created (or, at the start of a watch, exists).
    Added(T),
    /// An object was changed.
    Modified(T),
    /// An object was deleted; this is its last state, with the deletion's resourceVersion.
    Deleted(T),
    /// A progress marker: every change up to `resource_version` has been sent.
    Bookmark {
        /// The `metadata.resourceVersion` of the bookmark object.
        resource_version: String,
        /// The bookmark object's annotations (e.g. `k8s.io/initial-events-end`).
        annotations: BTreeMap<String, String>,
    },
    /// The server ended the watch with a failure, e.g. code 410 `Expired` when the
    /// requested resourceVersion is too old (the caller should relist).
    Error(Status),
}

impl<T> WatchEvent<T> {
    /// The object of an ADDED, MODIFIED or DELETED event.
    pub fn object(&self) -> Option<&T> {
        match self {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => Some(o),
            _ => None,
        }
    }

    /// The wire name of the event type (`ADDED`, ..., `ERROR`).
    pub fn type_name(&self) -> &'static str {
        match self {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            WatchEvent::Bookmark { .. } => "BOOKMARK",
            WatchEvent::Error(_) => "ERROR",
        }
    }

    /// Whether this is the bookmark that ends the initial events of a streaming list
    /// (`sendInitialEvents=true`).
    pub fn is_initial_events_end(&self) -> bool {
        match self {
            WatchEvent::Bookmark { annotations, .. } => annotations
                .get(INITIAL_EVENTS_END_ANNOTATION)
                .is_some_and(|v| v == "true"),
            _ => false,
        }
    }

    /// Converts the object of the event, keeping the type.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> WatchEvent<U> {
        match self {
            WatchEvent::Added(o) => WatchEvent::Added(f(o)),
            WatchEvent::Modified(o) => WatchEvent::Modified(f(o)),
            WatchEvent::Deleted(o) => WatchEvent::Deleted(f(o)),
            WatchEvent::Bookmark {
                resource_version,
                annotations,
            } => WatchEvent::Bookmark {
                resource_version,
                annotations,
            },
            WatchEvent::Error(s) => WatchEvent::Error(s),
        }
    }
}

/// Cuts a stream of chunks into lines (see the module docs).
///
/// Use: [`push`](Self::push) a chunk, then call [`next_line`](Self::next_line) until it
/// returns `Ok(None)`; at the end of the stream call [`finish`](Self::finish) for a last
/// line that had no terminating newline.
#[derive(Debug)]
pub struct LineDecoder {
    chunks: Chunks,
    max_line: usize,
}

/// What a decoder that cuts a stream of chunks into pieces holds: the unscanned rest of the
/// latest chunk, from which whole pieces are sliced without copying, and the beginning of a
/// piece that started in an earlier chunk, which is copied.
#[derive(Debug, Default)]
pub(crate) struct Chunks {
    /// The unscanned rest of the latest chunk.
    pub(crate) current: Bytes,
    /// The beginning of a piece that started in an earlier chunk.
    pub(crate) partial: BytesMut,
}

impl Chunks {
    /// Adds the next chunk of the stream.
    pub(crate) fn push(&mut self, chunk: Bytes) {
        if !self.current.is_empty() {
            // Keep order if the caller pushes before draining.
            self.partial.extend_from_slice(&self.current);
        }
        self.current = chunk;
    }

    /// The number of bytes held.
    pub(crate) fn buffered(&self) -> usize {
        self.partial.len() + self.current.len()
    }
}

impl Default for LineDecoder {
    fn default() -> Self {
        LineDecoder::new(DEFAULT_MAX_LINE)
    }
}

impl LineDecoder {
    /// A decoder refusing lines longer than `max_line` bytes (terminator excluded).
    pub fn new(max_line: usize) -> LineDecoder {
        LineDecoder {
            chunks: Chunks::default(),
            max_line,
        }
    }

    /// Adds the next chunk of the stream.
    pub fn push(&mut self, chunk: Bytes) {
        self.chunks.push(chunk);
    }

    /// The number of bytes buffered but not yet returned as lines.
    pub fn buffered(&self) -> usize {
        self.chunks.buffered()
    }

    /// The next complete, non-blank line without its `\n` / `\r\n`, or `None` if more input
    /// is needed.
    ///
    /// # Errors
    /// [`Error::LineTooLong`] when a line exceeds the limit; the decoder should then be
    /// dropped (its state is unspecified).
    pub fn next_line(&mut self) -> Result<Option<Bytes>, Error> {
        loop {
            let Some(pos) = find_newline(&self.chunks.current) else {
                if self.buffered() > self.max_line {
                    return Err(Error::LineTooLong {
                        limit: self.max_line,
                    });
                }
                if !self.chunks.current.is_empty() {
                    let rest = std::mem::take(&mut self.chunks.current);
                    self.chunks.partial.extend_from_slice(&rest);
                }
                return Ok(None);
            };
            let line = if self.chunks.partial.is_empty() {
                let mut l = self.chunks.current.split_to(pos + 1);
                l.truncate(pos);
                l
            } else {
                let head = self.chunks.current.split_to(pos + 1);
                self.chunks.partial.extend_from_slice(&head[..pos]);
                self.chunks.partial.split().freeze()
            };
            if line.len() > self.max_line {
                return Err(Error::LineTooLong {
                    limit: self.max_line,
                });
            }
            let line = trim_line(line);
            if !line.is_empty() {
                return Ok(Some(line));
            }
        }
    }

    /// The last line at the end of the stream, if the stream did not end with a newline
    /// (blank leftovers are dropped). The decoder is empty afterwards.
    ///
    /// # Errors
    /// [`Error::LineTooLong`] if the leftover exceeds the limit.
    pub fn finish(&mut self) -> Result<Option<Bytes>, Error> {
        if self.buffered() > self.max_line {
            return Err(Error::LineTooLong {
                limit: self.max_line,
            });
        }
        let rest = if self.chunks.partial.is_empty() {
            std::mem::take(&mut self.chunks.current)
        } else {
            let cur = std::mem::take(&mut self.chunks.current);
            self.chunks.partial.extend_from_slice(&cur);
            self.chunks.partial.split().freeze()
        };
        let rest = trim_line(rest);
        Ok((!rest.is_empty()).then_some(rest))
    }
}

/// The index of the first `\n` in `bytes`, looking at eight bytes per step.
fn find_newline(bytes: &[u8]) -> Option<usize> {
    // SIMD search: most of a line is one object's text.
    memchr::memchr(b'\n', bytes)
}

/// Strips a trailing `\r` and surrounding ASCII whitespace.
fn trim_line(mut line: Bytes) -> Bytes {
    let end = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    line.truncate(end);
    let start = line
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(line.len());
    if start > 0 {
        let _ = line.split_to(start);
    }
    line
}

/// How a stream turns the `object` of an event into its item type: given the whole line
/// and a validating cursor at the object's first byte, it reads exactly one JSON value —
/// validating every byte of it — and leaves the cursor just after it. The cursor is usually
/// in the middle of the line (the object is read in the same pass that validates the line);
/// for events whose type comes after their object it walks the object's text alone.
pub type DecodeFn<T> = fn(&Bytes, &mut Validator<'_>) -> Result<T, serde_json::Error>;

/// A [`DecodeFn`] that also takes the stream's [`Scope`](crate::object_interner::Scope), to
/// share what it decodes with the other streams of that scope.
pub(crate) type SharedDecodeFn<T> =
    fn(&Bytes, &mut Validator<'_>, crate::object_interner::Scope) -> Result<T, serde_json::Error>;

/// What [`parse_event_with`] decodes objects with.
pub(crate) type Decode<'d, T> =
    &'d dyn Fn(&Bytes, &mut Validator<'_>) -> Result<T, serde_json::Error>;

fn validated_span<'a>(v: &mut Validator<'a>) -> Result<&'a [u8], serde_json::Error> {
    let (start, end) = v.value().map_err(serde_json::Error::custom)?;
    Ok(v.text().get(start..end).unwrap_or_default())
}

/// A [`DecodeFn`] for typed objects: `serde_json` decodes straight from the raw bytes.
pub fn typed_object<T: serde::de::DeserializeOwned>(
    _line: &Bytes,
    v: &mut Validator<'_>,
) -> Result<T, serde_json::Error> {
    serde_json::from_slice(validated_span(v)?)
}

/// A [`DecodeFn`] for raw objects: the object's JSON text as a zero-copy slice of the line.
pub fn raw_object(line: &Bytes, v: &mut Validator<'_>) -> Result<Bytes, serde_json::Error> {
    Ok(subslice(line, validated_span(v)?))
}

/// A [`DecodeFn`] for the caches' objects: [`DecodeObject::decode_at`], which for a
/// [`crate::object::DynamicObject`] validates the object and reads its metadata in one walk.
pub fn cache_object<K: DecodeObject>(
    _line: &Bytes,
    v: &mut Validator<'_>,
) -> Result<K, serde_json::Error> {
    K::decode_at(v).map_err(serde_json::Error::custom)
}

/// `part` as a slice of `whole` when it lies inside it (zero-copy), else a copy.
pub(crate) fn subslice(whole: &Bytes, part: &[u8]) -> Bytes {
    let base = whole.as_ptr() as usize;
    let start = part.as_ptr() as usize;
    if start >= base && start + part.len() <= base + whole.len() {
        whole.slice(start - base..start - base + part.len())
    } else {
        Bytes::copy_from_slice(part)
    }
}

/// An event's `object`: decoded on the way (its type was known when it came) or only
/// validated, to be decoded once the type is known.
enum EventObject<'a, T> {
    Decoded(T),
    Text(&'a [u8]),
}

impl<'a, T> EventObject<'a, T> {
    /// The object, decoded now if it was not on the way (alone, and in full).
    fn into_decoded(self, line: &Bytes, decode: Decode<'_, T>) -> Result<T, serde_json::Error> {
        match self {
            EventObject::Decoded(decoded) => Ok(decoded),
            EventObject::Text(text) => {
                let mut v = Validator::new(text);
                let decoded = decode(line, &mut v)?;
                v.end().map_err(serde_json::Error::custom)?;
                Ok(decoded)
            }
        }
    }

    /// The text of an object that was not decoded on the way (only object events are).
    fn text(&self) -> &'a [u8] {
        match self {
            EventObject::Text(text) => text,
            EventObject::Decoded(_) => b"",
        }
    }
}

/// Why [`split_event`] failed: the line itself, or the decode of an object event's object
/// (with the event's type).
enum SplitError {
    Line(serde_json::Error),
    Object(&'static str, serde_json::Error),
}

/// The `type` and the `object` of an event line in one validating pass: the whole line
/// must be one JSON object with a string `type` and an `object`, each given once (other
/// members are validated and ignored). When `type` comes first and names an object event
/// (as every server sends it), the object is decoded by `decode` in the same pass.
fn split_event<'a, T>(
    line: &'a Bytes,
    decode: Decode<'_, T>,
) -> Result<(std::borrow::Cow<'a, str>, EventObject<'a, T>), SplitError> {
    let json = |e: JsonError| SplitError::Line(serde_json::Error::custom(e));
    let text: &'a [u8] = line;
    let mut v = Validator::new(text);
    v.expect(b'{', "expected a JSON object").map_err(json)?;
    let (mut type_, mut object) = (None::<std::borrow::Cow<'a, str>>, None);
    if v.peek() == Some(b'}') {
        v.expect(b'}', "").map_err(json)?;
    } else {
        loop {
            let (key, escaped) = v.string().map_err(json)?;
            let key: std::borrow::Cow<'_, [u8]> = if escaped {
                crate::json_validate::unescape(key)
                    .map_err(SplitError::Line)?
                    .into_bytes()
                    .into()
            } else {
                key.into()
            };
            v.expect(b':', "expected `:`").map_err(json)?;
            let duplicate = match &key[..] {
                b"type" => {
                    let (start, end) = v.value().map_err(json)?;
                    let raw = line.get(start..end).unwrap_or_default();
                    let dup = type_.is_some();
                    type_ = Some(event_type(raw).map_err(SplitError::Line)?);
                    dup
                }
                b"object" => {
                    let dup = object.is_some();
                    let object_event = match type_.as_deref() {
                        Some("ADDED") => Some("ADDED"),
                        Some("MODIFIED") => Some("MODIFIED"),
                        Some("DELETED") => Some("DELETED"),
                        _ => None,
                    };
                    object = Some(if let Some(t) = object_event {
                        EventObject::Decoded(
                            decode(line, &mut v).map_err(|e| SplitError::Object(t, e))?,
                        )
                    } else {
                        let (start, end) = v.value().map_err(json)?;
                        EventObject::Text(line.get(start..end).unwrap_or_default())
                    });
                    dup
                }
                _ => {
                    v.value().map_err(json)?;
                    false
                }
            };
            if duplicate {
                return Err(SplitError::Line(serde_json::Error::custom(format!(
                    "duplicate field `{}`",
                    String::from_utf8_lossy(&key)
                ))));
            }
            if !v.next_member(b'}').map_err(json)? {
                break;
            }
        }
    }
    v.end().map_err(json)?;
    let type_ =
        type_.ok_or_else(|| SplitError::Line(serde_json::Error::custom("missing field `type`")))?;
    let object = object
        .ok_or_else(|| SplitError::Line(serde_json::Error::custom("missing field `object`")))?;
    Ok((type_, object))
}

/// The text of a validated `type` value, which must be a string.
fn event_type(raw: &[u8]) -> Result<std::borrow::Cow<'_, str>, serde_json::Error> {
    match raw {
        [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => {
            // Validated above: a string without escapes is its own UTF-8 text.
            Ok(std::borrow::Cow::Borrowed(
                std::str::from_utf8(inner).map_err(serde_json::Error::custom)?,
            ))
        }
        [b'"', ..] => Ok(std::borrow::Cow::Owned(serde_json::from_slice::<String>(
            raw,
        )?)),
        _ => Err(serde_json::Error::custom("`type` must be a string")),
    }
}

#[derive(Deserialize)]
struct BookmarkObject {
    #[serde(default)]
    metadata: BookmarkMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct BookmarkMeta {
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

/// Parses one event line.
///
/// ADDED/MODIFIED/DELETED objects go through `decode`; a BOOKMARK yields only its
/// resourceVersion and annotations (the rest of its skeleton object is not decoded, so it
/// never fails on a typed object's required fields); an ERROR yields the decoded
/// [`Status`] (a non-Status object becomes an `InternalError` Status quoting it).
///
/// # Errors
/// [`Error::Decode`] if the line is not an event, has an unknown type, or its object does
/// not decode.
pub fn parse_event<T>(line: &Bytes, decode: DecodeFn<T>) -> Result<WatchEvent<T>, Error> {
    parse_event_with(line, &decode)
}

/// [`parse_event`] with any decode function.
pub(crate) fn parse_event_with<T>(
    line: &Bytes,
    decode: Decode<'_, T>,
) -> Result<WatchEvent<T>, Error> {
    let (type_, object) = split_event(line, decode).map_err(|e| match e {
        SplitError::Line(e) => Error::decode(event_context(line), e),
        SplitError::Object(t, e) => Error::decode(format!("the object of a {t} event"), e),
    })?;
    let obj = |e: serde_json::Error| Error::decode(format!("the object of a {type_} event"), e);
    match type_.as_ref() {
        "ADDED" => object
            .into_decoded(line, decode)
            .map(WatchEvent::Added)
            .map_err(obj),
        "MODIFIED" => object
            .into_decoded(line, decode)
            .map(WatchEvent::Modified)
            .map_err(obj),
        "DELETED" => object
            .into_decoded(line, decode)
            .map(WatchEvent::Deleted)
            .map_err(obj),
        "BOOKMARK" | "ERROR" => other_event(type_.as_ref(), object.text()).map_err(obj),
        other => Err(Error::decode(
            event_context(line),
            serde_json::Error::custom(format!("unknown watch event type {other:?}")),
        )),
    }
}

/// A BOOKMARK event (`type_` says so) or else an ERROR event, from its object's text.
fn other_event<T>(type_: &str, object: &[u8]) -> Result<WatchEvent<T>, serde_json::Error> {
    match type_ {
        "BOOKMARK" => {
            let b: BookmarkObject = serde_json::from_slice(object)?;
            Ok(WatchEvent::Bookmark {
                resource_version: b.metadata.resource_version.unwrap_or_default(),
                annotations: b.metadata.annotations.unwrap_or_default(),
            })
        }
        _ => Ok(WatchEvent::Error(decode_status(object).unwrap_or_else(
            || {
                let text = String::from_utf8_lossy(object);
                let cut = text.char_indices().nth(512).map_or(text.len(), |(i, _)| i);
                Status::new(
                    Reason::InternalError,
                    format!("watch ERROR event without a Status: {}", &text[..cut]),
                )
            },
        ))),
    }
}

/// A short description of a line for error messages.
fn event_context(line: &[u8]) -> String {
    let cut = line.len().min(120);
    format!(
        "a watch event ({} bytes, starting {:?})",
        line.len(),
        String::from_utf8_lossy(&line[..cut])
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lines_of(chunks: &[&[u8]]) -> Vec<Bytes> {
        let mut d = LineDecoder::default();
        let mut out = Vec::new();
        for c in chunks {
            d.push(Bytes::copy_from_slice(c));
            while let Some(l) = d.next_line().unwrap() {
                out.push(l);
            }
        }
        if let Some(l) = d.finish().unwrap() {
            out.push(l);
        }
        out
    }

    #[test]
    fn find_newline_agrees_with_a_byte_scan() {
        for len in 0..40 {
            for at in 0..=len {
                let mut v = vec![b'x'; len];
                if at < len {
                    v[at] = b'\n';
                }
                let want = v.iter().position(|&b| b == b'\n');
                assert_eq!(find_newline(&v), want, "len {len} at {at}");
            }
        }
        // Bytes that differ from a newline by one bit are not newlines.
        assert_eq!(
            find_newline(&[0x0b, 0x08, 0x8a, 0x0e, 0x1a, 0x2a, 0x4a, 0x0a]),
            Some(7)
        );
    }

    #[test]
    fn lines_across_and_within_chunks() {
        let got = lines_of(&[b"{\"a\":1}\n{\"b\"", b":2}\r\n\n{\"c\":3}\n{\"d", b"\":4}"]);
        assert_eq!(
            got,
            vec![&b"{\"a\":1}"[..], b"{\"b\":2}", b"{\"c\":3}", b"{\"d\":4}"]
        );
        assert!(lines_of(&[b"\n\r\n  \n"]).is_empty());
    }

    #[test]
    fn lines_within_one_chunk_are_zero_copy() {
        let chunk = Bytes::from_static(b"{\"x\":1}\n{\"y\":2}\n");
        let mut d = LineDecoder::default();
        d.push(chunk.clone());
        let l = d.next_line().unwrap().unwrap();
        assert_eq!(l.as_ptr(), chunk.as_ptr());
        let l2 = d.next_line().unwrap().unwrap();
        assert_eq!(l2.as_ptr(), chunk[8..].as_ptr());
        assert!(d.next_line().unwrap().is_none());
    }

    #[test]
    fn over_long_lines_are_refused() {
        let mut d = LineDecoder::new(8);
        d.push(Bytes::from_static(b"12345"));
        assert!(d.next_line().unwrap().is_none());
        d.push(Bytes::from_static(b"6789"));
        assert!(matches!(
            d.next_line(),
            Err(Error::LineTooLong { limit: 8 })
        ));

        let mut d = LineDecoder::new(8);
        d.push(Bytes::from_static(b"0123456789\nok\n"));
        assert!(matches!(d.next_line(), Err(Error::LineTooLong { .. })));

        let mut d = LineDecoder::new(8);
        d.push(Bytes::from_static(b"12345678\n"));
        assert_eq!(&d.next_line().unwrap().unwrap()[..], b"12345678");
    }

    fn raw(line: &str) -> Result<WatchEvent<Bytes>, Error> {
        parse_event(&Bytes::copy_from_slice(line.as_bytes()), raw_object)
    }

    #[test]
    fn the_line_is_validated_in_full() {
        // Escaped keys and type, members in any order, unknown members ignored.
        let ok =
            raw(r#"{"object":{"a":[1,{"b":null}]},"extra":[true],"t\u0079pe":"MOD\u0049FIED"}"#);
        assert!(
            matches!(ok, Ok(WatchEvent::Modified(ref o)) if &o[..] == br#"{"a":[1,{"b":null}]}"#),
            "{ok:?}"
        );
        for bad in [
            r#"{"type":"ADDED","object":{"a":01}}"#,
            r#"{"type":"ADDED","object":{"a":""}}"#,
            r#"{"type":"ADDED","object":{"a":1}} x"#,
            r#"{"type":"ADDED","type":"DELETED","object":{}}"#,
            r#"{"type":"ADDED","object":{},"object":{}}"#,
            r#"{"type":7,"object":{}}"#,
            r#"{"type":"ADDED"}"#,
            r#"{"object":{}}"#,
            r#"["ADDED",{}]"#,
            "{\"type\":\"ADDED\",\"object\":{\"a\":\"\u{1}\"}}",
        ] {
            assert!(matches!(raw(bad), Err(Error::Decode { .. })), "{bad}");
        }
        let invalid_utf8 = Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":{\"a\":\"\xff\"}}");
        assert!(parse_event(&invalid_utf8, raw_object).is_err());
    }

    #[test]
    fn every_event_type() {
        let line = Bytes::from_static(
            br#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}}}"#,
        );
        match parse_event(&line, raw_object).unwrap() {
            WatchEvent::Added(o) => {
                assert_eq!(
                    &o[..],
                    br#"{"kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}}"#
                );
                // Zero-copy: the object is a slice of the line.
                assert_eq!(o.as_ptr(), line[25..].as_ptr());
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            raw(r#"{"object":{"a":1},"type":"MODIFIED"}"#).unwrap(),
            WatchEvent::Modified(o) if &o[..] == br#"{"a":1}"#
        ));
        assert!(matches!(
            raw(r#"{"type":"DELETED","object":{}}"#).unwrap(),
            WatchEvent::Deleted(_)
        ));

        let b = raw(r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}}}}"#).unwrap();
        assert!(b.is_initial_events_end());
        assert!(
            matches!(&b, WatchEvent::Bookmark { resource_version, .. } if resource_version == "12")
        );
        let b =
            raw(r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"13"}}}"#).unwrap();
        assert!(!b.is_initial_events_end());

        let e = raw(r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (4213)","reason":"Expired","code":410}}"#).unwrap();
        match e {
            WatchEvent::Error(s) => {
                assert_eq!(s.code(), 410);
                assert_eq!(s.reason, Reason::Expired);
                assert_eq!(s.message, "too old resource version: 1 (4213)");
            }
            other => panic!("{other:?}"),
        }
        match raw(r#"{"type":"ERROR","object":{"weird":true}}"#).unwrap() {
            WatchEvent::Error(s) => {
                assert_eq!(s.reason, Reason::InternalError);
                assert!(s.message.contains("weird"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_events_are_decode_errors() {
        for bad in [
            "not json",
            r#"{"type":"ADDED"}"#,
            r#"{"type":"EXPLODED","object":{}}"#,
            r#"{"type":"ADDED","object":{"a":1}"#,
        ] {
            assert!(matches!(raw(bad), Err(Error::Decode { .. })), "{bad}");
        }
        // A typed decode failure names the event type.
        let line = Bytes::from_static(br#"{"type":"ADDED","object":{"metadata":{"name":5}}}"#);
        let e = parse_event(&line, typed_object::<k8s_openapi::api::core::v1::Pod>).unwrap_err();
        assert!(e.to_string().contains("ADDED"), "{e}");
    }

    #[test]
    fn typed_pods_and_bookmarks_with_required_fields() {
        use k8s_openapi::api::core::v1::{Event, Pod};
        let line = Bytes::from_static(
            br#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default"},"spec":{"containers":[{"name":"c","image":"i"}]}}}"#,
        );
        let ev = parse_event(&line, typed_object::<Pod>).unwrap();
        let pod = ev.object().unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
        // An Event object requires `involvedObject`; its bookmark skeleton lacks it, but
        // bookmarks never decode the object as the typed kind.
        let line = Bytes::from_static(
            br#"{"type":"BOOKMARK","object":{"kind":"Event","apiVersion":"v1","metadata":{"resourceVersion":"9"}}}"#,
        );
        let ev = parse_event(&line, typed_object::<Event>).unwrap();
        assert_eq!(ev.type_name(), "BOOKMARK");
    }

    #[test]
    fn cache_objects_are_read_in_the_line_pass_whatever_the_member_order() {
        use crate::object::{DynamicObject, KubeObject};
        let object = r#"{"metadata":{"name":"p","namespace":"ns","resourceVersion":"7","labels":{"a":"b"}},"spec":{}}"#;
        for line in [
            format!(r#"{{"type":"MODIFIED","object":{object}}}"#),
            // The type after the object: the object is decoded once the type is known.
            format!(r#"{{"object":{object},"type":"MODIFIED","extra":[1]}}"#),
        ] {
            let line = Bytes::from(line);
            let ev = parse_event(&line, cache_object::<DynamicObject>).unwrap();
            let WatchEvent::Modified(o) = ev else {
                panic!("not MODIFIED: {ev:?}");
            };
            assert_eq!(o.name(), "p");
            assert_eq!(o.namespace(), Some("ns"));
            assert_eq!(o.resource_version(), Some("7"));
            assert_eq!(o.labels().unwrap().get("a"), Some("b"));
            assert_eq!(o.json().as_ref(), object.as_bytes());
        }
        // Faults anywhere are found: in the object (after its metadata), in the rest of the
        // line, or a repeated member.
        for bad in [
            r#"{"type":"ADDED","object":{"metadata":{"name":"p"},"spec":{"x":}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"p"}},"x":[1,]}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"p"}}} trailing"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"p"}},"object":{}}"#,
            r#"{"object":{"metadata":{"name":"p"},"spec":[1,]},"type":"ADDED"}"#,
            r#"{"type":"ADDED","object":[1]}"#,
        ] {
            let line = Bytes::from(bad);
            assert!(
                parse_event(&line, cache_object::<DynamicObject>).is_err(),
                "accepted {bad}"
            );
        }
        // Bookmarks and errors are not object events: their objects are never decoded as one.
        let line = Bytes::from_static(
            br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#,
        );
        assert_eq!(
            parse_event(&line, cache_object::<DynamicObject>)
                .unwrap()
                .type_name(),
            "BOOKMARK"
        );
    }

    fn event_line(i: usize, kind: usize) -> String {
        match kind % 4 {
            0 => format!(
                r#"{{"type":"ADDED","object":{{"metadata":{{"name":"p{i}","resourceVersion":"{i}"}},"data":"é\n{i}"}}}}"#
            ),
            1 => format!(
                r#"{{"type":"MODIFIED","object":{{"metadata":{{"name":"p{i}"}},"list":[1,2,{{"x":"}}\"{i}"}}]}}}}"#
            ),
            2 => format!(
                r#"{{"type":"BOOKMARK","object":{{"metadata":{{"resourceVersion":"{i}"}}}}}}"#
            ),
            _ => format!(
                r#"{{"type":"ERROR","object":{{"kind":"Status","status":"Failure","code":410,"reason":"Expired","message":"m{i}"}}}}"#
            ),
        }
    }

    fn decode_all(chunks: Vec<Bytes>) -> Vec<WatchEvent<Bytes>> {
        let mut d = LineDecoder::default();
        let mut out = Vec::new();
        for c in chunks {
            d.push(c);
            while let Some(l) = d.next_line().unwrap() {
                out.push(parse_event(&l, raw_object).unwrap());
            }
        }
        if let Some(l) = d.finish().unwrap() {
            out.push(parse_event(&l, raw_object).unwrap());
        }
        out
    }

    proptest! {
        #[test]
        fn splitting_anywhere_yields_the_same_events(
            kinds in proptest::collection::vec(0usize..4, 1..20),
            crlf in any::<bool>(),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..40),
        ) {
            let sep = if crlf { "\r\n" } else { "\n" };
            let stream: String = kinds
                .iter()
                .enumerate()
                .map(|(i, k)| format!("{}{sep}", event_line(i, *k)))
                .collect();
            let bytes = Bytes::from(stream.into_bytes());
            let whole = decode_all(vec![bytes.clone()]);
            prop_assert_eq!(whole.len(), kinds.len());

            let mut points: Vec<usize> = cuts.iter().map(|ix| ix.index(bytes.len() + 1)).collect();
            points.sort_unstable();
            points.dedup();
            let mut chunks = Vec::new();
            let mut prev = 0;
            for p in points {
                chunks.push(bytes.slice(prev..p));
                prev = p;
            }
            chunks.push(bytes.slice(prev..));
            prop_assert_eq!(decode_all(chunks), whole);
        }

        #[test]
        fn arbitrary_input_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300), cut in any::<proptest::sample::Index>()) {
            let bytes = Bytes::from(data);
            let at = cut.index(bytes.len() + 1);
            let mut d = LineDecoder::new(64);
            for c in [bytes.slice(..at), bytes.slice(at..)] {
                d.push(c);
                while let Ok(Some(l)) = d.next_line() {
                    let _ = parse_event(&l, raw_object);
                }
            }
        }
    }
}
