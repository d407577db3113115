//! Field ownership (`metadata.managedFields`) and server-side apply.
//!
//! Every write records which *manager* (the `fieldManager` of the request, or a name taken
//! from its `User-Agent`) set which fields, as kube-apiserver does:
//!
//! - an ordinary write (create, update, patch) is an `Update` operation: the fields it
//!   added or changed move to the writer's `Update` entry (taken from whoever owned them),
//!   fields it removed leave every entry ([`track_update`]);
//! - a server-side apply (`PATCH` with `application/apply-patch+yaml`) is an `Apply`
//!   operation: the applier's entry becomes exactly the fields of its configuration; a
//!   field another manager owns with a different value is a conflict unless forced; fields
//!   the applier owned before and no longer sets are removed from the object when no one
//!   else owns them ([`apply::apply`]).
//!
//! Which lists are associative (elements identified by key fields, e.g. containers by
//! `name`) or sets comes from the strategic-merge-patch table of the built-in kinds
//! ([`crate::patch::strategic_merge_patch::list_strategy`]); every other list is atomic,
//! owned and replaced as a whole. Server-owned metadata (`uid`, `resourceVersion`, ...),
//! `apiVersion` and `kind` are never tracked, nor is `status` on the main resource, nor
//! anything but `status` on the `status` subresource.

pub mod apply;
pub mod field_set;

use crate::patch::strategic_merge_patch::{canonical, list_strategy, ListStrategy};
use crate::patch::PatchKindHint;
use field_set::{FieldSet, Path, PathElement};
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};

/// The longest `fieldManager` kube-apiserver accepts.
pub const MAX_MANAGER_LEN: usize = 128;

/// What kind of write recorded an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A server-side apply.
    Apply,
    /// Any other write.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One element of `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedFieldsEntry {
    /// Who wrote the fields.
    pub manager: String,
    /// How.
    pub operation: Operation,
    /// The API version the fields were written in, e.g. `apps/v1`.
    pub api_version: String,
    /// When the entry last changed (RFC 3339), if known.
    pub time: Option<String>,
    /// `status` for writes to the status subresource.
    pub subresource: Option<String>,
    /// The fields owned.
    pub fields: FieldSet,
}

impl ManagedFieldsEntry {
    fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("apiVersion".into(), json!(self.api_version));
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.fields.to_fields_v1());
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation.as_str()));
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), json!(s));
        }
        if let Some(t) = &self.time {
            m.insert("time".into(), json!(t));
        }
        Value::Object(m)
    }

    fn from_value(v: &Value) -> Result<ManagedFieldsEntry, String> {
        let o = v
            .as_object()
            .ok_or("metadata.managedFields: each entry must be an object")?;
        let s = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
        let operation = match o.get("operation").and_then(Value::as_str) {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            other => {
                return Err(format!(
                    "metadata.managedFields: operation must be Apply or Update, got {other:?}"
                ))
            }
        };
        match o.get("fieldsType").and_then(Value::as_str) {
            Some("FieldsV1") | None => {}
            Some(t) => return Err(format!("metadata.managedFields: unknown fieldsType {t:?}")),
        }
        let fields = match o.get("fieldsV1") {
            Some(f) => {
                FieldSet::from_fields_v1(f).map_err(|e| format!("metadata.managedFields: {e}"))?
            }
            None => FieldSet::new(),
        };
        Ok(ManagedFieldsEntry {
            manager: s("manager").unwrap_or_default(),
            operation,
            api_version: s("apiVersion").unwrap_or_default(),
            time: s("time"),
            subresource: s("subresource").filter(|s| !s.is_empty()),
            fields,
        })
    }
}

/// List semantics that come with the object rather than from the kinds' table: a custom
/// resource's schema (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`).
pub trait ListStrategies: Sync + std::fmt::Debug {
    /// The strategy of the list at `path` (field names from the object's root, list
    /// elements left out), or `None` to fall back to the kinds' table.
    fn list_strategy(&self, path: &[&str]) -> Option<ListStrategy>;
}

