//! `listwatch bench list`: load many pods, then time whole-cluster pod lists to the last
//! byte, both from the watch cache (`resourceVersion=0`) and consistent (no resourceVersion).
//! Items are counted by a byte search for the name prefix every benchmark pod carries.

use super::creates::{create_objects, CreateLimit};
use super::http::{self, HttpConn};
use super::kinds::Kind;
use super::{
    ensure_namespace, fmt_usage, line, percentile, round3, run_id, usage_json, ServerOpts, Target,
};
use anyhow::bail;
use clap::Args;
use std::time::Instant;

/// Options of `listwatch bench list`.
#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    /// Pods to create before listing.
    #[arg(long, default_value_t = 50_000)]
    pub pods: usize,
    /// Approximate size of each pod in bytes.
    #[arg(long, default_value_t = 2048)]
    pub object_size: usize,
    /// What to create and list.
    #[arg(long, value_enum, default_value_t = Kind::Pod)]
    pub kind: Kind,
    /// Concurrent connections used to create the pods.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Timed lists of each kind.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// After the timed lists: this many consistent lists at once, each on its own
    /// connection and read to the last byte, with the server's peak memory during them
    /// (0 = skip).
    #[arg(long, default_value_t = 0)]
    pub concurrent_lists: usize,
    /// Which server to measure.
    #[command(flatten)]
    pub target: ServerOpts,
}

/// The prefix of every pod name this benchmark creates, as it appears in the JSON.
const ITEM_MARKER: &str = "\"name\":\"lwbitem-";

/// Timings of one list kind.
struct ListTiming {
    label: &'static str,
    path: String,
    secs: Vec<f64>,
    bytes: usize,
    items: usize,
}

impl ListTiming {
    fn min(&self) -> f64 {
        self.secs.iter().copied().fold(f64::INFINITY, f64::min)
    }

    fn median(&self) -> f64 {
        let mut s = self.secs.clone();
        s.sort_by(f64::total_cmp);
        percentile(&s, 50.0).unwrap_or(0.0)
    }

    fn mb_per_sec(&self, secs: f64) -> f64 {
        self.bytes as f64 / 1e6 / secs.max(1e-9)
    }
}

/// Runs the list benchmark.
pub async fn run(args: ListArgs) -> anyhow::Result<()> {
    let target = Target::start(&args.target)?;
    ensure_namespace(target.addr).await?;
    args.kind.install(target.addr).await?;
    let prefix = format!("lwbitem-{}-", run_id());
    let st = create_objects(
        target.addr,
        args.kind,
        args.clients,
        args.object_size,
        &prefix,
        CreateLimit::Count(args.pods),
        None,
    )
    .await?;
    let load_secs = st.elapsed.as_secs_f64().max(1e-9);
    println!(
        "load: {} {} of ~{} bytes created in {load_secs:.2} s ({:.0}/s, {} errors, {} connections)",
        st.created,
        args.kind.plural(),
        args.object_size,
        st.created as f64 / load_secs,
        st.errors,
        args.clients
    );
    if let Some(e) = &st.first_error {
        line("first create error", e);
    }
    let after_load = target.usage();
    line("server memory after load", fmt_usage(after_load));

    let mut conn = HttpConn::connect(target.addr).await?;
    let mut body = Vec::new();
    let mut timings = [
        ListTiming {
            label: "list rv=0 (cache)",
            path: format!("{}?resourceVersion=0", args.kind.all_namespaces_path()),
            secs: Vec::new(),
            bytes: 0,
            items: 0,
        },
        ListTiming {
            label: "list consistent",
            path: args.kind.all_namespaces_path(),
            secs: Vec::new(),
            bytes: 0,
            items: 0,
        },
    ];
    for t in &mut timings {
        for _ in 0..args.runs.max(1) {
            if conn.is_closed() {
                conn = HttpConn::connect(target.addr).await?;
            }
            let t0 = Instant::now();
            let status = conn.request("GET", &t.path, None, &mut body).await?;
            let secs = t0.elapsed().as_secs_f64();
            if status != 200 {
                bail!(
                    "GET {}: HTTP {status}: {}",
                    t.path,
                    String::from_utf8_lossy(&body[..body.len().min(300)])
                );
            }
            t.secs.push(secs);
            t.bytes = body.len();
            t.items = http::count(&body, ITEM_MARKER.as_bytes());
        }
    }
    drop(body);
    let after_lists = target.usage();

    for t in &timings {
        println!("{} ({})", t.label, t.path);
        line("bytes / items", format!("{} / {}", t.bytes, t.items));
        line(
            "time min / median",
            format!("{:.1} ms / {:.1} ms", t.min() * 1e3, t.median() * 1e3),
        );
        line(
            "MB/s at min / median",
            format!(
                "{:.1} / {:.1}",
                t.mb_per_sec(t.min()),
                t.mb_per_sec(t.median())
            ),
        );
    }
    line("server memory after lists", fmt_usage(after_lists));
    let concurrent = if args.concurrent_lists > 0 {
        Some(concurrent_lists(&target, &timings[1].path, args.concurrent_lists).await?)
    } else {
        None
    };

    let json = serde_json::json!({
        "bench": "list",
        "pods": args.pods,
        "kind": args.kind.plural(),
        "object_size": args.object_size,
        "spawned_server": target.server.is_some(),
        "created": st.created,
        "create_errors": st.errors,
        "load_secs": round3(load_secs),
        "load_creates_per_sec": round3(st.created as f64 / load_secs),
        "server_memory_after_load": usage_json(after_load),
        "server_memory_after_lists": usage_json(after_lists),
        "concurrent_lists": concurrent,
        "lists": timings.iter().map(|t| serde_json::json!({
            "label": t.label,
            "path": t.path,
            "runs": t.secs.len(),
            "bytes": t.bytes,
            "items": t.items,
            "min_ms": round3(t.min() * 1e3),
            "median_ms": round3(t.median() * 1e3),
            "mb_per_sec_min": round3(t.mb_per_sec(t.min())),
            "mb_per_sec_median": round3(t.mb_per_sec(t.median())),
        })).collect::<Vec<_>>(),
    });
    println!("{json}");
    Ok(())
}

