//! Protobuf objects to JSON, for every kind listwatch serves, driven by the field table in
//! [`super::protobuf_schema`] (tags and JSON names generated from the k8s-pb and
//! k8s-openapi crates).
//!
//! The JSON is what a Kubernetes API server would store for the same object:
//! - fields come out in tag order, unknown tags are skipped (protobuf's rule);
//! - an empty singular string is left out, as Go's `omitempty` leaves out the empty strings
//!   its protobuf encoder always writes (`namespace: ""`); numbers and booleans are kept,
//!   since `replicas: 0` means something;
//! - the zero `Time` (an empty message) is left out, as JSON's `null`;
//! - zero numbers and `false` are kept: the wire cannot tell Go's non-pointer fields (where
//!   JSON would omit them) from pointers (where `replicas: 0` means something), and keeping
//!   them never changes an object's meaning;
//! - messages that are scalars in JSON (`Time`, `MicroTime`, `IntOrString`, `Quantity`, the
//!   raw JSON of `FieldsV1` and `RawExtension`) are rendered as such, and structs Go embeds
//!   inline have their fields flattened into the parent.
//!
//! Malformed input (truncated fields, wrong wire types, invalid UTF-8, bad embedded JSON)
//! is an error, never a panic.

use super::protobuf_schema::{MESSAGES, ROOTS};
use api::protobuf_wire::{put_delimited, put_key, put_varint, read_varint};
use base64::Engine as _;
use serde_json::{Map, Value as Json};

/// How a field's value is encoded and rendered.
#[derive(Debug, Clone, Copy)]
pub enum Value {
    /// `string`: a JSON string.
    String,
    /// `bytes`: base64 in JSON.
    Bytes,
    /// `bool`.
    Bool,
    /// `int32` / `int64`.
    Int,
    /// A nested message: index in [`MESSAGES`].
    Message(usize),
    /// A struct embedded inline: its fields go into the parent object.
    Inline(usize),
    /// A message rendered as a JSON scalar.
    Special(Special),
    /// A `map<string, V>`: entries are messages with the key at tag 1 and the value at 2.
    Map(&'static Value),
}

/// Messages whose JSON form is not an object.
#[derive(Debug, Clone, Copy)]
pub enum Special {
    /// `meta.v1.Time`: RFC 3339 to the second.
    Time,
    /// `meta.v1.MicroTime`: RFC 3339 with microseconds.
    MicroTime,
    /// `intstr.IntOrString`: a number or a string.
    IntOrString,
    /// `resource.Quantity`: its string.
    Quantity,
    /// `FieldsV1` / `RawExtension`: embedded JSON bytes.
    RawJson,
}

/// One field of a message.
#[derive(Debug)]
pub struct Field {
    /// The protobuf tag.
    pub tag: u32,
    /// The JSON name (empty for [`Value::Inline`]).
    pub json: &'static str,
    /// How the value is encoded.
    pub value: Value,
    /// Whether the field is a list.
    pub repeated: bool,
}

/// One protobuf message.
#[derive(Debug)]
pub struct Message {
    /// Its full name (`api.core.v1.Pod`), for error messages.
    pub name: &'static str,
    /// Its fields.
    pub fields: &'static [Field],
}

/// Deepest nesting of messages accepted.
pub(crate) const MAX_DEPTH: usize = 64;

/// The table index of the message of `api_version`/`kind`, if it is one listwatch decodes.
pub fn root(api_version: &str, kind: &str) -> Option<usize> {
    ROOTS
        .iter()
        .find(|(v, k, _)| *v == api_version && *k == kind)
        .map(|(_, _, i)| *i)
}

/// Decodes `bytes` as the message at `index` into a JSON object.
///
/// # Errors
/// What is wrong, for a 400 answer.
pub fn decode(index: usize, bytes: &[u8]) -> Result<Map<String, Json>, String> {
    let mut out = Map::new();
    decode_into(index, bytes, &mut out, 0)?;
    Ok(out)
}

/// A cursor over protobuf wire bytes.
struct Wire<'a> {
    b: &'a [u8],
}

impl<'a> Wire<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut pos = 0;
        let v = read_varint(self.b, &mut pos).map_err(|e| e.what.to_string())?;
        self.b = self.b.get(pos..).unwrap_or_default();
        Ok(v)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.b.len() {
            return Err("a field runs past the end of its message".into());
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }

    fn delimited(&mut self) -> Result<&'a [u8], String> {
        let n = usize::try_from(self.varint()?).map_err(|_| "length out of range")?;
        self.take(n)
    }

    /// Skips a value of wire type `wt` (an unknown field).
    fn skip(&mut self, wt: u8) -> Result<(), String> {
        match wt {
            0 => self.varint().map(drop),
            1 => self.take(8).map(drop),
            2 => self.delimited().map(drop),
            5 => self.take(4).map(drop),
            _ => Err(format!("unsupported wire type {wt}")),
        }
    }
}

