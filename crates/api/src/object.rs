//! Kubernetes objects as JSON plus typed access to their metadata.
//!
//! An [`Object`] is the JSON object exactly as it travels (unknown fields are kept, field
//! order is irrelevant), with accessors for the metadata the server and clients act on.
//! [`ObjectMeta`] is the parsed, typed view of `metadata` for code that needs many fields.

use crate::status::Status;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// A Kubernetes object: a JSON map with `apiVersion`, `kind`, `metadata`, and the rest.
///
/// Accessors never fail: a missing or mistyped field reads as absent. Validation of required
/// fields is the registry's job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Object(pub Map<String, Value>);

impl Object {
    /// Parses a request or storage body. Anything that is not a JSON object is a 400.
    pub fn from_slice(bytes: &[u8]) -> Result<Object, Status> {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(map)) => Ok(Object(map)),
            Ok(_) => Err(Status::bad_request(
                "the request body must be a JSON object",
            )),
            Err(e) => Err(Status::bad_request(format!(
                "the body of the request could not be decoded as JSON: {e}"
            ))),
        }
    }

    /// Wraps a JSON value; `None` if it is not an object.
    pub fn from_value(v: Value) -> Option<Object> {
        match v {
            Value::Object(m) => Some(Object(m)),
            _ => None,
        }
    }

    /// The object as a JSON value (moves).
    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }

    /// Serializes to compact JSON.
    pub fn to_vec(&self) -> Vec<u8> {
        // A Map of Values always serializes.
        serde_json::to_vec(&self.0).unwrap_or_default()
    }

    /// `apiVersion`, or "".
    pub fn api_version(&self) -> &str {
        self.0
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `kind`, or "".
    pub fn kind(&self) -> &str {
        self.0.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    /// `metadata` as a map, if present.
    pub fn metadata(&self) -> Option<&Map<String, Value>> {
        self.0.get("metadata").and_then(Value::as_object)
    }

    /// `metadata`, created empty if absent or not a map.
    pub fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        let entry = self
            .0
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        match entry {
            Value::Object(m) => m,
            _ => unreachable!("metadata was just made an object"),
        }
    }

    /// A string field of `metadata`, or "".
    pub fn meta_str(&self, field: &str) -> &str {
        self.metadata()
            .and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `metadata.name`, or "".
    pub fn name(&self) -> &str {
        self.meta_str("name")
    }

    /// `metadata.namespace`, or "".
    pub fn namespace(&self) -> &str {
        self.meta_str("namespace")
    }

    /// `metadata.resourceVersion`, or "".
    pub fn resource_version(&self) -> &str {
        self.meta_str("resourceVersion")
    }

    /// `metadata.uid`, or "".
    pub fn uid(&self) -> &str {
        self.meta_str("uid")
    }

    /// `metadata.generation`, or 0.
    pub fn generation(&self) -> i64 {
        self.metadata()
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    }

    /// `metadata.labels` as a JSON map, if present.
    pub fn labels(&self) -> Option<&Map<String, Value>> {
        self.metadata()
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
    }

    /// Sets a metadata field.
    pub fn set_meta(&mut self, field: &str, value: impl Into<Value>) {
        self.metadata_mut().insert(field.to_string(), value.into());
    }

    /// Removes a metadata field, returning its old value.
    pub fn remove_meta(&mut self, field: &str) -> Option<Value> {
        self.metadata_mut().remove(field)
    }

    /// The value at a dotted path (`spec.nodeName`, `involvedObject.kind`), rendered the way
    /// field selectors compare it: strings as is, booleans and numbers in their JSON spelling.
    /// Absent or non-scalar values are `None`.
    pub fn field_str(&self, path: &str) -> Option<Cow<'_, str>> {
        let mut cur: &Value = self.0.get(path.split('.').next()?)?;
        for part in path.split('.').skip(1) {
            cur = cur.as_object()?.get(part)?;
        }
        match cur {
            Value::String(s) => Some(Cow::Borrowed(s.as_str())),
            Value::Bool(b) => Some(Cow::Borrowed(if *b { "true" } else { "false" })),
            Value::Number(n) => Some(Cow::Owned(n.to_string())),
            _ => None,
        }
    }

    /// The top-level field `name` (`spec`, `status`, ...), if present.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    /// Parses the typed metadata view.
    pub fn meta(&self) -> ObjectMeta {
        self.metadata()
            .and_then(|m| serde_json::from_value(Value::Object(m.clone())).ok())
            .unwrap_or_default()
    }
}

