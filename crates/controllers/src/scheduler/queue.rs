//! The scheduling queue (kube-scheduler's `internal/queue`): which pod to try next.
//!
//! Every pending pod of the scheduler is in exactly one place:
//! - the **active queue**, tried in order of priority (`spec.priority`, higher first), then
//!   of the time it (re-)entered the queue;
//! - the **backoff queue**, after a failed attempt: it waits `initial_backoff × 2^(n−1)`
//!   (1 s, 2 s, 4 s, 8 s, then 10 s: kube-scheduler's defaults) after its `n`-th attempt,
//!   then becomes active again;
//! - the **unschedulable set**, when no node fitted: it waits for an event that may change
//!   that — a node added, a node whose labels, taints, readiness, `unschedulable` flag or
//!   allocatable changed, a bound pod deleted — and only for events that touch a filter
//!   that rejected it (a pod rejected for its node selector is not retried when a pod
//!   somewhere is deleted). Moved, it goes to the backoff queue if its backoff has not
//!   passed yet, else to the active queue. A pod left there for 5 minutes is retried
//!   anyway;
//! - **gated**, while `spec.schedulingGates` is not empty, until an update clears it;
//! - **in flight**, from the moment it is popped until it is bound, given up, or put back.
//!
//! If an event arrives while a pod is being scheduled, a failure sends it to the backoff
//! queue instead of the unschedulable set, since the event may already have made it
//! schedulable (kube-scheduler's move request cycle).
//!
//! Pods are keyed by `namespace/name`. Time comes from a [`SharedClock`], so tests drive
//! backoff with a `FakeClock`.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::clock::SharedClock;
use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::filters::PluginSet;
use super::pod_info::PodInfo;

/// kube-scheduler's `podInitialBackoffSeconds`.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// kube-scheduler's `podMaxBackoffSeconds`.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How long a pod may stay unschedulable before it is retried without an event
/// (kube-scheduler's `podMaxInUnschedulablePodsDuration`).
pub const DEFAULT_MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);
/// How often the unschedulable set is checked for pods left there too long.
const LEFTOVER_FLUSH_PERIOD: Duration = Duration::from_secs(30);

/// Timing of the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueTiming {
    /// Backoff after the first failed attempt; doubled after each further one.
    pub initial_backoff: Duration,
    /// The longest backoff.
    pub max_backoff: Duration,
    /// The longest stay in the unschedulable set without an event.
    pub max_in_unschedulable: Duration,
}

impl Default for QueueTiming {
    fn default() -> Self {
        QueueTiming {
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            max_in_unschedulable: DEFAULT_MAX_IN_UNSCHEDULABLE,
        }
    }
}

impl QueueTiming {
    /// The backoff after the `attempts`-th failed attempt.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let mut d = self.initial_backoff;
        for _ in 1..attempts {
            if d >= self.max_backoff {
                break;
            }
            d = d.saturating_mul(2);
        }
        d.min(self.max_backoff)
    }
}

/// A pod handed out by [`SchedulingQueue::pop`], to be given back with one of
/// [`SchedulingQueue::done`], [`SchedulingQueue::requeue_unschedulable`] or
/// [`SchedulingQueue::requeue_backoff`].
#[derive(Debug, Clone)]
pub struct QueuedPod {
    /// The pod as last seen.
    pub info: Arc<PodInfo>,
    /// Scheduling attempts so far, this one included.
    pub attempts: u32,
    /// When the pod was first popped.
    pub initial_attempt: Instant,
    /// The scheduling cycle of this attempt.
    pub cycle: u64,
}

/// Where a pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Active,
    Backoff,
    Unschedulable(PluginSet),
    Gated,
    InFlight,
}

#[derive(Debug)]
struct Entry {
    info: Arc<PodInfo>,
    place: Place,
    attempts: u32,
    /// When it last entered the queue (or failed): orders the active queue and starts the
    /// backoff.
    timestamp: Instant,
    initial_attempt: Option<Instant>,
    /// Bumped whenever the pod is (re)placed, so stale heap items are recognised.
    generation: u64,
    /// A relevant update arrived while it was in flight.
    updated_in_flight: bool,
}

#[derive(Debug, PartialEq, Eq)]
struct ActiveItem {
    priority: i32,
    timestamp: Instant,
    seq: u64,
    key: Arc<str>,
    generation: u64,
}