/// Who is writing, and where.
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    /// The field manager.
    pub manager: &'a str,
    /// The API version of the endpoint written to, e.g. `v1`.
    pub api_version: &'a str,
    /// The kind being written (selects the list semantics).
    pub kind: PatchKindHint<'a>,
    /// List semantics of this object's own (a custom resource's schema), consulted before
    /// the kinds' table.
    pub lists: Option<&'a dyn ListStrategies>,
    /// True for the `status` subresource.
    pub status_only: bool,
    /// Whether the kind has a `status` that the main resource ignores.
    pub has_status: bool,
    /// The time to record (RFC 3339).
    pub now: &'a str,
}

impl Writer<'_> {
    fn subresource(&self) -> Option<String> {
        self.status_only.then(|| "status".to_string())
    }

    /// Whether the field `key` under the field names `names` is outside what this writer
    /// tracks.
    fn ignored<S: AsRef<str>>(&self, names: &[S], key: &str) -> bool {
        match names {
            [] if self.status_only => key != "status",
            [] => matches!(key, "apiVersion" | "kind") || (key == "status" && self.has_status),
            [m] if m.as_ref() == "metadata" => matches!(
                key,
                "name"
                    | "namespace"
                    | "generateName"
                    | "uid"
                    | "resourceVersion"
                    | "generation"
                    | "creationTimestamp"
                    | "deletionTimestamp"
                    | "deletionGracePeriodSeconds"
                    | "managedFields"
                    | "selfLink"
            ),
            _ => false,
        }
    }

    /// How the list at `names` behaves, given its elements.
    fn list_kind<S: AsRef<str>>(&self, names: &[S], items: &[Value]) -> ListKind {
        let own = self.lists.and_then(|l| {
            let path: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
            l.list_strategy(&path)
        });
        match own.unwrap_or_else(|| list_strategy(self.kind, names)) {
            ListStrategy::MergeByKey(key) => keyed_or_atomic(Keys::One(key), items),
            ListStrategy::MergeByKeys(keys) => keyed_or_atomic(Keys::Many(keys), items),
            ListStrategy::MergePrimitives => {
                let mut seen = std::collections::HashSet::new();
                let set = items
                    .iter()
                    .all(|i| !i.is_object() && !i.is_array() && seen.insert(i.to_string()));
                if set {
                    ListKind::Set
                } else {
                    ListKind::Atomic
                }
            }
            ListStrategy::Replace => ListKind::Atomic,
        }
    }

    /// The fields set in `obj`: every scalar, empty map and atomic list, plus each element
    /// of an associative or set list (the element itself and its fields). `null`s count as
    /// unset.
    pub fn fields_of(&self, obj: &Map<String, Value>) -> FieldSet {
        let mut out = FieldSet::new();
        self.collect_object(obj, &mut Vec::new(), &mut Vec::new(), &mut out);
        out
    }

    fn collect_object(
        &self,
        obj: &Map<String, Value>,
        names: &mut Vec<String>,
        path: &mut Path,
        out: &mut FieldSet,
    ) {
        for (k, v) in obj {
            if v.is_null() || self.ignored(names, k) {
                continue;
            }
            names.push(k.clone());
            path.push(PathElement::Field(k.clone()));
            self.collect_value(v, names, path, out);
            path.pop();
            names.pop();
        }
    }

    fn collect_value(
        &self,
        v: &Value,
        names: &mut Vec<String>,
        path: &mut Path,
        out: &mut FieldSet,
    ) {
        match v {
            Value::Object(m) if !m.is_empty() => self.collect_object(m, names, path, out),
            Value::Array(items) if !items.is_empty() => match self.list_kind(names, items) {
                ListKind::Keyed(key) => {
                    for item in items {
                        let Some(o) = item.as_object() else { continue };
                        path.push(key_element(key, o));
                        out.insert(path);
                        self.collect_object(o, names, path, out);
                        path.pop();
                    }
                }
                ListKind::Set => {
                    for item in items {
                        path.push(PathElement::Value(item.to_string()));
                        out.insert(path);
                        path.pop();
                    }
                }
                ListKind::Atomic => out.insert(path),
            },
            _ => out.insert(path),
        }
    }
}

