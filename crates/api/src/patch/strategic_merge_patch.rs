//! Kubernetes strategic merge patch (`application/strategic-merge-patch+json`), kubectl's
//! default patch format (`kubectl apply`, `label`, `annotate`, `patch`).
//!
//! It is a JSON merge patch with two differences:
//!
//! 1. **Some lists merge element by element.** Each list field has a [`ListStrategy`]
//!    looked up in a per-kind table ([`list_strategy`]): most lists are replaced whole, as in
//!    a merge patch; lists with a merge key (`spec.containers` by `name`, a container's
//!    `ports` by `containerPort`, `status.conditions` by `type`, ...) match patch elements to
//!    existing elements by that key and merge them recursively, appending the new ones; a
//!    few lists of strings (`metadata.finalizers`) merge as sets. Kinds the table does not
//!    know (custom resources, or [`PatchKindHint::UNKNOWN`]) replace every list.
//! 2. **Directives** in the patch, all keys starting with `$`:
//!    - `"$patch": "replace"` in a map: the map replaces the original instead of merging;
//!      as a list element: the list's other elements replace the original list.
//!    - `"$patch": "delete"` in a map: the map is removed from its parent (the whole object
//!      becomes `{}` at the top); as a list element `{"name": "x", "$patch": "delete"}`: the
//!      elements with that merge-key value are removed.
//!    - `"$patch": "merge"`: the default behaviour, stated explicitly.
//!    - `"$deleteFromPrimitiveList/<field>": [values]`: removes those values from the list
//!      `<field>` (before the patch's additions to it are merged).
//!    - `"$setElementOrder/<field>": [elements]`: the order of the merged list `<field>`.
//!      Elements named there come in that order (given as merge-key maps like
//!      `{"name": "a"}`, or as values for lists of primitives); elements not named keep
//!      their place relative to the original list.
//!    - `"$retainKeys": [keys]`: fields of the original map not named are cleared before
//!      merging; every non-null field of the patch map must be named.
//!
//! `null` deletes a field, as in a merge patch; nulls in newly added maps are dropped.
//!
//! **Order of merged lists**, as in kube-apiserver: elements named by the patch (or by
//! `$setElementOrder`) come in the patch's order; each element only the server has is placed
//! before the first patch element that came after it in the original list. As a
//! consequence, a new element added without `$setElementOrder` lands before the elements the
//! patch does not mention: `kubectl patch` adding a container `c` to `[a, b]` gives
//! `[c, a, b]`. `kubectl apply` always sends `$setElementOrder`, so its lists come out in
//! the order of the applied file.
//!
//! Error classes: a patch that is not an object, a malformed directive or a list element
//! missing its merge key is [`PatchError::InvalidDocument`] (400); a list of lists where a
//! list is merged is [`PatchError::Unprocessable`] (422).

use serde_json::{Map, Value};

use std::collections::{HashMap, HashSet};

use super::{PatchError, PatchKindHint};

const PATCH_DIRECTIVE: &str = "$patch";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder";

/// How the elements of one list field combine with a patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListStrategy {
    /// The patch's list replaces the original (the default, as in a JSON merge patch).
    Replace,
    /// Elements are maps identified by the named field; matching elements merge
    /// recursively, new ones are added.
    MergeByKey(&'static str),
    /// Elements are maps identified by the values of all these fields together (a custom
    /// resource's `x-kubernetes-list-map-keys` with several keys): server-side apply merges
    /// them element by element; a strategic merge patch (never applied to custom
    /// resources) replaces the list.
    MergeByKeys(&'static [&'static str]),
    /// Elements are primitive values merged as a set: the patch's values are added if
    /// missing.
    MergePrimitives,
}

