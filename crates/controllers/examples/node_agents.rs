//! Runs N node agents against a server and measures them: how long until every node is
//! Ready, then the process's CPU while the agents idle (lease renewals, status reports,
//! watches).
//!
//! ```text
//! cargo run --release -p controllers --example node_agents -- \
//!     (--server http://127.0.0.1:PORT | --kubeconfig FILE) [--nodes 1000] [--idle-seconds 60]
//! ```

use client::rest::resource::NODES;
use client::rest::{Api, Client, Config, ListParams};
use controllers::node_agent::{NodeAgentConfig, NodeAgents};
use k8s_openapi::api::core::v1::Node;
use std::time::{Duration, Instant};

/// User + system CPU time of this process so far, from `/proc/self/stat`.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are the 12th and 13th fields after the command; 100 ticks a second.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mut config: Option<Config> = None;
    let mut nodes = 1000usize;
    let mut idle = 60u64;
    let mut prefix = "bench".to_string();
    while let Some(arg) = args.next() {
        let value = args.next().unwrap_or_default();
        match arg.as_str() {
            "--server" => config = Some(Config::new(&value).expect("a server URL")),
            "--kubeconfig" => {
                config = Some(Config::from_kubeconfig_file(&value, None).expect("a kubeconfig"))
            }
            "--nodes" => nodes = value.parse().expect("a number of nodes"),
            "--idle-seconds" => idle = value.parse().expect("a number of seconds"),
            "--name-prefix" => prefix = value,
            other => panic!("unknown argument {other}"),
        }
    }
    let config = config.expect("--server or --kubeconfig");
    let client = Client::new(config.clone()).expect("a client");
    let watcher = Client::new(config).expect("a client");
    let agent_config = NodeAgentConfig {
        nodes,
        name_prefix: prefix.clone(),
        ..Default::default()
    };
    let start = Instant::now();
    let cpu_start = cpu_time();
    let agents = tokio::spawn(NodeAgents::new(client, agent_config).run());
    let api: Api<Node> = Api::all(watcher, NODES);
    let ready = |n: &Node| {
        n.metadata
            .name
            .as_deref()
            .is_some_and(|name| name.starts_with(&format!("{prefix}-")))
            && n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    loop {
        if agents.is_finished() {
            eprintln!("the agents stopped: {:?}", agents.await);
            return;
        }
        let list = api
            .list(&ListParams::default())
            .await
            .expect("listing nodes");
        if list.items.iter().filter(|n| ready(n)).count() >= nodes {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "{nodes} nodes Ready {:.3} s after start (CPU {:.2} s)",
        start.elapsed().as_secs_f64(),
        (cpu_time() - cpu_start).as_secs_f64()
    );
    // Let the start-up settle (leases, watches, events), then measure idling.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let (t0, c0) = (Instant::now(), cpu_time());
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let (wall, cpu) = (t0.elapsed(), cpu_time() - c0);
    println!(
        "idle: {:.2} s CPU in {:.1} s = {:.2} % of one core",
        cpu.as_secs_f64(),
        wall.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64()
    );
    agents.abort();
}
