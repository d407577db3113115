//! The object abstraction the client's caches work with.
//!
//! Every cache in [`crate::cache`] is generic over [`KubeObject`]: the few metadata fields a
//! cache needs (namespace and name for the key, resourceVersion, uid, labels for indexing).
//! Objects are shared as `Arc<K>` and are **read-only** once they enter a cache: a handler or
//! a lister that wants to change one must build a new value.
//!
//! [`DynamicObject`] is the implementation for any kind: the object's JSON kept as received
//! (`bytes::Bytes`) plus the handful of parsed metadata fields, so the memory an object costs
//! stays close to the size of its JSON.

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;
use std::collections::BTreeMap;
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
/// The accessor shapes follow the typed Kubernetes metadata (`Option<String>` fields and an
/// optional `BTreeMap` of labels), so typed objects can implement the trait by borrowing
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
    /// `metadata.labels`, if the object has a labels map.
    fn labels(&self) -> Option<&BTreeMap<String, String>>;
}

/// Why bytes could not be turned into a [`DynamicObject`].
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The bytes are not well-formed JSON, or `metadata` has fields of the wrong type
    /// (for example a label value that is not a string).
    #[error("invalid object JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// A read-only Kubernetes object of any kind: its JSON exactly as received, plus the parsed
/// metadata the caches need.
///
/// Memory: the JSON bytes, the name/namespace/resourceVersion/uid strings and the labels map
/// — no `serde_json::Value` tree is kept. Use [`DynamicObject::to_value`] (or
/// [`DynamicObject::to_object`]) to parse the whole object on demand.
///
/// Cloning is cheap for the JSON (a reference count) but copies the small metadata; share
/// objects as `Arc<DynamicObject>` as the caches do.
#[derive(Clone, PartialEq, Eq)]
pub struct DynamicObject {
    json: Bytes,
    name: Box<str>,
    namespace: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    uid: Option<Box<str>>,
    labels: Option<BTreeMap<String, String>>,
}

/// The part of an object parsed eagerly; every other field is skipped (but still checked to
/// be well-formed JSON).
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    metadata: Option<MetaHead<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaHead<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    resource_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uid: Option<Cow<'a, str>>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

fn boxed(s: Option<Cow<'_, str>>) -> Option<Box<str>> {
    s.map(|s| Box::from(s.as_ref()))
}

impl DynamicObject {
    /// Parses the metadata of `json` and keeps the bytes as they are.
    ///
    /// The whole input must be one well-formed JSON object; fields other than `metadata`'s
    /// name, namespace, resourceVersion, uid and labels are not interpreted. Missing metadata
    /// reads as absent (an object without a name has the name `""`).
    ///
    /// The bytes are kept as given: if `json` is a slice of a larger buffer (for example one
    /// item of a list response), the whole buffer stays alive as long as this object does. Use
    /// [`DynamicObject::from_slice`] to keep a compact private copy instead.
    pub fn from_json(json: Bytes) -> Result<DynamicObject, ObjectError> {
        let head: Head<'_> = serde_json::from_slice(&json)?;
        let meta = head.metadata;
        let (name, namespace, resource_version, uid, labels) = match meta {
            Some(m) => (
                m.name.map(|n| Box::from(n.as_ref())).unwrap_or_default(),
                boxed(m.namespace),
                boxed(m.resource_version),
                boxed(m.uid),
                m.labels,
            ),
            None => (Box::from(""), None, None, None, None),
        };
        Ok(DynamicObject {
            json,
            name,
            namespace,
            resource_version,
            uid,
            labels,
        })
    }

    /// Like [`DynamicObject::from_json`], copying `json` into a buffer of its own.
    pub fn from_slice(json: &[u8]) -> Result<DynamicObject, ObjectError> {
        DynamicObject::from_json(Bytes::copy_from_slice(json))
    }

    /// Serializes an [`api::Object`] and wraps the result.
    pub fn from_object(object: &api::Object) -> Result<DynamicObject, ObjectError> {
        DynamicObject::from_json(Bytes::from(serde_json::to_vec(object)?))
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

    /// An estimate of the bytes this object holds: the JSON plus the parsed metadata and the
    /// struct itself. Shared JSON buffers are counted in full.
    pub fn approx_size(&self) -> usize {
        let opt = |s: &Option<Box<str>>| s.as_ref().map_or(0, |s| s.len());
        let labels = self.labels.as_ref().map_or(0, |l| {
            // Per entry: two `String` headers plus the text, plus B-tree node slack.
            l.iter()
                .map(|(k, v)| k.len() + v.len() + 2 * std::mem::size_of::<String>() + 16)
                .sum()
        });
        std::mem::size_of::<DynamicObject>()
            + self.json.len()
            + self.name.len()
            + opt(&self.namespace)
            + opt(&self.resource_version)
            + opt(&self.uid)
            + labels
    }
}

impl KubeObject for DynamicObject {
    fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }
    fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }
    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.labels.as_ref()
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
    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.metadata().labels.as_ref()
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
}

/// The fast path: only the metadata the caches need is parsed (no JSON tree is built), and
/// the text is copied into a buffer of its own, exactly as long as the object.
impl DecodeObject for DynamicObject {
    fn decode(json: &[u8]) -> Result<Self, ObjectError> {
        DynamicObject::from_slice(json)
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
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("resource_version", &self.resource_version)
            .field("json_len", &self.json.len())
            .finish()
    }
}

impl<'de> Deserialize<'de> for DynamicObject {
    /// Decodes one JSON object (for example the `object` of a watch event), copying its text
    /// into a private buffer.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw: Box<serde_json::value::RawValue> = Deserialize::deserialize(deserializer)?;
        DynamicObject::from_slice(raw.get().as_bytes()).map_err(serde::de::Error::custom)
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
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
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
            KubeObject::labels(&pod)
                .and_then(|l| l.get("tier"))
                .map(String::as_str),
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
