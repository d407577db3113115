//! Server-side apply: merging an applied configuration into the live object under field
//! ownership.

use super::field_set::{self, FieldSet, PathDisplay, PathElement};
use super::{
    entries_of, first_by_id, list_item_id, set_entries, ListKind, ManagedFieldsEntry, Operation,
    Writer,
};
use crate::patch::strategic_merge_patch::canonical;
use serde_json::{Map, Value};
use std::collections::HashSet;

/// A field another manager owns with a value other than the applied one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager.
    pub manager: String,
    /// The API version of the other manager's entry.
    pub api_version: String,
    /// The field, formatted as `.spec.replicas`.
    pub field: String,
}

impl Conflict {
    /// `conflict with "m" using apps/v1` (the text of a `FieldManagerConflict` cause).
    pub fn message(&self) -> String {
        if self.api_version.is_empty() {
            format!("conflict with {:?}", self.manager)
        } else {
            format!(
                "conflict with {:?} using {}",
                self.manager, self.api_version
            )
        }
    }
}

/// The message kube-apiserver gives for a refused apply, e.g.
/// `Apply failed with 1 conflict: conflict with "kubectl-edit" using apps/v1: .spec.replicas`.
pub fn conflicts_message(conflicts: &[Conflict]) -> String {
    match conflicts {
        [one] => format!(
            "Apply failed with 1 conflict: {}: {}",
            one.message(),
            one.field
        ),
        many => {
            let mut s = format!("Apply failed with {} conflicts:", many.len());
            for c in many {
                s.push_str(&format!(" {}: {};", c.message(), c.field));
            }
            s.pop();
            s
        }
    }
}

/// Applies `config` for `writer` (an `Apply` operation) to `live` (`None`: the object does
/// not exist yet and `config` becomes it).
///
/// `config` must already be checked to be an object of the right kind and name, without
/// `managedFields`. On success the result carries the new `managedFields`: the applier's
/// entry holds exactly the fields of `config`. Without `force`, any field of `config` that
/// another manager owns with a different live value is a [`Conflict`] and nothing is
/// applied; with `force` those fields are taken from the other managers. A field the
/// applier owned before and `config` no longer sets is removed from the object if no other
/// manager owns it (or, for a list element, anything inside it).
///
/// # Errors
/// The conflicts, in path order per manager.
pub fn apply(
    live: Option<&Map<String, Value>>,
    config: &Map<String, Value>,
    writer: &Writer<'_>,
    force: bool,
) -> Result<Map<String, Value>, Vec<Conflict>> {
    let applied = writer.fields_of(config);
    let Some(live) = live else {
        let mut obj = strip_nulls_map(config);
        set_entries(&mut obj, vec![apply_entry(writer, applied)]);
        return Ok(obj);
    };
    let mut entries = entries_of(live);
    let live_v = Value::Object(live.clone());
    let config_v = Value::Object(config.clone());
    let is_mine =
        |e: &ManagedFieldsEntry| e.manager == writer.manager && e.operation == Operation::Apply;
    let mut conflicts = Vec::new();
    for e in entries.iter_mut().filter(|e| !is_mine(e)) {
        let mut lost = Vec::new();
        for p in e.fields.intersection(&applied).paths() {
            let item = p.last().is_some_and(PathElement::is_list_item);
            if !item && field_set::get(&live_v, &p) != field_set::get(&config_v, &p) {
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    api_version: e.api_version.clone(),
                    field: PathDisplay(&p).to_string(),
                });
                lost.push(p);
            }
        }
        if force {
            for p in lost {
                e.fields.remove(&p);
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    let previous = entries
        .iter()
        .find(|e| is_mine(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mut merged = match merge(writer, &mut Vec::new(), &live_v, &config_v) {
        Value::Object(m) => Value::Object(m),
        _ => live_v.clone(),
    };
    // Fields this applier dropped from its configuration and nobody else holds go away.
    let others: Vec<&FieldSet> = entries
        .iter()
        .filter(|e| !is_mine(e))
        .map(|e| &e.fields)
        .collect();
    let owned = |p: &[PathElement]| {
        applied.contains_at_or_below(p) || others.iter().any(|o| o.contains_at_or_below(p))
    };
    for p in previous.difference(&applied).paths() {
        if owned(&p) || is_key_field(&p) || !field_set::remove(&mut merged, &p) {
            continue;
        }
        // A map or list emptied by the removal goes too, unless someone holds it.
        for end in (1..p.len()).rev() {
            let parent = &p[..end];
            let emptied = match field_set::get(&merged, parent) {
                Some(Value::Object(m)) => m.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                _ => false,
            };
            if !emptied || owned(parent) || !field_set::remove(&mut merged, parent) {
                break;
            }
        }
    }
    entries.retain(|e| !is_mine(e));
    entries.push(apply_entry(writer, applied));
    let Value::Object(mut out) = merged else {
        return Ok(live.clone());
    };
    set_entries(&mut out, entries);
    Ok(out)
}

/// Whether `path` is a key field of a list element (`...[name="a"].name`): an element
/// that stays keeps its identity.
fn is_key_field(path: &[PathElement]) -> bool {
    match path {
        [.., PathElement::Key(k), PathElement::Field(f)] => {
            serde_json::from_str::<Map<String, Value>>(k).is_ok_and(|m| m.contains_key(f))
        }
        _ => false,
    }
}

fn apply_entry(writer: &Writer<'_>, fields: FieldSet) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: writer.manager.to_string(),
        operation: Operation::Apply,
        api_version: writer.api_version.to_string(),
        time: Some(writer.now.to_string()),
        subresource: writer.subresource(),
        fields,
    }
}

/// The structural merge of `config` into `live`: maps merge field by field, associative
/// lists element by element (live order, new elements appended in `config` order), set
/// lists as unions; anything else is replaced. `null`s in `config` leave fields alone;
/// fields outside the writer's scope keep their live value.
fn merge(writer: &Writer<'_>, names: &mut Vec<String>, live: &Value, config: &Value) -> Value {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) => {
            let mut out = l.clone();
            for (k, cv) in c {
                if cv.is_null() || writer.ignored(names, k) {
                    continue;
                }
                names.push(k.clone());
                let v = match l.get(k) {
                    Some(lv) => merge(writer, names, lv, cv),
                    None => strip_nulls(cv),
                };
                names.pop();
                out.insert(k.clone(), v);
            }
            if names.is_empty() {
                if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("managedFields");
                }
            }
            Value::Object(out)
        }
        (Value::Array(l), Value::Array(c)) => {
            let kind = writer.list_kind(names, c);
            if kind != writer.list_kind(names, l) {
                return strip_nulls(config);
            }
            match kind {
                ListKind::Keyed(key) => {
                    let config_by_id = first_by_id(key, c);
                    let live_ids: HashSet<Option<String>> =
                        l.iter().map(|li| list_item_id(key, li)).collect();
                    let mut out: Vec<Value> = l
                        .iter()
                        .map(|li| match config_by_id.get(&list_item_id(key, li)) {
                            Some(ci) => merge(writer, names, li, ci),
                            None => li.clone(),
                        })
                        .collect();
                    for ci in c {
                        if !live_ids.contains(&list_item_id(key, ci)) {
                            out.push(strip_nulls(ci));
                        }
                    }
                    Value::Array(out)
                }
                ListKind::Set => {
                    let live: HashSet<String> = l.iter().map(canonical).collect();
                    let mut out = l.clone();
                    for ci in c {
                        if !live.contains(&canonical(ci)) {
                            out.push(ci.clone());
                        }
                    }
                    Value::Array(out)
                }
                ListKind::Atomic => strip_nulls(config),
            }
        }
        _ => strip_nulls(config),
    }
}

fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_nulls_map(m)),
        Value::Array(a) => Value::Array(a.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

fn strip_nulls_map(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), strip_nulls(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{obj, writer};
    use super::super::track_update;
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn config(replicas: Option<i64>, containers: Value) -> Map<String, Value> {
        let mut c = obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "web"}},
            "spec": {"template": {"spec": {"containers": containers}}}
        }));
        if let Some(r) = replicas {
            c["spec"]["replicas"] = json!(r);
        }
        c
    }

    #[test]
    fn create_then_reapply_is_stable_and_owned_by_the_applier() {
        let c = config(Some(2), json!([{"name": "web", "image": "nginx:1"}]));
        let created = apply(None, &c, &writer("mgr"), false).unwrap();
        let entries = entries_of(&created);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].operation, Operation::Apply);
        assert!(entries[0].fields.contains(&[
            PathElement::Field("spec".into()),
            PathElement::Field("replicas".into())
        ]));
        let again = apply(Some(&created), &c, &writer("mgr"), false).unwrap();
        assert_eq!(again, created);
    }

    #[test]
    fn reapplying_later_changes_only_the_time_which_is_then_kept() {
        let c = config(Some(2), json!([{"name": "web", "image": "nginx:1"}]));
        let created = apply(None, &c, &writer("mgr"), false).unwrap();
        let mut scaled = created.clone();
        scaled["spec"]["replicas"] = json!(5);
        track_update(Some(&created), &mut scaled, &writer("scaler")).unwrap();
        let c = config(Some(5), json!([{"name": "web", "image": "nginx:1"}]));
        let live = apply(Some(&scaled), &c, &writer("mgr"), true).unwrap();

        let mut later = writer("mgr");
        later.now = "2026-11-22T00:00:01Z";
        let mut again = apply(Some(&live), &c, &later, false).unwrap();
        assert_ne!(again, live, "the applier's entry carries the new time");
        super::super::keep_times_if_unchanged(&live, &mut again);
        assert_eq!(
            again, live,
            "nothing else changed: the old entries come back"
        );

        // A real change keeps the new time.
        let c2 = config(Some(5), json!([{"name": "web", "image": "nginx:2"}]));
        let mut changed = apply(Some(&live), &c2, &later, false).unwrap();
        let before = changed.clone();
        super::super::keep_times_if_unchanged(&live, &mut changed);
        assert_eq!(changed, before);
        assert!(entries_of(&changed)
            .iter()
            .any(|e| e.time.as_deref() == Some("2026-11-22T00:00:01Z")));
    }

    #[test]
    fn conflicting_values_are_refused_unless_forced_and_equal_values_are_shared() {
        let c = config(Some(2), json!([{"name": "web", "image": "nginx:1"}]));
        let created = apply(None, &c, &writer("apply"), false).unwrap_or_default();
        let mut scaled = created.clone();
        scaled["spec"]["replicas"] = json!(5);
        track_update(Some(&created), &mut scaled, &writer("scaler")).unwrap();

        // Another applier with the live value shares ownership; with its own value it conflicts.
        let same = apply(
            Some(&scaled),
            &config(Some(5), json!([{"name": "web", "image": "nginx:1"}])),
            &writer("other"),
            false,
        );
        assert!(same.is_ok());
        let err = apply(Some(&scaled), &c, &writer("apply"), false).unwrap_err();
        assert_eq!(
            err,
            vec![Conflict {
                manager: "scaler".into(),
                api_version: "apps/v1".into(),
                field: ".spec.replicas".into()
            }]
        );
        assert_eq!(
            conflicts_message(&err),
            "Apply failed with 1 conflict: conflict with \"scaler\" using apps/v1: .spec.replicas"
        );
        let forced = apply(Some(&scaled), &c, &writer("apply"), true).unwrap();
        assert_eq!(forced["spec"]["replicas"], json!(2));
        assert!(entries_of(&forced).iter().all(|e| e.manager != "scaler"));
    }

    #[test]
    fn dropped_fields_are_removed_unless_someone_else_owns_them() {
        let two =
            json!([{"name": "web", "image": "nginx:1"}, {"name": "side", "image": "busybox"}]);
        let created =
            apply(None, &config(Some(2), two), &writer("apply"), false).unwrap_or_default();
        // Someone else sets the sidecar's args; then the applier drops the sidecar and replicas.
        let mut edited = created.clone();
        edited["spec"]["template"]["spec"]["containers"][1]["args"] = json!(["-v"]);
        track_update(Some(&created), &mut edited, &writer("editor")).unwrap();
        let one = config(None, json!([{"name": "web", "image": "nginx:2"}]));
        let out = apply(Some(&edited), &one, &writer("apply"), false).unwrap();
        assert!(
            out["spec"].get("replicas").is_none(),
            "replicas was only the applier's"
        );
        let containers = out["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(
            containers.len(),
            2,
            "the sidecar still has the editor's field"
        );
        assert_eq!(containers[0]["image"], json!("nginx:2"));
        // Once the editor's field is gone too, dropping the sidecar removes it.
        let mut cleaned = out.clone();
        cleaned["spec"]["template"]["spec"]["containers"][1]
            .as_object_mut()
            .unwrap()
            .remove("args");
        track_update(Some(&out), &mut cleaned, &writer("editor")).unwrap();
        let two =
            json!([{"name": "web", "image": "nginx:2"}, {"name": "side", "image": "busybox"}]);
        let back = apply(Some(&cleaned), &config(None, two), &writer("apply"), false).unwrap();
        let dropped = apply(Some(&back), &one, &writer("apply"), false).unwrap();
        assert_eq!(
            dropped["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "nginx:2"}])
        );
    }

    #[test]
    fn status_and_server_fields_are_left_alone() {
        let live = obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "uid": "u1", "generation": 3},
            "spec": {"replicas": 1},
            "status": {"replicas": 1}
        }));
        let c = obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "uid": "other"},
            "spec": {"replicas": 2},
            "status": {"replicas": 9}
        }));
        let out = apply(Some(&live), &c, &writer("a"), false).unwrap();
        assert_eq!(out["metadata"]["uid"], json!("u1"));
        assert_eq!(out["status"]["replicas"], json!(1));
        assert_eq!(out["spec"]["replicas"], json!(2));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0i64..5).prop_map(|n| json!(n)),
            "[a-c]{0,2}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-c]|name|spec|metadata|containers", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        // Whatever the two documents, apply never panics, a successful apply is idempotent,
        // and the applier's entry is exactly the configuration's fields.
        #[test]
        fn apply_is_total_and_idempotent(live in json_value(), cfg in json_value(), force in any::<bool>()) {
            let w = writer("p");
            let (Value::Object(live), Value::Object(cfg)) = (live, cfg) else {
                return Ok(());
            };
            // The server refuses objects whose metadata is not an object before this point.
            if [&live, &cfg].iter().any(|o| o.get("metadata").is_some_and(|m| !m.is_object())) {
                return Ok(());
            }
            let mut live = live;
            track_update(None, &mut live, &writer("u")).ok();
            if let Ok(out) = apply(Some(&live), &cfg, &w, force) {
                let mine = entries_of(&out).into_iter().find(|e| e.manager == "p");
                let fields = w.fields_of(&cfg);
                prop_assert_eq!(mine.map(|e| e.fields).unwrap_or_default(), fields);
                let again = apply(Some(&out), &cfg, &w, false);
                prop_assert_eq!(again.as_ref().ok(), Some(&out));
            }
        }
    }
}
