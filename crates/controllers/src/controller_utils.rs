//! What kube-controller-manager's `controller_utils.go` gives every workload controller:
//! pod predicates (active, ready, available), the order in which surplus pods are deleted,
//! slow-start batches, the pod a template stands for, the pod-template hash, replica-set
//! orderings, controller references, label-selector conversion, and a wall clock derived
//! from the controller's (possibly fake) clock.
//!
//! Everything here is a pure function of its arguments (plus the clock it is handed), so it
//! is unit-tested without a server.

use api::labels::LabelSelector as Selector;
use client::clock::SharedClock;
use client::workqueue::WorkQueue as _;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

/// The size of the first batch of a slow start (kube-controller-manager's
/// `SlowStartInitialBatchSize`).
pub const SLOW_START_INITIAL_BATCH_SIZE: usize = 1;

/// The annotation through which users rank pods for deletion (lower goes first).
pub const POD_DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Wall-clock time for comparisons with the timestamps objects carry (conditions,
/// creation), read from the controller's clock so that a fake clock moves it too: it is the
/// system time when the clock was adopted, plus the time that clock has advanced since.
#[derive(Clone)]
pub struct WallClock {
    clock: SharedClock,
    base_instant: Instant,
    base_wall: Timestamp,
}

impl std::fmt::Debug for WallClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WallClock")
            .field("base_wall", &self.base_wall)
            .finish_non_exhaustive()
    }
}

impl WallClock {
    /// A wall clock that starts at the current system time and advances with `clock`.
    pub fn new(clock: SharedClock) -> WallClock {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let now = Timestamp::new(
            i64::try_from(since.as_secs()).unwrap_or(0),
            i32::try_from(since.subsec_nanos()).unwrap_or(0),
        )
        .unwrap_or(Timestamp::UNIX_EPOCH);
        Self::starting_at(clock, now)
    }

    /// A wall clock that reads `start` now and advances with `clock` (for tests).
    pub fn starting_at(clock: SharedClock, start: Timestamp) -> WallClock {
        WallClock {
            base_instant: clock.now(),
            clock,
            base_wall: start,
        }
    }

    /// The current wall time, with the sub-second precision objects do not keep.
    pub fn now_precise(&self) -> Timestamp {
        let elapsed = self.clock.since(self.base_instant);
        self.base_wall
            .checked_add(elapsed)
            .unwrap_or(self.base_wall)
    }

    /// The current wall time truncated to whole seconds, as Kubernetes serializes
    /// `metav1.Time`: a condition stamped with it compares equal to itself read back.
    pub fn now(&self) -> Timestamp {
        truncate_to_second(self.now_precise())
    }

    /// [`WallClock::now`] as a `metav1.Time`.
    pub fn now_time(&self) -> Time {
        Time(self.now())
    }

    /// The controller's monotonic clock.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }
}

/// The labels of an object that has none, to borrow in their place.
pub static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// A pod's labels (empty if it has none), borrowed from the pod.
pub fn pod_labels(pod: &Pod) -> &BTreeMap<String, String> {
    pod.metadata.labels.as_ref().unwrap_or(&NO_LABELS)
}

/// Ends one work-queue item after its sync, as client-go's controllers do: a success
/// forgets the key's failures; a failure (`what` names the object in the log) is retried
/// with the queue's per-key backoff; either way the key is marked done, so another worker
/// may take it.
pub fn finish_sync<E: std::fmt::Display>(
    queue: &client::workqueue::RateLimitingQueue<String>,
    key: String,
    result: Result<(), E>,
    what: &str,
) {
    match result {
        Ok(()) => queue.forget(&key),
        Err(e) => {
            tracing::warn!(key, error = %e, "syncing {what} failed; retrying with backoff");
            queue.add_rate_limited(key.clone());
        }
    }
    queue.done(&key);
}

/// `t` without its fraction of a second.
pub fn truncate_to_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// The owner reference that marks the object's managing controller (`controller: true`),
/// if it has one.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// A controller reference to the object `owner` of kind `kind` in `api_version`, as
/// `metav1.NewControllerRef` makes it (`controller` and `blockOwnerDeletion` true). `None`
/// when the owner has no uid yet (it was never stored).
pub fn new_controller_ref(
    owner: &ObjectMeta,
    api_version: &str,
    kind: &str,
) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: owner.name.clone().unwrap_or_default(),
        uid: owner.uid.clone().filter(|u| !u.is_empty())?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// Converts an API label selector to a matcher, as `metav1.LabelSelectorAsSelector` does:
/// `matchLabels` and `matchExpressions` (`In`, `NotIn`, `Exists`, `DoesNotExist`) ANDed; an
/// empty selector matches everything.
///
/// # Errors
/// An unknown operator, `In`/`NotIn` without values, `Exists`/`DoesNotExist` with values,
/// or an invalid key or value (the message says which).
pub fn label_selector_as_selector(sel: &LabelSelector) -> Result<Selector, String> {
    use api::labels::{validate_label_key, validate_label_value};
    // Keys and values are checked before they are joined into selector syntax, so that no
    // value can smuggle in another requirement (`a,b`).
    let mut parts: Vec<String> = Vec::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        validate_label_key(k).map_err(|e| e.to_string())?;
        validate_label_value(k, v).map_err(|e| e.to_string())?;
        parts.push(format!("{k}={v}"));
    }
    for req in sel.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default();
        validate_label_key(&req.key).map_err(|e| e.to_string())?;
        for v in values {
            validate_label_value(&req.key, v).map_err(|e| e.to_string())?;
        }
        let list = || match values {
            [only] if only.is_empty() => ",".to_string(),
            _ => values.join(","),
        };
        let part = match req.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    return Err(format!(
                        "for 'in', 'notin' operators, values set can't be empty (key {:?})",
                        req.key
                    ));
                }
                let word = if req.operator == "In" { "in" } else { "notin" };
                format!("{} {word} ({})", req.key, list())
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    return Err(format!(
                        "values set must be empty for exists and does not exist (key {:?})",
                        req.key
                    ));
                }
                if req.operator == "Exists" {
                    req.key.clone()
                } else {
                    format!("!{}", req.key)
                }
            }
            op => return Err(format!("{op:?} is not a valid label selector operator")),
        };
        parts.push(part);
    }
    Selector::parse(&parts.join(",")).map_err(|e| e.to_string())
}

/// Whether a selector would select every object (Kubernetes refuses to act on those).
pub fn selects_everything(sel: &LabelSelector) -> bool {
    sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty())
}

fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Whether the pod still counts towards its controller's replicas: not Succeeded, not
/// Failed, not being deleted.
pub fn is_pod_active(pod: &Pod) -> bool {
    let phase = pod_phase(pod);
    phase != "Succeeded" && phase != "Failed" && pod.metadata.deletion_timestamp.is_none()
}

/// The pod's first `Ready` condition.
fn ready_condition(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// Whether the pod's (first) `Ready` condition is `True`.
pub fn is_pod_ready(pod: &Pod) -> bool {
    ready_condition(pod).is_some_and(|c| c.status == "True")
}

/// Whether the pod is available: ready, and ready for at least `min_ready_seconds` before
/// `now` (immediately when that is zero).
pub fn is_pod_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    let Some(c) = ready_condition(pod).filter(|c| c.status == "True") else {
        return false;
    };
    if min_ready_seconds <= 0 {
        return true;
    }
    let Some(since) = c.last_transition_time.as_ref() else {
        return false;
    };
    since
        .0
        .checked_add(Duration::from_secs(min_ready_seconds.unsigned_abs().into()))
        .is_ok_and(|available_at| available_at < now)
}

/// The time the pod became ready (`None` if it is not ready or the time is unknown).
fn pod_ready_time(pod: &Pod) -> Option<Timestamp> {
    if !is_pod_ready(pod) {
        return None;
    }
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref().map(|t| t.0))
}

fn max_container_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0).max(0))
        .unwrap_or(0)
}

fn deletion_cost(pod: &Pod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST_ANNOTATION))
        .and_then(|v| v.parse::<i32>().ok())
        .unwrap_or(0)
}

fn phase_ordinal(pod: &Pod) -> u8 {
    match pod_phase(pod) {
        "Unknown" => 1,
        "Running" => 2,
        // Pending, and anything unexpected, rank with the earliest phase.
        _ => 0,
    }
}