/// The finalizer with which the server holds an object deleted with
/// `propagationPolicy: Orphan`: the garbage collector removes the object's owner reference
/// from its dependents, then this finalizer.
pub const ORPHAN_FINALIZER: &str = "orphan";

/// The finalizer with which the server holds an object deleted with
/// `propagationPolicy: Foreground`: the garbage collector deletes its blocking dependents
/// first, then removes this finalizer.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// The characters Kubernetes draws generated strings from (no vowels, no confusable
/// digits, so that they never spell words).
pub const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The longest `generateName` prefix kept: Kubernetes cuts it to 58 bytes, so that with its
/// five random characters a generated name fits in 63.
pub const MAX_GENERATED_PREFIX: usize = 58;

/// The name `generateName: prefix` stands for: `prefix`, cut to [`MAX_GENERATED_PREFIX`]
/// bytes (at a character boundary), then five characters of [`NAME_ALPHABET`] drawn from
/// `random`. The same `random` always gives the same name.
pub fn generated_name(prefix: &str, random: u64) -> String {
    let mut cut = prefix.len().min(MAX_GENERATED_PREFIX);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    let base = NAME_ALPHABET.len() as u64;
    let mut bits = random;
    let mut name = String::with_capacity(cut + 5);
    name.push_str(&prefix[..cut]);
    for _ in 0..5 {
        name.push(char::from(NAME_ALPHABET[(bits % base) as usize]));
        bits /= base;
    }
    name
}

/// The typed view of `metadata` (unknown fields are ignored; mistyped ones make the whole
/// view default — the registry validates metadata types before anything is stored).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    /// Unique within a namespace (or cluster for cluster-scoped kinds).
    pub name: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    /// Prefix for server-generated names.
    pub generate_name: String,
    /// Server-assigned unique id.
    pub uid: String,
    /// Opaque version string (a decimal storage revision in listwatch).
    pub resource_version: String,
    /// Bumped on every spec change.
    pub generation: i64,
    /// Set by the server at creation.
    pub creation_timestamp: Option<String>,
    /// Set when a graceful delete starts.
    pub deletion_timestamp: Option<String>,
    /// Key/value labels used by selectors.
    pub labels: BTreeMap<String, String>,
    /// Free-form annotations.
    pub annotations: BTreeMap<String, String>,
    /// Finalizers that block deletion.
    pub finalizers: Vec<String>,
    /// Owners of this object.
    pub owner_references: Vec<Value>,
}

/// Checks a DNS-1123 subdomain (names of most kinds): ≤ 253 chars, lower-case alphanumerics,
/// '-' and '.', starting and ending with an alphanumeric. Returns the reason when invalid.
pub fn validate_dns1123_subdomain(name: &str) -> Result<(), String> {
    const MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
    if name.is_empty() {
        return Err("name or generateName is required".into());
    }
    if name.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    let ok_char = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = name.as_bytes();
    if !ok_char(b[0]) || !ok_char(b[b.len() - 1]) {
        return Err(MSG.into());
    }
    if !b.iter().all(|&c| ok_char(c) || c == b'-' || c == b'.') {
        return Err(MSG.into());
    }
    for label in name.split('.') {
        let lb = label.as_bytes();
        if lb.is_empty() || !ok_char(lb[0]) || !ok_char(lb[lb.len() - 1]) {
            return Err(MSG.into());
        }
    }
    Ok(())
}