impl Writer<'_> {
    /// `self.fields_of(obj).to_fields_v1()`, built directly (the create path's fast way).
    pub fn fields_v1_of(&self, obj: &Map<String, Value>) -> Value {
        let mut names = Vec::new();
        Value::Object(self.fields_v1_object(obj, &mut names))
    }

    fn fields_v1_object<'o>(
        &self,
        obj: &'o Map<String, Value>,
        names: &mut Vec<&'o str>,
    ) -> Map<String, Value> {
        let mut out = Map::new();
        for (k, v) in obj {
            if v.is_null() || self.ignored(names, k) {
                continue;
            }
            names.push(k);
            if let Some(child) = self.fields_v1_value(v, names) {
                out.insert(format!("f:{k}"), child);
            }
            names.pop();
        }
        out
    }

    /// The `FieldsV1` node of one field's value; `None` if it holds no member.
    fn fields_v1_value<'o>(&self, v: &'o Value, names: &mut Vec<&'o str>) -> Option<Value> {
        let leaf = || Some(Value::Object(Map::new()));
        match v {
            Value::Object(m) if !m.is_empty() => {
                let inner = self.fields_v1_object(m, names);
                (!inner.is_empty()).then_some(Value::Object(inner))
            }
            Value::Array(items) if !items.is_empty() => match self.list_kind(names, items) {
                ListKind::Keyed(key) => {
                    let mut out = Map::new();
                    for item in items {
                        let Some(o) = item.as_object() else { continue };
                        let mut node = self.fields_v1_object(o, names);
                        if !node.is_empty() {
                            node.insert(".".into(), Value::Object(Map::new()));
                        }
                        out.insert(key_element(key, o).to_key(), Value::Object(node));
                    }
                    Some(Value::Object(out))
                }
                ListKind::Set => Some(Value::Object(
                    items
                        .iter()
                        .map(|i| (format!("v:{i}"), Value::Object(Map::new())))
                        .collect(),
                )),
                ListKind::Atomic => leaf(),
            },
            _ => leaf(),
        }
    }
}

impl Writer<'_> {
    /// What an update from `old` to `new` did, as two sets: the fields of `new` that `old`
    /// did not have or had with another value (list elements: that it did not have), and
    /// the fields of `old` that `new` no longer has. One walk over both objects.
    pub fn diff(&self, old: &Map<String, Value>, new: &Map<String, Value>) -> (FieldSet, FieldSet) {
        let mut changed = FieldSet::new();
        let mut removed = FieldSet::new();
        let mut d = Diff {
            writer: self,
            names: Vec::new(),
            path: Vec::new(),
            changed: &mut changed,
            removed: &mut removed,
        };
        d.objects(old, new);
        (changed, removed)
    }
}

/// The state of one [`Writer::diff`] walk.
struct Diff<'w, 'a, 'o> {
    writer: &'w Writer<'a>,
    names: Vec<String>,
    path: Path,
    changed: &'o mut FieldSet,
    removed: &'o mut FieldSet,
}

