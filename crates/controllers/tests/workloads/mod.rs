//! Helpers of the workload-controller tests: object builders, reads through the API, a
//! polling wait for async conditions, and a test-only "kubelet" that marks pods Running
//! and Ready through the status subresource (there are no node agents in these tests, so
//! pods would otherwise stay Pending and never become available).

#![allow(dead_code)]

use client::rest::{Api, Client, ListParams, PatchParams, PatchType, PostParams};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, ReplicaSet, ReplicaSetSpec,
    RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use test_server::eventually;

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn template(app: &str, image: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels(&[("app", app)])),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

pub fn replica_set(name: &str, app: &str, replicas: i32) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels(&[("app", app)])),
                ..Default::default()
            },
            template: Some(template(app, "nginx:1.27")),
            ..Default::default()
        },
        status: None,
    }
}

pub fn deployment(
    name: &str,
    app: &str,
    replicas: i32,
    surge: IntOrString,
    unavailable: IntOrString,
) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels(&[("app", app)])),
                ..Default::default()
            },
            template: template(app, "nginx:1.26"),
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(surge),
                    max_unavailable: Some(unavailable),
                }),
            }),
            ..Default::default()
        },
        status: None,
    }
}

pub async fn create<K>(client: &Client, ns: &str, obj: &K) -> K
where
    K: k8s_openapi::Resource + serde::Serialize + serde::de::DeserializeOwned,
    K::Scope: 'static,
{
    Api::<K>::for_type(client.clone(), ns)
        .create(&PostParams::default(), obj)
        .await
        .unwrap_or_else(|e| panic!("creating a {}: {e}", K::KIND))
}

pub async fn get<K>(client: &Client, ns: &str, name: &str) -> K
where
    K: k8s_openapi::Resource + serde::de::DeserializeOwned,
    K::Scope: 'static,
{
    Api::<K>::for_type(client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("reading {} {ns}/{name}: {e}", K::KIND))
}

/// A JSON merge patch of `name`.
pub async fn merge_patch<K>(client: &Client, ns: &str, name: &str, patch: serde_json::Value) -> K
where
    K: k8s_openapi::Resource + serde::de::DeserializeOwned,
    K::Scope: 'static,
{
    Api::<K>::for_type(client.clone(), ns)
        .patch(name, &PatchParams::default(), PatchType::Merge, &patch)
        .await
        .unwrap_or_else(|e| panic!("patching {} {ns}/{name}: {e}", K::KIND))
}

/// The pods of `ns` matching `selector`, read from the server.
pub async fn pods(client: &Client, ns: &str, selector: &str) -> Vec<Pod> {
    Api::<Pod>::for_type(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await
        .expect("listing pods")
        .items
}

pub fn controller_uid(meta: &ObjectMeta) -> Option<String> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Makes `pod` Running and Ready, as a kubelet would report it.
pub async fn mark_ready(client: &Client, ns: &str, name: &str) -> Result<(), client::rest::Error> {
    let api = Api::<Pod>::for_type(client.clone(), ns);
    for _ in 0..5 {
        let mut pod = api.get(name).await?;
        let now = Time(
            k8s_openapi::jiff::Timestamp::from_second(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs() as i64,
            )
            .unwrap(),
        );
        let status = pod.status.get_or_insert_with(Default::default);
        status.phase = Some("Running".into());
        status.conditions = Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_transition_time: Some(now),
            ..Default::default()
        }]);
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}/status");
        let body = serde_json::to_vec(&pod).unwrap();
        match client
            .request_bytes(
                http::Method::PUT,
                &path,
                Some((bytes::Bytes::from(body), "application/json")),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A test-only kubelet: every pod of the namespace that is not Ready is made Running and
/// Ready, until dropped. It watches through its own client.
pub struct FakeKubelet {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.abort();
    }
}

impl FakeKubelet {
    pub fn start(client: Client, ns: &str) -> FakeKubelet {
        Self::start_except(client, ns, None)
    }