/// Checks a DNS-1123 label (names of namespaces, services): ≤ 63 chars, lower-case
/// alphanumerics and '-', starting and ending with an alphanumeric.
pub fn validate_dns1123_label(name: &str) -> Result<(), String> {
    const MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
    if name.is_empty() {
        return Err("name or generateName is required".into());
    }
    if name.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    let ok_char = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = name.as_bytes();
    if !ok_char(b[0]) || !ok_char(b[b.len() - 1]) || !b.iter().all(|&c| ok_char(c) || c == b'-') {
        return Err(MSG.into());
    }
    Ok(())
}

/// Checks a path-segment name (RBAC's roles and bindings, e.g. `system:controller:foo`):
/// Kubernetes refuses `.`, `..`, and names with `/` or `%`. Refused here as well: bytes
/// outside visible ASCII, `?` and `#`. Clients percent-escape those in URLs and the router
/// matches names as written, so such an object could be created but never addressed.
pub fn validate_path_segment(name: &str) -> Result<(), String> {
    match name {
        "" => return Err("name or generateName is required".into()),
        "." => return Err("may not be '.'".into()),
        ".." => return Err("may not be '..'".into()),
        _ => {}
    }
    if name.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    for c in ['/', '%'] {
        if name.contains(c) {
            return Err(format!("may not contain '{c}'"));
        }
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_graphic() && c != b'?' && c != b'#')
    {
        return Err("may contain only visible ASCII characters other than '?' and '#'".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_names_fit_in_63() {
        let name = super::generated_name("web-", 12345);
        assert_eq!(name.len(), 9);
        assert!(name.starts_with("web-"));
        assert!(name[4..].bytes().all(|b| super::NAME_ALPHABET.contains(&b)));
        assert_eq!(
            super::generated_name("web-", 12345),
            name,
            "the same draw, the same name"
        );
        assert_ne!(super::generated_name("web-", 12346), name);
        // A long prefix is cut, at a character boundary.
        let long = super::generated_name(&format!("{}-", "a".repeat(70)), 7);
        assert_eq!(long.len(), 63);
        assert!(long.starts_with(&"a".repeat(58)));
        let wide = super::generated_name(&"é".repeat(40), 7);
        assert!(wide.len() <= 63 && wide.starts_with(&"é".repeat(29)));
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn path_segment_names() {
        for ok in [
            "system:controller:foo",
            "a",
            "Upper_case.and-dashes",
            "x:y@z",
        ] {
            assert_eq!(validate_path_segment(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a%2Fb",
            "a b",
            "a?b",
            "a#b",
            "é",
            &"x".repeat(254),
        ] {
            assert!(validate_path_segment(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn accessors_read_metadata_and_fields() {
        let o = Object::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "y"}, "generation": 3},
            "spec": {"nodeName": "n1", "hostNetwork": true, "priority": 7}
        }))
        .unwrap();
        assert_eq!(o.name(), "a");
        assert_eq!(o.namespace(), "ns");
        assert_eq!(o.generation(), 3);
        assert_eq!(o.field_str("spec.nodeName").as_deref(), Some("n1"));
        assert_eq!(o.field_str("spec.hostNetwork").as_deref(), Some("true"));
        assert_eq!(o.field_str("spec.priority").as_deref(), Some("7"));
        assert_eq!(o.field_str("status.phase"), None);
        assert_eq!(o.meta().labels.get("x").map(String::as_str), Some("y"));
    }

    #[test]
    fn non_objects_are_bad_requests() {
        assert_eq!(Object::from_slice(b"[1]").unwrap_err().code(), 400);
        assert_eq!(Object::from_slice(b"{").unwrap_err().code(), 400);
    }

    #[test]
    fn dns_names() {
        assert!(validate_dns1123_subdomain("a.b-c.d").is_ok());
        assert!(validate_dns1123_subdomain("A").is_err());
        assert!(validate_dns1123_subdomain("a..b").is_err());
        assert!(validate_dns1123_subdomain("-a").is_err());
        assert!(validate_dns1123_subdomain(&"a".repeat(254)).is_err());
        assert!(validate_dns1123_label("abc-1").is_ok());
        assert!(validate_dns1123_label("a.b").is_err());
    }
}
