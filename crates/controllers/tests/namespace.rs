//! The namespace controller against a real `listwatch serve`: a deleted namespace stays
//! Terminating, reporting what remains in its conditions, while a pod finishes its grace
//! period and an object's finalizer holds it; once they are gone the controller removes its
//! finalizer and the server removes the namespace. Namespaces not deleted are left alone.

mod common;

use client::cache::SharedInformerFactory;
use client::rest::Client;
use common::{eventually, Server};
use controllers::controller_utils::is_namespace_terminating;
use controllers::namespace::{NamespaceConfig, NamespaceController};
use http::Method;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

async fn call(
    client: &Client,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value, client::rest::Error> {
    let body = body.map(|b| (serde_json::to_vec(&b).unwrap().into(), "application/json"));
    let (_, out) = client.request_bytes(method, path, body).await?;
    Ok(serde_json::from_slice(&out).unwrap_or(Value::Null))
}

async fn get(client: &Client, path: &str) -> Option<Value> {
    match call(client, Method::GET, path, None).await {
        Ok(v) => Some(v),
        Err(e) if e.is_not_found() => None,
        Err(e) => panic!("GET {path}: {e}"),
    }
}

async fn create(client: &Client, path: &str, body: Value) -> Value {
    call(client, Method::POST, path, Some(body))
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

fn condition(ns: &Value, ty: &str) -> Option<(String, String, String)> {
    let c = ns["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)?;
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    Some((s("status"), s("reason"), s("message")))
}

fn configmap(name: &str, finalizers: &[&str]) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "finalizers": finalizers}, "data": {"k": "v"}})
}

fn pod(name: &str, node: Option<&str>) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "nginx"}],
                          "terminationGracePeriodSeconds": 30});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_namespace_is_emptied_then_released() {
    let server = Server::start(&[]);
    let client = server.client();
    server.namespaces(&["doomed", "kept"]).await;
    let cms = "/api/v1/namespaces/doomed/configmaps";
    let pods = "/api/v1/namespaces/doomed/pods";
    create(&client, cms, configmap("plain", &[])).await;
    create(&client, cms, configmap("held", &["example.com/hold"])).await;
    create(&client, pods, pod("loose", None)).await;
    // Bound to a node: deleted gracefully, it stays until its (here: our) kubelet says.
    create(&client, pods, pod("bound", Some("n1"))).await;
    create(
        &client,
        "/api/v1/namespaces/kept/configmaps",
        configmap("stays", &[]),
    )
    .await;

    let factory = SharedInformerFactory::new(client.clone());
    let config = NamespaceConfig {
        deletion_delay: Duration::ZERO,
        ..NamespaceConfig::default()
    };
    let controller = Arc::new(NamespaceController::new(&factory, client.clone(), config).unwrap());
    let running = {
        let c = controller.clone();
        tokio::spawn(async move { c.run().await })
    };

    let marked = call(&client, Method::DELETE, "/api/v1/namespaces/doomed", None)
        .await
        .unwrap();
    assert_eq!(marked["status"]["phase"], "Terminating");

    // One pass: what could go is gone, what cannot is reported.
    eventually("the remaining content reported", LIMIT, || async {
        let ns = get(&client, "/api/v1/namespaces/doomed").await.unwrap();
        condition(&ns, "NamespaceContentRemaining").is_some()
    })
    .await;
    let ns = get(&client, "/api/v1/namespaces/doomed").await.unwrap();
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(
        condition(&ns, "NamespaceContentRemaining").unwrap(),
        (
            "True".into(),
            "SomeResourcesRemain".into(),
            "Some resources are remaining: configmaps. has 1 resource instances, pods. has 1 resource instances".into()
        )
    );
    assert_eq!(
        condition(&ns, "NamespaceFinalizersRemaining").unwrap(),
        (
            "True".into(),
            "SomeFinalizersRemain".into(),
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances".into()
        )
    );
    assert_eq!(
        condition(&ns, "NamespaceDeletionDiscoveryFailure").unwrap(),
        (
            "False".into(),
            "ResourcesDiscovered".into(),
            "All resources successfully discovered".into()
        )
    );
    assert_eq!(
        condition(&ns, "NamespaceDeletionContentFailure").unwrap().0,
        "False"
    );
    assert_eq!(
        condition(&ns, "NamespaceDeletionGroupVersionParsingFailure")
            .unwrap()
            .0,
        "False"
    );
    assert!(get(&client, &format!("{cms}/plain")).await.is_none());
    assert!(get(&client, &format!("{pods}/loose")).await.is_none());
    let held = get(&client, &format!("{cms}/held")).await.unwrap();
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    let bound = get(&client, &format!("{pods}/bound")).await.unwrap();
    assert!(
        bound["metadata"]["deletionTimestamp"].is_string(),
        "{bound}"
    );

    // Nothing new goes in.
    let refused = call(&client, Method::POST, cms, Some(configmap("late", &[])))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(403));
    assert!(is_namespace_terminating(&refused), "{refused}");

    // The kubelet finishes the pod, the finalizer's owner lets the ConfigMap go.
    call(
        &client,
        Method::DELETE,
        &format!("{pods}/bound"),
        Some(json!({"gracePeriodSeconds": 0})),
    )
    .await
    .unwrap();
    let mut released = held.clone();
    released["metadata"]["finalizers"] = json!([]);
    call(&client, Method::PUT, &format!("{cms}/held"), Some(released))
        .await
        .unwrap();

    eventually("the namespace removed", LIMIT, || async {
        get(&client, "/api/v1/namespaces/doomed").await.is_none()
    })
    .await;
    // The namespace that was not deleted kept its content.
    assert!(get(&client, "/api/v1/namespaces/kept/configmaps/stays")
        .await
        .is_some());
    let kept = get(&client, "/api/v1/namespaces/kept").await.unwrap();
    assert_eq!(kept["status"]["phase"], "Active");
    running.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_controller_a_deleted_namespace_stays_terminating() {
    let server = Server::start(&[]);
    let client = server.client();
    server.namespaces(&["left"]).await;
    create(
        &client,
        "/api/v1/namespaces/left/configmaps",
        configmap("c", &[]),
    )
    .await;
    call(&client, Method::DELETE, "/api/v1/namespaces/left", None)
        .await
        .unwrap();
    let ns = get(&client, "/api/v1/namespaces/left").await.unwrap();
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    assert!(ns["status"]["conditions"].is_null(), "{ns}");
    assert!(get(&client, "/api/v1/namespaces/left/configmaps/c")
        .await
        .is_some());
}