fn expect_wire(field: &Field, msg: &Message, wt: u8, want: u8) -> Result<(), String> {
    if wt == want {
        Ok(())
    } else {
        Err(format!(
            "{}.{}: wire type {wt}, expected {want}",
            msg.name, field.json
        ))
    }
}

fn decode_into(
    index: usize,
    bytes: &[u8],
    out: &mut Map<String, Json>,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("messages nested too deeply".into());
    }
    let msg = MESSAGES.get(index).ok_or("unknown message")?;
    let mut w = Wire { b: bytes };
    while !w.b.is_empty() {
        let key = w.varint()?;
        let tag = u32::try_from(key >> 3).map_err(|_| "tag out of range")?;
        let wt = (key & 7) as u8;
        let Some(field) = msg.fields.iter().find(|f| f.tag == tag) else {
            w.skip(wt)?;
            continue;
        };
        match field.value {
            Value::Inline(inner) => {
                expect_wire(field, msg, wt, 2)?;
                decode_into(inner, w.delimited()?, out, depth + 1)?;
            }
            Value::Map(value) => {
                expect_wire(field, msg, wt, 2)?;
                let entry = w.delimited()?;
                let (k, v) = map_entry(entry, value, depth)?;
                let map = out
                    .entry(field.json)
                    .or_insert_with(|| Json::Object(Map::new()));
                if let Json::Object(m) = map {
                    m.insert(k, v);
                }
            }
            Value::Int if field.repeated && wt == 2 => {
                // A packed list of varints.
                let mut packed = Wire { b: w.delimited()? };
                while !packed.b.is_empty() {
                    let v = int(packed.varint()?);
                    push(out, field.json, v);
                }
            }
            value => {
                let v = scalar(field, msg, value, wt, &mut w, depth)?;
                match v {
                    Some(v) if field.repeated => push(out, field.json, v),
                    Some(v) => {
                        out.insert(field.json.to_string(), v);
                    }
                    None if field.repeated => push(out, field.json, Json::Null),
                    None => {
                        out.remove(field.json);
                    }
                }
            }
        }
    }
    Ok(())
}

fn push(out: &mut Map<String, Json>, key: &str, v: Json) {
    let list = out.entry(key).or_insert_with(|| Json::Array(Vec::new()));
    if let Json::Array(a) = list {
        a.push(v);
    }
}

/// A varint as the signed integer Go wrote (negative `int32`s are sign-extended).
fn int(v: u64) -> Json {
    Json::from(v as i64)
}

/// One singular value; `None` for what JSON leaves out (an empty string, the zero time).
fn scalar(
    field: &Field,
    msg: &Message,
    value: Value,
    wt: u8,
    w: &mut Wire<'_>,
    depth: usize,
) -> Result<Option<Json>, String> {
    let bad = |what: &str| format!("{}.{}: {what}", msg.name, field.json);
    Ok(match value {
        Value::Bool => {
            expect_wire(field, msg, wt, 0)?;
            Some(Json::Bool(w.varint()? != 0))
        }
        Value::Int => {
            expect_wire(field, msg, wt, 0)?;
            Some(int(w.varint()?))
        }
        Value::String => {
            expect_wire(field, msg, wt, 2)?;
            let s = std::str::from_utf8(w.delimited()?).map_err(|_| bad("invalid UTF-8"))?;
            (!s.is_empty() || field.repeated).then(|| Json::String(s.to_string()))
        }
        Value::Bytes => {
            expect_wire(field, msg, wt, 2)?;
            let b = w.delimited()?;
            Some(Json::String(
                base64::engine::general_purpose::STANDARD.encode(b),
            ))
        }
        Value::Message(inner) => {
            expect_wire(field, msg, wt, 2)?;
            let mut m = Map::new();
            decode_into(inner, w.delimited()?, &mut m, depth + 1)?;
            Some(Json::Object(m))
        }
        Value::Special(kind) => {
            expect_wire(field, msg, wt, 2)?;
            special(kind, w.delimited()?).map_err(|e| bad(&e))?
        }
        Value::Inline(_) | Value::Map(_) => return Err(bad("unexpected field kind")),
    })
}

