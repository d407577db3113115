//! Structural schemas: a version's `openAPIV3Schema`, checked to be structural when the CRD
//! is written, then used on every custom object written: unknown fields pruned, nulls of
//! non-nullable fields dropped, defaults applied, and every value checked against its
//! schema, each violation reported as a field error in Kubernetes' words.
//!
//! A schema is structural when every node that is not free-form says its `type`, a node has
//! `properties` or `additionalProperties` but not both, and the logical junctors (`allOf`,
//! `anyOf`, `oneOf`, `not`) only add value checks: no types, defaults or
//! `additionalProperties` under them. Patterns use the `regex` crate, whose syntax is Go's RE2
//! (what kube-apiserver uses) for everything short of a few escape classes.

use api::status::FieldError;
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A compiled structural schema. Two schemas are equal when their sources are.
#[derive(Debug)]
pub struct Schema {
    source: Value,
    /// The root node (the object's own schema).
    pub root: Node,
}

impl PartialEq for Schema {
    fn eq(&self, other: &Schema) -> bool {
        self.source == other.source
    }
}

/// One node of a structural schema.
#[derive(Debug, Default)]
pub struct Node {
    /// `type`: `object`, `array`, `string`, `integer`, `number` or `boolean`.
    pub type_: Option<String>,
    /// `format` (checked for the formats Kubernetes knows; others are ignored).
    pub format: Option<String>,
    /// `nullable`: `null` is a value; otherwise a `null` is dropped before defaulting.
    pub nullable: bool,
    /// `enum`.
    pub enum_: Option<Vec<Value>>,
    /// `minimum`, and whether it is exclusive.
    pub minimum: Option<(f64, bool)>,
    /// `maximum`, and whether it is exclusive.
    pub maximum: Option<(f64, bool)>,
    /// `multipleOf`.
    pub multiple_of: Option<f64>,
    /// `pattern`, as written and compiled.
    pub pattern: Option<(String, Regex)>,
    /// `minLength` (characters).
    pub min_length: Option<u64>,
    /// `maxLength` (characters).
    pub max_length: Option<u64>,
    /// `minItems`.
    pub min_items: Option<u64>,
    /// `maxItems`.
    pub max_items: Option<u64>,
    /// `uniqueItems`.
    pub unique_items: bool,
    /// `minProperties`.
    pub min_properties: Option<u64>,
    /// `maxProperties`.
    pub max_properties: Option<u64>,
    /// `required`.
    pub required: Vec<String>,
    /// `properties`.
    pub properties: BTreeMap<String, Node>,
    /// `additionalProperties` as a schema: a map whose values all have it.
    pub additional_properties: Option<Box<Node>>,
    /// `items`.
    pub items: Option<Box<Node>>,
    /// `x-kubernetes-preserve-unknown-fields`.
    pub preserve_unknown_fields: bool,
    /// `x-kubernetes-int-or-string`.
    pub int_or_string: bool,
    /// `x-kubernetes-embedded-resource`: an object with its own apiVersion, kind, metadata.
    pub embedded_resource: bool,
    /// `x-kubernetes-list-type`: `atomic`, `set` or `map`.
    pub list_type: Option<String>,
    /// `x-kubernetes-list-map-keys`.
    pub list_map_keys: Vec<String>,
    /// `default`.
    pub default: Option<Value>,
    /// `allOf` (value checks only).
    pub all_of: Vec<Node>,
    /// `anyOf` (value checks only).
    pub any_of: Vec<Node>,
    /// `oneOf` (value checks only).
    pub one_of: Vec<Node>,
    /// `not` (value checks only).
    pub not: Option<Box<Node>>,
    /// `x-kubernetes-validations` rules, as written.
    pub validations: Vec<Value>,
    /// Those rules, compiled (empty when the schema has errors).
    pub rules: Vec<super::cel::CompiledRule>,
    /// This node or one below it has compiled rules (or rule errors).
    pub rules_below: bool,
    /// Rules of a stored definition that do not compile here (see
    /// [`Schema::compile_stored`]): each refuses every object written, naming the error.
    pub rule_errors: Vec<String>,
}

const TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

impl Schema {
    /// The `openAPIV3Schema` this schema was compiled from.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Whether any node of the schema has a `default`.
    pub fn has_defaults(&self) -> bool {
        fn any(n: &Node) -> bool {
            n.default.is_some()
                || n.properties.values().any(any)
                || n.additional_properties.as_deref().is_some_and(any)
                || n.items.as_deref().is_some_and(any)
        }
        any(&self.root)
    }

    /// Compiles `source` (an `openAPIV3Schema`); `path` is where it sits in the CRD, for the
    /// errors. Every reason the schema is not structural or not valid is returned.
    pub fn compile(source: &Value, path: &str) -> Result<Schema, Vec<FieldError>> {
        Schema::compile_with(source, path, false)
    }

