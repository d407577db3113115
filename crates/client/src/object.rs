//! The object abstraction the client's caches work with.
//!
//! Every cache in [`crate::cache`] is generic over [`KubeObject`]: the few metadata fields a
//! cache needs (namespace and name for the key, resourceVersion, uid, labels for indexing).
//! Objects are shared as `Arc<K>` and are **read-only** once they enter a cache: a handler or
//! a lister that wants to change one must build a new value.
//!
//! [`DynamicObject`] is the implementation for any kind: the object's JSON kept as received
//! (`bytes::Bytes`) plus the handful of metadata fields the caches need, packed into one small
//! buffer, so the memory an object costs stays close to the size of its JSON. Labels are read
//! through the [`Labels`] view, which works over a typed object's `BTreeMap` and over a
//! `DynamicObject`'s packed text alike.

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;
use std::collections::{btree_map, BTreeMap};
use std::fmt;

use crate::json_validate::{unescape, JsonError, Validator};

/// Read access to the metadata of a Kubernetes object, as the caches need it.
///
/// Contract:
/// - `name()` and `namespace()` identify the object; together they make its cache key
///   (see [`crate::cache::key`]). `namespace()` is `None` (or `Some("")`, treated the same)
///   for cluster-scoped objects.
/// - The accessors are cheap and borrow from the object; they never fail. A missing field
///   reads as `None` (or `""` for the name).
/// - Implementations must be immutable through `&self`: the caches hand out `Arc<K>` to many
///   readers at once and rely on an object never changing after it was stored.
///
/// The accessor shapes follow the typed Kubernetes metadata (optional strings, an optional
/// labels map seen through [`Labels`]), so typed objects implement the trait by borrowing
/// from their metadata.
pub trait KubeObject: Send + Sync + 'static {
    /// `metadata.namespace`, if the object has one.
    fn namespace(&self) -> Option<&str>;
    /// `metadata.name`, or `""` if absent.
    fn name(&self) -> &str;
    /// `metadata.resourceVersion`, if set.
    fn resource_version(&self) -> Option<&str>;
    /// `metadata.uid`, if set.
    fn uid(&self) -> Option<&str>;
    /// `metadata.labels`, if the object has a labels map (possibly empty).
    fn labels(&self) -> Option<Labels<'_>>;
}

/// A read-only view of an object's labels: a map from label key to value, iterated in key
/// order, each key once.
///
/// It borrows a typed object's `BTreeMap`, a [`DynamicObject`]'s packed metadata or a
/// [`ProtobufObject`](crate::protobuf_object::ProtobufObject)'s message; all behave the
/// same. It implements [`api::labels::LabelSet`], so label selectors match it directly.
#[derive(Clone, Copy)]
pub struct Labels<'a> {
    repr: LabelsRepr<'a>,
}

#[derive(Clone, Copy)]
enum LabelsRepr<'a> {
    Map(&'a BTreeMap<String, String>),
    /// Pairs sorted by key, keys unique. Pair `i` is key `text[end(2i-1)..ends[2i]]` and value
    /// `text[ends[2i]..ends[2i+1]]`, with `end(-1) = start`.
    Packed {
        text: &'a str,
        start: usize,
        ends: &'a [u32],
    },
    /// Pairs sorted by key, keys unique, as byte ranges of `bytes` (a protobuf message whose
    /// strings were checked to be UTF-8 when it was read).
    Spans {
        bytes: &'a [u8],
        spans: &'a [LabelSpan],
    },
}

/// Where one label lies in the buffer it was read from: key start and end, value start and
/// end.
pub(crate) type LabelSpan = [u32; 4];

/// The text of `bytes[start..end]`, or `""` if that is out of range or not UTF-8 (neither
/// happens for spans recorded when the buffer was read).
pub(crate) fn span_str(bytes: &[u8], start: u32, end: u32) -> &str {
    bytes
        .get(start as usize..end as usize)
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or("")
}

fn span_key<'a>(bytes: &'a [u8], span: &LabelSpan) -> &'a [u8] {
    bytes
        .get(span[0] as usize..span[1] as usize)
        .unwrap_or_default()
}

fn span_pair<'a>(bytes: &'a [u8], span: &LabelSpan) -> (&'a str, &'a str) {
    (
        span_str(bytes, span[0], span[1]),
        span_str(bytes, span[2], span[3]),
    )
}

/// Labels read from `bytes` at `spans` (sorted by key, keys unique).
pub(crate) fn labels_at<'a>(bytes: &'a [u8], spans: &'a [LabelSpan]) -> Labels<'a> {
    Labels {
        repr: LabelsRepr::Spans { bytes, spans },
    }
}

fn packed_pair<'a>(text: &'a str, start: usize, ends: &[u32], i: usize) -> (&'a str, &'a str) {
    let k0 = if i == 0 {
        start
    } else {
        ends.get(2 * i - 1).map_or(start, |&e| e as usize)
    };
    let k1 = ends.get(2 * i).map_or(k0, |&e| e as usize);
    let v1 = ends.get(2 * i + 1).map_or(k1, |&e| e as usize);
    (
        text.get(k0..k1).unwrap_or(""),
        text.get(k1..v1).unwrap_or(""),
    )
}

impl<'a> Labels<'a> {
    /// The number of labels.
    pub fn len(&self) -> usize {
        match self.repr {
            LabelsRepr::Map(m) => m.len(),
            LabelsRepr::Packed { ends, .. } => ends.len() / 2,
            LabelsRepr::Spans { spans, .. } => spans.len(),
        }
    }

