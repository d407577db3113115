//! [`ProtobufObject`]: a cache object read from Kubernetes' protobuf encoding.
//!
//! Go controllers ask the API server for protobuf (`application/vnd.kubernetes.protobuf`)
//! because it is smaller and far cheaper to read than JSON. An informer over
//! `ProtobufObject`s does the same: its [`RestListerWatcher`](crate::cache::RestListerWatcher)
//! lists and watches in protobuf, and each object is kept as its own protobuf message plus
//! the few metadata fields the caches need — read by walking the message's fields, passing
//! over the spec and status by their lengths without looking at their bytes.
//!
//! Only kinds built into Kubernetes have a protobuf encoding; custom resources are served
//! as JSON only, so use [`DynamicObject`](crate::object::DynamicObject) for them.

use bytes::Bytes;
use std::fmt;

use crate::buffer_pool::PooledBuf;
use crate::object::{
    kube_object_from_fields, labels_at, DecodeObject, KubeObject, LabelSpan, Labels, ObjectError,
    HAS_LABELS, HAS_NAMESPACE, HAS_RESOURCE_VERSION, HAS_UID,
};
use crate::protobuf_wire::{fields_at, WireError};

/// A read-only Kubernetes object of a built-in kind, as its protobuf message (the bytes a
/// generated type such as `k8s_pb::api::core::v1::Pod` decodes with `prost`), plus the
/// metadata the caches need.
///
/// What is checked when one is built: the message's top-level fields are well-formed, and
/// its `metadata` (field 1 of every Kubernetes kind) is read in full — name, namespace,
/// uid and resourceVersion must be UTF-8 strings, labels a map of strings. The contents of
/// the other top-level fields (spec, status) are not looked at; a decoder of the whole
/// object checks them when it reads them.
///
/// Memory: the message, and the metadata as byte ranges of it — protobuf strings are stored
/// as they are, so nothing is copied out. Up to two labels are kept inline; more take one
/// allocation. A message copied out of what was received ([`ProtobufObject::from_slice`],
/// what informers use) lives in a [`PooledBuf`]: its capacity is rounded up to
/// [`GRAIN`](crate::buffer_pool::GRAIN) bytes, and when the object is dropped the buffer
/// serves the next object of its size.
///
/// The caches share objects as `Arc<ProtobufObject>`. Cloning the object itself copies a
/// pooled message and shares one given to [`ProtobufObject::from_message`].
#[derive(Clone, PartialEq, Eq)]
pub struct ProtobufObject {
    message: Message,
    meta: MessageMeta,
}

/// Where a [`ProtobufObject`]'s message lives.
#[derive(Clone)]
enum Message {
    /// A slice of a buffer shared with others ([`ProtobufObject::from_message`]). Boxed to
    /// keep the object small (see [`ProtobufObject`]'s memory notes).
    Shared(Box<Bytes>),
    /// A buffer of its own, recycled when dropped ([`ProtobufObject::from_slice`]).
    Pooled(PooledBuf),
}

impl Message {
    fn as_slice(&self) -> &[u8] {
        match self {
            Message::Shared(bytes) => bytes,
            Message::Pooled(buf) => buf,
        }
    }
}

impl PartialEq for Message {
    fn eq(&self, other: &Message) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Message {}

/// The cache metadata of a message, as byte ranges of it.
#[derive(Clone, PartialEq, Eq, Default)]
struct MessageMeta {
    /// Start and end of the name, namespace, resourceVersion and uid.
    fields: [[u32; 2]; 4],
    /// Which of namespace, resourceVersion, uid and labels are present.
    present: u8,
    /// Sorted by key, each key once.
    labels: LabelSpans,
}

/// How many labels a [`ProtobufObject`] keeps without an allocation of their own. Pods made
/// by ReplicaSets carry two.
const INLINE_LABELS: usize = 2;

#[derive(Clone, PartialEq, Eq)]
enum LabelSpans {
    Inline(u8, [LabelSpan; INLINE_LABELS]),
    /// More than fit inline; exactly sized once the metadata has been read.
    Heap(Vec<LabelSpan>),
}

impl Default for LabelSpans {
    fn default() -> Self {
        LabelSpans::Inline(0, [[0; 4]; INLINE_LABELS])
    }
}

impl LabelSpans {
    fn as_slice(&self) -> &[LabelSpan] {
        match self {
            LabelSpans::Inline(n, spans) => spans.get(..usize::from(*n)).unwrap_or_default(),
            LabelSpans::Heap(spans) => spans,
        }
    }

