//! The node lifecycle controller against a real `listwatch serve`, with node agents: a node
//! whose agent stops turns `Unknown` and tainted, its pods are evicted as their tolerations
//! say, and when the agent comes back the taints go.

mod support;

use client::rest::resource::{EVENTS, NODES, PODS};
use client::rest::{Api, Client, ListParams, PostParams};
use controllers::node_agent::{NodeAgentConfig, NodeAgents};
use controllers::node_lifecycle::taints::{NO_EXECUTE, NO_SCHEDULE, TAINT_NODE_UNREACHABLE};
use controllers::node_lifecycle::{NodeLifecycleConfig, NodeLifecycleController};
use k8s_openapi::api::core::v1::{Container, Event, Node, Pod, PodSpec, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::time::Duration;
use support::{until, Server};

const WAIT: Duration = Duration::from_secs(30);

fn agents(prefix: &str) -> NodeAgentConfig {
    NodeAgentConfig {
        nodes: 1,
        name_prefix: prefix.into(),
        lease_renew_interval: Duration::from_millis(500),
        lease_duration: Duration::from_secs(2),
        ..Default::default()
    }
}

fn pod(name: &str, node: &str, toleration_seconds: Option<Option<i64>>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("nginx:1.27".into()),
                ..Default::default()
            }],
            tolerations: toleration_seconds.map(|secs| {
                vec![Toleration {
                    key: Some(TAINT_NODE_UNREACHABLE.into()),
                    operator: Some("Exists".into()),
                    effect: Some(NO_EXECUTE.into()),
                    toleration_seconds: secs,
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn conditions(node: &Node) -> Vec<(String, String, String)> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

fn has_taint(node: &Node, effect: &str) -> bool {
    taints(node)
        .iter()
        .any(|t| t.key == TAINT_NODE_UNREACHABLE && t.effect == effect)
}

async fn node_until(client: &Client, name: &str, what: &str, cond: impl Fn(&Node) -> bool) -> Node {
    let nodes: Api<Node> = Api::all(client.clone(), NODES);
    until(what, WAIT, || {
        let nodes = nodes.clone();
        let cond = &cond;
        async move { nodes.get(name).await.ok().filter(|n| cond(n)) }
    })
    .await
}

fn ready(p: &Pod) -> Option<&str> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str())
}

/// Gone, or being deleted.
async fn evicted(pods: &Api<Pod>, name: &str) -> bool {
    match pods.get(name).await {
        Ok(p) => p.metadata.deletion_timestamp.is_some(),
        Err(e) => e.is_not_found(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_is_tainted_and_evicted_until_its_agent_returns() {
    let server = Server::start();
    let client = server.client();
    let controller = tokio::spawn(
        NodeLifecycleController::new(
            client.clone(),
            NodeLifecycleConfig {
                node_monitor_period: Duration::from_millis(200),
                node_monitor_grace_period: Duration::from_secs(3),
                node_startup_grace_period: Duration::from_secs(3),
                ..Default::default()
            },
        )
        .run(),
    );
    // A healthy node too: with every node silent the controller would suspect itself and
    // evict nothing.
    let healthy = tokio::spawn(NodeAgents::new(client.clone(), agents("stay")).run());
    let doomed = tokio::spawn(NodeAgents::new(client.clone(), agents("gone")).run());
    let pods: Api<Pod> = Api::namespaced(client.clone(), PODS, "default");
    // (The server's DefaultTolerationSeconds admission gives a pod that does not mention
    // the unreachable taint 300 s; a toleration of 0 s means at once.)
    for (name, tolerations) in [
        ("prompt", Some(Some(0))),
        ("patient", Some(Some(2))),
        ("faithful", Some(None)),
    ] {
        pods.create(&PostParams::default(), &pod(name, "gone-0", tolerations))
            .await
            .unwrap();
    }
    for name in ["prompt", "patient", "faithful"] {
        until("the pod Ready", WAIT, || {
            let pods = pods.clone();
            async move {
                pods.get(name)
                    .await
                    .ok()
                    .filter(|p| ready(p) == Some("True"))
            }
        })
        .await;
    }

    // The agent stops: no more renewals.
    doomed.abort();
    let unknown = node_until(&client, "gone-0", "the node Unknown", |n| {
        conditions(n)
            .iter()
            .any(|(t, s, _)| t == "Ready" && s == "Unknown")
    })
    .await;
    for (t, s, reason) in conditions(&unknown) {
        assert_eq!(
            (s.as_str(), reason.as_str()),
            ("Unknown", "NodeStatusUnknown"),
            "{t}"
        );
    }
    let tainted = node_until(&client, "gone-0", "both unreachable taints", |n| {
        has_taint(n, NO_SCHEDULE) && has_taint(n, NO_EXECUTE)
    })
    .await;
    assert!(taints(&tainted).iter().all(|t| t.time_added.is_some()));

    until("the prompt pod evicted", WAIT, || {
        let pods = pods.clone();
        async move { evicted(&pods, "prompt").await.then_some(()) }
    })
    .await;
    // Deleted gracefully: it waits for its kubelet, marked as a disruption's target.
    let prompt = pods.get("prompt").await.unwrap();
    let target = prompt
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
        .cloned()
        .expect("a DisruptionTarget condition");
    assert_eq!(
        (target.status.as_str(), target.reason.as_deref()),
        ("True", Some("DeletionByTaintManager"))
    );
    until("the patient pod evicted after its toleration", WAIT, || {
        let pods = pods.clone();
        async move { evicted(&pods, "patient").await.then_some(()) }
    })
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), EVENTS, "default");
    until("TaintManagerEviction events", WAIT, || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            let marked = |name: &str| {
                list.items.iter().any(|e| {
                    e.reason.as_deref() == Some("TaintManagerEviction")
                        && e.message.as_deref()
                            == Some(&format!("Marking for deletion Pod default/{name}"))
                })
            };
            (marked("prompt") && marked("patient")).then_some(())
        }
    })
    .await;
    // The pod that tolerates the taint for ever stays, marked not ready.
    let faithful = until("the faithful pod marked not ready", WAIT, || {
        let pods = pods.clone();
        async move {
            pods.get("faithful")
                .await
                .ok()
                .filter(|p| ready(p) == Some("False"))
        }
    })
    .await;
    assert!(faithful.metadata.deletion_timestamp.is_none());
    // The healthy node is left alone.
    let stay: Node = Api::<Node>::all(client.clone(), NODES)
        .get("stay-0")
        .await
        .unwrap();
    assert!(taints(&stay).is_empty(), "{:?}", taints(&stay));

    // The agent comes back: Ready again, the taints go, the pod is ready again.
    let back = tokio::spawn(NodeAgents::new(client.clone(), agents("gone")).run());
    let untainted = node_until(&client, "gone-0", "Ready and untainted", |n| {
        conditions(n)
            .iter()
            .any(|(t, s, _)| t == "Ready" && s == "True")
            && taints(n).is_empty()
    })
    .await;
    assert_eq!(
        untainted.spec.as_ref().and_then(|s| s.taints.as_ref()),
        None,
        "the last taint removed takes the field with it"
    );
    until("the faithful pod Ready again", WAIT, || {
        let pods = pods.clone();
        async move {
            pods.get("faithful")
                .await
                .ok()
                .filter(|p| ready(p) == Some("True"))
        }
    })
    .await;
    // The returned agent finishes the deletions the evictions started.
    for name in ["prompt", "patient"] {
        until("the evicted pod gone", WAIT, || {
            let pods = pods.clone();
            async move {
                pods.get(name)
                    .await
                    .err()
                    .filter(|e| e.is_not_found())
                    .map(drop)
            }
        })
        .await;
    }
    back.abort();
    healthy.abort();
    controller.abort();
}