/// The rank of `t` on a logarithmic scale of its age at `now` (−1 for no age), so that
/// pods of about the same age are treated alike.
fn log_rank(t: Timestamp, now: Timestamp) -> i64 {
    let age = now.as_nanosecond() - t.as_nanosecond();
    if age > 0 {
        (age as f64).log2() as i64
    } else {
        -1
    }
}

/// Compares two optional times, the unknown one and then the later one first.
fn after_or_zero(a: Option<Timestamp>, b: Option<Timestamp>) -> bool {
    match (a, b) {
        (None, _) | (_, None) => a.is_none(),
        (Some(a), Some(b)) => a > b,
    }
}

/// Whether `a` should be deleted before `b`, given each pod's rank (the number of related
/// active pods on its node) and the time `now`. Kubernetes' order, rule by rule:
/// 1. unassigned before assigned; 2. Pending, then Unknown, then Running; 3. not ready
///    before ready; 4. lower `controller.kubernetes.io/pod-deletion-cost` first; 5. higher
///    rank (doubled-up nodes) first; 6. among ready pods, ready for less time first;
///    7. more container restarts first; 8. created more recently first.
///
/// Times in 6 and 8 compare on a logarithmic scale of their age; pods in the same bucket
/// are ordered by uid, a pseudo-random but stable order.
pub fn deletion_less(a: &Pod, rank_a: usize, b: &Pod, rank_b: usize, now: Timestamp) -> bool {
    let node = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let (na, nb) = (node(a), node(b));
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return na.is_empty();
    }
    let (pa, pb) = (phase_ordinal(a), phase_ordinal(b));
    if pa != pb {
        return pa < pb;
    }
    let (ra, rb) = (is_pod_ready(a), is_pod_ready(b));
    if ra != rb {
        return !ra;
    }
    let (ca, cb) = (deletion_cost(a), deletion_cost(b));
    if ca != cb {
        return ca < cb;
    }
    if rank_a != rank_b {
        return rank_a > rank_b;
    }
    let uid = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
    if ra && rb {
        let (ta, tb) = (pod_ready_time(a), pod_ready_time(b));
        if ta != tb {
            return match (ta, tb) {
                (Some(ta), Some(tb)) => match log_rank(ta, now).cmp(&log_rank(tb, now)) {
                    Ordering::Equal => uid(a) < uid(b),
                    o => o == Ordering::Less,
                },
                _ => after_or_zero(ta, tb),
            };
        }
    }
    let (xa, xb) = (max_container_restarts(a), max_container_restarts(b));
    if xa != xb {
        return xa > xb;
    }
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let (ta, tb) = (created(a), created(b));
    if ta != tb {
        return match (ta, tb) {
            (Some(ta), Some(tb)) => match log_rank(ta, now).cmp(&log_rank(tb, now)) {
                Ordering::Equal => uid(a) < uid(b),
                o => o == Ordering::Less,
            },
            _ => after_or_zero(ta, tb),
        };
    }
    false
}

/// Sorts `items` by `less` with a merge sort, which accepts any comparison: Kubernetes'
/// deletion order is not a strict total order in corner cases, and the standard library's
/// sorts may panic on such orders.
pub fn sort_by_less<T: Clone>(items: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    if items.len() <= 1 {
        return;
    }
    let mid = items.len() / 2;
    sort_by_less(&mut items[..mid], less);
    sort_by_less(&mut items[mid..], less);
    let mut merged = Vec::with_capacity(items.len());
    let (mut i, mut j) = (0, mid);
    while i < mid && j < items.len() {
        // Take from the right only when it is strictly first: keeps equal items in order.
        if less(&items[j], &items[i]) {
            merged.push(items[j].clone());
            j += 1;
        } else {
            merged.push(items[i].clone());
            i += 1;
        }
    }
    merged.extend_from_slice(&items[i..mid]);
    merged.extend_from_slice(&items[j..]);
    items.clone_from_slice(&merged);
}

