//! Server-side field validation (`?fieldValidation=Strict|Warn|Ignore`), as kube-apiserver does
//! it: fields a kind does not have are refused (Strict: 400 naming every unknown field),
//! dropped and reported in `Warning` headers (Warn, also when the parameter is absent), or
//! dropped silently (Ignore). A typed kind never stores a field it does not have.
//!
//! How: the object is walked against its kind's typed schema, the one the OpenAPI documents
//! publish ([`crate::schema::openapi_types`]); a member the schema does not have at its place
//! is an unknown field. Inside free-form values (`fieldsV1`, raw extensions, maps) anything
//! goes. Explicit `null`s are not reported (they mean "unset"). Duplicate fields are not
//! detected (the JSON parser keeps the last one). Kinds without a typed schema are not checked.

use super::resources::RESOURCES;
use super::ResourceInfo;
use crate::schema::openapi_types::{resolve_ref, SchemaDialect, TypedSchemas};
use api::Status;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::OnceLock;

/// What the client asked for unknown fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and report each as a warning (also: the parameter was absent).
    #[default]
    Warn,
    /// Refuse the request if there are any.
    Strict,
}

impl FieldValidation {
    /// Parses the query parameter's value (empty means the default, Warn); 400 for anything
    /// else than the three names.
    pub fn parse(v: &str) -> Result<FieldValidation, Status> {
        match v {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(Status::bad_request(format!(
                "fieldValidation: Invalid value: {other:?}: must be one of Ignore, Warn or Strict"
            ))),
        }
    }
}

/// Checks `obj` of kind `info` as `mode` says: 400 BadRequest under Strict (the object is left
/// alone); under Warn and Ignore the unknown fields are removed, and under Warn the warnings
/// to send are returned.
pub fn check(
    info: &ResourceInfo,
    obj: &mut Map<String, Value>,
    mode: FieldValidation,
) -> Result<Vec<String>, Status> {
    let unknown = unknown_members(info, obj, mode != FieldValidation::Strict);
    if unknown.is_empty() || mode == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    let each: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field \"{p}\""))
        .collect();
    match mode {
        FieldValidation::Strict => Err(Status::bad_request(format!(
            "strict decoding error: {}",
            each.join(", ")
        ))),
        _ => Ok(each),
    }
}

/// The paths (`spec.containers[0].imagePullPolicyy`) of fields in `obj` that its kind does
/// not have, in key order. Empty if the kind has no typed schema here.
pub fn unknown_fields(info: &ResourceInfo, obj: &Value) -> Vec<String> {
    match obj {
        Value::Object(m) => unknown_members(info, &mut m.clone(), false),
        _ => Vec::new(),
    }
}

/// One schema of the walk, its reference already followed: what a member of an object, an
/// entry of a map or an item of an array is checked against. Compiled once from the
/// published OpenAPI schemas, so that the walk looks members up in a hash map instead of
/// following `$ref` strings through the definitions on every value.
struct Node {
    /// `additionalProperties` as a schema: the value is a map whose entries all have it.
    entries: Option<usize>,
    /// The declared members, when the object is closed (declares properties and does not
    /// preserve unknown fields); `None` for a free-form object, where anything goes.
    properties: Option<HashMap<Box<str>, usize, foldhash::fast::FixedState>>,
    /// The schema of an array's items.
    items: Option<usize>,
}

/// The compiled schemas of every served kind: the nodes, and each kind's root.
struct KindSchemas {
    nodes: Vec<Node>,
    roots: Vec<(&'static str, &'static str, usize)>,
}

fn kind_schemas() -> &'static KindSchemas {
    static SCHEMAS: OnceLock<KindSchemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let mut typed = TypedSchemas::new(SchemaDialect::OpenApi3);
        let names: Vec<_> = RESOURCES
            .iter()
            .filter_map(|r| Some((r.group, r.kind, typed.add_kind(r.group, r.version, r.kind)?)))
            .collect();
        let definitions = typed.into_definitions();
        let mut compiler = Compiler {
            definitions: &definitions,
            nodes: Vec::new(),
            seen: HashMap::default(),
        };
        let roots = names
            .iter()
            .filter_map(|(group, kind, name)| {
                let schema = definitions.get(name)?;
                Some((*group, *kind, compiler.node(schema)))
            })
            .collect();
        KindSchemas {
            nodes: compiler.nodes,
            roots,
        }
    })
}

