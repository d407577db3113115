//! The arithmetic and bookkeeping of Deployments, as kube-controller-manager's
//! `deployment/util` package does it: which ReplicaSet is new, revisions and the
//! annotations that carry them, `maxSurge`/`maxUnavailable` resolution, proportions for
//! scaling during a rollout, completeness and progress, conditions. Pure functions, so
//! they are unit-tested without a server.

use crate::controller_utils::{cmp_by_creation, rs_replicas};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetCondition,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;
use std::time::Duration;

/// The revision of a ReplicaSet within its Deployment (and of the Deployment: its newest).
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
/// The earlier revisions a ReplicaSet served (it was rolled back to).
pub const REVISION_HISTORY_ANNOTATION: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's `spec.replicas` when the ReplicaSet was last scaled.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/desired-replicas";
/// `spec.replicas + maxSurge` when the ReplicaSet was last scaled.
pub const MAX_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/max-replicas";
/// The revision a Deployment asks to be rolled back to (the extensions/v1beta1 rollback
/// subresource's annotation; 0 = the previous revision).
pub const DEPRECATED_ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
/// `kubectl apply`'s record of the last applied configuration.
pub const LAST_APPLIED_CONFIG_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The label that ties a ReplicaSet and its pods to one pod template.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// The longest `revision-history` annotation kept (about 100 revisions).
pub const MAX_REV_HISTORY_LENGTH_IN_CHARS: usize = 2000;

/// Condition type: the Deployment has its minimum availability.
pub const AVAILABLE: &str = "Available";
/// Condition type: the rollout progresses (or is complete, or stuck).
pub const PROGRESSING: &str = "Progressing";
/// Condition type: pods of a ReplicaSet could not be created or deleted.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// Progressing: a ReplicaSet was scaled during the rollout.
pub const REPLICA_SET_UPDATED_REASON: &str = "ReplicaSetUpdated";
/// Progressing=False: the new ReplicaSet could not be created.
pub const FAILED_RS_CREATE_REASON: &str = "ReplicaSetCreateError";
/// Progressing: the new ReplicaSet was created.
pub const NEW_REPLICA_SET_REASON: &str = "NewReplicaSetCreated";
/// Progressing: an existing ReplicaSet is the new one.
pub const FOUND_NEW_RS_REASON: &str = "FoundNewReplicaSet";
/// Progressing: the rollout is complete.
pub const NEW_RS_AVAILABLE_REASON: &str = "NewReplicaSetAvailable";
/// Progressing=False: no progress within `progressDeadlineSeconds`.
pub const TIMED_OUT_REASON: &str = "ProgressDeadlineExceeded";
/// Progressing=Unknown: the Deployment is paused.
pub const PAUSED_DEPLOY_REASON: &str = "DeploymentPaused";
/// Progressing=Unknown: the Deployment was resumed.
pub const RESUMED_DEPLOY_REASON: &str = "DeploymentResumed";
/// Available=True.
pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
/// Available=False.
pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
/// Event: the revision to roll back to does not exist.
pub const ROLLBACK_REVISION_NOT_FOUND: &str = "DeploymentRollbackRevisionNotFound";
/// Event: the template already is the one of the revision.
pub const ROLLBACK_TEMPLATE_UNCHANGED: &str = "DeploymentRollbackTemplateUnchanged";
/// Event: rolled back.
pub const ROLLBACK_DONE: &str = "DeploymentRollback";

/// `spec.replicas` (1 when unset, as the API server defaults it; never negative).
pub fn replicas(d: &Deployment) -> i32 {
    d.spec.replicas.unwrap_or(1).max(0)
}

/// Whether the Deployment rolls out with `RollingUpdate` (also when the type is unset,
/// which the API server defaults to it).
pub fn is_rolling_update(d: &Deployment) -> bool {
    d.spec
        .strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .is_none_or(|t| t == "RollingUpdate")
}

/// Whether the Deployment rolls out with `Recreate`.
pub fn is_recreate(d: &Deployment) -> bool {
    d.spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate")
}

/// The value of an int-or-percent against `total`: an integer as it is, `"N%"` as N % of
/// `total`, rounded up or down.
///
/// # Errors
/// A string that is not a percentage, or whose number does not parse.
pub fn int_or_percent(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match v {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let Some(number) = s.strip_suffix('%') else {
                return Err(format!(
                    "invalid value for IntOrString: invalid type: string is not a percentage: {s:?}"
                ));
            };
            let pct: i64 = number
                .parse()
                .map_err(|e| format!("invalid value for IntOrString: invalid value {s:?}: {e}"))?;
            let exact = pct as f64 * f64::from(total) / 100.0;
            let v = if round_up {
                exact.ceil()
            } else {
                exact.floor()
            };
            Ok(v.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32)
        }
    }
}

