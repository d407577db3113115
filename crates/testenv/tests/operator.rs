//! The test environment as an operator author uses it: CRDs installed from a directory,
//! a kube-rs controller (kube-runtime's `Controller` over a `#[derive(CustomResource)]`
//! kind) reconciling a custom object's status, our own client alongside, and the time and
//! memory a start with ten CRDs takes reported (not asserted: figures go to BENCHMARKS.md).

use futures::StreamExt as _;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{CustomResource, CustomResourceExt as _, ResourceExt as _};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testenv::TestEnv;

/// A kind an operator would define: the desired greeting, and the status it reports.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "demo.listwatch.dev",
    version = "v1",
    kind = "Greeting",
    namespaced,
    status = "GreetingStatus",
    shortname = "gr"
)]
pub struct GreetingSpec {
    /// Whom to greet.
    pub name: String,
}

/// What the controller reports.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct GreetingStatus {
    /// The greeting made.
    pub message: String,
}

async fn kube_client(env: &TestEnv) -> kube::Client {
    let kubeconfig = Kubeconfig::from_yaml(&env.kubeconfig_yaml()).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a kube-rs config");
    kube::Client::try_from(config).expect("a kube-rs client")
}

async fn reconcile(g: Arc<Greeting>, api: Arc<Api<Greeting>>) -> Result<Action, kube::Error> {
    let message = format!("hello, {}", g.spec.name);
    if g.status.as_ref().map(|s| s.message.as_str()) != Some(message.as_str()) {
        let patch = json!({"status": {"message": message}});
        api.patch_status(
            &g.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Greeting>, _: &kube::Error, _: Arc<Api<Greeting>>) -> Action {
    Action::requeue(Duration::from_millis(100))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_rs_controller_reconciles_a_custom_resource() {
    let dir = tempfile::tempdir().expect("temp dir");
    let crd = serde_json::to_string(&Greeting::crd()).expect("the CRD serializes");
    std::fs::write(dir.path().join("greeting.json"), crd).expect("writing the CRD");
    std::fs::write(dir.path().join("README.md"), "not a manifest").expect("writing a README");
    let env = TestEnv::builder()
        .crd_path(dir.path())
        .start()
        .await
        .expect("the test environment starts");
    let client = kube_client(&env).await;
    let api: Api<Greeting> = Api::namespaced(client.clone(), "default");
    let controller_api = Arc::new(api.clone());
    let controller = tokio::spawn(
        Controller::new(api.clone(), watcher::Config::default())
            .run(reconcile, error_policy, controller_api)
            .for_each(|_| async {}),
    );
    let g = Greeting::new(
        "world",
        GreetingSpec {
            name: "world".into(),
        },
    );
    api.create(&PostParams::default(), &g)
        .await
        .expect("create");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = api.get("world").await.expect("get");
        if got.status.map(|s| s.message) == Some("hello, world".into()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the controller did not reconcile"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A change of the spec is reconciled again.
    api.patch(
        "world",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"name": "there"}})),
    )
    .await
    .expect("patch");
    loop {
        let got = api.get("world").await.expect("get");
        if got.status.map(|s| s.message) == Some("hello, there".into()) {
            break;
        }
        assert!(Instant::now() < deadline, "the change was not reconciled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    controller.abort();

    // Our own client sees the same object, with the generation the spec change bumped.
    let ours: Value = env
        .client()
        .get(
            &client::rest::ApiResource::new(
                "demo.listwatch.dev",
                "v1",
                "greetings",
                "Greeting",
                true,
            ),
            Some("default"),
            "world",
        )
        .await
        .expect("our client reads it");
    assert_eq!(ours["metadata"]["generation"], 2);
    assert_eq!(ours["status"]["message"], "hello, there");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_merges_a_custom_list_by_its_map_key() {
    let crd = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: routers.demo.listwatch.dev}
spec:
  group: demo.listwatch.dev
  scope: Namespaced
  names: {plural: routers, kind: Router}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              routes:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    target: {type: string}
"#;
    let env = TestEnv::builder()
        .crd_yaml(crd)
        .start()
        .await
        .expect("starts");
    let client = kube_client(&env).await;
    let ar = kube::api::ApiResource {
        group: "demo.listwatch.dev".into(),
        version: "v1".into(),
        api_version: "demo.listwatch.dev/v1".into(),
        kind: "Router".into(),
        plural: "routers".into(),
    };
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client, "default", &ar);
    let apply = |manager: &'static str, route: &'static str| {
        let api = api.clone();
        async move {
            let body = json!({"apiVersion": "demo.listwatch.dev/v1", "kind": "Router",
                              "metadata": {"name": "r"},
                              "spec": {"routes": [{"name": route, "target": manager}]}});
            api.patch("r", &PatchParams::apply(manager), &Patch::Apply(&body))
                .await
                .expect("apply")
        }
    };
    apply("team-a", "a").await;
    let merged = apply("team-b", "b").await;
    let routes: Vec<Value> = merged.data["spec"]["routes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = routes.iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(
        names,
        ["a", "b"],
        "each manager's element is kept: {routes:?}"
    );
    // team-a stops applying its element: only its own goes.
    let body = json!({"apiVersion": "demo.listwatch.dev/v1", "kind": "Router",
                      "metadata": {"name": "r"}, "spec": {"routes": []}});
    let after = api
        .patch("r", &PatchParams::apply("team-a"), &Patch::Apply(&body))
        .await
        .expect("apply");
    let names: Vec<String> = after.data["spec"]["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(names, ["b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_merges_a_list_keyed_by_several_fields() {
    let crd = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gateways.demo.listwatch.dev}
spec:
  group: demo.listwatch.dev
  scope: Namespaced
  names: {plural: gateways, kind: Gateway}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              listeners:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [port, protocol]
                items:
                  type: object
                  required: [port]
                  properties:
                    port: {type: integer}
                    protocol: {type: string, default: TCP}
                    owner: {type: string}
"#;
    let env = TestEnv::builder()
        .crd_yaml(crd)
        .start()
        .await
        .expect("starts");
    let client = kube_client(&env).await;
    let ar = kube::api::ApiResource {
        group: "demo.listwatch.dev".into(),
        version: "v1".into(),
        api_version: "demo.listwatch.dev/v1".into(),
        kind: "Gateway".into(),
        plural: "gateways".into(),
    };
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client, "default", &ar);
    let apply = |manager: &'static str, protocol: &'static str| {
        let api = api.clone();
        async move {
            let body = json!({"apiVersion": "demo.listwatch.dev/v1", "kind": "Gateway",
                              "metadata": {"name": "g"},
                              "spec": {"listeners": [{"port": 80, "protocol": protocol, "owner": manager}]}});
            api.patch("g", &PatchParams::apply(manager), &Patch::Apply(&body))
                .await
                .expect("apply")
        }
    };
    // team-a leaves out the protocol: its default (TCP) identifies the element.
    let api_a = api.clone();
    let body = json!({"apiVersion": "demo.listwatch.dev/v1", "kind": "Gateway",
                      "metadata": {"name": "g"},
                      "spec": {"listeners": [{"port": 80, "owner": "team-a"}]}});
    api_a
        .patch("g", &PatchParams::apply("team-a"), &Patch::Apply(&body))
        .await
        .expect("apply");
    // The same port with another protocol is another element: both are kept.
    let merged = apply("team-b", "UDP").await;
    let listeners = merged.data["spec"]["listeners"].clone();
    assert_eq!(
        listeners,
        json!([{"port": 80, "protocol": "TCP", "owner": "team-a"},
               {"port": 80, "protocol": "UDP", "owner": "team-b"}]),
    );
    let fields = serde_json::to_string(&merged.metadata.managed_fields).unwrap_or_default();
    assert!(
        fields.contains(r#"k:{\"port\":80,\"protocol\":\"UDP\"}"#),
        "elements tracked by both keys: {fields}"
    );
    // team-a applies its configuration again, still without the protocol: team-b's
    // element stays.
    let again = api_a
        .patch("g", &PatchParams::apply("team-a"), &Patch::Apply(&body))
        .await
        .expect("apply");
    assert_eq!(again.data["spec"]["listeners"], listeners);
    // team-a drops its element: only its own goes.
    let body = json!({"apiVersion": "demo.listwatch.dev/v1", "kind": "Gateway",
                      "metadata": {"name": "g"}, "spec": {"listeners": []}});
    let after = api
        .patch("g", &PatchParams::apply("team-a"), &Patch::Apply(&body))
        .await
        .expect("apply");
    assert_eq!(
        after.data["spec"]["listeners"],
        json!([{"port": 80, "protocol": "UDP", "owner": "team-b"}])
    );
}

fn widget_crd(i: usize) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets{i}.demo.listwatch.dev
spec:
  group: demo.listwatch.dev
  scope: Namespaced
  names: {{plural: widgets{i}, kind: Widget{i}}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer, minimum: 0, default: 3}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_crds_are_established_when_start_returns() {
    let manifest: Vec<String> = (0..10).map(widget_crd).collect();
    let started = Instant::now();
    let env = TestEnv::builder()
        .crd_yaml(manifest.join("---\n"))
        .start()
        .await
        .expect("the test environment starts");
    let took = started.elapsed();
    // A figure, not an assertion (timing varies with the machine): see BENCHMARKS.md.
    println!("testenv: ready with 10 CRDs in {took:?}");
    for i in 0..10 {
        let r = client::rest::ApiResource::new(
            "demo.listwatch.dev",
            "v1",
            format!("widgets{i}"),
            format!("Widget{i}"),
            true,
        );
        let created: Value = env
            .client()
            .create(
                &r,
                Some("default"),
                &client::rest::PostParams::default(),
                &json!({"apiVersion": "demo.listwatch.dev/v1", "kind": format!("Widget{i}"),
                        "metadata": {"name": "w"}, "spec": {}}),
            )
            .await
            .unwrap_or_else(|e| panic!("widgets{i} is served at once: {e}"));
        assert_eq!(created["spec"]["size"], 3, "the default is applied");
    }
    // A CRD the server refuses is an error naming it, with the server's reasons.
    let err = env
        .install_crds(
            &widget_crd(99).replace("type: object\n        properties", "properties"),
            Duration::from_secs(5),
        )
        .await
        .expect_err("a non-structural CRD is refused");
    let text = err.to_string();
    assert!(text.contains("widgets99.demo.listwatch.dev"), "{text}");
    assert!(text.contains("openAPIV3Schema.type"), "{text}");
}