fn map_entry(entry: &[u8], value: &Value, depth: usize) -> Result<(String, Json), String> {
    let mut w = Wire { b: entry };
    let (mut key, mut val) = (String::new(), None);
    while !w.b.is_empty() {
        let k = w.varint()?;
        match (k >> 3, (k & 7) as u8) {
            (1, 2) => {
                key = std::str::from_utf8(w.delimited()?)
                    .map_err(|_| "invalid UTF-8 in a map key")?
                    .to_string();
            }
            (2, wt) => {
                let field = Field {
                    tag: 2,
                    json: "value",
                    value: *value,
                    repeated: false,
                };
                const ENTRY: Message = Message {
                    name: "map entry",
                    fields: &[],
                };
                val = scalar(&field, &ENTRY, *value, wt, &mut w, depth)?;
                if val.is_none() {
                    // An empty string is a real map value.
                    val = Some(Json::String(String::new()));
                }
            }
            (_, wt) => w.skip(wt)?,
        }
    }
    let val = val.unwrap_or(match value {
        Value::Message(_) => Json::Object(Map::new()),
        Value::Bool => Json::Bool(false),
        Value::Int => Json::from(0),
        _ => Json::String(String::new()),
    });
    Ok((key, val))
}

/// Go's zero `time.Time` (0001-01-01T00:00:00Z) in Unix seconds.
const ZERO_TIME: i64 = -62_135_596_800;

fn special(kind: Special, bytes: &[u8]) -> Result<Option<Json>, String> {
    let mut w = Wire { b: bytes };
    let (mut n1, mut n2, mut s3, mut raw) = (0u64, 0u64, None::<&[u8]>, None::<&[u8]>);
    while !w.b.is_empty() {
        let k = w.varint()?;
        match (kind, k >> 3, (k & 7) as u8) {
            (Special::Time | Special::MicroTime | Special::IntOrString, 1, 0) => {
                n1 = w.varint()?;
            }
            (Special::Time | Special::MicroTime | Special::IntOrString, 2, 0) => {
                n2 = w.varint()?;
            }
            (Special::IntOrString, 3, 2) => s3 = Some(w.delimited()?),
            (Special::Quantity | Special::RawJson, 1, 2) => raw = Some(w.delimited()?),
            (_, _, wt) => w.skip(wt)?,
        }
    }
    let text = |b: &[u8]| {
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| "invalid UTF-8".to_string())
    };
    Ok(match kind {
        Special::Time | Special::MicroTime => {
            let secs = n1 as i64;
            // Go writes its zero time as an empty message (or, from older encoders, as
            // year 1): both are JSON's null.
            if bytes.is_empty() || (secs == ZERO_TIME && n2 == 0) {
                return Ok(None);
            }
            if !(ZERO_TIME..=253_402_300_799).contains(&secs) || n2 >= 1_000_000_000 {
                return Err("time out of range".into());
            }
            let base = api::time::format_rfc3339(secs);
            match kind {
                Special::MicroTime => {
                    let micros = n2 / 1000;
                    let stem = base.trim_end_matches('Z');
                    Some(Json::String(format!("{stem}.{micros:06}Z")))
                }
                _ => Some(Json::String(base)),
            }
        }
        Special::IntOrString => match n1 {
            0 => Some(Json::from(n2 as i64 as i32)),
            _ => Some(Json::String(text(s3.unwrap_or_default())?)),
        },
        Special::Quantity => Some(Json::String(text(raw.unwrap_or_default())?)),
        Special::RawJson => match raw {
            None | Some([]) => None,
            Some(b) => Some(
                serde_json::from_slice(b).map_err(|e| format!("embedded JSON is invalid: {e}"))?,
            ),
        },
    })
}

/// Encodes the JSON object `obj` as the message at `index`: the inverse of [`decode`] for
/// everything the table knows. JSON members the table does not know are left out (a
/// Kubernetes server's types would not have them either); `null`s are absent.
///
/// # Errors
/// A value of the wrong JSON type for its field, or bytes that are not base64.
pub fn encode(index: usize, obj: &Map<String, Json>) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    encode_into(index, obj, &mut out, 0)?;
    Ok(out)
}

/// Whether [`encode`] would succeed, and its error if not, without building the message:
/// the same walk with the bytes thrown away (what validation needs of every write).
///
/// # Errors
/// Exactly as [`encode`].
pub fn check(index: usize, obj: &Map<String, Json>) -> Result<(), String> {
    encode_into(index, obj, &mut Discard, 0)
}

