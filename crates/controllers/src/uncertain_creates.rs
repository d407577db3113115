//! `UncertainCreates`: pod creations whose answer never came, retried under the same name.
//!
//! A create whose connection breaks after the request left may have landed or not. A
//! Kubernetes controller counts it as not created (it lowers its
//! [expectations](crate::expectations)) and, at its next sync, creates again if its pod
//! cache does not show the pod yet — which, with the informer cut off by the same fault, it
//! often does not: the ReplicaSet briefly runs one pod too many, and a rolling Deployment
//! one beyond `maxSurge`, until the informer catches up and the extra pod is deleted.
//!
//! Here a controller names each pod itself (the template's `generateName` prefix and five
//! random characters, as the API server would) and remembers the names whose create went
//! unanswered. It still lowers the expectation, so that a create that really failed is
//! retried without waiting; but the retry posts the *same name*: if the first request
//! landed, the retry is refused with 409 AlreadyExists and no second pod is made, however
//! late the informer or the first request.
//!
//! The bookkeeping with the expectations has to be exact, or a controller either waits five
//! minutes for an observation that already happened or acts on a cache that misses a pod:
//! - an uncertain name holds no expected creation (it was lowered), so its observation by
//!   the informer must not be counted ([`UncertainCreates::observed`]);
//! - a name taken for a retry holds one again (the sync's new expectations include it), so
//!   its observation counts as any other;
//! - each transition happens under one lock that the informer's handler also takes, after
//!   the pod cache was updated: whether the cache has a pod tells on which side of it the
//!   handler is.

use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};

/// The uncertain creates of one controller, by the key of the object that made them.
/// Shared between the controller's pod handlers and its workers (all methods take `&self`).
#[derive(Debug, Default)]
pub struct UncertainCreates {
    names: Mutex<HashMap<String, BTreeSet<String>>>,
}

/// Where a sync finds a pod name when it plans (see [`UncertainCreates::plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Among the pods the sync counted.
    Counted,
    /// Not counted, but in the pod cache now.
    Cached,
    /// Not in the pod cache.
    Absent,
}

/// What a sync should create: the names in order, each marked `true` when it is a retry of
/// an uncertain create (a 409 AlreadyExists for it means the earlier request landed).
pub type CreatePlan = Vec<(String, bool)>;

impl UncertainCreates {
    /// No uncertain creates.
    pub fn new() -> UncertainCreates {
        UncertainCreates::default()
    }