    /// [`Schema::compile`] for a definition already stored, to serve it: its CEL rules that
    /// do not compile here (written before this server checked them, or under another
    /// server's rules) do not refuse it; they are kept as errors every object written reports.
    pub fn compile_stored(source: &Value, path: &str) -> Result<Schema, Vec<FieldError>> {
        Schema::compile_with(source, path, true)
    }

    fn compile_with(source: &Value, path: &str, stored: bool) -> Result<Schema, Vec<FieldError>> {
        let mut errs = Vec::new();
        let mut root = compile_node(source, path, Place::Root, &mut errs);
        if let Some(root) = &root {
            if root.type_.as_deref() != Some("object") {
                errs.push(FieldError::invalid(
                    format!("{path}.type"),
                    &Value::String(root.type_.clone().unwrap_or_default()),
                    "must be object at the root",
                ));
            }
        }
        if let Some(root) = root.as_mut().filter(|_| errs.is_empty()) {
            super::cel::compile_rules(root, path, &mut errs, stored);
        }
        match root {
            Some(root) if errs.is_empty() => Ok(Schema {
                source: source.clone(),
                root,
            }),
            _ => Err(errs),
        }
    }

    /// Removes what the schema does not declare from `obj` (a whole custom object: its
    /// `apiVersion`, `kind` and `metadata` are kept) and `null`s of non-nullable fields; the
    /// paths of the unknown fields removed, in order.
    pub fn prune(&self, obj: &mut Map<String, Value>) -> Vec<String> {
        let mut pruned = Vec::new();
        prune_object(obj, &self.root, "", true, &mut pruned);
        pruned
    }

    /// Sets the defaults of the key fields that items of `x-kubernetes-list-type: map` lists
    /// in `obj` leave out, and nothing else: what server-side apply needs to tell the items
    /// of an apply configuration apart (as Kubernetes' merge does with the schema's
    /// defaults) before the rest of the object is defaulted.
    pub fn default_list_keys(&self, obj: &mut Map<String, Value>) {
        fn walk(v: &mut Value, n: &Node) {
            match v {
                Value::Object(m) => {
                    for (k, x) in m.iter_mut() {
                        if let Some(p) = n.properties.get(k).or(n.additional_properties.as_deref())
                        {
                            walk(x, p);
                        }
                    }
                }
                Value::Array(items) => {
                    let Some(item) = n.items.as_deref() else {
                        return;
                    };
                    for x in items.iter_mut() {
                        if n.list_type.as_deref() == Some("map") {
                            if let Value::Object(m) = x {
                                for key in &n.list_map_keys {
                                    let default =
                                        item.properties.get(key).and_then(|p| p.default.as_ref());
                                    if let (false, Some(d)) = (m.contains_key(key), default) {
                                        m.insert(key.clone(), d.clone());
                                    }
                                }
                            }
                        }
                        walk(x, item);
                    }
                }
                _ => {}
            }
        }
        for (k, v) in obj.iter_mut() {
            if let Some(p) = self.root.properties.get(k) {
                walk(v, p);
            }
        }
    }

    /// Sets the defaults of absent fields in `obj`, deepest last (a default object gets the
    /// defaults of its own members).
    pub fn apply_defaults(&self, obj: &mut Map<String, Value>) {
        default_object(obj, &self.root);
    }

    /// Every violation of the schema in `obj` (an empty list when it conforms). `metadata`,
    /// `apiVersion` and `kind` are the server's to check and are skipped at the root.
    pub fn validate(&self, obj: &Map<String, Value>) -> Vec<FieldError> {
        self.validate_update(obj, None)
    }

    /// [`Schema::validate`], then the schema's CEL rules (with `old`, the stored object,
    /// on an update), every violation of either in one list. Rules are not evaluated
    /// when a value has the wrong type (they could only fail on it); a cause says so.
    pub fn validate_update(
        &self,
        obj: &Map<String, Value>,
        old: Option<&Map<String, Value>>,
    ) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut root = Map::new();
        for (k, v) in obj {
            if !matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                root.insert(k.clone(), v.clone());
            }
        }
        validate_object_members(&root, &self.root, "", &mut errs, true);
        errs.sort_by(|a, b| a.field.cmp(&b.field));
        if self.root.rules_below {
            let blocking = errs.iter().any(|e| {
                e.reason == "FieldValueNotSupported" || e.body.contains(" in body must be of type ")
            });
            if blocking {
                errs.push(FieldError {
                    reason: "FieldValueInvalid",
                    field: "<nil>".into(),
                    body: "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into(),
                });
            } else {
                errs.extend(super::cel::validate(&self.root, obj, old));
            }
        }
        errs
    }
}

