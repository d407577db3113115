//! Request handlers: one file per verb. Each takes a parsed [`RequestInfo`] and returns a
//! response or a [`Status`], never touching storage before the input is validated.

pub mod access_review;
pub mod apply;
pub mod binding;
pub mod crd_controller;
pub mod create;
pub mod default_service_account;
pub mod delete;
pub mod event_ttl;
pub mod eviction;
pub mod get;
pub mod list;
pub mod patch;
pub mod pod_condition;
pub mod scale;
pub mod service_allocation;
pub mod state;
pub mod token_request;
pub mod update;
pub mod watch;

use crate::cacher::Filter;
use crate::encoding::body::{full, Body};
use crate::registry::ResourceInfo;
use api::list_options::ListOptions;
use api::{Object, Status};
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use storage::{KeyValue, StorageError};

/// Request bodies above this size are refused with 413 (kube-apiserver's limit).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// A create or update body decoded as one object; a large one on tokio's blocking pool (see
/// [`crate::encoding::blocking`]), where it is also freed if it is refused.
pub async fn decode_body(body: Bytes) -> Result<Object, Status> {
    crate::encoding::blocking::run(body, Object::from_slice, |e| {
        Status::internal(format!("decoding the request body: {e}"))
    })
    .await
}

/// What the router extracted from the URL.
#[derive(Debug, Clone)]
pub struct RequestInfo {
    /// The resource addressed.
    pub info: &'static ResourceInfo,
    /// The namespace in the path (`None` for cluster-scoped or all-namespaces requests).
    pub namespace: Option<String>,
    /// The object name, for item requests.
    pub name: Option<String>,
    /// The subresource: `status`, `scale`, a namespace's `finalize`, or a pod's `binding` or
    /// `eviction` (`binding` also for the legacy `bindings` collection, whose requests name
    /// no pod).
    pub subresource: Option<String>,
    /// True for the legacy `/watch/` URL form.
    pub legacy_watch: bool,
}

/// Whether `req` addresses a subresource that only takes a `POST` (a pod's `binding` or
/// `eviction`, a ServiceAccount's `token`).
pub fn is_create_only(req: &RequestInfo) -> bool {
    matches!(
        req.subresource.as_deref(),
        Some("binding" | "eviction" | "token")
    )
}

impl RequestInfo {
    /// The storage key of the named object (`ns/name` below the resource prefix), full form.
    pub fn storage_key(&self, name: &str) -> String {
        format!(
            "{}{}",
            self.info.key_prefix(),
            self.info
                .object_key(self.namespace.as_deref().unwrap_or(""), name)
        )
    }

    /// The name, or a 405 for collection URLs that need one.
    pub fn require_name(&self, verb: &str) -> Result<&str, Status> {
        self.name
            .as_deref()
            .ok_or_else(|| Status::method_not_allowed(verb, self.info.resource))
    }
}