    /// Whether there is no label.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        match self.repr {
            LabelsRepr::Map(m) => m.get(key).map(String::as_str),
            LabelsRepr::Packed { text, start, ends } => {
                let (mut lo, mut hi) = (0, ends.len() / 2);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    let (k, v) = packed_pair(text, start, ends, mid);
                    match k.cmp(key) {
                        std::cmp::Ordering::Less => lo = mid + 1,
                        std::cmp::Ordering::Greater => hi = mid,
                        std::cmp::Ordering::Equal => return Some(v),
                    }
                }
                None
            }
            LabelsRepr::Spans { bytes, spans } => {
                // Byte order is the order of the strings.
                let i = spans
                    .binary_search_by(|s| span_key(bytes, s).cmp(key.as_bytes()))
                    .ok()?;
                spans.get(i).map(|s| span_str(bytes, s[2], s[3]))
            }
        }
    }

    /// Whether label `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The `(key, value)` pairs in key order.
    pub fn iter(&self) -> LabelsIter<'a> {
        LabelsIter {
            inner: match self.repr {
                LabelsRepr::Map(m) => IterRepr::Map(m.iter()),
                LabelsRepr::Packed { text, start, ends } => IterRepr::Packed {
                    text,
                    start,
                    ends,
                    next: 0,
                },
                LabelsRepr::Spans { bytes, spans } => IterRepr::Spans {
                    bytes,
                    spans: spans.iter(),
                },
            },
        }
    }

    /// An owned copy of the labels.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

impl<'a> From<&'a BTreeMap<String, String>> for Labels<'a> {
    fn from(map: &'a BTreeMap<String, String>) -> Self {
        Labels {
            repr: LabelsRepr::Map(map),
        }
    }
}

impl api::labels::LabelSet for Labels<'_> {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

impl PartialEq for Labels<'_> {
    /// Equal when both hold the same pairs.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Labels<'_> {}

impl fmt::Debug for Labels<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for Labels<'a> {
    type Item = (&'a str, &'a str);
    type IntoIter = LabelsIter<'a>;
    fn into_iter(self) -> LabelsIter<'a> {
        self.iter()
    }
}

/// The iterator of [`Labels::iter`]: `(key, value)` pairs in key order.
pub struct LabelsIter<'a> {
    inner: IterRepr<'a>,
}

enum IterRepr<'a> {
    Map(btree_map::Iter<'a, String, String>),
    Packed {
        text: &'a str,
        start: usize,
        ends: &'a [u32],
        next: usize,
    },
    Spans {
        bytes: &'a [u8],
        spans: std::slice::Iter<'a, LabelSpan>,
    },
}

impl<'a> Iterator for LabelsIter<'a> {
    type Item = (&'a str, &'a str);
    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            IterRepr::Map(it) => it.next().map(|(k, v)| (k.as_str(), v.as_str())),
            IterRepr::Packed {
                text,
                start,
                ends,
                next,
            } => {
                if *next >= ends.len() / 2 {
                    return None;
                }
                let pair = packed_pair(text, *start, ends, *next);
                *next += 1;
                Some(pair)
            }
            IterRepr::Spans { bytes, spans } => spans.next().map(|s| span_pair(bytes, s)),
        }
    }
}

/// Why bytes could not be turned into an object ([`DynamicObject`], a typed object, or a
/// [`ProtobufObject`](crate::protobuf_object::ProtobufObject)).
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The bytes are not well-formed JSON, not a JSON object, or `metadata` has fields of
    /// the wrong type (for example a label value that is not a string).
    #[error("invalid object JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The bytes are not a well-formed protobuf message as far as it was read, or the
    /// object type is not read from protobuf at all.
    #[error("invalid object protobuf: {0}")]
    Protobuf(#[from] crate::protobuf_wire::WireError),
}

/// A read-only Kubernetes object of any kind: its JSON exactly as received, plus the
/// metadata the caches need.
///
/// Memory: the JSON bytes, and one small buffer holding the name, namespace,
/// resourceVersion, uid and labels (unescaped, concatenated) with their offsets — no
/// `serde_json::Value` tree, no per-field allocations. Use [`DynamicObject::to_value`] (or
/// [`DynamicObject::to_object`]) to parse the whole object on demand.
///
/// Cloning is cheap for the JSON (a reference count) but copies the small metadata buffer;
/// share objects as `Arc<DynamicObject>` as the caches do.
#[derive(Clone, PartialEq, Eq)]
pub struct DynamicObject {
    json: Bytes,
    meta: PackedMeta,
}

pub(crate) const HAS_NAMESPACE: u8 = 1;
pub(crate) const HAS_RESOURCE_VERSION: u8 = 2;
pub(crate) const HAS_UID: u8 = 4;
pub(crate) const HAS_LABELS: u8 = 8;

/// Label key/value pairs as read, borrowed from the input where no unescaping was needed.
type Pairs<'a> = Vec<(Cow<'a, str>, Cow<'a, str>)>;

/// The metadata fields the caches need, as read from an object's JSON by [`object_at`],
/// borrowed from the input where possible.
#[derive(Default)]
struct MetaParts<'a> {
    name: Option<Cow<'a, str>>,
    namespace: Option<Cow<'a, str>>,
    resource_version: Option<Cow<'a, str>>,
    uid: Option<Cow<'a, str>>,
    labels: Option<Pairs<'a>>,
}

