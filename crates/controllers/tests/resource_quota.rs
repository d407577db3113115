//! The ResourceQuota controller against a real `listwatch serve`: a quota's status gets its
//! limits and what its namespace uses of them; deleted objects and finished pods give
//! their usage back at once; scopes choose which pods count; other resources (`count/R.G`)
//! are listed through the API and recounted by the periodic resync.
//!
//! The server's quota admission charges admitted creates to `status.used` itself (and
//! refuses creates while a quota has no `status.hard`), so creates after a quota exists
//! are retried until the controller has filled the status in, and every pod of a
//! namespace whose quota limits `requests.cpu` requests CPU.

mod common;

use api::quota::{parse_list, ResourceList};
use client::cache::SharedInformerFactory;
use client::rest::Client;
use common::{eventually, Server};
use controllers::resource_quota::{ResourceQuotaConfig, ResourceQuotaController};
use http::Method;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

async fn call(
    client: &Client,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Result<Value, client::rest::Error> {
    let body = body.map(|b| (serde_json::to_vec(b).unwrap().into(), "application/json"));
    let (_, out) = client.request_bytes(method, path, body).await?;
    Ok(serde_json::from_slice(&out).unwrap_or(Value::Null))
}

async fn get(client: &Client, path: &str) -> Value {
    call(client, Method::GET, path, None)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// Creates `body` in `collection`, retrying while the server refuses it for a reason that
/// passes (the namespace's ServiceAccount not there yet, a quota whose status is not
/// filled in yet).
async fn create(client: &Client, collection: &str, body: Value) -> Value {
    let start = Instant::now();
    loop {
        match call(client, Method::POST, collection, Some(&body)).await {
            Ok(v) => return v,
            Err(e) if start.elapsed() < LIMIT => {
                eprintln!("POST {collection} refused, retrying: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("POST {collection}: {e}"),
        }
    }
}

async fn delete(client: &Client, path: &str) {
    call(
        client,
        Method::DELETE,
        path,
        Some(&json!({"gracePeriodSeconds": 0})),
    )
    .await
    .unwrap_or_else(|e| panic!("DELETE {path}: {e}"));
}

fn pod(name: &str, cpu: Option<&str>) -> Value {
    let mut container = json!({"name": "c", "image": "nginx"});
    if let Some(cpu) = cpu {
        container["resources"] = json!({"requests": {"cpu": cpu}});
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [container]}})
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
           "data": {"k": "v"}})
}

fn quota(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name},
           "spec": spec})
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

/// `(status.hard, status.used)` of a quota, read as amounts; `None` before it has a status.
async fn quota_status(client: &Client, ns: &str, name: &str) -> Option<(Value, ResourceList)> {
    let rq = get(
        client,
        &format!("/api/v1/namespaces/{ns}/resourcequotas/{name}"),
    )
    .await;
    let hard = rq.pointer("/status/hard")?.clone();
    Some((hard, parse_list(rq.pointer("/status/used"))))
}

/// How many objects `collection` holds now.
async fn count(client: &Client, collection: &str) -> i64 {
    let list = get(client, collection).await;
    list["items"].as_array().map_or(0, |a| a.len() as i64)
}

