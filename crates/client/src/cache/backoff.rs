//! Jittered exponential backoff, as the reflector uses between failed lists and watches.
//!
//! The default policy is client-go's reflector policy: the base delay starts at 800 ms and
//! doubles on every failure up to 30 s; each delay handed out is the base plus a random
//! extra of up to `jitter` × base (1.0 by default, so a delay lies in `[base, 2 × base)`);
//! once no delay was asked for during 2 minutes (the component was healthy), the base
//! starts over at 800 ms. Time is read from a [`Clock`](crate::clock::Clock), so tests drive
//! it with a [`FakeClock`](crate::clock::FakeClock).

use crate::clock::SharedClock;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

/// A tiny, fast pseudo-random generator (SplitMix64). Not cryptographic: only for jitter.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator with a fixed seed (reproducible sequences).
    pub fn with_seed(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// A generator seeded from the process's per-instance hash randomness.
    pub fn from_entropy() -> SplitMix64 {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(0x5eed);
        SplitMix64::with_seed(h.finish())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform float in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        // 53 random bits into the mantissa.
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A jittered exponential backoff driven by a clock. See the [module docs](self).
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    factor: f64,
    jitter: f64,
    reset_after: Duration,
    clock: SharedClock,
    current: Duration,
    last_request: Option<Instant>,
    rng: SplitMix64,
}

impl Backoff {
    /// client-go's reflector policy: 800 ms doubling to 30 s, jitter 1.0, reset after 2 min.
    pub fn new(clock: SharedClock) -> Backoff {
        Backoff {
            initial: Duration::from_millis(800),
            cap: Duration::from_secs(30),
            factor: 2.0,
            jitter: 1.0,
            reset_after: Duration::from_secs(120),
            clock,
            current: Duration::from_millis(800),
            last_request: None,
            rng: SplitMix64::from_entropy(),
        }
    }

    /// Sets the first base delay (and the one after a reset).
    #[must_use]
    pub fn initial(mut self, initial: Duration) -> Backoff {
        self.initial = initial;
        self.current = initial;
        self
    }

    /// Sets the largest base delay.
    #[must_use]
    pub fn cap(mut self, cap: Duration) -> Backoff {
        self.cap = cap;
        self
    }

    /// Sets the growth factor of the base delay (values below 1 are treated as 1).
    #[must_use]
    pub fn factor(mut self, factor: f64) -> Backoff {
        self.factor = if factor.is_finite() && factor >= 1.0 {
            factor
        } else {
            1.0
        };
        self
    }

    /// Sets the jitter: each delay is `base × (1 + r × jitter)` with `r` uniform in `[0, 1)`.
    /// Negative or non-finite values mean no jitter.
    #[must_use]
    pub fn jitter(mut self, jitter: f64) -> Backoff {
        self.jitter = if jitter.is_finite() && jitter > 0.0 {
            jitter
        } else {
            0.0
        };
        self
    }

    /// Sets how long without a request for a delay resets the base to `initial`.
    #[must_use]
    pub fn reset_after(mut self, reset_after: Duration) -> Backoff {
        self.reset_after = reset_after;
        self
    }

    /// Uses a fixed PRNG seed, for reproducible jitter.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Backoff {
        self.rng = SplitMix64::with_seed(seed);
        self
    }

    /// The base (un-jittered) delay the next call to [`Backoff::next_delay`] will use, not
    /// counting a reset that may happen first.
    pub fn current_base(&self) -> Duration {
        self.current
    }

    /// The delay to wait after a failure now. Resets first if the previous request is at
    /// least `reset_after` old, then returns the jittered base and grows the base.
    pub fn next_delay(&mut self) -> Duration {
        let now = self.clock.now();
        if let Some(last) = self.last_request {
            if now.saturating_duration_since(last) >= self.reset_after {
                self.current = self.initial;
            }
        }
        self.last_request = Some(now);
        let base = self.current;
        let grown = base.as_secs_f64() * self.factor;
        self.current = if grown >= self.cap.as_secs_f64() {
            self.cap
        } else {
            Duration::from_secs_f64(grown)
        };
        if self.jitter > 0.0 {
            let extra = base.as_secs_f64() * self.jitter * self.rng.next_f64();
            base + Duration::from_secs_f64(extra)
        } else {
            base
        }
    }

    /// Starts over at the initial delay.
    pub fn reset(&mut self) {
        self.current = self.initial;
        self.last_request = None;
    }

    /// Waits (on the clock) for [`Backoff::next_delay`].
    pub async fn wait(&mut self) {
        let delay = self.next_delay();
        self.clock.sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    #[test]
    fn base_sequence_without_jitter() {
        let clock = FakeClock::new();
        let mut b = Backoff::new(clock.shared()).jitter(0.0);
        let got: Vec<u64> = (0..9).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(
            got,
            vec![800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000]
        );
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let clock = FakeClock::new();
        let mut b = Backoff::new(clock.shared()).seed(42);
        let bases = [800u64, 1600, 3200, 6400, 12800, 25600, 30000, 30000];
        let mut jittered = 0;
        for base in bases {
            let d = b.next_delay().as_millis() as u64;
            assert!(
                d >= base && d < 2 * base,
                "{d} outside [{base}, {})",
                2 * base
            );
            if d != base {
                jittered += 1;
            }
        }
        assert!(jittered >= 6, "jitter should almost always add something");
    }

    #[test]
    fn resets_after_two_healthy_minutes() {
        let clock = FakeClock::new();
        let mut b = Backoff::new(clock.shared()).jitter(0.0);
        for _ in 0..4 {
            b.next_delay();
        }
        assert_eq!(b.current_base(), Duration::from_millis(12800));
        // Failures keep coming within 2 min: no reset.
        clock.step(Duration::from_secs(119));
        assert_eq!(b.next_delay(), Duration::from_millis(12800));
        // Two minutes without failures: back to 800 ms.
        clock.step(Duration::from_secs(120));
        assert_eq!(b.next_delay(), Duration::from_millis(800));
        assert_eq!(b.next_delay(), Duration::from_millis(1600));
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(800));
    }

    #[test]
    fn prng_is_uniformish_and_seeded() {
        let mut a = SplitMix64::with_seed(7);
        let mut b = SplitMix64::with_seed(7);
        let xs: Vec<f64> = (0..1000).map(|_| a.next_f64()).collect();
        let ys: Vec<f64> = (0..1000).map(|_| b.next_f64()).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((0.45..0.55).contains(&mean), "mean {mean}");
    }

    #[tokio::test]
    async fn wait_sleeps_on_the_clock() {
        let clock = FakeClock::new();
        let mut b = Backoff::new(clock.shared()).jitter(0.0);
        let c = clock.clone();
        let t = tokio::spawn(async move {
            b.wait().await;
            b
        });
        while !c.has_sleepers() {
            tokio::task::yield_now().await;
        }
        clock.step(Duration::from_millis(800));
        let b = t.await.unwrap();
        assert_eq!(b.current_base(), Duration::from_millis(1600));
    }
}
