//! A custom object's values as a validation rule sees them: JSON turned into CEL values by
//! the schema, as Kubernetes does. Declared properties are reached under their escaped names
//! ([`escape`]); a `number` is always a double; at a resource's root (or an embedded
//! resource) only `apiVersion`, `kind`, `metadata.name` and `metadata.generateName` are
//! visible of the object's own fields.

use super::super::structural::Node;
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Words a property cannot be named as in CEL: they are reached as `__word__`.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The name a rule uses for property `name`, or `None` when no CEL identifier can name it
/// (it is then out of the rules' reach). `__` becomes `__underscores__`, `.` `__dot__`, `-`
/// `__dash__`, `/` `__slash__`; a reserved word `w` becomes `__w__`.
pub fn escape(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, '_' | '.' | '-' | '/'));
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/'));
    if !first_ok || !rest_ok {
        return None;
    }
    if !name.contains(['.', '-', '/']) && !name.contains("__") {
        return Some(name.to_string());
    }
    let mut out = String::with_capacity(name.len() + 8);
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            out.push_str("__underscores__");
            rest = &rest[2..];
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

/// A CEL value, as the interpreter holds them.
pub type Val = Box<dyn cel::common::value::Val>;

/// `v` as CEL sees it at a node of schema `node` (`None`: no schema, every value as it is);
/// `resource_root` for the root of a resource or an embedded resource. Built directly in
/// the interpreter's own representation: no intermediate value to convert per rule.
pub fn to_cel(v: &Value, node: Option<&Node>, resource_root: bool) -> Val {
    match v {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => {
            if node.is_some_and(|n| n.type_.as_deref() == Some("number")) {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(0.0)))
            } else if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else if let Some(u) = n.as_u64() {
                Box::new(CelUInt::from(u))
            } else {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(0.0)))
            }
        }
        Value::String(s) => Box::new(CelString::from(s.clone())),
        Value::Array(a) => {
            let items = node.and_then(|n| n.items.as_deref());
            let embedded = items.is_some_and(|i| i.embedded_resource);
            Box::new(CelList::from(
                a.iter()
                    .map(|x| to_cel(x, items, embedded))
                    .collect::<Vec<_>>(),
            ))
        }
        Value::Object(m) => object_to_cel(m, node, resource_root),
    }
}

/// An object as CEL sees it (see [`to_cel`]).
pub fn object_to_cel(m: &Map<String, Value>, node: Option<&Node>, resource_root: bool) -> Val {
    let mut out: HashMap<CelMapKey<'static>, Val> = HashMap::with_capacity(m.len());
    let declared = node.filter(|n| !n.properties.is_empty() || resource_root);
    match declared {
        Some(n) => {
            for (k, x) in m {
                if resource_root && (k == "apiVersion" || k == "kind") {
                    out.insert(key(k), to_cel(x, None, false));
                } else if resource_root && k == "metadata" {
                    out.insert(key(k), metadata(x));
                } else if let Some(p) = n.properties.get(k) {
                    if let Some(name) = escape(k) {
                        out.insert(key(&name), to_cel(x, Some(p), p.embedded_resource));
                    }
                } else if n.preserve_unknown_fields {
                    if let Some(name) = escape(k) {
                        out.insert(key(&name), to_cel(x, None, false));
                    }
                }
            }
        }
        None => {
            let values = node.and_then(|n| n.additional_properties.as_deref());
            let embedded = values.is_some_and(|v| v.embedded_resource);
            for (k, x) in m {
                out.insert(key(k), to_cel(x, values, embedded));
            }
        }
    }
    Box::new(CelMap::from(out))
}

fn key(k: &str) -> CelMapKey<'static> {
    CelMapKey::String(CelString::from(k.to_string()))
}

/// A resource's `metadata` as rules see it: only `name` and `generateName`.
fn metadata(v: &Value) -> Val {
    let mut out: HashMap<CelMapKey<'static>, Val> = HashMap::new();
    if let Value::Object(m) = v {
        for k in ["name", "generateName"] {
            if let Some(Value::String(s)) = m.get(k) {
                out.insert(key(k), Box::new(CelString::from(s.clone())));
            }
        }
    }
    Box::new(CelMap::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_as_kubernetes_escapes_them() {
        assert_eq!(escape("replicas").as_deref(), Some("replicas"));
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("foo-bar").as_deref(), Some("foo__dash__bar"));
        assert_eq!(escape("a.b/c").as_deref(), Some("a__dot__b__slash__c"));
        assert_eq!(escape("x__y").as_deref(), Some("x__underscores__y"));
        assert_eq!(escape("1abc"), None);
        assert_eq!(escape("a b"), None);
        assert_eq!(escape(""), None);
    }
}
