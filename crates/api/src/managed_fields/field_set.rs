//! Sets of field paths, the unit of ownership in server-side apply, and their `FieldsV1`
//! wire form.
//!
//! A path names one place in an object: struct and map fields by name, elements of
//! associative lists by their key fields, elements of set lists by their value, other list
//! elements by index. A [`FieldSet`] is a tree of such paths in which some nodes are
//! *members*. On the wire (`metadata.managedFields[*].fieldsV1`) each child is a key with a
//! prefix — `f:` field, `k:` key object, `v:` value, `i:` index — and a member node that
//! also has children carries the key `"."`; a member without children is `{}`.

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// One step of a path into an object.
///
/// `Key` and `Value` hold canonical JSON text (serde_json's maps are sorted, so equal values
/// have equal text), which keeps the type ordered and hashable.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A field of a struct or an entry of a map.
    Field(String),
    /// The element of an associative list whose key fields have these values, e.g.
    /// `{"name":"nginx"}`.
    Key(String),
    /// The element of a set list with this value, e.g. `"kubernetes"`.
    Value(String),
    /// The element at this index of a list that is neither.
    Index(usize),
}

impl PathElement {
    /// The `FieldsV1` key of this step (`f:name`, `k:{...}`, `v:...`, `i:0`).
    pub fn to_key(&self) -> String {
        match self {
            PathElement::Field(f) => format!("f:{f}"),
            PathElement::Key(k) => format!("k:{k}"),
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a `FieldsV1` key; `Key` and `Value` must hold JSON (an object for `Key`).
    pub fn parse(key: &str) -> Result<PathElement, String> {
        let (prefix, rest) = key
            .split_once(':')
            .ok_or_else(|| format!("invalid fieldsV1 key {key:?}: no prefix"))?;
        let json = |text: &str| {
            serde_json::from_str::<Value>(text)
                .map_err(|e| format!("invalid fieldsV1 key {key:?}: {e}"))
        };
        match prefix {
            "f" => Ok(PathElement::Field(rest.to_string())),
            "k" => match json(rest)? {
                v @ Value::Object(_) => Ok(PathElement::Key(v.to_string())),
                _ => Err(format!("invalid fieldsV1 key {key:?}: not an object")),
            },
            "v" => Ok(PathElement::Value(json(rest)?.to_string())),
            "i" => rest
                .parse()
                .map(PathElement::Index)
                .map_err(|_| format!("invalid fieldsV1 key {key:?}: bad index")),
            _ => Err(format!("invalid fieldsV1 key {key:?}: unknown prefix")),
        }
    }

    /// Whether this step names a list element by identity (its key or value), so that the
    /// member is the element's existence rather than a value that can differ.
    pub fn is_list_item(&self) -> bool {
        matches!(self, PathElement::Key(_) | PathElement::Value(_))
    }
}

/// A path from an object's root.
pub type Path = Vec<PathElement>;

/// Formats a path the way Kubernetes reports conflicts:
/// `.spec.containers[name="nginx"].image`, `.metadata.finalizers[="x"]`, `.spec.args[0]`.
pub struct PathDisplay<'a>(pub &'a [PathElement]);

impl fmt::Display for PathDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for pe in self.0 {
            match pe {
                PathElement::Field(name) => write!(f, ".{name}")?,
                PathElement::Key(k) => {
                    let map = serde_json::from_str::<Map<String, Value>>(k).unwrap_or_default();
                    let parts: Vec<String> = map.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    write!(f, "[{}]", parts.join(","))?;
                }
                PathElement::Value(v) => write!(f, "[={v}]")?,
                PathElement::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

/// A set of paths, stored as a tree. The root is never a member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    member: bool,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// True if no path is a member.
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    /// Adds `path` (a no-op for the empty path: the root is never a member).
    pub fn insert(&mut self, path: &[PathElement]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let child = self.children.entry(first.clone()).or_default();
        if rest.is_empty() {
            child.member = true;
        } else {
            child.insert(rest);
        }
    }

    /// Whether `path` is a member.
    pub fn contains(&self, path: &[PathElement]) -> bool {
        match path.split_first() {
            None => self.member,
            Some((first, rest)) => self.children.get(first).is_some_and(|c| c.contains(rest)),
        }
    }

    /// Whether `path` or any path below it is a member.
    pub fn contains_at_or_below(&self, path: &[PathElement]) -> bool {
        match path.split_first() {
            None => !self.is_empty(),
            Some((first, rest)) => self
                .children
                .get(first)
                .is_some_and(|c| c.contains_at_or_below(rest)),
        }
    }

    /// Removes `path` as a member (paths below it stay).
    pub fn remove(&mut self, path: &[PathElement]) {
        let Some((first, rest)) = path.split_first() else {
            self.member = false;
            return;
        };
        if let Some(child) = self.children.get_mut(first) {
            child.remove(rest);
            if child.is_empty() {
                self.children.remove(first);
            }
        }
    }

    /// Every member path, parents before their children.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        let mut cur = Vec::new();
        self.collect_paths(&mut cur, &mut out);
        out
    }