    fn push(&mut self, span: LabelSpan) {
        match self {
            LabelSpans::Inline(n, spans) => match spans.get_mut(usize::from(*n)) {
                Some(slot) => {
                    *slot = span;
                    *n += 1;
                }
                None => {
                    let mut all = spans.to_vec();
                    all.push(span);
                    *self = LabelSpans::Heap(all);
                }
            },
            LabelSpans::Heap(spans) => spans.push(span),
        }
    }

    /// Sorts by key and keeps, of each run of equal keys, the last one (a map entry given
    /// again replaces the earlier one); then gives back the room it does not use.
    fn finish(&mut self, message: &[u8]) {
        let key = |s: &LabelSpan| {
            message
                .get(s[0] as usize..s[1] as usize)
                .unwrap_or_default()
        };
        let spans: &mut [LabelSpan] = match self {
            LabelSpans::Inline(n, spans) => spans.get_mut(..usize::from(*n)).unwrap_or_default(),
            LabelSpans::Heap(spans) => spans,
        };
        // Stable, so the last of equal keys is still the latest.
        spans.sort_by(|a, b| key(a).cmp(key(b)));
        let mut kept = 0;
        for i in 0..spans.len() {
            let span = spans[i];
            if kept > 0 && key(&spans[kept - 1]) == key(&span) {
                spans[kept - 1] = span;
            } else {
                spans[kept] = span;
                kept += 1;
            }
        }
        match self {
            LabelSpans::Inline(n, _) => *n = kept as u8,
            LabelSpans::Heap(spans) => {
                spans.truncate(kept);
                spans.shrink_to_fit();
            }
        }
    }

    fn heap_size(&self) -> usize {
        match self {
            LabelSpans::Inline(..) => 0,
            LabelSpans::Heap(spans) => spans.capacity() * std::mem::size_of::<LabelSpan>(),
        }
    }
}

/// Where `part`, a slice of `message`, lies in it.
fn span_of(message: &[u8], part: &[u8]) -> Result<[u32; 2], WireError> {
    // Both are slices of one buffer, so their addresses give the offset.
    let start = (part.as_ptr() as usize).wrapping_sub(message.as_ptr() as usize);
    let end = start.wrapping_add(part.len());
    match (u32::try_from(start), u32::try_from(end)) {
        (Ok(s), Ok(e)) if end <= message.len() => Ok([s, e]),
        _ => Err(WireError {
            what: "metadata beyond 4 GiB",
            at: start,
        }),
    }
}

/// Reads the metadata of `message` (an object message) as byte ranges of it.
fn read_meta(message: &[u8]) -> Result<MessageMeta, WireError> {
    let mut meta = MessageMeta::default();
    for field in fields_at(message, 0) {
        let (at, number, value) = field?;
        if number != 1 {
            continue;
        }
        // An embedded message given twice is merged (of its scalar fields the last counts,
        // map entries add up), which reading both in turn does.
        let bytes = value.bytes("expected the metadata message", at)?;
        for field in fields_at(bytes, at) {
            let (at, number, value) = field?;
            let (slot, bit) = match number {
                1 => (0, 0),
                3 => (1, HAS_NAMESPACE),
                5 => (3, HAS_UID),
                6 => (2, HAS_RESOURCE_VERSION),
                11 => {
                    let (k, v) = map_entry(value.bytes("expected a label entry", at)?, at)?;
                    let [k0, k1] = span_of(message, k)?;
                    let [v0, v1] = span_of(message, v)?;
                    meta.labels.push([k0, k1, v0, v1]);
                    meta.present |= HAS_LABELS;
                    continue;
                }
                _ => continue,
            };
            meta.fields[slot] = span_of(message, value.text(at)?)?;
            meta.present |= bit;
        }
    }
    meta.labels.finish(message);
    Ok(meta)
}

/// A `map<string, string>` entry: key (1) and value (2), each checked to be UTF-8 and
/// empty when absent.
pub(crate) fn map_entry(entry: &[u8], base: usize) -> Result<(&[u8], &[u8]), WireError> {
    let (mut key, mut value): (&[u8], &[u8]) = (b"", b"");
    for field in fields_at(entry, base) {
        let (at, number, v) = field?;
        match number {
            1 => key = v.text(at)?,
            2 => value = v.text(at)?,
            _ => {}
        }
    }
    Ok((key, value))
}

impl ProtobufObject {
    /// Reads the metadata of `message` (an object's own protobuf message, without the
    /// `k8s\0` envelope) and keeps the bytes as they are. If `message` is a slice of a
    /// larger buffer, that buffer stays alive as long as this object does; see
    /// [`ProtobufObject::from_slice`] for a private copy.
    ///
    /// # Errors
    /// [`ObjectError::Protobuf`] as described on the type.
    pub fn from_message(message: Bytes) -> Result<ProtobufObject, ObjectError> {
        let meta = read_meta(&message)?;
        Ok(ProtobufObject {
            message: Message::Shared(Box::new(message)),
            meta,
        })
    }

