//! `listwatch bench creates`: many keep-alive clients, each creating pods one after another
//! (unique names) for a fixed time. With the embedded store every acknowledged create has been
//! fsynced, so this measures the durable write path and its group commit.

use super::http::HttpConn;
use super::kinds::Kind;
use super::{
    cpu_delta, ensure_namespace, fmt_usage, line, round3, run_id, usage_json, LatencySummary,
    ProcUsage, ServerOpts, Target,
};
use clap::Args;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `listwatch bench creates`.
#[derive(Args, Debug, Clone)]
pub struct CreatesArgs {
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Seconds to keep creating.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Approximate size of each object in bytes.
    #[arg(long, default_value_t = 2048)]
    pub object_size: usize,
    /// What to create.
    #[arg(long, value_enum, default_value_t = Kind::Pod)]
    pub kind: Kind,
    /// Create as this user (impersonated, `Impersonate-User`, and granted the `edit`
    /// ClusterRole by a ClusterRoleBinding the benchmark creates), so that every create is
    /// authorized by RBAC and queued by flow control; without it the creates run as the
    /// loopback port's `system:masters` user, which neither checks.
    #[arg(long)]
    pub as_user: Option<String>,
    /// Which server to measure.
    #[command(flatten)]
    pub target: ServerOpts,
}

/// When a batch of creates stops.
#[derive(Debug, Clone, Copy)]
pub enum CreateLimit {
    /// After this many pods have been attempted.
    Count(usize),
    /// At this instant.
    Until(Instant),
}

/// The outcome of [`create_pods`].
#[derive(Debug, Default)]
pub struct CreateStats {
    /// Creates answered 201.
    pub created: u64,
    /// Creates answered otherwise, or failed on the connection.
    pub errors: u64,
    /// Latency of each successful create, in microseconds.
    pub latencies_us: Vec<u64>,
    /// From the first request to the last answer.
    pub elapsed: Duration,
    /// The first error seen, for the report.
    pub first_error: Option<String>,
}

/// Creates pods named `{prefix}{i:07}` (i = 0, 1, …) in the bench namespace over `clients`
/// concurrent keep-alive connections, each sending its next create when the previous one is
/// answered, until `limit`. A failed connection is replaced. Errors only if no connection can
/// be opened at all.
pub async fn create_pods(
    addr: SocketAddr,
    clients: usize,
    object_size: usize,
    prefix: &str,
    limit: CreateLimit,
) -> anyhow::Result<CreateStats> {
    create_objects(addr, Kind::Pod, clients, object_size, prefix, limit, None).await
}

