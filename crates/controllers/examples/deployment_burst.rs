//! Measures the Deployment and ReplicaSet controllers under a burst: N Deployments of M
//! replicas created at once in a fresh namespace; reports when every pod exists, when
//! every ReplicaSet reports them, and when every Deployment's status does, with the CPU
//! this process (the controllers) used.
//!
//! ```text
//! cargo run --release -p controllers --example deployment_burst -- --server http://127.0.0.1:PORT \
//!     [--deployments 100] [--replicas 100] [--rs-workers 5] [--deployment-workers 5]
//! ```
//!
//! Without node agents the pods stay Pending: this measures creation, not readiness.

use client::cache::{SharedInformerFactory, NAMESPACE_INDEX};
use client::rest::{Api, Client, Config, PostParams};
use controllers::deployment::{DeploymentController, DeploymentControllerOptions};
use controllers::replicaset::{ReplicaSetController, ReplicaSetControllerOptions};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, ReplicaSet};
use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn arg(name: &str) -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == name {
            return args.next();
        }
    }
    None
}

fn num(name: &str, default: usize) -> usize {
    arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// User + system CPU seconds of this process.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    let labels = BTreeMap::from([("app".to_string(), name.to_string())]);
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "main".into(),
                        image: Some("nginx:1.27".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        status: None,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = arg("--server").unwrap_or_else(|| "http://127.0.0.1:8080".into());
    let deployments = num("--deployments", 100);
    let replicas = num("--replicas", 100);
    let mut config = Config::new(&server)?;
    config.timeout = Some(Duration::from_secs(60));
    let client = Client::new(config)?;
    let ns = format!("burst-{}", std::process::id());
    Api::<Namespace>::all(client.clone(), client::rest::resource::NAMESPACES)
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.clone()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;

    let factory = SharedInformerFactory::new(client.clone());
    let rsc = Arc::new(ReplicaSetController::with_options(
        &factory,
        client.clone(),
        ReplicaSetControllerOptions {
            workers: num("--rs-workers", 5),
            ..Default::default()
        },
    )?);
    let dc = Arc::new(DeploymentController::with_options(
        &factory,
        client.clone(),
        DeploymentControllerOptions {
            workers: num("--deployment-workers", 5),
            ..Default::default()
        },
    )?);
    let pods = factory.informer::<Pod>()?;
    let rss = factory.informer::<ReplicaSet>()?;
    let ds = factory.informer::<Deployment>()?;
    let (r, d) = (rsc.clone(), dc.clone());
    tokio::spawn(async move { r.run().await });
    tokio::spawn(async move { d.run().await });
    factory.start();
    factory.wait_for_cache_sync(Duration::from_secs(60)).await;

    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let mut creates = tokio::task::JoinSet::new();
    for i in 0..deployments {
        let api: Api<Deployment> = Api::for_type(client.clone(), &ns);
        let d = deployment(&format!("app-{i}"), i32::try_from(replicas)?);
        creates.spawn(async move { api.create(&PostParams::default(), &d).await.map(|_| ()) });
    }
    while let Some(r) = creates.join_next().await {
        r??;
    }
    let created = start.elapsed();
    let want = deployments * replicas;
    let (mut all_pods, mut rs_status, mut d_status) = (None, None, None);
    while d_status.is_none() || all_pods.is_none() || rs_status.is_none() {
        let n = pods
            .indexer()
            .by_index(NAMESPACE_INDEX, &ns)
            .map(|v| v.len())
            .unwrap_or(0);
        if all_pods.is_none() && n >= want {
            all_pods = Some(start.elapsed());
        }
        let in_ns = rss
            .indexer()
            .by_index(NAMESPACE_INDEX, &ns)
            .unwrap_or_default();
        if rs_status.is_none()
            && in_ns.len() == deployments
            && in_ns.iter().all(|rs| {
                rs.status
                    .as_ref()
                    .is_some_and(|s| s.replicas as usize == replicas)
            })
        {
            rs_status = Some(start.elapsed());
        }
        let d_in_ns = ds
            .indexer()
            .by_index(NAMESPACE_INDEX, &ns)
            .unwrap_or_default();
        if d_status.is_none()
            && d_in_ns.len() == deployments
            && d_in_ns.iter().all(|d| {
                d.status.as_ref().is_some_and(|s| {
                    s.replicas.unwrap_or(0) as usize == replicas
                        && s.updated_replicas.unwrap_or(0) as usize == replicas
                })
            })
        {
            d_status = Some(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(300) {
            eprintln!("gave up after 300 s: {n} of {want} pods");
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!(
        "{deployments} deployments x {replicas} replicas: deployments created in {created:.2?}; \
         all {want} pods exist after {all_pods:.2?}; replica set status after {rs_status:.2?}; \
         deployment status after {d_status:.2?}; controllers' CPU {:.2} s",
        cpu_seconds() - cpu0
    );
    Ok(())
}