/// Sends `n` GETs of `path` at once, each on its own connection, reads every body to the
/// end, and reports the wall time, the slowest list and the server's memory: its resident
/// size before, and its peak during (the kernel's high-water mark, reset first when the
/// server is ours).
async fn concurrent_lists(
    target: &Target,
    path: &str,
    n: usize,
) -> anyhow::Result<serde_json::Value> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(HttpConn::connect(target.addr).await?);
    }
    let peak_reset = target
        .server
        .as_ref()
        .is_some_and(|s| std::fs::write(format!("/proc/{}/clear_refs", s.pid()), "5").is_ok());
    let before = target.usage();
    let t0 = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|mut conn| {
            let path = path.to_string();
            tokio::spawn(async move {
                let mut body = Vec::new();
                let t = Instant::now();
                let status = conn.request("GET", &path, None, &mut body).await?;
                if status != 200 {
                    bail!("GET {path}: HTTP {status}");
                }
                Ok::<_, anyhow::Error>((t.elapsed().as_secs_f64(), body.len()))
            })
        })
        .collect();
    let mut secs = Vec::with_capacity(n);
    let mut bytes = 0usize;
    for t in tasks {
        let (s, b) = t.await??;
        secs.push(s);
        bytes += b;
    }
    let wall = t0.elapsed().as_secs_f64();
    let during = target.usage();
    secs.sort_by(f64::total_cmp);
    let slowest = secs.last().copied().unwrap_or(0.0);
    println!("{n} concurrent consistent lists ({path})");
    line(
        "bytes in all / wall time",
        format!(
            "{bytes} / {wall:.2} s ({:.0} MB/s)",
            bytes as f64 / 1e6 / wall.max(1e-9)
        ),
    );
    line(
        "one list median / slowest",
        format!(
            "{:.2} s / {slowest:.2} s",
            percentile(&secs, 50.0).unwrap_or(0.0)
        ),
    );
    line("server memory before", fmt_usage(before));
    line(
        if peak_reset {
            "server memory, peak during"
        } else {
            "server memory (peak since start)"
        },
        fmt_usage(during),
    );
    Ok(serde_json::json!({
        "lists": n,
        "bytes": bytes,
        "wall_secs": round3(wall),
        "median_secs": round3(percentile(&secs, 50.0).unwrap_or(0.0)),
        "slowest_secs": round3(slowest),
        "peak_reset": peak_reset,
        "server_memory_before": usage_json(before),
        "server_memory_during": usage_json(during),
    }))
}
