//! Informers under network faults, against a real `listwatch serve` behind a TCP proxy that
//! cuts, refuses and stalls their connections.
//!
//! - An informer whose first list had more than one page (600 objects) loses more history
//!   than the server's watch cache holds (a 200-event ring, 300 changes while its
//!   connections are refused): it must converge on the server's state. Before the fix it
//!   relisted at its old version with a limit forever — served at exactly that version, and
//!   every watch from there was gone.
//! - A server restarted (same data, new process) under 1,000 informers: every informer
//!   watches again from where it was, and nobody lists.
//! - A list caught in a stalled connection ends with the client's request timeout.

mod common;

use client::cache::{RestListerWatcher, SharedIndexInformer};
use client::object::DynamicObject;
use client::rest::resource::CONFIGMAPS;
use client::rest::{Client, Config, Error, ListParams, PatchParams, PatchType, PostParams};
use common::{until, Server};
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use test_server::cached_versions;
use test_server::fault_proxy::FaultProxy;

fn client_to(url: &str) -> Client {
    Client::new(Config::new(url).unwrap()).unwrap()
}

fn informer(client: &Client, ns: &str) -> SharedIndexInformer<DynamicObject> {
    let lw =
        RestListerWatcher::<DynamicObject>::new(client.clone(), CONFIGMAPS.clone()).namespace(ns);
    SharedIndexInformer::builder(Arc::new(lw)).build()
}

/// The same, from a fresh list of the server.
async fn listed(client: &Client, ns: &str) -> BTreeMap<String, String> {
    let api = client::rest::Api::<ConfigMap>::for_type(client.clone(), ns);
    api.list_all(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| {
            let m = c.metadata;
            (
                format!("{}/{}", ns, m.name.unwrap_or_default()),
                m.resource_version.unwrap_or_default(),
            )
        })
        .collect()
}

async fn create_configmaps(client: &Client, ns: &str, n: usize) {
    let api = client::rest::Api::<ConfigMap>::for_type(client.clone(), ns);
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..8 {
        let api = api.clone();
        tasks.spawn(async move {
            for i in (w..n).step_by(8) {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("cm-{i:04}")}, "data": {"v": "0"}
                }))
                .unwrap();
                api.create(&PostParams::default(), &cm).await.unwrap();
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
}

