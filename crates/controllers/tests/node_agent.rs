//! Node agents against a real `listwatch serve`: registration, leases, pods taken through
//! their lives, deletion, watch cuts, HTTP/2 connection sharing, unusable credentials.

mod support;

use client::clock::FakeClock;
use client::rest::resource::{EVENTS, LEASES, NODES, PODS};
use client::rest::{
    Api, Auth, Client, Config, DeleteParams, ListParams, PatchParams, PatchType, PostParams,
};
use controllers::node_agent::{
    NodeAgentConfig, NodeAgentError, NodeAgents, EXIT_AFTER_ANNOTATION, EXIT_CODE_ANNOTATION,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Event, Node, Pod, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use std::time::Duration;
use support::{until, CutProxy, Server};

const WAIT: Duration = Duration::from_secs(30);

fn config(prefix: &str, nodes: usize) -> NodeAgentConfig {
    NodeAgentConfig {
        nodes,
        name_prefix: prefix.into(),
        lease_renew_interval: Duration::from_secs(1),
        lease_duration: Duration::from_secs(4),
        ..Default::default()
    }
}

fn pod(name: &str, node: &str, restart_policy: &str, annotations: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            restart_policy: Some(restart_policy.into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("nginx:1.27".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn ready_nodes(client: &Client, prefix: &str) -> Vec<Node> {
    let nodes: Api<Node> = Api::all(client.clone(), NODES);
    nodes
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| {
            n.metadata
                .name
                .as_deref()
                .is_some_and(|name| name.starts_with(&format!("{prefix}-")))
                && node_ready(n)
        })
        .collect()
}

/// Waits until the pod `name` satisfies `cond`, returning it.
async fn pod_until(client: &Client, name: &str, what: &str, cond: impl Fn(&Pod) -> bool) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), PODS, "default");
    until(what, WAIT, || {
        let pods = pods.clone();
        let cond = &cond;
        async move { pods.get(name).await.ok().filter(|p| cond(p)) }
    })
    .await
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_register_ready_nodes_and_renew_their_leases() {
    let server = Server::start();
    let client = server.client();
    let agents = tokio::spawn(NodeAgents::new(client.clone(), config("reg", 3)).run());
    let nodes = until("three Ready nodes", WAIT, || {
        let client = client.clone();
        async move { Some(ready_nodes(&client, "reg").await).filter(|n| n.len() == 3) }
    })
    .await;
    let mut cidrs = Vec::new();
    for node in &nodes {
        let name = node.metadata.name.clone().unwrap();
        let labels = node.metadata.labels.clone().unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], name);
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        let status = node.status.as_ref().unwrap();
        let capacity = status.capacity.as_ref().unwrap();
        assert_eq!(capacity["cpu"].0, "32");
        assert_eq!(capacity["memory"].0, "256Gi");
        assert_eq!(capacity["pods"].0, "110");
        assert!(capacity.contains_key("ephemeral-storage"));
        assert_eq!(status.allocatable, status.capacity);
        let types: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        for t in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
            assert!(types.contains(&t), "{name} lacks {t}: {types:?}");
        }
        let addresses = status.addresses.as_ref().unwrap();
        assert!(addresses.iter().any(|a| a.type_ == "InternalIP"));
        assert!(addresses
            .iter()
            .any(|a| a.type_ == "Hostname" && a.address == name));
        cidrs.push(node.spec.as_ref().unwrap().pod_cidr.clone().unwrap());
    }
    cidrs.sort();
    cidrs.dedup();
    assert_eq!(cidrs.len(), 3, "every node has its own pod CIDR");

    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASES, "kube-node-lease");
    let renew_times = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone());
    let mut first = BTreeMap::new();
    for node in &nodes {
        let name = node.metadata.name.clone().unwrap();
        let lease = until("the node's lease", WAIT, || {
            let leases = leases.clone();
            let name = name.clone();
            async move { leases.get(&name).await.ok() }
        })
        .await;
        let spec = lease.spec.clone().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some(name.as_str()));
        assert_eq!(spec.lease_duration_seconds, Some(4));
        let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Node", node.metadata.uid.as_deref().unwrap())
        );
        first.insert(name, renew_times(&lease).unwrap());
    }
    // Every lease is renewed (every second here).
    for (name, renewed) in first {
        until("the lease renewed", WAIT, || {
            let leases = leases.clone();
            let (name, renewed) = (name.clone(), renewed.clone());
            async move {
                let l = leases.get(&name).await.ok()?;
                renew_times(&l).filter(|t| t.0 > renewed.0)
            }
        })
        .await;
    }
    agents.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_bound_to_a_node_runs_with_an_address_conditions_and_events() {
    let server = Server::start();
    let client = server.client();
    let agents = tokio::spawn(NodeAgents::new(client.clone(), config("run", 2)).run());
    until("two Ready nodes", WAIT, || {
        let client = client.clone();
        async move { (ready_nodes(&client, "run").await.len() == 2).then_some(()) }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), PODS, "default");
    let mut p = pod("web", "run-1", "Always", &[]);
    p.spec.as_mut().unwrap().containers[0].readiness_probe = Some(Probe {
        initial_delay_seconds: Some(1),
        ..Default::default()
    });
    pods.create(&PostParams::default(), &p).await.unwrap();
    let running = pod_until(&client, "web", "the pod Running and Ready", |p| {
        phase(p) == "Running" && condition(p, "Ready") == Some("True")
    })
    .await;
    let status = running.status.as_ref().unwrap();
    let ip = status.pod_ip.clone().unwrap();
    assert!(ip.starts_with("10.244.1."), "{ip} is from run-1's CIDR");
    assert_eq!(status.pod_ips.as_ref().unwrap()[0].ip, ip);
    assert_eq!(status.host_ip.as_deref(), Some("10.200.0.2"));
    assert!(status.start_time.is_some());
    for t in [
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodScheduled",
        "PodReadyToStartContainers",
    ] {
        assert_eq!(condition(&running, t), Some("True"), "{t}");
    }
    let c = &status.container_statuses.as_ref().unwrap()[0];
    assert!(c.ready && c.started == Some(true));
    assert!(c
        .container_id
        .as_deref()
        .unwrap()
        .starts_with("containerd://"));
    assert!(c.image_id.contains("@sha256:"));
    assert!(c
        .state
        .as_ref()
        .unwrap()
        .running
        .as_ref()
        .unwrap()
        .started_at
        .is_some());
    assert_eq!(
        status.qos_class.as_deref(),
        Some("BestEffort"),
        "the server's field is kept"
    );

    let events: Api<Event> = Api::namespaced(client.clone(), EVENTS, "default");
    let reasons = until("Pulled, Created and Started events", WAIT, || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            let reasons: Vec<(String, String)> = list
                .items
                .iter()
                .filter(|e| e.involved_object.name.as_deref() == Some("web"))
                .map(|e| {
                    (
                        e.reason.clone().unwrap_or_default(),
                        e.source
                            .as_ref()
                            .and_then(|s| s.host.clone())
                            .unwrap_or_default(),
                    )
                })
                .collect();
            let has = |r: &str| reasons.iter().any(|(x, _)| x == r);
            (has("Pulled") && has("Created") && has("Started")).then_some(reasons)
        }
    })
    .await;
    assert!(
        reasons.iter().all(|(_, host)| host == "run-1"),
        "{reasons:?}"
    );
    agents.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exits_end_in_the_phase_the_restart_policy_calls_for() {
    let server = Server::start();
    let client = server.client();
    let agents = tokio::spawn(NodeAgents::new(client.clone(), config("exit", 1)).run());
    let pods: Api<Pod> = Api::namespaced(client.clone(), PODS, "default");
    let cases = [
        ("never-ok", "Never", "0"),
        ("never-fail", "Never", "3"),
        ("onfailure-ok", "OnFailure", "0"),
        ("always-fail", "Always", "1"),
    ];
    for (name, policy, code) in cases {
        let p = pod(
            name,
            "exit-0",
            policy,
            &[(EXIT_AFTER_ANNOTATION, "1s"), (EXIT_CODE_ANNOTATION, code)],
        );
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let ok = pod_until(&client, "never-ok", "Succeeded", |p| {
        phase(p) == "Succeeded"
    })
    .await;
    let t = ok.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));

    let failed = pod_until(&client, "never-fail", "Failed", |p| phase(p) == "Failed").await;
    let t = failed.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));

    pod_until(&client, "onfailure-ok", "Succeeded", |p| {
        phase(p) == "Succeeded"
    })
    .await;

    let restarted = pod_until(&client, "always-fail", "restarted", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| cs[0].restart_count >= 1)
    })
    .await;
    assert_eq!(phase(&restarted), "Running");
    let c = &restarted.status.unwrap().container_statuses.unwrap()[0];
    let last = c.last_state.clone().unwrap().terminated.unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    agents.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminating_pod_is_stopped_and_deleted() {
    let server = Server::start();
    let client = server.client();
    let agents = tokio::spawn(NodeAgents::new(client.clone(), config("del", 1)).run());
    let pods: Api<Pod> = Api::namespaced(client.clone(), PODS, "default");
    // A finalizer keeps the pod visible after the agent's own delete, so the test can look
    // at what the agent did before.
    let mut held = pod("held", "del-0", "Always", &[]);
    held.metadata.finalizers = Some(vec!["listwatch.dev/test-hold".into()]);
    pods.create(&PostParams::default(), &held).await.unwrap();
    pod_until(&client, "held", "Running", |p| phase(p) == "Running").await;
    pods.delete("held", &DeleteParams::default()).await.unwrap();
    let stopped = pod_until(&client, "held", "the containers stopped", |p| {
        p.metadata.deletion_timestamp.is_some()
            && p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .all(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
                })
    })
    .await;
    assert_eq!(phase(&stopped), "Succeeded");
    assert_eq!(condition(&stopped, "Ready"), Some("False"));
    let events: Api<Event> = Api::namespaced(client.clone(), EVENTS, "default");
    until("a Killing event", WAIT, || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.involved_object.name.as_deref() == Some("held")
                        && e.reason.as_deref() == Some("Killing")
                        && e.message.as_deref() == Some("Stopping container app")
                })
                .then_some(())
        }
    })
    .await;
    // Releasing the finalizer lets the delete the agent made complete.
    pods.patch(
        "held",
        &PatchParams::default(),
        PatchType::Merge,
        &serde_json::json!({"metadata": {"finalizers": null}}),
    )
    .await
    .unwrap();
    until("the pod gone", WAIT, || {
        let pods = pods.clone();
        async move {
            pods.get("held")
                .await
                .err()
                .filter(|e| e.is_not_found())
                .map(drop)
        }
    })
    .await;

    // A plain delete: with graceful deletion the pod waits for the agent, which deletes it
    // with grace 0.
    pods.create(
        &PostParams::default(),
        &pod("plain", "del-0", "Always", &[]),
    )
    .await
    .unwrap();
    pod_until(&client, "plain", "Running", |p| phase(p) == "Running").await;
    pods.delete("plain", &DeleteParams::default())
        .await
        .unwrap();
    until("the pod gone", WAIT, || {
        let pods = pods.clone();
        async move {
            pods.get("plain")
                .await
                .err()
                .filter(|e| e.is_not_found())
                .map(drop)
        }
    })
    .await;
    agents.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_watch_resumes_without_relisting() {
    let server = Server::start();
    let proxy = CutProxy::start(server.addr()).await;
    let through_proxy = support::client_to(&format!("http://{}", proxy.addr()));
    let client = server.client();
    let agents = tokio::spawn(NodeAgents::new(through_proxy, config("cut", 2)).run());
    let pods: Api<Pod> = Api::namespaced(client.clone(), PODS, "default");
    for (name, node) in [("first-0", "cut-0"), ("first-1", "cut-1")] {
        pods.create(&PostParams::default(), &pod(name, node, "Always", &[]))
            .await
            .unwrap();
        pod_until(&client, name, "Running", |p| phase(p) == "Running").await;
    }
    let lists = server
        .metric(
            "apiserver_request_total",
            &[("verb", "LIST"), ("resource", "pods")],
        )
        .await;
    assert!(lists >= 2.0, "each node listed its pods: {lists}");
    proxy.cut();
    for (name, node) in [("second-0", "cut-0"), ("second-1", "cut-1")] {
        pods.create(&PostParams::default(), &pod(name, node, "Always", &[]))
            .await
            .unwrap();
        pod_until(&client, name, "Running after the cut", |p| {
            phase(p) == "Running"
        })
        .await;
    }
    let after = server
        .metric(
            "apiserver_request_total",
            &[("verb", "LIST"), ("resource", "pods")],
        )
        .await;
    assert_eq!(after, lists, "the cut watches resumed without a relist");
    agents.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_agents_share_one_http2_connection() {
    const NODES: usize = 40;
    let server = Server::start();
    let proxy = CutProxy::start(server.tls_addr()).await;
    let config_tls = server.tls_config(&format!("https://{}", proxy.addr()));
    let tls = Client::new(config_tls).unwrap();
    let client = server.client();
    let agents = tokio::spawn(NodeAgents::new(tls, config("h2", NODES)).run());
    until("all nodes Ready", WAIT, || {
        let client = client.clone();
        async move { (ready_nodes(&client, "h2").await.len() == NODES).then_some(()) }
    })
    .await;
    // A pod on the last node runs: its watch is up.
    let pods: Api<Pod> = Api::namespaced(client.clone(), PODS, "default");
    pods.create(
        &PostParams::default(),
        &pod("last", &format!("h2-{}", NODES - 1), "Always", &[]),
    )
    .await
    .unwrap();
    pod_until(&client, "last", "Running", |p| phase(p) == "Running").await;
    until("one pod watch per node", WAIT, || {
        let server = &server;
        async move {
            let watches = server
                .metric("apiserver_longrunning_requests", &[("resource", "pods")])
                .await;
            (watches == NODES as f64).then_some(())
        }
    })
    .await;
    assert_eq!(
        proxy.accepted(),
        1,
        "{NODES} nodes' watches and requests on one connection"
    );
    agents.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_server_or_credential_fails_with_one_line() {
    // Nobody listens there.
    let nowhere = support::client_to("http://127.0.0.1:1");
    let err = NodeAgents::new(nowhere, config("bad", 2))
        .run()
        .await
        .unwrap_err();
    assert!(matches!(err, NodeAgentError::Register { .. }), "{err:?}");
    let line = err.to_string();
    assert!(!line.contains('\n') && line.contains("bad-0"), "{line}");

    // A token the server does not know.
    let server = Server::start();
    let mut config_tls: Config = server.tls_config(&server.tls_url);
    config_tls.auth = Auth::Bearer("not-the-token".into());
    let err = NodeAgents::new(Client::new(config_tls).unwrap(), config("bad", 2))
        .run()
        .await
        .unwrap_err();
    let line = err.to_string();
    assert!(!line.contains('\n'), "{line}");
    assert!(line.contains("Unauthorized"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_run_on_the_given_clock() {
    let server = Server::start();
    let client = server.client();
    let fake = FakeClock::new();
    let config = NodeAgentConfig {
        nodes: 1,
        name_prefix: "fake".into(),
        clock: fake.shared(),
        ..Default::default()
    };
    let agents = tokio::spawn(NodeAgents::new(client.clone(), config).run());
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASES, "kube-node-lease");
    let renewed = |l: &Lease| {
        l.spec
            .as_ref()
            .and_then(|s| s.renew_time.clone())
            .map(|t| t.0.as_microsecond())
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), PODS, "default");
    let p = pod("hour", "fake-0", "Never", &[(EXIT_AFTER_ANNOTATION, "1h")]);
    pods.create(&PostParams::default(), &p).await.unwrap();
    pod_until(&client, "hour", "Running", |p| phase(p) == "Running").await;
    let first = until("the lease", WAIT, || {
        let leases = leases.clone();
        async move { leases.get("fake-0").await.ok().as_ref().and_then(renewed) }
    })
    .await;

    // Ten seconds on the agents' clock (and milliseconds of real time): a renewal, ten
    // seconds later in the lease's time.
    fake.step(Duration::from_secs(10));
    let second = until("the lease renewed on the fake clock", WAIT, || {
        let leases = leases.clone();
        async move {
            let l = leases.get("fake-0").await.ok()?;
            renewed(&l).filter(|t| *t > first)
        }
    })
    .await;
    assert!(second - first >= 9_000_000, "{} µs", second - first);

    // An hour on the agents' clock: the container exits, exactly an hour after it started.
    fake.step(Duration::from_secs(3600));
    let done = pod_until(&client, "hour", "Succeeded", |p| phase(p) == "Succeeded").await;
    let t = done.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    let (started, finished) = (t.started_at.unwrap().0, t.finished_at.unwrap().0);
    assert_eq!(finished.as_second() - started.as_second(), 3600);
    agents.abort();
}