/// Builds [`Node`]s from schemas, one per distinct schema after its reference is followed
/// (recursive kinds such as `JSONSchemaProps` refer back to themselves).
struct Compiler<'a> {
    definitions: &'a Map<String, Value>,
    nodes: Vec<Node>,
    seen: HashMap<*const Value, usize, foldhash::fast::FixedState>,
}

impl Compiler<'_> {
    fn node(&mut self, schema: &Value) -> usize {
        let definitions = self.definitions;
        let schema = resolve_ref(definitions, schema);
        if let Some(&id) = self.seen.get(&(schema as *const Value)) {
            return id;
        }
        let id = self.nodes.len();
        self.nodes.push(Node {
            entries: None,
            properties: None,
            items: None,
        });
        self.seen.insert(schema as *const Value, id);
        let entries = match schema.get("additionalProperties") {
            Some(e) if e.is_object() => Some(self.node(e)),
            _ => None,
        };
        let open = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        let properties = match schema.get("properties").and_then(Value::as_object) {
            Some(props) if !open => Some(
                props
                    .iter()
                    .map(|(k, p)| (k.as_str().into(), self.node(p)))
                    .collect(),
            ),
            _ => None,
        };
        let items = schema.get("items").map(|i| self.node(i));
        let node = &mut self.nodes[id];
        node.entries = entries;
        node.properties = properties;
        node.items = items;
        id
    }
}

/// Finds (and with `remove`, takes out) the members of `obj` its kind does not have.
fn unknown_members(info: &ResourceInfo, obj: &mut Map<String, Value>, remove: bool) -> Vec<String> {
    if let Some(custom) = info.custom {
        // A custom object is always pruned (Kubernetes stores nothing its schema does not
        // declare); under Strict the request is refused anyway when anything was.
        return match &custom.schema {
            Some(schema) => schema.prune(obj),
            None => Vec::new(),
        };
    }
    let schemas = kind_schemas();
    let Some(&(_, _, root)) = schemas
        .roots
        .iter()
        .find(|(group, kind, _)| *group == info.group && *kind == info.kind)
    else {
        return Vec::new();
    };
    let mut walk = MemberWalk {
        nodes: &schemas.nodes,
        path: String::new(),
        unknown: Vec::new(),
        remove,
    };
    walk.object(root, obj, true, 0);
    walk.unknown
}

/// Deepest nesting looked into; deeper values are left alone.
const MAX_DEPTH: usize = 64;

/// State of [`unknown_members`]: the path of the member being looked at, and the findings.
struct MemberWalk {
    nodes: &'static [Node],
    path: String,
    unknown: Vec<String>,
    remove: bool,
}

impl MemberWalk {
    fn object(&mut self, node: usize, obj: &mut Map<String, Value>, top: bool, depth: usize) {
        // A free-form object (no declared properties, or explicitly open).
        let Some(properties) = &self.nodes[node].properties else {
            return;
        };
        if depth > MAX_DEPTH {
            return;
        }
        let base = self.path.len();
        obj.retain(|key, v| {
            if v.is_null() || (top && (key == "apiVersion" || key == "kind")) {
                return true;
            }
            if base > 0 {
                self.path.push('.');
            }
            self.path.push_str(key);
            let keep = match properties.get(key.as_str()) {
                Some(&property) => {
                    self.value(property, v, depth + 1);
                    true
                }
                None => {
                    self.unknown.push(self.path.clone());
                    !self.remove
                }
            };
            self.path.truncate(base);
            keep
        });
    }

