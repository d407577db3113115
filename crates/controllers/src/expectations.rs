//! `ControllerExpectations`: what a controller waits to see in its informer after it issued
//! creates or deletes, as kube-controller-manager keeps them (`UIDTrackingControllerExpectations`).
//!
//! A controller that creates pods for an object records how many creations it expects
//! (and, for deletions, exactly which pods it deleted). Its handlers lower the counts as the
//! pod informer reports the new pods and the deletions. Until every expected change was seen
//! — or [`EXPECTATIONS_TIMEOUT`] passed, in case one never arrives — the object is not
//! synced again: a sync would read a cache that does not show the pods just created yet,
//! and create them a second time.
//!
//! Deletions are tracked by pod key, so a pod seen deleted twice (marked with a
//! `deletionTimestamp`, then removed) counts once. A controller without a record (a new
//! object, or after a restart) is satisfied.

use client::clock::SharedClock;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How long expectations may stay unfulfilled before they are ignored (five minutes, as
/// in Kubernetes): a lost event must not stop a controller for good.
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
struct Counts {
    add: i64,
    del: i64,
    set_at: Instant,
}

#[derive(Debug, Default)]
struct State {
    counts: HashMap<String, Counts>,
    /// Per controller key: the keys of the pods whose deletion is still expected.
    deletions: HashMap<String, HashSet<String>>,
}

/// The expectations of every object one controller manages, by the object's key. Shared
/// between the controller's handlers and workers (all methods take `&self`).
#[derive(Debug)]
pub struct ControllerExpectations {
    clock: SharedClock,
    state: Mutex<State>,
}

impl ControllerExpectations {
    /// Empty expectations, timed by `clock`.
    pub fn new(clock: SharedClock) -> ControllerExpectations {
        ControllerExpectations {
            clock,
            state: Mutex::new(State::default()),
        }
    }

    /// Whether the controller may act on `key` again: every expected creation and deletion
    /// was observed, or they were set more than [`EXPECTATIONS_TIMEOUT`] ago, or none were
    /// ever set.
    pub fn satisfied(&self, key: &str) -> bool {
        let st = self.state.lock();
        match st.counts.get(key) {
            None => true,
            Some(c) if c.add <= 0 && c.del <= 0 => true,
            Some(c) => {
                let expired = self.clock.since(c.set_at) > EXPECTATIONS_TIMEOUT;
                if expired {
                    tracing::info!(
                        key,
                        add = c.add,
                        del = c.del,
                        "expectations expired: acting again"
                    );
                }
                expired
            }
        }
    }

    /// Expects `count` creations for `key` (replacing earlier counts).
    pub fn expect_creations(&self, key: &str, count: usize) {
        self.set(key, count as i64, 0);
    }

    /// Expects `creations` creations and the deletion of exactly `pod_keys` for `key`
    /// (replacing earlier expectations), for a sync that both creates and deletes.
    pub fn expect(&self, key: &str, creations: usize, pod_keys: impl IntoIterator<Item = String>) {
        let keys: HashSet<String> = pod_keys.into_iter().collect();
        let n = keys.len() as i64;
        self.state.lock().deletions.insert(key.to_string(), keys);
        self.set(key, creations as i64, n);
    }

    /// Expects the deletion of each pod in `pod_keys` for `key` (replacing earlier counts
    /// and pod keys).
    pub fn expect_deletions(&self, key: &str, pod_keys: impl IntoIterator<Item = String>) {
        let keys: HashSet<String> = pod_keys.into_iter().collect();
        let n = keys.len() as i64;
        self.state.lock().deletions.insert(key.to_string(), keys);
        self.set(key, 0, n);
    }

    fn set(&self, key: &str, add: i64, del: i64) {
        let set_at = self.clock.now();
        self.state
            .lock()
            .counts
            .insert(key.to_string(), Counts { add, del, set_at });
    }

    /// Lowers the expected creations and deletions of `key` (if it has expectations): for
    /// changes that were observed, or that will never happen because they were not issued.
    pub fn lower(&self, key: &str, add: i64, del: i64) {
        if let Some(c) = self.state.lock().counts.get_mut(key) {
            c.add -= add;
            c.del -= del;
        }
    }

    /// One creation for `key` was observed.
    pub fn creation_observed(&self, key: &str) {
        self.lower(key, 1, 0);
    }

    /// The deletion of pod `pod_key` was observed for `key`: lowers the expectations once
    /// per pod that was expected to go, and not at all for other pods.
    pub fn deletion_observed(&self, key: &str, pod_key: &str) {
        let mut st = self.state.lock();
        let expected = st
            .deletions
            .get_mut(key)
            .is_some_and(|set| set.remove(pod_key));
        if expected {
            if let Some(c) = st.counts.get_mut(key) {
                c.del -= 1;
            }
        }
    }

    /// Forgets everything about `key` (its object was deleted): a new object of the same
    /// name starts clean.
    pub fn delete(&self, key: &str) {
        let mut st = self.state.lock();
        st.counts.remove(key);
        st.deletions.remove(key);
    }

    /// The outstanding (creations, deletions) of `key`, if it has expectations.
    pub fn get(&self, key: &str) -> Option<(i64, i64)> {
        self.state.lock().counts.get(key).map(|c| (c.add, c.del))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::clock::FakeClock;

    #[test]
    fn creations_are_awaited_then_satisfied() {
        let clock = FakeClock::new();
        let e = ControllerExpectations::new(clock.shared());
        assert!(e.satisfied("ns/rs"), "no record: a new controller acts");
        e.expect_creations("ns/rs", 3);
        assert!(!e.satisfied("ns/rs"));
        e.creation_observed("ns/rs");
        e.creation_observed("ns/rs");
        assert_eq!(e.get("ns/rs"), Some((1, 0)));
        assert!(!e.satisfied("ns/rs"));
        e.creation_observed("ns/rs");
        assert!(e.satisfied("ns/rs"));
        // Observations beyond what was expected (an adopted pod's add) do no harm.
        e.creation_observed("ns/rs");
        assert!(e.satisfied("ns/rs"));
        // Creations that were never issued are taken back.
        e.expect_creations("ns/rs", 5);
        e.lower("ns/rs", 5, 0);
        assert!(e.satisfied("ns/rs"));
        // Unknown keys are left alone.
        e.creation_observed("ns/other");
        assert_eq!(e.get("ns/other"), None);
    }

    #[test]
    fn deletions_are_tracked_per_pod() {
        let e = ControllerExpectations::new(FakeClock::new().shared());
        e.expect_deletions("ns/rs", ["ns/a".to_string(), "ns/b".to_string()]);
        assert_eq!(e.get("ns/rs"), Some((0, 2)));
        // A pod seen twice (marked for deletion, then gone) counts once.
        e.deletion_observed("ns/rs", "ns/a");
        e.deletion_observed("ns/rs", "ns/a");
        assert_eq!(e.get("ns/rs"), Some((0, 1)));
        // A pod that was not expected to go does not count.
        e.deletion_observed("ns/rs", "ns/zzz");
        assert!(!e.satisfied("ns/rs"));
        e.deletion_observed("ns/rs", "ns/b");
        assert!(e.satisfied("ns/rs"));
        e.delete("ns/rs");
        assert_eq!(e.get("ns/rs"), None);
        assert!(e.satisfied("ns/rs"));
    }

    #[test]
    fn creations_and_deletions_together() {
        let e = ControllerExpectations::new(FakeClock::new().shared());
        e.expect("ns/ds", 2, ["ns/old".to_string()]);
        assert_eq!(e.get("ns/ds"), Some((2, 1)));
        e.creation_observed("ns/ds");
        e.deletion_observed("ns/ds", "ns/old");
        assert!(!e.satisfied("ns/ds"), "one creation is still due");
        e.creation_observed("ns/ds");
        assert!(e.satisfied("ns/ds"));
    }

    #[test]
    fn expectations_expire_after_five_minutes() {
        let clock = FakeClock::new();
        let e = ControllerExpectations::new(clock.shared());
        e.expect_creations("ns/rs", 1);
        clock.step(EXPECTATIONS_TIMEOUT);
        assert!(!e.satisfied("ns/rs"), "not before the timeout has passed");
        clock.step(Duration::from_millis(1));
        assert!(e.satisfied("ns/rs"));
        // Setting them again restarts the timer.
        e.expect_creations("ns/rs", 1);
        assert!(!e.satisfied("ns/rs"));
    }
}
