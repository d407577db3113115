//! `listwatch bench fanout-plot`: the server's CPU against the number of watchers, drawn as
//! an SVG from the JSON lines that runs of `listwatch bench fanout` printed last (one series
//! per transport).
//!
//! A sweep, for example:
//! ```text
//! for w in 100 250 500 1000 2000; do
//!   listwatch bench fanout --watchers $w --writes-per-sec 100 --duration 8 | tail -1 >> runs.jsonl
//! done
//! listwatch bench fanout-plot runs.jsonl --svg docs/fanout-cpu.svg
//! ```

use super::svg::{self, Labels, Series};
use anyhow::Context as _;
use clap::{Args, ValueEnum};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Options of `listwatch bench fanout-plot`.
#[derive(Args, Debug, Clone)]
pub struct FanoutPlotArgs {
    /// Files of `bench fanout` output; every line that is its final JSON is read, any other
    /// line is skipped.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Where to write the SVG.
    #[arg(long, value_name = "FILE")]
    pub svg: PathBuf,
    /// What the vertical axis shows.
    #[arg(long, value_enum, default_value_t = CpuMeasure::Percent)]
    pub y: CpuMeasure,
    /// A line of small text under the chart: how the runs were made.
    #[arg(long, default_value = "")]
    pub caption: String,
}

/// The server CPU figure plotted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CpuMeasure {
    /// Server CPU as a share of one core over the measured window.
    Percent,
    /// Server CPU-seconds per million delivered events.
    PerMillion,
}

/// One point: a run's watchers and its first round's server CPU (as `measure` says), keyed
/// by the run's transport; `None` for a line that is not a spawned-server fan-out result.
pub fn point(run: &serde_json::Value, measure: CpuMeasure) -> Option<(String, (f64, f64))> {
    if run.get("bench")?.as_str()? != "fanout" {
        return None;
    }
    let transport = run.get("transport")?.as_str()?.to_string();
    let watchers = run.get("watchers")?.as_f64()?;
    let round = run.get("rounds")?.get(0)?;
    let y = match measure {
        CpuMeasure::Percent => {
            round.get("server_cpu_secs")?.as_f64()? / round.get("window_secs")?.as_f64()? * 100.0
        }
        CpuMeasure::PerMillion => round.get("server_cpu_secs_per_million_events")?.as_f64()?,
    };
    y.is_finite().then_some((transport, (watchers, y)))
}

/// Reads the runs and writes the chart.
pub fn run(args: FanoutPlotArgs) -> anyhow::Result<()> {
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for path in &args.inputs {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        for line in text.lines().filter(|l| l.starts_with('{')) {
            let Ok(run) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if let Some((transport, p)) = point(&run, args.y) {
                series.entry(transport).or_default().push(p);
            }
        }
    }
    if series.is_empty() {
        anyhow::bail!("no `bench fanout` result with server CPU in the inputs");
    }
    let series: Vec<Series> = series
        .into_iter()
        .map(|(name, mut points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { name, points }
        })
        .collect();
    for s in &series {
        for (w, y) in &s.points {
            println!("{:<6} {w:>6} watchers  {y:.2}", s.name);
        }
    }
    let y = match args.y {
        CpuMeasure::Percent => "server CPU, % of one core",
        CpuMeasure::PerMillion => "server CPU-s per 1M delivered events",
    };
    let doc = svg::line_chart(
        Labels {
            title: "Watch fan-out: server CPU against watchers",
            x: "watchers",
            y,
            caption: &args.caption,
        },
        &series,
    );
    std::fs::write(&args.svg, doc).with_context(|| format!("writing {}", args.svg.display()))?;
    println!("wrote {}", args.svg.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_come_from_fanout_results_only() {
        let run = serde_json::json!({
            "bench": "fanout", "transport": "http1", "watchers": 1000,
            "rounds": [{"server_cpu_secs": 4.0, "window_secs": 8.0,
                        "server_cpu_secs_per_million_events": 5.0}],
        });
        assert_eq!(
            point(&run, CpuMeasure::Percent),
            Some(("http1".to_string(), (1000.0, 50.0)))
        );
        assert_eq!(
            point(&run, CpuMeasure::PerMillion),
            Some(("http1".to_string(), (1000.0, 5.0)))
        );
        // Against a running server there is no server CPU.
        let remote = serde_json::json!({
            "bench": "fanout", "transport": "h2", "watchers": 10,
            "rounds": [{"server_cpu_secs": null, "window_secs": 8.0}],
        });
        assert_eq!(point(&remote, CpuMeasure::Percent), None);
        assert_eq!(
            point(&serde_json::json!({"bench": "list"}), CpuMeasure::Percent),
            None
        );
    }
}