fn scan_error(what: &str, at: usize) -> serde_json::Error {
    <serde_json::Error as serde::de::Error>::custom(format!("{what} at byte {at}"))
}

fn json_error(e: JsonError) -> serde_json::Error {
    scan_error(e.what, e.at)
}

/// The text of a validated string: borrowed when it has no escapes (a validated string is
/// UTF-8), unescaped by `serde_json` otherwise (rare in metadata).
fn string_at<'a>(v: &mut Validator<'a>) -> Result<Cow<'a, str>, serde_json::Error> {
    let at = v.pos();
    let (raw, escaped) = v.string().map_err(json_error)?;
    if escaped {
        Ok(Cow::Owned(unescape(raw)?))
    } else {
        std::str::from_utf8(raw)
            .map(Cow::Borrowed)
            .map_err(|_| scan_error("invalid UTF-8 in a string", at))
    }
}

/// A member name, as bytes to compare with the names looked for: borrowed when it has no
/// escapes (no UTF-8 check needed for a comparison), unescaped otherwise.
fn key_at<'a>(v: &mut Validator<'a>) -> Result<Cow<'a, [u8]>, serde_json::Error> {
    let (raw, escaped) = v.string().map_err(json_error)?;
    if escaped {
        Ok(Cow::Owned(unescape(raw)?.into_bytes()))
    } else {
        Ok(Cow::Borrowed(raw))
    }
}

/// `null` (→ `None`) or a string.
fn opt_string_at<'a>(v: &mut Validator<'a>) -> Result<Option<Cow<'a, str>>, serde_json::Error> {
    if v.null().map_err(json_error)? {
        Ok(None)
    } else {
        string_at(v).map(Some)
    }
}

/// `null` or an object of string values.
fn opt_string_map_at<'a>(v: &mut Validator<'a>) -> Result<Option<Pairs<'a>>, serde_json::Error> {
    if v.null().map_err(json_error)? {
        return Ok(None);
    }
    v.expect(b'{', "expected an object").map_err(json_error)?;
    let mut pairs = Vec::new();
    if v.peek() == Some(b'}') {
        v.expect(b'}', "").map_err(json_error)?;
        return Ok(Some(pairs));
    }
    loop {
        let key = string_at(v)?;
        v.expect(b':', "expected `:`").map_err(json_error)?;
        let value = string_at(v)?;
        pairs.push((key, value));
        if !v.next_member(b'}').map_err(json_error)? {
            return Ok(Some(pairs));
        }
    }
}

/// The members of a `metadata` object (the cursor is at its `{`): the fields the caches need
/// are read, every other value is validated and passed over. Of repeated keys the last one
/// counts.
fn metadata_at<'a>(v: &mut Validator<'a>) -> Result<MetaParts<'a>, serde_json::Error> {
    let mut meta = MetaParts::default();
    v.expect(b'{', "metadata: expected an object")
        .map_err(json_error)?;
    if v.peek() == Some(b'}') {
        v.expect(b'}', "").map_err(json_error)?;
        return Ok(meta);
    }
    loop {
        let key = key_at(v)?;
        v.expect(b':', "expected `:`").map_err(json_error)?;
        match key.as_ref() {
            b"name" => meta.name = opt_string_at(v)?,
            b"namespace" => meta.namespace = opt_string_at(v)?,
            b"resourceVersion" => meta.resource_version = opt_string_at(v)?,
            b"uid" => meta.uid = opt_string_at(v)?,
            b"labels" => meta.labels = opt_string_map_at(v)?,
            _ => {
                v.value().map_err(json_error)?;
            }
        }
        if !v.next_member(b'}').map_err(json_error)? {
            return Ok(meta);
        }
    }
}

/// How far [`object_at`] reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Extent {
    /// The whole object, every byte validated.
    Whole,
    /// Up to the end of its first `metadata` (for text already known to be well-formed).
    ThroughMetadata,
}

/// Reads one JSON object at the cursor in a single pass — validating what it passes over
/// and picking the caches' metadata fields out of the first top-level `metadata` on the
/// way — and returns them with the object's span (`None` when it stopped after the
/// metadata). A later repeated `metadata` is validated and ignored.
fn object_at<'a>(
    v: &mut Validator<'a>,
    extent: Extent,
) -> Result<(MetaParts<'a>, Option<(usize, usize)>), serde_json::Error> {
    if v.peek() != Some(b'{') {
        return Err(scan_error("expected a JSON object", v.pos()));
    }
    let start = v.pos();
    v.expect(b'{', "").map_err(json_error)?;
    let mut meta = None;
    if v.peek() == Some(b'}') {
        v.expect(b'}', "").map_err(json_error)?;
    } else {
        loop {
            let key = key_at(v)?;
            v.expect(b':', "expected `:`").map_err(json_error)?;
            if key.as_ref() == b"metadata" && meta.is_none() {
                let parts = if v.null().map_err(json_error)? {
                    MetaParts::default()
                } else {
                    metadata_at(v)?
                };
                if extent == Extent::ThroughMetadata {
                    return Ok((parts, None));
                }
                meta = Some(parts);
            } else {
                v.value().map_err(json_error)?;
            }
            if !v.next_member(b'}').map_err(json_error)? {
                break;
            }
        }
    }
    Ok((meta.unwrap_or_default(), Some((start, v.pos()))))
}

