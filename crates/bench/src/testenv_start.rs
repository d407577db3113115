//! `listwatch bench testenv`: how fast an operator's test gets a ready server. Each run
//! starts a `testenv::TestEnv` in this process with `--crds` CRDs (each with a small
//! structural schema), from the call until it returns with every CRD served, then creates
//! one object of each kind through the returned client (the first request a test makes),
//! and stops it. Reported: the time to ready (min, median, max over `--runs`), the time to
//! the first objects, and this process's RSS after the first start (the server, its
//! caches and the client, everything a test pays in memory).

use super::{line, round3, ProcUsage};
use clap::Args;
use serde_json::json;
use std::time::{Duration, Instant};

/// Options of `listwatch bench testenv`.
#[derive(Args, Debug, Clone)]
pub struct TestenvArgs {
    /// CRDs installed by each start.
    #[arg(long, default_value_t = 10)]
    pub crds: usize,
    /// Starts measured.
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
}

fn crd(i: usize) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things{i}.bench.listwatch.dev\nspec:\n  group: bench.listwatch.dev\n  scope: Namespaced\n  names: {{plural: things{i}, kind: Thing{i}}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties:\n              size: {{type: integer, minimum: 0, default: 1}}\n              name: {{type: string, maxLength: 63}}\n"
    )
}

/// Runs the benchmark on a multi-threaded runtime of two workers (a test's usual one).
pub fn run(args: TestenvArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let manifest: Vec<String> = (0..args.crds).map(crd).collect();
    let manifest = manifest.join("---\n");
    let rss_before = ProcUsage::of_self().map(|u| u.rss_kib);
    let mut ready = Vec::new();
    let mut first_objects = Vec::new();
    let mut rss_after_first = None;
    for run in 0..args.runs.max(1) {
        let (to_ready, to_objects) = rt.block_on(async {
            let t0 = Instant::now();
            let env = testenv::TestEnv::builder()
                .crd_yaml(manifest.clone())
                .start()
                .await?;
            let to_ready = t0.elapsed();
            let client = env.client();
            for i in 0..args.crds {
                let r = client::rest::ApiResource::new(
                    "bench.listwatch.dev",
                    "v1",
                    format!("things{i}"),
                    format!("Thing{i}"),
                    true,
                );
                let obj = json!({"apiVersion": "bench.listwatch.dev/v1", "kind": format!("Thing{i}"),
                                 "metadata": {"name": "t"}, "spec": {"name": "x"}});
                client
                    .create::<serde_json::Value>(&r, Some("default"), &Default::default(), &obj)
                    .await?;
            }
            let to_objects = t0.elapsed();
            env.stop().await;
            anyhow::Ok((to_ready, to_objects))
        })?;
        if run == 0 {
            rss_after_first = ProcUsage::of_self().map(|u| u.rss_kib);
        }
        ready.push(to_ready);
        first_objects.push(to_objects);
    }
    let summary = |v: &mut Vec<Duration>| {
        v.sort();
        (v[0], v[v.len() / 2], v[v.len() - 1])
    };
    let (rmin, rmed, rmax) = summary(&mut ready);
    let (omin, omed, omax) = summary(&mut first_objects);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "testenv: {} starts with {} CRDs each",
        args.runs.max(1),
        args.crds
    );
    line(
        "call to ready (CRDs served)",
        format!(
            "min {:.1} ms, median {:.1} ms, max {:.1} ms",
            ms(rmin),
            ms(rmed),
            ms(rmax)
        ),
    );
    line(
        "… and one object of each kind",
        format!(
            "min {:.1} ms, median {:.1} ms, max {:.1} ms",
            ms(omin),
            ms(omed),
            ms(omax)
        ),
    );
    let rss = match (rss_before, rss_after_first) {
        (Some(b), Some(a)) => format!(
            "{:.1} MiB after the first start ({:.1} MiB before it)",
            a as f64 / 1024.0,
            b as f64 / 1024.0
        ),
        _ => "n/a".into(),
    };
    line("process RSS", rss);
    println!(
        "{}",
        json!({"bench": "testenv", "crds": args.crds, "runs": args.runs,
               "ready_ms_median": round3(ms(rmed)), "ready_ms_min": round3(ms(rmin)),
               "objects_ms_median": round3(ms(omed)),
               "rss_kib_after_first": rss_after_first, "rss_kib_before": rss_before})
    );
    Ok(())
}