/// One entry of the strategy table. Paths are field names separated by `.`; list elements
/// do not appear in paths (`spec.containers.ports` is the `ports` list of any container).
enum Rule {
    /// The list at this path has this strategy.
    List(&'static str, ListStrategy),
    /// The rules of a shared fragment apply below this path.
    Nested(&'static str, &'static [Rule]),
}

use ListStrategy::{MergeByKey as Key, MergePrimitives as Primitives};
use Rule::{List, Nested};

// The strategy table: Kubernetes' `patchStrategy`/`patchMergeKey` struct tags for the
// built-in kinds, as data. Fragments are shared wherever the same type is embedded.

/// `metadata` of every object.
static OBJECT_META: &[Rule] = &[
    List("finalizers", Primitives),
    List("ownerReferences", Key("uid")),
];

/// A container, init container or ephemeral container.
static CONTAINER: &[Rule] = &[
    List("ports", Key("containerPort")),
    List("env", Key("name")),
    List("volumeMounts", Key("mountPath")),
    List("volumeDevices", Key("devicePath")),
];

/// A pod's `spec` (also the `spec` of every pod template).
static POD_SPEC: &[Rule] = &[
    List("containers", Key("name")),
    Nested("containers", CONTAINER),
    List("initContainers", Key("name")),
    Nested("initContainers", CONTAINER),
    List("ephemeralContainers", Key("name")),
    Nested("ephemeralContainers", CONTAINER),
    List("volumes", Key("name")),
    List("imagePullSecrets", Key("name")),
    List("hostAliases", Key("ip")),
    List("topologySpreadConstraints", Key("topologyKey")),
    List("schedulingGates", Key("name")),
    List("resourceClaims", Key("name")),
];

/// A pod template: `metadata` and `spec`.
static POD_TEMPLATE_SPEC: &[Rule] = &[Nested("metadata", OBJECT_META), Nested("spec", POD_SPEC)];

static POD: &[Rule] = &[
    Nested("metadata", OBJECT_META),
    Nested("spec", POD_SPEC),
    List("status.conditions", Key("type")),
    List("status.podIPs", Key("ip")),
    List("status.hostIPs", Key("ip")),
];

static POD_TEMPLATE: &[Rule] = &[
    Nested("metadata", OBJECT_META),
    Nested("template", POD_TEMPLATE_SPEC),
];

/// Deployment, ReplicaSet, StatefulSet, DaemonSet, ReplicationController, Job.
static WORKLOAD: &[Rule] = &[
    Nested("metadata", OBJECT_META),
    Nested("spec.template", POD_TEMPLATE_SPEC),
    List("status.conditions", Key("type")),
];

static CRON_JOB: &[Rule] = &[
    Nested("metadata", OBJECT_META),
    Nested("spec.jobTemplate.metadata", OBJECT_META),
    Nested("spec.jobTemplate.spec.template", POD_TEMPLATE_SPEC),
];

static NODE: &[Rule] = &[
    Nested("metadata", OBJECT_META),
    List("spec.podCIDRs", Primitives),
    List("status.conditions", Key("type")),
    List("status.addresses", Key("type")),
];

static SERVICE: &[Rule] = &[
    Nested("metadata", OBJECT_META),
    List("spec.ports", Key("port")),
    List("status.conditions", Key("type")),
];

static SERVICE_ACCOUNT: &[Rule] = &[
    Nested("metadata", OBJECT_META),
    List("secrets", Key("name")),
];

/// Namespace, PersistentVolumeClaim, PodDisruptionBudget, HorizontalPodAutoscaler.
static WITH_CONDITIONS: &[Rule] = &[
    Nested("metadata", OBJECT_META),
    List("status.conditions", Key("type")),
];

/// CSINode: a node's drivers are merged by name.
static CSI_NODE: &[Rule] = &[
    Nested("metadata", OBJECT_META),
    List("spec.drivers", Key("name")),
];

/// Built-in kinds whose only merging lists are in `metadata`.
static METADATA_ONLY: &[Rule] = &[Nested("metadata", OBJECT_META)];

/// (group, kind) → rules. The core group is `""`.
static KINDS: &[(&str, &str, &[Rule])] = &[
    ("", "Pod", POD),
    ("", "PodTemplate", POD_TEMPLATE),
    ("", "ReplicationController", WORKLOAD),
    ("", "Node", NODE),
    ("", "Service", SERVICE),
    ("", "ServiceAccount", SERVICE_ACCOUNT),
    ("", "Namespace", WITH_CONDITIONS),
    ("", "PersistentVolumeClaim", WITH_CONDITIONS),
    ("", "PersistentVolume", METADATA_ONLY),
    ("", "ConfigMap", METADATA_ONLY),
    ("", "Secret", METADATA_ONLY),
    ("", "Endpoints", METADATA_ONLY),
    ("", "Event", METADATA_ONLY),
    ("", "LimitRange", METADATA_ONLY),
    ("", "ResourceQuota", METADATA_ONLY),
    ("apps", "Deployment", WORKLOAD),
    ("apps", "ReplicaSet", WORKLOAD),
    ("apps", "StatefulSet", WORKLOAD),
    ("apps", "DaemonSet", WORKLOAD),
    ("apps", "ControllerRevision", METADATA_ONLY),
    ("batch", "Job", WORKLOAD),
    ("batch", "CronJob", CRON_JOB),
    ("coordination.k8s.io", "Lease", METADATA_ONLY),
    ("networking.k8s.io", "Ingress", METADATA_ONLY),
    ("networking.k8s.io", "NetworkPolicy", METADATA_ONLY),
    ("policy", "PodDisruptionBudget", WITH_CONDITIONS),
    ("autoscaling", "HorizontalPodAutoscaler", WITH_CONDITIONS),
    ("rbac.authorization.k8s.io", "Role", METADATA_ONLY),
    ("rbac.authorization.k8s.io", "RoleBinding", METADATA_ONLY),
    ("rbac.authorization.k8s.io", "ClusterRole", METADATA_ONLY),
    (
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        METADATA_ONLY,
    ),
    ("events.k8s.io", "Event", METADATA_ONLY),
    ("discovery.k8s.io", "EndpointSlice", METADATA_ONLY),
    ("networking.k8s.io", "IngressClass", METADATA_ONLY),
    ("storage.k8s.io", "StorageClass", METADATA_ONLY),
    ("storage.k8s.io", "CSINode", CSI_NODE),
    ("storage.k8s.io", "CSIDriver", METADATA_ONLY),
    ("storage.k8s.io", "CSIStorageCapacity", METADATA_ONLY),
    ("scheduling.k8s.io", "PriorityClass", METADATA_ONLY),
];

fn rules_for(kind: PatchKindHint<'_>) -> Option<&'static [Rule]> {
    let group = if kind.group == "core" { "" } else { kind.group };
    KINDS
        .iter()
        .find(|(g, k, _)| *g == group && *k == kind.kind)
        .map(|(_, _, rules)| *rules)
}

/// Strips the dotted `prefix` from the front of `path`, if `path` starts with it.
fn strip_prefix<'p, S: AsRef<str>>(prefix: &str, path: &'p [S]) -> Option<&'p [S]> {
    let mut rest = path;
    for segment in prefix.split('.') {
        let (first, tail) = rest.split_first()?;
        if first.as_ref() != segment {
            return None;
        }
        rest = tail;
    }
    Some(rest)
}

fn lookup<S: AsRef<str>>(rules: &[Rule], path: &[S]) -> ListStrategy {
    for rule in rules {
        match rule {
            List(p, strategy) => {
                if strip_prefix(p, path).is_some_and(|rest| rest.is_empty()) {
                    return *strategy;
                }
            }
            Nested(p, sub) => {
                if let Some(rest) = strip_prefix(p, path) {
                    let found = lookup(sub, rest);
                    if found != ListStrategy::Replace {
                        return found;
                    }
                }
            }
        }
    }
    ListStrategy::Replace
}

/// The strategy of the list at `path` (field names from the object's root, list elements
/// left out, e.g. `["spec", "template", "spec", "containers", "ports"]`) in objects of
/// `kind`. [`ListStrategy::Replace`] for paths and kinds the table does not know.
pub fn list_strategy<S: AsRef<str>>(kind: PatchKindHint<'_>, path: &[S]) -> ListStrategy {
    rules_for(kind).map_or(ListStrategy::Replace, |rules| lookup(rules, path))
}

