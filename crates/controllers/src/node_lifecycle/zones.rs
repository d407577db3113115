//! Zones and the pace of `NoExecute` tainting.
//!
//! Nodes are grouped by zone (`topology.kubernetes.io/region` and `…/zone`). Adding the
//! `NoExecute` taint that evicts a node's pods is rate-limited per zone (a token bucket of
//! burst 1), at a rate that depends on the zone's health:
//! - **Normal**: the eviction rate (default 0.1 nodes/s);
//! - **PartialDisruption** (more than 2 nodes and at least 55 % of them not ready): the
//!   secondary rate (0.01/s) in zones larger than the large-cluster threshold (50 nodes),
//!   none in smaller ones;
//! - **FullDisruption** (no node ready): the normal rate — unless *every* zone is fully
//!   disrupted, which is more likely the controller's own network than the nodes: then
//!   nothing is tainted, and the taints already placed are taken away.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The health of one zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZoneState {
    /// Just seen.
    Initial,
    /// Most nodes ready.
    Normal,
    /// Many nodes not ready.
    PartialDisruption,
    /// No node ready.
    FullDisruption,
}

/// The zone key of a node's labels (region and zone; empty when it has neither).
pub(crate) fn zone_key(labels: Option<&std::collections::BTreeMap<String, String>>) -> String {
    let get = |k: &str| labels.and_then(|l| l.get(k)).map_or("", String::as_str);
    let region = get("topology.kubernetes.io/region");
    let zone = get("topology.kubernetes.io/zone");
    if region.is_empty() && zone.is_empty() {
        String::new()
    } else {
        format!("{region}:\u{0}:{zone}")
    }
}

/// The state of a zone whose nodes' `Ready` statuses are `ready` (`None`: no condition),
/// and how many of them are not ready.
pub(crate) fn compute_zone_state(
    ready: &[Option<&str>],
    unhealthy_threshold: f32,
) -> (usize, ZoneState) {
    let ready_nodes = ready.iter().filter(|s| **s == Some("True")).count();
    let not_ready = ready.len() - ready_nodes;
    let state = if not_ready > 0 && ready_nodes == 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f32 / ready.len() as f32 >= unhealthy_threshold {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    };
    (not_ready, state)
}