impl Diff<'_, '_, '_> {
    fn objects(&mut self, old: &Map<String, Value>, new: &Map<String, Value>) {
        let present = |m: &Map<String, Value>, k: &str| m.get(k).filter(|v| !v.is_null()).is_some();
        for (k, nv) in new {
            if nv.is_null() || self.writer.ignored(&self.names, k) {
                continue;
            }
            let ov = old.get(k).filter(|v| !v.is_null());
            if ov == Some(nv) {
                // Equal values hold equal fields: nothing to walk (most of an object, on
                // most writes).
                continue;
            }
            self.enter(k);
            match ov {
                Some(ov) => self.values(ov, nv),
                None => {
                    self.writer
                        .collect_value(nv, &mut self.names, &mut self.path, self.changed)
                }
            }
            self.leave();
        }
        for (k, ov) in old {
            if ov.is_null() || present(new, k) || self.writer.ignored(&self.names, k) {
                continue;
            }
            self.enter(k);
            self.writer
                .collect_value(ov, &mut self.names, &mut self.path, self.removed);
            self.leave();
        }
    }

    fn enter(&mut self, k: &str) {
        self.names.push(k.to_string());
        self.path.push(PathElement::Field(k.to_string()));
    }

    fn leave(&mut self) {
        self.names.pop();
        self.path.pop();
    }

    /// Both present at the current path.
    fn values(&mut self, old: &Value, new: &Value) {
        match (old, new) {
            (Value::Object(o), Value::Object(n)) if !o.is_empty() && !n.is_empty() => {
                self.objects(o, n)
            }
            (Value::Array(o), Value::Array(n)) if !o.is_empty() && !n.is_empty() => {
                let (ko, kn) = (
                    self.writer.list_kind(&self.names, o),
                    self.writer.list_kind(&self.names, n),
                );
                match (ko, kn) {
                    (ListKind::Keyed(a), ListKind::Keyed(b)) if a == b => self.keyed(a, o, n),
                    (ListKind::Set, ListKind::Set) => {
                        // Identified as strategic merge identifies them, through sets: long
                        // lists must not cost quadratic time.
                        let os: HashSet<String> = o.iter().map(canonical).collect();
                        let ns: HashSet<String> = n.iter().map(canonical).collect();
                        for v in n.iter().filter(|v| !os.contains(&canonical(v))) {
                            self.path.push(PathElement::Value(v.to_string()));
                            self.changed.insert(&self.path);
                            self.path.pop();
                        }
                        for v in o.iter().filter(|v| !ns.contains(&canonical(v))) {
                            self.path.push(PathElement::Value(v.to_string()));
                            self.removed.insert(&self.path);
                            self.path.pop();
                        }
                    }
                    (ListKind::Atomic, ListKind::Atomic) => {
                        if o != n {
                            self.changed.insert(&self.path);
                        }
                    }
                    _ => self.replaced(old, new),
                }
            }
            _ if old == new => {}
            _ => self.replaced(old, new),
        }
    }

    fn keyed(&mut self, key: Keys, old: &[Value], new: &[Value]) {
        let old_by_id = first_by_id(key, old);
        let new_ids: HashSet<Option<String>> = new.iter().map(|n| list_item_id(key, n)).collect();
        for n in new {
            let Some(no) = n.as_object() else { continue };
            self.path.push(key_element(key, no));
            match old_by_id
                .get(&list_item_id(key, n))
                .and_then(|o| o.as_object())
            {
                Some(oo) => self.objects(oo, no),
                None => {
                    self.changed.insert(&self.path);
                    self.writer
                        .collect_object(no, &mut self.names, &mut self.path, self.changed);
                }
            }
            self.path.pop();
        }
        for o in old {
            let Some(oo) = o.as_object() else { continue };
            if new_ids.contains(&list_item_id(key, o)) {
                continue;
            }
            self.path.push(key_element(key, oo));
            self.removed.insert(&self.path);
            self.writer
                .collect_object(oo, &mut self.names, &mut self.path, self.removed);
            self.path.pop();
        }
    }

    /// A value whose shape changed: its old fields minus its new ones are removed, its new
    /// fields that were not there or differ are changed.
    fn replaced(&mut self, old: &Value, new: &Value) {
        let mut of = FieldSet::new();
        let mut nf = FieldSet::new();
        let mut path = self.path.clone();
        self.writer
            .collect_value(old, &mut self.names, &mut path, &mut of);
        self.writer
            .collect_value(new, &mut self.names, &mut path, &mut nf);
        let depth = self.path.len();
        for p in nf.paths() {
            let rel = &p[depth..];
            let item = p.last().is_some_and(PathElement::is_list_item);
            if !of.contains(&p) || (!item && field_set::get(old, rel) != field_set::get(new, rel)) {
                self.changed.insert(&p);
            }
        }
        for p in of.difference(&nf).paths() {
            self.removed.insert(&p);
        }
    }
}

/// The fields that identify the elements of an associative list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keys {
    /// One field (`name`, the common case).
    One(&'static str),
    /// Several fields, identifying together (`containerPort` and `protocol`).
    Many(&'static [&'static str]),
}

/// `Keyed` when every element has every key (not null) and no two share their values;
/// otherwise the list cannot be tracked element by element and is one value.
fn keyed_or_atomic(keys: Keys, items: &[Value]) -> ListKind {
    let mut seen = std::collections::HashSet::new();
    let present = |i: &Value, k: &str| i.get(k).is_some_and(|v| !v.is_null());
    let keyed = items.iter().all(|i| {
        let all = match keys {
            Keys::One(k) => present(i, k),
            Keys::Many(ks) => ks.iter().all(|k| present(i, k)),
        };
        all && list_item_id(keys, i).is_some_and(|id| seen.insert(id))
    });
    if keyed {
        ListKind::Keyed(keys)
    } else {
        ListKind::Atomic
    }
}

