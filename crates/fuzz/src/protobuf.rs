//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), as the server reads
//! request bodies and as the client reads responses and watch streams.

use crate::input::chunks;
use apiserver::encoding::protobuf::decode_request_to_json;
use apiserver::encoding::protobuf_transcode::encode_object;
use apiserver::registry::resources::RESOURCES;
use bytes::Bytes;
use client::protobuf_object::ProtobufObject;
use client::rest::protobuf_decoder::{
    decode_protobuf_list, decode_protobuf_status, parse_protobuf_event, FrameDecoder,
};

/// The subresources whose protobuf bodies are of another kind than the resource's.
const SUBRESOURCES: [Option<&str>; 4] = [None, Some("binding"), Some("eviction"), Some("token")];

/// Input: `resource subresource body`. The first byte picks one of the served resources, the
/// second a subresource (none, `binding`, `eviction`, `token`), the rest is the request body
/// ([`decode_request_to_json`]). What decodes must be a JSON object; an object of the
/// resource's own kind must convert back to protobuf ([`encode_object`], which the server
/// uses to answer protobuf clients), and that body must decode again to the same JSON.
pub fn protobuf_server(data: &[u8]) {
    let [r, s, body @ ..] = data else {
        return;
    };
    let info = &RESOURCES[usize::from(*r) % RESOURCES.len()];
    let sub = SUBRESOURCES[usize::from(*s) % SUBRESOURCES.len()];
    let Ok(json) = decode_request_to_json(info, sub, body) else {
        return;
    };
    let value: serde_json::Value = serde_json::from_slice(&json).unwrap_or_else(|e| {
        panic!(
            "decoded protobuf is not JSON ({e}): {}",
            String::from_utf8_lossy(&json)
        )
    });
    assert!(value.is_object(), "decoded protobuf is not an object");
    if sub.is_some() {
        return;
    }
    let encoded = encode_object(&json).unwrap_or_else(|e| {
        panic!(
            "the JSON decoded from protobuf does not encode back ({e}): {}",
            String::from_utf8_lossy(&json)
        )
    });
    let Some(encoded) = encoded else {
        return;
    };
    let again = decode_request_to_json(info, None, &encoded)
        .unwrap_or_else(|e| panic!("a body the server encoded does not decode: {e:?}"));
    let again: serde_json::Value = serde_json::from_slice(&again).unwrap_or_default();
    assert!(
        crate::input::json_same(&again, &value),
        "protobuf round trip changed {value} into {again}"
    );
}

/// Feeds the bytes to every protobuf reader of the client: as one object's message
/// ([`ProtobufObject::from_slice`]), as a watch event frame ([`parse_protobuf_event`]), as a
/// list body ([`decode_protobuf_list`]), as a Status body ([`decode_protobuf_status`]), and as
/// a watch response body cut into length-prefixed frames by [`FrameDecoder`] (with chunk
/// sizes from the first byte), each frame parsed as an event. The frames must not depend on
/// where the chunks were cut.
pub fn protobuf_client(data: &[u8]) {
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(obj) = ProtobufObject::from_slice(data) {
        use client::object::KubeObject as _;
        let _ = (obj.name(), obj.namespace(), obj.resource_version());
    }
    let _ = parse_protobuf_event(&bytes, ProtobufObject::from_slice);
    let _ = decode_protobuf_list(&bytes, "/api/v1/pods");
    let _ = decode_protobuf_status(data);

    let Some((&sizes, body)) = data.split_first() else {
        return;
    };
    let whole = frames(&[body]);
    let cut = frames(&chunks(body, &[sizes, sizes / 3, sizes.wrapping_mul(7)]));
    assert_eq!(whole, cut, "frames depend on chunk boundaries");
    for f in whole.0.iter() {
        let _ = parse_protobuf_event(f, ProtobufObject::from_slice);
    }
}

/// The frames a [`FrameDecoder`] cuts from `parts` pushed one after another, and whether the
/// stream ended cleanly (or where it failed).
fn frames(parts: &[&[u8]]) -> (Vec<Bytes>, Result<(), String>) {
    let mut d = FrameDecoder::new(1 << 20);
    let mut out = Vec::new();
    for p in parts {
        d.push(Bytes::copy_from_slice(p));
        loop {
            match d.next_frame() {
                Ok(Some(f)) => out.push(f),
                Ok(None) => break,
                Err(e) => return (out, Err(e.to_string())),
            }
        }
    }
    let end = d.finish().map_err(|e| e.to_string());
    (out, end)
}
