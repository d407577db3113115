//! Protobuf responses (`application/vnd.kubernetes.protobuf`): objects, lists and `Status`es
//! as Kubernetes' protobuf serializer writes them, and watch events in its length-delimited
//! stream framing.
//!
//! Wire facts (apimachinery's protobuf serializer):
//! - a body is `k8s\0` followed by a `runtime.Unknown` whose `typeMeta` names the kind and
//!   whose `raw` is the object's own message;
//! - a watch response (`application/vnd.kubernetes.protobuf;stream=watch`) is a sequence of
//!   frames, each a 4-byte big-endian length and a bare `meta.v1.WatchEvent` message (no
//!   envelope); the event's `object.raw` is a complete enveloped body as above.
//!
//! The objects are kept as JSON everywhere else, so this converts from JSON: `Status` by
//! hand, every served kind and its lists through the generated field table
//! ([`crate::schema::protobuf_generic::encode`]).

use crate::encoding::body::Body;
use crate::registry::ResourceInfo;
use api::protobuf_wire::{put_delimited, put_key, put_varint, MAGIC};
use api::Status;
use bytes::{BufMut, BytesMut};
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::RawExtension;
use prost::encoding::encoded_len_varint;
use prost::Message as _;
use serde_json::{Map, Value};

/// The content type of a protobuf watch response.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// True if objects of `info` can be served as protobuf.
pub fn supports(info: &ResourceInfo) -> bool {
    crate::schema::protobuf_generic::root(&info.api_version(), info.kind).is_some()
}

fn bad(msg: impl std::fmt::Display) -> Status {
    Status::internal(format!("cannot encode as protobuf: {msg}"))
}

/// `k8s\0` + `Unknown{typeMeta, raw}`: a complete protobuf body.
pub fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + api_version.len() + kind.len() + 32);
    begin_envelope(&mut out, api_version, kind);
    put_delimited(&mut out, 2, &raw);
    end_envelope(&mut out);
    out
}

/// Starts a body as [`envelope`] writes it: `k8s\0`, then the typeMeta (field 1). The
/// caller writes the object's message as field 2, then calls [`end_envelope`].
pub(super) fn begin_envelope(out: &mut Vec<u8>, api_version: &str, kind: &str) {
    let string_len = |s: &str| 1 + encoded_len_varint(s.len() as u64) + s.len();
    out.extend_from_slice(MAGIC);
    put_key(out, 1, 2);
    put_varint(out, (string_len(api_version) + string_len(kind)) as u64);
    put_delimited(out, 1, api_version.as_bytes());
    put_delimited(out, 2, kind.as_bytes());
}

/// Ends a body begun with [`begin_envelope`]: the empty contentEncoding and contentType
/// that Kubernetes writes.
pub(super) fn end_envelope(out: &mut Vec<u8>) {
    put_delimited(out, 3, b"");
    put_delimited(out, 4, b"");
}

fn s(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_string)
}

fn i(v: &Value, k: &str) -> Option<i64> {
    v.get(k).and_then(Value::as_i64)
}

fn list_meta(m: &Value) -> meta::ListMeta {
    meta::ListMeta {
        self_link: s(m, "selfLink"),
        resource_version: s(m, "resourceVersion"),
        r#continue: s(m, "continue"),
        remaining_item_count: i(m, "remainingItemCount"),
    }
}