/// How a list's elements are identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListKind {
    /// By the values of these fields of each (map) element.
    Keyed(Keys),
    /// By their (primitive) value.
    Set,
    /// Not at all: the list is one value.
    Atomic,
}

fn key_element(keys: Keys, item: &Map<String, Value>) -> PathElement {
    let mut m = Map::new();
    let mut put = |key: &str| {
        m.insert(
            key.to_string(),
            item.get(key).cloned().unwrap_or(Value::Null),
        );
    };
    match keys {
        Keys::One(k) => put(k),
        Keys::Many(ks) => ks.iter().for_each(|k| put(k)),
    }
    PathElement::Key(Value::Object(m).to_string())
}

/// The entries of an object's `metadata.managedFields`. Entries that do not decode are
/// dropped, as kube-apiserver resets managed fields it cannot read.
pub fn entries_of(obj: &Map<String, Value>) -> Vec<ManagedFieldsEntry> {
    managed_fields_value(obj)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| ManagedFieldsEntry::from_value(e).ok())
                .collect()
        })
        .unwrap_or_default()
}

fn managed_fields_value(obj: &Map<String, Value>) -> Option<&Value> {
    obj.get("metadata")?
        .as_object()?
        .get("managedFields")
        .filter(|v| !v.is_null())
}

/// Writes `entries` (without empty ones) into `obj`'s metadata; none removes the field.
pub fn set_entries(obj: &mut Map<String, Value>, entries: Vec<ManagedFieldsEntry>) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(ManagedFieldsEntry::to_value)
        .collect();
    let Some(meta) = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
    else {
        return;
    };
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// Checks managed fields a client wrote itself: a list of well-formed entries.
pub fn validate_entries(v: &Value) -> Result<(), String> {
    let list = v
        .as_array()
        .ok_or("metadata.managedFields must be a list")?;
    for e in list {
        ManagedFieldsEntry::from_value(e)?;
    }
    Ok(())
}

/// Records an ordinary write of `new` over `old` (`None` for a create) by `writer`.
///
/// Fields added or changed move to the writer's `Update` entry (for its API version and
/// subresource) from every other entry; fields removed leave every entry; an unchanged
/// object keeps its entries as they were. As in kube-apiserver, a client may set
/// `managedFields` itself: an empty list counts as not set (clients unaware of the field
/// send that), a list of one empty entry strips all tracking, and any other list that
/// differs from `old`'s is kept as given, provided it is well-formed.
///
/// # Errors
/// A message for a 400 when client-written `managedFields` are malformed.
pub fn track_update(
    old: Option<&Map<String, Value>>,
    new: &mut Map<String, Value>,
    writer: &Writer<'_>,
) -> Result<(), String> {
    let old_mf = old.and_then(managed_fields_value);
    match managed_fields_value(new) {
        // An empty list is what clients unaware of the field send: it changes nothing.
        Some(Value::Array(a)) if a.is_empty() => {}
        // A single empty entry strips tracking altogether.
        Some(Value::Array(a)) if a.len() == 1 && a[0].as_object().is_some_and(Map::is_empty) => {
            set_entries(new, Vec::new());
            return Ok(());
        }
        Some(given) if Some(given) != old_mf => {
            validate_entries(given)?;
            return Ok(());
        }
        _ => {}
    }
    if old.is_none() {
        // Everything a new object holds is its creator's: no diff, no other entries.
        let fields = writer.fields_v1_of(new);
        let entry = ManagedFieldsEntry {
            manager: writer.manager.to_string(),
            operation: Operation::Update,
            api_version: writer.api_version.to_string(),
            time: Some(writer.now.to_string()),
            subresource: writer.subresource(),
            fields: FieldSet::new(),
        };
        let empty = fields.as_object().is_none_or(Map::is_empty);
        let mut value = entry.to_value();
        if let Some(m) = value.as_object_mut() {
            m.insert("fieldsV1".into(), fields);
        }
        if let Some(meta) = new
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
        {
            if empty {
                meta.remove("managedFields");
            } else {
                meta.insert("managedFields".into(), Value::Array(vec![value]));
            }
        }
        return Ok(());
    }
    let mut entries = old.map(entries_of).unwrap_or_default();
    let (changed, removed) = match old {
        None => (writer.fields_of(new), FieldSet::new()),
        Some(old) => writer.diff(old, new),
    };
    if changed.is_empty() && removed.is_empty() {
        match old_mf {
            Some(mf) => {
                if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert("managedFields".into(), mf.clone());
                }
            }
            None => set_entries(new, Vec::new()),
        }
        return Ok(());
    }
    for e in &mut entries {
        e.fields = e.fields.difference(&changed).difference(&removed);
    }
    let subresource = writer.subresource();
    let mine = entries.iter().position(|e| {
        e.manager == writer.manager
            && e.operation == Operation::Update
            && e.api_version == writer.api_version
            && e.subresource == subresource
    });
    let entry = match mine {
        Some(i) => &mut entries[i],
        None => {
            entries.push(ManagedFieldsEntry {
                manager: writer.manager.to_string(),
                operation: Operation::Update,
                api_version: writer.api_version.to_string(),
                time: None,
                subresource,
                fields: FieldSet::new(),
            });
            let last = entries.len() - 1;
            &mut entries[last]
        }
    };
    entry.fields.union_with(&changed);
    entry.time = Some(writer.now.to_string());
    set_entries(new, entries);
    Ok(())
}