    fn collect_paths(&self, cur: &mut Path, out: &mut Vec<Path>) {
        if self.member {
            out.push(cur.clone());
        }
        for (pe, child) in &self.children {
            cur.push(pe.clone());
            child.collect_paths(cur, out);
            cur.pop();
        }
    }

    /// The members of `self` that are not members of `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (pe, child) in &self.children {
            let d = match other.children.get(pe) {
                Some(o) => child.difference(o),
                None => child.clone(),
            };
            if !d.is_empty() {
                out.children.insert(pe.clone(), d);
            }
        }
        out
    }

    /// The members of both.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (pe, child) in &self.children {
            if let Some(o) = other.children.get(pe) {
                let i = child.intersection(o);
                if !i.is_empty() {
                    out.children.insert(pe.clone(), i);
                }
            }
        }
        out
    }

    /// Adds every member of `other`.
    pub fn union_with(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (pe, child) in &other.children {
            self.children
                .entry(pe.clone())
                .or_default()
                .union_with(child);
        }
    }

    /// The `FieldsV1` JSON of this set.
    pub fn to_fields_v1(&self) -> Value {
        let mut map = Map::new();
        if self.member && !self.children.is_empty() {
            map.insert(".".into(), Value::Object(Map::new()));
        }
        for (pe, child) in &self.children {
            if !child.is_empty() {
                map.insert(pe.to_key(), child.to_fields_v1());
            }
        }
        Value::Object(map)
    }

    /// Parses `FieldsV1` JSON (the root's `"."`, if any, is ignored).
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let mut set = FieldSet::parse_node(v, 0)?;
        set.member = false;
        Ok(set)
    }

    fn parse_node(v: &Value, depth: usize) -> Result<FieldSet, String> {
        // Objects nest a few levels per field; anything this deep is not an object's shape.
        if depth > 256 {
            return Err("fieldsV1 is nested too deeply".into());
        }
        let Value::Object(map) = v else {
            return Err("fieldsV1 must be a JSON object of objects".into());
        };
        let mut set = FieldSet::default();
        for (k, child) in map {
            if k == "." {
                set.member = true;
                continue;
            }
            let pe = PathElement::parse(k)?;
            let mut c = FieldSet::parse_node(child, depth + 1)?;
            if c.children.is_empty() {
                c.member = true;
            }
            set.children.insert(pe, c);
        }
        Ok(set)
    }
}

/// The value at `path` in `v`, if there is one.
pub fn get<'a>(v: &'a Value, path: &[PathElement]) -> Option<&'a Value> {
    let mut cur = v;
    for pe in path {
        cur = match pe {
            PathElement::Field(f) => cur.as_object()?.get(f)?,
            PathElement::Index(i) => cur.as_array()?.get(*i)?,
            PathElement::Key(_) | PathElement::Value(_) => {
                let m = Matcher::new(pe)?;
                cur.as_array()?.iter().find(|item| m.matches(item))?
            }
        };
    }
    Some(cur)
}

/// Removes the value at `path` from `v` (a list element is taken out of its list). True if
/// something was removed.
pub fn remove(v: &mut Value, path: &[PathElement]) -> bool {
    let Some((last, parent)) = path.split_last() else {
        return false;
    };
    let mut cur = v;
    for pe in parent {
        let next = match pe {
            PathElement::Field(f) => cur.as_object_mut().and_then(|m| m.get_mut(f)),
            PathElement::Index(i) => cur.as_array_mut().and_then(|a| a.get_mut(*i)),
            PathElement::Key(_) | PathElement::Value(_) => {
                let Some(m) = Matcher::new(pe) else {
                    return false;
                };
                cur.as_array_mut()
                    .and_then(|a| a.iter_mut().find(|item| m.matches(item)))
            }
        };
        match next {
            Some(n) => cur = n,
            None => return false,
        }
    }
    match last {
        PathElement::Field(f) => cur.as_object_mut().is_some_and(|m| m.remove(f).is_some()),
        PathElement::Index(i) => match cur.as_array_mut() {
            Some(a) if *i < a.len() => {
                a.remove(*i);
                true
            }
            _ => false,
        },
        PathElement::Key(_) | PathElement::Value(_) => {
            let (Some(m), Some(a)) = (Matcher::new(last), cur.as_array_mut()) else {
                return false;
            };
            match a.iter().position(|item| m.matches(item)) {
                Some(pos) => {
                    a.remove(pos);
                    true
                }
                None => false,
            }
        }
    }
}

