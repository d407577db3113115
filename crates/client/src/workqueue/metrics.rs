//! Work-queue metrics: a hook trait the queue calls on every state change, and a built-in
//! in-memory implementation that can render itself in the Prometheus text format under
//! client-go's metric names.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `workqueue_depth` | gauge | items waiting to be handed out (including items re-added while processing) |
//! | `workqueue_adds_total` | counter | accepted adds (duplicates of a waiting item are not counted) |
//! | `workqueue_queue_duration_seconds` | histogram | time from add to `get` |
//! | `workqueue_work_duration_seconds` | histogram | time from `get` to `done` |
//! | `workqueue_unfinished_work_seconds` | gauge | summed age of all items currently being processed |
//! | `workqueue_longest_running_processor_seconds` | gauge | age of the oldest item being processed |
//! | `workqueue_retries_total` | counter | delayed / rate-limited re-adds |
//!
//! Every series carries a `name` label, the queue's name.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::clock::{RealClock, SharedClock};

/// Receives a queue's events. All methods have empty default bodies, so an implementation
/// overrides only what it records.
///
/// The queue calls these while holding its internal lock, in the order the events happen;
/// implementations must be quick and must not call back into the queue.
pub trait QueueMetrics: Send + Sync + fmt::Debug {
    /// An item was accepted by `add` (it was not already waiting). `depth` is the number of
    /// items now waiting to be handed out, this one included.
    fn added(&self, depth: usize) {
        let _ = depth;
    }

    /// A waiting item was handed to a worker by `get`. `depth` is the number of items still
    /// waiting; `queued_at` is when the item was accepted and `now` when it was handed out.
    fn taken(&self, depth: usize, queued_at: Instant, now: Instant) {
        let _ = (depth, queued_at, now);
    }

    /// A worker called `done` for an item it received at `started_at`; `now` is the time of
    /// the call.
    fn done(&self, started_at: Instant, now: Instant) {
        let _ = (started_at, now);
    }

    /// An item was re-added through the delaying or rate-limiting path (`add_after`,
    /// `add_rate_limited`).
    fn retried(&self) {}
}

/// Metrics that record nothing: the default for queues built without metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopMetrics;

impl QueueMetrics for NoopMetrics {}

/// Upper bounds (seconds) of the duration histograms: 10 ns to 10 s in powers of ten, as in
/// client-go.
pub const DURATION_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// A point-in-time copy of a duration histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound in seconds, cumulative count of observations <= bound)`, for each bound
    /// of [`DURATION_BUCKETS`]; the `+Inf` bucket is [`count`](Self::count).
    pub buckets: Vec<(f64, u64)>,
    /// Sum of all observations, in seconds.
    pub sum_seconds: f64,
    /// Number of observations.
    pub count: u64,
}

#[derive(Debug, Default)]
struct Histogram {
    /// Non-cumulative counts per bucket of `DURATION_BUCKETS`; observations above the last
    /// bound only appear in `count`.
    counts: [u64; DURATION_BUCKETS.len()],
    sum_seconds: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, value: Duration) {
        let secs = value.as_secs_f64();
        if let Some(i) = DURATION_BUCKETS.iter().position(|bound| secs <= *bound) {
            self.counts[i] += 1;
        }
        self.sum_seconds += secs;
        self.count += 1;
    }

    fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0;
        let buckets = DURATION_BUCKETS
            .iter()
            .zip(self.counts.iter())
            .map(|(bound, n)| {
                cumulative += n;
                (*bound, cumulative)
            })
            .collect();
        HistogramSnapshot {
            buckets,
            sum_seconds: self.sum_seconds,
            count: self.count,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    depth: usize,
    adds: u64,
    retries: u64,
    queue_duration: Histogram,
    work_duration: Histogram,
    /// Start times of the items currently being processed (a multiset).
    in_flight: BTreeMap<Instant, usize>,
}

/// A point-in-time copy of all of one queue's metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSnapshot {
    /// The queue's name (the `name` label).
    pub name: String,
    /// `workqueue_depth`.
    pub depth: usize,
    /// `workqueue_adds_total`.
    pub adds_total: u64,
    /// `workqueue_retries_total`.
    pub retries_total: u64,
    /// `workqueue_queue_duration_seconds`.
    pub queue_duration: HistogramSnapshot,
    /// `workqueue_work_duration_seconds`.
    pub work_duration: HistogramSnapshot,
    /// `workqueue_unfinished_work_seconds`: the summed age of items being processed, at the
    /// time of the snapshot.
    pub unfinished_work: Duration,
    /// `workqueue_longest_running_processor_seconds`: the age of the oldest item being
    /// processed, at the time of the snapshot (zero if none).
    pub longest_running_processor: Duration,
    /// How many items are being processed.
    pub in_flight: usize,
}