/// Makes a write that changes nothing but the times of `metadata.managedFields` entries
/// (say, a re-apply of the same configuration a second later) a no-op: if `new` equals
/// `old` once the entries' `time`s (and their order) are disregarded, `new` gets `old`'s
/// entries back, so that `new == old` afterwards and the caller skips the write, as
/// kube-apiserver does. Any other difference leaves `new` as it was.
pub fn keep_times_if_unchanged(old: &Map<String, Value>, new: &mut Map<String, Value>) {
    let (Some(Value::Array(o)), Some(Value::Array(n))) =
        (managed_fields_value(old), managed_fields_value(new))
    else {
        return;
    };
    if o == n || o.len() != n.len() {
        return;
    }
    let without_time = |e: &Value| match e {
        Value::Object(m) => {
            let mut m = m.clone();
            m.remove("time");
            Value::Object(m)
        }
        other => other.clone(),
    };
    let old_entries: Vec<Value> = o.iter().map(without_time).collect();
    if !n.iter().all(|e| old_entries.contains(&without_time(e))) {
        return;
    }
    let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let written = meta.insert("managedFields".into(), Value::Array(o.clone()));
    if new != old {
        if let (Some(meta), Some(written)) = (
            new.get_mut("metadata").and_then(Value::as_object_mut),
            written,
        ) {
            meta.insert("managedFields".into(), written);
        }
    }
}

/// The identity of an item of a list keyed by `keys`: its key's value in [`canonical`] form
/// (`None` when it has none), as strategic merge identifies it; with several keys, their
/// values together (`None` when one is missing).
pub(crate) fn list_item_id(keys: Keys, item: &Value) -> Option<String> {
    match keys {
        Keys::One(key) => item.get(key).map(canonical),
        Keys::Many(ks) => {
            let values: Option<Vec<Value>> = ks.iter().map(|k| item.get(*k).cloned()).collect();
            values.map(|v| canonical(&Value::Array(v)))
        }
    }
}

/// Each identity's first item in `items` (see [`list_item_id`]).
pub(crate) fn first_by_id(key: Keys, items: &[Value]) -> HashMap<Option<String>, &Value> {
    let mut out = HashMap::with_capacity(items.len());
    for item in items {
        out.entry(list_item_id(key, item)).or_insert(item);
    }
    out
}

