//! The heartbeat schedule: when each node of the process renews its Lease and reports its
//! status, batched into time slots so that a thousand nodes cost a few timer wake-ups a
//! second, not a thousand independent timers.
//!
//! Times are rounded *up* to the next slot boundary (slots are counted from the schedule's
//! origin), and everything due in one slot is handed out together by
//! [`HeartbeatSchedule::pop_due`]. With the default 100 ms slots a renewal is at most
//! 100 ms late, far inside the lease's 40 s duration. Each (node, kind) has at most one
//! pending time: scheduling it again replaces the old time (entries left behind in the
//! wheel are skipped when their slot comes up).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What is due for a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Beat {
    /// Renew the node's Lease.
    Lease,
    /// Report the node's status.
    Status,
}

/// Pending heartbeats of `nodes` nodes (see the module docs).
#[derive(Debug)]
pub(crate) struct HeartbeatSchedule {
    origin: Instant,
    slot: Duration,
    /// Slot number → the (node, beat) pairs scheduled in it (possibly stale).
    wheel: BTreeMap<u64, Vec<(u32, Beat)>>,
    /// The slot each node's next lease renewal is in, if scheduled.
    lease: Vec<Option<u64>>,
    /// The slot each node's next status report is in, if scheduled.
    status: Vec<Option<u64>>,
}

impl HeartbeatSchedule {
    /// An empty schedule for `nodes` nodes, with slots of `slot` (at least 1 ms) counted
    /// from `origin`.
    pub(crate) fn new(nodes: usize, origin: Instant, slot: Duration) -> HeartbeatSchedule {
        HeartbeatSchedule {
            origin,
            slot: slot.max(Duration::from_millis(1)),
            wheel: BTreeMap::new(),
            lease: vec![None; nodes],
            status: vec![None; nodes],
        }
    }

    fn slot_of(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.origin).as_nanos();
        let slot = self.slot.as_nanos();
        u64::try_from(since.div_ceil(slot)).unwrap_or(u64::MAX)
    }

    fn instant_of(&self, slot: u64) -> Instant {
        let nanos = u64::try_from(self.slot.as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_mul(slot);
        self.origin + Duration::from_nanos(nanos)
    }

    fn pending_mut(&mut self, beat: Beat) -> &mut Vec<Option<u64>> {
        match beat {
            Beat::Lease => &mut self.lease,
            Beat::Status => &mut self.status,
        }
    }

    /// The instant `node`'s `beat` is scheduled at (its slot's boundary), if any.
    pub(crate) fn scheduled(&self, node: u32, beat: Beat) -> Option<Instant> {
        let pending = match beat {
            Beat::Lease => &self.lease,
            Beat::Status => &self.status,
        };
        pending
            .get(node as usize)
            .copied()
            .flatten()
            .map(|s| self.instant_of(s))
    }

    /// Schedules `node`'s `beat` at `at` (rounded up to a slot boundary), replacing any
    /// time it had. Unknown nodes are ignored.
    pub(crate) fn schedule(&mut self, node: u32, beat: Beat, at: Instant) {
        let slot = self.slot_of(at);
        let Some(pending) = self.pending_mut(beat).get_mut(node as usize) else {
            return;
        };
        if *pending == Some(slot) {
            return;
        }
        *pending = Some(slot);
        self.wheel.entry(slot).or_default().push((node, beat));
    }

    /// Schedules `node`'s `beat` at `at` unless it is already scheduled no later.
    pub(crate) fn schedule_by(&mut self, node: u32, beat: Beat, at: Instant) {
        match self.scheduled(node, beat) {
            Some(current) if current <= at => {}
            _ => self.schedule(node, beat, at),
        }
    }

    /// Removes and returns every heartbeat due at `now`, in slot order. A returned
    /// (node, beat) is no longer scheduled.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Vec<(u32, Beat)> {
        // The last slot whose boundary has been reached.
        let since = now.saturating_duration_since(self.origin).as_nanos();
        let last = u64::try_from(since / self.slot.as_nanos()).unwrap_or(u64::MAX);
        let mut due = Vec::new();
        while let Some(entry) = self.wheel.first_entry() {
            let slot = *entry.key();
            if slot > last {
                break;
            }
            for (node, beat) in entry.remove() {
                let pending = self.pending_mut(beat);
                if let Some(p) = pending.get_mut(node as usize) {
                    if *p == Some(slot) {
                        *p = None;
                        due.push((node, beat));
                    }
                }
            }
        }
        due
    }

    /// When the next scheduled heartbeat is due (`None` if nothing is scheduled). Stale
    /// wheel entries are dropped on the way, so the answer is exact.
    pub(crate) fn next_due(&mut self) -> Option<Instant> {
        loop {
            let mut entry = self.wheel.first_entry()?;
            let slot = *entry.key();
            let (lease, status) = (&self.lease, &self.status);
            entry.get_mut().retain(|&(node, beat)| {
                let pending = match beat {
                    Beat::Lease => lease,
                    Beat::Status => status,
                };
                pending.get(node as usize).copied().flatten() == Some(slot)
            });
            if entry.get().is_empty() {
                entry.remove();
                continue;
            }
            return Some(self.instant_of(slot));
        }
    }
}

