//! Leader election and the event recorder against a real `listwatch serve`.

mod common;

use client::rest::Api;
use common::{until, within, Server};
use controllers::event_recorder::{EventRecorder, EventType};
use controllers::leader_election::{LeaderElectionConfig, LeaderElector, LeadershipEnd};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn config(identity: &str) -> LeaderElectionConfig {
    // Short, with room for a loaded machine: a leader has 3 s to renew.
    LeaderElectionConfig {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(250),
        ..LeaderElectionConfig::new("kube-system", "test-component", identity)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_candidate_leads_and_another_takes_over_when_it_stops() {
    let server = Server::start(&[]);
    let a = Arc::new(LeaderElector::new(server.client(), config("a")));
    let b = Arc::new(LeaderElector::new(server.client(), config("b")));
    let leading = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    // Each candidate's work counts how many lead at once.
    let work = |leading: Arc<AtomicUsize>, most: Arc<AtomicUsize>| async move {
        let n = leading.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(n, Ordering::SeqCst);
        struct Done(Arc<AtomicUsize>);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _done = Done(leading);
        std::future::pending::<()>().await
    };
    let ta = {
        let (a, l, m) = (a.clone(), leading.clone(), most.clone());
        tokio::spawn(async move { a.run(work(l, m)).await })
    };
    until("a leads", Duration::from_secs(10), || a.is_leader()).await;
    let tb = {
        let (b, l, m) = (b.clone(), leading.clone(), most.clone());
        tokio::spawn(async move { b.run(work(l, m)).await })
    };
    // b sees a's claim and waits.
    until("b saw the holder", Duration::from_secs(10), || {
        b.observed_leader().as_deref() == Some("a")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!b.is_leader(), "b took a lease a kept renewing");
    // a stops without releasing (a crash): b takes over once the claim expires.
    ta.abort();
    let _ = ta.await;
    until("b leads", Duration::from_secs(20), || b.is_leader()).await;
    assert_eq!(most.load(Ordering::SeqCst), 1, "two leaders at once");
    let lease: Lease = Api::for_type(server.client(), "kube-system")
        .get("test-component")
        .await
        .unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    tb.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_finishes_releases_the_lease() {
    let server = Server::start(&[]);
    let a = LeaderElector::new(server.client(), config("a"));
    let end = within("a's work", Duration::from_secs(10), a.run(async {})).await;
    assert_eq!(end, LeadershipEnd::Finished);
    let lease: Lease = Api::for_type(server.client(), "kube-system")
        .get("test-component")
        .await
        .unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity, None, "released");
    // Another candidate acquires at once (no waiting for an expiry).
    let b = LeaderElector::new(
        server.client(),
        LeaderElectionConfig {
            lease_duration: Duration::from_secs(60),
            ..config("b")
        },
    );
    let end = within(
        "b acquires a released lease",
        Duration::from_secs(5),
        b.run(async {}),
    )
    .await;
    assert_eq!(end, LeadershipEnd::Finished);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_leading() {
    let mut server = Server::start(&[]);
    let a = Arc::new(LeaderElector::new(server.client(), config("a")));
    let ta = {
        let a = a.clone();
        tokio::spawn(async move { a.run(std::future::pending()).await })
    };
    until("a leads", Duration::from_secs(10), || a.is_leader()).await;
    // The server goes away (its new process listens elsewhere): renewals fail.
    server.restart();
    let end = within("a gives up", Duration::from_secs(10), ta)
        .await
        .unwrap();
    assert_eq!(end, LeadershipEnd::Lost);
    assert!(!a.is_leader());
}

/// As client-go's elector: a renewal cycle starts a retry period after the last renewal
/// and has the whole renew deadline. A partition longer than the renew deadline but shorter
/// than retry period + renew deadline after a renewal is survived; a longer one is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_renews_within_retry_period_and_renew_deadline_of_its_last_renewal() {
    let server = Server::start(&[]);
    let proxy = test_server::fault_proxy::FaultProxy::start(server.addr()).await;
    let mut config = config("a");
    config.lease_duration = Duration::from_secs(8);
    config.renew_deadline = Duration::from_secs(3);
    config.retry_period = Duration::from_millis(1500);
    let mut cfg = client::rest::Config::new(&proxy.url()).unwrap();
    cfg.timeout = Some(Duration::from_secs(20));
    let a = Arc::new(LeaderElector::new(
        client::rest::Client::new(cfg).unwrap(),
        config,
    ));
    let ta = {
        let a = a.clone();
        tokio::spawn(async move { a.run(std::future::pending()).await })
    };
    until("a leads", Duration::from_secs(10), || a.is_leader()).await;
    let leases: Api<Lease> = Api::for_type(server.client(), "kube-system");
    let renew_time = || async {
        leases
            .get("test-component")
            .await
            .ok()
            .and_then(|l| l.spec?.renew_time)
    };
    // Just after a renewal, the leader's connection stalls for 3.7 s: past the renew
    // deadline (3 s) but within retry period + renew deadline (4.5 s).
    let before = renew_time().await;
    let started = std::time::Instant::now();
    while renew_time().await == before {
        assert!(started.elapsed() < Duration::from_secs(10), "no renewal");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.set_stalled(true);
    tokio::time::sleep(Duration::from_millis(3700)).await;
    proxy.set_stalled(false);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        a.is_leader() && !ta.is_finished(),
        "lost the lease to a partition shorter than retry period + renew deadline"
    );
    // A partition past that ends leading.
    proxy.set_stalled(true);
    let end = within("a gives up", Duration::from_secs(10), ta)
        .await
        .unwrap();
    assert_eq!(end, LeadershipEnd::Lost);
    assert!(!a.is_leader());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorder_writes_events_and_counts_repeats() {
    let server = Server::start(&[]);
    let recorder = EventRecorder::new(server.client(), "test-component", Some("node-1".into()));
    let pod = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some("default".into()),
        name: Some("web".into()),
        uid: Some("uid-1".into()),
        ..Default::default()
    };
    for _ in 0..3 {
        recorder.event(
            &pod,
            EventType::Normal,
            "Pulled",
            "Container image \"nginx\" already present",
        );
    }
    recorder.event(
        &pod,
        EventType::Warning,
        "BackOff",
        "Back-off restarting failed container",
    );
    let events: Api<Event> = Api::for_type(server.client(), "default");
    let mut got = Vec::new();
    for _ in 0..100 {
        got = events.list(&Default::default()).await.unwrap().items;
        let pulled = got.iter().find(|e| e.reason.as_deref() == Some("Pulled"));
        if got.len() == 2 && pulled.and_then(|e| e.count) == Some(3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(got.len(), 2, "{got:?}");
    let pulled = got
        .iter()
        .find(|e| e.reason.as_deref() == Some("Pulled"))
        .unwrap();
    assert_eq!(
        pulled.count,
        Some(3),
        "repeats raise the count of one event"
    );
    assert_eq!(pulled.involved_object.name.as_deref(), Some("web"));
    assert_eq!(
        pulled.source.as_ref().and_then(|s| s.host.as_deref()),
        Some("node-1")
    );
    assert_eq!(pulled.type_.as_deref(), Some("Normal"));
    let backoff = got
        .iter()
        .find(|e| e.reason.as_deref() == Some("BackOff"))
        .unwrap();
    assert_eq!(backoff.type_.as_deref(), Some("Warning"));
    assert_eq!(
        backoff.reporting_component.as_deref(),
        Some("test-component")
    );
}