/// The manager name kube-apiserver derives from a `User-Agent` when a request names none:
/// the part before the first `/` (`kubectl/v1.32.0 (linux/amd64)` → `kubectl`), cut to
/// [`MAX_MANAGER_LEN`]; `unknown` without one.
pub fn manager_from_user_agent(user_agent: Option<&str>) -> String {
    let name = user_agent
        .and_then(|ua| ua.split('/').next())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown");
    name.chars().take(MAX_MANAGER_LEN).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Deployment writer for `manager` (shared with `apply`'s tests).
    pub(super) fn writer<'a>(manager: &'a str) -> Writer<'a> {
        Writer {
            manager,
            api_version: "apps/v1",
            kind: PatchKindHint::new("apps", "Deployment"),
            lists: None,
            status_only: false,
            has_status: true,
            now: "2026-11-22T00:00:00Z",
        }
    }

    /// The map of a JSON object literal (shared with `apply`'s tests).
    pub(super) fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn deploy(replicas: i64, image: &str) -> Map<String, Value> {
        obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "uid": "u", "labels": {"app": "web"}},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "web", "image": image}
            ]}}},
            "status": {"replicas": 0}
        }))
    }

    fn managers(o: &Map<String, Value>) -> Vec<(String, Vec<String>)> {
        entries_of(o)
            .into_iter()
            .map(|e| {
                let paths = e
                    .fields
                    .paths()
                    .iter()
                    .map(|p| field_set::PathDisplay(p).to_string())
                    .collect();
                (e.manager, paths)
            })
            .collect()
    }

    #[test]
    fn list_items_are_identified_as_strategic_merge_identifies_them() {
        // The same port written as 80.0 (as a strategic merge patch may carry it) is the same
        // item, not a removed one and a new one.
        let with_port = |port: Value| {
            let mut d = deploy(1, "a");
            d["spec"]["template"]["spec"]["containers"][0]["ports"] =
                json!([{"containerPort": port, "protocol": "TCP"}]);
            d
        };
        let mut old = with_port(json!(80));
        track_update(None, &mut old, &writer("a")).unwrap();
        let mut new = with_port(json!(80.0));
        new.insert("metadata".into(), old["metadata"].clone());
        track_update(Some(&old), &mut new, &writer("b")).unwrap();
        let all = managers(&new);
        let item = ".spec.template.spec.containers[name=\"web\"].ports[containerPort=80]";
        let (_, a) = all
            .iter()
            .find(|(m, _)| m == "a")
            .expect("a still owns fields");
        assert!(
            a.iter().any(|p| p == item) && a.iter().any(|p| p == &format!("{item}.protocol")),
            "a keeps the port item: {all:?}"
        );
        let b: Vec<&String> = all
            .iter()
            .filter(|(m, _)| m == "b")
            .flat_map(|(_, p)| p)
            .collect();
        assert!(
            b.iter()
                .all(|p| !p.ends_with(']') && !p.ends_with(".protocol")),
            "b took over no item, only the rewritten number: {all:?}"
        );
    }

    #[test]
    fn fields_of_skips_server_fields_status_and_nulls() {
        let mut d = deploy(1, "a");
        d["spec"]["paused"] = Value::Null;
        let paths: Vec<String> = writer("m")
            .fields_of(&d)
            .paths()
            .iter()
            .map(|p| field_set::PathDisplay(p).to_string())
            .collect();
        assert_eq!(
            paths,
            vec![
                ".metadata.labels.app",
                ".spec.replicas",
                ".spec.template.spec.containers[name=\"web\"]",
                ".spec.template.spec.containers[name=\"web\"].image",
                ".spec.template.spec.containers[name=\"web\"].name",
            ]
        );
    }

    #[test]
    fn updates_take_changed_fields_and_drop_removed_ones() {
        let mut created = deploy(1, "a");
        track_update(None, &mut created, &writer("creator")).unwrap();
        assert_eq!(managers(&created)[0].1.len(), 5);

        let mut scaled = created.clone();
        scaled["spec"]["replicas"] = json!(3);
        track_update(Some(&created), &mut scaled, &writer("scaler")).unwrap();
        let m = managers(&scaled);
        assert_eq!(m.len(), 2);
        assert!(!m[0].1.contains(&".spec.replicas".to_string()));
        assert_eq!(
            m[1],
            ("scaler".to_string(), vec![".spec.replicas".to_string()])
        );

        // Removing the labels takes them from everyone; an unchanged write changes nothing.
        let mut unlabelled = scaled.clone();
        unlabelled["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("labels");
        track_update(Some(&scaled), &mut unlabelled, &writer("editor")).unwrap();
        assert!(managers(&unlabelled)
            .iter()
            .all(|(_, p)| !p.contains(&".metadata.labels.app".to_string())));
        assert_eq!(
            managers(&unlabelled).len(),
            2,
            "the editor changed nothing it keeps"
        );
        let mut same = unlabelled.clone();
        track_update(Some(&unlabelled), &mut same, &writer("other")).unwrap();
        assert_eq!(same, unlabelled);
    }

    #[test]
    fn client_written_managed_fields_are_kept_or_refused() {
        let mut created = deploy(1, "a");
        track_update(None, &mut created, &writer("creator")).unwrap();
        let mut reset = created.clone();
        reset["metadata"]["managedFields"] =
            json!([{"manager": "x", "operation": "Update", "fieldsV1": {"f:spec": {}}}]);
        track_update(Some(&created), &mut reset, &writer("w")).unwrap();
        assert_eq!(managers(&reset)[0].0, "x");
        let mut bad = created.clone();
        bad["metadata"]["managedFields"] = json!([{"operation": "Delete"}]);
        assert!(track_update(Some(&created), &mut bad, &writer("w")).is_err());
        let mut cleared = created.clone();
        cleared["metadata"]["managedFields"] = json!([]);
        cleared["spec"]["replicas"] = json!(2);
        track_update(Some(&created), &mut cleared, &writer("w")).unwrap();
        assert_eq!(
            managers(&cleared).len(),
            2,
            "[] is not a reset: {cleared:?}"
        );
        let mut stripped = created.clone();
        stripped["metadata"]["managedFields"] = json!([{}]);
        track_update(Some(&created), &mut stripped, &writer("w")).unwrap();
        assert!(stripped["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn create_fast_path_matches_the_field_set() {
        let mut d = deploy(1, "a");
        d["metadata"]["finalizers"] = json!(["x", "y"]);
        d["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
        let w = writer("c");
        assert_eq!(w.fields_v1_of(&d), w.fields_of(&d).to_fields_v1());
    }

    /// The definition `diff` implements, on whole field sets.
    fn diff_by_sets(
        w: &Writer<'_>,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
    ) -> (FieldSet, FieldSet) {
        let (of, nf) = (w.fields_of(old), w.fields_of(new));
        let (ov, nv) = (Value::Object(old.clone()), Value::Object(new.clone()));
        let mut changed = nf.difference(&of);
        for p in nf.intersection(&of).paths() {
            let item = p.last().is_some_and(PathElement::is_list_item);
            if !item && field_set::get(&ov, &p) != field_set::get(&nv, &p) {
                changed.insert(&p);
            }
        }
        (changed, of.difference(&nf))
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            (0i64..3).prop_map(|n| json!(n)),
            "[ab]{0,1}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 32, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(
                    "name|spec|containers|image|finalizers|metadata",
                    inner,
                    0..3
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn diff_walk_agrees_with_the_set_definition(old in json_value(), new in json_value()) {
            let (Value::Object(old), Value::Object(new)) = (old, new) else {
                return Ok(());
            };
            // Pods: `spec.containers` is keyed by name and `metadata.finalizers` is a set,
            // both shallow enough for the generator to reach.
            let w = Writer { kind: PatchKindHint::new("", "Pod"), ..writer("w") };
            proptest::prop_assert_eq!(w.diff(&old, &new), diff_by_sets(&w, &old, &new));
        }
    }

    #[test]
    fn an_unchanged_value_records_no_change_even_with_repeated_keys() {
        // Two containers named alike: each is compared with the first of its name, so a
        // walk into the unchanged list would find the second one "changed".
        let w = Writer {
            kind: PatchKindHint::new("", "Pod"),
            ..writer("w")
        };
        let pod = obj(json!({"spec": {"containers": [
            {"name": "a", "image": "one"},
            {"name": "a", "image": "two"}
        ]}}));
        let (changed, removed) = w.diff(&pod, &pod.clone());
        assert!(changed.is_empty() && removed.is_empty());
    }

    #[test]
    fn manager_names_from_user_agents() {
        assert_eq!(
            manager_from_user_agent(Some("kubectl/v1.32.0 (linux/amd64) kubernetes/abc")),
            "kubectl"
        );
        assert_eq!(manager_from_user_agent(None), "unknown");
        assert_eq!(manager_from_user_agent(Some("/x")), "unknown");
    }
}