/// The time of node `index`'s first heartbeat among `nodes`, spreading the nodes evenly
/// over one `interval` after `start` (so renewals do not come in one burst).
pub(crate) fn spread(start: Instant, interval: Duration, index: usize, nodes: usize) -> Instant {
    let nodes = nodes.max(1) as u128;
    let offset = interval.as_nanos() * (index as u128 % nodes) / nodes;
    start + Duration::from_nanos(u64::try_from(offset).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOT: Duration = Duration::from_millis(100);
    const RENEW: Duration = Duration::from_secs(10);

    #[test]
    fn times_round_up_to_slots_and_pop_together() {
        let t0 = Instant::now();
        let mut s = HeartbeatSchedule::new(3, t0, SLOT);
        s.schedule(0, Beat::Lease, t0 + Duration::from_millis(150));
        s.schedule(1, Beat::Lease, t0 + Duration::from_millis(199));
        s.schedule(2, Beat::Status, t0 + Duration::from_millis(200));
        s.schedule(2, Beat::Lease, t0 + Duration::from_millis(201));
        assert_eq!(s.next_due(), Some(t0 + Duration::from_millis(200)));
        assert!(s.pop_due(t0 + Duration::from_millis(199)).is_empty());
        let due = s.pop_due(t0 + Duration::from_millis(200));
        assert_eq!(
            due,
            vec![(0, Beat::Lease), (1, Beat::Lease), (2, Beat::Status)]
        );
        assert_eq!(s.next_due(), Some(t0 + Duration::from_millis(300)));
        assert_eq!(
            s.pop_due(t0 + Duration::from_secs(1)),
            vec![(2, Beat::Lease)]
        );
        assert_eq!(s.next_due(), None);
    }

    #[test]
    fn rescheduling_replaces_and_schedule_by_only_advances() {
        let t0 = Instant::now();
        let mut s = HeartbeatSchedule::new(1, t0, SLOT);
        s.schedule(0, Beat::Status, t0 + Duration::from_secs(300));
        // A change to report: earlier wins.
        s.schedule_by(0, Beat::Status, t0 + Duration::from_secs(1));
        assert_eq!(
            s.scheduled(0, Beat::Status),
            Some(t0 + Duration::from_secs(1))
        );
        // A later request does not postpone it.
        s.schedule_by(0, Beat::Status, t0 + Duration::from_secs(5));
        assert_eq!(
            s.scheduled(0, Beat::Status),
            Some(t0 + Duration::from_secs(1))
        );
        assert_eq!(
            s.pop_due(t0 + Duration::from_secs(1)),
            vec![(0, Beat::Status)]
        );
        // The replaced entry at 300 s is stale and never handed out.
        assert_eq!(s.next_due(), None);
        assert!(s.pop_due(t0 + Duration::from_secs(400)).is_empty());
    }

    /// A thousand nodes renewing every 10 s wake the schedule at most once per slot: at
    /// most 100 wake-ups per renewal interval, each handing out ~10 renewals, every node
    /// exactly once per interval and never more than a slot late.
    #[test]
    fn a_thousand_leases_are_batched() {
        const NODES: usize = 1000;
        let t0 = Instant::now();
        let mut s = HeartbeatSchedule::new(NODES, t0, SLOT);
        for i in 0..NODES {
            s.schedule(i as u32, Beat::Lease, spread(t0, RENEW, i, NODES));
        }
        let mut wakeups = 0;
        let mut renewed = vec![0u32; NODES];
        let mut now = t0;
        let end = t0 + RENEW * 3;
        while let Some(next) = s.next_due() {
            now = now.max(next);
            wakeups += 1;
            for (node, beat) in s.pop_due(now) {
                assert_eq!(beat, Beat::Lease);
                let idx = node as usize;
                let wanted = spread(t0, RENEW, idx, NODES) + RENEW * renewed[idx];
                assert!(
                    now >= wanted && now - wanted < SLOT,
                    "node {idx} late or early"
                );
                renewed[idx] += 1;
                if wanted + RENEW < end {
                    s.schedule(node, Beat::Lease, wanted + RENEW);
                }
            }
        }
        assert!(renewed.iter().all(|&n| n == 3), "{renewed:?}");
        assert!(wakeups <= 3 * 100 + 1, "{wakeups} wake-ups for 3 intervals");
    }

    #[test]
    fn spread_covers_one_interval() {
        let t0 = Instant::now();
        assert_eq!(spread(t0, RENEW, 0, 4), t0);
        assert_eq!(spread(t0, RENEW, 1, 4), t0 + Duration::from_millis(2500));
        assert_eq!(spread(t0, RENEW, 3, 4), t0 + Duration::from_millis(7500));
        assert_eq!(spread(t0, RENEW, 0, 0), t0);
    }
}