/// Resolves `maxSurge` (rounded up) and `maxUnavailable` (rounded down) against `desired`
/// replicas; unset values are 0. Should both come to 0 (percentages rounded down), one pod
/// may be unavailable, so that the rollout can proceed.
///
/// # Errors
/// As [`int_or_percent`].
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    desired: i32,
) -> Result<(i32, i32), String> {
    let zero = IntOrString::Int(0);
    let surge = int_or_percent(max_surge.unwrap_or(&zero), desired, true)?.max(0);
    let mut unavailable = int_or_percent(max_unavailable.unwrap_or(&zero), desired, false)?.max(0);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok((surge, unavailable))
}

fn fenceposts(d: &Deployment) -> Result<(i32, i32), String> {
    let ru = d
        .spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref());
    resolve_fenceposts(
        ru.and_then(|r| r.max_surge.as_ref()),
        ru.and_then(|r| r.max_unavailable.as_ref()),
        replicas(d),
    )
}

/// The most pods a rolling Deployment may have unavailable (0 for Recreate or zero
/// replicas, never more than `spec.replicas`; an invalid value counts as 0).
pub fn max_unavailable(d: &Deployment) -> i32 {
    if !is_rolling_update(d) || replicas(d) == 0 {
        return 0;
    }
    let (_, unavailable) = fenceposts(d).unwrap_or((0, 0));
    unavailable.min(replicas(d))
}

/// The most pods a rolling Deployment may have above `spec.replicas` (0 for Recreate; an
/// invalid value counts as 0).
pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling_update(d) {
        return 0;
    }
    fenceposts(d).map(|(s, _)| s).unwrap_or(0)
}

/// The fewest available pods a rolling Deployment keeps (0 for Recreate).
pub fn min_available(d: &Deployment) -> i32 {
    if !is_rolling_update(d) {
        return 0;
    }
    replicas(d) - max_unavailable(d)
}

fn annotation<'a>(rs: &'a ReplicaSet, key: &str) -> Option<&'a str> {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The revision of a ReplicaSet (0 without the annotation).
///
/// # Errors
/// An annotation that is not an integer.
pub fn revision(rs: &ReplicaSet) -> Result<i64, std::num::ParseIntError> {
    annotation(rs, REVISION_ANNOTATION).map_or(Ok(0), str::parse)
}

/// The highest revision among `rss` (unparsable ones skipped).
pub fn max_revision(rss: &[&ReplicaSet]) -> i64 {
    rss.iter()
        .filter_map(|rs| revision(rs).ok())
        .max()
        .unwrap_or(0)
        .max(0)
}

/// The second-highest revision among `rss`: the one before the current.
pub fn last_revision(rss: &[&ReplicaSet]) -> i64 {
    let (mut max, mut second) = (0, 0);
    for v in rss.iter().filter_map(|rs| revision(rs).ok()) {
        if v >= max {
            second = max;
            max = v;
        } else if v > second {
            second = v;
        }
    }
    second
}

/// Annotations never copied between a Deployment and its ReplicaSets.
pub fn skip_copy_annotation(key: &str) -> bool {
    matches!(
        key,
        LAST_APPLIED_CONFIG_ANNOTATION
            | REVISION_ANNOTATION
            | REVISION_HISTORY_ANNOTATION
            | DESIRED_REPLICAS_ANNOTATION
            | MAX_REPLICAS_ANNOTATION
            | DEPRECATED_ROLLBACK_TO
    )
}

