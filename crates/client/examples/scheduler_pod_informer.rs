//! The seed 001 scheduler's pod informer: every pod that has not finished
//! (`status.phase!=Succeeded,status.phase!=Failed`), kept in a local cache indexed by
//! namespace, waited on with `wait_for_cache_sync`, and read through the lister's
//! `by_index`.
//!
//! ```text
//! cargo run -p client --example scheduler_pod_informer -- [--server http://127.0.0.1:8080]
//!     [--once] [--seconds N]
//! ```
//!
//! Without `--server` the server comes from the kubeconfig (`KUBECONFIG`, `~/.kube/config`)
//! or the in-cluster service account. It prints the pods per namespace once synced, then
//! every change as it arrives and a summary every ten seconds, until Ctrl-C (or `--seconds`
//! elapse; `--once` exits right after the first summary).

use client::cache::ConfigureReflector as _;
use client::cache::{
    wait_for_cache_sync, DeleteEvent, ResourceEventHandlerFuncs, RestListerWatcher,
    SharedIndexInformer, NAMESPACE_INDEX,
};
use client::object::{DynamicObject, KubeObject};
use client::rest::resource::PODS;
use client::rest::{Client, Config};
use std::sync::Arc;
use std::time::Duration;

/// The scheduler's selection: pods that can still run.
const UNFINISHED_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// `--name value` from the command line.
fn arg(name: &str) -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == name {
            return args.next();
        }
        if let Some(v) = a.strip_prefix(&format!("{name}=")) {
            return Some(v.to_string());
        }
    }
    None
}

fn flag(name: &str) -> bool {
    std::env::args().skip(1).any(|a| a == name)
}

/// Prints the number of cached pods per namespace, and their names.
fn print_by_namespace(informer: &SharedIndexInformer<DynamicObject>) {
    let lister = informer.lister();
    let mut namespaces = informer
        .indexer()
        .list_index_func_values(NAMESPACE_INDEX)
        .unwrap_or_default();
    namespaces.sort();
    println!(
        "{} unfinished pods (resourceVersion {}):",
        informer.indexer().len(),
        informer.last_sync_resource_version()
    );
    for ns in namespaces {
        let Ok(pods) = lister.by_index(NAMESPACE_INDEX, &ns) else {
            continue;
        };
        let mut names: Vec<&str> = pods.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        println!("  {ns}: {} pods: {}", names.len(), names.join(", "));
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = match arg("--server") {
        Some(url) => Config::new(&url)?,
        None => Config::infer()?,
    };
    let client = Client::new(config)?;
    let lw = RestListerWatcher::<DynamicObject>::new(client, PODS).fields(UNFINISHED_PODS);
    // Every informer carries the namespace index; more indexers could be added here.
    let informer = SharedIndexInformer::builder(Arc::new(lw))
        .name("scheduler-pods")
        .build();
    informer.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(|p: &Arc<DynamicObject>, initial| {
                if !initial {
                    println!("+ {}/{}", p.namespace().unwrap_or(""), p.name());
                }
            })
            .on_update(|_, p: &Arc<DynamicObject>| {
                println!(
                    "~ {}/{} @{}",
                    p.namespace().unwrap_or(""),
                    p.name(),
                    p.resource_version().unwrap_or("")
                );
            })
            .on_delete(|d: &DeleteEvent<DynamicObject>| {
                let p = d.object();
                // A pod that finished leaves the selection: it is "deleted" here too.
                println!("- {}/{}", p.namespace().unwrap_or(""), p.name());
            }),
    );
    informer.set_watch_error_handler(|e| eprintln!("watch error: {e}"));
    informer.start();
    if !wait_for_cache_sync(&[&informer], Duration::from_secs(60)).await {
        informer.shutdown().await;
        return Err("the pod cache did not sync within 60 s".into());
    }
    print_by_namespace(&informer);
    if flag("--once") {
        informer.shutdown().await;
        return Ok(());
    }
    let deadline = arg("--seconds")
        .and_then(|s| s.parse().ok())
        .map(|s| tokio::time::Instant::now() + Duration::from_secs(s));
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    tick.tick().await;
    loop {
        let until_deadline = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tick.tick() => print_by_namespace(&informer),
            _ = tokio::signal::ctrl_c() => break,
            _ = until_deadline => break,
        }
    }
    informer.shutdown().await;
    Ok(())
}
