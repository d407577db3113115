//! `listwatch bench patch-memory`: small merge patches to one large object, in a loop, and
//! the server's memory meanwhile. Every patch stores a new revision of the whole object and
//! sends it to the watch cache, so without byte bounds on the history and the cache the
//! server grows by a few times the object's size per patch.

use super::http::HttpConn;
use super::{line, ProcUsage, ServerOpts, Target, BENCH_NAMESPACE};
use anyhow::bail;
use clap::Args;
use std::time::{Duration, Instant};

/// Options of `listwatch bench patch-memory`.
#[derive(Args, Debug, Clone)]
pub struct PatchMemoryArgs {
    /// Size of the object's data in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub object_size: usize,
    /// Merge patches sent, one after the other.
    #[arg(long, default_value_t = 400)]
    pub patches: usize,
    /// Which server to measure (it must be spawned here for its memory to be read).
    #[command(flatten)]
    pub target: ServerOpts,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Runs the benchmark.
pub async fn run(args: PatchMemoryArgs) -> anyhow::Result<()> {
    let target = Target::start(&args.target)?;
    if target.server.is_none() {
        bail!("patch-memory reads the server's memory: let it spawn the server");
    }
    let addr = target.addr;
    super::ensure_namespace(addr).await?;
    let mut conn = HttpConn::connect(addr).await?;
    let mut out = Vec::new();
    let path = format!("/api/v1/namespaces/{BENCH_NAMESPACE}/configmaps");
    let body = serde_json::to_vec(&serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "big"},
        "data": {"blob": "x".repeat(args.object_size), "n": "0"}
    }))?;
    let status = conn.request("POST", &path, Some(&body), &mut out).await?;
    if status != 201 {
        bail!(
            "creating the object: HTTP {status}: {}",
            String::from_utf8_lossy(&out)
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = target.usage();
    let started = Instant::now();
    let mut peak = before.map_or(0, |u| u.rss_kib);
    for i in 1..=args.patches {
        let patch = format!("{{\"data\":{{\"n\":\"{i}\"}}}}");
        let status = conn
            .request_with_type(
                "PATCH",
                &format!("{path}/big"),
                patch.as_bytes(),
                "application/merge-patch+json",
                &mut out,
            )
            .await?;
        if status != 200 {
            bail!(
                "patch {i}: HTTP {status}: {}",
                String::from_utf8_lossy(&out)
            );
        }
        if let Some(u) = target.usage() {
            peak = peak.max(u.rss_kib);
        }
    }
    let elapsed = started.elapsed();
    let after = target.usage();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let settled = target.usage();
    let kib = |u: Option<ProcUsage>| u.map_or(0, |u| u.rss_kib);
    println!(
        "{} merge patches of ~20 bytes to a {} byte ConfigMap in {:.2} s",
        args.patches,
        args.object_size,
        elapsed.as_secs_f64()
    );
    line("server RSS before", format!("{:.1} MiB", mib(kib(before))));
    line(
        "server RSS after the last patch",
        format!("{:.1} MiB", mib(kib(after))),
    );
    line(
        "server RSS peak (sampled per patch)",
        format!("{:.1} MiB", mib(peak)),
    );
    line(
        "server RSS 5 s later",
        format!("{:.1} MiB", mib(kib(settled))),
    );
    line(
        "growth per patch",
        format!(
            "{:.1} KiB",
            kib(after).saturating_sub(kib(before)) as f64 / args.patches.max(1) as f64
        ),
    );
    println!(
        "{}",
        serde_json::json!({
            "bench": "patch-memory",
            "object_size": args.object_size,
            "patches": args.patches,
            "secs": super::round3(elapsed.as_secs_f64()),
            "rss_before_kib": kib(before),
            "rss_after_kib": kib(after),
            "rss_peak_kib": peak,
            "rss_settled_kib": kib(settled),
        })
    );
    Ok(())
}
