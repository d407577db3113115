//! YAML request bodies read into JSON values under a size budget.
//!
//! YAML aliases (`*a`) repeat an anchored node wherever they appear, so a body of a few
//! kilobytes can stand for gigabytes (an array of 20,000 aliases of a 20,000-element array).
//! The YAML parser bounds how often it follows aliases, not what each one expands to; so the
//! value is built here by a visitor that charges every node and string it creates to a
//! budget proportional to the body, and gives up once it is spent — before the memory is.
//!
//! Deep nesting costs the parser far more than its size suggests, so the depth is checked
//! first, in linear time ([`super::yaml_depth`]); and large bodies are parsed on tokio's
//! blocking pool ([`from_bytes`], [`to_json`]), so that no runtime thread is held by one.

use super::yaml_depth;
use bytes::Bytes;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::cell::Cell;
use std::fmt;

/// What each node costs the budget besides its string bytes (about a `Value`'s size).
const NODE_COST: usize = 32;

/// The budget for a body of `len` bytes: room for any alias-free document of that size
/// (at most one node per byte, plus the bytes themselves), and a floor for small bodies.
fn budget_for(len: usize) -> usize {
    len.saturating_mul(NODE_COST + 1).max(1 << 20)
}

/// Parses one YAML document into a JSON value, failing if it nests collections deeper than
/// a JSON body may ([`yaml_depth::MAX_DEPTH`], checked before parsing) or if building it
/// would cost more than a budget proportional to `body`'s size (what an alias-free document
/// of that size needs). Mapping keys must be scalars; they become strings.
///
/// # Errors
/// The YAML error, or a message saying the document is too deep or expands too much.
pub fn from_slice(body: &[u8]) -> Result<Value, String> {
    yaml_depth::check(body, yaml_depth::MAX_DEPTH).map_err(|e| e.to_string())?;
    read(body, budget_for(body.len()))
}

/// [`from_slice`] for async callers (large bodies are parsed off the runtime's threads).
///
/// # Errors
/// As [`from_slice`].
pub async fn from_bytes(body: Bytes) -> Result<Value, String> {
    super::blocking::run(body, from_slice, lost).await
}

/// The document as JSON bytes, for async callers (large bodies are parsed and re-encoded
/// off the runtime's threads).
///
/// # Errors
/// As [`from_slice`].
pub async fn to_json(body: Bytes) -> Result<Bytes, String> {
    let encode = |b: &[u8]| {
        let value = from_slice(b)?;
        serde_json::to_vec(&value)
            .map(Bytes::from)
            .map_err(|e| format!("re-encoding as JSON: {e}"))
    };
    super::blocking::run(body, encode, lost).await
}

fn lost(e: String) -> String {
    format!("reading the YAML body failed: {e}")
}

/// [`from_slice`] with an explicit budget.
fn read(body: &[u8], budget: usize) -> Result<Value, String> {
    let left = Cell::new(budget);
    let de = serde_yaml_ng::Deserializer::from_slice(body);
    BoundedValue { left: &left }
        .deserialize(de)
        .map_err(|e| e.to_string())
}

/// A `Value` seed that charges what it builds to `left`.
#[derive(Clone, Copy)]
struct BoundedValue<'b> {
    left: &'b Cell<usize>,
}

impl BoundedValue<'_> {
    fn charge<E: serde::de::Error>(&self, bytes: usize) -> Result<(), E> {
        match self.left.get().checked_sub(NODE_COST.saturating_add(bytes)) {
            Some(rest) => {
                self.left.set(rest);
                Ok(())
            }
            None => Err(E::custom(
                "the document expands (through aliases) to more than the request may hold",
            )),
        }
    }
}

impl<'de> DeserializeSeed<'de> for BoundedValue<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BoundedValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.charge(0)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.charge(0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.charge(0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.charge(0)?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.charge(v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.charge(v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.charge(0)?;
        Ok(Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.charge(0)?;
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.charge(0)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.charge::<A::Error>(key.len())?;
            let v = map.next_value_seed(self)?;
            // A repeated key: the last one wins, as for JSON bodies.
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ordinary_documents_read_as_serde_yaml_reads_them() {
        let doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {x: \"1\"}\n\
                   data:\n  n: '5'\nlist: [1, 2.5, true, null, ~, text]\nanchor: &a {k: v}\nuse: *a\n";
        let ours = from_slice(doc.as_bytes()).unwrap();
        let theirs: Value = serde_yaml_ng::from_str(doc).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(ours["use"], json!({"k": "v"}));
    }

    #[test]
    fn alias_bombs_stop_at_the_budget() {
        // 300 aliases of a 300-element array: 90,000 nodes from a body of ~3 KB.
        let mut doc = String::from("a: &a [");
        doc.push_str(&vec!["x"; 300].join(","));
        doc.push_str("]\nb: [");
        doc.push_str(&vec!["*a"; 300].join(","));
        doc.push_str("]\n");
        let err = read(doc.as_bytes(), 100_000).unwrap_err();
        assert!(err.contains("expands"), "{err}");
        // The same document fits a budget that covers it: the limit is what stopped it.
        let v = read(doc.as_bytes(), 10_000_000).unwrap();
        assert_eq!(v["b"].as_array().map(Vec::len), Some(300));
    }

    #[test]
    fn malformed_yaml_and_odd_keys_are_errors_not_panics() {
        for bad in ["a: [1, 2", "a: *missing", "? [1, 2]\n: x", "a: b: c"] {
            assert!(from_slice(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }
}