/// As [`create_pods`], for objects of `kind` (installed already: [`Kind::install`]).
pub async fn create_objects(
    addr: SocketAddr,
    kind: Kind,
    clients: usize,
    object_size: usize,
    prefix: &str,
    limit: CreateLimit,
    as_user: Option<&str>,
) -> anyhow::Result<CreateStats> {
    let connect = move || async move {
        let mut c = HttpConn::connect(addr).await?;
        if let Some(u) = as_user {
            c.add_header("Impersonate-User", u);
        }
        Ok::<_, super::http::HttpError>(c)
    };
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients.max(1) {
        conns.push(connect().await?);
    }
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(conns.len());
    for mut conn in conns {
        let next = next.clone();
        let prefix = prefix.to_string();
        let as_user = as_user.map(str::to_string);
        tasks.push(tokio::spawn(async move {
            let mut st = CreateStats::default();
            let mut out = Vec::with_capacity(8 * 1024);
            let path = kind.collection_path();
            loop {
                match limit {
                    CreateLimit::Until(t) if Instant::now() >= t => break,
                    _ => {}
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if let CreateLimit::Count(n) = limit {
                    if i >= n {
                        break;
                    }
                }
                if conn.is_closed() {
                    let reconnected = match &as_user {
                        Some(u) => HttpConn::connect(addr).await.map(|mut c| {
                            c.add_header("Impersonate-User", u);
                            c
                        }),
                        None => HttpConn::connect(addr).await,
                    };
                    match reconnected {
                        Ok(c) => conn = c,
                        Err(e) => {
                            st.errors += 1;
                            st.first_error.get_or_insert(format!("reconnect: {e}"));
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    }
                }
                let body = kind.body(&format!("{prefix}{i:07}"), object_size, None);
                let t0 = Instant::now();
                match conn.request("POST", &path, Some(&body), &mut out).await {
                    Ok(201) => {
                        st.created += 1;
                        st.latencies_us
                            .push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
                    }
                    Ok(status) => {
                        st.errors += 1;
                        st.first_error.get_or_insert(format!(
                            "HTTP {status}: {}",
                            String::from_utf8_lossy(&out[..out.len().min(300)])
                        ));
                    }
                    Err(e) => {
                        st.errors += 1;
                        st.first_error.get_or_insert(e.to_string());
                    }
                }
            }
            st
        }));
    }
    let mut all = CreateStats::default();
    for t in tasks {
        let mut st = t.await?;
        all.created += st.created;
        all.errors += st.errors;
        all.latencies_us.append(&mut st.latencies_us);
        if all.first_error.is_none() {
            all.first_error = st.first_error;
        }
    }
    all.elapsed = started.elapsed();
    Ok(all)
}

/// Binds ClusterRole `edit` to `user` (idempotent).
async fn grant_edit(addr: SocketAddr, user: &str) -> anyhow::Result<()> {
    let body = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("bench-edit-{user}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    });
    let mut c = HttpConn::connect(addr).await?;
    let mut out = Vec::new();
    let body = serde_json::to_vec(&body)?;
    match c
        .request(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            Some(&body),
            &mut out,
        )
        .await?
    {
        201 | 409 => Ok(()),
        code => anyhow::bail!(
            "granting edit to {user}: HTTP {code}: {}",
            String::from_utf8_lossy(&out)
        ),
    }
}

/// Runs the create benchmark.
pub async fn run(args: CreatesArgs) -> anyhow::Result<()> {
    let target = Target::start(&args.target)?;
    ensure_namespace(target.addr).await?;
    args.kind.install(target.addr).await?;
    if let Some(u) = &args.as_user {
        grant_edit(target.addr, u).await?;
    }
    let srv_before = target.usage();
    let self_before = ProcUsage::of_self();
    let prefix = format!("lwbc-{}-", run_id());
    let until = Instant::now() + Duration::from_secs(args.duration);
    let mut st = create_objects(
        target.addr,
        args.kind,
        args.clients,
        args.object_size,
        &prefix,
        CreateLimit::Until(until),
        args.as_user.as_deref(),
    )
    .await?;
    let srv_after = target.usage();
    let server_cpu = cpu_delta(srv_before, srv_after);
    let loadgen_cpu = cpu_delta(self_before, ProcUsage::of_self());
    let secs = st.elapsed.as_secs_f64().max(1e-9);
    let rate = st.created as f64 / secs;
    let lat = LatencySummary::of_micros(&mut st.latencies_us);

    println!(
        "creates: {} clients, {} s, {} of ~{} bytes",
        args.clients,
        args.duration,
        args.kind.plural(),
        args.object_size
    );
    line("created", format!("{} in {secs:.2} s", st.created));
    line("creates/s", format!("{rate:.0}"));
    line("latency", lat);
    line("errors", st.errors);
    if let Some(e) = &st.first_error {
        line("first error", e);
    }
    line(
        "server CPU",
        server_cpu.map_or("n/a".to_string(), |c| {
            format!(
                "{c:.2} s ({:.0}% of a core), {:.1} ms per create",
                c / secs * 100.0,
                c * 1000.0 / st.created.max(1) as f64
            )
        }),
    );
    line("server memory", fmt_usage(srv_after));
    line(
        "loadgen CPU",
        loadgen_cpu.map_or("n/a".to_string(), |c| format!("{c:.2} s")),
    );
    let json = serde_json::json!({
        "bench": "creates",
        "kind": args.kind.plural(),
        "clients": args.clients,
        "duration_secs": args.duration,
        "object_size": args.object_size,
        "spawned_server": target.server.is_some(),
        "created": st.created,
        "errors": st.errors,
        "elapsed_secs": round3(secs),
        "creates_per_sec": round3(rate),
        "latency": lat.to_json(),
        "server_cpu_secs": server_cpu.map(round3),
        "server_memory": usage_json(srv_after),
        "loadgen_cpu_secs": loadgen_cpu.map(round3),
    });
    println!("{json}");
    Ok(())
}