fn offset(len: usize) -> Result<u32, ObjectError> {
    u32::try_from(len).map_err(|_| ObjectError::Json(scan_error("metadata too large", 0)))
}

/// An object's cache metadata packed into one small buffer: what [`DynamicObject`] keeps
/// besides its bytes (JSON strings may be escaped, so they are stored unescaped).
#[derive(Clone, PartialEq, Eq)]
struct PackedMeta {
    /// name, namespace, resourceVersion, uid, then each label key and value (labels sorted
    /// by key), unescaped and concatenated.
    text: Box<str>,
    /// End offsets in `text` of the name, namespace, resourceVersion and uid.
    ends: [u32; 4],
    /// Which of namespace, resourceVersion, uid and labels are present (bits 0 to 3).
    present: u8,
    /// End offsets in `text` of each label key and value, in order.
    label_ends: Box<[u32]>,
}

impl PackedMeta {
    /// Field `i` of the packed text (0 name, 1 namespace, 2 resourceVersion, 3 uid).
    fn field(&self, i: usize) -> &str {
        let start = if i == 0 {
            0
        } else {
            self.ends.get(i - 1).map_or(0, |&e| e as usize)
        };
        let end = self.ends.get(i).map_or(start, |&e| e as usize);
        self.text.get(start..end).unwrap_or("")
    }

    fn optional(&self, i: usize, bit: u8) -> Option<&str> {
        (self.present & bit != 0).then(|| self.field(i))
    }

    fn labels_view(&self) -> Option<Labels<'_>> {
        (self.present & HAS_LABELS != 0).then(|| Labels {
            repr: LabelsRepr::Packed {
                text: &self.text,
                start: self.ends[3] as usize,
                ends: &self.label_ends,
            },
        })
    }

    /// The heap bytes this holds (allocator overhead not counted).
    fn heap_size(&self) -> usize {
        self.text.len() + self.label_ends.len() * std::mem::size_of::<u32>()
    }
}