    /// The names of `key`'s uncertain creates. A sync takes this before it reads its pods
    /// from the cache and hands it back to [`UncertainCreates::plan`].
    pub fn snapshot(&self, key: &str) -> Vec<String> {
        self.names
            .lock()
            .get(key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The informer reported the new pod `name` of `key`. `true` when it was an uncertain
    /// create: its expectation was lowered already, and the caller must not count it again.
    pub fn observed(&self, key: &str, name: &str) -> bool {
        let mut names = self.names.lock();
        let Some(set) = names.get_mut(key) else {
            return false;
        };
        let was = set.remove(name);
        if set.is_empty() {
            names.remove(key);
        }
        was
    }

    /// The create of `name` for `key` got no answer (a broken connection, a timeout, a 5xx).
    /// If `in_cache(name)`, it landed and the informer has it (its observation is or was
    /// counted as usual): nothing to do. Otherwise `lower` takes its expected creation back
    /// and the name is remembered, to be retried by the next [`UncertainCreates::plan`].
    pub fn failed(
        &self,
        key: &str,
        name: &str,
        in_cache: impl FnOnce(&str) -> bool,
        lower: impl FnOnce(),
    ) {
        let mut names = self.names.lock();
        if in_cache(name) {
            return;
        }
        lower();
        names
            .entry(key.to_string())
            .or_default()
            .insert(name.to_string());
    }

    /// Plans `count` creations for `key`, `count` computed from a pod cache read after
    /// `earlier` (this key's [`UncertainCreates::snapshot`]) was taken; `seen` tells where a
    /// name is now:
    /// - an earlier uncertain create that the read did not count but the cache now has
    ///   ([`Seen::Cached`]) landed meanwhile, and stands for one of the `count`;
    /// - uncertain names not in the cache are retried first;
    /// - the rest get `fresh` names.
    ///
    /// `expect` is called with the number planned, under the lock, so that no observation
    /// falls between taking a name and expecting its creation.
    pub fn plan(
        &self,
        key: &str,
        count: usize,
        earlier: &[String],
        seen: impl Fn(&str) -> Seen,
        mut fresh: impl FnMut() -> String,
        expect: impl FnOnce(usize),
    ) -> CreatePlan {
        let mut names = self.names.lock();
        let landed = earlier.iter().filter(|n| seen(n) == Seen::Cached).count();
        let count = count.saturating_sub(landed);
        let mut plan: CreatePlan = Vec::with_capacity(count);
        if let Some(set) = names.get_mut(key) {
            let retries: Vec<String> = set
                .iter()
                .filter(|n| seen(n) == Seen::Absent)
                .take(count)
                .cloned()
                .collect();
            for n in retries {
                set.remove(&n);
                plan.push((n, true));
            }
            if set.is_empty() {
                names.remove(key);
            }
        }
        while plan.len() < count {
            plan.push((fresh(), false));
        }
        expect(count);
        plan
    }

    /// Forgets `key` (its object was deleted).
    pub fn forget(&self, key: &str) {
        self.names.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expectations::ControllerExpectations;
    use client::clock::FakeClock;
    use std::cell::Cell;
    use std::collections::HashSet;

    /// A controller's view: its expectations and the names in its pod cache.
    struct View {
        exp: ControllerExpectations,
        cache: Mutex<HashSet<String>>,
        u: UncertainCreates,
        next: Cell<u32>,
    }

    impl View {
        fn new() -> View {
            View {
                exp: ControllerExpectations::new(FakeClock::new().shared()),
                cache: Mutex::new(HashSet::new()),
                u: UncertainCreates::new(),
                next: Cell::new(0),
            }
        }
        fn in_cache(&self, n: &str) -> bool {
            self.cache.lock().contains(n)
        }
        /// The informer: the cache first, then the handler.
        fn observe(&self, name: &str) {
            self.cache.lock().insert(name.to_string());
            if !self.u.observed("ns/rs", name) {
                self.exp.creation_observed("ns/rs");
            }
        }
        fn plan(&self, count: usize, earlier: &[String], counted: &[&str]) -> CreatePlan {
            self.u.plan(
                "ns/rs",
                count,
                earlier,
                |n| {
                    if counted.contains(&n) {
                        Seen::Counted
                    } else if self.in_cache(n) {
                        Seen::Cached
                    } else {
                        Seen::Absent
                    }
                },
                || {
                    self.next.set(self.next.get() + 1);
                    format!("fresh-{}", self.next.get())
                },
                |n| self.exp.expect_creations("ns/rs", n),
            )
        }
        fn fail(&self, name: &str) {
            self.u.failed(
                "ns/rs",
                name,
                |n| self.in_cache(n),
                || self.exp.lower("ns/rs", 1, 0),
            );
        }
    }

    #[test]
    fn an_unanswered_create_is_retried_under_its_name() {
        let v = View::new();
        let plan = v.plan(2, &[], &[]);
        assert_eq!(plan, [("fresh-1".into(), false), ("fresh-2".into(), false)]);
        // fresh-1 is answered; fresh-2's answer is lost.
        v.fail("fresh-2");
        assert_eq!(
            v.exp.get("ns/rs"),
            Some((1, 0)),
            "the lost one is taken back"
        );
        v.observe("fresh-1");
        assert!(
            v.exp.satisfied("ns/rs"),
            "the next sync need not wait for fresh-2"
        );
        // The next sync, with fresh-2 neither in the cache nor counted, needs one: it
        // retries fresh-2 rather than making a third pod.
        let earlier = v.u.snapshot("ns/rs");
        assert_eq!(earlier, ["fresh-2"]);
        let plan = v.plan(1, &earlier, &["fresh-1"]);
        assert_eq!(plan, [("fresh-2".into(), true)]);
        assert_eq!(v.exp.get("ns/rs"), Some((1, 0)));
        // The retry (or the first request, landing late) is observed: it counts.
        v.observe("fresh-2");
        assert!(v.exp.satisfied("ns/rs"));
        assert!(v.u.snapshot("ns/rs").is_empty());
    }

    #[test]
    fn a_lost_create_that_landed_is_not_counted_twice() {
        let v = View::new();
        v.plan(1, &[], &[]);
        v.fail("fresh-1");
        // It had landed: the informer reports it. Its expectation was already lowered.
        v.observe("fresh-1");
        assert_eq!(
            v.exp.get("ns/rs"),
            Some((0, 0)),
            "not lowered a second time"
        );
        assert!(v.u.snapshot("ns/rs").is_empty());
    }

    #[test]
    fn a_create_that_landed_after_the_cache_was_read_stands_for_one() {
        let v = View::new();
        v.plan(1, &[], &[]);
        v.fail("fresh-1");
        // A sync takes the snapshot, then reads a cache without fresh-1 (so it needs 2)...
        let earlier = v.u.snapshot("ns/rs");
        // ...and before it plans, the informer reports fresh-1 (the handler forgets it).
        v.observe("fresh-1");
        let plan = v.plan(2, &earlier, &[]);
        assert_eq!(plan, [("fresh-2".into(), false)], "one more, not two");
        assert_eq!(v.exp.get("ns/rs"), Some((1, 0)));
    }

    #[test]
    fn a_failure_the_informer_already_saw_keeps_its_count() {
        let v = View::new();
        v.plan(1, &[], &[]);
        // The create landed and was observed before its error came back.
        v.observe("fresh-1");
        v.fail("fresh-1");
        assert_eq!(
            v.exp.get("ns/rs"),
            Some((0, 0)),
            "not lowered below what was seen"
        );
        assert!(v.u.snapshot("ns/rs").is_empty(), "nothing to retry");
    }

    #[test]
    fn forgetting_drops_the_names() {
        let v = View::new();
        v.plan(3, &[], &[]);
        for n in ["fresh-1", "fresh-2"] {
            v.fail(n);
        }
        // A smaller need retries only as many as it needs.
        let earlier = v.u.snapshot("ns/rs");
        let plan = v.plan(1, &earlier, &[]);
        assert_eq!(plan, [("fresh-1".into(), true)]);
        assert_eq!(v.u.snapshot("ns/rs"), ["fresh-2"]);
        v.u.forget("ns/rs");
        assert!(v.u.snapshot("ns/rs").is_empty());
    }
}
