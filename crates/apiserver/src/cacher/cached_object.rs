//! One object as the watch cache holds it: its final JSON bytes and what filters read.

use crate::registry::ResourceInfo;
use api::Object;
use bytes::Bytes;
use serde_json::Value;
use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

/// An immutable, shared object in the watch cache.
///
/// `json` is the complete object as sent to clients, with `metadata.resourceVersion` equal to
/// `resource_version`. It is produced once when the change enters the cache and shared by
/// every list and watcher (cloning `Bytes` is a reference-count bump).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedObject {
    /// `ns/name` or `name`: the storage key below the resource prefix; the cache's sort key.
    pub key: String,
    /// `metadata.namespace` ("" for cluster-scoped).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// The resourceVersion stamped into `json`.
    pub resource_version: u64,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// Values of the resource's selectable fields, in `ResourceInfo::fields` order.
    pub fields: Vec<String>,
    /// The object's JSON.
    pub json: Bytes,
    /// Other encodings of this object, computed on first use and then shared by every
    /// response that needs them.
    pub derived: DerivedEncodings,
}

/// Lazily computed encodings of a [`CachedObject`] other than its JSON (Table rows,
/// PartialObjectMetadata), so that a watch event is converted once however many watchers
/// asked for that encoding. They are a cache: two objects compare equal regardless of them.
#[derive(Debug, Default, Clone)]
pub struct DerivedEncodings {
    /// The object's `metadata` as JSON (the body of its PartialObjectMetadata).
    pub metadata: OnceLock<Bytes>,
    /// The object's Table row as the Table encoding renders it (its own type: the cache
    /// only keeps it; see `encoding::table::row_parts`).
    pub table_row: OnceLock<Arc<dyn Any + Send + Sync>>,
    /// The object as a complete protobuf body (`None` if its kind has no protobuf encoding).
    pub protobuf: OnceLock<Option<Bytes>>,
}

impl PartialEq for DerivedEncodings {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for DerivedEncodings {}

impl CachedObject {
    /// Decodes a stored value and stamps `resource_version` into it (without a parse when
    /// [`super::stored_json::stamp`] can do it).
    pub fn decode(
        info: &ResourceInfo,
        key: &str,
        stored: &[u8],
        resource_version: u64,
    ) -> Result<CachedObject, String> {
        Self::decode_defaulted_after(info, key, stored, resource_version, u64::MAX)
    }

    /// As [`CachedObject::decode`], knowing that a custom object last written after
    /// revision `defaulted_after` was written under its current schema (so already carries
    /// its defaults): only older ones, or ones stored at another version, are parsed.
    pub fn decode_defaulted_after(
        info: &ResourceInfo,
        key: &str,
        stored: &[u8],
        resource_version: u64,
        defaulted_after: u64,
    ) -> Result<CachedObject, String> {
        // A custom object is served at the cacher's version with its schema's defaults,
        // which the byte-level stamp cannot do.
        let current = resource_version > defaulted_after;
        if !crate::registry::strategy::custom_read_changes(info, stored, current) {
            if let Some(s) = super::stored_json::stamp(info, stored, resource_version) {
                return Ok(Self::from_stamped(key, s, resource_version));
            }
        }
        let mut obj = Object::from_slice(stored)
            .map_err(|s| format!("undecodable value at {key}: {}", s.message))?;
        crate::registry::strategy::custom_read(info, &mut obj);
        Ok(Self::from_object(info, key, obj, resource_version))
    }

    /// Builds the cached form of `obj` with `resource_version` stamped.
    pub fn from_object(
        info: &ResourceInfo,
        key: &str,
        mut obj: Object,
        resource_version: u64,
    ) -> CachedObject {
        obj.set_meta("resourceVersion", resource_version.to_string());
        let labels = obj
            .labels()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let fields = info
            .fields
            .iter()
            .map(|f| {
                obj.field_str(f.path)
                    .map(|c| c.into_owned())
                    .unwrap_or_else(|| f.default.to_string())
            })
            .collect();
        CachedObject {
            key: key.to_string(),
            namespace: obj.namespace().to_string(),
            name: obj.name().to_string(),
            resource_version,
            labels,
            fields,
            json: Bytes::from(obj.to_vec()),
            derived: DerivedEncodings::default(),
        }
    }

    fn from_stamped(key: &str, s: super::stored_json::Stamped, resource_version: u64) -> Self {
        CachedObject {
            key: key.to_string(),
            namespace: s.namespace,
            name: s.name,
            resource_version,
            labels: s.labels,
            fields: s.fields,
            json: Bytes::from(s.json),
            derived: DerivedEncodings::default(),
        }
    }

    /// A copy of this object with another resourceVersion (what a DELETED event carries).
    pub fn restamped(&self, info: &ResourceInfo, resource_version: u64) -> CachedObject {
        // (A cached custom object is already at the cacher's version: stamping is enough.)
        if let Some(s) = super::stored_json::stamp(info, &self.json, resource_version) {
            return Self::from_stamped(&self.key, s, resource_version);
        }
        match serde_json::from_slice::<Value>(&self.json)
            .ok()
            .and_then(Object::from_value)
        {
            Some(obj) => Self::from_object(info, &self.key, obj, resource_version),
            None => self.clone(),
        }
    }

    /// The value of selectable field `label` (`metadata.name`, `spec.nodeName`, ...).
    pub fn field(&self, info: &ResourceInfo, label: &str) -> Option<&str> {
        match label {
            "metadata.name" => Some(&self.name),
            "metadata.namespace" => Some(&self.namespace),
            _ => info
                .fields
                .iter()
                .position(|f| f.label == label)
                .and_then(|i| self.fields.get(i))
                .map(String::as_str),
        }
    }
}