fn status(v: &Value) -> meta::Status {
    let null = Value::Null;
    let details = v.get("details");
    meta::Status {
        metadata: Some(list_meta(v.get("metadata").unwrap_or(&null))),
        status: s(v, "status"),
        message: s(v, "message"),
        reason: s(v, "reason"),
        details: details.map(|d| meta::StatusDetails {
            name: s(d, "name"),
            group: s(d, "group"),
            kind: s(d, "kind"),
            uid: s(d, "uid"),
            causes: d
                .get("causes")
                .and_then(Value::as_array)
                .map(|cs| {
                    cs.iter()
                        .map(|c| meta::StatusCause {
                            reason: s(c, "reason"),
                            message: s(c, "message"),
                            field: s(c, "field"),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            retry_after_seconds: i(d, "retryAfterSeconds").and_then(|n| i32::try_from(n).ok()),
        }),
        code: i(v, "code").and_then(|n| i32::try_from(n).ok()),
    }
}

/// The message bytes (no envelope) of one JSON object of kind `kind`.
fn message(kind: &str, v: &Value) -> Result<Vec<u8>, Status> {
    match kind {
        "Status" => Ok(status(v).encode_to_vec()),
        other => generic_message(other, v),
    }
}

/// A served kind, or a list of one, through the generated field table.
fn generic_message(kind: &str, v: &Value) -> Result<Vec<u8>, Status> {
    use crate::schema::protobuf_generic::{encode, root};
    let api_version = v
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let object = |index: usize, item: &Value| {
        item.as_object()
            .ok_or_else(|| bad("an item is not an object"))
            .and_then(|m| encode(index, m).map_err(bad))
    };
    if let Some(index) = root(api_version, kind) {
        return object(index, v);
    }
    let base = kind.strip_suffix("List").unwrap_or_default();
    let Some(index) = root(api_version, base) else {
        return Err(bad(format!("kind {kind:?} has no protobuf encoding here")));
    };
    // A list: ListMeta at 1, the items at 2.
    let null = Value::Null;
    let mut out = Vec::new();
    let meta = list_meta(v.get("metadata").unwrap_or(&null)).encode_to_vec();
    prost::encoding::bytes::encode(1, &meta, &mut out);
    for item in v
        .get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        prost::encoding::bytes::encode(2, &object(index, item)?, &mut out);
    }
    Ok(out)
}

/// A JSON body (an object, a list of one of the [`supports`] kinds, or a `Status`) as a
/// complete protobuf body.
pub fn encode_body(json: &[u8]) -> Result<Vec<u8>, Status> {
    // An object of a served kind in one pass; anything else (lists, `Status`), and any
    // input the one pass refuses, through the parsed tree, which gives the
    // error if there is one.
    if let Ok(Some(body)) = super::protobuf_transcode::encode_object(json) {
        return Ok(body);
    }
    let v: Value = serde_json::from_slice(json).map_err(bad)?;
    encode_value(&v)
}

fn encode_value(v: &Value) -> Result<Vec<u8>, Status> {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or_default();
    let api_version = match v.get("apiVersion").and_then(Value::as_str) {
        Some(a) => a,
        None if kind == "Status" => "v1",
        None => "",
    };
    Ok(envelope(api_version, kind, message(kind, v)?))
}

/// Appends one watch frame: the big-endian length, then a `WatchEvent` of `event_type`
/// whose object is the JSON `object` as an enveloped protobuf body.
pub fn put_watch_frame(event_type: &str, object: &[u8], out: &mut BytesMut) -> Result<(), Status> {
    let v: Value = serde_json::from_slice(object).map_err(bad)?;
    put_watch_frame_value(event_type, &v, out)
}

/// The cached object's protobuf body, converted once and then shared by every watcher.
/// Borrowed, not cloned: a replay reads 100,000 bodies, and cloning each `Bytes` would touch
/// one more cold cache line per event with two atomic operations.
pub fn cached_body(obj: &crate::cacher::CachedObject) -> Result<&bytes::Bytes, Status> {
    obj.derived
        .protobuf
        .get_or_init(|| encode_body(&obj.json).ok().map(bytes::Bytes::from))
        .as_ref()
        .ok_or_else(|| bad("the object has no protobuf encoding"))
}

/// The parts of a protobuf list body (`{kind}List`) around its items: see [`list_envelope`].
pub struct ListEnvelope {
    /// The `k8s\0` magic, the envelope's type, and the list message's start with its metadata.
    header: Vec<u8>,
    /// The envelope's (empty) contentEncoding and contentType.
    footer: Vec<u8>,
    /// The whole body's length, items included.
    len: u64,
}

/// Prepares a page of cached objects as a protobuf list body: each item's message comes from
/// the per-object cache (converted from JSON on first use, then shared with watchers and later
/// lists), so nothing is parsed that was converted before. All conversions happen here, before
/// anything is sent, because the list message's length leads the body.
///
/// # Errors
/// An item without a protobuf encoding (the caller answers JSON instead).
pub fn list_envelope(
    api_version: &str,
    list_kind: &str,
    resource_version: u64,
    continue_token: Option<&str>,
    remaining: Option<u64>,
    items: &[std::sync::Arc<crate::cacher::CachedObject>],
) -> Result<ListEnvelope, Status> {
    let lm = meta::ListMeta {
        self_link: None,
        resource_version: Some(resource_version.to_string()),
        r#continue: continue_token.map(str::to_string),
        remaining_item_count: remaining.and_then(|n| i64::try_from(n).ok()),
    };
    let mut items_len = 0;
    for item in items {
        let raw = list_item_raw(item)?;
        items_len += delimited_len(raw.len());
    }
    // The list message: metadata (1), then each item (2, length-delimited).
    let msg_len = delimited_len(lm.encoded_len()) + items_len;
    let mut header = Vec::with_capacity(64 + api_version.len() + list_kind.len());
    begin_envelope(&mut header, api_version, list_kind);
    put_key(&mut header, 2, 2);
    put_varint(&mut header, msg_len as u64);
    prost::encoding::message::encode(1, &lm, &mut header);
    let mut footer = Vec::with_capacity(4);
    end_envelope(&mut footer);
    let len = header.len() + items_len + footer.len();
    Ok(ListEnvelope {
        header,
        footer,
        len: len as u64,
    })
}

/// The body of a list page prepared by [`list_envelope`] from the same `items`, streamed in
/// ~256 KiB chunks: each item's message is copied once, and no buffer of the whole page is
/// made (a page of 500 pods is a megabyte, which the allocator would fault in afresh for
/// every page).
pub fn list_body(
    envelope: ListEnvelope,
    items: Vec<std::sync::Arc<crate::cacher::CachedObject>>,
) -> Body {
    let encode = |item: &crate::cacher::CachedObject, out: &mut BytesMut| {
        // Converted by `list_envelope`: the cached body is there and cannot change.
        if let Ok(raw) = list_item_raw(item) {
            prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, out);
            prost::encoding::encode_varint(raw.len() as u64, out);
            out.put_slice(raw);
        }
    };
    crate::encoding::body::list_body_exact(
        envelope.header.into(),
        items,
        envelope.footer.into(),
        Box::new(encode),
        envelope.len,
    )
}

/// An item's own message, out of its cached enveloped body.
fn list_item_raw(item: &crate::cacher::CachedObject) -> Result<&[u8], Status> {
    enveloped_raw(cached_body(item)?).ok_or_else(|| bad("a cached body is not enveloped"))
}

/// The length of a length-delimited field of `len` bytes with a one-byte key.
fn delimited_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

/// The `raw` field (the object's own message) of an enveloped body, as a slice of it.
fn enveloped_raw(body: &[u8]) -> Option<&[u8]> {
    use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
    let mut buf = body.strip_prefix(MAGIC)?;
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf).ok()?;
        if tag == 2 && wire_type == WireType::LengthDelimited {
            let len = usize::try_from(decode_varint(&mut buf).ok()?).ok()?;
            return buf.get(..len);
        }
        skip_field(wire_type, tag, &mut buf, DecodeContext::default()).ok()?;
    }
    None
}