/// Where [`encode_into`] writes: a message's bytes, or nowhere ([`check`]).
trait Sink: Default {
    fn key(&mut self, tag: u32, wire_type: u8);
    fn varint(&mut self, v: u64);
    fn delimited(&mut self, tag: u32, bytes: &[u8]);
    /// A nested message (or map entry) built in `sub`, as a length-delimited field.
    fn nested(&mut self, tag: u32, sub: Self);
    fn is_empty(&self) -> bool;
    /// A value embedded as its JSON text.
    fn raw_json(&mut self, tag: u32, v: &Json) -> Result<(), String>;
}

impl Sink for Vec<u8> {
    fn key(&mut self, tag: u32, wire_type: u8) {
        put_key(self, tag, wire_type);
    }
    fn varint(&mut self, v: u64) {
        put_varint(self, v);
    }
    fn delimited(&mut self, tag: u32, bytes: &[u8]) {
        put_delimited(self, tag, bytes);
    }
    fn nested(&mut self, tag: u32, sub: Self) {
        put_delimited(self, tag, &sub);
    }
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
    fn raw_json(&mut self, tag: u32, v: &Json) -> Result<(), String> {
        let raw = serde_json::to_vec(v).map_err(|e| e.to_string())?;
        put_delimited(self, tag, &raw);
        Ok(())
    }
}

/// A [`Sink`] that keeps nothing.
#[derive(Default)]
struct Discard;

impl Sink for Discard {
    fn key(&mut self, _: u32, _: u8) {}
    fn varint(&mut self, _: u64) {}
    fn delimited(&mut self, _: u32, _: &[u8]) {}
    fn nested(&mut self, _: u32, _: Self) {}
    fn is_empty(&self) -> bool {
        true
    }
    fn raw_json(&mut self, _: u32, v: &Json) -> Result<(), String> {
        // Serializing a JSON value cannot fail (its keys are strings): nothing to check.
        let _ = v;
        Ok(())
    }
}

fn encode_into<S: Sink>(
    index: usize,
    obj: &Map<String, Json>,
    out: &mut S,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("objects nested too deeply".into());
    }
    let msg = MESSAGES.get(index).ok_or("unknown message")?;
    for field in msg.fields {
        if let Value::Inline(inner) = field.value {
            // The inline struct's fields live in this same JSON object.
            let mut sub = S::default();
            encode_into(inner, obj, &mut sub, depth + 1)?;
            if !sub.is_empty() {
                out.nested(field.tag, sub);
            }
            continue;
        }
        let Some(v) = obj.get(field.json).filter(|v| !v.is_null()) else {
            continue;
        };
        let bad = |what: &str| format!("{}.{}: {what}", msg.name, field.json);
        match field.value {
            Value::Map(value) => {
                let m = v.as_object().ok_or_else(|| bad("expected an object"))?;
                for (k, item) in m {
                    let mut entry = S::default();
                    entry.delimited(1, k.as_bytes());
                    encode_value(&mut entry, 2, *value, item, depth).map_err(|e| bad(&e))?;
                    out.nested(field.tag, entry);
                }
            }
            value if field.repeated => {
                let items = v.as_array().ok_or_else(|| bad("expected a list"))?;
                for item in items {
                    encode_value(out, field.tag, value, item, depth).map_err(|e| bad(&e))?;
                }
            }
            value => encode_value(out, field.tag, value, v, depth).map_err(|e| bad(&e))?,
        }
    }
    Ok(())
}

fn encode_value<S: Sink>(
    out: &mut S,
    tag: u32,
    value: Value,
    v: &Json,
    depth: usize,
) -> Result<(), String> {
    match value {
        Value::String => {
            let s = v.as_str().ok_or("expected a string")?;
            out.delimited(tag, s.as_bytes());
        }
        Value::Bytes => {
            let s = v.as_str().ok_or("expected a base64 string")?;
            let b = base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| format!("invalid base64: {e}"))?;
            out.delimited(tag, &b);
        }
        Value::Bool => {
            out.key(tag, 0);
            out.varint(u64::from(v.as_bool().ok_or("expected a boolean")?));
        }
        Value::Int => {
            out.key(tag, 0);
            out.varint(v.as_i64().ok_or("expected an integer")? as u64);
        }
        Value::Message(inner) => {
            let m = v.as_object().ok_or("expected an object")?;
            let mut sub = S::default();
            encode_into(inner, m, &mut sub, depth + 1)?;
            out.nested(tag, sub);
        }
        Value::Special(kind) => {
            let mut sub = S::default();
            encode_special(&mut sub, kind, v)?;
            out.nested(tag, sub);
        }
        Value::Inline(_) | Value::Map(_) => return Err("unexpected field kind".into()),
    }
    Ok(())
}

