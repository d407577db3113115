//! Rate limiters: policies that decide how long an item must wait before it is retried.
//!
//! - [`ItemExponentialFailureRateLimiter`]: per item, `base × 2^failures`, capped.
//! - [`BucketRateLimiter`]: one token bucket shared by all items (overall retry rate).
//! - [`MaxOfRateLimiter`]: the longest delay any of several limiters asks for.
//! - [`default_controller_rate_limiter`]: what controllers use unless they have a reason not
//!   to — per-item exponential backoff from 5 ms to 1000 s, and at most 10 retries per
//!   second overall with bursts of 100.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::queue::QueueItem;
use crate::clock::{RealClock, SharedClock};

/// Base delay of the default per-item exponential backoff.
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(5);
/// Cap of the default per-item exponential backoff.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(1000);
/// Refill rate (tokens per second) of the default overall token bucket.
pub const DEFAULT_QPS: f64 = 10.0;
/// Capacity of the default overall token bucket.
pub const DEFAULT_BURST: u32 = 100;

/// Invalid parameters for a rate limiter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RateLimiterError {
    /// The refill rate must be a finite number greater than zero.
    #[error("token bucket rate must be finite and > 0, got {qps}")]
    InvalidRate {
        /// The rejected rate.
        qps: f64,
    },
    /// The bucket must hold at least one token.
    #[error("token bucket burst must be at least 1")]
    ZeroBurst,
}

/// Decides how long an item waits before being retried.
///
/// Contract (client-go's `RateLimiter`):
/// - [`when`](Self::when) is called once per retry and *records* it: each call may lengthen
///   the next delay for that item (or, for shared limiters, for every item).
/// - [`forget`](Self::forget) says the item is no longer being retried (it succeeded, or the
///   caller gave up): per-item history is cleared.
/// - [`num_requeues`](Self::num_requeues) is how many times `when` was called for the item
///   since it was last forgotten (0 for limiters that do not track items).
///
/// Implementations are shared between workers, so they synchronise internally.
pub trait RateLimiter<T>: Send + Sync + fmt::Debug {
    /// How long `item` should wait before its next attempt; records the attempt.
    fn when(&self, item: &T) -> Duration;
    /// Stops tracking `item`.
    fn forget(&self, item: &T);
    /// How many attempts have been recorded for `item` since it was last forgotten.
    fn num_requeues(&self, item: &T) -> u32;
}

impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for Box<R> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for Arc<R> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

/// Per-item exponential backoff: the n-th call to `when` for an item (counting from 0 since
/// it was last forgotten) returns `base × 2^n`, capped at `max`. Overflow saturates at `max`.
///
/// With the defaults: 5 ms, 10 ms, 20 ms, … reaching the 1000 s cap on the 18th retry.
pub struct ItemExponentialFailureRateLimiter<T> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T> fmt::Debug for ItemExponentialFailureRateLimiter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemExponentialFailureRateLimiter")
            .field("base", &self.base)
            .field("max", &self.max)
            .field("tracked_items", &self.failures.lock().len())
            .finish()
    }
}

impl<T: QueueItem> Default for ItemExponentialFailureRateLimiter<T> {
    /// Base [`DEFAULT_BASE_DELAY`], cap [`DEFAULT_MAX_DELAY`].
    fn default() -> Self {
        Self::new(DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY)
    }
}

impl<T: QueueItem> ItemExponentialFailureRateLimiter<T> {
    /// Backoff starting at `base` and doubling per failure up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        ItemExponentialFailureRateLimiter {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// `base × 2^exponent`, capped at `max`, without overflow.
    fn backoff(&self, exponent: u32) -> Duration {
        1u32.checked_shl(exponent)
            .and_then(|f| self.base.checked_mul(f))
            .map_or(self.max, |d| d.min(self.max))
    }
}

impl<T: QueueItem> RateLimiter<T> for ItemExponentialFailureRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let exponent = {
            let mut failures = self.failures.lock();
            let count = failures.entry(item.clone()).or_insert(0);
            let exponent = *count;
            *count = count.saturating_add(1);
            exponent
        };
        self.backoff(exponent)
    }

    fn forget(&self, item: &T) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

#[derive(Debug)]
struct Bucket {
    /// Available tokens; negative when future tokens have already been reserved.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    updated: Instant,
}

/// An overall token bucket shared by all items: it holds up to `burst` tokens and gains
/// `qps` per second. Each call to `when` reserves one token and returns how long until that
/// token exists (zero while the bucket is not empty), so sustained retries are spread out to
/// `qps` per second whatever the items.
///
/// It does not track items: `forget` does nothing and `num_requeues` is always 0.
#[derive(Debug)]
pub struct BucketRateLimiter {
    qps: f64,
    burst: f64,
    clock: SharedClock,
    bucket: Mutex<Bucket>,
}