impl Ord for ActiveItem {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .cmp(&other.priority)
            .then_with(|| other.timestamp.cmp(&self.timestamp))
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for ActiveItem {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A backoff queue item: (expiry, seq, key, generation), ordered by expiry.
type BackoffItem = Reverse<(Instant, u64, Arc<str>, u64)>;

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Arc<str>, Entry>,
    active: BinaryHeap<ActiveItem>,
    /// Earliest expiry first.
    backoff: BinaryHeap<BackoffItem>,
    /// The keys of the unschedulable pods, so that events and flushes visit only them.
    unschedulable: HashSet<Arc<str>>,
    scheduling_cycle: u64,
    move_request_cycle: u64,
    seq: u64,
    last_leftover_flush: Option<Instant>,
    closed: bool,
}

impl State {
    fn place(&mut self, key: &Arc<str>, place: Place, timing: &QueueTiming) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        e.generation += 1;
        let was_unschedulable = matches!(e.place, Place::Unschedulable(_));
        e.place = place;
        match (was_unschedulable, matches!(place, Place::Unschedulable(_))) {
            (false, true) => {
                self.unschedulable.insert(Arc::clone(key));
            }
            (true, false) => {
                self.unschedulable.remove(key);
            }
            _ => {}
        }
        self.seq += 1;
        match place {
            Place::Active => self.active.push(ActiveItem {
                priority: e.info.priority,
                timestamp: e.timestamp,
                seq: self.seq,
                key: Arc::clone(key),
                generation: e.generation,
            }),
            Place::Backoff => {
                let expiry = e.timestamp + timing.backoff(e.attempts.max(1));
                self.backoff
                    .push(Reverse((expiry, self.seq, Arc::clone(key), e.generation)));
            }
            Place::Unschedulable(_) | Place::Gated | Place::InFlight => {}
        }
    }

    fn remove(&mut self, key: &str) {
        if self.entries.remove(key).is_some() {
            self.unschedulable.remove(key);
        }
    }

    /// Moves an unschedulable (or no longer gated) pod on: backoff if it is still backing
    /// off at `now`, else active.
    fn activate_or_backoff(&mut self, key: &Arc<str>, now: Instant, timing: &QueueTiming) {
        let Some(e) = self.entries.get(key) else {
            return;
        };
        let backing_off = e.attempts > 0 && e.timestamp + timing.backoff(e.attempts) > now;
        let place = if backing_off {
            Place::Backoff
        } else {
            Place::Active
        };
        self.place(key, place, timing);
    }

    fn flush_backoff(&mut self, now: Instant, timing: &QueueTiming) {
        while let Some(Reverse((expiry, _, key, generation))) = self.backoff.peek() {
            if *expiry > now {
                break;
            }
            let key = Arc::clone(key);
            let generation = *generation;
            self.backoff.pop();
            let current = self
                .entries
                .get(&key)
                .is_some_and(|e| e.generation == generation && e.place == Place::Backoff);
            if current {
                self.place(&key, Place::Active, timing);
            }
        }
    }

    fn flush_leftovers(&mut self, now: Instant, timing: &QueueTiming) {
        let due = self
            .last_leftover_flush
            .is_none_or(|t| now.saturating_duration_since(t) >= LEFTOVER_FLUSH_PERIOD);
        if !due {
            return;
        }
        self.last_leftover_flush = Some(now);
        let stale: Vec<Arc<str>> = self
            .unschedulable
            .iter()
            .filter(|k| {
                self.entries.get(*k).is_some_and(|e| {
                    now.saturating_duration_since(e.timestamp) >= timing.max_in_unschedulable
                })
            })
            .cloned()
            .collect();
        for key in stale {
            self.activate_or_backoff(&key, now, timing);
        }
    }

    fn pop_active(&mut self) -> Option<Arc<str>> {
        while let Some(item) = self.active.pop() {
            let current = self
                .entries
                .get(&item.key)
                .is_some_and(|e| e.generation == item.generation && e.place == Place::Active);
            if current {
                return Some(item.key);
            }
        }
        None
    }