fn encode_special<S: Sink>(out: &mut S, kind: Special, v: &Json) -> Result<(), String> {
    match kind {
        Special::Time | Special::MicroTime => {
            let text = v.as_str().ok_or("expected a time string")?;
            let secs = api::time::parse_rfc3339(text).ok_or("invalid time")?;
            out.key(1, 0);
            out.varint(secs as u64);
            if matches!(kind, Special::MicroTime) {
                let nanos = fraction_nanos(text);
                if nanos > 0 {
                    out.key(2, 0);
                    out.varint(u64::from(nanos));
                }
            }
        }
        Special::IntOrString => match v {
            Json::Number(n) => {
                let n = n.as_i64().ok_or("expected an integer")?;
                out.key(1, 0);
                out.varint(0);
                out.key(2, 0);
                out.varint(n as u64);
            }
            Json::String(s) => {
                out.key(1, 0);
                out.varint(1);
                out.delimited(3, s.as_bytes());
            }
            _ => return Err("expected an integer or a string".into()),
        },
        Special::Quantity => match v {
            Json::String(s) => out.delimited(1, s.as_bytes()),
            Json::Number(n) => out.delimited(1, n.to_string().as_bytes()),
            _ => return Err("expected a quantity".into()),
        },
        Special::RawJson => out.raw_json(1, v)?,
    }
    Ok(())
}