/// Waits until the quota's `status.used` is `expected` (every name, nothing else).
async fn used_becomes(client: &Client, ns: &str, name: &str, what: &str, expected: Value) {
    let expected = parse_list(Some(&expected));
    let start = Instant::now();
    loop {
        let now = quota_status(client, ns, name).await.map(|(_, used)| used);
        if now.as_ref() == Some(&expected) {
            return;
        }
        assert!(
            start.elapsed() < LIMIT,
            "timed out after {LIMIT:?}: {what}: used {now:?}, expected {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn start_controller(
    client: &Client,
    config: ResourceQuotaConfig,
) -> (Arc<ResourceQuotaController>, tokio::task::JoinHandle<()>) {
    let factory = SharedInformerFactory::new(client.clone());
    let controller =
        Arc::new(ResourceQuotaController::new(&factory, client.clone(), config).unwrap());
    let running = {
        let c = controller.clone();
        tokio::spawn(async move { c.run().await })
    };
    (controller, running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_reports_what_its_namespace_uses_and_gets_usage_back_at_once() {
    let server = Server::start(&[]);
    let client = server.client();
    let ns = "quota";
    server.namespaces(&[ns]).await;
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let cms = format!("/api/v1/namespaces/{ns}/configmaps");
    let services = format!("/api/v1/namespaces/{ns}/services");
    let secrets = format!("/api/v1/namespaces/{ns}/secrets");
    // Objects there before the quota: only the controller can count them.
    create(&client, &pods, pod("p1", Some("100m"))).await;
    create(&client, &pods, pod("p2", Some("250m"))).await;
    create(&client, &cms, configmap("before")).await;

    // A long resync: every change below must come from admission or replenishment.
    let (_controller, running) = start_controller(&client, ResourceQuotaConfig::default());
    let hard = json!({"pods": "10", "requests.cpu": "2", "count/configmaps": "5", "services": "3"});
    create(
        &client,
        &format!("/api/v1/namespaces/{ns}/resourcequotas"),
        quota("compute", json!({"hard": hard})),
    )
    .await;

    eventually("status.hard filled in", LIMIT, || async {
        quota_status(&client, ns, "compute")
            .await
            .is_some_and(|(h, _)| h == hard)
    })
    .await;
    // The server may publish its own ConfigMaps (the root CA) in every namespace.
    let base_cms = count(&client, &cms).await;
    used_becomes(
        &client,
        ns,
        "compute",
        "usage of what was there before",
        json!({"pods": "2", "requests.cpu": "350m", "count/configmaps": base_cms.to_string(),
               "services": "0"}),
    )
    .await;

    // Creates: charged by admission, confirmed by the controller.
    create(&client, &pods, pod("p3", Some("200m"))).await;
    create(&client, &cms, configmap("after")).await;
    create(
        &client,
        &services,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    )
    .await;
    let cms_now = count(&client, &cms).await;
    assert_eq!(cms_now, base_cms + 1);
    used_becomes(
        &client,
        ns,
        "compute",
        "usage of the created objects",
        json!({"pods": "3", "requests.cpu": "550m", "count/configmaps": cms_now.to_string(),
               "services": "1"}),
    )
    .await;
    // Let the controller's caches see the creates before anything makes it recompute.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A deleted pod gives its usage back.
    delete(&client, &format!("{pods}/p1")).await;
    used_becomes(
        &client,
        ns,
        "compute",
        "usage of a deleted pod released",
        json!({"pods": "2", "requests.cpu": "450m", "count/configmaps": cms_now.to_string(),
               "services": "1"}),
    )
    .await;

    // So does a pod that finished.
    eventually("p2 marked Succeeded", LIMIT, || async {
        let mut p2 = get(&client, &format!("{pods}/p2")).await;
        p2["status"]["phase"] = json!("Succeeded");
        call(
            &client,
            Method::PUT,
            &format!("{pods}/p2/status"),
            Some(&p2),
        )
        .await
        .is_ok()
    })
    .await;
    used_becomes(
        &client,
        ns,
        "compute",
        "usage of a finished pod released",
        json!({"pods": "1", "requests.cpu": "200m", "count/configmaps": cms_now.to_string(),
               "services": "1"}),
    )
    .await;

    // And deleted ConfigMaps and Services.
    delete(&client, &format!("{cms}/after")).await;
    delete(&client, &format!("{services}/web")).await;
    used_becomes(
        &client,
        ns,
        "compute",
        "usage of deleted configmaps and services released",
        json!({"pods": "1", "requests.cpu": "200m", "count/configmaps": base_cms.to_string(),
               "services": "0"}),
    )
    .await;

    // A new limit is taken in at once, with its usage.
    let mut rq = get(
        &client,
        &format!("/api/v1/namespaces/{ns}/resourcequotas/compute"),
    )
    .await;
    rq["spec"]["hard"]["secrets"] = json!("4");
    rq["spec"]["hard"]["pods"] = json!("20");
    call(
        &client,
        Method::PUT,
        &format!("/api/v1/namespaces/{ns}/resourcequotas/compute"),
        Some(&rq),
    )
    .await
    .unwrap();
    let new_hard = rq["spec"]["hard"].clone();
    eventually("status.hard follows spec.hard", LIMIT, || async {
        quota_status(&client, ns, "compute")
            .await
            .is_some_and(|(h, _)| h == new_hard)
    })
    .await;
    let secrets_now = count(&client, &secrets).await;
    used_becomes(
        &client,
        ns,
        "compute",
        "usage of the new limit",
        json!({"pods": "1", "requests.cpu": "200m", "count/configmaps": base_cms.to_string(),
               "services": "0", "secrets": secrets_now.to_string()}),
    )
    .await;

    running.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_best_effort_quota_counts_only_best_effort_pods() {
    let server = Server::start(&[]);
    let client = server.client();
    let ns = "besteffort";
    server.namespaces(&[ns]).await;
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    create(&client, &pods, pod("be1", None)).await;
    create(&client, &pods, pod("burstable", Some("100m"))).await;

    let (_controller, running) = start_controller(&client, ResourceQuotaConfig::default());
    create(
        &client,
        &format!("/api/v1/namespaces/{ns}/resourcequotas"),
        quota(
            "best-effort",
            json!({"hard": {"pods": "5"}, "scopes": ["BestEffort"]}),
        ),
    )
    .await;
    used_becomes(
        &client,
        ns,
        "best-effort",
        "only the best-effort pod counted",
        json!({"pods": "1"}),
    )
    .await;

    create(&client, &pods, pod("be2", None)).await;
    create(&client, &pods, pod("burstable2", Some("50m"))).await;
    used_becomes(
        &client,
        ns,
        "best-effort",
        "a new best-effort pod counted, a burstable one not",
        json!({"pods": "2"}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    delete(&client, &format!("{pods}/burstable")).await;
    delete(&client, &format!("{pods}/be1")).await;
    used_becomes(
        &client,
        ns,
        "best-effort",
        "the deleted best-effort pod released",
        json!({"pods": "1"}),
    )
    .await;

    running.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_resources_are_listed_through_the_api_and_recounted_on_resync() {
    let server = Server::start(&[]);
    let client = server.client();
    let ns = "counted";
    server.namespaces(&[ns]).await;
    let deployments = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    create(&client, &deployments, deployment("d1")).await;
    create(&client, &deployments, deployment("d2")).await;

    let config = ResourceQuotaConfig {
        resync_period: Duration::from_secs(1),
        ..ResourceQuotaConfig::default()
    };
    let (_controller, running) = start_controller(&client, config);
    create(
        &client,
        &format!("/api/v1/namespaces/{ns}/resourcequotas"),
        quota(
            "objects",
            json!({"hard": {"count/deployments.apps": "5", "count/jobs.batch": "2",
                            "count/widgets.example.com": "1", "resourcequotas": "2"}}),
        ),
    )
    .await;
    used_becomes(
        &client,
        ns,
        "objects",
        "deployments, jobs, an unknown resource and quotas counted",
        json!({"count/deployments.apps": "2", "count/jobs.batch": "0",
               "count/widgets.example.com": "0", "resourcequotas": "1"}),
    )
    .await;

    // Nothing replenishes other resources: the periodic resync recounts them.
    delete(&client, &format!("{deployments}/d1")).await;
    used_becomes(
        &client,
        ns,
        "objects",
        "a deleted deployment recounted by the resync",
        json!({"count/deployments.apps": "1", "count/jobs.batch": "0",
               "count/widgets.example.com": "0", "resourcequotas": "1"}),
    )
    .await;

    running.abort();
}