/// Changes the first `n` objects; returns their keys and new resourceVersions.
async fn change_configmaps(
    client: &Client,
    ns: &str,
    n: usize,
    round: &str,
) -> BTreeMap<String, String> {
    let api = client::rest::Api::<ConfigMap>::for_type(client.clone(), ns);
    let mut changed = BTreeMap::new();
    for i in 0..n {
        let cm = api
            .patch(
                &format!("cm-{i:04}"),
                &PatchParams::default(),
                PatchType::Merge,
                &json!({"data": {"v": round}}),
            )
            .await
            .unwrap();
        let m = cm.metadata;
        changed.insert(
            format!("{ns}/{}", m.name.unwrap_or_default()),
            m.resource_version.unwrap_or_default(),
        );
    }
    changed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_informer_converges_after_losing_more_history_than_the_watch_cache_holds() {
    let server = Server::start(&["--watch-cache-size", "200"]);
    server.namespaces(&["lost"]).await;
    let direct = server.client();
    create_configmaps(&direct, "lost", 600).await;
    let proxy = FaultProxy::start(server.addr()).await;
    let inf = informer(&client_to(&proxy.url()), "lost");
    inf.start();
    until("synced", Duration::from_secs(30), || {
        inf.has_synced() && inf.indexer().len() == 600
    })
    .await;

    // Its connections go, and for a while it cannot reconnect, while half the objects
    // change: more events than the server's watch cache keeps.
    proxy.set_refusing(true);
    proxy.cut();
    change_configmaps(&direct, "lost", 300, "1").await;
    proxy.set_refusing(false);

    let want = listed(&direct, "lost").await;
    let started = Instant::now();
    until(
        "the informer holds the server's state",
        Duration::from_secs(60),
        || cached_versions(&inf) == want,
    )
    .await;
    eprintln!(
        "converged {:.1} s after the connections came back",
        started.elapsed().as_secs_f64()
    );
    inf.stop();
}

/// Waits (≤ 60 s) until the server counts `n` running configmap watches.
async fn wait_watching(server: &Server, n: usize) {
    let mut watching = 0.0;
    for _ in 0..600 {
        watching = server
            .metric(
                "apiserver_longrunning_requests",
                &[("resource", "configmaps")],
            )
            .await;
        if watching == n as f64 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{watching} configmap watches running, not {n}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_under_1000_informers_costs_no_relist() {
    const INFORMERS: usize = 1000;
    let mut server = Server::start(&[]);
    server.namespaces(&["restart"]).await;
    create_configmaps(&server.client(), "restart", 20).await;
    let proxy = FaultProxy::start(server.addr()).await;
    let client = client_to(&proxy.url());
    let informers: Vec<_> = (0..INFORMERS)
        .map(|_| informer(&client, "restart"))
        .collect();
    for inf in &informers {
        inf.start();
    }
    until("all synced", Duration::from_secs(120), || {
        informers.iter().all(|i| i.has_synced())
    })
    .await;
    let lists_before = server
        .metric(
            "apiserver_request_total",
            &[("verb", "LIST"), ("resource", "configmaps")],
        )
        .await;
    assert!(lists_before >= INFORMERS as f64, "{lists_before} lists");
    // Synced means listed; the watches open right after.
    wait_watching(&server, INFORMERS).await;

    // Some history first, so that the informers' versions are not the newest.
    change_configmaps(&server.client(), "restart", 20, "1").await;
    let want = listed(&server.client(), "restart").await;
    until("all saw the changes", Duration::from_secs(60), || {
        informers.iter().all(|i| cached_versions(i) == want)
    })
    .await;

    let down = Instant::now();
    server.restart();
    proxy.set_target(server.addr());
    proxy.cut();
    // Changes made while the informers are reconnecting reach them as watch events. (The
    // expected state comes from the writes' answers: a list here would count as one.)
    let mut want = want;
    want.extend(change_configmaps(&server.client(), "restart", 5, "2").await);
    until(
        "every informer watches again",
        Duration::from_secs(120),
        || informers.iter().all(|i| cached_versions(i) == want),
    )
    .await;
    // Every watch has been re-established on the new process.
    wait_watching(&server, INFORMERS).await;
    eprintln!(
        "{INFORMERS} informers up to date and watching {:.1} s after the restart",
        down.elapsed().as_secs_f64()
    );
    let relists = server
        .metric(
            "apiserver_request_total",
            &[("verb", "LIST"), ("resource", "configmaps")],
        )
        .await;
    assert_eq!(relists, 0.0, "informers relisted after the restart");
    for inf in &informers {
        inf.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_in_a_stalled_connection_ends_with_the_request_timeout() {
    let server = Server::start(&[]);
    server.namespaces(&["stall"]).await;
    let proxy = FaultProxy::start(server.addr()).await;
    let mut config = Config::new(&proxy.url()).unwrap();
    config.timeout = Some(Duration::from_secs(2));
    let client = Client::new(config).unwrap();
    proxy.set_stalled(true);
    let started = Instant::now();
    let api = client::rest::Api::<ConfigMap>::for_type(client, "stall");
    let err = tokio::time::timeout(Duration::from_secs(30), api.list(&ListParams::default()))
        .await
        .expect("the list waited for the stall")
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // Without configuration, a client has a bounded timeout too.
    let default = Config::new(&proxy.url()).unwrap();
    assert!(
        default
            .timeout
            .is_some_and(|t| t <= Duration::from_secs(60)),
        "{:?}",
        default.timeout
    );
}
