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
use std::borrow::Cow;
use std::fmt;

use crate::object::{
    kube_object_from_packed_meta, pack, DecodeObject, KubeObject, MetaParts, ObjectError,
    PackedMeta,
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
/// Cloning copies the small metadata buffer and shares the message (a reference count);
/// the caches share objects as `Arc<ProtobufObject>`.
#[derive(Clone, PartialEq, Eq)]
pub struct ProtobufObject {
    message: Bytes,
    meta: PackedMeta,
}

/// Reads the metadata of the object message that lies at offset `base` of its buffer.
fn read_meta(message: &[u8], base: usize) -> Result<MetaParts<'_>, WireError> {
    let mut meta = MetaParts::default();
    for field in fields_at(message, base) {
        let (at, number, value) = field?;
        if number != 1 {
            continue;
        }
        // An embedded message given twice is merged (of its scalar fields the last counts,
        // map entries add up), which reading both in turn does.
        let bytes = value.bytes("expected the metadata message", at)?;
        for field in fields_at(bytes, at) {
            let (at, number, value) = field?;
            match number {
                1 => meta.name = Some(Cow::Borrowed(value.string(at)?)),
                3 => meta.namespace = Some(Cow::Borrowed(value.string(at)?)),
                5 => meta.uid = Some(Cow::Borrowed(value.string(at)?)),
                6 => meta.resource_version = Some(Cow::Borrowed(value.string(at)?)),
                11 => {
                    let (k, v) = map_entry(value.bytes("expected a label entry", at)?, at)?;
                    meta.labels
                        .get_or_insert_with(Default::default)
                        .push((Cow::Borrowed(k), Cow::Borrowed(v)));
                }
                _ => {}
            }
        }
    }
    Ok(meta)
}

/// A `map<string, string>` entry: key (1) and value (2), each `""` when absent.
pub(crate) fn map_entry(entry: &[u8], base: usize) -> Result<(&str, &str), WireError> {
    let (mut key, mut value) = ("", "");
    for field in fields_at(entry, base) {
        let (at, number, v) = field?;
        match number {
            1 => key = v.string(at)?,
            2 => value = v.string(at)?,
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
        let meta = pack(read_meta(&message, 0)?)?;
        Ok(ProtobufObject { message, meta })
    }

    /// Like [`ProtobufObject::from_message`], copying `message` into a buffer of its own.
    ///
    /// # Errors
    /// As [`ProtobufObject::from_message`].
    pub fn from_slice(message: &[u8]) -> Result<ProtobufObject, ObjectError> {
        // Read before copying, so a refused message costs no copy.
        let meta = pack(read_meta(message, 0)?)?;
        Ok(ProtobufObject {
            message: Bytes::copy_from_slice(message),
            meta,
        })
    }

    /// The object's protobuf message, exactly as received (no envelope): decode it with the
    /// generated type of its kind, e.g. `k8s_pb::api::core::v1::Pod::decode(obj.message())`.
    pub fn message(&self) -> &Bytes {
        &self.message
    }

    /// An estimate of the bytes this object holds: the message, the metadata buffer and the
    /// struct itself (allocator overhead not counted).
    pub fn approx_size(&self) -> usize {
        std::mem::size_of::<ProtobufObject>() + self.message.len() + self.meta.heap_size()
    }
}

kube_object_from_packed_meta!(ProtobufObject);

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
            .field("message_len", &self.message.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf_wire::tests::{put_bytes, put_varint};
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
        assert_eq!(&obj.message()[..], &bytes[..]);
        // The message is the object: a generated decoder reads it back unchanged.
        assert_eq!(core::Pod::decode(obj.message().clone()).unwrap(), pod());
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
        let mut m = Vec::new();
        put_bytes(&mut m, 1, b"a");
        for (k, v) in [("k", "1"), ("j", "x"), ("k", "2")] {
            let mut entry = Vec::new();
            put_bytes(&mut entry, 1, k.as_bytes());
            put_bytes(&mut entry, 2, v.as_bytes());
            put_bytes(&mut m, 11, &entry);
        }
        let mut obj = Vec::new();
        put_bytes(&mut obj, 1, &m);
        let obj = ProtobufObject::from_slice(&obj).unwrap();
        let labels: Vec<_> = obj.labels().unwrap().iter().collect();
        assert_eq!(labels, vec![("j", "x"), ("k", "2")]);
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
