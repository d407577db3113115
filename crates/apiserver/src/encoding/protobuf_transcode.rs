//! An object's JSON text to its protobuf message in one pass, with no `serde_json::Value`
//! tree in between: the conversion every object pays once when a client watches or lists
//! in protobuf (see [`super::protobuf_encode::cached_body`]).
//!
//! It follows the rules of [`crate::schema::protobuf_generic::encode`], which builds the same
//! fields from a parsed tree, with two differences in layout that protobuf readers do not
//! see:
//! - fields are written in the order of the JSON's keys, not in tag order;
//! - the fields of a struct Go embeds inline are gathered into their sub-message, which is
//!   written after the object's own fields.
//!
//! A nested message is written in place behind a one-byte length that is widened once its
//! size is known, so no message is built in a buffer of its own and copied.
//!
//! Members that come before `apiVersion` and `kind` (in sorted JSON, a ConfigMap's `data`)
//! are set aside as borrowed JSON text and converted once the kind is known. Objects
//! without a protobuf message (`Status`, lists) are left to the tree conversion:
//! [`encode_object`] answers `None` for them.

use super::protobuf_encode::{begin_envelope, end_envelope};
use crate::schema::protobuf_generic::{fraction_nanos, root, Field, Special, Value, MAX_DEPTH};
use crate::schema::protobuf_schema::MESSAGES;
use api::protobuf_wire::{put_delimited, put_key, put_varint};
use base64::Engine as _;
use prost::encoding::{encode_varint, encoded_len_varint};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;

/// Where one JSON key of a message is written.
#[derive(Clone, Copy)]
struct Slot {
    field: &'static Field,
    /// The inline struct (index into [`Lookup::inline_tags`]) whose sub-message holds this
    /// field; `None` for the message's own fields.
    inline: Option<usize>,
}

/// A message's fields by JSON name, its inline structs' fields included.
struct Lookup {
    /// Hashed with foldhash: every key of every object converted is looked up here, and
    /// SipHash took a twentieth of a first protobuf list's time. The table is fixed, so keys
    /// from the network only probe it and cannot make it degrade.
    by_name: HashMap<&'static str, Slot, foldhash::fast::RandomState>,
    /// The tags of the message's inline structs.
    inline_tags: Vec<u32>,
}

fn lookups() -> &'static [Lookup] {
    static LOOKUPS: OnceLock<Vec<Lookup>> = OnceLock::new();
    LOOKUPS.get_or_init(|| MESSAGES.iter().map(lookup_of).collect())
}

fn lookup_of(msg: &'static crate::schema::protobuf_generic::Message) -> Lookup {
    let mut by_name = HashMap::with_hasher(foldhash::fast::RandomState::default());
    let mut inline_tags = Vec::new();
    for field in msg.fields {
        if let Value::Inline(inner) = field.value {
            let slot = inline_tags.len();
            inline_tags.push(field.tag);
            let inner_fields = MESSAGES.get(inner).map_or(&[][..], |m| m.fields);
            // One level: no inlined struct inlines another (a test checks the table).
            for g in inner_fields {
                if !matches!(g.value, Value::Inline(_)) {
                    by_name.entry(g.json).or_insert(Slot {
                        field: g,
                        inline: Some(slot),
                    });
                }
            }
        } else {
            // The message's own field wins over an inline struct's of the same name.
            by_name.insert(
                field.json,
                Slot {
                    field,
                    inline: None,
                },
            );
        }
    }
    Lookup {
        by_name,
        inline_tags,
    }
}

/// Converts the JSON object `json` of a served kind to its complete protobuf body, as
/// [`super::protobuf_encode::envelope`] writes it.
///
/// `Ok(None)`: the object's `apiVersion` or `kind` is missing, or names a kind without a
/// protobuf message here (`Status`, lists); convert it through
/// [`crate::schema::protobuf_generic::encode`] instead.
///
/// # Errors
/// Input that is not JSON, or a value of the wrong JSON type for its field, as
/// [`crate::schema::protobuf_generic::encode`] reports it.
pub fn encode_object(json: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    // The protobuf body is smaller than the JSON: one buffer of that size holds it.
    let out = de
        .deserialize_map(RootVisitor {
            capacity: json.len(),
        })
        .map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(out)
}