/// Runs `f` `count` times in batches of concurrent calls: first `initial` calls, then
/// twice as many after every batch that fully succeeded. After a batch with a failure, no
/// further batch starts. Returns how many calls succeeded and the first error, so that a
/// request that fails (quota, an invalid template) is tried a few times, not `count` times.
pub async fn slow_start_batch<F, Fut, E>(count: usize, initial: usize, f: F) -> (usize, Option<E>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Send + 'static,
{
    let mut remaining = count;
    let mut successes = 0;
    let mut batch = remaining.min(initial.max(1));
    while batch > 0 {
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..batch {
            calls.spawn(f());
        }
        let mut first_error = None;
        let mut failed = false;
        while let Some(done) = calls.join_next().await {
            match done {
                Ok(Ok(())) => successes += 1,
                Ok(Err(e)) => {
                    failed = true;
                    first_error.get_or_insert(e);
                }
                // A call that panicked or was cancelled counts as failed.
                Err(_) => failed = true,
            }
        }
        if failed {
            return (successes, first_error);
        }
        remaining -= batch;
        batch = remaining.min(batch * 2);
    }
    (successes, None)
}

/// The name prefix of pods a controller called `controller_name` creates: `name-`, or the
/// bare name where the dash would make it too long for a name.
pub fn pods_prefix(controller_name: &str) -> String {
    if controller_name.len() < 253 {
        format!("{controller_name}-")
    } else {
        controller_name.to_string()
    }
}

/// The pod `template` stands for, as its controller `parent_name` creates it: the template's
/// labels, annotations and finalizers, a `generateName` of `parent_name-`, the controller
/// reference, and the template's spec.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    parent_name: &str,
    controller_ref: Option<OwnerReference>,
) -> Pod {
    let meta = template.metadata.as_ref();
    Pod {
        metadata: ObjectMeta {
            labels: meta.and_then(|m| m.labels.clone()),
            annotations: meta.and_then(|m| m.annotations.clone()),
            finalizers: meta.and_then(|m| m.finalizers.clone()),
            generate_name: Some(pods_prefix(parent_name)),
            owner_references: controller_ref.map(|r| vec![r]),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// FNV-1a, 32 bits: the hash Kubernetes names pod templates with.
#[derive(Debug, Clone, Copy)]
pub struct Fnv32a(u32);

impl Default for Fnv32a {
    fn default() -> Self {
        Fnv32a(0x811c_9dc5)
    }
}

impl Fnv32a {
    /// Feeds `bytes` into the hash.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u32::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0193);
        }
    }

    /// The hash of everything written so far.
    pub fn finish(&self) -> u32 {
        self.0
    }
}

/// Maps every byte of `s` into [`api::object::NAME_ALPHABET`], as `rand.SafeEncodeString`
/// does.
pub fn safe_encode_string(s: &str) -> String {
    use api::object::NAME_ALPHABET;
    s.bytes()
        .map(|b| char::from(NAME_ALPHABET[usize::from(b) % NAME_ALPHABET.len()]))
        .collect()
}

/// The `pod-template-hash` of a template: FNV-32a over a canonical serialization of the
/// template, then over the collision count (when there is one) as eight little-endian
/// bytes; the decimal value, safely encoded. The same template — semantically the same,
/// see [`crate::semantic`] — always gives the same hash; bumping the collision count gives
/// another.
///
/// Kubernetes hashes Go's debug printing of its structs, which no other program can
/// reproduce; this hashes the template's canonical JSON (maps sorted by key) instead, so
/// hashes differ from a kube-controller-manager's, but keep their shape and their
/// properties.
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut h = Fnv32a::default();
    // Serializing a JSON value cannot fail.
    let bytes = serde_json::to_vec(&crate::semantic::template_value(template)).unwrap_or_default();
    h.write(&bytes);
    if let Some(c) = collision_count {
        let mut buf = [0u8; 8];
        buf[..4].copy_from_slice(&(c as u32).to_le_bytes());
        h.write(&buf);
    }
    safe_encode_string(&h.finish().to_string())
}

/// `spec.replicas` of a replica set (1 when unset, as the API server defaults it; never
/// negative).
pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.replicas.unwrap_or(1).max(0)
}

fn created_at(meta: &ObjectMeta) -> Option<Timestamp> {
    meta.creation_timestamp.as_ref().map(|t| t.0)
}

/// Older first, then by name (`ReplicaSetsByCreationTimestamp`).
pub fn cmp_by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    created_at(&a.metadata)
        .cmp(&created_at(&b.metadata))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Larger first; among equal sizes older first (`ReplicaSetsBySizeOlder`).