/// Packs the metadata fields into one buffer with their end offsets.
fn pack(meta: MetaParts<'_>) -> Result<PackedMeta, ObjectError> {
    let mut labels = meta.labels;
    let mut present = 0u8;
    let mut len = meta.name.as_ref().map_or(0, |s| s.len());
    for (field, bit) in [
        (&meta.namespace, HAS_NAMESPACE),
        (&meta.resource_version, HAS_RESOURCE_VERSION),
        (&meta.uid, HAS_UID),
    ] {
        if let Some(s) = field {
            present |= bit;
            len += s.len();
        }
    }
    if let Some(pairs) = &mut labels {
        present |= HAS_LABELS;
        // Key order, each key once (the last occurrence wins, as in a JSON map). The sort is
        // stable, so of a run of equal keys the last is the latest; the dedup keeps it in
        // place of the first.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        len += pairs.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    }
    let mut text = String::with_capacity(len);
    let mut ends = [0u32; 4];
    for (i, field) in [
        &meta.name,
        &meta.namespace,
        &meta.resource_version,
        &meta.uid,
    ]
    .into_iter()
    .enumerate()
    {
        if let Some(s) = field {
            text.push_str(s);
        }
        ends[i] = offset(text.len())?;
    }
    let mut label_ends = Vec::with_capacity(labels.as_ref().map_or(0, |l| 2 * l.len()));
    for (k, v) in labels.iter().flatten() {
        text.push_str(k);
        label_ends.push(offset(text.len())?);
        text.push_str(v);
        label_ends.push(offset(text.len())?);
    }
    Ok(PackedMeta {
        text: text.into_boxed_str(),
        ends,
        present,
        label_ends: label_ends.into_boxed_slice(),
    })
}

impl DynamicObject {
    /// Parses the metadata of `json` and keeps the bytes as they are.
    ///
    /// The whole input must be one well-formed JSON object (it is validated in full);
    /// fields other than `metadata`'s name, namespace, resourceVersion, uid and labels are
    /// not interpreted. Missing metadata reads as absent (an object without a name has the
    /// name `""`); of keys repeated inside `metadata` the last one counts (of a repeated
    /// `metadata` member, the first).
    ///
    /// The bytes are kept as given: if `json` is a slice of a larger buffer (for example one
    /// item of a list response), the whole buffer stays alive as long as this object does. Use
    /// [`DynamicObject::from_slice`] to keep a compact private copy instead.
    pub fn from_json(json: Bytes) -> Result<DynamicObject, ObjectError> {
        let mut v = Validator::new(&json);
        let (meta, _) = object_at(&mut v, Extent::Whole)?;
        v.end().map_err(json_error)?;
        let packed = pack(meta)?;
        Ok(DynamicObject { json, meta: packed })
    }

    /// Like [`DynamicObject::from_json`] for text the caller already knows to be well-formed
    /// JSON (for example the raw text of a list item, which the enclosing parse validated):
    /// only the object's beginning up to the end of its `metadata` is read, the rest is not
    /// validated again.
    ///
    /// On text that is not well-formed it still never panics: it fails, or — if the fault
    /// lies outside the parts it reads — returns an object whose JSON will fail to parse in
    /// [`DynamicObject::to_value`].
    pub fn from_well_formed(json: Bytes) -> Result<DynamicObject, ObjectError> {
        let (meta, _) = object_at(&mut Validator::new(&json), Extent::ThroughMetadata)?;
        let packed = pack(meta)?;
        Ok(DynamicObject { json, meta: packed })
    }

    /// Reads the JSON object at the cursor — validating all of it and picking out the
    /// metadata in the same pass — into an object with a compact copy of its text. The
    /// watch decoder calls this in the middle of an event line, so an event's object is read
    /// once, not validated and then scanned again.
    ///
    /// # Errors
    /// As [`DynamicObject::from_json`]; the cursor is then somewhere inside the value.
    pub fn read(v: &mut Validator<'_>) -> Result<DynamicObject, ObjectError> {
        let (meta, span) = object_at(v, Extent::Whole)?;
        let json = span
            .and_then(|(start, end)| v.text().get(start..end))
            .unwrap_or_default();
        let packed = pack(meta)?;
        Ok(DynamicObject {
            json: Bytes::copy_from_slice(json),
            meta: packed,
        })
    }

    /// Like [`DynamicObject::from_json`], copying `json` into a buffer of its own.
    pub fn from_slice(json: &[u8]) -> Result<DynamicObject, ObjectError> {
        DynamicObject::from_json(Bytes::copy_from_slice(json))
    }

    /// Serializes an [`api::Object`] and wraps the result.
    pub fn from_object(object: &api::Object) -> Result<DynamicObject, ObjectError> {
        DynamicObject::from_well_formed(Bytes::from(serde_json::to_vec(object)?))
    }

    /// The object's JSON, exactly as it was given (a cheap reference-counted handle).
    pub fn json(&self) -> &Bytes {
        &self.json
    }

    /// Parses the whole object into a JSON value. Costs a full parse on every call.
    pub fn to_value(&self) -> Result<serde_json::Value, ObjectError> {
        Ok(serde_json::from_slice(&self.json)?)
    }

    /// Parses the whole object into the wire model's [`api::Object`]. Costs a full parse on
    /// every call.
    pub fn to_object(&self) -> Result<api::Object, ObjectError> {
        Ok(serde_json::from_slice(&self.json)?)
    }

    /// An estimate of the bytes this object holds: the JSON, the metadata buffer and its
    /// offsets, and the struct itself. Shared JSON buffers are counted in full; allocator
    /// overhead is not counted.
    pub fn approx_size(&self) -> usize {
        std::mem::size_of::<DynamicObject>() + self.json.len() + self.meta.heap_size()
    }
}

/// Implements [`KubeObject`] for a type whose metadata is four strings (0 name, 1 namespace,
/// 2 resourceVersion, 3 uid) read by `field`/`optional`, plus `labels_view`, on the type
/// itself or on its field `$via`.
macro_rules! kube_object_from_fields {
    ($t:ty $(, $via:ident)?) => {
        impl $crate::object::KubeObject for $t {
            fn namespace(&self) -> Option<&str> {
                self$(.$via)?.optional(1, $crate::object::HAS_NAMESPACE)
            }
            fn name(&self) -> &str {
                self$(.$via)?.field(0)
            }
            fn resource_version(&self) -> Option<&str> {
                self$(.$via)?.optional(2, $crate::object::HAS_RESOURCE_VERSION)
            }
            fn uid(&self) -> Option<&str> {
                self$(.$via)?.optional(3, $crate::object::HAS_UID)
            }
            fn labels(&self) -> Option<$crate::object::Labels<'_>> {
                self$(.$via)?.labels_view()
            }
        }
    };
}
pub(crate) use kube_object_from_fields;

kube_object_from_fields!(DynamicObject, meta);

/// Typed `k8s-openapi` objects (`Pod`, `Node`, `ConfigMap`, ...) are [`KubeObject`]s through
/// their `metadata`, so informers, stores and listers work with them unchanged.
impl<T> KubeObject for T
where
    T: k8s_openapi::Metadata<Ty = ObjectMeta> + Send + Sync + 'static,
{
    fn namespace(&self) -> Option<&str> {
        self.metadata().namespace.as_deref()
    }
    fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or("")
    }
    fn resource_version(&self) -> Option<&str> {
        self.metadata().resource_version.as_deref()
    }
    fn uid(&self) -> Option<&str> {
        self.metadata().uid.as_deref()
    }
    fn labels(&self) -> Option<Labels<'_>> {
        self.metadata().labels.as_ref().map(Labels::from)
    }
}

/// Objects that can be built from the JSON text of one object, as a list item or a watch
/// event carries it; what [`crate::cache::RestListerWatcher`] decodes with.
///
/// Contract: `decode` reads exactly one JSON object and keeps no reference to `json`'s
/// buffer (a list page or a received chunk holds many objects; an object that outlived its
/// neighbours must not keep them in memory).
pub trait DecodeObject: KubeObject + Sized {
    /// Whether objects of this type are read from Kubernetes' protobuf encoding: a
    /// [`crate::cache::RestListerWatcher`] of such a type lists and watches with
    /// `Accept: application/vnd.kubernetes.protobuf` and decodes every object with
    /// [`DecodeObject::decode_protobuf`]. `false` (JSON) unless the type says otherwise.
    const PROTOBUF: bool = false;

    /// Builds the object from its own protobuf message: a list item, or the `raw` of a watch
    /// event's enveloped object. Same buffer contract as [`DecodeObject::decode`].
    ///
    /// # Errors
    /// [`ObjectError::Protobuf`]; the default always fails (the type is read from JSON).
    fn decode_protobuf(message: &[u8]) -> Result<Self, ObjectError> {
        let _ = message;
        Err(ObjectError::Protobuf(crate::protobuf_wire::WireError {
            what: "this object type is read from JSON, not protobuf",
            at: 0,
        }))
    }