/// Copies the Deployment's annotations (but those of [`skip_copy_annotation`]) onto the
/// ReplicaSet; true if that changed it.
pub fn copy_deployment_annotations_to_replica_set(d: &Deployment, rs: &mut ReplicaSet) -> bool {
    let target = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if skip_copy_annotation(k) || target.get(k) == Some(v) {
            continue;
        }
        target.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// Sets the Deployment's annotations to the ReplicaSet's (a rollback to it), keeping the
/// Deployment's own [`skip_copy_annotation`] ones.
pub fn set_deployment_annotations_to(d: &mut Deployment, rs: &ReplicaSet) {
    let mut annotations: BTreeMap<String, String> = d
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| skip_copy_annotation(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in rs.metadata.annotations.iter().flatten() {
        if !skip_copy_annotation(k) {
            annotations.insert(k.clone(), v.clone());
        }
    }
    d.metadata.annotations = Some(annotations);
}

/// Brings the new ReplicaSet's annotations up to date: the Deployment's annotations, the
/// revision `new_revision` when it is higher than the ReplicaSet's (keeping the old one in
/// `revision-history`, at most `history_limit` characters of it), and, for a ReplicaSet
/// about to be created (`exists` false), the desired and max replicas. True if anything
/// changed.
pub fn set_new_replica_set_annotations(
    d: &Deployment,
    rs: &mut ReplicaSet,
    new_revision: &str,
    exists: bool,
    history_limit: usize,
) -> bool {
    let mut changed = copy_deployment_annotations_to_replica_set(d, rs);
    let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let old_revision = annotations.get(REVISION_ANNOTATION).cloned();
    let old_int = match old_revision.as_deref() {
        None | Some("") => 0,
        Some(s) => match s.parse::<i64>() {
            Ok(v) => v,
            Err(_) => {
                tracing::warn!(revision = s, "the replica set's revision is not an integer");
                return false;
            }
        },
    };
    let Ok(new_int) = new_revision.parse::<i64>() else {
        return false;
    };
    if old_int < new_int {
        annotations.insert(REVISION_ANNOTATION.to_string(), new_revision.to_string());
        changed = true;
        if let Some(old) = old_revision {
            // A rollback to this ReplicaSet: remember the revisions it served before.
            let history = annotations
                .get(REVISION_HISTORY_ANNOTATION)
                .cloned()
                .unwrap_or_default();
            if history.is_empty() {
                annotations.insert(REVISION_HISTORY_ANNOTATION.to_string(), old);
            } else {
                let mut entries: Vec<&str> = history.split(',').collect();
                let mut total = history.len() + old.len() + 1;
                let mut start = 0;
                while total > history_limit && start < entries.len() {
                    total -= entries[start].len() + 1;
                    start += 1;
                }
                if total <= history_limit {
                    entries.drain(..start);
                    entries.push(&old);
                    let joined = entries.join(",");
                    annotations.insert(REVISION_HISTORY_ANNOTATION.to_string(), joined);
                }
            }
        }
    }
    if !exists
        && set_replicas_annotations(rs, replicas(d), replicas(d).saturating_add(max_surge(d)))
    {
        changed = true;
    }
    changed
}

fn int_annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    annotation(rs, key).and_then(|v| v.parse().ok())
}

/// The `desired-replicas` annotation.
pub fn desired_replicas_annotation(rs: &ReplicaSet) -> Option<i32> {
    int_annotation(rs, DESIRED_REPLICAS_ANNOTATION)
}

/// Sets the `desired-replicas` and `max-replicas` annotations; true if they changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (key, value) in [
        (DESIRED_REPLICAS_ANNOTATION, desired.to_string()),
        (MAX_REPLICAS_ANNOTATION, max.to_string()),
    ] {
        if annotations.get(key) != Some(&value) {
            annotations.insert(key.to_string(), value);
            changed = true;
        }
    }
    changed
}

/// Whether [`set_replicas_annotations`] would change anything.
pub fn replicas_annotations_need_update(rs: &ReplicaSet, desired: i32, max: i32) -> bool {
    annotation(rs, DESIRED_REPLICAS_ANNOTATION) != Some(desired.to_string().as_str())
        || annotation(rs, MAX_REPLICAS_ANNOTATION) != Some(max.to_string().as_str())
}

/// How many of `to_add` replicas (negative: to remove) a ReplicaSet takes in a proportional
/// scaling of its Deployment, given that `added` were handed out already: its share of the
/// new size (by the `max-replicas` it was last scaled for), bounded by what is left.
pub fn get_proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if rs_replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = get_replica_set_fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

/// The change of size a ReplicaSet should see in a proportional scaling: its size times
/// the new deployment size (`replicas + maxSurge`) over the size it was last scaled for,
/// rounded half away from zero, minus its size. Scaling to zero removes it whole.
pub fn get_replica_set_fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    let size = rs_replicas(rs);
    if replicas(d) == 0 {
        return -size;
    }
    let deployment_replicas = i64::from(replicas(d)) + i64::from(max_surge(d));
    let annotated = int_annotation(rs, MAX_REPLICAS_ANNOTATION)
        .unwrap_or_else(|| d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0));
    if annotated <= 0 {
        // No basis for a proportion (never happens for a ReplicaSet with pods).
        return 0;
    }
    let new_size = (i64::from(size) * deployment_replicas) as f64 / f64::from(annotated);
    let rounded = new_size
        .round()
        .clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i64;
    i32::try_from(rounded - i64::from(size)).unwrap_or(0)
}

/// The template's canonical JSON ([`crate::semantic::template_value`]) without its
/// `pod-template-hash` label.
fn normalized_template(t: &PodTemplateSpec) -> serde_json::Value {
    let mut t = t.clone();
    if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(POD_TEMPLATE_HASH_LABEL);
    }
    crate::semantic::template_value(&t)
}

/// Whether two pod templates are semantically the same but for the `pod-template-hash`
/// label.
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    normalized_template(a) == normalized_template(b)
}

/// The template of a ReplicaSet (empty if it has none).
pub fn rs_template(rs: &ReplicaSet) -> PodTemplateSpec {
    rs.spec.template.clone().unwrap_or_default()
}

/// The index in `rss` of the Deployment's new ReplicaSet: the oldest whose template equals
/// the Deployment's (ignoring the hash label).
pub fn find_new_replica_set(d: &Deployment, rss: &[ReplicaSet]) -> Option<usize> {
    let want = normalized_template(&d.spec.template);
    let mut order: Vec<usize> = (0..rss.len()).collect();
    order.sort_by(|&a, &b| cmp_by_creation(&rss[a], &rss[b]));
    order.into_iter().find(|&i| {
        rss[i]
            .spec
            .template
            .as_ref()
            .is_some_and(|t| normalized_template(t) == want)
    })
}