pub fn cmp_by_size_older(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    rs_replicas(b)
        .cmp(&rs_replicas(a))
        .then_with(|| cmp_by_creation(a, b))
}

/// Larger first; among equal sizes newer first (`ReplicaSetsBySizeNewer`).
pub fn cmp_by_size_newer(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    rs_replicas(b)
        .cmp(&rs_replicas(a))
        .then_with(|| cmp_by_creation(b, a))
}

/// The message of an API error (the `Status` message when the server sent one).
pub fn error_message(e: &client::rest::Error) -> String {
    match e.status() {
        Some(s) => s.message.clone(),
        None => e.to_string(),
    }
}

/// Whether the server refused a create because the namespace is being deleted (then every
/// create fails, and there is nothing to retry).
pub fn is_namespace_terminating(e: &client::rest::Error) -> bool {
    e.status()
        .is_some_and(|s| s.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
}

/// Why a controller could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The informer factory cannot build REST informers (it has no client).
    #[error(transparent)]
    Factory(#[from] client::cache::FactoryError),
    /// An index the controller needs could not be added to a shared informer.
    #[error("adding the controller's indexes: {0} (build the controllers before starting the informer factory)")]
    Informer(#[from] client::cache::InformerError),
}

/// Replaces the status of `obj` through its status subresource (`PUT .../{name}/status`),
/// with `obj`'s resourceVersion as precondition, and returns the object as stored.
///
/// # Errors
/// 409 Conflict when `obj` is stale, 404 when it is gone, other API or transport errors.
pub async fn update_status<K>(
    client: &client::rest::Client,
    obj: &K,
) -> Result<K, client::rest::Error>
where
    K: k8s_openapi::Resource
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + serde::Serialize
        + serde::de::DeserializeOwned,
    K::Scope: 'static,
{
    let resource = client::rest::ApiResource::of::<K>();
    let meta = obj.metadata();
    let path = format!(
        "{}/status",
        resource.item_path(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or("")
        )
    );
    let body = serde_json::to_vec(obj).map_err(|source| client::rest::Error::Decode {
        context: format!("encoding the body of PUT {path}"),
        source,
    })?;
    let (_, resp) = client
        .request_bytes(
            http::Method::PUT,
            &path,
            Some((bytes::Bytes::from(body), "application/json")),
        )
        .await?;
    serde_json::from_slice(&resp).map_err(|source| client::rest::Error::Decode {
        context: format!("the response of PUT {path}"),
        source,
    })
}

/// Zero as absent, as Go's `omitempty` writes integer fields: statuses compare equal
/// whether a server wrote a zero or left it out.
pub fn nonzero(n: i32) -> Option<i32> {
    (n != 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::clock::FakeClock;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
    use std::sync::Arc;

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[derive(Default, Clone)]
    struct P {
        node: &'static str,
        phase: &'static str,
        ready_since: Option<i64>,
        cost: Option<&'static str>,
        restarts: i32,
        created: Option<i64>,
        uid: &'static str,
    }

    fn pod(p: P) -> Pod {
        let mut conditions = Vec::new();
        if let Some(since) = p.ready_since {
            conditions.push(PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: Some(Time(ts(since))),
                ..Default::default()
            });
        }
        Pod {
            metadata: ObjectMeta {
                name: Some(p.uid.to_string()),
                uid: Some(p.uid.to_string()),
                creation_timestamp: p.created.map(|c| Time(ts(c))),
                annotations: p.cost.map(|c| {
                    BTreeMap::from([(POD_DELETION_COST_ANNOTATION.to_string(), c.to_string())])
                }),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: (!p.node.is_empty()).then(|| p.node.to_string()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(p.phase.to_string()),
                conditions: Some(conditions),
                container_statuses: Some(vec![ContainerStatus {
                    restart_count: p.restarts,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    /// The uids of `pods` in deletion order (ranks all zero unless given).
    fn order(pods: Vec<(Pod, usize)>, now: i64) -> Vec<String> {
        let mut v = pods;
        sort_by_less(&mut v, &|a: &(Pod, usize), b: &(Pod, usize)| {
            deletion_less(&a.0, a.1, &b.0, b.1, ts(now))
        });
        v.iter()
            .map(|(p, _)| p.metadata.uid.clone().unwrap())
            .collect()
    }

    #[test]
    fn deletion_ranking_follows_kubernetes_rules() {
        let base = P {
            node: "n1",
            phase: "Running",
            ready_since: Some(1000),
            created: Some(900),
            ..Default::default()
        };
        let now = 100_000;
        // 1. Unassigned before assigned.
        let a = pod(P {
            uid: "assigned",
            ..base.clone()
        });
        let u = pod(P {
            uid: "unassigned",
            node: "",
            ..base.clone()
        });
        assert_eq!(
            order(vec![(a.clone(), 0), (u, 0)], now),
            ["unassigned", "assigned"]
        );
        // 2. Pending < Unknown < Running.
        let r = pod(P {
            uid: "running",
            ..base.clone()
        });
        let k = pod(P {
            uid: "unknown",
            phase: "Unknown",
            ..base.clone()
        });
        let p = pod(P {
            uid: "pending",
            phase: "Pending",
            ..base.clone()
        });
        assert_eq!(
            order(vec![(r.clone(), 0), (k, 0), (p, 0)], now),
            ["pending", "unknown", "running"]
        );
        // 3. Not ready before ready.
        let nr = pod(P {
            uid: "not-ready",
            ready_since: None,
            ..base.clone()
        });
        assert_eq!(
            order(vec![(r.clone(), 0), (nr, 0)], now),
            ["not-ready", "running"]
        );
        // 4. Lower deletion cost first, before node rank.
        let cheap = pod(P {
            uid: "cheap",
            cost: Some("-5"),
            ..base.clone()
        });
        let dear = pod(P {
            uid: "dear",
            cost: Some("10"),
            ..base.clone()
        });
        assert_eq!(
            order(vec![(dear.clone(), 5), (cheap, 0), (r.clone(), 1)], now),
            ["cheap", "running", "dear"]
        );
        // An unparsable cost counts as zero.
        let junk = pod(P {
            uid: "junk",
            cost: Some("lots"),
            ..base.clone()
        });
        assert_eq!(order(vec![(dear, 0), (junk, 0)], now), ["junk", "dear"]);
        // 5. Doubled-up nodes first.
        let lonely = pod(P {
            uid: "lonely",
            ..base.clone()
        });
        let crowded = pod(P {
            uid: "crowded",
            ..base.clone()
        });
        assert_eq!(
            order(vec![(lonely, 1), (crowded, 3)], now),
            ["crowded", "lonely"]
        );
        // 6. Ready for less time first (different log buckets).
        let fresh = pod(P {
            uid: "fresh",
            ready_since: Some(now - 10),
            ..base.clone()
        });
        let seasoned = pod(P {
            uid: "seasoned",
            ready_since: Some(now - 5000),
            ..base.clone()
        });
        assert_eq!(
            order(vec![(seasoned, 0), (fresh, 0)], now),
            ["fresh", "seasoned"]
        );
        // 7. More restarts first.
        let flaky = pod(P {
            uid: "flaky",
            restarts: 4,
            ..base.clone()
        });
        let steady = pod(P {
            uid: "steady",
            restarts: 1,
            ..base.clone()
        });
        assert_eq!(
            order(vec![(steady, 0), (flaky, 0)], now),
            ["flaky", "steady"]
        );
        // 8. Newer first; no creation time before any.
        let young = pod(P {
            uid: "young",
            created: Some(now - 30),
            ..base.clone()
        });
        let old = pod(P {
            uid: "old",
            created: Some(now - 50_000),
            ..base.clone()
        });
        let unborn = pod(P {
            uid: "unborn",
            created: None,
            ..base.clone()
        });
        assert_eq!(
            order(vec![(old, 0), (young, 0), (unborn, 0)], now),
            ["unborn", "young", "old"]
        );
        // Same logarithmic bucket: by uid.
        let b1 = pod(P {
            uid: "b",
            created: Some(now - 1000),
            ..base.clone()
        });
        let a1 = pod(P {
            uid: "a",
            created: Some(now - 1001),
            ..base.clone()
        });
        assert_eq!(order(vec![(b1, 0), (a1, 0)], now), ["a", "b"]);
    }

    #[test]
    fn sort_never_panics_on_inconsistent_orders() {
        // A comparison that says everything is first: no total order at all.
        let mut v: Vec<u32> = (0..200).rev().collect();
        sort_by_less(&mut v, &|_: &u32, _: &u32| true);
        assert_eq!(v.len(), 200);
        let mut w: Vec<u32> = vec![5, 3, 9, 1, 1, 7];
        sort_by_less(&mut w, &|a: &u32, b: &u32| a < b);
        assert_eq!(w, [1, 1, 3, 5, 7, 9]);
    }

    #[test]
    fn readiness_and_availability() {
        let p = pod(P {
            ready_since: Some(100),
            phase: "Running",
            ..Default::default()
        });
        assert!(is_pod_ready(&p));
        assert!(is_pod_available(&p, 0, ts(100)));
        // Available only strictly after minReadySeconds.
        assert!(!is_pod_available(&p, 10, ts(110)));
        assert!(is_pod_available(&p, 10, ts(111)));
        let nr = pod(P {
            phase: "Running",
            ..Default::default()
        });
        assert!(!is_pod_ready(&nr));
        assert!(!is_pod_available(&nr, 0, ts(1000)));
        let mut done = pod(P {
            phase: "Succeeded",
            ..Default::default()
        });
        assert!(!is_pod_active(&done));
        done.status.as_mut().unwrap().phase = Some("Pending".into());
        assert!(is_pod_active(&done));
        done.metadata.deletion_timestamp = Some(Time(ts(5)));
        assert!(!is_pod_active(&done));
    }

    #[tokio::test]
    async fn slow_start_doubles_batches_and_stops_at_a_failure() {
        // All succeed: 1, 2, 4, 8, then the remaining 5 (20 in all).
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let (ok, err) = slow_start_batch(20, 1, move || {
            let c = c.clone();
            async move {
                c.fetch_add(1, AtomicOrdering::SeqCst);
                Ok::<(), String>(())
            }
        })
        .await;
        assert_eq!((ok, err), (20, None));
        assert_eq!(calls.load(AtomicOrdering::SeqCst), 20);

        // The 4th call fails (it is in the third batch, of 4): that batch completes, and
        // nothing after it starts: 1 + 2 + 4 = 7 calls, 6 successes.
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let (ok, err) = slow_start_batch(100, 1, move || {
            let n = c.fetch_add(1, AtomicOrdering::SeqCst);
            async move {
                if n == 3 {
                    Err("quota exceeded".to_string())
                } else {
                    Ok(())
                }
            }
        })
        .await;
        assert_eq!(ok, 6);
        assert_eq!(err.as_deref(), Some("quota exceeded"));
        assert_eq!(calls.load(AtomicOrdering::SeqCst), 7);

        // Failing from the start: exactly one call.
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let (ok, err) = slow_start_batch(500, SLOW_START_INITIAL_BATCH_SIZE, move || {
            c.fetch_add(1, AtomicOrdering::SeqCst);
            async { Err::<(), _>("invalid") }
        })
        .await;
        assert_eq!((ok, err), (0, Some("invalid")));
        assert_eq!(calls.load(AtomicOrdering::SeqCst), 1);
        assert_eq!(
            slow_start_batch(0, 1, || async { Ok::<(), ()>(()) }).await,
            (0, None)
        );
    }

    fn template(json: &str) -> PodTemplateSpec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn hash_is_stable_and_separates_templates_and_collisions() {
        assert_eq!(Fnv32a::default().finish(), 0x811c_9dc5);
        let mut h = Fnv32a::default();
        h.write(b"a");
        assert_eq!(h.finish(), 0xe40c_292c);
        let mut h = Fnv32a::default();
        h.write(b"foobar");
        assert_eq!(h.finish(), 0xbf9c_f968);
        assert_eq!(safe_encode_string("0123456789"), "456789bcdf");

        let a = template(
            r#"{"metadata":{"labels":{"app":"web","tier":"fe"}},
                "spec":{"containers":[{"name":"web","image":"nginx:1.27"}]}}"#,
        );
        // The same template written in another order.
        let b = template(
            r#"{"spec":{"containers":[{"image":"nginx:1.27","name":"web"}]},
                "metadata":{"labels":{"tier":"fe","app":"web"}}}"#,
        );
        let c = template(
            r#"{"metadata":{"labels":{"app":"web","tier":"fe"}},
                "spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}"#,
        );
        let ha = compute_hash(&a, None);
        assert_eq!(ha, compute_hash(&b, None));
        assert_ne!(ha, compute_hash(&c, None));
        assert_ne!(ha, compute_hash(&a, Some(1)));
        assert_eq!(compute_hash(&a, Some(1)), compute_hash(&b, Some(1)));
        assert_ne!(compute_hash(&a, Some(1)), compute_hash(&a, Some(2)));
        // A u32 in decimal is at most ten digits, which encode to the ten characters
        // `456789bcdf`: always a valid label value and name suffix.
        assert!(ha.len() <= 10 && !ha.is_empty());
        assert!(ha.bytes().all(|b| b"456789bcdf".contains(&b)));
        // Pinned: the hash must not change between releases, or every deployment would
        // roll out again after an upgrade.
        assert_eq!(ha, compute_hash(&a.clone(), None));
        // FNV-32a of `{"metadata":{"labels":{"app":"web","tier":"fe"}},"spec":{"containers":
        // [{"image":"nginx:1.27","name":"web"}]}}` is 169522518.
        assert_eq!(ha, "5bf96695d");
    }

    #[test]
    fn selector_conversion() {
        let sel = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["fe".into(), "be".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        let s = label_selector_as_selector(&sel).unwrap();
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "fe"), ("canary", "1")])));
        assert!(label_selector_as_selector(&LabelSelector::default())
            .unwrap()
            .is_empty());
        assert!(selects_everything(&LabelSelector::default()));
        assert!(!selects_everything(&sel));
        for (op, values) in [
            ("In", None),
            ("NotIn", Some(vec![])),
            ("Exists", Some(vec!["x".to_string()])),
            ("Near", Some(vec!["x".to_string()])),
        ] {
            let bad = LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "k".into(),
                    operator: op.into(),
                    values,
                }]),
                ..Default::default()
            };
            assert!(label_selector_as_selector(&bad).is_err(), "{op}");
        }
        let bad_value = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "a,b".into())])),
            ..Default::default()
        };
        assert!(label_selector_as_selector(&bad_value).is_err());
        let empty_value = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), String::new())])),
            ..Default::default()
        };
        let s = label_selector_as_selector(&empty_value).unwrap();
        assert!(s.matches(&labels(&[("app", "")])));
        assert!(!s.matches(&labels(&[("app", "x")])));
    }

    #[test]
    fn template_to_pod() {
        let t = template(
            r#"{"metadata":{"name":"ignored","labels":{"app":"web"},
                "annotations":{"a":"1"},"finalizers":["f"]},
                "spec":{"containers":[{"name":"web","image":"nginx"}]}}"#,
        );
        let owner = ObjectMeta {
            name: Some("web-abc".into()),
            uid: Some("u-1".into()),
            ..Default::default()
        };
        let r = new_controller_ref(&owner, "apps/v1", "ReplicaSet").unwrap();
        let p = pod_from_template(&t, "web-abc", Some(r.clone()));
        assert_eq!(p.metadata.generate_name.as_deref(), Some("web-abc-"));
        assert_eq!(p.metadata.name, None);
        assert_eq!(p.metadata.labels.unwrap()["app"], "web");
        assert_eq!(p.metadata.annotations.unwrap()["a"], "1");
        assert_eq!(p.metadata.finalizers.unwrap(), ["f"]);
        assert_eq!(
            p.metadata.owner_references.unwrap(),
            std::slice::from_ref(&r)
        );
        assert_eq!(r.controller, Some(true));
        assert_eq!(r.block_owner_deletion, Some(true));
        assert_eq!(
            p.spec.unwrap().containers[0].image.as_deref(),
            Some("nginx")
        );
        assert!(new_controller_ref(&ObjectMeta::default(), "apps/v1", "ReplicaSet").is_none());
        assert_eq!(pods_prefix(&"x".repeat(253)), "x".repeat(253));
    }

    #[test]
    fn wall_clock_follows_a_fake_clock() {
        let fake = FakeClock::new();
        let wall = WallClock::starting_at(fake.shared(), ts(1000));
        assert_eq!(wall.now(), ts(1000));
        fake.step(Duration::from_millis(2500));
        assert_eq!(wall.now(), ts(1002));
        assert_eq!(wall.now_precise().as_millisecond(), 1_002_500);
    }
}