    /// Builds the object from its JSON text.
    ///
    /// # Errors
    /// [`ObjectError::Json`] if the text is not a well-formed object of this type.
    fn decode(json: &[u8]) -> Result<Self, ObjectError>;

    /// Like [`DecodeObject::decode`], for text the caller already validated as well-formed
    /// JSON (the raw text of a list item or of a watch event's object): an implementation may
    /// skip validating it again. It must still never panic on any input. The default is
    /// `decode`.
    ///
    /// # Errors
    /// As [`DecodeObject::decode`], except that faults in parts the implementation does not
    /// read may go unnoticed.
    fn decode_well_formed(json: &[u8]) -> Result<Self, ObjectError> {
        Self::decode(json)
    }

    /// Builds the object from the JSON value at the cursor, leaving the cursor just after
    /// it; every byte of the value must be validated on the way. The watch decoder calls
    /// this in the middle of an event line. The default validates the value, then decodes
    /// its text with [`DecodeObject::decode_well_formed`].
    ///
    /// # Errors
    /// As [`DecodeObject::decode`].
    fn decode_at(v: &mut Validator<'_>) -> Result<Self, ObjectError> {
        let (start, end) = v.value().map_err(json_error)?;
        Self::decode_well_formed(v.text().get(start..end).unwrap_or_default())
    }
}

/// The fast path: only the metadata the caches need is read (no JSON tree is built), and
/// the text is copied into a buffer of its own, exactly as long as the object.
impl DecodeObject for DynamicObject {
    fn decode(json: &[u8]) -> Result<Self, ObjectError> {
        DynamicObject::from_slice(json)
    }
    fn decode_well_formed(json: &[u8]) -> Result<Self, ObjectError> {
        DynamicObject::from_well_formed(Bytes::copy_from_slice(json))
    }
    fn decode_at(v: &mut Validator<'_>) -> Result<Self, ObjectError> {
        DynamicObject::read(v)
    }
}

/// Typed objects are decoded with `serde` straight from the text.
impl<T> DecodeObject for T
where
    T: k8s_openapi::Metadata<Ty = ObjectMeta> + DeserializeOwned + Send + Sync + 'static,
{
    fn decode(json: &[u8]) -> Result<Self, ObjectError> {
        Ok(serde_json::from_slice(json)?)
    }
}

impl fmt::Debug for DynamicObject {
    /// Shows the identifying metadata and the JSON size, not the whole body.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamicObject")
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .field("resource_version", &self.resource_version())
            .field("json_len", &self.json.len())
            .finish()
    }
}