/// The sum of `spec.replicas` of `rss`.
pub fn replica_count(rss: &[&ReplicaSet]) -> i32 {
    sum(rss.iter().map(|rs| rs_replicas(rs)))
}

/// The sum of `status.replicas` of `rss`.
pub fn actual_replica_count(rss: &[&ReplicaSet]) -> i32 {
    sum(rss
        .iter()
        .map(|rs| rs.status.as_ref().map_or(0, |s| s.replicas)))
}

/// The sum of `status.readyReplicas` of `rss`.
pub fn ready_replica_count(rss: &[&ReplicaSet]) -> i32 {
    sum(rss.iter().map(|rs| {
        rs.status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0)
    }))
}

/// The sum of `status.availableReplicas` of `rss`.
pub fn available_replica_count(rss: &[&ReplicaSet]) -> i32 {
    sum(rss.iter().map(|rs| {
        rs.status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0)
    }))
}

fn sum(it: impl Iterator<Item = i32>) -> i32 {
    let total: i64 = it.map(i64::from).sum();
    i32::try_from(total).unwrap_or(i32::MAX)
}

/// The new ReplicaSet's size for the next step of a rollout: for RollingUpdate, as many
/// more as `replicas + maxSurge` leaves room for over all ReplicaSets (each counted for the
/// larger of its spec and status replicas), up to `replicas`; for Recreate, `replicas`.
///
/// # Errors
/// An invalid `maxSurge`, or an unknown strategy type.
pub fn new_rs_new_replicas(
    d: &Deployment,
    all: &[&ReplicaSet],
    new_rs: &ReplicaSet,
) -> Result<i32, String> {
    let want = replicas(d);
    let new_size = rs_replicas(new_rs);
    if is_recreate(d) {
        return Ok(want);
    }
    if !is_rolling_update(d) {
        return Err(format!(
            "deployment type {:?} isn't supported",
            d.spec
                .strategy
                .as_ref()
                .and_then(|s| s.type_.clone())
                .unwrap_or_default()
        ));
    }
    let surge = d
        .spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.max_surge.as_ref())
        .map_or(Ok(0), |s| int_or_percent(s, want, true))?
        .max(0);
    // Kubernetes sums the ReplicaSets' spec replicas here. A ReplicaSet just scaled down may
    // still have the pods it is about to delete, so each counts for the larger of its spec
    // and its status: live pods then stay within maxSurge even while a ReplicaSet
    // controller lags (with spec alone, 100 Deployments rolled at once peaked at 2 × maxSurge
    // over their replicas, `listwatch bench deployments`).
    let current: i64 = all
        .iter()
        .map(|rs| {
            let live = rs.status.as_ref().map_or(0, |s| s.replicas);
            i64::from(rs_replicas(rs).max(live))
        })
        .sum();
    let max_total = i64::from(want) + i64::from(surge);
    if current >= max_total {
        return Ok(new_size);
    }
    let scale_up = (max_total - current).min(i64::from(want) - i64::from(new_size));
    Ok(i32::try_from(i64::from(new_size) + scale_up).unwrap_or(want))
}

/// Whether the new ReplicaSet holds the whole Deployment: sized and annotated for
/// `replicas`, and all of them available.
pub fn is_saturated(d: &Deployment, rs: &ReplicaSet) -> bool {
    let Some(desired) =
        annotation(rs, DESIRED_REPLICAS_ANNOTATION).and_then(|v| v.parse::<i32>().ok())
    else {
        return false;
    };
    let want = replicas(d);
    rs_replicas(rs) == want
        && desired == want
        && rs
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0)
            == want
}

/// Whether the Deployment has a progress deadline (`progressDeadlineSeconds` set and not
/// the "never" value `i32::MAX`).
pub fn has_progress_deadline(d: &Deployment) -> bool {
    d.spec
        .progress_deadline_seconds
        .is_some_and(|v| v != i32::MAX)
}

/// Whether old ReplicaSets are cleaned up beyond `revisionHistoryLimit`.
pub fn has_revision_history_limit(d: &Deployment) -> bool {
    d.spec.revision_history_limit.is_some_and(|v| v != i32::MAX)
}

fn gen(d: &Deployment) -> i64 {
    d.metadata.generation.unwrap_or(0)
}

fn n(v: Option<i32>) -> i32 {
    v.unwrap_or(0)
}

/// Whether the rollout is complete in `status`: every replica updated and available, no
/// old pod left, the current generation observed.
pub fn deployment_complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let want = replicas(d);
    n(status.updated_replicas) == want
        && n(status.replicas) == want
        && n(status.available_replicas) == want
        && status.observed_generation.unwrap_or(0) >= gen(d)
}