/// A JSON response with `code`.
pub fn json_response(code: u16, body: impl Into<Bytes>) -> Response<Body> {
    let mut resp = Response::new(full(body.into()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The response for a failed request.
pub fn status_response(s: &Status) -> Response<Body> {
    let mut resp = json_response(s.code(), s.to_json());
    if let Some(r) = s.retry_after {
        if let Ok(v) = HeaderValue::from_str(&r.to_string()) {
            resp.headers_mut().insert(http::header::RETRY_AFTER, v);
        }
    }
    resp
}

/// Maps a storage failure on object `name` to its Status.
pub fn storage_error(info: &ResourceInfo, name: &str, e: StorageError) -> Status {
    let s = match e {
        StorageError::AlreadyExists => Status::already_exists(info.resource, name),
        StorageError::NotFound => Status::not_found(info.resource, name),
        StorageError::Conflict { .. } => Status::conflict(
            info.resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ),
        StorageError::Compacted { requested, compacted } => Status::too_old_resource_version(requested, compacted + 1),
        StorageError::FutureRevision { requested, current } => Status::resource_version_too_large(requested, current),
        StorageError::Unavailable(m) => Status::unavailable(format!("storage unavailable: {m}")),
        StorageError::WatchOverflow | StorageError::Internal(_) => Status::internal(e),
    };
    s.with_group(info.group)
}

/// Decodes a stored value into an object with its resourceVersion set.
pub fn decode_stored(info: &ResourceInfo, kv: &KeyValue) -> Result<Object, Status> {
    let mut obj = Object::from_slice(&kv.value).map_err(|_| {
        Status::internal(format!(
            "stored {} value at {} does not decode",
            info.resource,
            String::from_utf8_lossy(&kv.key)
        ))
    })?;
    obj.set_meta("resourceVersion", kv.mod_revision.to_string());
    crate::registry::strategy::custom_read(info, &mut obj);
    Ok(obj)
}

/// The largest object stored: etcd's default request limit (`--max-request-bytes`, 1.5 MiB),
/// which is what bounds an object's size on a Kubernetes cluster. Enforced for every backend,
/// so an object that would not fit a cluster's etcd does not fit here either.
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// The bytes to store for `obj`: its JSON without `resourceVersion` (the storage revision is
/// the resourceVersion, stamped on the way out). 413 if it is larger than
/// [`MAX_OBJECT_BYTES`] (a request within the body limit can still build one, e.g. by patches
/// that each add a little).
pub fn encode_for_storage(obj: &mut Object) -> Result<Bytes, Status> {
    encode_for_storage_with_slot(obj).map(|(value, _)| value)
}

/// Where the resourceVersion goes in an object's stored JSON: the bytes
/// [`encode_for_storage_with_slot`] wrote, with the member spliced in there, are the object's
/// JSON with its resourceVersion, as encoding it whole would write them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RvSlot {
    /// The offset to insert at.
    at: usize,
    /// The start of a member (the inserted one takes a comma after it); else the metadata's
    /// closing brace.
    before_member: bool,
    /// The metadata has no other member.
    alone: bool,
}

impl RvSlot {
    /// `stored` with `metadata.resourceVersion` set to `rv` at this slot.
    fn splice(self, stored: &[u8], rv: u64) -> Option<Vec<u8>> {
        let (head, tail) = (stored.get(..self.at)?, stored.get(self.at..)?);
        let mut out = Vec::with_capacity(stored.len() + 48);
        out.extend_from_slice(head);
        if !self.before_member && !self.alone {
            out.push(b',');
        }
        out.extend_from_slice(b"\"resourceVersion\":\"");
        out.extend_from_slice(rv.to_string().as_bytes());
        out.push(b'"');
        if self.before_member {
            out.push(b',');
        }
        out.extend_from_slice(tail);
        Some(out)
    }
}

/// [`encode_for_storage`], and where its resourceVersion goes when the object is answered
/// (always found: removing the stored resourceVersion makes `metadata` an object; `None`
/// would leave the answer to [`object_response`]). The bytes are exactly
/// `serde_json`'s compact encoding of the object (sorted keys, as its maps are): written
/// member by member to note the offset on the way.
pub fn encode_for_storage_with_slot(obj: &mut Object) -> Result<(Bytes, Option<RvSlot>), Status> {
    obj.remove_meta("resourceVersion");
    let (value, slot) = encode_noting_rv_slot(&obj.0);
    if holds_serde_json_raw_value_key(&value) {
        return Err(Status::bad_request(format!(
            "the object holds the key {SERDE_JSON_RAW_VALUE_KEY:?}, which this server cannot \
             store: its JSON reader reserves it"
        )));
    }
    if value.len() > MAX_OBJECT_BYTES {
        return Err(Status::new(
            api::status::Reason::RequestEntityTooLarge,
            format!(
                "the object would be {} bytes, over the limit of {MAX_OBJECT_BYTES} bytes an \
                 object may have in storage",
                value.len()
            ),
        ));
    }
    Ok((Bytes::from(value), slot))
}

/// The compact JSON of `map` (as `serde_json::to_vec` writes it) and the resourceVersion's
/// slot in its `metadata`.
fn encode_noting_rv_slot(
    map: &serde_json::Map<String, serde_json::Value>,
) -> (Vec<u8>, Option<RvSlot>) {
    // Writing JSON into a Vec cannot fail.
    fn put(out: &mut Vec<u8>, v: &(impl serde::Serialize + ?Sized)) {
        let _ = serde_json::to_writer(&mut *out, v);
    }
    let mut out = Vec::with_capacity(1024);
    let mut slot = None;
    out.push(b'{');
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put(&mut out, key);
        out.push(b':');
        match value {
            serde_json::Value::Object(meta) if key == "metadata" => {
                out.push(b'{');
                for (j, (k, v)) in meta.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    // Keys come in byte order (serde_json's maps are BTreeMaps here, without
                    // `preserve_order`), which is where `object_response` writes the member.
                    if slot.is_none() && k.as_str() > "resourceVersion" {
                        slot = Some(RvSlot {
                            at: out.len(),
                            before_member: true,
                            alone: false,
                        });
                    }
                    put(&mut out, k);
                    out.push(b':');
                    put(&mut out, v);
                }
                if slot.is_none() {
                    slot = Some(RvSlot {
                        at: out.len(),
                        before_member: false,
                        alone: meta.is_empty(),
                    });
                }
                out.push(b'}');
            }
            _ => put(&mut out, value),
        }
    }
    out.push(b'}');
    (out, slot)
}

