//! A stored object made into its cached form without decoding it: the watch cache needs the
//! object's JSON with `metadata.resourceVersion` stamped in, its namespace, name and labels,
//! and its selectable fields — a few values out of a document of kilobytes. Parsing the whole
//! document into a tree and serializing it back (what [`super::CachedObject::from_object`]
//! does) was the largest part of the reflector's cost; here one pass over the bytes finds
//! those values and where the resourceVersion goes, and the bytes are copied with it
//! spliced in.
//!
//! Contract: [`stamp`] gives either exactly what decoding, stamping and re-encoding would
//! give (the same JSON document, the same labels and field values), or `None` when the input
//! is anything it does not handle simply (not an object, no `metadata` object, a key wanted
//! here present twice, a selectable field under `metadata` or holding a number that is not a
//! plain integer, nesting deeper than [`MAX_DEPTH`], malformed JSON it notices — it does not
//! validate what it skips as strictly as a parser); the caller then decodes.

use crate::registry::ResourceInfo;
use std::collections::BTreeMap;

/// Deepest nesting walked; deeper documents are left to the decoder.
const MAX_DEPTH: usize = 128;

/// The cached form of one stored object (see the module docs).
#[derive(Debug, PartialEq, Eq)]
pub struct Stamped {
    /// The object's JSON with its resourceVersion.
    pub json: Vec<u8>,
    /// `metadata.namespace` ("" if absent or not a string).
    pub namespace: String,
    /// `metadata.name` ("" if absent or not a string).
    pub name: String,
    /// `metadata.labels` whose values are strings.
    pub labels: BTreeMap<String, String>,
    /// The resource's selectable fields, in `ResourceInfo::fields` order, defaults applied.
    pub fields: Vec<String>,
}

/// `stored` with `metadata.resourceVersion` set to `resource_version`, and what the cache
/// reads from it; `None` when the caller must decode instead (see the module docs).
pub fn stamp(info: &ResourceInfo, stored: &[u8], resource_version: u64) -> Option<Stamped> {
    if info.fields.iter().any(|f| f.path.starts_with("metadata.")) {
        return None;
    }
    let wanted: Vec<Vec<&str>> = info
        .fields
        .iter()
        .map(|f| f.path.split('.').collect())
        .collect();
    let mut scan = Scan {
        b: stored,
        i: 0,
        meta: None,
        fields: vec![None; wanted.len()],
    };
    scan.ws();
    scan.object(&wanted, 0, true)?;
    scan.ws();
    if scan.i != stored.len() {
        return None;
    }
    let meta = scan.meta?;
    let rv = format!("\"{resource_version}\"");
    let mut json = Vec::with_capacity(stored.len() + rv.len() + 20);
    match meta.rv {
        Some((start, end)) => {
            json.extend_from_slice(&stored[..start]);
            json.extend_from_slice(rv.as_bytes());
            json.extend_from_slice(&stored[end..]);
        }
        None => {
            // Where a sorted encoder would put the key: before the first key after it.
            json.extend_from_slice(&stored[..meta.insert_at]);
            if meta.insert_before_key {
                json.extend_from_slice(b"\"resourceVersion\":");
                json.extend_from_slice(rv.as_bytes());
                json.push(b',');
            } else {
                if !meta.empty {
                    json.push(b',');
                }
                json.extend_from_slice(b"\"resourceVersion\":");
                json.extend_from_slice(rv.as_bytes());
            }
            json.extend_from_slice(&stored[meta.insert_at..]);
        }
    }
    let fields = info
        .fields
        .iter()
        .zip(scan.fields)
        .map(|(f, v)| match v {
            Some(Some(v)) => v,
            _ => f.default.to_string(),
        })
        .collect();
    Some(Stamped {
        json,
        namespace: meta.namespace.unwrap_or_default(),
        name: meta.name.unwrap_or_default(),
        labels: meta.labels.unwrap_or_default(),
        fields,
    })
}