/// An in-memory [`QueueMetrics`] for one named queue.
///
/// Share it with the queue as an `Arc` and read it with [`snapshot`](Self::snapshot) or
/// [`metrics_text`](Self::metrics_text). The unfinished-work gauges are computed when read,
/// using the clock given at construction, which should be the queue's clock.
#[derive(Debug)]
pub struct InMemoryMetrics {
    name: String,
    clock: SharedClock,
    state: Mutex<State>,
}

impl InMemoryMetrics {
    /// Metrics for the queue called `name`, reading time from the real clock.
    pub fn new(name: impl Into<String>) -> Self {
        Self::with_clock(name, RealClock::shared())
    }

    /// Metrics for the queue called `name`, reading time from `clock` (use the queue's).
    pub fn with_clock(name: impl Into<String>, clock: SharedClock) -> Self {
        InMemoryMetrics {
            name: name.into(),
            clock,
            state: Mutex::new(State::default()),
        }
    }

    /// The queue name these metrics are labelled with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A consistent copy of every value.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let now = self.clock.now();
        let state = self.state.lock();
        let mut unfinished = Duration::ZERO;
        let mut in_flight = 0;
        for (start, n) in &state.in_flight {
            let age = now.saturating_duration_since(*start);
            let n32 = u32::try_from(*n).unwrap_or(u32::MAX);
            unfinished = unfinished.saturating_add(age.saturating_mul(n32));
            in_flight += n;
        }
        let longest = state
            .in_flight
            .keys()
            .next()
            .map(|start| now.saturating_duration_since(*start))
            .unwrap_or_default();
        MetricsSnapshot {
            name: self.name.clone(),
            depth: state.depth,
            adds_total: state.adds,
            retries_total: state.retries,
            queue_duration: state.queue_duration.snapshot(),
            work_duration: state.work_duration.snapshot(),
            unfinished_work: unfinished,
            longest_running_processor: longest,
            in_flight,
        }
    }

    /// These metrics in the Prometheus text exposition format. To export several queues
    /// with one `# HELP`/`# TYPE` header per metric family, use [`render_prometheus`].
    pub fn metrics_text(&self) -> String {
        render_prometheus(&[self])
    }
}

impl QueueMetrics for InMemoryMetrics {
    fn added(&self, depth: usize) {
        let mut state = self.state.lock();
        state.adds += 1;
        state.depth = depth;
    }

    fn taken(&self, depth: usize, queued_at: Instant, now: Instant) {
        let mut state = self.state.lock();
        state.depth = depth;
        state
            .queue_duration
            .observe(now.saturating_duration_since(queued_at));
        *state.in_flight.entry(now).or_insert(0) += 1;
    }

    fn done(&self, started_at: Instant, now: Instant) {
        let mut state = self.state.lock();
        state
            .work_duration
            .observe(now.saturating_duration_since(started_at));
        if let Some(n) = state.in_flight.get_mut(&started_at) {
            *n -= 1;
            if *n == 0 {
                state.in_flight.remove(&started_at);
            }
        }
    }

    fn retried(&self) {
        self.state.lock().retries += 1;
    }
}

/// Renders the metrics of several queues in the Prometheus text exposition format, one
/// `# HELP` and `# TYPE` header per metric family and one series per queue (label `name`).
pub fn render_prometheus(queues: &[&InMemoryMetrics]) -> String {
    let snaps: Vec<MetricsSnapshot> = queues.iter().map(|m| m.snapshot()).collect();
    let mut out = String::new();

    let scalar = |out: &mut String,
                  family: &str,
                  kind: &str,
                  help: &str,
                  value: &dyn Fn(&MetricsSnapshot) -> String| {
        let _ = writeln!(out, "# HELP {family} {help}");
        let _ = writeln!(out, "# TYPE {family} {kind}");
        for s in &snaps {
            let _ = writeln!(out, "{family}{{name=\"{}\"}} {}", escape(&s.name), value(s));
        }
    };
    scalar(
        &mut out,
        "workqueue_depth",
        "gauge",
        "Number of items waiting in the work queue.",
        &|s| s.depth.to_string(),
    );
    scalar(
        &mut out,
        "workqueue_adds_total",
        "counter",
        "Number of items accepted by the work queue.",
        &|s| s.adds_total.to_string(),
    );
    histogram(
        &mut out,
        &snaps,
        "workqueue_queue_duration_seconds",
        "Seconds an item waited in the work queue before a worker took it.",
        |s| &s.queue_duration,
    );
    histogram(
        &mut out,
        &snaps,
        "workqueue_work_duration_seconds",
        "Seconds a worker spent on an item, from get to done.",
        |s| &s.work_duration,
    );
    scalar(
        &mut out,
        "workqueue_unfinished_work_seconds",
        "gauge",
        "Summed age in seconds of the items currently being processed.",
        &|s| s.unfinished_work.as_secs_f64().to_string(),
    );
    scalar(
        &mut out,
        "workqueue_longest_running_processor_seconds",
        "gauge",
        "Age in seconds of the item that has been processed the longest.",
        &|s| s.longest_running_processor.as_secs_f64().to_string(),
    );
    scalar(
        &mut out,
        "workqueue_retries_total",
        "counter",
        "Number of delayed or rate-limited re-adds.",
        &|s| s.retries_total.to_string(),
    );
    out
}