/// Whether `new` shows progress over the Deployment's current status: more updated,
/// ready or available pods, or fewer old ones.
pub fn deployment_progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let wide = |v: Option<i32>| i64::from(n(v));
    let old_old = wide(old.replicas) - wide(old.updated_replicas);
    let new_old = wide(new.replicas) - wide(new.updated_replicas);
    n(new.updated_replicas) > n(old.updated_replicas)
        || new_old < old_old
        || n(new.ready_replicas) > n(old.ready_replicas)
        || n(new.available_replicas) > n(old.available_replicas)
}

/// Whether the rollout has made no progress for `progressDeadlineSeconds` before `now`
/// (or was found so already).
pub fn deployment_timed_out(d: &Deployment, status: &DeploymentStatus, now: Timestamp) -> bool {
    if !has_progress_deadline(d) {
        return false;
    }
    let Some(cond) = get_condition(status, PROGRESSING) else {
        return false;
    };
    match cond.reason.as_deref() {
        Some(NEW_RS_AVAILABLE_REASON) => return false,
        Some(TIMED_OUT_REASON) => return true,
        _ => {}
    }
    let Some(from) = cond.last_update_time.as_ref() else {
        return false;
    };
    let deadline = d.spec.progress_deadline_seconds.unwrap_or(0).max(0);
    from.0
        .checked_add(Duration::from_secs(deadline.unsigned_abs().into()))
        .is_ok_and(|t| t < now)
}

/// A condition stamped `now` (both times).
pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: Some(type_.to_string()),
        status: Some(status.to_string()),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
        reason: Some(reason.to_string()),
        message: Some(message),
    }
}

/// The condition of type `type_`.
pub fn get_condition<'a>(
    status: &'a DeploymentStatus,
    type_: &str,
) -> Option<&'a DeploymentCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_.as_deref() == Some(type_))
}

/// Sets `cond`: nothing changes when a condition of its type has the same status and
/// reason; a condition whose status does not change keeps its transition time.
pub fn set_condition(status: &mut DeploymentStatus, mut cond: DeploymentCondition) {
    if let Some(cur) = get_condition(status, cond.type_.as_deref().unwrap_or("")) {
        if cur.status == cond.status && cur.reason == cond.reason {
            return;
        }
        if cur.status == cond.status {
            cond.last_transition_time = cur.last_transition_time.clone();
        }
    }
    remove_condition(status, cond.type_.as_deref().unwrap_or(""));
    status.conditions.get_or_insert_with(Vec::new).push(cond);
}

/// Removes the condition of type `type_`.
pub fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(c) = status.conditions.as_mut() {
        c.retain(|c| c.type_.as_deref() != Some(type_));
        if c.is_empty() {
            status.conditions = None;
        }
    }
}

