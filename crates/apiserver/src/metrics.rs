//! Prometheus metrics with Kubernetes' names, rendered in the text exposition format.
//!
//! Handles are looked up once (a mutex-protected map) and then updated with plain atomics, so
//! hot paths (per event, per request) pay one atomic add.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// Latency buckets in seconds (a subset of kube-apiserver's request-duration buckets).
const BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
];

/// A histogram with fixed buckets; `observe` is lock-free.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; 14],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation in seconds.
    pub fn observe(&self, secs: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }
}

#[derive(Debug)]
enum Handle {
    Counter(Arc<AtomicU64>),
    Gauge(Arc<AtomicI64>),
    Histogram(Arc<Histogram>),
}

/// One metric family: its help text and its series by rendered label set.
type Family = (&'static str, BTreeMap<String, Handle>);

/// The metric registry of one server. Cheap to share (`Arc`).
#[derive(Debug, Default)]
pub struct Metrics {
    // name → (help, type, labelset → handle); BTreeMaps keep the output stable.
    families: Mutex<BTreeMap<&'static str, Family>>,
}

fn label_string(labels: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let v = v
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(s, "{k}=\"{v}\"");
    }
    s
}

impl Metrics {
    /// A new, empty registry.
    pub fn new() -> Arc<Metrics> {
        Arc::new(Metrics::default())
    }

    /// The counter `name{labels}`, created at 0 on first use.
    pub fn counter(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
    ) -> Arc<AtomicU64> {
        let mut fams = self.families.lock();
        let fam = fams.entry(name).or_insert_with(|| (help, BTreeMap::new()));
        match fam
            .1
            .entry(label_string(labels))
            .or_insert_with(|| Handle::Counter(Arc::default()))
        {
            Handle::Counter(c) => c.clone(),
            _ => Arc::default(),
        }
    }

    /// The gauge `name{labels}`, created at 0 on first use.
    pub fn gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
    ) -> Arc<AtomicI64> {
        let mut fams = self.families.lock();
        let fam = fams.entry(name).or_insert_with(|| (help, BTreeMap::new()));
        match fam
            .1
            .entry(label_string(labels))
            .or_insert_with(|| Handle::Gauge(Arc::default()))
        {
            Handle::Gauge(g) => g.clone(),
            _ => Arc::default(),
        }
    }

    /// The histogram `name{labels}` (seconds), created empty on first use.
    pub fn histogram(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
    ) -> Arc<Histogram> {
        let mut fams = self.families.lock();
        let fam = fams.entry(name).or_insert_with(|| (help, BTreeMap::new()));
        match fam
            .1
            .entry(label_string(labels))
            .or_insert_with(|| Handle::Histogram(Arc::default()))
        {
            Handle::Histogram(h) => h.clone(),
            _ => Arc::default(),
        }
    }

    /// Renders every metric in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let fams = self.families.lock();
        let mut out = String::new();
        for (name, (help, series)) in fams.iter() {
            let kind = match series.values().next() {
                Some(Handle::Counter(_)) => "counter",
                Some(Handle::Gauge(_)) => "gauge",
                Some(Handle::Histogram(_)) => "histogram",
                None => continue,
            };
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, h) in series {
                let braces = |extra: &str| -> String {
                    match (labels.is_empty(), extra.is_empty()) {
                        (true, true) => String::new(),
                        (true, false) => format!("{{{extra}}}"),
                        (false, true) => format!("{{{labels}}}"),
                        (false, false) => format!("{{{labels},{extra}}}"),
                    }
                };
                match h {
                    Handle::Counter(c) => {
                        let _ = writeln!(out, "{name}{} {}", braces(""), c.load(Ordering::Relaxed));
                    }
                    Handle::Gauge(g) => {
                        let _ = writeln!(out, "{name}{} {}", braces(""), g.load(Ordering::Relaxed));
                    }
                    Handle::Histogram(hist) => {
                        for (i, b) in BUCKETS.iter().enumerate() {
                            let le = format!("le=\"{b}\"");
                            let _ = writeln!(
                                out,
                                "{name}_bucket{} {}",
                                braces(&le),
                                hist.counts[i].load(Ordering::Relaxed)
                            );
                        }
                        let count = hist.count.load(Ordering::Relaxed);
                        let _ = writeln!(out, "{name}_bucket{} {count}", braces("le=\"+Inf\""));
                        let sum = hist.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
                        let _ = writeln!(out, "{name}_sum{} {sum}", braces(""));
                        let _ = writeln!(out, "{name}_count{} {count}", braces(""));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_and_histograms() {
        let m = Metrics::new();
        m.counter(
            "apiserver_request_total",
            "Requests.",
            &[("verb", "LIST"), ("code", "200")],
        )
        .fetch_add(2, Ordering::Relaxed);
        m.gauge(
            "apiserver_longrunning_requests",
            "Open watches.",
            &[("verb", "WATCH")],
        )
        .fetch_add(1, Ordering::Relaxed);
        m.histogram(
            "apiserver_request_duration_seconds",
            "Latency.",
            &[("verb", "GET")],
        )
        .observe(0.03);
        let text = m.render();
        assert!(text.contains("# TYPE apiserver_request_total counter"));
        assert!(text.contains("apiserver_request_total{verb=\"LIST\",code=\"200\"} 2"));
        assert!(text.contains("apiserver_longrunning_requests{verb=\"WATCH\"} 1"));
        assert!(
            text.contains("apiserver_request_duration_seconds_bucket{verb=\"GET\",le=\"0.025\"} 0")
        );
        assert!(
            text.contains("apiserver_request_duration_seconds_bucket{verb=\"GET\",le=\"0.05\"} 1")
        );
        assert!(text.contains("apiserver_request_duration_seconds_count{verb=\"GET\"} 1"));
    }
}