/// Reads `apiVersion` and `kind`, then the object's fields. Fields that come before both
/// (sorted keys put `data` before `kind`) are kept as borrowed JSON text and converted once
/// the message is known.
struct RootVisitor {
    capacity: usize,
}

/// A field read before the message was known: its key and its JSON text.
type Pending<'de> = Vec<(String, &'de RawValue)>;

impl<'de> Visitor<'de> for RootVisitor {
    type Value = Option<Vec<u8>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut api_version, mut kind) = (None::<String>, None::<String>);
        let mut pending: Pending<'de> = Vec::new();
        let mut out = Vec::with_capacity(self.capacity);
        let index = loop {
            if let (Some(api_version), Some(kind)) = (&api_version, &kind) {
                let Some(index) = root(api_version, kind) else {
                    return drain(map);
                };
                begin_envelope(&mut out, api_version, kind);
                break index;
            }
            let Some(key) = map.next_key::<String>()? else {
                return Ok(None);
            };
            match key.as_str() {
                // A null apiVersion or kind reads as absent.
                "apiVersion" => api_version = map.next_value::<Option<String>>()?,
                "kind" => kind = map.next_value::<Option<String>>()?,
                _ => pending.push((key, map.next_value::<&'de RawValue>()?)),
            }
        };
        let at = begin_delimited(&mut out, 2);
        message_fields(&mut map, pending, index, &mut out, 0)?;
        end_delimited(&mut out, at);
        end_envelope(&mut out);
        Ok(Some(out))
    }
}

/// Reads the rest of a map that will not be converted here, so the JSON is still checked.
fn drain<'de, A: MapAccess<'de>>(mut map: A) -> Result<Option<Vec<u8>>, A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(None)
}

/// Writes the fields of the JSON object `map`, after those in `pending`, as message `index`
/// into `out`.
fn message_fields<'de, A: MapAccess<'de>>(
    map: &mut A,
    pending: Pending<'de>,
    index: usize,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), A::Error> {
    if depth > MAX_DEPTH {
        return Err(de::Error::custom("objects nested too deeply"));
    }
    let lookup = lookups()
        .get(index)
        .ok_or_else(|| de::Error::custom("unknown message"))?;
    let mut inline: Vec<Vec<u8>> = Vec::new();
    for (key, raw) in pending {
        let Some(slot) = lookup.by_name.get(key.as_str()).copied() else {
            continue;
        };
        let seed = FieldSeed {
            field: slot.field,
            out: target(out, &mut inline, lookup, slot)?,
            depth,
        };
        let mut de = serde_json::Deserializer::from_str(raw.get());
        seed.deserialize(&mut de).map_err(de::Error::custom)?;
    }
    // A key that is not a field of the message is skipped with its value.
    let slot_of = |key: &str| lookup.by_name.get(key).copied();
    while let Some(slot) = map.next_key_seed(WithStr(slot_of))? {
        let Some(slot) = slot else {
            map.next_value::<IgnoredAny>()?;
            continue;
        };
        map.next_value_seed(FieldSeed {
            field: slot.field,
            out: target(out, &mut inline, lookup, slot)?,
            depth,
        })?;
    }
    for (tag, sub) in lookup.inline_tags.iter().zip(&inline) {
        if !sub.is_empty() {
            put_delimited(out, *tag, sub);
        }
    }
    Ok(())
}

/// The buffer a field of `slot` is written to: the message's own, or its inline struct's.
fn target<'b, E: de::Error>(
    out: &'b mut Vec<u8>,
    inline: &'b mut Vec<Vec<u8>>,
    lookup: &Lookup,
    slot: Slot,
) -> Result<&'b mut Vec<u8>, E> {
    let Some(i) = slot.inline else {
        return Ok(out);
    };
    if inline.len() <= i {
        inline.resize_with(lookup.inline_tags.len(), Vec::new);
    }
    inline
        .get_mut(i)
        .ok_or_else(|| E::custom("inline field out of range"))
}

