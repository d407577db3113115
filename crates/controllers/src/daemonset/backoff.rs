//! The backoff between replacements of a DaemonSet's failed pod on one node (client-go's
//! `flowcontrol.Backoff` as the DaemonSet controller uses it: from 1 s, doubling to 15
//! minutes), so that a controller and a kubelet that keeps rejecting the pod do not fight
//! in a hot loop.

use client::clock::SharedClock;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The first delay.
pub const INITIAL: Duration = Duration::from_secs(1);
/// The longest delay.
pub const MAX: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    last_update: Instant,
}

/// Per-key exponential backoff, timed by a (possibly fake) clock.
#[derive(Debug)]
pub struct FailedPodsBackoff {
    clock: SharedClock,
    entries: Mutex<HashMap<String, Entry>>,
}

impl FailedPodsBackoff {
    /// An empty backoff timed by `clock`.
    pub fn new(clock: SharedClock) -> FailedPodsBackoff {
        FailedPodsBackoff {
            clock,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The key of `node`'s pods of the DaemonSet with uid `ds_uid`.
    pub fn key(ds_uid: &str, node: &str) -> String {
        format!("{ds_uid}/{node}")
    }

    /// The time still to wait for `key` when it is within its delay since the last
    /// [`FailedPodsBackoff::next`], `None` when it may act.
    pub fn remaining(&self, key: &str) -> Option<Duration> {
        let now = self.clock.now();
        let entries = self.entries.lock();
        let e = entries.get(key)?;
        let since = now.saturating_duration_since(e.last_update);
        (since < e.delay).then(|| e.delay - since)
    }

    /// Records an action for `key`: the first delay, or double the last one (at most
    /// [`MAX`]); a key quiet for twice [`MAX`] starts again from [`INITIAL`].
    pub fn next(&self, key: &str) {
        let now = self.clock.now();
        let mut entries = self.entries.lock();
        let delay = match entries.get(key) {
            Some(e) if now.saturating_duration_since(e.last_update) <= 2 * MAX => {
                (e.delay * 2).min(MAX)
            }
            _ => INITIAL,
        };
        entries.insert(
            key.to_string(),
            Entry {
                delay,
                last_update: now,
            },
        );
    }

    /// Forgets keys quiet for more than twice [`MAX`].
    pub fn gc(&self) {
        let now = self.clock.now();
        self.entries
            .lock()
            .retain(|_, e| now.saturating_duration_since(e.last_update) <= 2 * MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::clock::FakeClock;

    #[test]
    fn doubles_up_to_the_limit_and_expires() {
        let clock = FakeClock::new();
        let b = FailedPodsBackoff::new(clock.shared());
        let k = FailedPodsBackoff::key("u", "n1");
        assert_eq!(b.remaining(&k), None);
        b.next(&k);
        assert_eq!(b.remaining(&k), Some(INITIAL));
        clock.step(Duration::from_millis(400));
        assert_eq!(b.remaining(&k), Some(Duration::from_millis(600)));
        clock.step(Duration::from_millis(600));
        assert_eq!(b.remaining(&k), None);
        b.next(&k);
        assert_eq!(b.remaining(&k), Some(2 * INITIAL));
        for _ in 0..20 {
            b.next(&k);
        }
        assert_eq!(b.remaining(&k), Some(MAX));
        assert_eq!(b.remaining(&FailedPodsBackoff::key("u", "n2")), None);
        clock.step(2 * MAX + Duration::from_secs(1));
        b.gc();
        b.next(&k);
        assert_eq!(b.remaining(&k), Some(INITIAL));
    }
}
