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
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;
use std::collections::{btree_map, BTreeMap};
use std::fmt;

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
/// It borrows either a typed object's `BTreeMap` or a [`DynamicObject`]'s packed metadata;
/// both behave the same. It implements [`api::labels::LabelSet`], so label selectors match
/// it directly.
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
        }
    }
}

/// Why bytes could not be turned into a [`DynamicObject`].
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The bytes are not well-formed JSON, not a JSON object, or `metadata` has fields of
    /// the wrong type (for example a label value that is not a string).
    #[error("invalid object JSON: {0}")]
    Json(#[from] serde_json::Error),
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

const HAS_NAMESPACE: u8 = 1;
const HAS_RESOURCE_VERSION: u8 = 2;
const HAS_UID: u8 = 4;
const HAS_LABELS: u8 = 8;

/// Label key/value pairs as read, borrowed from the JSON where no unescaping was needed.
type Pairs<'a> = Vec<(Cow<'a, str>, Cow<'a, str>)>;

/// The metadata fields found by [`scan_metadata`], borrowed from the JSON where possible.
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

/// A forward-only reader over JSON text that extracts a few fields and skips the rest
/// structurally. It never panics; on text that is not well-formed it fails or, for errors
/// inside skipped values, may not notice (callers validate first where that matters).
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn peek(&mut self) -> Option<u8> {
        while let Some(&c) = self.b.get(self.i) {
            if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(c);
            }
            self.i += 1;
        }
        None
    }

    fn expect(&mut self, c: u8, what: &str) -> Result<(), serde_json::Error> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(scan_error(what, self.i))
        }
    }

    /// Skips a string starting at the current position; returns the span of its raw
    /// content (between the quotes) and whether it contains escapes.
    fn string_span(&mut self) -> Result<(usize, usize, bool), serde_json::Error> {
        self.expect(b'"', "expected a string")?;
        let start = self.i;
        let mut escaped = false;
        loop {
            // SIMD search for the next quote or backslash (a long annotation is typical).
            let rest = self.b.get(self.i..).unwrap_or_default();
            self.i += memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
            match self.b.get(self.i) {
                Some(b'"') => {
                    let end = self.i;
                    self.i += 1;
                    return Ok((start, end, escaped));
                }
                Some(b'\\') => {
                    escaped = true;
                    self.i += 2;
                }
                Some(_) => self.i += 1,
                None => return Err(scan_error("unterminated string", start)),
            }
        }
    }

    fn string(&mut self) -> Result<Cow<'a, str>, serde_json::Error> {
        let (start, end, escaped) = self.string_span()?;
        let raw = self.b.get(start..end).unwrap_or_default();
        if escaped {
            // Rare: let serde_json unescape the quoted text.
            let quoted = self.b.get(start - 1..end + 1).unwrap_or_default();
            Ok(Cow::Owned(serde_json::from_slice::<String>(quoted)?))
        } else {
            std::str::from_utf8(raw)
                .map(Cow::Borrowed)
                .map_err(|_| scan_error("invalid UTF-8 in a string", start))
        }
    }

    /// `null` (→ `None`) or a string.
    fn opt_string(&mut self) -> Result<Option<Cow<'a, str>>, serde_json::Error> {
        if self.null()? {
            Ok(None)
        } else {
            self.string().map(Some)
        }
    }

    /// Consumes a `null` literal if one is next.
    fn null(&mut self) -> Result<bool, serde_json::Error> {
        if self.peek() != Some(b'n') {
            return Ok(false);
        }
        if self.b.get(self.i..self.i + 4) == Some(b"null") {
            self.i += 4;
            Ok(true)
        } else {
            Err(scan_error("invalid literal", self.i))
        }
    }

    /// After a member: `,` (more follow, true) or the closing `close` (false).
    fn next_member(&mut self, close: u8) -> Result<bool, serde_json::Error> {
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                Ok(true)
            }
            Some(c) if c == close => {
                self.i += 1;
                Ok(false)
            }
            _ => Err(scan_error("expected `,` or the end of an object", self.i)),
        }
    }

    /// Skips one value of any type.
    fn skip_value(&mut self) -> Result<(), serde_json::Error> {
        match self.peek() {
            Some(b'"') => {
                self.string_span()?;
                Ok(())
            }
            Some(b'{' | b'[') => {
                let mut depth = 0usize;
                loop {
                    match self.b.get(self.i) {
                        Some(b'"') => {
                            self.string_span()?;
                            continue;
                        }
                        Some(b'{' | b'[') => depth += 1,
                        Some(b'}' | b']') => {
                            depth = depth.saturating_sub(1);
                            if depth == 0 {
                                self.i += 1;
                                return Ok(());
                            }
                        }
                        Some(_) => {}
                        None => return Err(scan_error("unterminated value", self.i)),
                    }
                    self.i += 1;
                }
            }
            Some(_) => {
                let start = self.i;
                while let Some(&c) = self.b.get(self.i) {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.i += 1;
                }
                if self.i == start {
                    return Err(scan_error("expected a value", start));
                }
                Ok(())
            }
            None => Err(scan_error("unexpected end of input", self.i)),
        }
    }

    /// `null` or an object of string values.
    fn opt_string_map(&mut self) -> Result<Option<Pairs<'a>>, serde_json::Error> {
        if self.null()? {
            return Ok(None);
        }
        self.expect(b'{', "expected an object")?;
        let mut pairs = Vec::new();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(Some(pairs));
        }
        loop {
            let key = self.string()?;
            self.expect(b':', "expected `:`")?;
            let value = self.string()?;
            pairs.push((key, value));
            if !self.next_member(b'}')? {
                return Ok(Some(pairs));
            }
        }
    }

    fn metadata(&mut self) -> Result<MetaParts<'a>, serde_json::Error> {
        let mut meta = MetaParts::default();
        self.expect(b'{', "metadata: expected an object")?;
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(meta);
        }
        loop {
            let key = self.string()?;
            self.expect(b':', "expected `:`")?;
            match key.as_ref() {
                "name" => meta.name = self.opt_string()?,
                "namespace" => meta.namespace = self.opt_string()?,
                "resourceVersion" => meta.resource_version = self.opt_string()?,
                "uid" => meta.uid = self.opt_string()?,
                "labels" => meta.labels = self.opt_string_map()?,
                _ => self.skip_value()?,
            }
            if !self.next_member(b'}')? {
                return Ok(meta);
            }
        }
    }
}