/// Finds a list element by a `Key` or `Value` step.
enum Matcher {
    Key(Map<String, Value>),
    Value(Value),
}

impl Matcher {
    fn new(pe: &PathElement) -> Option<Matcher> {
        match pe {
            PathElement::Key(k) => serde_json::from_str(k).ok().map(Matcher::Key),
            PathElement::Value(v) => serde_json::from_str(v).ok().map(Matcher::Value),
            _ => None,
        }
    }

    fn matches(&self, item: &Value) -> bool {
        match self {
            Matcher::Key(keys) => item
                .as_object()
                .is_some_and(|o| keys.iter().all(|(k, v)| o.get(k) == Some(v))),
            Matcher::Value(v) => item == v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(s: &str) -> PathElement {
        PathElement::Field(s.into())
    }

    #[test]
    fn fields_v1_round_trip_and_shape() {
        let mut s = FieldSet::new();
        let item = vec![
            f("spec"),
            f("containers"),
            PathElement::Key(json!({"name": "web"}).to_string()),
        ];
        s.insert(&item);
        let mut image = item.clone();
        image.push(f("image"));
        s.insert(&image);
        s.insert(&[f("metadata"), f("labels"), f("app")]);
        let v = s.to_fields_v1();
        assert_eq!(
            v,
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}}
            })
        );
        assert_eq!(FieldSet::from_fields_v1(&v).unwrap(), s);
        assert!(s.contains(&item));
        assert!(!s.contains(&[f("spec")]));
        assert!(s.contains_at_or_below(&[f("spec")]));
        assert_eq!(
            PathDisplay(&image).to_string(),
            ".spec.containers[name=\"web\"].image"
        );
    }

    #[test]
    fn set_algebra() {
        let mut a = FieldSet::new();
        a.insert(&[f("a")]);
        a.insert(&[f("b"), f("c")]);
        let mut b = FieldSet::new();
        b.insert(&[f("b"), f("c")]);
        b.insert(&[f("d")]);
        assert_eq!(a.difference(&b).paths(), vec![vec![f("a")]]);
        assert_eq!(a.intersection(&b).paths(), vec![vec![f("b"), f("c")]]);
        a.union_with(&b);
        assert_eq!(a.paths().len(), 3);
        a.remove(&[f("b"), f("c")]);
        assert_eq!(a.paths(), vec![vec![f("a")], vec![f("d")]]);
        assert!(!a.contains_at_or_below(&[f("b")]));
    }

    #[test]
    fn malformed_fields_v1_is_an_error() {
        for bad in [
            json!([]),
            json!({"x:y": {}}),
            json!({"k:[1]": {}}),
            json!({"i:-1": {}}),
            json!({"f:a": 1}),
            json!({"nokey": {}}),
        ] {
            assert!(FieldSet::from_fields_v1(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn get_and_remove_by_key_value_and_index() {
        let mut v = json!({
            "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b"}], "args": ["p", "q"]},
            "metadata": {"finalizers": ["f1", "f2"]}
        });
        let key = PathElement::Key(json!({"name": "a"}).to_string());
        assert_eq!(
            get(&v, &[f("spec"), f("containers"), key.clone(), f("image")]),
            Some(&json!("x"))
        );
        assert!(remove(
            &mut v,
            &[
                f("metadata"),
                f("finalizers"),
                PathElement::Value("\"f1\"".into())
            ]
        ));
        assert!(remove(&mut v, &[f("spec"), f("containers"), key]));
        assert!(remove(
            &mut v,
            &[f("spec"), f("args"), PathElement::Index(1)]
        ));
        assert!(!remove(
            &mut v,
            &[f("spec"), f("args"), PathElement::Index(5)]
        ));
        assert_eq!(
            v,
            json!({"spec": {"containers": [{"name": "b"}], "args": ["p"]}, "metadata": {"finalizers": ["f2"]}})
        );
    }
}