/// Applies the strategic merge patch `patch` to `original`, an object of `kind`.
///
/// `original` is not modified. `patch` must be a JSON object. See the module docs for the
/// rules and error classes. Never panics, whatever `patch` contains.
///
/// ```
/// use api::patch::{strategic_merge_patch::apply, PatchKindHint};
/// use serde_json::json;
///
/// let pod = json!({"spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}});
/// let patch = json!({"spec": {"containers": [{"name": "b", "image": "b:2"}]}});
/// let out = apply(&pod, &patch, PatchKindHint::new("", "Pod")).unwrap();
/// assert_eq!(out["spec"]["containers"], json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}]));
/// ```
pub fn apply(
    original: &Value,
    patch: &Value,
    kind: PatchKindHint<'_>,
) -> Result<Value, PatchError> {
    apply_to(original.clone(), patch, kind)
}

/// [`apply`] on an `original` the caller gives up, merged into in place.
///
/// # Errors
/// As [`apply`].
pub fn apply_to(
    original: Value,
    patch: &Value,
    kind: PatchKindHint<'_>,
) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::InvalidDocument(
            "a strategic merge patch must be a JSON object".into(),
        ));
    };
    let original = match original {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let mut merger = Merger {
        rules: rules_for(kind),
        path: Vec::new(),
    };
    Ok(Value::Object(
        merger.merge_map(original, patch)?.unwrap_or_default(),
    ))
}

/// The merge in progress: the kind's rules and the field path being merged.
struct Merger {
    rules: Option<&'static [Rule]>,
    path: Vec<String>,
}

/// A field named by a `$deleteFromPrimitiveList/` or `$setElementOrder/` directive.
fn directive_field<'k>(key: &'k str, prefix: &str) -> Result<Option<&'k str>, PatchError> {
    let Some(rest) = key.strip_prefix(prefix) else {
        return Ok(None);
    };
    match rest.strip_prefix('/') {
        Some(field) if !field.is_empty() => Ok(Some(field)),
        _ => Err(PatchError::InvalidDocument(format!(
            "directive {key:?} must have the form \"{prefix}/<field>\""
        ))),
    }
}

fn is_directive_key(key: &str) -> bool {
    key == PATCH_DIRECTIVE
        || key == RETAIN_KEYS_DIRECTIVE
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
        || key.starts_with(SET_ELEMENT_ORDER_PREFIX)
}

/// What a `$patch` directive asks for.
enum MapDirective {
    Merge,
    Replace,
    Delete,
}

impl Merger {
    fn here(&self) -> String {
        if self.path.is_empty() {
            "the top level".to_string()
        } else {
            self.path.join(".")
        }
    }

    fn strategy_of(&self, field: &str) -> ListStrategy {
        let Some(rules) = self.rules else {
            return ListStrategy::Replace;
        };
        let mut path: Vec<&str> = self.path.iter().map(String::as_str).collect();
        path.push(field);
        lookup(rules, &path)
    }

    fn map_directive(&self, patch: &Map<String, Value>) -> Result<MapDirective, PatchError> {
        match patch.get(PATCH_DIRECTIVE) {
            None => Ok(MapDirective::Merge),
            Some(Value::String(s)) if s == "merge" => Ok(MapDirective::Merge),
            Some(Value::String(s)) if s == "replace" => Ok(MapDirective::Replace),
            Some(Value::String(s)) if s == "delete" => Ok(MapDirective::Delete),
            Some(other) => Err(PatchError::InvalidDocument(format!(
                "unknown {PATCH_DIRECTIVE} directive {other} at {}; expected \"replace\", \"delete\" or \"merge\"",
                self.here()
            ))),
        }
    }

    /// Merges `patch` into `original`. `None` means the map is deleted (`$patch: delete`).
    fn merge_map(
        &mut self,
        mut original: Map<String, Value>,
        patch: &Map<String, Value>,
    ) -> Result<Option<Map<String, Value>>, PatchError> {
        match self.map_directive(patch)? {
            MapDirective::Delete => return Ok(None),
            MapDirective::Replace => original = Map::new(),
            MapDirective::Merge => {}
        }
        if let Some(retain) = patch.get(RETAIN_KEYS_DIRECTIVE) {
            self.apply_retain_keys(&mut original, patch, retain)?;
        }

        // The fields to process: every ordinary key, and every field a list directive names.
        let mut fields: Vec<&str> = Vec::with_capacity(patch.len());
        let mut deletions: Vec<(&str, &Vec<Value>)> = Vec::new();
        let mut orders: Vec<(&str, &Vec<Value>)> = Vec::new();
        for (key, value) in patch {
            if let Some(field) = directive_field(key, DELETE_FROM_PRIMITIVE_LIST_PREFIX)? {
                let list = value.as_array().ok_or_else(|| {
                    PatchError::InvalidDocument(format!(
                        "{key:?} at {} must be a list of values to delete",
                        self.here()
                    ))
                })?;
                deletions.push((field, list));
                fields.push(field);
            } else if let Some(field) = directive_field(key, SET_ELEMENT_ORDER_PREFIX)? {
                let list = value.as_array().ok_or_else(|| {
                    PatchError::InvalidDocument(format!(
                        "{key:?} at {} must be a list giving the element order",
                        self.here()
                    ))
                })?;
                orders.push((field, list));
                fields.push(field);
            } else if !is_directive_key(key) {
                fields.push(key);
            }
        }
        fields.sort_unstable();
        fields.dedup();
        // Looked up once per field: maps, so that many directives cost linear time.
        let deletions: HashMap<&str, &Vec<Value>> = deletions.into_iter().collect();
        let orders: HashMap<&str, &Vec<Value>> = orders.into_iter().collect();

        for field in fields {
            let patch_value = patch.get(field);
            let deletion = deletions.get(field).copied();
            let order = orders.get(field).copied();
            let current = original.remove(field);
            if let Some(merged) = self.merge_field(field, current, patch_value, deletion, order)? {
                original.insert(field.to_string(), merged);
            }
        }
        Ok(Some(original))
    }

