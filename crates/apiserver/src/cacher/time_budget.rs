//! The shared time budget a cacher's dispatcher may spend waiting for watchers whose queue is
//! full. Owns only the budget's arithmetic; the dispatcher takes and gives back.

use std::time::{Duration, Instant};

/// How long dispatch may wait, in total, for watchers with full queues: at most
/// [`TimeBudget::MAX`] at once, refilled at a tenth of real time (kube-apiserver's cacher
/// uses the same shape), so stuck clients cannot slow everyone down for long.
#[derive(Debug)]
pub struct TimeBudget {
    available: Duration,
    refilled_at: Instant,
}

impl TimeBudget {
    /// The most that can be spent at once.
    pub const MAX: Duration = Duration::from_millis(100);

    pub(super) fn new() -> TimeBudget {
        TimeBudget {
            available: Self::MAX,
            refilled_at: Instant::now(),
        }
    }

    /// Takes everything available now (after refilling for the time that passed).
    pub fn take(&mut self) -> Duration {
        let now = Instant::now();
        let refill = now.duration_since(self.refilled_at) / 10;
        self.refilled_at = now;
        let all = (self.available + refill).min(Self::MAX);
        self.available = Duration::ZERO;
        all
    }

    /// Returns what was not spent.
    pub fn give_back(&mut self, unused: Duration) {
        self.available = (self.available + unused).min(Self::MAX);
    }
}