    fn next_wake(&self) -> Option<Instant> {
        let backoff = self.backoff.peek().map(|Reverse((t, ..))| *t);
        let leftovers = if self.unschedulable.is_empty() {
            None
        } else {
            self.last_leftover_flush.map(|t| t + LEFTOVER_FLUSH_PERIOD)
        };
        match (backoff, leftovers) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// How many pods are in each place (for tests, logs and metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Ready to be tried.
    pub active: usize,
    /// Waiting out a backoff.
    pub backoff: usize,
    /// Waiting for an event.
    pub unschedulable: usize,
    /// Held back by scheduling gates.
    pub gated: usize,
    /// Popped and not yet given back.
    pub in_flight: usize,
}

/// The scheduling queue. Cheap to share behind an `Arc`; one consumer pops.
#[derive(Debug)]
pub struct SchedulingQueue {
    state: Mutex<State>,
    ready: Notify,
    clock: SharedClock,
    timing: QueueTiming,
}

/// Whether an update of a pending pod may change where it fits: anything but its status
/// and bookkeeping metadata (kube-scheduler's `isPodUpdated`).
pub fn is_relevant_update(old: &Pod, new: &Pod) -> bool {
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
        || old.metadata.owner_references != new.metadata.owner_references
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
}

impl SchedulingQueue {
    /// An empty queue on `clock`.
    pub fn new(clock: SharedClock, timing: QueueTiming) -> SchedulingQueue {
        SchedulingQueue {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            clock,
            timing,
        }
    }

    /// The queue's timing.
    pub fn timing(&self) -> &QueueTiming {
        &self.timing
    }

    /// Adds a pod that appeared (or, if it is known, updates it): active, or gated.
    pub fn add(&self, info: Arc<PodInfo>) {
        let mut st = self.state.lock();
        if st.entries.contains_key(&info.key) {
            drop(st);
            self.update(info);
            return;
        }
        let key = Arc::clone(&info.key);
        let place = if info.gated {
            Place::Gated
        } else {
            Place::Active
        };
        st.entries.insert(
            Arc::clone(&key),
            Entry {
                info,
                place: Place::Gated,
                attempts: 0,
                timestamp: self.clock.now(),
                initial_attempt: None,
                generation: 0,
                updated_in_flight: false,
            },
        );
        st.place(&key, place, &self.timing);
        drop(st);
        if place == Place::Active {
            self.ready.notify_one();
        }
    }

    /// A pending pod changed. Its newest state is kept; if the change may matter to where
    /// it fits ([`is_relevant_update`]), an unschedulable pod is retried (after its
    /// backoff), a gated one whose gates are gone becomes active, and one in flight will
    /// not be parked as unschedulable should this attempt fail. An unknown pod is added.
    pub fn update(&self, info: Arc<PodInfo>) {
        let mut st = self.state.lock();
        let now = self.clock.now();
        let Some(e) = st.entries.get_mut(&info.key) else {
            drop(st);
            self.add(info);
            return;
        };
        let relevant = e.info.uid != info.uid || is_relevant_update(&e.info.pod, &info.pod);
        let priority_changed = e.info.priority != info.priority;
        let gated = info.gated;
        e.info = info;
        let key = Arc::clone(&e.info.key);
        let mut woke = false;
        match e.place {
            Place::Active if priority_changed => {
                st.place(&key, Place::Active, &self.timing);
            }
            Place::Active | Place::Backoff => {}
            Place::InFlight => e.updated_in_flight |= relevant,
            Place::Unschedulable(_) if relevant => {
                if gated {
                    st.place(&key, Place::Gated, &self.timing);
                } else {
                    st.activate_or_backoff(&key, now, &self.timing);
                    woke = true;
                }
            }
            Place::Unschedulable(_) => {}
            Place::Gated if !gated => {
                st.activate_or_backoff(&key, now, &self.timing);
                woke = true;
            }
            Place::Gated => {}
        }
        drop(st);
        if woke {
            self.ready.notify_one();
        }
    }

    /// Forgets the pod `key` wherever it is (deleted, or bound by someone).
    pub fn delete(&self, key: &str) {
        self.state.lock().remove(key);
    }