fn histogram(
    out: &mut String,
    snaps: &[MetricsSnapshot],
    family: &str,
    help: &str,
    pick: impl Fn(&MetricsSnapshot) -> &HistogramSnapshot,
) {
    let _ = writeln!(out, "# HELP {family} {help}");
    let _ = writeln!(out, "# TYPE {family} histogram");
    for s in snaps {
        let name = escape(&s.name);
        let h = pick(s);
        for (bound, n) in &h.buckets {
            let _ = writeln!(out, "{family}_bucket{{name=\"{name}\",le=\"{bound}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "{family}_bucket{{name=\"{name}\",le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(out, "{family}_sum{{name=\"{name}\"}} {}", h.sum_seconds);
        let _ = writeln!(out, "{family}_count{{name=\"{name}\"}} {}", h.count);
    }
}

/// Escapes a label value for the text format (backslash, double quote, newline).
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut h = Histogram::default();
        h.observe(Duration::from_millis(5)); // <= 0.01
        h.observe(Duration::from_millis(50)); // <= 0.1
        h.observe(Duration::from_secs(60)); // only +Inf
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert!((s.sum_seconds - 60.055).abs() < 1e-9);
        let at = |bound: f64| s.buckets.iter().find(|(b, _)| *b == bound).unwrap().1;
        assert_eq!(at(1e-3), 0);
        assert_eq!(at(1e-2), 1);
        assert_eq!(at(1e-1), 2);
        assert_eq!(at(10.0), 2);
    }

    #[test]
    fn in_flight_gauges_follow_the_clock() {
        let clock = FakeClock::new();
        let m = InMemoryMetrics::with_clock("q", clock.shared());
        let t0 = clock.now();
        m.added(1);
        m.added(2);
        m.taken(1, t0, t0);
        clock.step(Duration::from_secs(1));
        m.taken(0, t0, clock.now());
        clock.step(Duration::from_secs(1));
        let s = m.snapshot();
        assert_eq!(s.in_flight, 2);
        assert_eq!(s.longest_running_processor, Duration::from_secs(2));
        assert_eq!(s.unfinished_work, Duration::from_secs(3));
        m.done(t0, clock.now());
        let s = m.snapshot();
        assert_eq!(s.in_flight, 1);
        assert_eq!(s.longest_running_processor, Duration::from_secs(1));
        assert_eq!(s.work_duration.count, 1);
        assert!((s.work_duration.sum_seconds - 2.0).abs() < 1e-9);
    }

    #[test]
    fn text_format_has_headers_once_and_escapes_names() {
        let a = InMemoryMetrics::new("a");
        let b = InMemoryMetrics::new("we\"ird");
        a.added(1);
        a.retried();
        let text = render_prometheus(&[&a, &b]);
        assert_eq!(text.matches("# TYPE workqueue_depth gauge").count(), 1);
        assert!(text.contains("workqueue_depth{name=\"a\"} 1\n"));
        assert!(text.contains("workqueue_depth{name=\"we\\\"ird\"} 0\n"));
        assert!(text.contains("workqueue_adds_total{name=\"a\"} 1\n"));
        assert!(text.contains("workqueue_retries_total{name=\"a\"} 1\n"));
        assert!(
            text.contains("workqueue_queue_duration_seconds_bucket{name=\"a\",le=\"+Inf\"} 0\n")
        );
        assert!(text.contains("# TYPE workqueue_work_duration_seconds histogram"));
        assert!(text.contains("workqueue_unfinished_work_seconds{name=\"a\"} 0\n"));
        assert!(text.contains("workqueue_longest_running_processor_seconds{name=\"a\"} 0\n"));
    }
}