impl api::managed_fields::ListStrategies for Schema {
    /// `x-kubernetes-list-type: map` merges by its keys (one or several together); `set`
    /// merges as a set; `atomic`, or no list type, replace the whole list, as a list of
    /// unknown kind does.
    fn list_strategy(
        &self,
        path: &[&str],
    ) -> Option<api::patch::strategic_merge_patch::ListStrategy> {
        use api::patch::strategic_merge_patch::ListStrategy;
        let mut node = &self.root;
        for (i, name) in path.iter().enumerate() {
            node = node
                .properties
                .get(*name)
                .or(node.additional_properties.as_deref())?;
            if i + 1 < path.len() && node.type_.as_deref() == Some("array") {
                node = node.items.as_deref()?;
            }
        }
        Some(
            match (node.list_type.as_deref(), node.list_map_keys.as_slice()) {
                (Some("map"), [key]) => ListStrategy::MergeByKey(static_str(key)),
                (Some("map"), keys) if !keys.is_empty() => {
                    ListStrategy::MergeByKeys(static_strs(keys))
                }
                (Some("set"), _) => ListStrategy::MergePrimitives,
                _ => ListStrategy::Replace,
            },
        )
    }
}

/// `key` as a `&'static str`, which the strategy type holds: each distinct key name is
/// copied once and kept for the life of the process (a handful of names such as `name`).
fn static_str(key: &str) -> &'static str {
    use parking_lot::Mutex;
    use std::collections::HashSet;
    use std::sync::OnceLock;
    static KEYS: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut keys = KEYS.get_or_init(Default::default).lock();
    if let Some(k) = keys.get(key) {
        return k;
    }
    let k: &'static str = Box::leak(key.to_string().into_boxed_str());
    keys.insert(k);
    k
}

/// `keys` as a `&'static [&'static str]`, kept for the life of the process as
/// [`static_str`] keeps one key: one copy per distinct list of keys.
fn static_strs(keys: &[String]) -> &'static [&'static str] {
    use parking_lot::Mutex;
    use std::collections::HashMap;
    use std::sync::OnceLock;
    static LISTS: OnceLock<Mutex<HashMap<Vec<String>, &'static [&'static str]>>> = OnceLock::new();
    let mut lists = LISTS.get_or_init(Default::default).lock();
    if let Some(l) = lists.get(keys) {
        return l;
    }
    let l: &'static [&'static str] = Box::leak(
        keys.iter()
            .map(|k| static_str(k))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    lists.insert(keys.to_vec(), l);
    l
}

#[derive(Clone, Copy, PartialEq)]
enum Place {
    Root,
    Member,
    /// Under a logical junctor: value checks only.
    Junctor,
}