/// Like [`put_watch_frame`], for an object whose enveloped protobuf body is `raw` already:
/// only the small `WatchEvent` wrapper is encoded, the body is copied as is.
pub fn put_watch_frame_raw(event_type: &str, raw: &[u8], out: &mut BytesMut) {
    use prost::encoding::encode_varint;
    // WatchEvent{1: type, 2: RawExtension{1: raw}}
    let ext_len = 1 + encoded_len_varint(raw.len() as u64) + raw.len();
    let ev_len = 1
        + encoded_len_varint(event_type.len() as u64)
        + event_type.len()
        + 1
        + encoded_len_varint(ext_len as u64)
        + ext_len;
    out.reserve(ev_len + 4);
    out.put_u32(ev_len as u32);
    out.put_u8(0x0a);
    encode_varint(event_type.len() as u64, out);
    out.put_slice(event_type.as_bytes());
    out.put_u8(0x12);
    encode_varint(ext_len as u64, out);
    out.put_u8(0x0a);
    encode_varint(raw.len() as u64, out);
    out.put_slice(raw);
}

/// Like [`put_watch_frame`], with the object already parsed.
pub fn put_watch_frame_value(
    event_type: &str,
    object: &Value,
    out: &mut BytesMut,
) -> Result<(), Status> {
    let ev = meta::WatchEvent {
        r#type: Some(event_type.to_string()),
        object: Some(RawExtension {
            raw: Some(encode_value(object)?),
        }),
    };
    let len = u32::try_from(ev.encoded_len()).map_err(bad)?;
    out.reserve(len as usize + 4);
    out.put_u32(len);
    let mut body = Vec::with_capacity(len as usize);
    ev.encode(&mut body).map_err(bad)?;
    out.put_slice(&body);
    Ok(())
}