impl Default for BucketRateLimiter {
    /// [`DEFAULT_QPS`] tokens per second, [`DEFAULT_BURST`] tokens, real clock.
    fn default() -> Self {
        let clock = RealClock::shared();
        let now = clock.now();
        BucketRateLimiter {
            qps: DEFAULT_QPS,
            burst: f64::from(DEFAULT_BURST),
            clock,
            bucket: Mutex::new(Bucket {
                tokens: f64::from(DEFAULT_BURST),
                updated: now,
            }),
        }
    }
}

impl BucketRateLimiter {
    /// A full bucket of `burst` tokens refilled at `qps` per second, on the real clock.
    ///
    /// # Errors
    /// [`RateLimiterError`] if `qps` is not finite and positive or `burst` is zero.
    pub fn new(qps: f64, burst: u32) -> Result<Self, RateLimiterError> {
        Self::with_clock(qps, burst, RealClock::shared())
    }

    /// Like [`new`](Self::new), measuring refill time with `clock`.
    ///
    /// # Errors
    /// [`RateLimiterError`] if `qps` is not finite and positive or `burst` is zero.
    pub fn with_clock(qps: f64, burst: u32, clock: SharedClock) -> Result<Self, RateLimiterError> {
        if !(qps.is_finite() && qps > 0.0) {
            return Err(RateLimiterError::InvalidRate { qps });
        }
        if burst == 0 {
            return Err(RateLimiterError::ZeroBurst);
        }
        let now = clock.now();
        Ok(BucketRateLimiter {
            qps,
            burst: f64::from(burst),
            clock,
            bucket: Mutex::new(Bucket {
                tokens: f64::from(burst),
                updated: now,
            }),
        })
    }

    /// Reserves one token and returns the wait until it is available.
    fn reserve(&self) -> Duration {
        let now = self.clock.now();
        let mut bucket = self.bucket.lock();
        if now > bucket.updated {
            let elapsed = (now - bucket.updated).as_secs_f64();
            bucket.tokens = (bucket.tokens + elapsed * self.qps).min(self.burst);
            bucket.updated = now;
        }
        bucket.tokens -= 1.0;
        if bucket.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(-bucket.tokens / self.qps).unwrap_or(Duration::MAX)
        }
    }
}

impl<T> RateLimiter<T> for BucketRateLimiter {
    fn when(&self, _item: &T) -> Duration {
        self.reserve()
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

/// Combines limiters: `when` asks every one of them (so each records the attempt) and
/// returns the longest delay; `forget` forgets in all; `num_requeues` is the largest count.
/// With no limiters, every delay is zero.
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> fmt::Debug for MaxOfRateLimiter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxOfRateLimiter")
            .field("limiters", &self.limiters)
            .finish()
    }
}

impl<T> MaxOfRateLimiter<T> {
    /// The combination of `limiters`.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        MaxOfRateLimiter { limiters }
    }
}

