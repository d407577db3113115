//! `FitError`: why a pod fits on no node, worded as kube-scheduler words it —
//! `0/5 nodes are available: 3 Insufficient cpu, 2 node(s) didn't match Pod's node
//! affinity/selector.` — one `"{count} {reason}"` per distinct reason, sorted as strings,
//! a node short of several resources counting once for each.

use std::fmt;

use super::filters::{PluginSet, Rejection};

/// kube-scheduler's message when there is no node at all.
pub const NO_NODES_AVAILABLE: &str = "no nodes available to schedule pods";

/// Counts the reasons nodes were rejected for, while a decision runs (reused between
/// decisions so that a failing one allocates only for distinct reasons).
#[derive(Debug, Default)]
pub struct ReasonHistogram {
    counts: Vec<(String, u32)>,
    plugins: PluginSet,
}

impl ReasonHistogram {
    /// Forgets everything counted.
    pub fn clear(&mut self) {
        self.counts.clear();
        self.plugins = PluginSet::EMPTY;
    }

    /// Counts one rejected node.
    pub fn record(&mut self, rejection: &Rejection<'_>) {
        self.plugins.insert(rejection.plugin());
        let counts = &mut self.counts;
        rejection.for_each_reason(
            |reason| match counts.iter_mut().find(|(r, _)| r == reason) {
                Some((_, n)) => *n += 1,
                None => counts.push((reason.to_string(), 1)),
            },
        );
    }

    /// The error for a pod that fits none of `num_all_nodes` nodes.
    pub fn to_error(&self, num_all_nodes: usize) -> FitError {
        let mut reasons: Vec<String> = self
            .counts
            .iter()
            .map(|(reason, n)| format!("{n} {reason}"))
            .collect();
        reasons.sort_unstable();
        FitError {
            num_all_nodes,
            reasons,
            plugins: self.plugins,
        }
    }
}

/// A pod that fits on no node: how many nodes there were, and why each was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitError {
    /// The number of nodes considered.
    pub num_all_nodes: usize,
    /// `"{count} {reason}"`, sorted.
    pub reasons: Vec<String>,
    /// The plugins that rejected some node: an event touching one of them may make the
    /// pod schedulable.
    pub plugins: PluginSet,
}

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.num_all_nodes == 0 {
            return f.write_str(NO_NODES_AVAILABLE);
        }
        write!(
            f,
            "0/{} nodes are available: {}.",
            self.num_all_nodes,
            self.reasons.join(", ")
        )
    }
}

impl std::error::Error for FitError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::filters::{FitFailures, Plugin};
    use std::sync::Arc;

    #[test]
    fn kube_scheduler_message() {
        let mut h = ReasonHistogram::default();
        let cpu = Rejection::Fit(FitFailures {
            cpu: true,
            ..Default::default()
        });
        for _ in 0..3 {
            h.record(&cpu);
        }
        h.record(&Rejection::NodeAffinity);
        h.record(&Rejection::NodeAffinity);
        let e = h.to_error(5);
        assert_eq!(
            e.to_string(),
            "0/5 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, \
             3 Insufficient cpu."
        );
        assert!(e.plugins.contains(Plugin::NodeResourcesFit));
        assert!(e.plugins.contains(Plugin::NodeAffinity));
        assert!(!e.plugins.contains(Plugin::NodePorts));
    }

    #[test]
    fn several_reasons_per_node_and_taints_by_name() {
        let mut h = ReasonHistogram::default();
        h.record(&Rejection::Fit(FitFailures {
            cpu: true,
            memory: true,
            ..Default::default()
        }));
        let a: Arc<str> = "node(s) had untolerated taint {a: }".into();
        let b: Arc<str> = "node(s) had untolerated taint {b: x}".into();
        h.record(&Rejection::Taint(&a));
        h.record(&Rejection::Taint(&b));
        h.record(&Rejection::Taint(&a));
        h.record(&Rejection::Unschedulable);
        h.record(&Rejection::NodePorts);
        assert_eq!(
            h.to_error(6).to_string(),
            "0/6 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, \
             1 node(s) didn't have free ports for the requested pod ports, \
             1 node(s) had untolerated taint {b: x}, 1 node(s) were unschedulable, \
             2 node(s) had untolerated taint {a: }."
        );
        h.clear();
        assert_eq!(h.to_error(0).to_string(), NO_NODES_AVAILABLE);
    }
}