/// The object of a BOOKMARK event of `kind`: only the resourceVersion (and the
/// initial-events-end annotation when it ends a streaming list's initial events).
pub fn bookmark_object(
    api_version: &str,
    kind: &str,
    resource_version: u64,
    initial_events_end: bool,
) -> Value {
    let mut meta = Map::new();
    meta.insert(
        "resourceVersion".into(),
        Value::String(resource_version.to_string()),
    );
    if initial_events_end {
        meta.insert(
            "annotations".into(),
            serde_json::json!({"k8s.io/initial-events-end": "true"}),
        );
    }
    serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": meta})
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    use serde_json::json;

    #[test]
    fn the_envelope_is_the_unknown_message_prost_writes() {
        let raw = vec![7u8; 300];
        let u = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some("apps/v1".into()),
                kind: Some("Deployment".into()),
            }),
            raw: Some(raw.clone()),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut want = b"k8s\0".to_vec();
        u.encode(&mut want).unwrap();
        assert_eq!(envelope("apps/v1", "Deployment", raw), want);
    }

    fn unwrap(body: &[u8]) -> (String, String, Vec<u8>) {
        let rest = body.strip_prefix(b"k8s\0").expect("magic");
        let u = Unknown::decode(rest).unwrap();
        let tm = u.type_meta.unwrap();
        (
            tm.api_version.unwrap(),
            tm.kind.unwrap(),
            u.raw.unwrap_or_default(),
        )
    }

    #[test]
    fn objects_lists_and_statuses_decode_as_kubernetes_messages() {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team-a", "uid": "u-1", "resourceVersion": "42",
                         "creationTimestamp": "2026-11-22T08:00:00Z", "labels": {"env": "dev"}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        let body = encode_body(&serde_json::to_vec(&ns).unwrap()).unwrap();
        let (av, kind, raw) = unwrap(&body);
        assert_eq!((av.as_str(), kind.as_str()), ("v1", "Namespace"));
        let got = core::Namespace::decode(raw.as_slice()).unwrap();
        let m = got.metadata.unwrap();
        assert_eq!(m.name.as_deref(), Some("team-a"));
        assert_eq!(m.resource_version.as_deref(), Some("42"));
        assert_eq!(m.labels.get("env").map(String::as_str), Some("dev"));
        assert_eq!(
            m.creation_timestamp.and_then(|t| t.seconds),
            api::time::parse_rfc3339("2026-11-22T08:00:00Z")
        );
        assert_eq!(got.spec.unwrap().finalizers, vec!["kubernetes"]);
        assert_eq!(got.status.unwrap().phase.as_deref(), Some("Active"));

        let list = json!({"apiVersion": "v1", "kind": "ConfigMapList",
            "metadata": {"resourceVersion": "7", "continue": "tok", "remainingItemCount": 3},
            "items": [{"metadata": {"name": "a"}, "data": {"k": "v"}, "binaryData": {"b": "AAEC"}}]});
        let (_, kind, raw) = unwrap(&encode_body(&serde_json::to_vec(&list).unwrap()).unwrap());
        assert_eq!(kind, "ConfigMapList");
        let got = core::ConfigMapList::decode(raw.as_slice()).unwrap();
        let lm = got.metadata.unwrap();
        assert_eq!(lm.r#continue.as_deref(), Some("tok"));
        assert_eq!(lm.remaining_item_count, Some(3));
        assert_eq!(got.items[0].data.get("k").map(String::as_str), Some("v"));
        assert_eq!(got.items[0].binary_data.get("b"), Some(&vec![0u8, 1, 2]));

        let st = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "NotFound", "code": 404, "details": {"name": "x", "kind": "configmaps"}});
        let (_, kind, raw) = unwrap(&encode_body(&serde_json::to_vec(&st).unwrap()).unwrap());
        assert_eq!(kind, "Status");
        let got = meta::Status::decode(raw.as_slice()).unwrap();
        assert_eq!(got.code, Some(404));
        assert_eq!(got.details.unwrap().name.as_deref(), Some("x"));
    }

    #[test]
    fn watch_frames_are_length_prefixed_bare_watch_events() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let mut out = BytesMut::new();
        put_watch_frame("ADDED", &serde_json::to_vec(&cm).unwrap(), &mut out).unwrap();
        put_watch_frame_value(
            "BOOKMARK",
            &bookmark_object("v1", "ConfigMap", 9, true),
            &mut out,
        )
        .unwrap();
        let cm_body = encode_body(&serde_json::to_vec(&cm).unwrap()).unwrap();
        let mut manual = BytesMut::new();
        put_watch_frame_raw("ADDED", &cm_body, &mut manual);
        assert_eq!(
            &manual[..],
            &out[..manual.len()],
            "hand-encoded frame = prost's"
        );
        let mut rest = &out[..];
        let mut events = Vec::new();
        while !rest.is_empty() {
            let n = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            events.push(meta::WatchEvent::decode(&rest[4..4 + n]).unwrap());
            rest = &rest[4 + n..];
        }
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].r#type.as_deref(), Some("ADDED"));
        let raw = events[0].object.clone().unwrap().raw.unwrap();
        let (_, kind, raw) = unwrap(&raw);
        assert_eq!(kind, "ConfigMap");
        assert_eq!(
            core::ConfigMap::decode(raw.as_slice())
                .unwrap()
                .metadata
                .unwrap()
                .name
                .as_deref(),
            Some("a")
        );
        let (_, _, raw) = unwrap(&events[1].object.clone().unwrap().raw.unwrap());
        let m = core::ConfigMap::decode(raw.as_slice())
            .unwrap()
            .metadata
            .unwrap();
        assert_eq!(m.resource_version.as_deref(), Some("9"));
        assert_eq!(
            m.annotations
                .get("k8s.io/initial-events-end")
                .map(String::as_str),
            Some("true")
        );
    }

    #[test]
    fn the_raw_message_is_found_in_an_envelope_or_not_at_all() {
        let body = envelope("v1", "Pod", vec![0x0a, 0x00]);
        assert_eq!(enveloped_raw(&body), Some(&[0x0a, 0x00][..]));
        assert_eq!(enveloped_raw(b"{}"), None);
        assert_eq!(enveloped_raw(b"k8s\0"), None);
        // A length past the end, and a truncated key.
        assert_eq!(enveloped_raw(b"k8s\0\x12\x05ab"), None);
        assert_eq!(enveloped_raw(b"k8s\0\x80"), None);
    }

    /// Streams a list body out, checking its promised length; the bytes and the number of
    /// chunks it took.
    async fn collect_list(
        items: &[std::sync::Arc<crate::cacher::CachedObject>],
        continue_token: Option<&str>,
        remaining: Option<u64>,
    ) -> (Vec<u8>, usize) {
        use http_body::Body as _;
        use http_body_util::BodyExt as _;
        let env =
            list_envelope("v1", "ConfigMapList", 9, continue_token, remaining, items).unwrap();
        let mut body = list_body(env, items.to_vec());
        let promised = body.size_hint().exact().unwrap();
        let (mut out, mut chunks) = (Vec::new(), 0);
        while let Some(frame) = body.frame().await {
            out.extend_from_slice(&frame.unwrap().into_data().unwrap());
            chunks += 1;
        }
        assert_eq!(out.len() as u64, promised, "the promised length");
        (out, chunks)
    }

    fn config_map(name: &str, data: &str) -> std::sync::Arc<crate::cacher::CachedObject> {
        let info = crate::registry::resources::find("", "v1", "configmaps").unwrap();
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"}, "data": {"k": data}});
        std::sync::Arc::new(
            crate::cacher::CachedObject::decode(
                info,
                &format!("default/{name}"),
                &serde_json::to_vec(&v).unwrap(),
                7,
            )
            .unwrap(),
        )
    }

    #[tokio::test]
    async fn a_list_page_larger_than_a_chunk_streams_out_whole_and_in_order() {
        let pad = "x".repeat(2000);
        let items: Vec<_> = (0..300)
            .map(|i| config_map(&format!("cm-{i:03}"), &pad))
            .collect();
        let (body, chunks) = collect_list(&items, None, None).await;
        assert!(chunks >= 3, "{chunks} chunks for ~600 KB");
        let (_, kind, raw) = unwrap(&body);
        assert_eq!(kind, "ConfigMapList");
        let list = core::ConfigMapList::decode(raw.as_slice()).unwrap();
        let names: Vec<_> = list
            .items
            .iter()
            .map(|c| c.metadata.clone().unwrap().name.unwrap())
            .collect();
        let want: Vec<_> = (0..300).map(|i| format!("cm-{i:03}")).collect();
        assert_eq!(names, want);
        assert!(list.items.iter().all(|c| c.data.get("k") == Some(&pad)));
        // An empty page is the envelope and the metadata alone.
        let (body, _) = collect_list(&[], Some("t"), None).await;
        let (_, _, raw) = unwrap(&body);
        let list = core::ConfigMapList::decode(raw.as_slice()).unwrap();
        assert!(list.items.is_empty());
        assert_eq!(list.metadata.unwrap().r#continue.as_deref(), Some("t"));
    }

    #[tokio::test]
    async fn list_bodies_carry_list_metadata_and_the_cached_item_messages() {
        let items: Vec<_> = ["a", "b"].iter().map(|n| config_map(n, n)).collect();
        let (body, _) = collect_list(&items, Some("tok"), Some(3)).await;
        // Byte for byte what enveloping the list message built with prost gives.
        let mut msg = Vec::new();
        let lm = meta::ListMeta {
            self_link: None,
            resource_version: Some("9".into()),
            r#continue: Some("tok".into()),
            remaining_item_count: Some(3),
        };
        prost::encoding::message::encode(1, &lm, &mut msg);
        for item in &items {
            let (_, _, raw) = unwrap(cached_body(item).unwrap());
            prost::encoding::bytes::encode(2, &raw, &mut msg);
        }
        assert_eq!(body, envelope("v1", "ConfigMapList", msg));
        let (av, kind, raw) = unwrap(&body);
        assert_eq!((av.as_str(), kind.as_str()), ("v1", "ConfigMapList"));
        let list = core::ConfigMapList::decode(raw.as_slice()).unwrap();
        let lm = list.metadata.unwrap();
        assert_eq!(lm.resource_version.as_deref(), Some("9"));
        assert_eq!(lm.r#continue.as_deref(), Some("tok"));
        assert_eq!(lm.remaining_item_count, Some(3));
        let names: Vec<_> = list
            .items
            .iter()
            .map(|c| c.metadata.clone().unwrap().name.unwrap())
            .collect();
        assert_eq!(names, vec!["a", "b"]);
        assert_eq!(list.items[1].data.get("k").map(String::as_str), Some("b"));
        assert_eq!(
            list.items[0]
                .metadata
                .clone()
                .unwrap()
                .resource_version
                .as_deref(),
            Some("7")
        );
    }

    #[test]
    fn unsupported_kinds_and_bad_json_are_errors_not_panics() {
        assert!(encode_body(b"{\"kind\":\"Widget\",\"apiVersion\":\"v1\"}").is_err());
        assert!(encode_body(b"{\"kind\":\"Pod\",\"apiVersion\":\"apps/v1\"}").is_err());
        assert!(encode_body(b"{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"spec\":5}").is_err());
        // Every served kind and its list encode.
        let pod = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#;
        let body = encode_body(pod).unwrap();
        let (api_version, kind, raw) = super::super::protobuf::unwrap_envelope(&body).unwrap();
        assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "Pod"));
        let p = core::Pod::decode(raw.as_slice()).unwrap();
        assert_eq!(p.spec.unwrap().containers[0].image.as_deref(), Some("i"));
        let list = br#"{"kind":"DeploymentList","apiVersion":"apps/v1","metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#;
        let body = encode_body(list).unwrap();
        let (_, kind, raw) = super::super::protobuf::unwrap_envelope(&body).unwrap();
        assert_eq!(kind, "DeploymentList");
        let l = k8s_pb::api::apps::v1::DeploymentList::decode(raw.as_slice()).unwrap();
        assert_eq!(l.items.len(), 2);
        assert_eq!(
            l.items[1].metadata.as_ref().unwrap().name.as_deref(),
            Some("b")
        );
        assert_eq!(l.metadata.unwrap().resource_version.as_deref(), Some("9"));
        assert!(encode_body(b"not json").is_err());
        assert!(encode_body(b"{\"kind\":\"ConfigMap\",\"binaryData\":{\"b\":\"!!\"}}").is_err());
    }
}