impl<'de> Deserialize<'de> for DynamicObject {
    /// Decodes one JSON object (for example the `object` of a watch event), copying its text
    /// into a private buffer.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw: Box<serde_json::value::RawValue> = Deserialize::deserialize(deserializer)?;
        // The raw value was validated while it was read.
        DynamicObject::from_well_formed(Bytes::copy_from_slice(raw.get().as_bytes()))
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_json() -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "prod", "uid": "8d0c1c5e-0000-4000-8000-000000000001",
                "resourceVersion": "42", "labels": {"app": "web", "tier": "front"},
                "annotations": {"note": "x"}
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "nginx:1.27"}]},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    #[test]
    fn parses_metadata_and_keeps_bytes() {
        let raw = pod_json();
        let o = DynamicObject::from_slice(&raw).unwrap();
        assert_eq!(o.name(), "web-0");
        assert_eq!(o.namespace(), Some("prod"));
        assert_eq!(o.resource_version(), Some("42"));
        assert_eq!(o.uid(), Some("8d0c1c5e-0000-4000-8000-000000000001"));
        let labels = o.labels().unwrap();
        assert_eq!(labels.get("app"), Some("web"));
        assert_eq!(labels.len(), 2);
        assert_eq!(o.json().as_ref(), raw.as_slice());
        assert_eq!(o.to_value().unwrap()["spec"]["nodeName"], "n1");
        assert_eq!(o.to_object().unwrap().kind(), "Pod");
    }

    #[test]
    fn escaped_strings_are_unescaped() {
        let o =
            DynamicObject::from_slice(br#"{"metadata":{"name":"a\u0062c","namespace":"n\/s"}}"#)
                .unwrap();
        assert_eq!(o.name(), "abc");
        assert_eq!(o.namespace(), Some("n/s"));
    }

    #[test]
    fn labels_view_is_sorted_unique_and_matches_a_map() {
        let o = DynamicObject::from_slice(
            br#"{"kind":"X","metadata":{"labels":{"b":"2","a":"1","c\u0021":"3","a":"mid","a":"last"}, "name":"n"}}"#,
        )
        .unwrap();
        let labels = o.labels().unwrap();
        assert_eq!(labels.len(), 3);
        assert_eq!(labels.get("a"), Some("last"));
        assert_eq!(labels.get("c!"), Some("3"));
        assert_eq!(labels.get("zz"), None);
        assert!(labels.contains_key("b"));
        let pairs: Vec<_> = labels.iter().collect();
        assert_eq!(pairs, vec![("a", "last"), ("b", "2"), ("c!", "3")]);
        let map = labels.to_map();
        assert_eq!(Labels::from(&map), labels);
        assert_eq!(format!("{labels:?}"), format!("{map:?}"));
        assert_eq!(o.name(), "n");
        // An empty map is present but empty; selectors see it through `LabelSet`.
        let e = DynamicObject::from_slice(br#"{"metadata":{"labels":{}}}"#).unwrap();
        assert!(e.labels().is_some_and(|l| l.is_empty()));
        let sel = api::labels::LabelSelector::parse("b=2").unwrap();
        assert!(sel.matches(&labels));
    }

    #[test]
    fn well_formed_path_reads_only_up_to_metadata() {
        let o = DynamicObject::from_well_formed(Bytes::from_static(
            br#"{"apiVersion":"v1","spec":{"a":[1,{"b":"}"}]},"metadata":{"name":"x","annotations":{"q":"\"}"}},"status":"#,
        ))
        .unwrap();
        assert_eq!(o.name(), "x");
        // The full path validates and refuses the same text.
        assert!(DynamicObject::from_json(o.json().clone()).is_err());
        // Fields before metadata may be any JSON; nulls read as absent.
        let o = DynamicObject::from_well_formed(Bytes::from_static(
            br#"{ "n" : null , "t" : true, "x": -1.5e3, "metadata" : { "name" : null, "uid": "u", "labels": null } }"#,
        ))
        .unwrap();
        assert_eq!((o.name(), o.uid(), o.labels()), ("", Some("u"), None));
        for bad in [
            &b""[..],
            b"{",
            b"[]",
            br#"{"metadata":{"name":1}}"#,
            br#"{"metadata":{"labels":{"a":null}}}"#,
            br#"{"metadata":{"name":"a"#,
            br#"{"metadata":nul}"#,
            br#"{"a":}"#,
        ] {
            assert!(
                DynamicObject::from_well_formed(Bytes::from_static(bad)).is_err(),
                "accepted {:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn read_takes_one_value_from_the_middle_of_a_text_and_validates_all_of_it() {
        let text = br#"[{"metadata":{"name":"a","labels":{"k":"v"}},"spec":{"x":[1,2]}} , 7]"#;
        let mut v = Validator::new(text);
        v.expect(b'[', "").unwrap();
        let o = DynamicObject::read(&mut v).unwrap();
        assert_eq!(o.name(), "a");
        assert_eq!(o.labels().unwrap().get("k"), Some("v"));
        assert_eq!(
            o.json().as_ref(),
            br#"{"metadata":{"name":"a","labels":{"k":"v"}},"spec":{"x":[1,2]}}"#
        );
        assert!(v.next_member(b']').unwrap());
        // A fault after the metadata is still found: every byte of the object is validated.
        for bad in [
            &br#"{"metadata":{"name":"a"},"spec":{"x":[1,2,]}}"#[..],
            br#"{"metadata":{"name":"a"},"spec":""}"#,
            br#"{"metadata":{"name":"a","annotations":{"k":tru}}}"#,
            br#"{"metadata":{"name":7}}"#,
            br#"["not an object"]"#,
        ] {
            assert!(
                DynamicObject::read(&mut Validator::new(bad)).is_err(),
                "accepted {}",
                String::from_utf8_lossy(bad)
            );
            assert!(DynamicObject::from_slice(bad).is_err());
        }
    }

    proptest::proptest! {
        #[test]
        fn well_formed_path_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = DynamicObject::from_well_formed(Bytes::from(bytes));
        }

        #[test]
        fn scan_agrees_with_serde(
            name in "[a-z\\\"é0-9-]{0,12}",
            ns in proptest::option::of("[a-z0-9/]{0,8}"),
            labels in proptest::collection::btree_map("[a-c\\\"]{1,3}", "[a-z\\\"é]{0,4}", 0..5),
            pad in "[ -~]{0,40}",
        ) {
            let mut meta = serde_json::Map::new();
            meta.insert("annotations".into(), json!({"pad": pad}));
            meta.insert("name".into(), json!(name));
            if let Some(ns) = &ns {
                meta.insert("namespace".into(), json!(ns));
            }
            meta.insert("labels".into(), json!(labels));
            let v = json!({"kind": "K", "spec": {"x": [pad, {"y": null}]}, "metadata": meta});
            let raw = serde_json::to_vec_pretty(&v).unwrap();
            let mut cursor = Validator::new(&raw);
            let read = DynamicObject::read(&mut cursor).unwrap();
            proptest::prop_assert!(cursor.end().is_ok());
            proptest::prop_assert_eq!(read.json().as_ref(), raw.as_slice());
            for o in [
                DynamicObject::from_slice(&raw).unwrap(),
                DynamicObject::from_well_formed(Bytes::from(raw.clone())).unwrap(),
                read,
            ] {
                proptest::prop_assert_eq!(o.name(), name.as_str());
                proptest::prop_assert_eq!(o.namespace(), ns.as_deref());
                proptest::prop_assert_eq!(o.labels().unwrap().to_map(), labels.clone());
            }
        }
    }

    #[test]
    fn missing_metadata_reads_as_absent() {
        let o = DynamicObject::from_slice(br#"{"kind":"Namespace"}"#).unwrap();
        assert_eq!(o.name(), "");
        assert_eq!(o.namespace(), None);
        assert_eq!(o.resource_version(), None);
        assert_eq!(o.uid(), None);
        assert!(o.labels().is_none());
    }

    #[test]
    fn rejects_malformed_input() {
        assert!(DynamicObject::from_slice(b"{").is_err());
        assert!(DynamicObject::from_slice(b"[1,2]").is_err());
        assert!(DynamicObject::from_slice(b"{} trailing").is_err());
        assert!(DynamicObject::from_slice(br#"{"metadata":{"labels":{"a":1}}}"#).is_err());
        assert!(DynamicObject::from_slice(br#"{"metadata":{"name":7}}"#).is_err());
    }

    #[test]
    fn deserializes_inside_a_watch_event() {
        #[derive(Deserialize)]
        struct Event {
            #[serde(rename = "type")]
            kind: String,
            object: DynamicObject,
        }
        let body = format!(
            r#"{{"type":"ADDED","object":{}}}"#,
            String::from_utf8(pod_json()).unwrap()
        );
        let e: Event = serde_json::from_str(&body).unwrap();
        assert_eq!(e.kind, "ADDED");
        assert_eq!(e.object.name(), "web-0");
        assert_eq!(e.object.json().as_ref(), pod_json().as_slice());
    }

    #[test]
    fn typed_objects_are_kube_objects_and_decode() {
        use k8s_openapi::api::core::v1::Pod;
        let pod = <Pod as DecodeObject>::decode(&pod_json()).unwrap();
        assert_eq!(KubeObject::name(&pod), "web-0");
        assert_eq!(KubeObject::namespace(&pod), Some("prod"));
        assert_eq!(KubeObject::resource_version(&pod), Some("42"));
        assert_eq!(
            KubeObject::uid(&pod),
            Some("8d0c1c5e-0000-4000-8000-000000000001")
        );
        assert_eq!(
            KubeObject::labels(&pod).and_then(|l| l.get("tier")),
            Some("front")
        );
        assert_eq!(KubeObject::name(&Pod::default()), "");
        assert!(<Pod as DecodeObject>::decode(b"{\"metadata\":{\"name\":1}}").is_err());
        // The dynamic fast path copies: the object does not keep a larger buffer alive.
        let page = Bytes::from(pod_json());
        let d = <DynamicObject as DecodeObject>::decode(&page[..]).unwrap();
        assert_eq!(d.json().as_ref(), page.as_ref());
        assert_ne!(d.json().as_ptr(), page.as_ptr());
    }

    #[test]
    fn from_object_round_trips() {
        let obj = api::Object::from_slice(&pod_json()).unwrap();
        let o = DynamicObject::from_object(&obj).unwrap();
        assert_eq!(o.name(), "web-0");
        assert_eq!(o.to_object().unwrap(), obj);
    }

    /// A pod shaped like what a real cluster returns (managed fields, conditions, ...).
    fn realistic_pod_json(i: usize) -> Vec<u8> {
        let conditions: Vec<_> = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
            .iter()
            .map(|t| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": "2025-01-01T00:00:00Z"}))
            .collect();
        serde_json::to_vec(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("web-7c9f8d6b5-{i:05}"), "namespace": "prod",
                "uid": "8d0c1c5e-0000-4000-8000-000000000001", "resourceVersion": "123456",
                "generateName": "web-7c9f8d6b5-", "creationTimestamp": "2025-01-01T00:00:00Z",
                "labels": {"app": "web", "pod-template-hash": "7c9f8d6b5", "tier": "front"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7c9f8d6b5",
                    "uid": "8d0c1c5e-0000-4000-8000-000000000002", "controller": true, "blockOwnerDeletion": true}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                    "time": "2025-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}}}}}]
            },
            "spec": {
                "containers": [{"name": "web", "image": "registry.example.com/web:1.27.3",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "MODE", "value": "production"}, {"name": "LOG_LEVEL", "value": "info"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent"}],
                "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                "serviceAccountName": "default", "nodeName": "node-17", "schedulerName": "default-scheduler",
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
            },
            "status": {"phase": "Running", "conditions": conditions, "hostIP": "10.0.0.17", "podIP": "10.244.3.9",
                "startTime": "2025-01-01T00:00:00Z", "qosClass": "Burstable",
                "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0, "started": true,
                    "image": "registry.example.com/web:1.27.3", "imageID": "registry.example.com/web@sha256:0123456789abcdef",
                    "containerID": "containerd://0123456789abcdef", "state": {"running": {"startedAt": "2025-01-01T00:00:01Z"}}}]}
        }))
        .unwrap()
    }

    #[test]
    fn size_stays_close_to_json_size() {
        // Small objects: a bounded fixed overhead.
        let raw = pod_json();
        let small = DynamicObject::from_slice(&raw).unwrap().approx_size();
        assert!(small >= raw.len());
        assert!(
            small <= raw.len() + 512,
            "size {small} vs json {}",
            raw.len()
        );
        // Realistic objects, including what a namespace-indexed store adds per entry (the key
        // once as `Arc<str>`, a map slot, an index-set slot): well under 1.5x the JSON.
        let raw = realistic_pod_json(1);
        let o = DynamicObject::from_slice(&raw).unwrap();
        let key_len = "prod/".len() + o.name().len();
        let store_overhead = (16 + key_len) + 3 * 32 + 2 * 16;
        let total = o.approx_size() + store_overhead;
        assert!(
            (total as f64) <= 1.5 * raw.len() as f64,
            "size {total} vs json {}",
            raw.len()
        );
    }
}
