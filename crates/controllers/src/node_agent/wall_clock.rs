//! Wall-clock time for the timestamps components write (`startTime`, `lastHeartbeatTime`,
//! a lease's `renewTime`), driven by the component's monotonic [`Clock`](client::clock::Clock).
//!
//! Status timestamps are wall-clock times, but what decides *when* something happens
//! (a lease renewal, a container exit, an eviction) is the component's
//! [`SharedClock`]. A [`WallClock`] ties the two: it reads the
//! system time once, at construction, and from then on advances it by the monotonic clock.
//! Under a [`FakeClock`](client::clock::FakeClock) the written timestamps therefore move
//! exactly as far as the test steps the clock.

use client::clock::SharedClock;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The system time as seen through a monotonic [`Clock`](client::clock::Clock). Cheap to clone.
#[derive(Debug, Clone)]
pub struct WallClock {
    clock: SharedClock,
    base_instant: Instant,
    base_wall: SystemTime,
}

impl WallClock {
    /// A wall clock that reads `SystemTime::now()` now and then advances with `clock`.
    pub fn new(clock: SharedClock) -> WallClock {
        Self::starting_at(clock, SystemTime::now())
    }

    /// A wall clock whose time is `wall` at `clock`'s present instant (for tests that need
    /// reproducible timestamps).
    pub fn starting_at(clock: SharedClock, wall: SystemTime) -> WallClock {
        WallClock {
            base_instant: clock.now(),
            clock,
            base_wall: wall,
        }
    }

    /// The monotonic clock this wall clock follows.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// The current monotonic instant.
    pub fn instant(&self) -> Instant {
        self.clock.now()
    }

    /// The current wall-clock time.
    pub fn now(&self) -> SystemTime {
        self.base_wall + self.clock.since(self.base_instant)
    }

    /// The monotonic instant at which the wall clock reads `wall` (the present instant for
    /// times in the past).
    pub fn instant_of(&self, wall: SystemTime) -> Instant {
        let now = self.now();
        let ahead = wall.duration_since(now).unwrap_or(Duration::ZERO);
        self.clock.now() + ahead
    }
}

/// `t` as a Kubernetes `Time` (second precision, as the API serializes it: keeping the
/// fraction would make a status computed here differ from the same status read back).
pub fn time(t: SystemTime) -> Time {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// `t` as a Kubernetes `MicroTime` (microsecond precision).
pub fn micro_time(t: SystemTime) -> MicroTime {
    let micros = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    MicroTime(Timestamp::from_microsecond(micros).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn from_timestamp(t: Timestamp) -> SystemTime {
    let micros = t.as_microsecond();
    if micros >= 0 {
        UNIX_EPOCH + Duration::from_micros(micros.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_micros(micros.unsigned_abs())
    }
}

/// A Kubernetes `Time` as a `SystemTime`.
pub fn system_time(t: &Time) -> SystemTime {
    from_timestamp(t.0)
}

/// A Kubernetes `MicroTime` as a `SystemTime`.
pub fn system_micro_time(t: &MicroTime) -> SystemTime {
    from_timestamp(t.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::clock::{Clock, FakeClock};

    #[test]
    fn follows_the_monotonic_clock() {
        let fake = FakeClock::new();
        let start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let wall = WallClock::starting_at(fake.shared(), start);
        assert_eq!(wall.now(), start);
        fake.step(Duration::from_millis(1500));
        assert_eq!(wall.now(), start + Duration::from_millis(1500));
        let at = wall.instant_of(start + Duration::from_secs(10));
        assert_eq!(at, fake.now() + Duration::from_millis(8500));
        assert_eq!(wall.instant_of(start), fake.now());
    }

    #[test]
    fn times_are_truncated_to_what_the_api_keeps() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_750);
        let json = serde_json::to_value(time(t)).unwrap();
        assert_eq!(json, "2023-11-14T22:13:20Z");
        assert_eq!(
            system_time(&time(t)),
            UNIX_EPOCH + Duration::from_secs(1_700_000_000)
        );
        let json = serde_json::to_value(micro_time(t)).unwrap();
        assert_eq!(json, "2023-11-14T22:13:20.750000Z");
    }
}