    fn value(&mut self, node: usize, v: &mut Value, depth: usize) {
        match v {
            Value::Object(m) => match self.nodes[node].entries {
                Some(entries) => {
                    let base = self.path.len();
                    for (key, item) in m.iter_mut() {
                        self.path.push('.');
                        self.path.push_str(key);
                        self.value(entries, item, depth + 1);
                        self.path.truncate(base);
                    }
                }
                None => self.object(node, m, false, depth),
            },
            Value::Array(items) => {
                let Some(item) = self.nodes[node].items else {
                    return;
                };
                let base = self.path.len();
                for (i, it) in items.iter_mut().enumerate() {
                    use std::fmt::Write as _;
                    let _ = write!(self.path, "[{i}]");
                    self.value(item, it, depth + 1);
                    self.path.truncate(base);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::find;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_named_with_their_paths() {
        let pods = find("", "v1", "pods").unwrap();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"any-key": "ok"}, "colour": "red", "uid": null},
            "spec": {"containers": [{"name": "c", "image": "i", "imagee": "typo"}],
                     "nodeName": "n1", "bogus": {"x": 1}}});
        let mut got = unknown_fields(pods, &pod);
        got.sort();
        assert_eq!(
            got,
            vec![
                "metadata.colour".to_string(),
                "spec.bogus".to_string(),
                "spec.containers[0].imagee".to_string(),
            ]
        );
        let good = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"cpu": "100m"}}, "ports": [{"containerPort": 80}]}]},
            "status": {"phase": "Pending"}});
        assert!(unknown_fields(pods, &good).is_empty());
        let cms = find("", "v1", "configmaps").unwrap();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"whatever": "goes"}, "dta": {}});
        assert_eq!(unknown_fields(cms, &cm), vec!["dta".to_string()]);
    }

    #[test]
    fn modes_refuse_warn_or_ignore() {
        let cms = find("", "v1", "configmaps").unwrap();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "extra": 1});
        let mut cm = cm.as_object().unwrap().clone();
        let err = check(cms, &mut cm, FieldValidation::Strict).unwrap_err();
        assert_eq!(err.code(), 400);
        assert!(
            err.message.contains("unknown field \"extra\""),
            "{}",
            err.message
        );
        assert!(cm.contains_key("extra"), "Strict leaves the object alone");
        let mut ignored = cm.clone();
        assert!(check(cms, &mut ignored, FieldValidation::Ignore)
            .unwrap()
            .is_empty());
        assert!(!ignored.contains_key("extra"), "Ignore drops it silently");
        assert_eq!(
            check(cms, &mut cm, FieldValidation::Warn).unwrap(),
            vec!["unknown field \"extra\"".to_string()]
        );
        assert!(!cm.contains_key("extra"), "Warn drops the unknown field");
        assert_eq!(cm["metadata"]["name"], "c");
        assert_eq!(FieldValidation::parse("").unwrap(), FieldValidation::Warn);
        assert_eq!(FieldValidation::default(), FieldValidation::Warn);
        assert_eq!(
            FieldValidation::parse("Strict").unwrap(),
            FieldValidation::Strict
        );
        assert_eq!(FieldValidation::parse("strict").unwrap_err().code(), 400);
    }

    #[test]
    fn warn_drops_only_the_unknown_members_at_any_depth() {
        let pods = find("", "v1", "pods").unwrap();
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "managedFields": [{"manager": "m",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:anything": {}}}}]},
            "spec": {
                "containers": [
                    {"name": "a", "image": "i"},
                    {"name": "b", "image": "i", "typo": 1,
                     "resources": {"limits": {"cpu": "1"}, "limitz": {}}},
                ],
                // `emptyDir` belongs to a struct Volume embeds inline.
                "volumes": [{"name": "v", "emptyDir": {}, "nope": true}],
                "overhead": {"cpu": "1"},
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "extra": "x"}]}})
        .as_object()
        .unwrap()
        .clone();
        let warnings = check(pods, &mut pod, FieldValidation::Warn).unwrap();
        assert_eq!(
            warnings,
            [
                "spec.containers[1].resources.limitz",
                "spec.containers[1].typo",
                "spec.volumes[0].nope",
                "status.conditions[0].extra",
            ]
            .map(|p| format!("unknown field \"{p}\""))
        );
        let expected = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "managedFields": [{"manager": "m",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:anything": {}}}}]},
            "spec": {
                "containers": [
                    {"name": "a", "image": "i"},
                    {"name": "b", "image": "i", "resources": {"limits": {"cpu": "1"}}},
                ],
                "volumes": [{"name": "v", "emptyDir": {}}],
                "overhead": {"cpu": "1"},
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready"}]}});
        assert_eq!(Value::Object(pod), expected);
    }
}