    /// Like [`ProtobufObject::from_message`], copying `message` into a buffer of its own.
    ///
    /// # Errors
    /// As [`ProtobufObject::from_message`].
    pub fn from_slice(message: &[u8]) -> Result<ProtobufObject, ObjectError> {
        // Read before copying, so a refused message costs no copy. The ranges read hold for
        // the copy.
        let meta = read_meta(message)?;
        Ok(ProtobufObject {
            message: Message::Pooled(PooledBuf::copy_from_slice(message)),
            meta,
        })
    }

    /// The object's protobuf message, exactly as received (no envelope): decode it with the
    /// generated type of its kind, e.g. `k8s_pb::api::core::v1::Pod::decode(obj.message())`.
    pub fn message(&self) -> &[u8] {
        self.message.as_slice()
    }

    /// An estimate of the bytes this object holds: the message's buffer (a pooled one's
    /// capacity), the labels' ranges if they are not inline, and the struct itself
    /// (allocator overhead not counted).
    pub fn approx_size(&self) -> usize {
        let message = match &self.message {
            Message::Shared(bytes) => bytes.len(),
            Message::Pooled(buf) => buf.capacity(),
        };
        std::mem::size_of::<ProtobufObject>() + message + self.meta.labels.heap_size()
    }

    fn field(&self, i: usize) -> &str {
        let [start, end] = self.meta.fields[i];
        let Some(bytes) = self.message().get(start as usize..end as usize) else {
            return "";
        };
        // Why not `from_utf8`: the caches ask for the namespace and name of every event
        // (its key), and checking them again took 3 % of a protobuf replay's client CPU
        // (`perf`, BENCHMARKS.md, session 19) — on the thread that applies events in order.
        // SAFETY: `read_meta` recorded `fields[i]` from a `Value::text`, which checked
        // those bytes are UTF-8, and of the same bytes this message holds: `from_slice`
        // copies them unchanged, neither `Message` variant can be written to, and `Clone`
        // copies the message and its ranges together. An unset range is `0..0`.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    fn optional(&self, i: usize, bit: u8) -> Option<&str> {
        (self.meta.present & bit != 0).then(|| self.field(i))
    }

    fn labels_view(&self) -> Option<Labels<'_>> {
        (self.meta.present & HAS_LABELS != 0)
            .then(|| labels_at(self.message(), self.meta.labels.as_slice()))
    }
}

kube_object_from_fields!(ProtobufObject);

/// Read from protobuf only: `decode` (JSON) fails, so a list or watch that answered in
/// JSON (a kind without a protobuf encoding) is reported instead of misread.
impl DecodeObject for ProtobufObject {
    const PROTOBUF: bool = true;

    fn decode(_json: &[u8]) -> Result<Self, ObjectError> {
        Err(ObjectError::Protobuf(WireError {
            what: "a ProtobufObject is read from protobuf, not JSON",
            at: 0,
        }))
    }

    fn decode_protobuf(message: &[u8]) -> Result<Self, ObjectError> {
        ProtobufObject::from_slice(message)
    }
}