/// `serde_json`'s private token for raw values. With its `raw_value` feature (ours), an
/// object whose first key is this token is read not as an object but as the JSON text in its
/// value, so an object holding it as a key (anywhere: maps are written with sorted keys, and
/// `$` sorts first) would be stored as JSON the server itself no longer reads back (found by
/// fuzzing; RELIABILITY.md, "Fuzzing").
const SERDE_JSON_RAW_VALUE_KEY: &str = "$serde_json::private::RawValue";

/// Whether `json` (compact JSON as `serde_json` writes it, which never escapes `$` or `:`)
/// holds [`SERDE_JSON_RAW_VALUE_KEY`] as a key: the quoted token right before a colon, which
/// a string value can never be. One pass over the bytes, comparing only at each `$`.
fn holds_serde_json_raw_value_key(json: &[u8]) -> bool {
    let token = SERDE_JSON_RAW_VALUE_KEY.as_bytes();
    json.iter().enumerate().any(|(i, &b)| {
        b == b'$'
            && i > 0
            && json[i - 1] == b'"'
            && json[i..].starts_with(token)
            && json[i + token.len()..].starts_with(b"\":")
    })
}

/// Encodes `obj` for a response, with `rv` as its resourceVersion.
pub fn object_response(
    info: &ResourceInfo,
    code: u16,
    obj: &mut Object,
    rv: u64,
) -> Response<Body> {
    obj.set_meta("resourceVersion", rv.to_string());
    // A custom object is answered at the version the request named, not the stored one.
    crate::registry::strategy::custom_read(info, obj);
    json_response(code, obj.to_vec())
}

/// [`object_response`] for an object just written: `stored` (its JSON as stored, which
/// [`encode_for_storage_with_slot`] made of it and found `slot` in) with `rv` spliced in,
/// the same bytes as encoding `obj` at `rv` would give, without encoding it again. Custom
/// objects (answered at the request's version) and objects without a slot are encoded from
/// `obj`.
pub fn stored_object_response(
    info: &ResourceInfo,
    code: u16,
    obj: &mut Object,
    stored: &[u8],
    slot: Option<RvSlot>,
    rv: u64,
) -> Response<Body> {
    if info.custom.is_none() {
        if let Some(json) = slot.and_then(|s| s.splice(stored, rv)) {
            return json_response(code, json);
        }
    }
    object_response(info, code, obj, rv)
}

/// Builds the list/watch filter for a request, validating the field selector's fields.
pub fn build_filter(req: &RequestInfo, opts: &ListOptions) -> Result<Filter, Status> {
    let labels = req.info.field_labels();
    opts.field_selector
        .validate(&labels)
        .map_err(|e| Status::bad_request(format!("{e}")))?;
    Ok(Filter::new(
        req.info,
        req.namespace.clone(),
        opts.label_selector.clone(),
        opts.field_selector.clone(),
    ))
}