    fn apply_retain_keys(
        &self,
        original: &mut Map<String, Value>,
        patch: &Map<String, Value>,
        retain: &Value,
    ) -> Result<(), PatchError> {
        let bad = || {
            PatchError::InvalidDocument(format!(
                "{RETAIN_KEYS_DIRECTIVE} at {} must be a list of field names",
                self.here()
            ))
        };
        let keys: HashSet<&str> = retain
            .as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|k| k.as_str().ok_or_else(bad))
            .collect::<Result<_, _>>()?;
        for (key, value) in patch {
            if !value.is_null() && !is_directive_key(key) && !keys.contains(&key.as_str()) {
                return Err(PatchError::InvalidDocument(format!(
                    "field {key:?} at {} is in the patch but not in its {RETAIN_KEYS_DIRECTIVE} list",
                    self.here()
                )));
            }
        }
        original.retain(|k, _| keys.contains(&k.as_str()));
        Ok(())
    }

    /// Merges one field. `None` in the result means the field is absent afterwards.
    fn merge_field(
        &mut self,
        field: &str,
        current: Option<Value>,
        patch: Option<&Value>,
        deletion: Option<&Vec<Value>>,
        order: Option<&Vec<Value>>,
    ) -> Result<Option<Value>, PatchError> {
        let strategy = self.strategy_of(field);
        self.path.push(field.to_string());
        let result = match (current, patch) {
            (_, Some(Value::Null)) => Ok(None),
            (current, Some(Value::Object(p))) => {
                let base = match current {
                    Some(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                self.merge_map(base, p).map(|m| m.map(Value::Object))
            }
            (current, Some(Value::Array(p))) => {
                let base = match current {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                };
                self.merge_list(strategy, base, Some(p), deletion, order)
                    .map(|l| Some(Value::Array(l)))
            }
            (_, Some(scalar)) => Ok(Some(scalar.clone())),
            // Only directives name this field.
            (Some(Value::Array(items)), None) => self
                .merge_list(strategy, items, None, deletion, order)
                .map(|l| Some(Value::Array(l))),
            (other, None) => Ok(other),
        };
        self.path.pop();
        result
    }

    /// Merges a list field. `patch` is `None` when only directives name the field.
    fn merge_list(
        &mut self,
        strategy: ListStrategy,
        original: Vec<Value>,
        patch: Option<&Vec<Value>>,
        deletion: Option<&Vec<Value>>,
        order: Option<&Vec<Value>>,
    ) -> Result<Vec<Value>, PatchError> {
        let empty = Vec::new();
        let patch_items = patch.unwrap_or(&empty);
        let mut list = original;
        if let Some(deletion) = deletion {
            let doomed: HashSet<String> = deletion.iter().map(canonical).collect();
            list.retain(|item| !doomed.contains(&canonical(item)));
        }
        match strategy {
            ListStrategy::Replace => Ok(match patch {
                Some(p) => p.clone(),
                None => list,
            }),
            ListStrategy::MergePrimitives => {
                let server_order = list.clone();
                let mut present: HashSet<String> = list.iter().map(canonical).collect();
                for item in patch_items {
                    match item {
                        Value::Array(_) => return Err(self.list_of_lists()),
                        Value::Object(_) => {
                            return Err(PatchError::InvalidDocument(format!(
                                "list {} holds values, but the patch has a map element",
                                self.here()
                            )))
                        }
                        _ => {}
                    }
                    if present.insert(canonical(item)) {
                        list.push(item.clone());
                    }
                }
                let reference = order.unwrap_or(patch_items);
                Ok(order_merged(
                    list,
                    &server_order,
                    reference,
                    Identity::Whole,
                ))
            }
            ListStrategy::MergeByKey(key) => self.merge_keyed_list(key, list, patch_items, order),
            ListStrategy::MergeByKeys(_) => Ok(patch_items.to_vec()),
        }
    }

    fn list_of_lists(&self) -> PatchError {
        PatchError::Unprocessable(format!(
            "list {} is merged, so its elements cannot be lists",
            self.here()
        ))
    }

    fn merge_keyed_list(
        &mut self,
        key: &'static str,
        mut list: Vec<Value>,
        patch: &[Value],
        order: Option<&Vec<Value>>,
    ) -> Result<Vec<Value>, PatchError> {
        let identity = Identity::Key(key);
        let server_order = list.clone();
        let mut replace = false;
        let mut doomed: HashSet<String> = HashSet::new();
        let mut plain: Vec<(&Map<String, Value>, String)> = Vec::with_capacity(patch.len());
        for item in patch {
            let element = match item {
                Value::Object(m) => m,
                Value::Array(_) => return Err(self.list_of_lists()),
                other => {
                    return Err(PatchError::InvalidDocument(format!(
                        "list {} merges maps by {key:?}, but the patch has the element {other}",
                        self.here()
                    )))
                }
            };
            match self.map_directive(element)? {
                MapDirective::Merge => {
                    let id = canonical(self.merge_key_of(element, key)?);
                    plain.push((element, id));
                }
                MapDirective::Replace => replace = true,
                MapDirective::Delete => {
                    doomed.insert(canonical(self.merge_key_of(element, key)?));
                }
            }
        }
        if replace {
            list.clear();
        } else if !doomed.is_empty() {
            list.retain(|x| identity.key_of(x).is_none_or(|id| !doomed.contains(&id)));
        }
        // Where each merge-key value first occurs in the list.
        let mut index: HashMap<String, usize> = HashMap::with_capacity(list.len());
        for (i, x) in list.iter().enumerate() {
            if let Some(id) = identity.key_of(x) {
                index.entry(id).or_insert(i);
            }
        }
        for (element, id) in &plain {
            match index.get(id) {
                Some(&i) => {
                    let base = match std::mem::take(&mut list[i]) {
                        Value::Object(m) => m,
                        _ => Map::new(),
                    };
                    list[i] = Value::Object(self.merge_element(base, element)?);
                }
                None => {
                    index.insert(id.clone(), list.len());
                    let merged = self.merge_element(Map::new(), element)?;
                    list.push(Value::Object(merged));
                }
            }
        }
        let merged = match order {
            Some(order) => order_merged(list, &server_order, order, identity),
            None => {
                let reference: Vec<Value> = plain
                    .iter()
                    .filter_map(|(m, _)| m.get(key).cloned())
                    .map(|v| Value::Object(Map::from_iter([(key.to_string(), v)])))
                    .collect();
                order_merged(list, &server_order, &reference, identity)
            }
        };
        Ok(merged)
    }

    /// Merges a list element without a `$patch: delete` directive (those were handled by
    /// the list), so the result is always a map.
    fn merge_element(
        &mut self,
        base: Map<String, Value>,
        element: &Map<String, Value>,
    ) -> Result<Map<String, Value>, PatchError> {
        Ok(self.merge_map(base, element)?.unwrap_or_default())
    }

    fn merge_key_of<'m>(
        &self,
        element: &'m Map<String, Value>,
        key: &str,
    ) -> Result<&'m Value, PatchError> {
        element.get(key).ok_or_else(|| {
            PatchError::InvalidDocument(format!(
                "an element of list {} has no merge key {key:?}: {}",
                self.here(),
                Value::Object(element.clone())
            ))
        })
    }
}

