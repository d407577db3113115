//! A pluggable source of time, so that time-driven code (delaying queues, rate limiters,
//! reflector backoff and resync timers, informers) can be tested deterministically.
//!
//! Production code uses [`RealClock`]; tests use [`FakeClock`], whose time only moves when
//! the test calls [`FakeClock::step`] or [`FakeClock::set`]. Code that needs time should take
//! a [`SharedClock`] (an `Arc<dyn Clock>`) and never call `Instant::now()` or
//! `tokio::time::sleep` directly.
//!
//! ```
//! use std::time::Duration;
//! use client::clock::{Clock, FakeClock};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let clock = FakeClock::new();
//! let deadline = clock.now() + Duration::from_secs(5);
//! let sleeper = tokio::spawn(clock.sleep_until(deadline));
//! clock.step(Duration::from_secs(5));
//! sleeper.await.unwrap(); // woken by the step, no real time has passed
//! # });
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// A boxed, `'static` future returned by [`Clock::sleep_until`]; it owns everything it needs,
/// so it may be stored, raced in `select!`, or spawned.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A shared, dynamically dispatched clock, the form in which components hold a clock.
pub type SharedClock = Arc<dyn Clock>;

/// A source of monotonic time and of timers that fire according to that time.
///
/// Contract: `now()` never goes backwards; a future returned by `sleep_until(t)` completes
/// once `now() >= t` (immediately if that is already so), and at no earlier time. Both are safe
/// to call from any thread.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant according to this clock.
    fn now(&self) -> Instant;

    /// A future that completes once this clock reaches `deadline`.
    fn sleep_until(&self, deadline: Instant) -> Sleep;

    /// A future that completes once `duration` has passed on this clock. If `now() +
    /// duration` is not representable, the future never completes.
    fn sleep(&self, duration: Duration) -> Sleep {
        match self.now().checked_add(duration) {
            Some(deadline) => self.sleep_until(deadline),
            None => Box::pin(std::future::pending()),
        }
    }

    /// The time elapsed since `earlier` on this clock, zero if `earlier` is in the future.
    fn since(&self, earlier: Instant) -> Duration {
        self.now().saturating_duration_since(earlier)
    }
}

/// The wall-time clock, backed by Tokio's timer.
///
/// It reads time through `tokio::time::Instant`, so under a paused Tokio runtime
/// (`#[tokio::test(start_paused = true)]`) it follows Tokio's virtual time too. Its
/// `sleep_until` futures must be polled inside a Tokio runtime with the time driver enabled.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealClock;

impl RealClock {
    /// A [`SharedClock`] holding a `RealClock`.
    pub fn shared() -> SharedClock {
        Arc::new(RealClock)
    }
}

impl Clock for RealClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(tokio::time::Instant::from_std(
            deadline,
        )))
    }
}

/// A manually driven clock for tests: time stands still until [`step`](FakeClock::step) or
/// [`set`](FakeClock::set) moves it, and moving it wakes exactly the sleepers whose deadline
/// has been reached.
///
/// Cloning a `FakeClock` yields another handle to the same time.
#[derive(Clone)]
pub struct FakeClock {
    time: Arc<watch::Sender<Instant>>,
}

impl fmt::Debug for FakeClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeClock")
            .field("now", &*self.time.borrow())
            .field("sleepers", &self.sleepers())
            .finish()
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeClock {
    /// A fake clock starting at the current real instant (the exact start is irrelevant; only
    /// differences matter).
    pub fn new() -> Self {
        Self::starting_at(Instant::now())
    }

    /// A fake clock whose `now()` is `start` until moved.
    pub fn starting_at(start: Instant) -> Self {
        let (tx, _rx) = watch::channel(start);
        FakeClock { time: Arc::new(tx) }
    }

    /// A [`SharedClock`] handle to this same fake time.
    pub fn shared(&self) -> SharedClock {
        Arc::new(self.clone())
    }

    /// Moves time forward by `by` and wakes every sleeper whose deadline is now reached. A
    /// step that would overflow `Instant` leaves the time unchanged.
    pub fn step(&self, by: Duration) {
        self.time.send_modify(|now| {
            if let Some(later) = now.checked_add(by) {
                *now = later;
            }
        });
    }

    /// Sets the time to `to`, if that is not earlier than the current time (the clock is
    /// monotonic: an earlier `to` is ignored), and wakes the sleepers that are due.
    pub fn set(&self, to: Instant) {
        self.time.send_modify(|now| {
            if to > *now {
                *now = to;
            }
        });
    }

    /// How many `sleep_until` futures are currently alive (created and neither completed nor
    /// dropped). Useful to wait until a background task has armed its timer before stepping.
    pub fn sleepers(&self) -> usize {
        self.time.receiver_count()
    }

    /// Whether any sleeper is waiting on this clock.
    pub fn has_sleepers(&self) -> bool {
        self.sleepers() > 0
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        *self.time.borrow()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let mut rx = self.time.subscribe();
        Box::pin(async move {
            loop {
                if *rx.borrow_and_update() >= deadline {
                    return;
                }
                if rx.changed().await.is_err() {
                    // The sender lives as long as any clock handle; if every handle is gone
                    // time can never move again.
                    std::future::pending::<()>().await;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fake_clock_only_moves_when_stepped() {
        let clock = FakeClock::new();
        let t0 = clock.now();
        tokio::task::yield_now().await;
        assert_eq!(clock.now(), t0);
        clock.step(Duration::from_millis(250));
        assert_eq!(clock.now(), t0 + Duration::from_millis(250));
        assert_eq!(clock.since(t0), Duration::from_millis(250));
        // Going backwards is ignored.
        clock.set(t0);
        assert_eq!(clock.now(), t0 + Duration::from_millis(250));
    }

    #[tokio::test]
    async fn fake_sleep_wakes_at_deadline_not_before() {
        let clock = FakeClock::new();
        let deadline = clock.now() + Duration::from_secs(10);
        let handle = tokio::spawn(clock.sleep_until(deadline));
        // Let the sleeper register.
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        assert_eq!(clock.sleepers(), 1);
        clock.step(Duration::from_secs(9));
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        assert!(!handle.is_finished());
        clock.step(Duration::from_secs(1));
        handle.await.unwrap();
        assert_eq!(clock.sleepers(), 0);
    }

    #[tokio::test]
    async fn fake_sleep_in_the_past_is_immediate() {
        let clock = FakeClock::new();
        let past = clock.now();
        clock.step(Duration::from_secs(1));
        clock.sleep_until(past).await;
        clock.sleep(Duration::ZERO).await;
    }

    #[tokio::test(start_paused = true)]
    async fn real_clock_follows_tokio_time() {
        let clock = RealClock;
        let t0 = clock.now();
        clock.sleep(Duration::from_secs(3)).await;
        assert!(clock.since(t0) >= Duration::from_secs(3));
    }
}