/// A ReplicaSet condition as a Deployment condition (its failures surface there).
pub fn replica_set_to_deployment_condition(c: &ReplicaSetCondition) -> DeploymentCondition {
    DeploymentCondition {
        type_: c.type_.clone(),
        status: c.status.clone(),
        last_transition_time: c.last_transition_time.clone(),
        last_update_time: c.last_transition_time.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        DeploymentSpec, DeploymentStrategy, ReplicaSetSpec, RollingUpdateDeployment,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.to_string())
    }

    fn dep(replicas: i32, surge: IntOrString, unavailable: IntOrString) -> Deployment {
        Deployment {
            spec: DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavailable),
                    }),
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn rs(name: &str, replicas: i32, max_replicas: Option<i32>, created: i64) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                annotations: max_replicas.map(|m| {
                    BTreeMap::from([(MAX_REPLICAS_ANNOTATION.to_string(), m.to_string())])
                }),
                ..Default::default()
            },
            spec: ReplicaSetSpec {
                replicas: Some(replicas),
                ..Default::default()
            },
            status: None,
        }
    }

    #[test]
    fn percentages_round_as_kubernetes_rounds() {
        // Surge rounds up, unavailable rounds down.
        assert_eq!(
            resolve_fenceposts(Some(&pct("25%")), Some(&pct("25%")), 10),
            Ok((3, 2))
        );
        assert_eq!(
            resolve_fenceposts(Some(&pct("25%")), Some(&pct("25%")), 1),
            Ok((1, 0))
        );
        assert_eq!(
            resolve_fenceposts(Some(&pct("10%")), Some(&pct("90%")), 3),
            Ok((1, 2))
        );
        assert_eq!(
            resolve_fenceposts(Some(&pct("0%")), Some(&pct("100%")), 7),
            Ok((0, 7))
        );
        // Absolute numbers are taken as they are.
        assert_eq!(
            resolve_fenceposts(Some(&IntOrString::Int(3)), Some(&IntOrString::Int(2)), 10),
            Ok((3, 2))
        );
        // Both zero (here: 1% of 2, rounded down): one may be unavailable.
        assert_eq!(
            resolve_fenceposts(Some(&pct("0%")), Some(&pct("1%")), 2),
            Ok((0, 1))
        );
        assert_eq!(resolve_fenceposts(None, None, 5), Ok((0, 1)));
        assert!(resolve_fenceposts(Some(&pct("abc")), None, 5).is_err());
        assert!(resolve_fenceposts(Some(&pct("5")), None, 5).is_err());
        assert!(resolve_fenceposts(None, Some(&pct("x%")), 5).is_err());

        let d = dep(10, pct("25%"), pct("25%"));
        assert_eq!(
            (max_surge(&d), max_unavailable(&d), min_available(&d)),
            (3, 2, 8)
        );
        // Unavailable is capped at the replicas, and zero replicas allow none.
        let d = dep(2, IntOrString::Int(1), IntOrString::Int(5));
        assert_eq!(max_unavailable(&d), 2);
        assert_eq!(max_unavailable(&dep(0, pct("25%"), pct("25%"))), 0);
        // Invalid values count as zero where Kubernetes ignores the error.
        let d = dep(4, pct("many"), pct("25%"));
        assert_eq!(max_surge(&d), 0);
        let mut recreate = dep(4, pct("25%"), pct("25%"));
        recreate.spec.strategy.as_mut().unwrap().type_ = Some("Recreate".into());
        assert_eq!((max_surge(&recreate), max_unavailable(&recreate)), (0, 0));
    }

    #[test]
    fn new_replica_set_sizes_for_a_rolling_update() {
        // 10 replicas, surge 3: a new RS next to an old one of 10 can take 3.
        let d = dep(10, IntOrString::Int(3), IntOrString::Int(2));
        let old = rs("old", 10, None, 1);
        let new = rs("new", 0, None, 2);
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), Ok(3));
        // At the limit, no growth.
        let new3 = rs("new", 3, None, 2);
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new3], &new3), Ok(3));
        // An old ReplicaSet scaled down to 7 that still has its 10 pods counts for 10: the
        // new one may not grow until they are gone.
        let mut shrinking = rs("old", 7, None, 1);
        shrinking.status = Some(k8s_openapi::api::apps::v1::ReplicaSetStatus {
            replicas: 10,
            ..Default::default()
        });
        assert_eq!(new_rs_new_replicas(&d, &[&shrinking, &new3], &new3), Ok(3));
        shrinking.status = Some(k8s_openapi::api::apps::v1::ReplicaSetStatus {
            replicas: 7,
            ..Default::default()
        });
        assert_eq!(new_rs_new_replicas(&d, &[&shrinking, &new3], &new3), Ok(6));
        // Never beyond replicas.
        let old1 = rs("old", 1, None, 1);
        let new8 = rs("new", 8, None, 2);
        assert_eq!(new_rs_new_replicas(&d, &[&old1, &new8], &new8), Ok(10));
        // A fresh Deployment's first ReplicaSet gets all of them at once.
        let first = rs("first", 0, None, 1);
        assert_eq!(new_rs_new_replicas(&d, &[&first], &first), Ok(10));
        let mut recreate = d.clone();
        recreate.spec.strategy.as_mut().unwrap().type_ = Some("Recreate".into());
        assert_eq!(new_rs_new_replicas(&recreate, &[&old, &new], &new), Ok(10));
        let mut odd = d.clone();
        odd.spec.strategy.as_mut().unwrap().type_ = Some("BlueGreen".into());
        assert!(new_rs_new_replicas(&odd, &[&new], &new).is_err());
        let bad = dep(10, pct("lots"), IntOrString::Int(1));
        assert!(new_rs_new_replicas(&bad, &[&new], &new).is_err());
    }

    #[test]
    fn proportional_scaling_shares() {
        // A rollout in progress: 10 replicas + 3 surge, old 8 and new 5 (13 = max). The
        // deployment is scaled to 20 (+3 surge = 23, i.e. 10 more).
        let mut d = dep(20, IntOrString::Int(3), IntOrString::Int(2));
        let old = rs("old", 8, Some(13), 1);
        let new = rs("new", 5, Some(13), 2);
        // 8 * 23 / 13 = 14.15 → 14: +6; 5 * 23 / 13 = 8.85 → 9: +4.
        assert_eq!(get_replica_set_fraction(&old, &d), 6);
        assert_eq!(get_replica_set_fraction(&new, &d), 4);
        assert_eq!(get_proportion(&old, &d, 10, 0), 6);
        assert_eq!(get_proportion(&new, &d, 10, 6), 4);
        // Bounded by what is left to hand out.
        assert_eq!(get_proportion(&new, &d, 10, 8), 2);
        assert_eq!(get_proportion(&new, &d, 10, 10), 0);
        // Scaling down to 5 (+3 surge: 8 in all, 5 fewer).
        d.spec.replicas = Some(5);
        // 8 * 8 / 13 = 4.92 → 5: -3; 5 * 8 / 13 = 3.08 → 3: -2.
        assert_eq!(get_proportion(&old, &d, -5, 0), -3);
        assert_eq!(get_proportion(&new, &d, -5, -3), -2);
        // Scaling down may not remove more than is left to remove.
        assert_eq!(get_proportion(&old, &d, -1, 0), -1);
        // To zero: each goes whole.
        d.spec.replicas = Some(0);
        assert_eq!(get_replica_set_fraction(&old, &d), -8);
        // Without the annotation, the deployment's current total is the basis.
        let mut d = dep(20, IntOrString::Int(3), IntOrString::Int(2));
        d.status = Some(DeploymentStatus {
            replicas: Some(13),
            ..Default::default()
        });
        let bare = rs("bare", 8, None, 1);
        assert_eq!(get_replica_set_fraction(&bare, &d), 6);
        // No basis at all: no share (never a division by zero).
        d.status = None;
        assert_eq!(get_replica_set_fraction(&bare, &d), 0);
        assert_eq!(get_proportion(&rs("empty", 0, Some(13), 1), &d, 10, 0), 0);
    }

    #[test]
    fn revisions_and_annotations() {
        let with_rev = |r: &str| {
            let mut x = rs("r", 1, None, 1);
            x.metadata.annotations = Some(BTreeMap::from([(
                REVISION_ANNOTATION.to_string(),
                r.to_string(),
            )]));
            x
        };
        let (a, b, c, bad) = (with_rev("1"), with_rev("3"), with_rev("2"), with_rev("x"));
        assert_eq!(max_revision(&[&a, &b, &c, &bad]), 3);
        assert_eq!(last_revision(&[&a, &b, &c, &bad]), 2);
        assert_eq!(last_revision(&[&a]), 0);
        assert!(revision(&bad).is_err());

        let mut d = dep(3, pct("25%"), pct("25%"));
        d.metadata.annotations = Some(BTreeMap::from([
            (
                "kubernetes.io/change-cause".to_string(),
                "kubectl set image".to_string(),
            ),
            (REVISION_ANNOTATION.to_string(), "7".to_string()),
            (LAST_APPLIED_CONFIG_ANNOTATION.to_string(), "{}".to_string()),
        ]));
        // A ReplicaSet about to be created: revision, the deployment's annotations (but not
        // its revision or applied configuration), desired and max replicas.
        let mut fresh = rs("new", 0, None, 1);
        assert!(set_new_replica_set_annotations(
            &d, &mut fresh, "4", false, 2000
        ));
        let an = fresh.metadata.annotations.clone().unwrap();
        assert_eq!(an[REVISION_ANNOTATION], "4");
        assert_eq!(an["kubernetes.io/change-cause"], "kubectl set image");
        assert!(!an.contains_key(LAST_APPLIED_CONFIG_ANNOTATION));
        assert_eq!(an[DESIRED_REPLICAS_ANNOTATION], "3");
        assert_eq!(an[MAX_REPLICAS_ANNOTATION], "4");
        // Again: nothing changes.
        assert!(!set_new_replica_set_annotations(
            &d, &mut fresh, "4", true, 2000
        ));
        // Rolled back to (revision 4 becomes 9): 4 goes to the history.
        assert!(set_new_replica_set_annotations(
            &d, &mut fresh, "9", true, 2000
        ));
        assert!(set_new_replica_set_annotations(
            &d, &mut fresh, "12", true, 2000
        ));
        let an = fresh.metadata.annotations.clone().unwrap();
        assert_eq!(an[REVISION_ANNOTATION], "12");
        assert_eq!(an[REVISION_HISTORY_ANNOTATION], "4,9");
        // The history is bounded: the oldest entries go ("4,9" + "12" is 6 > 4 chars).
        assert!(set_new_replica_set_annotations(
            &d, &mut fresh, "13", true, 4
        ));
        assert_eq!(
            fresh.metadata.annotations.as_ref().unwrap()[REVISION_HISTORY_ANNOTATION],
            "9,12"
        );
        // Numeric, not textual, comparison: 10 is newer than 9.
        let mut nine = with_rev("9");
        assert!(set_new_replica_set_annotations(
            &d, &mut nine, "10", true, 2000
        ));
        assert!(!set_new_replica_set_annotations(
            &d, &mut nine, "9", true, 2000
        ));

        // A rollback copies the ReplicaSet's annotations, keeping the deployment's own.
        let mut target = d.clone();
        let mut old = rs("old", 0, None, 1);
        old.metadata.annotations = Some(BTreeMap::from([
            ("kubernetes.io/change-cause".to_string(), "v1".to_string()),
            (REVISION_ANNOTATION.to_string(), "1".to_string()),
        ]));
        set_deployment_annotations_to(&mut target, &old);
        let an = target.metadata.annotations.unwrap();
        assert_eq!(an["kubernetes.io/change-cause"], "v1");
        assert_eq!(an[REVISION_ANNOTATION], "7");
    }

    #[test]
    fn templates_compare_without_the_hash_label() {
        let t: PodTemplateSpec = serde_json::from_str(
            r#"{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"i"}]}}"#,
        )
        .unwrap();
        let mut hashed = t.clone();
        hashed
            .metadata
            .as_mut()
            .unwrap()
            .labels
            .as_mut()
            .unwrap()
            .insert(POD_TEMPLATE_HASH_LABEL.into(), "abc".into());
        assert!(equal_ignore_hash(&t, &hashed));
        let mut other = t.clone();
        other.spec.as_mut().unwrap().containers[0].image = Some("j".into());
        assert!(!equal_ignore_hash(&t, &other));
        // An empty list is no list.
        let mut empty = t.clone();
        empty.spec.as_mut().unwrap().containers[0].args = Some(vec![]);
        assert!(equal_ignore_hash(&t, &empty));

        let mut d = dep(1, pct("25%"), pct("25%"));
        d.spec.template = t.clone();
        let mut a = rs("a", 1, None, 5);
        a.spec.template = Some(other);
        let mut b = rs("b", 1, None, 4);
        b.spec.template = Some(hashed.clone());
        let mut c = rs("c", 1, None, 3);
        c.spec.template = Some(hashed);
        // The oldest matching one is new.
        assert_eq!(find_new_replica_set(&d, &[a.clone(), b, c]), Some(2));
        assert_eq!(find_new_replica_set(&d, &[a]), None);
    }

    #[test]
    fn completeness_progress_and_deadline() {
        let mut d = dep(3, pct("25%"), pct("25%"));
        d.metadata.generation = Some(2);
        d.spec.progress_deadline_seconds = Some(600);
        let done = DeploymentStatus {
            observed_generation: Some(2),
            replicas: Some(3),
            updated_replicas: Some(3),
            available_replicas: Some(3),
            ..Default::default()
        };
        assert!(deployment_complete(&d, &done));
        let stale = DeploymentStatus {
            observed_generation: Some(1),
            ..done.clone()
        };
        assert!(!deployment_complete(&d, &stale));
        let old_pods_left = DeploymentStatus {
            replicas: Some(4),
            ..done.clone()
        };
        assert!(!deployment_complete(&d, &old_pods_left));

        d.status = Some(DeploymentStatus {
            replicas: Some(4),
            updated_replicas: Some(1),
            ..Default::default()
        });
        let fewer_old = DeploymentStatus {
            replicas: Some(4),
            updated_replicas: Some(2),
            ..Default::default()
        };
        assert!(deployment_progressing(&d, &fewer_old));
        assert!(!deployment_progressing(&d, d.status.as_ref().unwrap()));

        let t = |s: i64| Timestamp::from_second(s).unwrap();
        let mut st = DeploymentStatus::default();
        set_condition(
            &mut st,
            new_condition(
                PROGRESSING,
                "True",
                REPLICA_SET_UPDATED_REASON,
                "m".into(),
                t(1000),
            ),
        );
        assert!(
            !deployment_timed_out(&d, &st, t(1600)),
            "exactly at the deadline"
        );
        assert!(deployment_timed_out(&d, &st, t(1601)));
        d.spec.progress_deadline_seconds = Some(i32::MAX);
        assert!(!deployment_timed_out(&d, &st, t(1_000_000)));

        // A condition keeps its transition time while its status stays, and is not
        // touched at all when the reason is the same.
        set_condition(
            &mut st,
            new_condition(
                PROGRESSING,
                "True",
                NEW_RS_AVAILABLE_REASON,
                "done".into(),
                t(2000),
            ),
        );
        let c = get_condition(&st, PROGRESSING).unwrap();
        assert_eq!(c.last_transition_time, Some(Time(t(1000))));
        assert_eq!(c.last_update_time, Some(Time(t(2000))));
        set_condition(
            &mut st,
            new_condition(
                PROGRESSING,
                "True",
                NEW_RS_AVAILABLE_REASON,
                "again".into(),
                t(3000),
            ),
        );
        assert_eq!(
            get_condition(&st, PROGRESSING).unwrap().message.as_deref(),
            Some("done")
        );
        set_condition(
            &mut st,
            new_condition(
                PROGRESSING,
                "False",
                TIMED_OUT_REASON,
                "late".into(),
                t(4000),
            ),
        );
        assert_eq!(
            get_condition(&st, PROGRESSING)
                .unwrap()
                .last_transition_time,
            Some(Time(t(4000)))
        );
        remove_condition(&mut st, PROGRESSING);
        assert!(st.conditions.is_none());
    }

    #[test]
    fn saturation() {
        let d = dep(3, pct("25%"), pct("25%"));
        let mut r = rs("new", 3, None, 1);
        assert!(!is_saturated(&d, &r), "no desired-replicas annotation");
        set_replicas_annotations(&mut r, 3, 4);
        assert!(!is_saturated(&d, &r), "not all available");
        r.status = Some(k8s_openapi::api::apps::v1::ReplicaSetStatus {
            replicas: 3,
            available_replicas: Some(3),
            ..Default::default()
        });
        assert!(is_saturated(&d, &r));
        assert!(!replicas_annotations_need_update(&r, 3, 4));
        assert!(replicas_annotations_need_update(&r, 3, 5));
    }
}