impl<T> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .fold(Duration::ZERO, Duration::max)
    }

    fn forget(&self, item: &T) {
        for l in &self.limiters {
            l.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// The standard controller limiter, as client-go's `DefaultControllerRateLimiter`: the
/// larger of per-item exponential backoff (5 ms doubling to 1000 s) and an overall token
/// bucket (10 per second, burst 100), on the real clock.
pub fn default_controller_rate_limiter<T: QueueItem>() -> MaxOfRateLimiter<T> {
    default_controller_rate_limiter_with_clock(RealClock::shared())
}

/// [`default_controller_rate_limiter`] whose token bucket refills according to `clock`.
pub fn default_controller_rate_limiter_with_clock<T: QueueItem>(
    clock: SharedClock,
) -> MaxOfRateLimiter<T> {
    let bucket = BucketRateLimiter {
        qps: DEFAULT_QPS,
        burst: f64::from(DEFAULT_BURST),
        bucket: Mutex::new(Bucket {
            tokens: f64::from(DEFAULT_BURST),
            updated: clock.now(),
        }),
        clock,
    };
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::<T>::default()),
        Box::new(bucket),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn close(a: Duration, b: Duration) -> bool {
        a.abs_diff(b) <= Duration::from_micros(1)
    }

    #[test]
    fn exponential_sequence_caps_and_resets_on_forget() {
        let rl = ItemExponentialFailureRateLimiter::<&str>::default();
        let expected = [5, 10, 20, 40, 80, 160, 320, 640, 1280];
        for (i, want) in expected.iter().enumerate() {
            assert_eq!(rl.when(&"a"), ms(*want), "attempt {i}");
        }
        assert_eq!(rl.num_requeues(&"a"), 9);
        // Another item has its own history.
        assert_eq!(rl.when(&"b"), ms(5));
        assert_eq!(rl.num_requeues(&"b"), 1);

        // 5 ms × 2^17 = 655.36 s, × 2^18 would exceed 1000 s: capped from then on.
        let mut last = Duration::ZERO;
        for _ in 9..18 {
            last = rl.when(&"a");
        }
        assert_eq!(last, Duration::from_millis(5 << 17));
        assert_eq!(rl.when(&"a"), DEFAULT_MAX_DELAY);
        for _ in 0..200 {
            assert_eq!(rl.when(&"a"), DEFAULT_MAX_DELAY);
        }

        rl.forget(&"a");
        assert_eq!(rl.num_requeues(&"a"), 0);
        assert_eq!(rl.when(&"a"), ms(5));
        assert_eq!(rl.when(&"a"), ms(10));
    }

    #[test]
    fn exponential_overflow_saturates_at_max() {
        let rl = ItemExponentialFailureRateLimiter::<u8>::new(
            Duration::from_secs(1 << 40),
            Duration::MAX,
        );
        assert_eq!(rl.when(&1), Duration::from_secs(1 << 40));
        for _ in 0..100 {
            assert!(rl.when(&1) <= Duration::MAX);
        }
        assert_eq!(rl.when(&1), Duration::MAX);
        assert_eq!(rl.backoff(u32::MAX), Duration::MAX);
    }

    #[test]
    fn bucket_gives_burst_free_then_spaces_tokens() {
        let clock = FakeClock::new();
        let rl = BucketRateLimiter::with_clock(10.0, 100, clock.shared()).unwrap();
        for i in 0..100 {
            assert_eq!(
                RateLimiter::<u32>::when(&rl, &i),
                Duration::ZERO,
                "token {i}"
            );
        }
        assert!(close(RateLimiter::<u32>::when(&rl, &100), ms(100)));
        assert!(close(RateLimiter::<u32>::when(&rl, &101), ms(200)));
        // Time refills the bucket: after 300 ms the two reservations are paid and one
        // token is free again.
        clock.step(ms(300));
        assert_eq!(RateLimiter::<u32>::when(&rl, &1), Duration::ZERO);
        assert!(close(RateLimiter::<u32>::when(&rl, &1), ms(100)));
        // Never more than `burst` saved up.
        clock.step(Duration::from_secs(3600));
        for _ in 0..100 {
            assert_eq!(RateLimiter::<u32>::when(&rl, &1), Duration::ZERO);
        }
        assert!(RateLimiter::<u32>::when(&rl, &1) > Duration::ZERO);
        assert_eq!(RateLimiter::<u32>::num_requeues(&rl, &1), 0);
    }

    #[test]
    fn bucket_rejects_bad_parameters() {
        assert_eq!(
            BucketRateLimiter::new(0.0, 1).unwrap_err(),
            RateLimiterError::InvalidRate { qps: 0.0 }
        );
        assert!(BucketRateLimiter::new(f64::NAN, 1).is_err());
        assert!(BucketRateLimiter::new(f64::INFINITY, 1).is_err());
        assert_eq!(
            BucketRateLimiter::new(1.0, 0).unwrap_err(),
            RateLimiterError::ZeroBurst
        );
    }

    #[test]
    fn tiny_rate_does_not_panic() {
        let rl = BucketRateLimiter::new(1e-300, 1).unwrap();
        assert_eq!(RateLimiter::<u8>::when(&rl, &0), Duration::ZERO);
        assert_eq!(RateLimiter::<u8>::when(&rl, &0), Duration::MAX);
    }

    #[derive(Debug)]
    struct Fixed(Duration, u32);
    impl RateLimiter<u8> for Fixed {
        fn when(&self, _: &u8) -> Duration {
            self.0
        }
        fn forget(&self, _: &u8) {}
        fn num_requeues(&self, _: &u8) -> u32 {
            self.1
        }
    }

    #[test]
    fn max_of_picks_the_larger() {
        let rl = MaxOfRateLimiter::new(vec![
            Box::new(Fixed(ms(30), 1)),
            Box::new(Fixed(ms(70), 4)),
            Box::new(Fixed(ms(10), 2)),
        ]);
        assert_eq!(rl.when(&0), ms(70));
        assert_eq!(rl.num_requeues(&0), 4);
        assert_eq!(
            MaxOfRateLimiter::<u8>::new(Vec::new()).when(&0),
            Duration::ZERO
        );
    }

    #[test]
    fn default_controller_limiter_combines_backoff_and_bucket() {
        let clock = FakeClock::new();
        let rl = default_controller_rate_limiter_with_clock::<u32>(clock.shared());
        // Per-item backoff dominates while the bucket has tokens.
        assert_eq!(rl.when(&1), ms(5));
        assert_eq!(rl.when(&1), ms(10));
        assert_eq!(rl.num_requeues(&1), 2);
        // Drain the bucket with fresh items (98 tokens left, each first retry is 5 ms).
        for i in 2..100 {
            assert_eq!(rl.when(&i), ms(5));
        }
        // The bucket is empty: a fresh item now waits ~100 ms, more than its 5 ms backoff.
        assert!(close(rl.when(&1000), ms(100)));
        rl.forget(&1);
        assert_eq!(rl.num_requeues(&1), 0);
    }
}