/// The nanoseconds of an RFC 3339 time's fractional seconds (0 without a fraction).
pub(crate) fn fraction_nanos(text: &str) -> u32 {
    let Some(frac) = text.get(19..).and_then(|t| t.strip_prefix('.')) else {
        return 0;
    };
    let digits: String = frac
        .chars()
        .take_while(char::is_ascii_digit)
        .take(9)
        .collect();
    format!("{digits:0<9}").parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::api::apps::v1 as apps;
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
    use prost::Message as _;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn meta_named(name: &str) -> Option<meta::ObjectMeta> {
        Some(meta::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(String::new()),
            creation_timestamp: Some(meta::Time::default()),
            labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
            ..Default::default()
        })
    }

    #[test]
    fn a_deployment_decodes_to_the_json_kubectl_would_send() {
        let container = core::Container {
            name: Some("web".into()),
            image: Some("nginx".into()),
            ports: vec![core::ContainerPort {
                container_port: Some(80),
                ..Default::default()
            }],
            resources: Some(core::ResourceRequirements {
                limits: BTreeMap::from([(
                    "cpu".to_string(),
                    k8s_pb::apimachinery::pkg::api::resource::Quantity {
                        string: Some("500m".into()),
                    },
                )]),
                ..Default::default()
            }),
            liveness_probe: Some(core::Probe {
                handler: Some(core::ProbeHandler {
                    http_get: Some(core::HttpGetAction {
                        path: Some("/healthz".into()),
                        port: Some(IntOrString {
                            r#type: Some(1),
                            int_val: Some(0),
                            str_val: Some("http".into()),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                period_seconds: Some(10),
                ..Default::default()
            }),
            ..Default::default()
        };
        let d = apps::Deployment {
            metadata: meta_named("web"),
            spec: Some(apps::DeploymentSpec {
                replicas: Some(0),
                selector: Some(meta::LabelSelector {
                    match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
                    ..Default::default()
                }),
                template: Some(core::PodTemplateSpec {
                    metadata: meta_named(""),
                    spec: Some(core::PodSpec {
                        containers: vec![container],
                        volumes: vec![core::Volume {
                            name: Some("cfg".into()),
                            volume_source: Some(core::VolumeSource {
                                config_map: Some(core::ConfigMapVolumeSource {
                                    local_object_reference: Some(core::LocalObjectReference {
                                        name: Some("app-config".into()),
                                    }),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }),
                        }],
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }),
            status: Some(apps::DeploymentStatus::default()),
        };
        let i = root("apps/v1", "Deployment").unwrap();
        let v = Json::Object(decode(i, &d.encode_to_vec()).unwrap());
        assert_eq!(
            v,
            json!({
                "metadata": {"name": "web", "labels": {"app": "web"}},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {
                            "volumes": [{"name": "cfg", "configMap": {"name": "app-config"}}],
                            "containers": [{
                                "name": "web", "image": "nginx",
                                "ports": [{"containerPort": 80}],
                                "resources": {"limits": {"cpu": "500m"}},
                                "livenessProbe": {
                                    "httpGet": {"path": "/healthz", "port": "http"},
                                    "periodSeconds": 10
                                }
                            }]
                        }
                    }
                },
                "status": {}
            })
        );
    }

    #[test]
    fn secrets_services_and_times() {
        let s = core::Secret {
            metadata: meta_named("s"),
            data: BTreeMap::from([
                ("k".to_string(), vec![0u8, 1, 2]),
                ("empty".to_string(), vec![]),
            ]),
            r#type: Some("Opaque".into()),
            ..Default::default()
        };
        let v = decode(root("v1", "Secret").unwrap(), &s.encode_to_vec()).unwrap();
        assert_eq!(Json::Object(v)["data"], json!({"k": "AAEC", "empty": ""}));
        let svc = core::Service {
            metadata: meta_named("svc"),
            spec: Some(core::ServiceSpec {
                ports: vec![core::ServicePort {
                    port: Some(80),
                    target_port: Some(IntOrString {
                        r#type: Some(0),
                        int_val: Some(8080),
                        str_val: None,
                    }),
                    ..Default::default()
                }],
                cluster_ips: vec!["None".into()],
                ..Default::default()
            }),
            status: None,
        };
        let v = Json::Object(decode(root("v1", "Service").unwrap(), &svc.encode_to_vec()).unwrap());
        assert_eq!(
            v["spec"]["ports"],
            json!([{"port": 80, "targetPort": 8080}])
        );
        assert_eq!(v["spec"]["clusterIPs"], json!(["None"]));
        let lease = k8s_pb::api::coordination::v1::Lease {
            metadata: meta_named("l"),
            spec: Some(k8s_pb::api::coordination::v1::LeaseSpec {
                acquire_time: Some(meta::MicroTime {
                    seconds: Some(1_700_000_000),
                    nanos: Some(123_456_789),
                }),
                lease_duration_seconds: Some(-1),
                ..Default::default()
            }),
        };
        let v = Json::Object(
            decode(
                root("coordination.k8s.io/v1", "Lease").unwrap(),
                &lease.encode_to_vec(),
            )
            .unwrap(),
        );
        assert_eq!(
            v["spec"],
            json!({"acquireTime": "2023-11-14T22:13:20.123456Z", "leaseDurationSeconds": -1})
        );
    }

    #[test]
    fn encoding_is_the_inverse_of_decoding() {
        let pod = json!({
            "metadata": {"name": "p", "labels": {"a": "b"},
                "creationTimestamp": "2024-01-01T00:00:00Z",
                "managedFields": [{"manager": "m", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {}}, "time": "2024-01-01T00:00:00Z"}]},
            "spec": {"containers": [{"name": "c", "image": "i",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"limits": {"cpu": "1"}},
                "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 5}}],
                "volumes": [{"name": "v", "secret": {"secretName": "s", "defaultMode": 420}}],
                "terminationGracePeriodSeconds": 30, "hostNetwork": false},
            "status": {"phase": "Running", "startTime": "2024-01-01T00:00:01Z"}
        });
        let i = root("v1", "Pod").unwrap();
        let bytes = encode(i, pod.as_object().unwrap()).unwrap();
        assert_eq!(Json::Object(decode(i, &bytes).unwrap()), pod);
        let secret = json!({"metadata": {"name": "s"}, "data": {"k": "AAEC"}, "type": "Opaque"});
        let i = root("v1", "Secret").unwrap();
        let bytes = encode(i, secret.as_object().unwrap()).unwrap();
        assert_eq!(Json::Object(decode(i, &bytes).unwrap()), secret);
        let lease = json!({"metadata": {"name": "l"},
            "spec": {"acquireTime": "2023-11-14T22:13:20.123456Z", "leaseDurationSeconds": -1}});
        let i = root("coordination.k8s.io/v1", "Lease").unwrap();
        let bytes = encode(i, lease.as_object().unwrap()).unwrap();
        assert_eq!(Json::Object(decode(i, &bytes).unwrap()), lease);
        // Unknown members are left out; wrong types are errors.
        let i = root("v1", "ConfigMap").unwrap();
        let odd = json!({"metadata": {"name": "c"}, "extra": 1});
        let back = decode(i, &encode(i, odd.as_object().unwrap()).unwrap()).unwrap();
        assert_eq!(Json::Object(back), json!({"metadata": {"name": "c"}}));
        for bad in [
            json!({"metadata": "x"}),
            json!({"data": {"k": 5}}),
            json!({"binaryData": {"k": "!!"}}),
        ] {
            assert!(encode(i, bad.as_object().unwrap()).is_err(), "{bad}");
        }
    }

    /// `check` accepts what `encode` encodes and refuses with `encode`'s own error.
    #[test]
    fn check_answers_as_encode_does() {
        let cases = [
            (
                "v1",
                "Pod",
                json!({"metadata": {"name": "p", "creationTimestamp": "2024-01-01T00:00:00Z"},
                "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}],
                    "resources": {"limits": {"cpu": "1", "memory": 5}}}],
                    "nodeSelector": {"a": "b"}, "overhead": {"cpu": "1m"}},
                "status": {"startTime": "2024-01-01T00:00:01Z"}}),
            ),
            ("v1", "Pod", json!({"spec": {"containers": [{"name": 5}]}})),
            ("v1", "Pod", json!({"spec": {"containers": "x"}})),
            ("v1", "Pod", json!({"spec": {"nodeSelector": {"a": 1}}})),
            (
                "v1",
                "Pod",
                json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": true}}}]}}),
            ),
            ("v1", "Pod", json!({"status": {"startTime": "yesterday"}})),
            (
                "v1",
                "Pod",
                json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": "80"}]}]}}),
            ),
            (
                "v1",
                "Service",
                json!({"spec": {"ports": [{"port": 80, "targetPort": "http"}]}}),
            ),
            (
                "v1",
                "Service",
                json!({"spec": {"ports": [{"port": 80, "targetPort": [1]}]}}),
            ),
            ("v1", "Secret", json!({"data": {"k": "AAEC"}})),
            ("v1", "Secret", json!({"data": {"k": "!!"}})),
            (
                "coordination.k8s.io/v1",
                "Lease",
                json!({"spec": {"renewTime": "2023-11-14T22:13:20.123456Z"}}),
            ),
            (
                "coordination.k8s.io/v1",
                "Lease",
                json!({"spec": {"renewTime": 3}}),
            ),
        ];
        let mut refused = Vec::new();
        for (n, (version, kind, obj)) in cases.into_iter().enumerate() {
            let i = root(version, kind).unwrap();
            let obj = obj.as_object().unwrap();
            let encoded = encode(i, obj).map(drop);
            if encoded.is_err() {
                refused.push(n);
            }
            assert_eq!(check(i, obj), encoded, "{kind} {obj:?}");
        }
        assert_eq!(refused, [1, 2, 3, 4, 5, 6, 8, 10, 12], "the cases refused");
    }

    use crate::schema::openapi_types::resolve_ref;

    /// The members of `schema` (an OpenAPI 3 definition of k8s-openapi's) that message `index`
    /// has no field for, inline structs flattened; recursing into nested messages once each.
    fn fields_without_tags(
        defs: &Map<String, Json>,
        schema: &Json,
        index: usize,
        seen: &mut std::collections::HashSet<usize>,
        missing: &mut Vec<String>,
    ) {
        fn find(index: usize, json: &str) -> Option<&'static Field> {
            MESSAGES[index].fields.iter().find_map(|f| match f.value {
                Value::Inline(i) => find(i, json),
                _ if f.json == json => Some(f),
                _ => None,
            })
        }
        if !seen.insert(index) {
            return;
        }
        let schema = resolve_ref(defs, schema);
        let Some(props) = schema.get("properties").and_then(Json::as_object) else {
            return;
        };
        for (name, prop) in props {
            if name == "apiVersion" || name == "kind" {
                continue;
            }
            let Some(field) = find(index, name) else {
                missing.push(format!("{}.{name}", MESSAGES[index].name));
                continue;
            };
            let prop = resolve_ref(defs, prop);
            let (inner, target) = match field.value {
                Value::Message(j) if field.repeated => (prop.get("items"), j),
                Value::Message(j) => (Some(prop), j),
                Value::Map(Value::Message(j)) => (prop.get("additionalProperties"), *j),
                _ => continue,
            };
            if let Some(inner) = inner {
                fields_without_tags(defs, inner, target, seen, missing);
            }
        }
    }

    #[test]
    fn every_field_of_the_served_kinds_has_a_tag() {
        use crate::schema::openapi_types::{SchemaDialect, TypedSchemas};
        let mut typed = TypedSchemas::new(SchemaDialect::OpenApi3);
        let names: Vec<_> = ROOTS
            .iter()
            .map(|(api_version, kind, i)| {
                let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
                (typed.add_kind(group, version, kind), *i)
            })
            .collect();
        let defs = typed.into_definitions();
        let mut missing = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (name, i) in names {
            // Scale is a subresource's kind, not among the served kinds' schemas.
            let Some(name) = name else {
                assert_eq!(MESSAGES[i].name, "api.autoscaling.v1.Scale");
                continue;
            };
            fields_without_tags(&defs, &defs[&name], i, &mut seen, &mut missing);
        }
        // The first's tag is not in kubernetes/api's generated.proto yet; the second, an
        // alpha field, reaches messages k8s-pb lacks; the storage ones are newer than
        // k8s-pb and their tags were not at hand (see the generator).
        assert_eq!(
            missing,
            vec![
                "api.core.v1.NodeSystemInfo.runningInUserNamespace",
                "api.batch.v1.JobSpec.scheduling",
                "api.storage.v1.CSINode.status",
                "api.storage.v1.CSIDriverSpec.preventPodSchedulingIfMissing"
            ]
        );
        assert!(seen.len() > 100, "the walk reached {} messages", seen.len());
    }

    #[test]
    fn fields_newer_than_k8s_pb_keep_their_kubernetes_tags() {
        let pod = json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i",
                    "volumeMounts": [{"name": "v", "mountPath": "/v",
                                      "bindMountOptions": ["nosuid"]}],
                    "readinessProbe": {"httpGet": {"port": 80, "protocol": "H2C"}}}],
                "volumes": [{"name": "v", "emptyDir": {"mode": 448},
                             "configMap": {"name": "cm", "defaultUser": 1000,
                                           "items": [{"key": "k", "path": "p", "user": 7}]}}],
                "schedulingGroup": {"podGroupName": "g"},
                "evictionResponders": [{"name": "r", "priority": 5}]},
            "status": {"volumeHealth": [{"name": "v", "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "healthConditions": [{"status": "Abnormal", "reason": "r", "message": "m"}]}],
                "nodeAllocatableResourceClaimStatuses": [{"resourceClaimName": "rc",
                    "containers": ["c"], "mapping": [{"name": "cpu", "quantity": "2"}],
                    "overhead": [{"name": "mem", "perPod": "1Mi", "perContainer": "1Ki"}]}]}
        });
        let i = root("v1", "Pod").unwrap();
        let bytes = encode(i, pod.as_object().unwrap()).unwrap();
        assert_eq!(Json::Object(decode(i, &bytes).unwrap()), pod);
        // On the wire, PodSpec (tag 2 of Pod) carries schedulingGroup as field 43: key
        // 43 << 3 | 2 = 346, the varint DA 02, then the nested message (field 1, "g").
        let spec = core::Pod::decode(bytes.as_slice()).unwrap().spec.unwrap();
        assert_eq!(spec.containers.len(), 1, "fields k8s-pb knows still decode");
        let spec_bytes = spec_field(&bytes);
        assert!(
            spec_bytes
                .windows(6)
                .any(|w| w == [0xda, 0x02, 0x03, 0x0a, 0x01, b'g']),
            "schedulingGroup at tag 43: {spec_bytes:02x?}"
        );
        let node = json!({"metadata": {"name": "n"},
            "spec": {"podPreemptionPolicy": {"disableResizePreemption": ["a"]}}});
        let i = root("v1", "Node").unwrap();
        let bytes = encode(i, node.as_object().unwrap()).unwrap();
        assert_eq!(Json::Object(decode(i, &bytes).unwrap()), node);
    }

    /// The bytes of the field with tag 2 (a Pod's spec) of a top-level message.
    fn spec_field(bytes: &[u8]) -> Vec<u8> {
        let mut buf = bytes;
        while !buf.is_empty() {
            let key = prost::encoding::decode_varint(&mut buf).unwrap();
            let len = prost::encoding::decode_varint(&mut buf).unwrap() as usize;
            let (value, rest) = buf.split_at(len);
            if key == (2 << 3 | 2) {
                return value.to_vec();
            }
            buf = rest;
        }
        Vec::new()
    }

    #[test]
    fn malformed_bytes_are_errors() {
        let i = root("v1", "Pod").unwrap();
        for bad in [
            &[0x0a][..],                   // metadata without its length
            &[0x0a, 0x05, 0x0a][..],       // a length past the end
            &[0x08, 0x01][..],             // metadata as a varint
            &[0x0a, 0x02, 0x0a, 0xff][..], // truncated nested field
            &[0x0b][..],                   // wire type 3 (groups) on an unknown tag
            &[0xff; 11][..],               // an endless varint
        ] {
            assert!(decode(i, bad).is_err(), "{bad:?}");
        }
        // Invalid UTF-8 in a name.
        let bytes = [0x0a, 0x03, 0x0a, 0x01, 0xff];
        assert!(decode(i, &bytes).is_err());
        // Unknown fields are skipped.
        assert_eq!(decode(i, &[0xf8, 0x07, 0x01]).unwrap(), Map::new());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            for (_, _, i) in ROOTS {
                let _ = decode(*i, &bytes);
            }
        }
    }
}