/// What identifies an element of a merged list.
#[derive(Clone, Copy)]
enum Identity {
    /// The value of this merge key (maps).
    Key(&'static str),
    /// The element itself (primitives).
    Whole,
}

impl Identity {
    /// The canonical form of the identifying value, if the element has one.
    fn key_of(self, v: &Value) -> Option<String> {
        match self {
            Identity::Key(key) => v.get(key).map(canonical),
            Identity::Whole => Some(canonical(v)),
        }
    }
}

/// Orders a merged list as kube-apiserver does.
///
/// `merged` holds the elements after merging; `server_order` the original list; `reference`
/// the order the patch asks for (`$setElementOrder`, or the patch's own elements).
/// `identity` gives what identifies an element (its merge-key value, or the value itself).
/// Elements whose identity appears in `reference` are sorted by it; the others keep their
/// relative order, and each is placed before the first referenced element that followed it
/// in `server_order`.
fn order_merged(
    merged: Vec<Value>,
    server_order: &[Value],
    reference: &[Value],
    identity: Identity,
) -> Vec<Value> {
    let first_positions = |list: &[Value]| {
        let mut positions: HashMap<String, usize> = HashMap::with_capacity(list.len());
        for (i, x) in list.iter().enumerate() {
            if let Some(id) = identity.key_of(x) {
                positions.entry(id).or_insert(i);
            }
        }
        positions
    };
    let in_reference = first_positions(reference);
    let in_server = first_positions(server_order);

    // Each element with its position in the server's list, if it was there.
    let mut referenced: Vec<(usize, Option<usize>, Value)> = Vec::new();
    let mut server_only: Vec<(Option<usize>, Value)> = Vec::new();
    for item in merged {
        let id = identity.key_of(&item);
        let server_pos = id.as_ref().and_then(|id| in_server.get(id).copied());
        match id.as_ref().and_then(|id| in_reference.get(id)) {
            Some(&i) => referenced.push((i, server_pos, item)),
            None => server_only.push((server_pos, item)),
        }
    }
    referenced.sort_by_key(|(i, _, _)| *i);

    let mut out = Vec::with_capacity(referenced.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = referenced
        .into_iter()
        .map(|(_, pos, v)| (pos, v))
        .peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((l, _)), Some((r, _))) => matches!((l, r), (Some(li), Some(ri)) if li < ri),
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next.map(|(_, v)| v));
    }
    out
}

