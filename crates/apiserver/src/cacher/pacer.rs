//! The pacer that spaces out a reflector's failing or short-lived storage lists and watches.
//! Owns only its clock arithmetic; it assumes one pacer per kind of attempt.

use std::time::Duration;

/// Spaces out attempts that keep failing or ending at once: an attempt started within
/// [`Pacer::MIN_GAP`] of the previous one waits first, 100 ms doubling to 5 s; an attempt after
/// a longer gap goes at once and resets the wait. Storage that is down, ends every watch
/// immediately, or answers every watch with "compacted" then costs a few requests per second
/// instead of a busy loop.
#[derive(Debug, Default)]
pub(super) struct Pacer {
    last: Option<std::time::Instant>,
    delay: Duration,
}

impl Pacer {
    const MIN_GAP: Duration = Duration::from_secs(1);
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);

    /// How long the attempt starting at `now` should wait.
    fn next_delay(&mut self, now: std::time::Instant) -> Duration {
        let wait = match self.last {
            Some(t) if now.saturating_duration_since(t) < Self::MIN_GAP => {
                let d = self.delay.max(Self::FIRST);
                self.delay = (d * 2).min(Self::MAX);
                d
            }
            _ => {
                self.delay = Self::FIRST;
                Duration::ZERO
            }
        };
        self.last = Some(now + wait);
        wait
    }

    pub(super) async fn pace(&mut self) {
        let wait = self.next_delay(std::time::Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Pacer;
    use std::time::{Duration, Instant};

    #[test]
    fn attempts_that_keep_ending_at_once_are_spaced_out_and_a_healthy_one_resets() {
        let mut p = Pacer::default();
        let t0 = Instant::now();
        assert_eq!(
            p.next_delay(t0),
            Duration::ZERO,
            "the first attempt goes at once"
        );
        // Each next attempt comes right after the previous one started (it ended at once).
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let w = p.next_delay(now);
            waits.push(w.as_millis());
            now += w;
        }
        assert_eq!(waits, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        // An attempt that lasted longer than the gap: the next goes at once, waits start over.
        now += Duration::from_secs(30);
        assert_eq!(p.next_delay(now), Duration::ZERO);
        assert_eq!(p.next_delay(now), Duration::from_millis(100));
    }
}