/// The JSON object of a request body that must be a `kind` of one of `api_versions` (the
/// first is the one named in messages): `apiVersion` and `kind` may be left out, and every
/// field must have the type Kubernetes gives it (checked by decoding it as `T`; unknown
/// fields are ignored, as kube-apiserver drops them).
///
/// # Errors
/// 400 for a body that is not a JSON object, names another type, or has a field of the
/// wrong type.
pub fn decode_typed<T: serde::de::DeserializeOwned>(
    body: &[u8],
    api_versions: &[&str],
    kind: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, Status> {
    use serde_json::Value;
    let want = api_versions.first().copied().unwrap_or("v1");
    let cannot = |why: String| {
        Status::bad_request(format!(
            "{kind} in version \"{}\" cannot be handled as a {kind}: {why}",
            want.rsplit('/').next().unwrap_or(want)
        ))
    };
    let value: Value = serde_json::from_slice(body).map_err(|e| cannot(e.to_string()))?;
    let Value::Object(mut obj) = value else {
        return Err(cannot("the body is not a JSON object".into()));
    };
    match obj.get("apiVersion") {
        None | Some(Value::Null) => {}
        Some(Value::String(v)) if v.is_empty() || api_versions.contains(&v.as_str()) => {}
        Some(other) => {
            return Err(Status::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({want})",
                other.as_str().unwrap_or("?")
            )))
        }
    }
    match obj.get("kind") {
        None | Some(Value::Null) => {}
        Some(Value::String(k)) if k.is_empty() || k == kind => {}
        Some(other) => {
            return Err(Status::bad_request(format!(
                "the kind in the data ({}) does not match the expected kind ({kind})",
                other.as_str().unwrap_or("?")
            )))
        }
    }
    // k8s-openapi's types want apiVersion and kind exactly; the request may leave them out.
    obj.insert("apiVersion".into(), Value::String(want.into()));
    obj.insert("kind".into(), Value::String(kind.into()));
    serde_json::from_value::<T>(Value::Object(obj.clone())).map_err(|e| cannot(e.to_string()))?;
    Ok(obj)
}

/// The body of the `Status` a subresource create (binding, eviction) answers with.
pub fn created_status() -> Response<Body> {
    json_response(
        201,
        serde_json::to_vec(&serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }))
        .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    async fn body_of(resp: Response<Body>) -> (u16, Bytes) {
        let code = resp.status().as_u16();
        (code, resp.into_body().collect().await.unwrap().to_bytes())
    }

    /// A write's answer spliced into the stored JSON is byte for byte the answer encoded
    /// from the object, with or without a resourceVersion stored, and with metadata keys
    /// on either side of it.
    #[tokio::test]
    async fn a_write_is_answered_with_the_stored_json_as_encoding_would_answer() {
        let pods = crate::registry::resources::find("", "v1", "pods").unwrap();
        let configmaps = crate::registry::resources::find("", "v1", "configmaps").unwrap();
        for (info, v) in [
            (
                pods,
                serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "namespace": "default", "uid": "u",
                        "labels": {"app": "web"}, "resourceVersion": "3",
                        "managedFields": [{"manager": "m", "operation": "Update"}]},
                    "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
                    "status": {"phase": "Running", "podIP": "10.0.0.1"}}),
            ),
            (
                configmaps,
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "binaryData": {}, "data": {"k": "v\n\"q\"\u{e9}"},
                    "metadata": {"name": "c", "namespace": "default"}}),
            ),
            (
                configmaps,
                serde_json::json!({"kind": "ConfigMap", "metadata": {"annotations": {"z": "1"}}}),
            ),
            (
                configmaps,
                serde_json::json!({"metadata": {}, "x\"y": [1.5, null]}),
            ),
            (
                configmaps,
                serde_json::json!({"metadata": {"uid": "u", "zz": {"a": 1}}}),
            ),
            (configmaps, serde_json::json!({"kind": "ConfigMap"})),
        ] {
            let obj = Object::from_value(v).unwrap();
            let mut stored_obj = obj.clone();
            let (stored, slot) = encode_for_storage_with_slot(&mut stored_obj).unwrap();
            let mut plain = obj.clone();
            plain.remove_meta("resourceVersion");
            assert_eq!(stored, plain.to_vec(), "the stored bytes are serde_json's");
            let spliced = body_of(stored_object_response(
                info,
                201,
                &mut obj.clone(),
                &stored,
                slot,
                42,
            ))
            .await;
            let encoded = body_of(object_response(info, 201, &mut obj.clone(), 42)).await;
            assert_eq!(spliced, encoded);
            let answered: serde_json::Value = serde_json::from_slice(&spliced.1).unwrap();
            assert_eq!(answered["metadata"]["resourceVersion"], "42");
            assert!(slot.is_some());
        }
    }
}