    /// Takes the next pod to schedule, waiting until one is active (backoffs expire on the
    /// queue's clock). `None` once [`SchedulingQueue::close`] was called.
    pub async fn pop(&self) -> Option<QueuedPod> {
        loop {
            let wake = {
                let mut st = self.state.lock();
                if st.closed {
                    return None;
                }
                let now = self.clock.now();
                st.flush_backoff(now, &self.timing);
                st.flush_leftovers(now, &self.timing);
                if let Some(key) = st.pop_active() {
                    st.scheduling_cycle += 1;
                    let cycle = st.scheduling_cycle;
                    st.place(&key, Place::InFlight, &self.timing);
                    let e = st.entries.get_mut(&key)?;
                    e.attempts += 1;
                    e.updated_in_flight = false;
                    let initial_attempt = *e.initial_attempt.get_or_insert(now);
                    return Some(QueuedPod {
                        info: Arc::clone(&e.info),
                        attempts: e.attempts,
                        initial_attempt,
                        cycle,
                    });
                }
                st.next_wake()
            };
            let notified = pin!(self.ready.notified());
            match wake {
                Some(deadline) => {
                    tokio::select! {
                        () = notified => {}
                        () = self.clock.sleep_until(deadline) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// The popped pod is settled (bound, or given up on): it leaves the queue, unless it was
    /// replaced by a newer pod of the same name meanwhile.
    pub fn done(&self, pod: &QueuedPod) {
        let mut st = self.state.lock();
        let same = st
            .entries
            .get(&pod.info.key)
            .is_some_and(|e| e.place == Place::InFlight && e.info.uid == pod.info.uid);
        if same {
            st.remove(&pod.info.key);
        }
    }

    /// The popped pod fits nowhere; `rejected_by` are the plugins that said so (empty: no
    /// node at all). It waits for a relevant event, or goes to the backoff queue if an
    /// event came during the attempt or it was updated meanwhile. Nothing happens if it
    /// was deleted meanwhile. Returns whether the pod is still pending (so its failure is
    /// worth reporting).
    pub fn requeue_unschedulable(&self, pod: &QueuedPod, rejected_by: PluginSet) -> bool {
        let mut st = self.state.lock();
        let move_request_cycle = st.move_request_cycle;
        let now = self.clock.now();
        let Some(e) = st.entries.get_mut(&pod.info.key) else {
            return false;
        };
        if e.place != Place::InFlight || e.info.uid != pod.info.uid {
            return false;
        }
        e.timestamp = now;
        let place = if e.updated_in_flight || move_request_cycle >= pod.cycle {
            Place::Backoff
        } else {
            Place::Unschedulable(rejected_by)
        };
        let key = Arc::clone(&e.info.key);
        st.place(&key, place, &self.timing);
        drop(st);
        // The backoff deadline may now be the earliest: let `pop` re-arm its timer.
        self.ready.notify_one();
        true
    }

    /// The popped pod failed for another reason (an API error): it is retried after its
    /// backoff. Nothing happens if it was deleted meanwhile. Returns whether the pod is
    /// still pending.
    pub fn requeue_backoff(&self, pod: &QueuedPod) -> bool {
        let mut st = self.state.lock();
        let now = self.clock.now();
        let Some(e) = st.entries.get_mut(&pod.info.key) else {
            return false;
        };
        if e.place != Place::InFlight || e.info.uid != pod.info.uid {
            return false;
        }
        e.timestamp = now;
        let key = Arc::clone(&e.info.key);
        st.place(&key, Place::Backoff, &self.timing);
        drop(st);
        self.ready.notify_one();
        true
    }

    /// An event happened that may make pods rejected by `plugins` schedulable: those
    /// unschedulable pods (and those rejected by no plugin, for lack of nodes) are retried.
    pub fn move_all(&self, plugins: PluginSet) {
        if plugins.is_empty() {
            return;
        }
        let mut st = self.state.lock();
        st.move_request_cycle = st.scheduling_cycle;
        let now = self.clock.now();
        let keys: Vec<Arc<str>> = st
            .unschedulable
            .iter()
            .filter(|k| {
                st.entries.get(*k).is_some_and(|e| match e.place {
                    Place::Unschedulable(rejected) => {
                        rejected.is_empty() || rejected.intersects(plugins)
                    }
                    _ => false,
                })
            })
            .cloned()
            .collect();
        if keys.is_empty() {
            return;
        }
        for key in &keys {
            st.activate_or_backoff(key, now, &self.timing);
        }
        drop(st);
        self.ready.notify_one();
    }

    /// Makes [`SchedulingQueue::pop`] return `None` from now on.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.ready.notify_one();
    }

    /// How many pods are where.
    pub fn counts(&self) -> QueueCounts {
        let st = self.state.lock();
        let mut c = QueueCounts::default();
        for e in st.entries.values() {
            match e.place {
                Place::Active => c.active += 1,
                Place::Backoff => c.backoff += 1,
                Place::Unschedulable(_) => c.unschedulable += 1,
                Place::Gated => c.gated += 1,
                Place::InFlight => c.in_flight += 1,
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::filters::test_support::*;
    use crate::scheduler::filters::Plugin;
    use client::clock::FakeClock;
    use serde_json::json;

    fn queue() -> (FakeClock, Arc<SchedulingQueue>) {
        let clock = FakeClock::new();
        (
            clock.clone(),
            Arc::new(SchedulingQueue::new(clock.shared(), QueueTiming::default())),
        )
    }

    /// Pops without waiting: the next active pod, if any.
    async fn try_pop(q: &SchedulingQueue) -> Option<QueuedPod> {
        tokio::time::timeout(Duration::from_millis(20), q.pop())
            .await
            .ok()
            .flatten()
    }

    #[test]
    fn backoff_doubles_from_one_to_ten_seconds() {
        let t = QueueTiming::default();
        let secs: Vec<u64> = (1..=7).map(|n| t.backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 10, 10, 10]);
        assert_eq!(t.backoff(u32::MAX), Duration::from_secs(10));
    }

    #[tokio::test]
    async fn priority_then_arrival_order() {
        let (clock, q) = queue();
        q.add(pod_info("low", "0", "0", json!({})));
        clock.step(Duration::from_millis(1));
        q.add(pod_info(
            "high",
            "0",
            "0",
            json!({"spec": {"priority": 10}}),
        ));
        clock.step(Duration::from_millis(1));
        q.add(pod_info("low2", "0", "0", json!({})));
        let order: Vec<String> = [q.pop().await, q.pop().await, q.pop().await]
            .into_iter()
            .map(|p| p.unwrap().info.name().to_string())
            .collect();
        assert_eq!(order, ["high", "low", "low2"]);
        assert_eq!(q.counts().in_flight, 3);
    }

    #[tokio::test]
    async fn failed_attempts_back_off_one_two_four_eight_ten_seconds() {
        let (clock, q) = queue();
        q.add(pod_info("p", "0", "0", json!({})));
        for (attempt, wait_ms) in [1000, 2000, 4000, 8000, 10_000, 10_000]
            .into_iter()
            .enumerate()
        {
            let p = try_pop(&q).await.expect("active");
            assert_eq!(p.attempts as usize, attempt + 1);
            q.requeue_backoff(&p);
            assert_eq!(q.counts().backoff, 1);
            clock.step(Duration::from_millis(wait_ms - 1));
            assert!(
                try_pop(&q).await.is_none(),
                "still backing off 1 ms before {wait_ms} ms"
            );
            clock.step(Duration::from_millis(1));
        }
    }

    #[tokio::test]
    async fn unschedulable_pods_wait_for_a_relevant_event() {
        let (clock, q) = queue();
        q.add(pod_info("sel", "0", "0", json!({})));
        q.add(pod_info("cpu", "0", "0", json!({})));
        let a = q.pop().await.unwrap();
        let b = q.pop().await.unwrap();
        let (sel, cpu) = if a.info.name() == "sel" {
            (a, b)
        } else {
            (b, a)
        };
        q.requeue_unschedulable(&sel, PluginSet::EMPTY.with(Plugin::NodeAffinity));
        q.requeue_unschedulable(&cpu, PluginSet::EMPTY.with(Plugin::NodeResourcesFit));
        assert_eq!(q.counts().unschedulable, 2);
        clock.step(Duration::from_secs(60));
        assert!(try_pop(&q).await.is_none(), "no event, no retry");
        // A bound pod was deleted: resources freed, the node selector unchanged.
        q.move_all(
            PluginSet::EMPTY
                .with(Plugin::NodeResourcesFit)
                .with(Plugin::NodePorts),
        );
        let retried = try_pop(&q).await.unwrap();
        assert_eq!(retried.info.name(), "cpu");
        assert!(try_pop(&q).await.is_none());
        // A node got a label: the other one is retried.
        q.move_all(PluginSet::EMPTY.with(Plugin::NodeAffinity));
        assert_eq!(try_pop(&q).await.unwrap().info.name(), "sel");
    }

    #[tokio::test]
    async fn a_moved_pod_still_backing_off_waits_for_its_backoff() {
        let (clock, q) = queue();
        q.add(pod_info("p", "0", "0", json!({})));
        let p = q.pop().await.unwrap();
        q.requeue_unschedulable(&p, PluginSet::ALL);
        clock.step(Duration::from_millis(500));
        q.move_all(PluginSet::ALL);
        assert_eq!(q.counts().backoff, 1);
        assert!(try_pop(&q).await.is_none());
        clock.step(Duration::from_millis(500));
        assert_eq!(try_pop(&q).await.unwrap().attempts, 2);
    }

    #[tokio::test]
    async fn no_nodes_means_any_event_retries() {
        let (clock, q) = queue();
        q.add(pod_info("p", "0", "0", json!({})));
        let p = q.pop().await.unwrap();
        q.requeue_unschedulable(&p, PluginSet::EMPTY);
        clock.step(Duration::from_secs(2));
        q.move_all(PluginSet::EMPTY);
        assert!(try_pop(&q).await.is_none(), "an empty event moves nothing");
        q.move_all(PluginSet::EMPTY.with(Plugin::NodePorts));
        assert!(try_pop(&q).await.is_some());
    }

    #[tokio::test]
    async fn an_event_during_the_attempt_sends_the_pod_to_backoff() {
        let (clock, q) = queue();
        q.add(pod_info("p", "0", "0", json!({})));
        let p = q.pop().await.unwrap();
        q.move_all(PluginSet::ALL); // a node was added while we were deciding
        q.requeue_unschedulable(&p, PluginSet::EMPTY.with(Plugin::NodeAffinity));
        assert_eq!(q.counts().backoff, 1);
        clock.step(Duration::from_secs(1));
        assert!(try_pop(&q).await.is_some());
    }

    #[tokio::test]
    async fn unschedulable_pods_are_retried_after_five_minutes_anyway() {
        let (clock, q) = queue();
        q.add(pod_info("p", "0", "0", json!({})));
        let p = q.pop().await.unwrap();
        q.requeue_unschedulable(&p, PluginSet::EMPTY.with(Plugin::NodeAffinity));
        clock.step(Duration::from_secs(299));
        assert!(try_pop(&q).await.is_none());
        clock.step(Duration::from_secs(31));
        assert!(try_pop(&q).await.is_some());
    }

    #[tokio::test]
    async fn updates_deletes_and_gates() {
        let (clock, q) = queue();
        q.add(pod_info("p", "0", "0", json!({})));
        let p = q.pop().await.unwrap();
        q.requeue_unschedulable(&p, PluginSet::EMPTY.with(Plugin::NodeAffinity));
        clock.step(Duration::from_secs(5));
        // A status-only update changes nothing; a new toleration is worth a retry.
        let mut status_only = (*p.info.pod).clone();
        status_only.status = Some(Default::default());
        q.update(Arc::new(PodInfo::new(Arc::new(status_only))));
        assert!(try_pop(&q).await.is_none());
        q.update(pod_info(
            "p",
            "0",
            "0",
            json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
        ));
        let again = try_pop(&q).await.unwrap();
        assert_eq!(
            again.info.tolerations.len(),
            1,
            "the newest state is scheduled"
        );
        // Deleted while in flight: the failure is dropped.
        q.delete("ns/p");
        q.requeue_backoff(&again);
        assert_eq!(q.counts(), QueueCounts::default());
        // Gated pods wait until their gates are removed.
        q.add(pod_info(
            "g",
            "0",
            "0",
            json!({"spec": {"schedulingGates": [{"name": "x"}]}}),
        ));
        assert_eq!(q.counts().gated, 1);
        assert!(try_pop(&q).await.is_none());
        q.update(pod_info("g", "0", "0", json!({})));
        assert_eq!(try_pop(&q).await.unwrap().info.name(), "g");
    }

    #[tokio::test]
    async fn done_removes_only_the_same_pod() {
        let (_clock, q) = queue();
        q.add(pod_info("p", "0", "0", json!({})));
        let p = q.pop().await.unwrap();
        // Deleted and recreated under the same name while in flight.
        q.delete("ns/p");
        q.add(pod_info(
            "p",
            "0",
            "0",
            json!({"metadata": {"uid": "second"}}),
        ));
        q.done(&p);
        q.requeue_unschedulable(&p, PluginSet::ALL);
        assert_eq!(q.counts().active, 1);
        assert_eq!(&*try_pop(&q).await.unwrap().info.uid, "second");
    }

    #[tokio::test]
    async fn pop_wakes_for_a_later_add_and_ends_on_close() {
        let (_clock, q) = queue();
        let popper = tokio::spawn({
            let q = Arc::clone(&q);
            async move { q.pop().await.map(|p| p.info.name().to_string()) }
        });
        tokio::task::yield_now().await;
        q.add(pod_info("late", "0", "0", json!({})));
        assert_eq!(popper.await.unwrap().as_deref(), Some("late"));
        let closer = tokio::spawn({
            let q = Arc::clone(&q);
            async move { q.pop().await.is_none() }
        });
        tokio::task::yield_now().await;
        q.close();
        assert!(closer.await.unwrap());
    }
}