/// Starts a length-delimited field whose length is not known yet; returns where the length
/// goes, for [`end_delimited`].
fn begin_delimited(out: &mut Vec<u8>, tag: u32) -> usize {
    put_key(out, tag, 2);
    out.push(0);
    out.len() - 1
}

/// Writes the length of the field started at `at`, widening its one byte if needed.
fn end_delimited(out: &mut Vec<u8>, at: usize) {
    let len = (out.len() - at - 1) as u64;
    let mut varint = [0u8; 10];
    let n = encoded_len_varint(len);
    encode_varint(len, &mut &mut varint[..]);
    out.splice(at..=at, varint.iter().take(n).copied());
}

/// A JSON string handed, however it was read (borrowed or unescaped), to a function.
struct WithStr<F>(F);

impl<'de, T, F: FnOnce(&str) -> T> DeserializeSeed<'de> for WithStr<F> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, T, F: FnOnce(&str) -> T> Visitor<'de> for WithStr<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        Ok((self.0)(s))
    }
}

/// One field's JSON value, written with its tag.
struct FieldSeed<'o> {
    field: &'static Field,
    out: &'o mut Vec<u8>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.field.value {
            Value::Map(value) => d.deserialize_any(MapField { seed: self, value }),
            _ if self.field.repeated => d.deserialize_any(ListField(self)),
            value => ValueSeed {
                tag: self.field.tag,
                value,
                nullable: true,
                out: self.out,
                depth: self.depth,
            }
            .deserialize(d),
        }
    }
}

/// A `map<string, V>` field: one entry message per key.
struct MapField<'o> {
    seed: FieldSeed<'o>,
    value: &'static Value,
}

impl<'de> Visitor<'de> for MapField<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let MapField { seed, value } = self;
        let out = seed.out;
        loop {
            let start = out.len();
            let at = begin_delimited(out, seed.field.tag);
            let key = WithStr(|key: &str| put_delimited(out, 1, key.as_bytes()));
            if map.next_key_seed(key)?.is_none() {
                // No more entries: take back the entry just begun.
                out.truncate(start);
                break;
            }
            map.next_value_seed(ValueSeed {
                tag: 2,
                value: *value,
                nullable: false,
                out,
                depth: seed.depth,
            })?;
            end_delimited(out, at);
        }
        Ok(())
    }
}

/// A repeated field: each item written as a field of its own.
struct ListField<'o>(FieldSeed<'o>);

impl<'de> Visitor<'de> for ListField<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let seed = self.0;
        let out = seed.out;
        while seq
            .next_element_seed(ValueSeed {
                tag: seed.field.tag,
                value: seed.field.value,
                nullable: false,
                out: &mut *out,
                depth: seed.depth,
            })?
            .is_some()
        {}
        Ok(())
    }
}

/// One value of kind `value` under `tag`; a `null` writes nothing where `nullable`, and is
/// an error elsewhere (list items, map values), as in the tree conversion.
struct ValueSeed<'o> {
    tag: u32,
    value: Value,
    nullable: bool,
    out: &'o mut Vec<u8>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if let Value::Special(Special::RawJson) = self.value {
            // `FieldsV1` and `RawExtension` carry the JSON text itself.
            let raw = <&RawValue as de::Deserialize>::deserialize(d)?;
            if raw.get() == "null" {
                return self.null();
            }
            let at = begin_delimited(self.out, self.tag);
            put_delimited(self.out, 1, raw.get().as_bytes());
            end_delimited(self.out, at);
            return Ok(());
        }
        d.deserialize_any(self)
    }
}