impl fmt::Debug for ProtobufObject {
    /// Shows the identifying metadata and the message size, not the whole message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtobufObject")
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .field("resource_version", &self.resource_version())
            .field("message_len", &self.message().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf_wire::{put_delimited as put_bytes, put_varint};
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use prost::Message as _;

    fn pod() -> core::Pod {
        core::Pod {
            metadata: Some(meta::ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("prod".into()),
                uid: Some("8d0c1c5e-0000-4000-8000-000000000001".into()),
                resource_version: Some("42".into()),
                labels: [("tier", "front"), ("app", "web")]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                annotations: [("note".to_string(), "x".to_string())].into(),
                ..Default::default()
            }),
            spec: Some(core::PodSpec {
                node_name: Some("n1".into()),
                containers: vec![core::Container {
                    name: Some("c".into()),
                    image: Some("nginx:1.27".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(core::PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn reads_the_metadata_of_a_generated_message() {
        let bytes = pod().encode_to_vec();
        let obj = ProtobufObject::from_slice(&bytes).unwrap();
        assert_eq!(obj.name(), "web-0");
        assert_eq!(obj.namespace(), Some("prod"));
        assert_eq!(obj.resource_version(), Some("42"));
        assert_eq!(obj.uid(), Some("8d0c1c5e-0000-4000-8000-000000000001"));
        let labels: Vec<_> = obj.labels().unwrap().iter().collect();
        assert_eq!(labels, vec![("app", "web"), ("tier", "front")]);
        assert_eq!(obj.message(), &bytes[..]);
        // The message is the object: a generated decoder reads it back unchanged.
        assert_eq!(core::Pod::decode(obj.message()).unwrap(), pod());
    }

    #[test]
    fn an_object_and_its_arc_counts_fit_a_small_allocation() {
        // An Arc of it is allocated on a decode thread and freed on the handler's task.
        // glibc's free puts blocks of up to 120 bytes (here the counts and the object) on a
        // lock-free list, and larger ones into the arena under its lock.
        assert!(std::mem::size_of::<ProtobufObject>() <= 104);
    }

    #[test]
    fn a_pooled_and_a_shared_message_make_equal_objects() {
        let bytes = pod().encode_to_vec();
        let pooled = ProtobufObject::from_slice(&bytes).unwrap();
        let shared = ProtobufObject::from_message(Bytes::from(bytes.clone())).unwrap();
        assert!(pooled == shared);
        assert_eq!(pooled.message(), shared.message());
        let grain = crate::buffer_pool::GRAIN;
        assert_eq!(
            pooled.approx_size(),
            std::mem::size_of::<ProtobufObject>() + bytes.len().div_ceil(grain) * grain
        );
        let copy = pooled.clone();
        assert_ne!(copy.message().as_ptr(), pooled.message().as_ptr());
        assert_eq!(copy.name(), "web-0");
    }

    #[test]
    fn absent_metadata_reads_as_absent() {
        let obj = ProtobufObject::from_slice(&core::Pod::default().encode_to_vec()).unwrap();
        assert_eq!(obj.name(), "");
        assert_eq!(obj.namespace(), None);
        assert_eq!(obj.resource_version(), None);
        assert!(obj.labels().is_none());
    }

    #[test]
    fn repeated_labels_keep_the_last_value() {
        let entries =
            [("k", "1"), ("j", "x"), ("k", "2")].map(|(k, v)| (k.to_string(), v.to_string()));
        let obj = ProtobufObject::from_slice(&with_labels(&entries)).unwrap();
        let labels: Vec<_> = obj.labels().unwrap().iter().collect();
        assert_eq!(labels, vec![("j", "x"), ("k", "2")]);
    }

    /// An object message whose metadata has `name` and the label entries `labels`, in order.
    fn with_labels(labels: &[(String, String)]) -> Vec<u8> {
        let mut m = Vec::new();
        put_bytes(&mut m, 1, b"n");
        for (k, v) in labels {
            let mut entry = Vec::new();
            put_bytes(&mut entry, 1, k.as_bytes());
            put_bytes(&mut entry, 2, v.as_bytes());
            put_bytes(&mut m, 11, &entry);
        }
        let mut obj = Vec::new();
        put_bytes(&mut obj, 1, &m);
        obj
    }

    proptest::proptest! {
        /// Inline (up to two) or not, labels read as the map the entries make, the last of a
        /// repeated key winning; `get` finds every key and no other.
        #[test]
        fn labels_read_as_the_map_their_entries_make(
            entries in proptest::collection::vec(("[a-d]{1,2}", "[x-z]{0,3}"), 0..7),
            probe in "[a-d]{1,2}",
        ) {
            let obj = ProtobufObject::from_slice(&with_labels(&entries)).unwrap();
            let want: std::collections::BTreeMap<_, _> = entries.iter().cloned().collect();
            match obj.labels() {
                None => proptest::prop_assert!(entries.is_empty()),
                Some(labels) => {
                    let got: Vec<(String, String)> =
                        labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                    let want_pairs: Vec<(String, String)> = want.clone().into_iter().collect();
                    proptest::prop_assert_eq!(got, want_pairs);
                    proptest::prop_assert_eq!(labels.len(), want.len());
                    let want_value = want.get(&probe).map(String::as_str);
                    proptest::prop_assert_eq!(labels.get(&probe), want_value);
                }
            }
            proptest::prop_assert_eq!(obj.name(), "n");
        }
    }

    /// Some bytes: ASCII, other UTF-8, or anything.
    fn text_or_not() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        prop_oneof![
            "[a-z0-9.-]{0,20}".prop_map(String::into_bytes),
            "\\PC{0,8}".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 0..12),
        ]
    }

    proptest::proptest! {
        /// A name, namespace and label of any bytes: the object is read exactly when all
        /// are UTF-8, and then gives them back unchanged.
        #[test]
        fn metadata_text_is_read_exactly_when_it_is_utf8(
            name in text_or_not(),
            namespace in text_or_not(),
            key in text_or_not(),
            value in text_or_not(),
        ) {
            let mut m = Vec::new();
            put_bytes(&mut m, 1, &name);
            put_bytes(&mut m, 3, &namespace);
            let mut entry = Vec::new();
            put_bytes(&mut entry, 1, &key);
            put_bytes(&mut entry, 2, &value);
            put_bytes(&mut m, 11, &entry);
            let mut message = Vec::new();
            put_bytes(&mut message, 1, &m);
            fn text(b: &[u8]) -> Option<&str> {
                std::str::from_utf8(b).ok()
            }
            let read = ProtobufObject::from_slice(&message);
            match (text(&name), text(&namespace), text(&key), text(&value)) {
                (Some(name), Some(namespace), Some(key), Some(value)) => {
                    let obj = read.unwrap();
                    proptest::prop_assert_eq!(obj.name(), name);
                    proptest::prop_assert_eq!(obj.namespace(), Some(namespace));
                    let labels: Vec<_> = obj.labels().unwrap().iter().collect();
                    proptest::prop_assert_eq!(labels, vec![(key, value)]);
                }
                _ => proptest::prop_assert!(read.is_err()),
            }
        }
    }

    #[test]
    fn metadata_ranges_hold_for_a_message_kept_in_place() {
        let bytes = Bytes::from(pod().encode_to_vec());
        let obj = ProtobufObject::from_message(bytes.clone()).unwrap();
        assert_eq!(obj, ProtobufObject::from_slice(&bytes).unwrap());
        assert_eq!(obj.uid(), Some("8d0c1c5e-0000-4000-8000-000000000001"));
        assert_eq!(obj.labels().unwrap().get("tier"), Some("front"));
        assert_eq!(obj.labels().unwrap().get("zone"), None);
    }

    #[test]
    fn refuses_bad_metadata_and_json() {
        // A name that is not UTF-8.
        let mut m = Vec::new();
        put_bytes(&mut m, 1, b"\xff\xfe");
        let mut obj = Vec::new();
        put_bytes(&mut obj, 1, &m);
        assert!(ProtobufObject::from_slice(&obj).is_err());
        // Metadata given as a varint.
        let mut obj = Vec::new();
        put_varint(&mut obj, 1 << 3);
        put_varint(&mut obj, 5);
        assert!(ProtobufObject::from_slice(&obj).is_err());
        // A truncated message.
        let bytes = pod().encode_to_vec();
        assert!(ProtobufObject::from_slice(&bytes[..bytes.len() - 3]).is_err());
        assert!(<ProtobufObject as DecodeObject>::decode(br#"{"metadata":{}}"#).is_err());
    }
}