/// `name` below `path` (a dotted field path; `""` is the root).
pub(super) fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn compile_node(v: &Value, path: &str, place: Place, errs: &mut Vec<FieldError>) -> Option<Node> {
    let Some(m) = v.as_object() else {
        errs.push(FieldError::invalid(path, v, "must be an object"));
        return None;
    };
    let mut n = Node::default();
    let get_u = |k: &str, errs: &mut Vec<FieldError>| -> Option<u64> {
        let x = m.get(k)?;
        match x.as_u64() {
            Some(u) => Some(u),
            None => {
                errs.push(FieldError::invalid(
                    child(path, k),
                    x,
                    "must be a non-negative integer",
                ));
                None
            }
        }
    };
    let get_b = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
    for k in [
        "$ref",
        "id",
        "$schema",
        "definitions",
        "dependencies",
        "additionalItems",
        "patternProperties",
    ] {
        if m.contains_key(k) {
            errs.push(FieldError::forbidden(
                child(path, k),
                &format!("{k} is not supported"),
            ));
        }
    }
    n.type_ = match m.get("type") {
        None => None,
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) => Some(t.clone()),
        Some(Value::String(t)) if t.is_empty() => None,
        Some(t) => {
            errs.push(FieldError::not_supported(
                child(path, "type"),
                t.as_str().unwrap_or_default(),
                TYPES,
            ));
            None
        }
    };
    n.format = m.get("format").and_then(Value::as_str).map(str::to_string);
    n.nullable = get_b("nullable");
    n.preserve_unknown_fields = get_b("x-kubernetes-preserve-unknown-fields");
    n.int_or_string = get_b("x-kubernetes-int-or-string");
    n.embedded_resource = get_b("x-kubernetes-embedded-resource");
    n.unique_items = get_b("uniqueItems");
    if let Some(e) = m.get("enum") {
        match e.as_array() {
            Some(a) => n.enum_ = Some(a.clone()),
            None => errs.push(FieldError::invalid(
                child(path, "enum"),
                e,
                "must be an array",
            )),
        }
    }
    let num = |k: &str, errs: &mut Vec<FieldError>| -> Option<f64> {
        let x = m.get(k)?;
        let f = x.as_f64();
        if f.is_none() {
            errs.push(FieldError::invalid(child(path, k), x, "must be a number"));
        }
        f
    };
    n.minimum = num("minimum", errs).map(|f| (f, get_b("exclusiveMinimum")));
    n.maximum = num("maximum", errs).map(|f| (f, get_b("exclusiveMaximum")));
    n.multiple_of = num("multipleOf", errs);
    if n.multiple_of.is_some_and(|f| f <= 0.0) {
        errs.push(FieldError::invalid(
            child(path, "multipleOf"),
            &m["multipleOf"],
            "must be greater than zero",
        ));
    }
    n.min_length = get_u("minLength", errs);
    n.max_length = get_u("maxLength", errs);
    n.min_items = get_u("minItems", errs);
    n.max_items = get_u("maxItems", errs);
    n.min_properties = get_u("minProperties", errs);
    n.max_properties = get_u("maxProperties", errs);
    if let Some(p) = m.get("pattern") {
        match p.as_str().map(Regex::new) {
            Some(Ok(re)) => n.pattern = Some((p.as_str().unwrap_or_default().to_string(), re)),
            Some(Err(e)) => errs.push(FieldError::invalid(
                child(path, "pattern"),
                p,
                &format!("must be a valid regular expression, but isn't: {e}"),
            )),
            None => errs.push(FieldError::invalid(
                child(path, "pattern"),
                p,
                "must be a string",
            )),
        }
    }
    if let Some(r) = m.get("required") {
        match r.as_array() {
            Some(a) => {
                n.required = a
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            }
            None => errs.push(FieldError::invalid(
                child(path, "required"),
                r,
                "must be an array",
            )),
        }
    }
    let sub = if place == Place::Junctor {
        Place::Junctor
    } else {
        Place::Member
    };
    if let Some(props) = m.get("properties") {
        match props.as_object() {
            Some(props) => {
                for (k, pv) in props {
                    let p = format!("{path}.properties[{k}]");
                    if let Some(node) = compile_node(pv, &p, sub, errs) {
                        n.properties.insert(k.clone(), node);
                    }
                }
            }
            None => errs.push(FieldError::invalid(
                child(path, "properties"),
                props,
                "must be an object",
            )),
        }
    }
    match m.get("additionalProperties") {
        None | Some(Value::Bool(true)) => {}
        Some(Value::Bool(false)) => {
            if n.preserve_unknown_fields {
                errs.push(FieldError::forbidden(
                    child(path, "additionalProperties"),
                    "must not be false if x-kubernetes-preserve-unknown-fields is true",
                ));
            }
        }
        Some(ap) => {
            if !n.properties.is_empty() {
                errs.push(FieldError::forbidden(
                    child(path, "additionalProperties"),
                    "additionalProperties and properties are mutual exclusive",
                ));
            }
            n.additional_properties =
                compile_node(ap, &child(path, "additionalProperties"), sub, errs).map(Box::new);
        }
    }
    if let Some(items) = m.get("items") {
        if items.is_array() {
            errs.push(FieldError::forbidden(
                child(path, "items"),
                "items must be a schema object and not an array",
            ));
        } else {
            n.items = compile_node(items, &child(path, "items"), sub, errs).map(Box::new);
        }
    }
    for (k, list) in [
        ("allOf", &mut n.all_of),
        ("anyOf", &mut n.any_of),
        ("oneOf", &mut n.one_of),
    ] {
        if let Some(a) = m.get(k).and_then(Value::as_array) {
            for (i, x) in a.iter().enumerate() {
                if let Some(node) =
                    compile_node(x, &format!("{path}.{k}[{i}]"), Place::Junctor, errs)
                {
                    list.push(node);
                }
            }
        }
    }
    if let Some(x) = m.get("not") {
        n.not = compile_node(x, &child(path, "not"), Place::Junctor, errs).map(Box::new);
    }
    if let Some(lt) = m.get("x-kubernetes-list-type") {
        match lt.as_str() {
            Some(t @ ("atomic" | "set" | "map")) => n.list_type = Some(t.to_string()),
            _ => errs.push(FieldError::not_supported(
                child(path, "x-kubernetes-list-type"),
                lt.as_str().unwrap_or_default(),
                &["atomic", "set", "map"],
            )),
        }
        if n.type_.as_deref() != Some("array") {
            errs.push(FieldError::invalid(
                child(path, "type"),
                &Value::String(n.type_.clone().unwrap_or_default()),
                "must be array if x-kubernetes-list-type is specified",
            ));
        }
    }
    if let Some(keys) = m
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
    {
        n.list_map_keys = keys
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        if n.list_type.as_deref() != Some("map") {
            errs.push(FieldError::forbidden(
                child(path, "x-kubernetes-list-map-keys"),
                "must be empty if x-kubernetes-list-type is not map",
            ));
        }
    } else if n.list_type.as_deref() == Some("map") {
        errs.push(FieldError::required(
            child(path, "x-kubernetes-list-map-keys"),
            "must not be empty if x-kubernetes-list-type is map",
        ));
    }
    if let Some(v) = m.get("x-kubernetes-validations").and_then(Value::as_array) {
        n.validations = v.clone();
    }
    n.default = m.get("default").cloned();
    // The structural rules.
    if place == Place::Junctor {
        for k in [
            "type",
            "default",
            "nullable",
            "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-embedded-resource",
            "x-kubernetes-int-or-string",
        ] {
            if m.contains_key(k)
                && !(k == "type" && m.get(k) == Some(&Value::String(String::new())))
            {
                errs.push(FieldError::forbidden(
                    child(path, k),
                    "must be empty to be structural",
                ));
            }
        }
        if m.get("additionalProperties")
            .is_some_and(|a| a != &Value::Bool(true))
        {
            errs.push(FieldError::forbidden(
                child(path, "additionalProperties"),
                "must be undefined to be structural",
            ));
        }
    } else {
        let free = n.preserve_unknown_fields || n.int_or_string;
        if n.type_.is_none() && !free {
            errs.push(FieldError::required(
                child(path, "type"),
                "must not be empty for specified object fields",
            ));
        }
        if n.int_or_string && n.type_.is_some() {
            errs.push(FieldError::invalid(
                child(path, "type"),
                m.get("type").unwrap_or(&Value::Null),
                "must be empty if x-kubernetes-int-or-string is true",
            ));
        }
        if n.embedded_resource && n.type_.as_deref() != Some("object") {
            errs.push(FieldError::invalid(
                child(path, "type"),
                m.get("type").unwrap_or(&Value::Null),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
        if n.type_.as_deref() == Some("array") && n.items.is_none() {
            errs.push(FieldError::required(
                child(path, "items"),
                "must be specified",
            ));
        }
    }
    if place == Place::Root {
        if let Some(meta) = m.get("properties").and_then(|p| p.get("metadata")) {
            let allowed = ["type", "properties"];
            let meta_obj = meta.as_object();
            let extra = meta_obj.is_some_and(|o| o.keys().any(|k| !allowed.contains(&k.as_str())));
            let props_ok = meta_obj
                .and_then(|o| o.get("properties"))
                .and_then(Value::as_object)
                .is_none_or(|p| p.keys().all(|k| k == "name" || k == "generateName"));
            if extra || !props_ok {
                errs.push(FieldError::forbidden(
                    format!("{path}.properties[metadata]"),
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
        }
        if n.default.is_some() {
            errs.push(FieldError::forbidden(
                child(path, "default"),
                "must not be set at the root",
            ));
        }
    }
    if let Some(d) = &n.default {
        let mut derrs = Vec::new();
        validate_value(d, &n, &child(path, "default"), &mut derrs);
        errs.extend(derrs.into_iter().map(|mut e| {
            e.body = format!("{} (in default)", e.body);
            e
        }));
    }
    Some(n)
}

// ---- pruning ----

fn prune_object(
    obj: &mut Map<String, Value>,
    node: &Node,
    path: &str,
    keep_meta: bool,
    pruned: &mut Vec<String>,
) {
    let keys: Vec<String> = obj.keys().cloned().collect();
    for k in keys {
        if keep_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let p = child(path, &k);
        let schema = node
            .properties
            .get(&k)
            .or(node.additional_properties.as_deref());
        match schema {
            Some(s) => {
                let drop_null = obj.get(&k).is_some_and(Value::is_null) && !s.nullable;
                if drop_null {
                    obj.remove(&k);
                } else if let Some(v) = obj.get_mut(&k) {
                    prune_value(v, s, &p, pruned);
                }
            }
            None if node.preserve_unknown_fields => {}
            None => {
                obj.remove(&k);
                pruned.push(p);
            }
        }
    }
}

fn prune_value(v: &mut Value, node: &Node, path: &str, pruned: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            let free = node.preserve_unknown_fields
                && node.properties.is_empty()
                && node.additional_properties.is_none();
            if !free {
                prune_object(m, node, path, node.embedded_resource, pruned);
            }
        }
        Value::Array(a) => {
            if let Some(items) = &node.items {
                for (i, x) in a.iter_mut().enumerate() {
                    prune_value(x, items, &format!("{path}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

// ---- defaulting ----

fn default_object(obj: &mut Map<String, Value>, node: &Node) {
    for (k, s) in &node.properties {
        if !obj.contains_key(k) {
            if let Some(d) = &s.default {
                obj.insert(k.clone(), d.clone());
            }
        }
        if let Some(v) = obj.get_mut(k) {
            default_value(v, s);
        }
    }
    if let Some(ap) = &node.additional_properties {
        for v in obj.values_mut() {
            default_value(v, ap);
        }
    }
}

fn default_value(v: &mut Value, node: &Node) {
    match v {
        Value::Object(m) => default_object(m, node),
        Value::Array(a) => {
            if let Some(items) = &node.items {
                for x in a {
                    default_value(x, items);
                }
            }
        }
        _ => {}
    }
}

// ---- validation ----

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "number" => v.is_number(),
        other => type_name(v) == other,
    }
}

fn display_path(path: &str) -> &str {
    if path.is_empty() {
        "<root>"
    } else {
        path
    }
}

fn validate_object_members(
    m: &Map<String, Value>,
    node: &Node,
    path: &str,
    errs: &mut Vec<FieldError>,
    root: bool,
) {
    for r in &node.required {
        let server_owned = root && matches!(r.as_str(), "apiVersion" | "kind" | "metadata");
        if !server_owned && !m.contains_key(r) {
            errs.push(FieldError::required(child(path, r), ""));
        }
    }
    for (k, v) in m {
        let p = child(path, k);
        if let Some(s) = node
            .properties
            .get(k)
            .or(node.additional_properties.as_deref())
        {
            validate_value(v, s, &p, errs);
        }
    }
    let count = m.len() as u64;
    if let Some(max) = node.max_properties {
        if count > max {
            errs.push(FieldError {
                reason: "FieldValueTooMany",
                field: display_path(path).to_string(),
                body: format!("Too many: {count}: must have at most {max} items"),
            });
        }
    }
    if let Some(min) = node.min_properties {
        if count < min {
            errs.push(FieldError::invalid(
                display_path(path),
                &Value::from(count),
                &format!(
                    "{} in body should have at least {min} properties",
                    display_path(path)
                ),
            ));
        }
    }
}

fn validate_value(v: &Value, node: &Node, path: &str, errs: &mut Vec<FieldError>) {
    let shown = display_path(path);
    if v.is_null() {
        if node.nullable || node.preserve_unknown_fields && node.type_.is_none() {
            return;
        }
        if let Some(t) = &node.type_ {
            errs.push(FieldError::invalid(
                shown,
                v,
                &format!("{shown} in body must be of type {t}: \"null\""),
            ));
        }
        return;
    }
    if node.int_or_string {
        if !(v.is_string() || v.is_i64() || v.is_u64()) {
            errs.push(FieldError::invalid(
                shown,
                v,
                &format!(
                    "{shown} in body must be of type integer,string: \"{}\"",
                    type_name(v)
                ),
            ));
            return;
        }
    } else if let Some(t) = &node.type_ {
        if !has_type(v, t) {
            errs.push(FieldError::invalid(
                shown,
                v,
                &format!("{shown} in body must be of type {t}: \"{}\"", type_name(v)),
            ));
            return;
        }
    }
    if let Some(allowed) = &node.enum_ {
        if !allowed.contains(v) {
            let list: Vec<String> = allowed
                .iter()
                .map(|a| match a {
                    Value::String(s) => format!("{s:?}"),
                    other => other.to_string(),
                })
                .collect();
            errs.push(FieldError {
                reason: "FieldValueNotSupported",
                field: shown.to_string(),
                body: format!(
                    "Unsupported value: {v}: supported values: {}",
                    list.join(", ")
                ),
            });
        }
    }
    match v {
        Value::Number(num) => {
            let f = num.as_f64().unwrap_or(0.0);
            if let Some((min, excl)) = node.minimum {
                if (excl && f <= min) || (!excl && f < min) {
                    let rel = if excl {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    errs.push(FieldError::invalid(
                        shown,
                        v,
                        &format!("{shown} in body should be {rel} {}", fmt_num(min)),
                    ));
                }
            }
            if let Some((max, excl)) = node.maximum {
                if (excl && f >= max) || (!excl && f > max) {
                    let rel = if excl {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    errs.push(FieldError::invalid(
                        shown,
                        v,
                        &format!("{shown} in body should be {rel} {}", fmt_num(max)),
                    ));
                }
            }
            if let Some(m) = node.multiple_of {
                let q = f / m;
                if (q - q.round()).abs() > 1e-9 {
                    errs.push(FieldError::invalid(
                        shown,
                        v,
                        &format!("{shown} in body should be a multiple of {}", fmt_num(m)),
                    ));
                }
            }
            if let Some(fmt) = node.format.as_deref() {
                let fits = match fmt {
                    "int32" => num.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
                    "int64" => num.is_i64(),
                    _ => true,
                };
                if !fits {
                    errs.push(FieldError::invalid(
                        shown,
                        v,
                        &format!("{shown} in body must be of type {fmt}: \"{num}\""),
                    ));
                }
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = node.max_length {
                if len > max {
                    errs.push(FieldError {
                        reason: "FieldValueTooLong",
                        field: shown.to_string(),
                        body: format!("Too long: may not be more than {max} bytes"),
                    });
                }
            }
            if let Some(min) = node.min_length {
                if len < min {
                    errs.push(FieldError::invalid(
                        shown,
                        v,
                        &format!("{shown} in body should be at least {min} chars long"),
                    ));
                }
            }
            if let Some((src, re)) = &node.pattern {
                if !re.is_match(s) {
                    errs.push(FieldError::invalid(
                        shown,
                        v,
                        &format!("{shown} in body should match '{src}'"),
                    ));
                }
            }
            if let Some(fmt) = node.format.as_deref() {
                if !string_format_ok(fmt, s) {
                    errs.push(FieldError::invalid(
                        shown,
                        v,
                        &format!("{shown} in body must be of type {fmt}: {v}"),
                    ));
                }
            }
        }
        Value::Array(a) => {
            let n = a.len() as u64;
            if let Some(max) = node.max_items {
                if n > max {
                    errs.push(FieldError {
                        reason: "FieldValueTooMany",
                        field: shown.to_string(),
                        body: format!("Too many: {n}: must have at most {max} items"),
                    });
                }
            }
            if let Some(min) = node.min_items {
                if n < min {
                    errs.push(FieldError::invalid(
                        shown,
                        v,
                        &format!("{shown} in body should have at least {min} items"),
                    ));
                }
            }
            let set = node.unique_items || node.list_type.as_deref() == Some("set");
            if set {
                for (i, x) in a.iter().enumerate() {
                    if a[..i].contains(x) {
                        errs.push(FieldError {
                            reason: "FieldValueDuplicate",
                            field: format!("{path}[{i}]"),
                            body: format!("Duplicate value: {x}"),
                        });
                    }
                }
            }
            if node.list_type.as_deref() == Some("map") {
                let key_of = |x: &Value| -> Vec<Value> {
                    node.list_map_keys
                        .iter()
                        .map(|k| x.get(k).cloned().unwrap_or(Value::Null))
                        .collect()
                };
                let keys: Vec<Vec<Value>> = a.iter().map(key_of).collect();
                for i in 0..keys.len() {
                    if keys[..i].contains(&keys[i]) {
                        let shown_key: Map<String, Value> = node
                            .list_map_keys
                            .iter()
                            .cloned()
                            .zip(keys[i].iter().cloned())
                            .collect();
                        errs.push(FieldError {
                            reason: "FieldValueDuplicate",
                            field: format!("{path}[{i}]"),
                            body: format!("Duplicate value: {}", Value::Object(shown_key)),
                        });
                    }
                }
            }
            if let Some(items) = &node.items {
                for (i, x) in a.iter().enumerate() {
                    validate_value(x, items, &format!("{path}[{i}]"), errs);
                }
            }
        }
        Value::Object(m) => {
            if node.embedded_resource {
                for k in ["apiVersion", "kind"] {
                    if m.get(k).and_then(Value::as_str).is_none_or(str::is_empty) {
                        errs.push(FieldError::required(child(path, k), "must not be empty"));
                    }
                }
            }
            validate_object_members(m, node, path, errs, false);
        }
        _ => {}
    }
    for s in &node.all_of {
        validate_value(v, s, path, errs);
    }
    if !node.any_of.is_empty() && !node.any_of.iter().any(|s| conforms(v, s, path)) {
        errs.push(FieldError::invalid(
            shown,
            v,
            &format!("{shown} in body must validate at least one schema (anyOf)"),
        ));
    }
    if !node.one_of.is_empty() {
        let matching = node.one_of.iter().filter(|s| conforms(v, s, path)).count();
        if matching != 1 {
            errs.push(FieldError::invalid(
                shown,
                v,
                &format!("{shown} in body must validate one and only one schema (oneOf)"),
            ));
        }
    }
    if let Some(not) = &node.not {
        if conforms(v, not, path) {
            errs.push(FieldError::invalid(
                shown,
                v,
                &format!("{shown} in body must not validate the schema (not)"),
            ));
        }
    }
}

fn conforms(v: &Value, node: &Node, path: &str) -> bool {
    let mut e = Vec::new();
    validate_value(v, node, path, &mut e);
    e.is_empty()
}

fn fmt_num(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        f.to_string()
    }
}

/// Whether `s` has string format `fmt`; formats Kubernetes does not check pass.
fn string_format_ok(fmt: &str, s: &str) -> bool {
    match fmt {
        "date-time" => api::time::parse_rfc3339(s).is_some(),
        "date" => {
            let b = s.as_bytes();
            b.len() == 10
                && b[4] == b'-'
                && b[7] == b'-'
                && s[..4].parse::<u32>().is_ok()
                && s[5..7].parse::<u32>().is_ok_and(|m| (1..=12).contains(&m))
                && s[8..].parse::<u32>().is_ok_and(|d| (1..=31).contains(&d))
        }
        "int32" | "int64" => false,
        "byte" => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        "uuid" => {
            let parts: Vec<&str> = s.split('-').collect();
            parts.len() == 5
                && parts
                    .iter()
                    .zip([8, 4, 4, 4, 12])
                    .all(|(p, n)| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit()))
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => s.split_once('/').is_some_and(|(ip, bits)| {
            ip.parse::<std::net::IpAddr>().is_ok() && bits.parse::<u8>().is_ok()
        }),
        "hostname" => {
            !s.is_empty()
                && s.len() <= 253
                && s.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                })
        }
        "email" => s
            .split_once('@')
            .is_some_and(|(a, b)| !a.is_empty() && b.contains('.')),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: Value) -> Schema {
        Schema::compile(&v, "spec.versions[0].schema.openAPIV3Schema").unwrap()
    }

    fn widget() -> Schema {
        schema(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                        "when": {"type": "string", "format": "date-time"},
                        "port": {"x-kubernetes-int-or-string": true},
                        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set", "maxItems": 3},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "note": {"type": "string", "nullable": true}
                    }
                },
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
            }
        }))
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn unknown_fields_are_pruned_and_reported_in_order() {
        let s = widget();
        let mut o = obj(json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"},
            "spec": {"size": 1, "bogus": 1, "extra": {"anything": {"goes": true}}, "labels": {"a": "b"}},
            "top": 1
        }));
        let pruned = s.prune(&mut o);
        assert_eq!(pruned, vec!["spec.bogus", "top"]);
        assert!(o["spec"]["extra"]["anything"]["goes"].as_bool().unwrap());
        assert_eq!(o["metadata"]["name"], "a");
    }

    #[test]
    fn nulls_of_non_nullable_fields_are_dropped_nullable_kept() {
        let s = widget();
        let mut o = obj(json!({"spec": {"size": 1, "color": null, "note": null}}));
        s.prune(&mut o);
        s.apply_defaults(&mut o);
        assert_eq!(o["spec"]["color"], "red");
        assert!(o["spec"]["note"].is_null());
        assert!(s.validate(&o).is_empty());
    }

    #[test]
    fn every_violation_is_listed_with_its_field() {
        let s = widget();
        let o = obj(json!({"spec": {
            "size": 0, "color": "green", "name": "ABCDEFG", "when": "yesterday",
            "port": 1.5, "tags": ["a", "a", "b", "c"], "labels": {"x": 1}
        }}));
        let errs = s.validate(&o);
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "spec.color",
                "spec.labels.x",
                "spec.name",
                "spec.name",
                "spec.port",
                "spec.size",
                "spec.tags",
                "spec.tags[1]",
                "spec.when"
            ],
            "{errs:?}"
        );
        let size = errs.iter().find(|e| e.field == "spec.size").unwrap();
        assert_eq!(
            size.body,
            "Invalid value: 0: spec.size in body should be greater than or equal to 1"
        );
        let color = errs.iter().find(|e| e.field == "spec.color").unwrap();
        assert_eq!(
            color.body,
            r#"Unsupported value: "green": supported values: "red", "blue""#
        );
        let missing = s.validate(&obj(json!({"spec": {}})));
        assert_eq!(missing[0].field, "spec.size");
        assert_eq!(missing[0].body, "Required value");
        let typed = s.validate(&obj(json!({"spec": {"size": "3"}})));
        assert_eq!(
            typed[0].body,
            r#"Invalid value: "3": spec.size in body must be of type integer: "string""#
        );
    }

    #[test]
    fn non_structural_schemas_are_refused_with_reasons() {
        let errs = Schema::compile(
            &json!({"type": "object", "properties": {
                "spec": {"properties": {"a": {"type": "string"}}},
                "list": {"type": "array"},
                "either": {"type": "object", "anyOf": [{"type": "string"}]},
                "bad": {"type": "string", "pattern": "(("}
            }}),
            "root",
        )
        .unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&"root.properties[spec].type"), "{fields:?}");
        assert!(
            fields.contains(&"root.properties[list].items"),
            "{fields:?}"
        );
        assert!(
            fields.contains(&"root.properties[either].anyOf[0].type"),
            "{fields:?}"
        );
        assert!(
            fields.contains(&"root.properties[bad].pattern"),
            "{fields:?}"
        );
        assert!(Schema::compile(&json!({"type": "string"}), "root").is_err());
    }

    #[test]
    fn list_types_give_server_side_apply_its_list_semantics() {
        use api::managed_fields::ListStrategies as _;
        use api::patch::strategic_merge_patch::ListStrategy;
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "properties": {
                              "name": {"type": "string"},
                              "hosts": {"type": "array", "x-kubernetes-list-type": "set",
                                        "items": {"type": "string"}}}}},
                "args": {"type": "array", "items": {"type": "string"}},
                "pairs": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["a", "b"],
                          "items": {"type": "object", "properties": {
                              "a": {"type": "string"}, "b": {"type": "string"}}}}
            }}}}),
        );
        assert_eq!(
            s.list_strategy(&["spec", "ports"]),
            Some(ListStrategy::MergeByKey("name"))
        );
        assert_eq!(
            s.list_strategy(&["spec", "ports", "hosts"]),
            Some(ListStrategy::MergePrimitives)
        );
        assert_eq!(
            s.list_strategy(&["spec", "args"]),
            Some(ListStrategy::Replace)
        );
        assert_eq!(
            s.list_strategy(&["spec", "pairs"]),
            Some(ListStrategy::MergeByKeys(&["a", "b"]))
        );
        assert_eq!(s.list_strategy(&["spec", "nothing"]), None);
    }

    #[test]
    fn defaults_fill_nested_objects_and_must_conform() {
        let s = schema(json!({"type": "object", "properties": {"spec": {
            "type": "object", "default": {},
            "properties": {"replicas": {"type": "integer", "default": 1}}
        }}}));
        let mut o = obj(json!({}));
        s.apply_defaults(&mut o);
        assert_eq!(o["spec"]["replicas"], 1);
        let bad = Schema::compile(
            &json!({"type": "object", "properties": {"n": {"type": "integer", "default": "x"}}}),
            "root",
        )
        .unwrap_err();
        assert_eq!(bad[0].field, "root.properties[n].default");
    }
}