impl ValueSeed<'_> {
    fn null<E: de::Error>(self) -> Result<(), E> {
        if self.nullable {
            Ok(())
        } else {
            Err(E::custom(format!("{}: null", self.expected())))
        }
    }

    fn expected(&self) -> &'static str {
        match self.value {
            Value::String => "expected a string",
            Value::Bytes => "expected a base64 string",
            Value::Bool => "expected a boolean",
            Value::Int => "expected an integer",
            Value::Message(_) => "expected an object",
            Value::Special(Special::Time | Special::MicroTime) => "expected a time string",
            Value::Special(Special::IntOrString) => "expected an integer or a string",
            Value::Special(Special::Quantity) => "expected a quantity",
            Value::Special(Special::RawJson) => "expected JSON",
            Value::Inline(_) | Value::Map(_) => "unexpected field kind",
        }
    }

    fn wrong<E: de::Error>(&self) -> E {
        E::custom(self.expected())
    }

    fn int<E: de::Error>(self, n: i64) -> Result<(), E> {
        match self.value {
            Value::Int => {
                put_key(self.out, self.tag, 0);
                put_varint(self.out, n as u64);
                Ok(())
            }
            Value::Special(Special::IntOrString) => {
                let at = begin_delimited(self.out, self.tag);
                put_key(self.out, 1, 0);
                put_varint(self.out, 0);
                put_key(self.out, 2, 0);
                put_varint(self.out, n as u64);
                end_delimited(self.out, at);
                Ok(())
            }
            Value::Special(Special::Quantity) => self.quantity(&n.to_string()),
            _ => Err(self.wrong()),
        }
    }

    fn quantity<E: de::Error>(self, text: &str) -> Result<(), E> {
        let at = begin_delimited(self.out, self.tag);
        put_delimited(self.out, 1, text.as_bytes());
        end_delimited(self.out, at);
        Ok(())
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expected())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.null()
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        match self.value {
            Value::Bool => {
                put_key(self.out, self.tag, 0);
                put_varint(self.out, u64::from(v));
                Ok(())
            }
            _ => Err(self.wrong()),
        }
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.int(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        match i64::try_from(v) {
            Ok(n) => self.int(n),
            // serde_json's as_i64 refuses these too; a quantity keeps its text.
            Err(_) if matches!(self.value, Value::Special(Special::Quantity)) => {
                self.quantity(&v.to_string())
            }
            Err(_) => Err(self.wrong()),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        match self.value {
            Value::Special(Special::Quantity) => match serde_json::Number::from_f64(v) {
                Some(n) => self.quantity(&n.to_string()),
                None => Err(self.wrong()),
            },
            _ => Err(self.wrong()),
        }
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        match self.value {
            Value::String => {
                put_delimited(self.out, self.tag, s.as_bytes());
                Ok(())
            }
            Value::Bytes => {
                let b = base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map_err(|e| E::custom(format!("invalid base64: {e}")))?;
                put_delimited(self.out, self.tag, &b);
                Ok(())
            }
            Value::Special(kind @ (Special::Time | Special::MicroTime)) => {
                let secs = api::time::parse_rfc3339(s).ok_or_else(|| E::custom("invalid time"))?;
                let nanos = fraction_nanos(s);
                let at = begin_delimited(self.out, self.tag);
                put_key(self.out, 1, 0);
                put_varint(self.out, secs as u64);
                if nanos > 0 && matches!(kind, Special::MicroTime) {
                    put_key(self.out, 2, 0);
                    put_varint(self.out, u64::from(nanos));
                }
                end_delimited(self.out, at);
                Ok(())
            }
            Value::Special(Special::IntOrString) => {
                let at = begin_delimited(self.out, self.tag);
                put_key(self.out, 1, 0);
                put_varint(self.out, 1);
                put_delimited(self.out, 3, s.as_bytes());
                end_delimited(self.out, at);
                Ok(())
            }
            Value::Special(Special::Quantity) => self.quantity(s),
            _ => Err(self.wrong()),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        match self.value {
            Value::Message(inner) => {
                let at = begin_delimited(self.out, self.tag);
                message_fields(&mut map, Vec::new(), inner, self.out, self.depth + 1)?;
                end_delimited(self.out, at);
                Ok(())
            }
            _ => Err(self.wrong()),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<(), A::Error> {
        Err(self.wrong())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::protobuf::unwrap_envelope;
    use crate::schema::protobuf_generic::{decode, encode};
    use serde_json::{json, Value as Json};

    /// The one pass and the tree conversion of `obj` read back as the same object.
    fn assert_same_as_tree(obj: &Json) {
        let text = serde_json::to_vec(obj).unwrap();
        let body = encode_object(&text)
            .unwrap()
            .unwrap_or_else(|| panic!("not converted in one pass: {obj}"));
        let (api_version, kind, message) = unwrap_envelope(&body).unwrap();
        let index = root(&api_version, &kind).unwrap();
        let tree = encode(index, obj.as_object().unwrap()).unwrap();
        assert_eq!(
            decode(index, &message).unwrap(),
            decode(index, &tree).unwrap(),
            "{obj}"
        );
    }

    fn rich_pod() -> Json {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "prod", "uid": "u-1",
                "resourceVersion": "42", "generation": 3,
                "labels": {"app": "web", "tier": "front"},
                "annotations": {"note": "x".repeat(300)},
                "creationTimestamp": "2024-01-01T00:00:00Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web", "uid": "u-0", "controller": true}],
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                    "fieldsType": "FieldsV1", "time": "2024-01-01T00:00:00Z",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}]},
            "spec": {
                "containers": [{"name": "c", "image": "nginx:1.27",
                    "args": ["-g", "daemon off;"],
                    "env": [{"name": "A", "value": "1"},
                        {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}],
                    "resources": {"limits": {"cpu": "1", "memory": "128Mi"},
                        "requests": {"cpu": 0.5}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"},
                        "periodSeconds": 5},
                    "livenessProbe": {"tcpSocket": {"port": 80}},
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 1000}}],
                "volumes": [
                    {"name": "s", "secret": {"secretName": "s", "defaultMode": 420}},
                    {"name": "t", "projected": {"sources": [{"serviceAccountToken":
                        {"path": "token", "expirationSeconds": 3607}}]}}],
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                "terminationGracePeriodSeconds": 30, "hostNetwork": false,
                "nodeName": null},
            "status": {"phase": "Running", "startTime": "2024-01-01T00:00:01Z",
                "conditions": [{"type": "Ready", "status": "True",
                    "lastTransitionTime": "2024-01-01T00:00:02Z"}],
                "podIP": "10.0.0.1"}
        })
    }

    #[test]
    fn the_one_pass_reads_as_the_tree_conversion() {
        assert_same_as_tree(&rich_pod());
        assert_same_as_tree(&json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s"}, "data": {"k": "AAEC"}, "type": "Opaque"}));
        assert_same_as_tree(
            &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l"},
            "spec": {"acquireTime": "2023-11-14T22:13:20.123456Z",
                "renewTime": "2023-11-14T22:13:21.5Z", "leaseDurationSeconds": -1}}),
        );
        assert_same_as_tree(&json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "svc"},
            "spec": {"ports": [{"port": 80, "targetPort": 8080},
                {"port": 443, "targetPort": "https"}], "selector": {"app": "web"}}}));
        assert_same_as_tree(&json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1"},
            "status": {"capacity": {"cpu": 4, "memory": "8Gi", "pods": 1.5e2}}}));
        assert_same_as_tree(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "d"}},
                "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                "template": {"metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}}}}));
        // A kind field nested anywhere, an unknown key, escaped text, empty maps and lists.
        assert_same_as_tree(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c\u{e9}\"\\n", "labels": {}, "finalizers": []},
            "data": {"k\"ey": "line\nbreak", "kind": "Pod"}, "extra": {"x": [1, 2]}}));
    }

    #[test]
    fn long_messages_widen_their_length() {
        // Lengths of 1, 2 and 3 varint bytes, nested in each other.
        for n in [100, 200, 20_000] {
            let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "annotations": {"a": "y".repeat(n)}}});
            assert_same_as_tree(&obj);
        }
    }

    #[test]
    fn members_before_the_kind_are_converted_too() {
        let text = br#"{"metadata":{"name":"p","labels":{"a":"b"}},"spec":{"nodeName":"n"},"kind":"Pod","status":{"phase":"Running"},"apiVersion":"v1"}"#;
        let (_, kind, message) = unwrap_envelope(&encode_object(text).unwrap().unwrap()).unwrap();
        assert_eq!(kind, "Pod");
        let index = root("v1", "Pod").unwrap();
        let parsed: Json = serde_json::from_slice(text).unwrap();
        let tree = encode(index, parsed.as_object().unwrap()).unwrap();
        assert_eq!(
            decode(index, &message).unwrap(),
            decode(index, &tree).unwrap()
        );
        assert!(
            encode_object(br#"{"data":{"k":5},"kind":"ConfigMap","apiVersion":"v1"}"#).is_err()
        );
    }

    #[test]
    fn other_inputs_are_left_to_the_tree() {
        for other in [
            json!({"kind": "Status", "apiVersion": "v1", "code": 410}),
            json!({"kind": "PodList", "apiVersion": "v1", "items": []}),
            json!({"apiVersion": "v1", "kind": "Widget"}),
            json!({"apiVersion": "v1", "kind": null, "metadata": {}}),
            json!({"apiVersion": "v1"}),
        ] {
            let text = serde_json::to_vec(&other).unwrap();
            assert_eq!(encode_object(&text).unwrap(), None, "{other}");
        }
    }

    #[test]
    fn wrong_types_are_errors() {
        for bad in [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": "x"}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": 5}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": null}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "binaryData": {"k": "!!"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [null]}}),
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": {}}}),
            json!({"apiVersion": "v1", "kind": "Pod",
                "spec": {"terminationGracePeriodSeconds": 1.5}}),
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"creationTimestamp": "yesterday"}}),
            json!({"apiVersion": "v1", "kind": "Service",
                "spec": {"ports": [{"targetPort": true}]}}),
        ] {
            let text = serde_json::to_vec(&bad).unwrap();
            let index = root("v1", bad["kind"].as_str().unwrap()).unwrap();
            assert!(encode_object(&text).is_err(), "{bad}");
            assert!(encode(index, bad.as_object().unwrap()).is_err(), "{bad}");
        }
        assert!(encode_object(b"{\"apiVersion\":\"v1\",\"kind\":\"Pod\"").is_err());
        assert!(encode_object(b"{\"apiVersion\":\"v1\",\"kind\":\"Pod\"} x").is_err());
        assert!(encode_object(b"[]").is_err());
    }

    #[test]
    fn no_inlined_struct_inlines_another() {
        for msg in MESSAGES {
            for field in msg.fields {
                if let Value::Inline(inner) = field.value {
                    let inner = &MESSAGES[inner];
                    assert!(
                        inner
                            .fields
                            .iter()
                            .all(|g| !matches!(g.value, Value::Inline(_))),
                        "{} inlines {}, which inlines again",
                        msg.name,
                        inner.name
                    );
                }
            }
        }
    }

    use proptest::prelude::*;

    /// A JSON value of the kind `value` describes, now and then `null` or of a wrong type.
    fn arb_value(value: Value, depth: usize) -> BoxedStrategy<Json> {
        let right = match value {
            Value::String => "[a-z0-9\"\\\\é -]{0,8}".prop_map(Json::from).boxed(),
            Value::Bytes => prop::collection::vec(any::<u8>(), 0..8)
                .prop_map(|b| Json::from(base64::engine::general_purpose::STANDARD.encode(b)))
                .boxed(),
            Value::Bool => any::<bool>().prop_map(Json::from).boxed(),
            Value::Int => any::<i64>().prop_map(Json::from).boxed(),
            Value::Message(inner) => arb_message(inner, depth + 1),
            Value::Special(Special::Time) => Just(Json::from("2024-01-01T00:00:00Z")).boxed(),
            Value::Special(Special::MicroTime) => {
                Just(Json::from("2023-11-14T22:13:20.123456Z")).boxed()
            }
            Value::Special(Special::IntOrString | Special::Quantity) => prop_oneof![
                any::<i32>().prop_map(Json::from),
                "[0-9]{1,3}(%|Mi|m)?".prop_map(Json::from),
            ]
            .boxed(),
            Value::Special(Special::RawJson) => {
                prop::collection::btree_map("f:[a-z]{1,3}", Just(json!({})), 0..3)
                    .prop_map(|m| Json::Object(m.into_iter().collect()))
                    .boxed()
            }
            Value::Inline(_) | Value::Map(_) => Just(Json::Null).boxed(),
        };
        prop_oneof![
            60 => right,
            1 => Just(Json::Null),
            1 => prop_oneof![Just(json!(1.5)), Just(json!("x")), Just(json!([])), Just(json!({}))],
        ]
        .boxed()
    }

    /// A field's JSON: a list or map of values where the field is one.
    fn arb_field(field: &'static Field, depth: usize) -> BoxedStrategy<Json> {
        match field.value {
            Value::Map(value) => {
                prop::collection::btree_map("[a-z/.]{0,6}", arb_value(*value, depth), 0..3)
                    .prop_map(|m| Json::Object(m.into_iter().collect()))
                    .boxed()
            }
            value if field.repeated => prop::collection::vec(arb_value(value, depth), 0..3)
                .prop_map(Json::from)
                .boxed(),
            value => arb_value(value, depth),
        }
    }

    /// An object of message `index`: a random few of its fields (its inline structs'
    /// included) and an unknown member now and then; nested three levels at most.
    fn arb_message(index: usize, depth: usize) -> BoxedStrategy<Json> {
        if depth > 3 {
            return Just(json!({})).boxed();
        }
        let fields: Vec<&'static Field> = MESSAGES[index]
            .fields
            .iter()
            .flat_map(|f| match f.value {
                Value::Inline(inner) => MESSAGES[inner].fields.iter().collect::<Vec<_>>(),
                _ => vec![f],
            })
            .collect();
        let members: Vec<BoxedStrategy<Option<(String, Json)>>> = fields
            .into_iter()
            .map(|f| {
                let weight = if depth < 2 { 0.6 } else { 0.25 };
                prop::option::weighted(weight, arb_field(f, depth))
                    .prop_map(move |v| v.map(|v| (f.json.to_string(), v)))
                    .boxed()
            })
            .chain(std::iter::once(
                prop::option::weighted(0.1, Just(("unknownMember".to_string(), json!([1]))))
                    .boxed(),
            ))
            .collect();
        members
            .prop_map(|m| Json::Object(m.into_iter().flatten().collect()))
            .boxed()
    }

    proptest::proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn where_the_one_pass_succeeds_it_agrees_with_the_tree(
            (kind, obj) in prop::sample::select(vec![
                ("Pod", 1usize), ("ConfigMap", 3), ("Service", 5), ("Node", 2),
            ]).prop_flat_map(|(kind, index)| (Just(kind), arb_message(index, 0)))
        ) {
            let mut obj = obj;
            obj["apiVersion"] = json!("v1");
            obj["kind"] = json!(kind);
            let text = serde_json::to_vec(&obj).unwrap();
            let index = root("v1", kind).unwrap();
            let tree = encode(index, obj.as_object().unwrap());
            match encode_object(&text) {
                Ok(Some(body)) => {
                    let (_, _, message) = unwrap_envelope(&body).unwrap();
                    let tree = tree.expect("the tree refuses what the one pass took");
                    prop_assert_eq!(
                        decode(index, &message).unwrap(),
                        decode(index, &tree).unwrap()
                    );
                }
                Ok(None) => prop_assert!(false, "a {} left to the tree", kind),
                Err(_) => prop_assert!(tree.is_err(), "only the one pass refused {}", obj),
            }
        }
    }
}