/// A token bucket of burst 1 refilled at `qps` (none if `qps` is zero).
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    qps: f32,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub(crate) fn new(qps: f32, now: Instant) -> TokenBucket {
        TokenBucket {
            qps,
            tokens: 1.0,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(self.qps)).min(1.0);
        self.last = now;
    }

    /// Takes a token if one is there.
    pub(crate) fn try_accept(&mut self, now: Instant) -> bool {
        if self.qps <= 0.0 {
            return false;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When the next token is there (`None`: never). A millisecond late rather than a
    /// rounding error early, so that a wake-up at that instant finds the token.
    pub(crate) fn next_token(&self, now: Instant) -> Option<Instant> {
        if self.qps <= 0.0 {
            return None;
        }
        let mut b = self.clone();
        b.refill(now);
        let missing = (1.0 - b.tokens).max(0.0);
        if missing == 0.0 {
            return Some(now);
        }
        let wait = Duration::from_secs_f64(missing / f64::from(self.qps));
        Some(now + wait + Duration::from_millis(1))
    }

    /// Changes the rate (a fresh bucket, as client-go's limiter swap).
    pub(crate) fn set_qps(&mut self, qps: f32, now: Instant) {
        if (qps - self.qps).abs() > f32::EPSILON {
            *self = TokenBucket::new(qps, now);
        }
    }
}

/// One zone's queue of nodes waiting for their `NoExecute` taint.
#[derive(Debug)]
pub(crate) struct TaintQueue {
    /// Node names with the instant they may be tried (FIFO by insertion).
    queue: VecDeque<(String, Instant)>,
    pub(crate) limiter: TokenBucket,
}

impl TaintQueue {
    pub(crate) fn new(qps: f32, now: Instant) -> TaintQueue {
        TaintQueue {
            queue: VecDeque::new(),
            limiter: TokenBucket::new(qps, now),
        }
    }

    /// Queues `node`, to be tried from `at` on; false if it is already queued.
    pub(crate) fn add(&mut self, node: &str, at: Instant) -> bool {
        if self.queue.iter().any(|(n, _)| n == node) {
            return false;
        }
        self.queue.push_back((node.to_string(), at));
        true
    }

    /// Takes `node` off the queue; whether it was there.
    pub(crate) fn remove(&mut self, node: &str) -> bool {
        let before = self.queue.len();
        self.queue.retain(|(n, _)| n != node);
        self.queue.len() != before
    }

    /// Takes off the queue, in order, the nodes that are due at `now` and for which the
    /// rate allows (one token each). A node whose tainting fails is queued again with
    /// [`TaintQueue::add`].
    pub(crate) fn pop_ready(&mut self, now: Instant) -> Vec<String> {
        let mut ready = Vec::new();
        while let Some((_, at)) = self.queue.front() {
            if *at > now || !self.limiter.try_accept(now) {
                break;
            }
            if let Some((node, _)) = self.queue.pop_front() {
                ready.push(node);
            }
        }
        ready
    }

    /// When this queue next has something to do (`None`: empty or never).
    pub(crate) fn next_due(&self, now: Instant) -> Option<Instant> {
        let (_, at) = self.queue.front()?;
        let token = self.limiter.next_token(now)?;
        Some((*at).max(token))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_states() {
        let t = Some("True");
        let u = Some("Unknown");
        assert_eq!(compute_zone_state(&[t, t, t], 0.55), (0, ZoneState::Normal));
        assert_eq!(
            compute_zone_state(&[u, u], 0.55),
            (2, ZoneState::FullDisruption)
        );
        assert_eq!(
            compute_zone_state(&[t, u, u], 0.55),
            (2, ZoneState::Normal),
            "two are not many"
        );
        assert_eq!(
            compute_zone_state(&[t, u, u, None], 0.55),
            (3, ZoneState::PartialDisruption)
        );
        assert_eq!(
            compute_zone_state(&[t, t, u, u, u, t, t], 0.55),
            (3, ZoneState::Normal)
        );
        assert_eq!(zone_key(None), "");
    }

    #[test]
    fn tainting_is_paced_per_zone() {
        let t0 = Instant::now();
        let mut q = TaintQueue::new(0.1, t0);
        assert!(q.add("a", t0));
        assert!(q.add("b", t0));
        assert!(!q.add("a", t0));
        assert_eq!(q.pop_ready(t0), ["a"], "burst of one");
        let next = q.next_due(t0).unwrap();
        let ten = t0 + Duration::from_secs(10);
        assert!(
            next >= ten && next <= ten + Duration::from_millis(2),
            "{:?}",
            next - t0
        );
        assert!(
            q.pop_ready(t0 + Duration::from_secs(9)).is_empty(),
            "too early"
        );
        assert_eq!(q.pop_ready(t0 + Duration::from_secs(10)), ["b"]);
        assert_eq!(q.len(), 0);
        // A failed attempt queued again waits for its time.
        q.add("c", t0 + Duration::from_secs(25));
        assert!(q.pop_ready(t0 + Duration::from_secs(24)).is_empty());
        assert_eq!(
            q.next_due(t0 + Duration::from_secs(20)),
            Some(t0 + Duration::from_secs(25))
        );
        assert!(q.remove("c"));
        assert!(!q.remove("c"));
        // No rate: nothing, ever.
        let mut stopped = TaintQueue::new(0.0, t0);
        stopped.add("d", t0);
        assert!(stopped.pop_ready(t0 + Duration::from_secs(1000)).is_empty());
        assert_eq!(stopped.next_due(t0), None);
    }
}