/// What the walk found in `metadata`.
#[derive(Default)]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    /// The span of the resourceVersion's value, quotes included.
    rv: Option<(usize, usize)>,
    /// Where to insert a resourceVersion the object lacks.
    insert_at: usize,
    /// Whether `insert_at` is the start of a key (else the closing brace).
    insert_before_key: bool,
    /// The metadata object has no members.
    empty: bool,
}

/// The one-pass walk (see [`stamp`]).
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    meta: Option<Meta>,
    /// Per selectable field: not seen (`None`), seen with no usable value (`Some(None)`:
    /// null, an object or an array, which read as the default), or its text.
    fields: Vec<Option<Option<String>>>,
}

/// A JSON scalar or container as the walk classifies it.
enum Token {
    Str(String),
    Bool(bool),
    /// An integer written plainly (its text is what a decoder would print).
    Int(String),
    /// Any other number (a decoder may print it otherwise than it is written).
    Float,
    /// null, an object or an array.
    Other,
}

impl Scan<'_> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    /// A string at the cursor (after whitespace): its content span and whether it has
    /// escapes.
    fn string_span(&mut self) -> Option<(usize, usize, bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    return Some((start, self.i - 1, escaped));
                }
                b'\\' => {
                    escaped = true;
                    self.i += 2;
                }
                c if c < 0x20 => return None,
                _ => self.i += 1,
            }
        }
    }

    fn string(&mut self) -> Option<String> {
        let (start, end, escaped) = self.string_span()?;
        if escaped {
            serde_json::from_slice(&self.b[start - 1..=end]).ok()
        } else {
            std::str::from_utf8(&self.b[start..end])
                .ok()
                .map(str::to_string)
        }
    }

    /// Skips one value of any kind.
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        match *self.b.get(self.i)? {
            b'"' => self.string_span().map(drop),
            b'{' => {
                self.i += 1;
                if self.eat(b'}').is_some() {
                    return Some(());
                }
                loop {
                    self.string_span()?;
                    self.eat(b':')?;
                    self.skip(depth + 1)?;
                    if self.eat(b',').is_none() {
                        return self.eat(b'}');
                    }
                }
            }
            b'[' => {
                self.i += 1;
                if self.eat(b']').is_some() {
                    return Some(());
                }
                loop {
                    self.skip(depth + 1)?;
                    if self.eat(b',').is_none() {
                        return self.eat(b']');
                    }
                }
            }
            _ => {
                let text = self.literal_text()?;
                let number = text.starts_with(|c: char| c == '-' || c.is_ascii_digit())
                    && text.parse::<f64>().is_ok();
                (number || matches!(text, "true" | "false" | "null")).then_some(())
            }
        }
    }

    /// The text of a number, `true`, `false` or `null` at the cursor.
    fn literal_text(&mut self) -> Option<&str> {
        let start = self.i;
        while let Some(c) = self.b.get(self.i) {
            if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                break;
            }
            self.i += 1;
        }
        std::str::from_utf8(&self.b[start..self.i]).ok()
    }

    /// A number, `true`, `false` or `null` at the cursor, classified.
    fn literal(&mut self) -> Option<Token> {
        match self.literal_text()? {
            "true" => Some(Token::Bool(true)),
            "false" => Some(Token::Bool(false)),
            "null" => Some(Token::Other),
            t => {
                let digits = t.strip_prefix('-').unwrap_or(t);
                // `-0` reads back as 0.
                let plain = !digits.is_empty()
                    && digits.bytes().all(|c| c.is_ascii_digit())
                    && (digits == "0" || !digits.starts_with('0'))
                    && t != "-0";
                // Beyond i64/u64 a decoder reads a float and prints it otherwise.
                if plain && (t.parse::<i64>().is_ok() || t.parse::<u64>().is_ok()) {
                    Some(Token::Int(t.to_string()))
                } else {
                    let number = t.starts_with(|c: char| c == '-' || c.is_ascii_digit())
                        && t.parse::<f64>().is_ok();
                    number.then_some(Token::Float)
                }
            }
        }
    }

    /// One value, classified; containers are skipped.
    fn token(&mut self, depth: usize) -> Option<Token> {
        self.ws();
        match *self.b.get(self.i)? {
            b'"' => self.string().map(Token::Str),
            b'{' | b'[' => self.skip(depth).map(|()| Token::Other),
            _ => self.literal(),
        }
    }

    /// Walks an object, recording the selectable fields whose paths (`wanted`, each already
    /// matched up to `level` segments) continue into it, and at the top its metadata.
    fn object(&mut self, wanted: &[Vec<&str>], level: usize, top: bool) -> Option<()> {
        if level > MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            if top && key == "metadata" {
                if self.meta.is_some() {
                    return None;
                }
                let meta = self.metadata()?;
                self.meta = Some(meta);
            } else {
                let deeper: Vec<usize> = (0..wanted.len())
                    .filter(|&w| wanted[w].get(level) == Some(&key.as_str()))
                    .collect();
                if deeper.is_empty() {
                    self.skip(level + 1)?;
                } else if deeper.iter().any(|&w| wanted[w].len() == level + 1) {
                    // A path ends here (paths are not prefixes of one another in practice;
                    // if one were, the decoder decides).
                    if deeper.iter().any(|&w| wanted[w].len() != level + 1) {
                        return None;
                    }
                    let value = match self.token(level + 1)? {
                        Token::Str(s) => Some(s),
                        Token::Bool(b) => Some(if b { "true" } else { "false" }.to_string()),
                        Token::Int(n) => Some(n),
                        Token::Float => return None,
                        Token::Other => None,
                    };
                    for w in deeper {
                        if self.fields[w].is_some() {
                            return None;
                        }
                        self.fields[w] = Some(value.clone());
                    }
                } else {
                    self.ws();
                    if self.b.get(self.i) == Some(&b'{') {
                        let sub: Vec<Vec<&str>> =
                            deeper.iter().map(|&w| wanted[w].clone()).collect();
                        // Walk with the narrowed list, then map the findings back.
                        let mut inner = Scan {
                            b: self.b,
                            i: self.i,
                            meta: None,
                            fields: vec![None; sub.len()],
                        };
                        inner.object(&sub, level + 1, false)?;
                        self.i = inner.i;
                        for (k, &w) in deeper.iter().enumerate() {
                            if let Some(found) = inner.fields[k].take() {
                                if self.fields[w].is_some() {
                                    return None;
                                }
                                self.fields[w] = Some(found);
                            }
                        }
                        // A second occurrence of this object would be a duplicate key.
                        for &w in &deeper {
                            if self.fields[w].is_none() {
                                self.fields[w] = Some(None);
                            }
                        }
                    } else {
                        self.skip(level + 1)?;
                        for &w in &deeper {
                            if self.fields[w].is_some() {
                                return None;
                            }
                            self.fields[w] = Some(None);
                        }
                    }
                }
            }
            if self.eat(b',').is_none() {
                return self.eat(b'}');
            }
        }
    }

    /// Walks `metadata` (the cursor at its value).
    fn metadata(&mut self) -> Option<Meta> {
        let mut meta = Meta::default();
        self.eat(b'{')?;
        self.ws();
        if self.b.get(self.i) == Some(&b'}') {
            meta.insert_at = self.i;
            meta.empty = true;
            self.i += 1;
            return Some(meta);
        }
        let mut insert_found = false;
        loop {
            self.ws();
            let key_start = self.i;
            let key = self.string()?;
            if !insert_found && key.as_str() > "resourceVersion" {
                meta.insert_at = key_start;
                meta.insert_before_key = true;
                insert_found = true;
            }
            self.eat(b':')?;
            match key.as_str() {
                "name" | "namespace" => {
                    let v = match self.token(2)? {
                        Token::Str(s) => s,
                        _ => String::new(),
                    };
                    let slot = if key == "name" {
                        &mut meta.name
                    } else {
                        &mut meta.namespace
                    };
                    if slot.replace(v).is_some() {
                        return None;
                    }
                }
                "resourceVersion" => {
                    self.ws();
                    let start = self.i;
                    self.skip(2)?;
                    if meta.rv.replace((start, self.i)).is_some() {
                        return None;
                    }
                }
                "labels" => {
                    if meta.labels.is_some() {
                        return None;
                    }
                    meta.labels = Some(self.labels()?);
                }
                _ => self.skip(2)?,
            }
            if self.eat(b',').is_none() {
                self.ws();
                if !insert_found {
                    meta.insert_at = self.i;
                }
                return self.eat(b'}').map(|()| meta);
            }
        }
    }

    /// `metadata.labels`: its string-valued members (anything else is skipped, as the
    /// decoder's reading skips it).
    fn labels(&mut self) -> Option<BTreeMap<String, String>> {
        let mut labels = BTreeMap::new();
        self.ws();
        if self.b.get(self.i) != Some(&b'{') {
            self.skip(2)?;
            return Some(labels);
        }
        self.i += 1;
        if self.eat(b'}').is_some() {
            return Some(labels);
        }
        loop {
            let k = self.string()?;
            self.eat(b':')?;
            let v = self.token(3)?;
            // The decoder keeps the last of duplicate keys.
            match v {
                Token::Str(v) => {
                    labels.insert(k, v);
                }
                _ => {
                    labels.remove(&k);
                }
            }
            if self.eat(b',').is_none() {
                return self.eat(b'}').map(|()| labels);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cacher::CachedObject;
    use crate::registry::resources::find;
    use api::Object;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// What decoding would give, to compare with.
    fn decoded(info: &ResourceInfo, stored: &[u8], rv: u64) -> CachedObject {
        let obj = Object::from_slice(stored).unwrap();
        CachedObject::from_object(info, "k", obj, rv)
    }

    fn same(info: &ResourceInfo, stored: &[u8], rv: u64) {
        let want = decoded(info, stored, rv);
        let got = stamp(info, stored, rv).expect("stamped");
        let got_json: Value = serde_json::from_slice(&got.json).unwrap();
        let want_json: Value = serde_json::from_slice(&want.json).unwrap();
        assert_eq!(got_json, want_json, "{}", String::from_utf8_lossy(stored));
        assert_eq!(
            got.json,
            want.json.to_vec(),
            "bytes of a sorted compact input"
        );
        assert_eq!(got.namespace, want.namespace);
        assert_eq!(got.name, want.name);
        assert_eq!(got.labels, want.labels);
        assert_eq!(got.fields, want.fields);
    }

    #[test]
    fn a_pod_is_stamped_as_decoding_would() {
        let pods = find("", "v1", "pods").unwrap();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web", "n": 1},
                "uid": "u", "managedFields": [{"fieldsV1": {"f:spec": {"}\"{": {}}}}]},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}});
        let stored = serde_json::to_vec(&pod).unwrap();
        same(pods, &stored, 42);
        // An old resourceVersion is replaced; no metadata members before it.
        let mut with_rv = pod.clone();
        with_rv["metadata"] = json!({"resourceVersion": "7", "uid": "u"});
        same(pods, &serde_json::to_vec(&with_rv).unwrap(), 43);
        // Empty metadata; no field values (defaults).
        let bare = json!({"kind": "Pod", "metadata": {}});
        same(pods, &serde_json::to_vec(&bare).unwrap(), 1);
        let nodes = find("", "v1", "nodes").unwrap();
        let node = json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}});
        same(nodes, &serde_json::to_vec(&node).unwrap(), 5);
    }

    #[test]
    fn what_it_does_not_handle_is_left_to_the_decoder() {
        let pods = find("", "v1", "pods").unwrap();
        for stored in [
            &b"[1]"[..],
            b"{\"kind\":\"Pod\"}",
            b"{\"metadata\":{},\"metadata\":{}}",
            b"{\"metadata\":{\"name\":\"a\",\"name\":\"b\"}}",
            b"{\"metadata\":{},\"status\":{\"phase\":1.5}}",
            b"{\"metadata\":{}",
            b"{\"metadata\":{}} x",
            b"{\"metadata\":{\"name\":\"a\x01\"}}",
        ] {
            assert_eq!(
                stamp(pods, stored, 1),
                None,
                "{}",
                String::from_utf8_lossy(stored)
            );
        }
        let deep = format!(
            "{{\"metadata\":{{}},\"a\":{}1{}}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(stamp(pods, deep.as_bytes(), 1), None);
    }

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            // Quarters print and read back exactly (serde_json's parser does not always read
            // back the float it printed, which would make the decoder, not the splice, differ).
            (-4000i32..4000).prop_map(|q| json!(f64::from(q) / 4.0)),
            "[a-z\"\\\\{}\\[\\]:,\u{e9}\u{1}]{0,6}".prop_map(Value::String),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        scalar().prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("nodeName".to_string()),
                        Just("phase".to_string()),
                        "[a-z]{1,3}".prop_map(String::from)
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn meta_key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("name".to_string()),
            Just("namespace".to_string()),
            Just("labels".to_string()),
            Just("resourceVersion".to_string()),
            Just("uid".to_string()),
            Just("annotations".to_string()),
            Just("zzz".to_string()),
            Just("a".to_string()),
        ]
    }

    proptest! {
        /// Whatever stored object the encoder wrote, stamping gives what decoding gives.
        #[test]
        fn stamping_agrees_with_decoding(
            meta in prop::collection::btree_map(meta_key(), value(), 0..6),
            spec in prop::option::of(value()),
            status in prop::option::of(value()),
            labels in prop::option::of(prop::collection::btree_map("[a-z/.]{1,5}", scalar(), 0..4)),
            rv in any::<u64>(),
        ) {
            let pods = find("", "v1", "pods").unwrap();
            let mut m: serde_json::Map<String, Value> = meta.into_iter().collect();
            if let Some(l) = labels {
                m.insert("labels".into(), Value::Object(l.into_iter().collect()));
            }
            let mut obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": m});
            if let Some(s) = spec { obj["spec"] = s; }
            if let Some(s) = status { obj["status"] = s; }
            let stored = serde_json::to_vec(&obj).unwrap();
            // Pretty-printed input too: whitespace anywhere.
            let pretty = serde_json::to_vec_pretty(&obj).unwrap();
            let want = decoded(pods, &stored, rv);
            for input in [&stored, &pretty] {
                if let Some(got) = stamp(pods, input, rv) {
                    let got_json: Value = serde_json::from_slice(&got.json).unwrap();
                    let want_json: Value = serde_json::from_slice(&want.json).unwrap();
                    prop_assert_eq!(got_json, want_json);
                    prop_assert_eq!(&got.namespace, &want.namespace);
                    prop_assert_eq!(&got.name, &want.name);
                    prop_assert_eq!(&got.labels, &want.labels);
                    prop_assert_eq!(&got.fields, &want.fields);
                    // Byte for byte too, when the encoder wrote the input.
                    if input == &stored {
                        prop_assert_eq!(&got.json[..], &want.json[..]);
                    }
                } else {
                    // Only numbers that are not plain integers at a field's place are
                    // refused in documents the encoder wrote.
                    let odd = |v: &Value| v.as_f64().is_some() && !v.is_i64() && !v.is_u64();
                    prop_assert!(
                        odd(&obj["spec"]["nodeName"]) || odd(&obj["status"]["phase"]),
                        "refused: {}", String::from_utf8_lossy(input)
                    );
                }
            }
        }
    }
}