    /// Like [`FakeKubelet::start`], but pods running `broken_image` never become ready.
    pub fn start_except(client: Client, ns: &str, broken_image: Option<&str>) -> FakeKubelet {
        let broken = broken_image.map(str::to_string);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let ns = ns.to_string();
        let task = tokio::spawn(async move {
            let broken = broken;
            use client::rest::{WatchEvent, WatchParams};
            let api = Api::<Pod>::for_type(client.clone(), &ns);
            while !s.load(Ordering::SeqCst) {
                let Ok(mut events) = api.watch(&WatchParams::default()).await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                while let Some(Ok(ev)) = events.next().await {
                    let pod = match ev {
                        WatchEvent::Added(p) | WatchEvent::Modified(p) => p,
                        _ => continue,
                    };
                    if is_ready(&pod) || pod.metadata.deletion_timestamp.is_some() {
                        continue;
                    }
                    let image = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.containers.first())
                        .and_then(|c| c.image.clone());
                    if broken.is_some() && image == broken {
                        continue;
                    }
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    let (c, ns) = (client.clone(), ns.clone());
                    tokio::spawn(async move {
                        let _ = mark_ready(&c, &ns, &name).await;
                    });
                }
            }
        });
        FakeKubelet { stop, task }
    }
}

/// The control plane of these tests: a ReplicaSet and a Deployment controller on one
/// informer factory, running until dropped.
pub struct ControllerManager {
    pub replicasets: Arc<controllers::replicaset::ReplicaSetController>,
    pub deployments: Arc<controllers::deployment::DeploymentController>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for ControllerManager {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl ControllerManager {
    pub fn start(client: Client) -> ControllerManager {
        let factory = client::cache::SharedInformerFactory::new(client.clone());
        let replicasets = Arc::new(
            controllers::replicaset::ReplicaSetController::new(&factory, client.clone(), 4)
                .unwrap(),
        );
        let deployments = Arc::new(
            controllers::deployment::DeploymentController::new(&factory, client, 4).unwrap(),
        );
        let (r, d) = (replicasets.clone(), deployments.clone());
        let tasks = vec![
            tokio::spawn(async move { r.run().await }),
            tokio::spawn(async move { d.run().await }),
        ];
        ControllerManager {
            replicasets,
            deployments,
            tasks,
        }
    }
}

/// The ReplicaSets of `ns` controlled by the object with uid `owner`, oldest first.
pub async fn owned_replica_sets(client: &Client, ns: &str, owner: &str) -> Vec<ReplicaSet> {
    let mut v: Vec<ReplicaSet> = Api::<ReplicaSet>::for_type(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("listing replica sets")
        .items
        .into_iter()
        .filter(|rs| controller_uid(&rs.metadata).as_deref() == Some(owner))
        .collect();
    v.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
            .then_with(|| {
                annotation(a, "deployment.kubernetes.io/revision")
                    .cmp(&annotation(b, "deployment.kubernetes.io/revision"))
            })
    });
    v
}

pub fn annotation(rs: &ReplicaSet, key: &str) -> Option<String> {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
}

pub fn condition(d: &Deployment, type_: &str) -> Option<(String, String)> {
    d.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_.as_deref() == Some(type_))
        .map(|c| {
            (
                c.status.clone().unwrap_or_default(),
                c.reason.clone().unwrap_or_default(),
            )
        })
}

/// Whether the rollout is complete as `kubectl rollout status` judges it.
pub fn rolled_out(d: &Deployment) -> bool {
    let Some(s) = d.status.as_ref() else {
        return false;
    };
    let want = d.spec.replicas.unwrap_or(1);
    d.metadata.generation <= s.observed_generation
        && s.updated_replicas.unwrap_or(0) == want
        && s.replicas.unwrap_or(0) == want
        && s.available_replicas.unwrap_or(0) == want
}