/// A string that is equal for two JSON values exactly when they are equal as JSON: object
/// keys sorted, numbers compared by value (`1` and `1.0` give the same string).
/// A text form of `v` that two values share exactly when they are equal as JSON (`80` and
/// `80.0` alike, object members in any order): how list elements and merge keys are
/// identified, here and in field tracking.
pub(crate) fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Number(n) => {
            let text = if let Some(i) = n.as_i64() {
                i.to_string()
            } else if let Some(u) = n.as_u64() {
                u.to_string()
            } else {
                match n.as_f64() {
                    // Integral floats in i64 range print like the integer they equal.
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => (f as i64).to_string(),
                    _ => n.to_string(),
                }
            };
            out.push_str(&text);
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const POD_KIND: PatchKindHint<'static> = PatchKindHint::new("", "Pod");
    const DEPLOYMENT: PatchKindHint<'static> = PatchKindHint::new("apps", "Deployment");

    fn smp(kind: PatchKindHint<'_>, original: Value, patch: Value) -> Value {
        apply(&original, &patch, kind).unwrap()
    }

    fn names(list: &Value) -> Vec<&str> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect()
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "default",
                "labels": {"app": "web"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"old\":true}"},
                "finalizers": ["a.example/x"]
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "app",
                                "image": "app:1",
                                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
                            },
                            {"name": "sidecar", "image": "proxy:1"}
                        ],
                        "volumes": [{"name": "data", "emptyDir": {}}],
                        "tolerations": [{"key": "k1", "operator": "Exists"}]
                    }
                }
            },
            "status": {"conditions": [
                {"type": "Available", "status": "True"},
                {"type": "Progressing", "status": "True"}
            ]}
        })
    }

    #[test]
    fn strategy_table_lookups() {
        let p = |s: &str| s.split('.').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(list_strategy(POD_KIND, &p("spec.containers")), Key("name"));
        assert_eq!(
            list_strategy(POD_KIND, &p("spec.containers.ports")),
            Key("containerPort")
        );
        assert_eq!(
            list_strategy(POD_KIND, &p("spec.initContainers.env")),
            Key("name")
        );
        assert_eq!(
            list_strategy(POD_KIND, &p("spec.containers.volumeMounts")),
            Key("mountPath")
        );
        assert_eq!(
            list_strategy(POD_KIND, &p("spec.tolerations")),
            ListStrategy::Replace
        );
        assert_eq!(
            list_strategy(POD_KIND, &p("spec.containers.args")),
            ListStrategy::Replace
        );
        assert_eq!(
            list_strategy(POD_KIND, &p("metadata.finalizers")),
            Primitives
        );
        assert_eq!(
            list_strategy(POD_KIND, &p("metadata.ownerReferences")),
            Key("uid")
        );
        assert_eq!(
            list_strategy(POD_KIND, &p("status.conditions")),
            Key("type")
        );
        assert_eq!(
            list_strategy(DEPLOYMENT, &p("spec.template.spec.containers")),
            Key("name")
        );
        assert_eq!(
            list_strategy(DEPLOYMENT, &p("spec.template.spec.containers.env")),
            Key("name")
        );
        assert_eq!(
            list_strategy(DEPLOYMENT, &p("spec.template.spec.volumes")),
            Key("name")
        );
        assert_eq!(
            list_strategy(DEPLOYMENT, &p("spec.containers")),
            ListStrategy::Replace
        );
        assert_eq!(
            list_strategy(
                ("apps", "ReplicaSet").into(),
                &p("spec.template.spec.imagePullSecrets")
            ),
            Key("name")
        );
        assert_eq!(
            list_strategy(
                ("batch", "CronJob").into(),
                &p("spec.jobTemplate.spec.template.spec.containers")
            ),
            Key("name")
        );
        assert_eq!(
            list_strategy(("", "Node").into(), &p("status.addresses")),
            Key("type")
        );
        assert_eq!(
            list_strategy(("storage.k8s.io", "CSINode").into(), &p("spec.drivers")),
            Key("name")
        );
        assert_eq!(
            list_strategy(("core", "Service").into(), &p("spec.ports")),
            Key("port")
        );
        assert_eq!(
            list_strategy(("example.com", "Widget").into(), &p("metadata.finalizers")),
            ListStrategy::Replace
        );
        assert_eq!(
            list_strategy(PatchKindHint::UNKNOWN, &p("spec.containers")),
            ListStrategy::Replace
        );
    }

    #[test]
    fn kubectl_label_and_annotate() {
        let pod = json!({"metadata": {"name": "x", "labels": {"app": "web"}}, "spec": {}});
        let out = smp(
            POD_KIND,
            pod.clone(),
            json!({"metadata": {"labels": {"a": "b"}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"app": "web", "a": "b"}));
        let out = smp(
            POD_KIND,
            out,
            json!({"metadata": {"labels": {"app": null}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"a": "b"}));
        let out = smp(
            POD_KIND,
            out,
            json!({"metadata": {"annotations": {"note": "hi"}}}),
        );
        assert_eq!(out["metadata"]["annotations"], json!({"note": "hi"}));
        assert_eq!(out["metadata"]["name"], "x");
        // Removing a label that is not there is not an error and adds nothing.
        let out2 = smp(
            POD_KIND,
            out.clone(),
            json!({"metadata": {"labels": {"zzz": null}}}),
        );
        assert_eq!(out2, out);
    }

    #[test]
    fn apply_changes_one_container_image_and_keeps_the_others() {
        // What `kubectl apply` sends after the image of "app" changed in the file.
        let patch = json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"new\":true}"}},
            "spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
                "containers": [{"image": "app:2", "name": "app"}]
            }}}
        });
        let out = smp(DEPLOYMENT, deployment(), patch);
        let containers = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(names(containers), ["app", "sidecar"]);
        assert_eq!(containers[0]["image"], "app:2");
        // The rest of the container is kept.
        assert_eq!(
            containers[0]["ports"],
            json!([{"containerPort": 80, "protocol": "TCP"}])
        );
        assert_eq!(containers[0]["env"][1], json!({"name": "B", "value": "2"}));
        assert_eq!(
            containers[1],
            json!({"name": "sidecar", "image": "proxy:1"})
        );
        assert_eq!(
            out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
            "{\"new\":true}"
        );
        // Nothing else moved.
        let mut expected = deployment();
        expected["spec"]["template"]["spec"]["containers"][0]["image"] = json!("app:2");
        expected["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
            json!("{\"new\":true}");
        assert_eq!(out, expected);
    }

    #[test]
    fn apply_deletes_a_container() {
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "app"}],
            "containers": [{"$patch": "delete", "name": "sidecar"}]
        }}}});
        let out = smp(DEPLOYMENT, deployment(), patch);
        assert_eq!(
            names(&out["spec"]["template"]["spec"]["containers"]),
            ["app"]
        );
    }

    #[test]
    fn set_element_order_reorders_and_adds() {
        // The file now lists sidecar first and adds "logger" between them.
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "logger"}, {"name": "app"}],
            "containers": [{"name": "logger", "image": "log:1"}]
        }}}});
        let out = smp(DEPLOYMENT, deployment(), patch);
        assert_eq!(
            names(&out["spec"]["template"]["spec"]["containers"]),
            ["sidecar", "logger", "app"]
        );
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][1]["image"],
            "log:1"
        );
    }

    #[test]
    fn set_element_order_keeps_unmentioned_server_elements_in_place() {
        let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "s"}, {"name": "b"}]}});
        // "s" was added by someone else (not in the applied file).
        let out = smp(
            POD_KIND,
            pod,
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
                "containers": [{"name": "b", "image": "x"}]
            }}),
        );
        // Patch order b, a; "s" goes before the first referenced element it preceded (b).
        assert_eq!(names(&out["spec"]["containers"]), ["s", "b", "a"]);
    }

    #[test]
    fn set_element_order_alone_only_reorders() {
        let pod = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b"}]}});
        let out = smp(
            POD_KIND,
            pod,
            json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "b"}, {"name": "a", "image": "1"}])
        );
    }

    #[test]
    fn merging_without_order_follows_kube_apiserver() {
        let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let out = smp(
            POD_KIND,
            pod.clone(),
            json!({"spec": {"containers": [{"name": "b", "image": "x"}]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a"}, {"name": "b", "image": "x"}])
        );
        // A new element without $setElementOrder lands first.
        let out = smp(
            POD_KIND,
            pod,
            json!({"spec": {"containers": [{"name": "c"}]}}),
        );
        assert_eq!(names(&out["spec"]["containers"]), ["c", "a", "b"]);
    }

    #[test]
    fn nested_keyed_lists_merge() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{
            "name": "app",
            "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}, {"name": "A", "$patch": "delete"}],
            "ports": [{"containerPort": 443}]
        }]}}}});
        let out = smp(DEPLOYMENT, deployment(), patch);
        let app = &out["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            app["env"],
            json!([{"name": "B", "value": "3"}, {"name": "C", "value": "4"}])
        );
        assert_eq!(
            app["ports"],
            json!([{"containerPort": 443}, {"containerPort": 80, "protocol": "TCP"}])
        );
        assert_eq!(app["image"], "app:1");
    }

    #[test]
    fn lists_without_strategy_are_replaced() {
        let patch = json!({"spec": {"template": {"spec": {"tolerations": [{"key": "k2", "operator": "Exists"}]}}}});
        let out = smp(DEPLOYMENT, deployment(), patch);
        assert_eq!(
            out["spec"]["template"]["spec"]["tolerations"],
            json!([{"key": "k2", "operator": "Exists"}])
        );
    }

    #[test]
    fn unknown_kinds_replace_lists_and_merge_maps() {
        let original = json!({"spec": {"items": [{"name": "a"}, {"name": "b"}], "m": {"x": 1}}});
        let out = smp(
            ("example.com", "Widget").into(),
            original,
            json!({"spec": {"items": [{"name": "b"}], "m": {"y": 2}}}),
        );
        assert_eq!(
            out,
            json!({"spec": {"items": [{"name": "b"}], "m": {"x": 1, "y": 2}}})
        );
    }

    #[test]
    fn patch_replace_directive_in_map_and_list() {
        let out = smp(
            DEPLOYMENT,
            deployment(),
            json!({"spec": {"strategy": {"$patch": "replace", "type": "Recreate"}}}),
        );
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        let out = smp(
            DEPLOYMENT,
            deployment(),
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "only", "image": "o:1"},
                {"$patch": "replace"}
            ]}}}}),
        );
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "only", "image": "o:1"}])
        );
    }

    #[test]
    fn patch_delete_directive_in_map() {
        let out = smp(
            DEPLOYMENT,
            deployment(),
            json!({"spec": {"strategy": {"$patch": "delete"}}}),
        );
        assert!(out["spec"].get("strategy").is_none());
        assert_eq!(out["spec"]["replicas"], 2);
        let out = smp(DEPLOYMENT, deployment(), json!({"$patch": "delete"}));
        assert_eq!(out, json!({}));
        let out = smp(
            DEPLOYMENT,
            deployment(),
            json!({"spec": {"$patch": "merge", "replicas": 5}}),
        );
        assert_eq!(out["spec"]["replicas"], 5);
        assert_eq!(out["spec"]["strategy"]["type"], "RollingUpdate");
    }

    #[test]
    fn primitive_lists_merge_as_sets() {
        let out = smp(
            DEPLOYMENT,
            deployment(),
            json!({"metadata": {"finalizers": ["b.example/y", "a.example/x"]}}),
        );
        // The patch's order wins for the elements it names.
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["b.example/y", "a.example/x"])
        );
        let out = smp(
            DEPLOYMENT,
            out,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example/x"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b.example/y"]));
        let out = smp(
            DEPLOYMENT,
            out,
            json!({"metadata": {
                "$setElementOrder/finalizers": ["c", "b.example/y"],
                "finalizers": ["c"]
            }}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "b.example/y"]));
    }

    #[test]
    fn retain_keys_clears_unlisted_fields() {
        let out = smp(
            DEPLOYMENT,
            deployment(),
            json!({"spec": {"strategy": {
                "$retainKeys": ["type"],
                "type": "Recreate"
            }}}),
        );
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        let err = apply(
            &deployment(),
            &json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}),
            DEPLOYMENT,
        )
        .unwrap_err();
        assert!(err.is_invalid_document(), "{err}");
        assert!(err.to_string().contains("rollingUpdate"), "{err}");
    }

    #[test]
    fn conditions_and_owner_references_merge_by_key() {
        let out = smp(
            DEPLOYMENT,
            deployment(),
            json!({"status": {"conditions": [{"type": "Available", "status": "False"}]}}),
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([
                {"type": "Available", "status": "False"},
                {"type": "Progressing", "status": "True"}
            ])
        );
        let pod = json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "rs"}]}});
        let out = smp(
            POD_KIND,
            pod,
            json!({"metadata": {"ownerReferences": [{"uid": "1", "controller": true}]}}),
        );
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([{"uid": "1", "name": "rs", "controller": true}])
        );
    }

    #[test]
    fn new_fields_are_cleaned_of_nulls_and_directives() {
        let pod = json!({"metadata": {"name": "x"}});
        let out = smp(
            POD_KIND,
            pod,
            json!({"spec": {
                "nodeSelector": {"a": "b", "c": null},
                "$setElementOrder/containers": [{"name": "a"}],
                "containers": [{"name": "a", "image": "i", "env": [{"name": "X", "$patch": "delete"}]}]
            }}),
        );
        assert_eq!(
            out["spec"],
            json!({
                "nodeSelector": {"a": "b"},
                "containers": [{"name": "a", "image": "i", "env": []}]
            })
        );
    }

    #[test]
    fn type_changes_replace() {
        let out = smp(
            POD_KIND,
            json!({"spec": {"a": [1], "b": {"c": 1}, "d": "s"}}),
            json!({"spec": {"a": {"x": 1}, "b": 2, "d": [1]}}),
        );
        assert_eq!(out, json!({"spec": {"a": {"x": 1}, "b": 2, "d": [1]}}));
    }

    #[test]
    fn malformed_patches_are_rejected() {
        let pod = json!({"spec": {"containers": [{"name": "a"}]}});
        let bad_request = [
            json!([1]),
            json!("x"),
            json!({"spec": {"$patch": "explode"}}),
            json!({"spec": {"$patch": 1}}),
            json!({"spec": {"containers": [{"image": "no-name"}]}}),
            json!({"spec": {"containers": [{"$patch": "delete"}]}}),
            json!({"spec": {"containers": ["a"]}}),
            json!({"spec": {"containers": [{"name": "a", "$patch": "bogus"}]}}),
            json!({"spec": {"$setElementOrder/containers": {"name": "a"}}}),
            json!({"spec": {"$setElementOrder": []}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "x"}}),
            json!({"metadata": {"$deleteFromPrimitiveList/": []}}),
            json!({"metadata": {"finalizers": [{"a": 1}]}}),
            json!({"spec": {"$retainKeys": "containers"}}),
            json!({"spec": {"$retainKeys": [1]}}),
        ];
        for patch in bad_request {
            let err = apply(&pod, &patch, POD_KIND).unwrap_err();
            assert!(err.is_invalid_document(), "{patch}: {err:?}");
            assert_eq!(err.status_code(), 400);
        }
        for patch in [
            json!({"spec": {"containers": [[1]]}}),
            json!({"metadata": {"finalizers": [["a"]]}}),
        ] {
            let err = apply(&pod, &patch, POD_KIND).unwrap_err();
            assert!(
                matches!(err, PatchError::Unprocessable(_)),
                "{patch}: {err:?}"
            );
            assert_eq!(err.status_code(), 422);
        }
    }

    #[test]
    fn error_messages_name_the_field() {
        let err = apply(
            &json!({}),
            &json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}),
            DEPLOYMENT,
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("spec.template.spec.containers") && msg.contains("\"name\""),
            "{msg}"
        );
    }

    #[test]
    fn canonical_forms_match_json_equality() {
        assert_eq!(canonical(&json!(1)), canonical(&json!(1.0)));
        assert_eq!(
            canonical(&json!({"b": 1, "a": [2]})),
            canonical(&json!({"a": [2.0], "b": 1}))
        );
        assert_ne!(canonical(&json!(1)), canonical(&json!("1")));
        assert_ne!(canonical(&json!(1.5)), canonical(&json!(1)));
        assert_ne!(
            canonical(&json!({"a,\"b": 1})),
            canonical(&json!({"a": 1, "b": 1}))
        );
        // Merge keys given as 80.0 match stored 80.
        let pod =
            json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80}]}]}});
        let out = smp(
            POD_KIND,
            pod,
            json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80.0, "name": "http"}]}]}}),
        );
        let ports = out["spec"]["containers"][0]["ports"].as_array().unwrap();
        assert_eq!(ports.len(), 1, "{ports:?}");
        assert_eq!(ports[0]["name"], "http");
    }

    #[test]
    fn long_lists_merge_quickly() {
        let n = 20_000;
        let original: Vec<Value> = (0..n).map(|i| json!({"name": format!("c{i}")})).collect();
        let patch: Vec<Value> = (0..n)
            .rev()
            .map(|i| json!({"name": format!("c{i}"), "x": i}))
            .collect();
        let out = smp(
            POD_KIND,
            json!({"spec": {"containers": original}}),
            json!({"spec": {"containers": patch}}),
        );
        let list = out["spec"]["containers"].as_array().unwrap();
        assert_eq!(list.len(), n);
        assert_eq!(list[0], json!({"name": format!("c{}", n - 1), "x": n - 1}));
    }

    #[test]
    fn non_object_original_is_treated_as_empty() {
        assert_eq!(smp(POD_KIND, json!(null), json!({"a": 1})), json!({"a": 1}));
    }

    #[test]
    fn applying_the_same_apply_patch_twice_is_stable() {
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}, {"name": "new"}],
            "containers": [{"name": "new", "image": "n:1"}, {"name": "app", "image": "app:3"}]
        }}}});
        let once = smp(DEPLOYMENT, deployment(), patch.clone());
        let twice = smp(DEPLOYMENT, once.clone(), patch);
        assert_eq!(once, twice);
        assert_eq!(
            names(&once["spec"]["template"]["spec"]["containers"]),
            ["sidecar", "app", "new"]
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn arb_json() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                (0i64..3).prop_map(|n| json!(n)),
                prop_oneof![
                    Just("a"),
                    Just("b"),
                    Just("delete"),
                    Just("replace"),
                    Just("merge")
                ]
                .prop_map(|s| json!(s)),
            ];
            let keys = prop_oneof![
                Just("name".to_string()),
                Just("spec".to_string()),
                Just("containers".to_string()),
                Just("env".to_string()),
                Just("metadata".to_string()),
                Just("finalizers".to_string()),
                Just("$patch".to_string()),
                Just("$retainKeys".to_string()),
                Just("$setElementOrder/containers".to_string()),
                Just("$deleteFromPrimitiveList/finalizers".to_string()),
                Just("$setElementOrder".to_string()),
            ];
            leaf.prop_recursive(5, 40, 4, move |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::btree_map(keys.clone(), inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #[test]
            fn arbitrary_patches_never_panic(original in arb_json(), patch in arb_json()) {
                for kind in [POD_KIND, DEPLOYMENT, PatchKindHint::UNKNOWN] {
                    let _ = apply(&original, &patch, kind);
                }
            }
        }
    }
}