/// Finds the top-level `metadata` of the JSON object `json` and reads the fields the caches
/// need; stops right after it (the rest is not looked at).
fn scan_metadata(json: &[u8]) -> Result<MetaParts<'_>, serde_json::Error> {
    let mut s = Scan { b: json, i: 0 };
    s.expect(b'{', "expected a JSON object")?;
    if s.peek() == Some(b'}') {
        return Ok(MetaParts::default());
    }
    loop {
        let key = s.string()?;
        s.expect(b':', "expected `:`")?;
        if key == "metadata" {
            return if s.null()? {
                Ok(MetaParts::default())
            } else {
                s.metadata()
            };
        }
        s.skip_value()?;
        if !s.next_member(b'}')? {
            return Ok(MetaParts::default());
        }
    }
}

fn offset(len: usize) -> Result<u32, ObjectError> {
    u32::try_from(len).map_err(|_| ObjectError::Json(scan_error("metadata too large", 0)))
}

impl DynamicObject {
    /// Parses the metadata of `json` and keeps the bytes as they are.
    ///
    /// The whole input must be one well-formed JSON object (it is validated in full);
    /// fields other than `metadata`'s name, namespace, resourceVersion, uid and labels are
    /// not interpreted. Missing metadata reads as absent (an object without a name has the
    /// name `""`); of repeated keys the last one counts.
    ///
    /// The bytes are kept as given: if `json` is a slice of a larger buffer (for example one
    /// item of a list response), the whole buffer stays alive as long as this object does. Use
    /// [`DynamicObject::from_slice`] to keep a compact private copy instead.
    pub fn from_json(json: Bytes) -> Result<DynamicObject, ObjectError> {
        crate::json_validate::validate(&json)
            .map_err(|e| ObjectError::Json(serde_json::Error::custom(e)))?;
        DynamicObject::from_well_formed(json)
    }

    /// Like [`DynamicObject::from_json`] for text the caller already knows to be well-formed
    /// JSON (for example the raw text of a list item or a watch event's object, which the
    /// enclosing parse validated): only the object's beginning up to the end of its
    /// `metadata` is read, the rest is not validated again.
    ///
    /// On text that is not well-formed it still never panics: it fails, or — if the fault
    /// lies outside the parts it reads — returns an object whose JSON will fail to parse in
    /// [`DynamicObject::to_value`].
    pub fn from_well_formed(json: Bytes) -> Result<DynamicObject, ObjectError> {
        let meta = scan_metadata(&json)?;
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
            // Key order, each key once (the last occurrence wins, as in a JSON map).
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            let mut unique: Vec<(Cow<'_, str>, Cow<'_, str>)> = Vec::with_capacity(pairs.len());
            for pair in pairs.drain(..) {
                match unique.last_mut() {
                    Some(last) if last.0 == pair.0 => *last = pair,
                    _ => unique.push(pair),
                }
            }
            len += unique.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
            *pairs = unique;
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
        Ok(DynamicObject {
            json,
            text: text.into_boxed_str(),
            ends,
            present,
            label_ends: label_ends.into_boxed_slice(),
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
        std::mem::size_of::<DynamicObject>()
            + self.json.len()
            + self.text.len()
            + self.label_ends.len() * std::mem::size_of::<u32>()
    }

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
}

impl KubeObject for DynamicObject {
    fn namespace(&self) -> Option<&str> {
        self.optional(1, HAS_NAMESPACE)
    }
    fn name(&self) -> &str {
        self.field(0)
    }
    fn resource_version(&self) -> Option<&str> {
        self.optional(2, HAS_RESOURCE_VERSION)
    }
    fn uid(&self) -> Option<&str> {
        self.optional(3, HAS_UID)
    }
    fn labels(&self) -> Option<Labels<'_>> {
        (self.present & HAS_LABELS != 0).then(|| Labels {
            repr: LabelsRepr::Packed {
                text: &self.text,
                start: self.ends[3] as usize,
                ends: &self.label_ends,
            },
        })
    }
}

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
            br#"{"kind":"X","metadata":{"labels":{"b":"2","a":"1","c\u0021":"3","a":"last"}, "name":"n"}}"#,
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
            for o in [
                DynamicObject::from_slice(&raw).unwrap(),
                DynamicObject::from_well_formed(Bytes::from(raw.clone())).unwrap(),
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
