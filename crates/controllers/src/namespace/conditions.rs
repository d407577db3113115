//! The conditions a Terminating namespace's status reports about its deletion, as
//! kube-controller-manager's namespace controller names them: five condition types, each
//! `True` with a failure reason and message while that part of the deletion is stuck, and
//! `False` with a fixed "all is well" reason and message otherwise.

use k8s_openapi::api::core::v1::{NamespaceCondition, NamespaceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// Discovery of the server's resources failed (for some groups).
pub const DELETION_DISCOVERY_FAILURE: &str = "NamespaceDeletionDiscoveryFailure";
/// A discovered group version could not be parsed.
pub const DELETION_GV_PARSING_FAILURE: &str = "NamespaceDeletionGroupVersionParsingFailure";
/// Deleting (or listing) some resource's content failed.
pub const DELETION_CONTENT_FAILURE: &str = "NamespaceDeletionContentFailure";
/// Some objects are still in the namespace.
pub const CONTENT_REMAINING: &str = "NamespaceContentRemaining";
/// Some remaining objects are held by finalizers.
pub const FINALIZERS_REMAINING: &str = "NamespaceFinalizersRemaining";

/// Every condition type the controller maintains, in the order it adds them, with the reason
/// and message of its `False` ("all is well") form.
const MAINTAINED: [(&str, &str, &str); 5] = [
    (
        DELETION_DISCOVERY_FAILURE,
        "ResourcesDiscovered",
        "All resources successfully discovered",
    ),
    (
        DELETION_GV_PARSING_FAILURE,
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    ),
    (
        DELETION_CONTENT_FAILURE,
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    (
        CONTENT_REMAINING,
        "ContentRemoved",
        "All content successfully removed",
    ),
    (
        FINALIZERS_REMAINING,
        "ContentHasNoFinalizers",
        "All content-preserving finalizers finished",
    ),
];

/// What is left in a namespace after one pass: objects per resource (`resource.group`, as
/// the messages name them) and objects per finalizer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContentTotals {
    /// Remaining objects by `{resource}.{group}` (the core group is empty: `pods.`).
    pub by_resource: BTreeMap<String, usize>,
    /// Remaining objects by finalizer name.
    pub by_finalizer: BTreeMap<String, usize>,
}

/// Collects one pass's failures and totals, then writes them into a status
/// ([`ConditionUpdater::apply`]).
#[derive(Debug, Clone, Default)]
pub struct ConditionUpdater {
    failing: Vec<(&'static str, &'static str, String)>,
    content_errors: Vec<String>,
}

impl ConditionUpdater {
    /// Nothing failed yet.
    pub fn new() -> ConditionUpdater {
        ConditionUpdater::default()
    }

    /// Discovery failed: `failed_groups` group versions could not be read (0 when the
    /// failure was not per group), `error` says why.
    pub fn discovery_failed(&mut self, failed_groups: usize, error: &str) {
        let message = if failed_groups > 0 {
            format!("Discovery failed for some groups, {failed_groups} failing: {error}")
        } else {
            error.to_string()
        };
        self.failing
            .push((DELETION_DISCOVERY_FAILURE, "DiscoveryFailed", message));
    }

    /// A discovered group version could not be parsed.
    pub fn group_version_failed(&mut self, error: &str) {
        self.failing.push((
            DELETION_GV_PARSING_FAILURE,
            "GroupVersionParsingFailed",
            error.to_string(),
        ));
    }

    /// Deleting or listing one resource's content failed.
    pub fn content_failed(&mut self, error: &str) {
        self.content_errors.push(error.to_string());
    }

    /// What remains after the pass.
    pub fn content_totals(&mut self, totals: &ContentTotals) {
        let remaining: Vec<String> = totals
            .by_resource
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| format!("{r} has {n} resource instances"))
            .collect();
        if !remaining.is_empty() {
            self.failing.push((
                CONTENT_REMAINING,
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", remaining.join(", ")),
            ));
        }
        let finalizers: Vec<String> = totals
            .by_finalizer
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect();
        if !finalizers.is_empty() {
            self.failing.push((
                FINALIZERS_REMAINING,
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    finalizers.join(", ")
                ),
            ));
        }
    }

    /// Writes every maintained condition into `status` at time `now`: the failing ones as
    /// `True`, the others as `False`. A condition whose status flips gets `now` as its
    /// `lastTransitionTime`; one only reworded keeps its time. Whether anything changed.
    pub fn apply(mut self, status: &mut NamespaceStatus, now: Timestamp) -> bool {
        if !self.content_errors.is_empty() {
            let mut msgs = std::mem::take(&mut self.content_errors);
            msgs.sort();
            self.failing.push((
                DELETION_CONTENT_FAILURE,
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    msgs.len(),
                    msgs.join(", ")
                ),
            ));
        }
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        let mut changed = false;
        for (ty, ok_reason, ok_message) in MAINTAINED {
            let (state, reason, message) = match self.failing.iter().find(|(t, _, _)| *t == ty) {
                Some((_, reason, message)) => ("True", *reason, message.clone()),
                None => ("False", ok_reason, ok_message.to_string()),
            };
            match conditions.iter_mut().find(|c| c.type_ == ty) {
                None => {
                    conditions.push(NamespaceCondition {
                        type_: ty.to_string(),
                        status: state.to_string(),
                        reason: Some(reason.to_string()),
                        message: Some(message),
                        last_transition_time: Some(Time(now)),
                    });
                    changed = true;
                }
                Some(c) => {
                    let same = c.status == state
                        && c.reason.as_deref() == Some(reason)
                        && c.message.as_deref() == Some(message.as_str());
                    if same {
                        continue;
                    }
                    if c.status != state {
                        c.last_transition_time = Some(Time(now));
                    }
                    c.status = state.to_string();
                    c.reason = Some(reason.to_string());
                    c.message = Some(message);
                    changed = true;
                }
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn find<'a>(status: &'a NamespaceStatus, ty: &str) -> &'a NamespaceCondition {
        status
            .conditions
            .as_ref()
            .and_then(|c| c.iter().find(|c| c.type_ == ty))
            .unwrap_or_else(|| panic!("no {ty} in {status:?}"))
    }

    #[test]
    fn a_clean_pass_reports_every_condition_false() {
        let mut status = NamespaceStatus::default();
        assert!(ConditionUpdater::new().apply(&mut status, at(10)));
        let types: Vec<&str> = status
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            types,
            [
                "NamespaceDeletionDiscoveryFailure",
                "NamespaceDeletionGroupVersionParsingFailure",
                "NamespaceDeletionContentFailure",
                "NamespaceContentRemaining",
                "NamespaceFinalizersRemaining",
            ]
        );
        let c = find(&status, FINALIZERS_REMAINING);
        assert_eq!(c.status, "False");
        assert_eq!(c.reason.as_deref(), Some("ContentHasNoFinalizers"));
        assert_eq!(
            c.message.as_deref(),
            Some("All content-preserving finalizers finished")
        );
        // The same pass again changes nothing.
        assert!(!ConditionUpdater::new().apply(&mut status, at(20)));
    }

    #[test]
    fn failures_and_remaining_content_are_true_with_kubernetes_messages() {
        let mut status = NamespaceStatus::default();
        ConditionUpdater::new().apply(&mut status, at(10));
        let mut u = ConditionUpdater::new();
        u.discovery_failed(
            1,
            "unable to retrieve the complete list of server APIs: metrics.k8s.io/v1beta1: boom",
        );
        u.group_version_failed("unexpected GroupVersion string: a/b/c");
        u.content_failed("zeta failed");
        u.content_failed("alpha failed");
        let mut totals = ContentTotals::default();
        totals.by_resource.insert("pods.".into(), 2);
        totals.by_resource.insert("configmaps.".into(), 1);
        totals.by_resource.insert("deployments.apps".into(), 0);
        totals.by_finalizer.insert("example.com/hold".into(), 1);
        u.content_totals(&totals);
        assert!(u.apply(&mut status, at(20)));

        let c = find(&status, DELETION_DISCOVERY_FAILURE);
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("True", Some("DiscoveryFailed"))
        );
        assert_eq!(
            c.message.as_deref(),
            Some("Discovery failed for some groups, 1 failing: unable to retrieve the complete list of server APIs: metrics.k8s.io/v1beta1: boom")
        );
        assert_eq!(c.last_transition_time, Some(Time(at(20))));
        let c = find(&status, DELETION_GV_PARSING_FAILURE);
        assert_eq!(c.reason.as_deref(), Some("GroupVersionParsingFailed"));
        let c = find(&status, DELETION_CONTENT_FAILURE);
        assert_eq!(c.reason.as_deref(), Some("ContentDeletionFailed"));
        assert_eq!(
            c.message.as_deref(),
            Some("Failed to delete all resource types, 2 remaining: alpha failed, zeta failed")
        );
        let c = find(&status, CONTENT_REMAINING);
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("True", Some("SomeResourcesRemain"))
        );
        assert_eq!(
            c.message.as_deref(),
            Some("Some resources are remaining: configmaps. has 1 resource instances, pods. has 2 resource instances")
        );
        let c = find(&status, FINALIZERS_REMAINING);
        assert_eq!(c.reason.as_deref(), Some("SomeFinalizersRemain"));
        assert_eq!(
            c.message.as_deref(),
            Some("Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")
        );

        // Reworded while still True: the transition time stays.
        let mut u = ConditionUpdater::new();
        let mut fewer = ContentTotals::default();
        fewer.by_resource.insert("pods.".into(), 1);
        u.content_totals(&fewer);
        assert!(u.apply(&mut status, at(30)));
        let c = find(&status, CONTENT_REMAINING);
        assert_eq!(
            c.message.as_deref(),
            Some("Some resources are remaining: pods. has 1 resource instances")
        );
        assert_eq!(c.last_transition_time, Some(Time(at(20))));
        // Back to False: a new transition time.
        let c = find(&status, FINALIZERS_REMAINING);
        assert_eq!(c.status, "False");
        assert_eq!(c.last_transition_time, Some(Time(at(30))));
    }
}
