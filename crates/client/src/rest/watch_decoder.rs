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
//! * [`WatchStream`] drives both over an HTTP body, with an optional idle timeout.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::future::Future as _;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::Body as _;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt as _;
use serde::de::Error as _;
use serde::Deserialize;

use super::error::{decode_status, BoxError, Error};
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
    /// The unscanned rest of the latest chunk.
    current: Bytes,
    /// The beginning of a line that started in an earlier chunk.
    partial: BytesMut,
    max_line: usize,
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
            current: Bytes::new(),
            partial: BytesMut::new(),
            max_line,
        }
    }

    /// Adds the next chunk of the stream.
    pub fn push(&mut self, chunk: Bytes) {
        if !self.current.is_empty() {
            // Keep order if the caller pushes before draining.
            self.partial.extend_from_slice(&self.current);
        }
        self.current = chunk;
    }

    /// The number of bytes buffered but not yet returned as lines.
    pub fn buffered(&self) -> usize {
        self.partial.len() + self.current.len()
    }

    /// The next complete, non-blank line without its `\n` / `\r\n`, or `None` if more input
    /// is needed.
    ///
    /// # Errors
    /// [`Error::LineTooLong`] when a line exceeds the limit; the decoder should then be
    /// dropped (its state is unspecified).
    pub fn next_line(&mut self) -> Result<Option<Bytes>, Error> {
        loop {
            let Some(pos) = find_newline(&self.current) else {
                if self.buffered() > self.max_line {
                    return Err(Error::LineTooLong {
                        limit: self.max_line,
                    });
                }
                if !self.current.is_empty() {
                    let rest = std::mem::take(&mut self.current);
                    self.partial.extend_from_slice(&rest);
                }
                return Ok(None);
            };
            let line = if self.partial.is_empty() {
                let mut l = self.current.split_to(pos + 1);
                l.truncate(pos);
                l
            } else {
                let head = self.current.split_to(pos + 1);
                self.partial.extend_from_slice(&head[..pos]);
                self.partial.split().freeze()
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
        let rest = if self.partial.is_empty() {
            std::mem::take(&mut self.current)
        } else {
            let cur = std::mem::take(&mut self.current);
            self.partial.extend_from_slice(&cur);
            self.partial.split().freeze()
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
    fn into_decoded(self, line: &Bytes, decode: DecodeFn<T>) -> Result<T, serde_json::Error> {
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
    decode: DecodeFn<T>,
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

/// The body type a [`WatchStream`] reads.
pub type WatchBody = UnsyncBoxBody<Bytes, BoxError>;

/// Received bytes at which a run of complete lines is decoded on a decode thread instead
/// of in the reading task (see [`WatchStream`]): about 10 µs of decoding, well above what
/// handing the work over costs.
const PARALLEL_DECODE_BYTES: usize = 32 << 10;

/// Runs of lines in decoding at once per stream: enough to keep every decode thread busy
/// while the reading task receives the next run, and a bound on the memory they hold.
const PARALLEL_DECODE_JOBS: usize = 4;

/// The decoded results of a run of lines, in line order.
type Decoded<T> = Vec<Result<WatchEvent<T>, Error>>;

/// Received lines waiting to be handed out, in stream order.
enum Batch<T> {
    /// Few lines: decoded one by one as they are taken.
    Lines(VecDeque<Bytes>),
    /// A long run being decoded on a decode thread.
    Decoding(tokio::sync::oneshot::Receiver<Decoded<T>>),
    /// A run whose decoding finished.
    Decoded(std::vec::IntoIter<Result<WatchEvent<T>, Error>>),
}

/// The events of one watch, read from the response body as they arrive.
///
/// `next().await` yields each event in order; `None` means the server ended the stream
/// (e.g. `timeoutSeconds` elapsed, or after an ERROR event). A decode error on one event
/// is yielded and the stream continues with the next line; a transport error, an
/// over-long line or an idle timeout is yielded once and then the stream ends.
///
/// When events arrive faster than one thread decodes them (a received run of complete
/// lines of 32 KiB or more, as in a replay after a reconnect), the run is decoded on the
/// process's decode threads (one per core, see [`super::decode_pool`]) — at most four runs
/// at once — while this stream goes on receiving: the order of the events is unchanged. A few events at a time are decoded in
/// the caller's task, adding no latency.
///
/// `next` is cancel-safe: dropping its future (e.g. in `tokio::select!`) loses no data,
/// because bytes are only consumed once they are in the stream's buffer and runs being
/// decoded stay queued. The stream is `Send` when `T` is.
pub struct WatchStream<T> {
    body: WatchBody,
    lines: LineDecoder,
    decode: DecodeFn<T>,
    idle_timeout: Option<Duration>,
    context: String,
    /// Received complete lines not yet handed out, oldest first.
    batches: VecDeque<Batch<T>>,
    /// Runs handed to the decode threads so far.
    offloaded: u64,
    /// The stream ended; nothing more is yielded.
    done: bool,
    /// The body's end (`None`) or failure (`Some`), to be reported once `batches` is empty.
    pending_end: Option<Option<Error>>,
}

impl<T> fmt::Debug for WatchStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchStream")
            .field("context", &self.context)
            .field("idle_timeout", &self.idle_timeout)
            .field("buffered", &self.lines.buffered())
            .field("batches", &self.batches.len())
            .field("offloaded", &self.offloaded)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> WatchStream<T> {
    /// A stream over `body`. `context` names the request in errors (e.g. the URL);
    /// `idle_timeout`, when set, ends the stream with [`Error::IdleTimeout`] if no bytes
    /// arrive for that long (bookmarks keep a healthy watch alive).
    pub fn new(
        body: WatchBody,
        decode: DecodeFn<T>,
        idle_timeout: Option<Duration>,
        max_line: usize,
        context: impl Into<String>,
    ) -> WatchStream<T> {
        WatchStream {
            body,
            lines: LineDecoder::new(max_line),
            decode,
            idle_timeout,
            context: context.into(),
            batches: VecDeque::new(),
            offloaded: 0,
            done: false,
            pending_end: None,
        }
    }

    /// Sets or clears the idle timeout.
    pub fn set_idle_timeout(&mut self, idle_timeout: Option<Duration>) {
        self.idle_timeout = idle_timeout;
    }

    /// The next event, `None` at the end of the stream (see the type's docs).
    pub async fn next(&mut self) -> Option<Result<WatchEvent<T>, Error>> {
        loop {
            if let Some(event) = self.take_ready() {
                return Some(event);
            }
            let read_ahead = self.may_read();
            let WatchStream { batches, body, .. } = self;
            if let Some(Batch::Decoding(job)) = batches.front_mut() {
                // Receive the next run while this one is decoded.
                let frame = if read_ahead {
                    tokio::select! {
                        biased;
                        done = job => Err(done),
                        frame = body.frame() => Ok(frame),
                    }
                } else {
                    Err(job.await)
                };
                match frame {
                    Ok(frame) => self.take_frame(frame),
                    Err(done) => self.finish_front(done),
                }
                continue;
            }
            if self.done {
                return None;
            }
            if let Some(end) = self.pending_end.take() {
                return match end {
                    Some(e) => self.fail(e),
                    None => {
                        self.done = true;
                        None
                    }
                };
            }
            let frame = match self.idle_timeout {
                Some(d) => match tokio::time::timeout(d, self.body.frame()).await {
                    Ok(f) => f,
                    Err(_) => return self.fail(Error::IdleTimeout(d)),
                },
                None => self.body.frame().await,
            };
            self.take_frame(frame);
        }
    }

    /// The next event if one can be had without waiting: from a complete line already
    /// buffered, a finished decode, or from body data that is already available (the body is
    /// polled once, without registering for a wake-up). `None` means nothing is ready now —
    /// call [`WatchStream::next`] to wait, and to learn about the end of the stream (an end
    /// or a transport error met here is kept for `next` to report).
    pub fn try_next(&mut self) -> Option<Result<WatchEvent<T>, Error>> {
        use std::task::{Context, Poll, Waker};
        loop {
            if let Some(event) = self.take_ready() {
                return Some(event);
            }
            let mut cx = Context::from_waker(Waker::noop());
            let decoding = match self.batches.front_mut() {
                Some(Batch::Decoding(job)) => match std::pin::Pin::new(job).poll(&mut cx) {
                    Poll::Ready(done) => {
                        self.finish_front(done);
                        continue;
                    }
                    Poll::Pending => true,
                },
                _ => false,
            };
            if !self.may_read() {
                return None;
            }
            match std::pin::Pin::new(&mut self.body).poll_frame(&mut cx) {
                Poll::Ready(frame) => self.take_frame(frame),
                Poll::Pending => return None,
            }
            if decoding && !self.has_ready() {
                return None;
            }
        }
    }

    /// Whether more of the body may be read now: the stream goes on and does not hold as
    /// many runs in decoding as it may.
    fn may_read(&self) -> bool {
        !self.done
            && self.pending_end.is_none()
            && self
                .batches
                .iter()
                .filter(|b| matches!(b, Batch::Decoding(_)))
                .count()
                < PARALLEL_DECODE_JOBS
    }

    /// Whether the oldest batch has an event to hand out without waiting.
    fn has_ready(&self) -> bool {
        matches!(
            self.batches.front(),
            Some(Batch::Lines(_) | Batch::Decoded(_))
        )
    }

    /// The next event of the oldest batch, if it is not still being decoded.
    fn take_ready(&mut self) -> Option<Result<WatchEvent<T>, Error>> {
        loop {
            let event = match self.batches.front_mut()? {
                Batch::Lines(lines) => lines.pop_front().map(|l| parse_event(&l, self.decode)),
                Batch::Decoded(events) => events.next(),
                Batch::Decoding(_) => return None,
            };
            if event.is_some() {
                return event;
            }
            self.batches.pop_front();
        }
    }

    /// The oldest batch's decoding ended.
    fn finish_front(&mut self, done: Result<Decoded<T>, tokio::sync::oneshot::error::RecvError>) {
        match done {
            Ok(events) => {
                if let Some(front) = self.batches.front_mut() {
                    *front = Batch::Decoded(events.into_iter());
                }
            }
            Err(e) => {
                // Only a panic in the decoder gets here; the stream cannot go on without the
                // run's events.
                self.batches.clear();
                let context = format!("decoding the watch {}", self.context);
                self.pending_end = Some(Some(Error::transport(context, e)));
            }
        }
    }

    /// Takes what a poll of the body returned: data is cut into lines and queued, the end
    /// or a failure is kept for reporting after the queued lines.
    fn take_frame(&mut self, frame: Option<Result<http_body::Frame<Bytes>, BoxError>>) {
        match frame {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    self.lines.push(data);
                    self.cut_lines(false);
                }
            }
            Some(Err(e)) => {
                let context = format!("reading the watch {}", self.context);
                self.pending_end = Some(Some(Error::transport(context, e)));
            }
            // A last line without its newline is still an event.
            None => self.cut_lines(true),
        }
    }

    /// Queues the complete lines in the buffer (and at the `end` of the body, the rest):
    /// a long run is decoded on a decode thread, a short one as it is taken.
    fn cut_lines(&mut self, end: bool) {
        let mut lines = Vec::new();
        let mut bytes = 0;
        let mut failed = None;
        loop {
            match self.lines.next_line() {
                Ok(Some(line)) => {
                    bytes += line.len();
                    lines.push(line);
                }
                Ok(None) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if end && failed.is_none() {
            match self.lines.finish() {
                Ok(Some(line)) => lines.push(line),
                Ok(None) => {}
                Err(e) => failed = Some(e),
            }
        }
        self.queue_lines(lines, bytes);
        if let Some(e) = failed {
            self.lines = LineDecoder::new(0);
            self.pending_end = Some(Some(e));
        } else if end {
            self.pending_end = Some(None);
        }
    }

    fn queue_lines(&mut self, lines: Vec<Bytes>, bytes: usize) {
        if lines.is_empty() {
            return;
        }
        let lines = if bytes >= PARALLEL_DECODE_BYTES && lines.len() > 1 {
            let decode = self.decode;
            match super::decode_pool::submit(lines, move |lines| -> Decoded<T> {
                lines.iter().map(|l| parse_event(l, decode)).collect()
            }) {
                Ok(job) => {
                    self.offloaded += 1;
                    self.batches.push_back(Batch::Decoding(job));
                    return;
                }
                // No decode thread: decoded as they are taken.
                Err(lines) => lines,
            }
        } else {
            lines
        };
        match self.batches.back_mut() {
            Some(Batch::Lines(queued)) => queued.extend(lines),
            _ => self.batches.push_back(Batch::Lines(lines.into())),
        }
    }

    fn fail(&mut self, e: Error) -> Option<Result<WatchEvent<T>, Error>> {
        self.done = true;
        self.batches.clear();
        self.lines = LineDecoder::new(0);
        Some(Err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};

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

    /// A body fed from a channel, for driving a WatchStream in tests.
    struct ChanBody(tokio::sync::mpsc::Receiver<Result<Bytes, BoxError>>);

    impl http_body::Body for ChanBody {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
            self.0
                .poll_recv(cx)
                .map(|o| o.map(|r| r.map(http_body::Frame::data)))
        }
    }

    fn stream(
        idle: Option<Duration>,
    ) -> (
        tokio::sync::mpsc::Sender<Result<Bytes, BoxError>>,
        WatchStream<Bytes>,
    ) {
        stream_with_max_line(idle, 1024)
    }

    fn stream_with_max_line(
        idle: Option<Duration>,
        max_line: usize,
    ) -> (
        tokio::sync::mpsc::Sender<Result<Bytes, BoxError>>,
        WatchStream<Bytes>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let body = UnsyncBoxBody::new(ChanBody(rx));
        (
            tx,
            WatchStream::new(body, raw_object, idle, max_line, "test"),
        )
    }

    #[tokio::test]
    async fn stream_yields_events_then_ends() {
        let (tx, mut s) = stream(None);
        tx.send(Ok(Bytes::from_static(
            b"{\"type\":\"ADDED\",\"object\":{\"n\":1}}\n{\"type\":\"MOD",
        )))
        .await
        .unwrap();
        tx.send(Ok(Bytes::from_static(
            b"IFIED\",\"object\":{\"n\":2}}\nnonsense\n",
        )))
        .await
        .unwrap();
        tx.send(Ok(Bytes::from_static(
            b"{\"type\":\"DELETED\",\"object\":{\"n\":3}}",
        )))
        .await
        .unwrap();
        drop(tx);
        assert!(matches!(s.next().await, Some(Ok(WatchEvent::Added(_)))));
        assert!(matches!(s.next().await, Some(Ok(WatchEvent::Modified(_)))));
        // A bad line is reported and the stream goes on.
        assert!(matches!(s.next().await, Some(Err(Error::Decode { .. }))));
        // The last event lacks its newline: still delivered at the end.
        assert!(matches!(s.next().await, Some(Ok(WatchEvent::Deleted(_)))));
        assert!(s.next().await.is_none());
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn try_next_takes_only_what_is_there_and_leaves_the_end_to_next() {
        let (tx, mut s) = stream(None);
        assert!(s.try_next().is_none(), "nothing sent yet");
        tx.send(Ok(Bytes::from_static(
            b"{\"type\":\"ADDED\",\"object\":{\"n\":1}}\n{\"type\":\"MODIFIED\",\"obj",
        )))
        .await
        .unwrap();
        assert!(matches!(s.try_next(), Some(Ok(WatchEvent::Added(_)))));
        // Half a line is not an event.
        assert!(s.try_next().is_none());
        tx.send(Ok(Bytes::from_static(b"ect\":{\"n\":2}}\n")))
            .await
            .unwrap();
        assert!(matches!(s.try_next(), Some(Ok(WatchEvent::Modified(_)))));
        // The end of the body is met by `try_next`, which still hands out the last line
        // (it lacks its newline), but only `next` reports the end.
        tx.send(Ok(Bytes::from_static(
            b"{\"type\":\"DELETED\",\"object\":{\"n\":3}}",
        )))
        .await
        .unwrap();
        drop(tx);
        assert!(matches!(s.try_next(), Some(Ok(WatchEvent::Deleted(_)))));
        assert!(s.try_next().is_none());
        assert!(s.try_next().is_none());
        assert!(s.next().await.is_none());
        assert!(s.next().await.is_none());
        // A transport error met by `try_next` is reported by `next`.
        let (tx, mut s) = stream(None);
        tx.send(Err("reset".into())).await.unwrap();
        assert!(s.try_next().is_none());
        assert!(matches!(s.next().await, Some(Err(Error::Transport { .. }))));
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn transport_errors_end_the_stream() {
        let (tx, mut s) = stream(None);
        tx.send(Err("connection reset".into())).await.unwrap();
        let e = s.next().await.unwrap().unwrap_err();
        assert!(matches!(e, Error::Transport { .. }), "{e}");
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn over_long_lines_end_the_stream() {
        let (tx, mut s) = stream(None);
        tx.send(Ok(Bytes::from(vec![b'x'; 2000]))).await.unwrap();
        assert!(matches!(
            s.next().await,
            Some(Err(Error::LineTooLong { limit: 1024 }))
        ));
        assert!(s.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn idle_timeout_fires_only_without_bytes() {
        let (tx, mut s) = stream(Some(Duration::from_secs(10)));
        let feeder = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(6)).await;
                let line = b"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"1\"}}}\n";
                tx.send(Ok(Bytes::from_static(line))).await.unwrap();
            }
            // Then silence, with the sender kept open.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(tx);
        });
        for _ in 0..3 {
            assert!(matches!(
                s.next().await,
                Some(Ok(WatchEvent::Bookmark { .. }))
            ));
        }
        let start = tokio::time::Instant::now();
        let e = s.next().await.unwrap().unwrap_err();
        assert!(matches!(e, Error::IdleTimeout(d) if d == Duration::from_secs(10)));
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert!(s.next().await.is_none());
        feeder.abort();
    }

    #[test]
    fn streams_and_clients_are_send() {
        fn send<X: Send>() {}
        fn sync<X: Send + Sync>() {}
        send::<WatchStream<k8s_openapi::api::core::v1::Pod>>();
        sync::<crate::rest::Client>();
        sync::<crate::rest::Api<k8s_openapi::api::core::v1::Pod>>();
    }

    #[tokio::test]
    async fn next_is_cancel_safe() {
        let (tx, mut s) = stream(None);
        // Cancel a pending `next` before any byte arrives.
        let r = tokio::time::timeout(Duration::from_millis(10), s.next()).await;
        assert!(r.is_err());
        tx.send(Ok(Bytes::from_static(
            b"{\"type\":\"ADDED\",\"object\":{}}\n",
        )))
        .await
        .unwrap();
        assert!(matches!(s.next().await, Some(Ok(WatchEvent::Added(_)))));
    }

    /// `n` ADDED lines of about 1 KiB whose objects carry their number, from `first`; the
    /// line of number `bad` is malformed.
    fn padded_lines(first: usize, n: usize, bad: Option<usize>) -> String {
        let pad = "p".repeat(1000);
        (first..first + n)
            .map(|i| {
                if Some(i) == bad {
                    format!("{{\"type\":\"ADDED\",\"object\":{{\"n\":{i},\"pad\":\"{pad}\"}}\n")
                } else {
                    format!("{{\"type\":\"ADDED\",\"object\":{{\"n\":{i},\"pad\":\"{pad}\"}}}}\n")
                }
            })
            .collect()
    }

    /// The number an event of [`padded_lines`] carries, or `None` for a decode error.
    fn number(event: Result<WatchEvent<Bytes>, Error>) -> Option<usize> {
        match event {
            Ok(WatchEvent::Added(o)) => {
                let v: serde_json::Value = serde_json::from_slice(&o).unwrap();
                Some(v["n"].as_u64().unwrap() as usize)
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(Error::Decode { .. }) => None,
            Err(e) => panic!("unexpected error {e}"),
        }
    }

    /// Long runs (decoded on the decode threads) and short ones (decoded in place) come out
    /// in stream order, decode errors where their line was, the unterminated last line and
    /// the end after everything else.
    #[tokio::test]
    async fn long_runs_decoded_off_the_task_keep_stream_order() {
        let (tx, mut s) = stream_with_max_line(None, 1 << 20);
        let mut want = Vec::new();
        let mut first = 0;
        for (n, bad) in [(40, None), (60, Some(70)), (2, None), (50, None)] {
            let text = padded_lines(first, n, bad);
            want.extend((first..first + n).map(|i| (Some(i) != bad).then_some(i)));
            // A chunk boundary inside a line, too.
            let bytes = Bytes::from(text.into_bytes());
            let cut = bytes.len() / 3;
            tx.send(Ok(bytes.slice(..cut))).await.unwrap();
            tx.send(Ok(bytes.slice(cut..))).await.unwrap();
            first += n;
        }
        let last = padded_lines(first, 1, None);
        tx.send(Ok(Bytes::from(last.trim_end().to_string())))
            .await
            .unwrap();
        want.push(Some(first));
        drop(tx);
        let mut got = Vec::new();
        while let Some(event) = s.next().await {
            got.push(number(event));
        }
        assert_eq!(got, want);
        assert!(s.offloaded >= 2, "{s:?}");
    }

    /// `try_next` hands out decoded runs in order without waiting, and leaves a transport
    /// error met behind them for `next`, after the events.
    #[tokio::test]
    async fn try_next_takes_decoded_runs_in_order_and_errors_come_last() {
        let (tx, mut s) = stream_with_max_line(None, 1 << 20);
        for first in [0, 40] {
            tx.send(Ok(Bytes::from(padded_lines(first, 40, None).into_bytes())))
                .await
                .unwrap();
        }
        tx.send(Err("reset".into())).await.unwrap();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while got.len() < 80 && std::time::Instant::now() < deadline {
            match s.try_next() {
                Some(event) => got.push(number(event)),
                None => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
        assert_eq!(got, (0..80).map(Some).collect::<Vec<_>>());
        assert_eq!(s.offloaded, 2);
        assert!(s.try_next().is_none());
        assert!(matches!(s.next().await, Some(Err(Error::Transport { .. }))));
        assert!(s.next().await.is_none());
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
