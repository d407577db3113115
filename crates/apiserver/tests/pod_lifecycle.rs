//! The server semantics a scheduler and node agents rely on, over the HTTP handler, as
//! kube-apiserver 1.32 has them: binding pods to nodes (`pods/binding`, also as protobuf),
//! what a pod update may change, graceful deletion (watchers see the pod marked before it
//! goes), evictions under PodDisruptionBudgets, and the default tolerations every pod gets.

mod common;

use apiserver::ApiServer;
use common::*;
use http::Method;
use prost::Message as _;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const PODS: &str = "/api/v1/namespaces/default/pods";
const PDBS: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
const WAIT: Duration = Duration::from_secs(10);

fn binding(name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
           "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
}

fn eviction(name: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}})
}

fn condition<'a>(pod: &'a Value, ty: &str) -> Option<&'a Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
}

/// The 201 `Success` Status a binding or eviction answers with.
fn assert_created(what: &str, (code, v): (http::StatusCode, Value)) {
    assert_eq!(code, 201, "{what}: {v}");
    assert_eq!(
        v,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        "{what}"
    );
}

/// A pod bound to `node` whose status says Running (and Ready when `ready`).
async fn running_pod(srv: &Arc<ApiServer>, name: &str, labels: Value, ready: bool) -> Value {
    let mut p = pod(name, "n1");
    p["metadata"]["labels"] = labels;
    ok("create pod", post(srv, PODS, &p).await);
    let ready = if ready { "True" } else { "False" };
    ok(
        "pod status",
        merge_patch(
            srv,
            &format!("{PODS}/{name}/status"),
            &json!({"status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": ready}]}}),
        )
        .await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_assigns_the_node_once() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    ok("create", post(srv, PODS, &pod("p", "")).await);
    let mut w = watch(
        srv,
        &format!("{PODS}?watch=1&fieldSelector={}", enc("spec.nodeName=n1")),
    )
    .await;
    let mut b = binding("p", "n1");
    b["metadata"]["annotations"] = json!({"scheduler.example.com/score": "7"});
    assert_created("bind", post(srv, &format!("{PODS}/p/binding"), &b).await);
    let p = ok("get", get(srv, &format!("{PODS}/p")).await);
    assert_eq!(p["spec"]["nodeName"], "n1");
    assert_eq!(
        p["metadata"]["annotations"]["scheduler.example.com/score"],
        "7"
    );
    let scheduled = condition(&p, "PodScheduled").expect("PodScheduled condition");
    assert_eq!(scheduled["status"], "True");
    assert!(scheduled["lastTransitionTime"].is_string(), "{scheduled}");
    // The node agent's watch of its node sees the pod arrive.
    let ev = w.expect(WAIT).await;
    assert_eq!((ev_type(&ev), name_of(&ev["object"])), ("ADDED", "p"));
    assert_eq!(rv_of(&ev["object"]), rv_of(&p));

    // Once bound, a pod stays on its node: a second binding is a conflict, nothing changes.
    let rev = storage_rev(srv).await;
    let (code, v) = post(srv, &format!("{PODS}/p/binding"), &binding("p", "n2")).await;
    assert_status("rebind", code, &v, 409, "Conflict");
    assert_eq!(v["details"]["kind"], "pods/binding", "{v}");
    assert_eq!(storage_rev(srv).await, rev);

    // The legacy collection names the pod in the body; the binding's uid is a precondition.
    let q = ok("create q", post(srv, PODS, &pod("q", "")).await);
    let mut stale = binding("q", "n2");
    stale["metadata"]["uid"] = json!("someone-else");
    let (code, v) = post(srv, "/api/v1/namespaces/default/bindings", &stale).await;
    assert_status("stale uid", code, &v, 409, "Conflict");
    let mut fresh = binding("q", "n2");
    fresh["metadata"]["uid"] = q["metadata"]["uid"].clone();
    fresh["metadata"]["resourceVersion"] = q["metadata"]["resourceVersion"].clone();
    assert_created(
        "legacy bind",
        post(srv, "/api/v1/namespaces/default/bindings", &fresh).await,
    );
    assert_eq!(
        ok("get q", get(srv, &format!("{PODS}/q")).await)["spec"]["nodeName"],
        "n2"
    );

    // A dry run answers as the binding would, and binds nothing.
    ok("create r", post(srv, PODS, &pod("r", "")).await);
    assert_created(
        "dry-run bind",
        post(
            srv,
            &format!("{PODS}/r/binding?dryRun=All"),
            &binding("r", "n1"),
        )
        .await,
    );
    let r = ok("get r", get(srv, &format!("{PODS}/r")).await);
    assert!(r["spec"].get("nodeName").is_none(), "{r}");
}

/// client-go's scheduler sends its bindings (and `kubectl drain` its evictions) as protobuf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_and_evictions_in_protobuf() {
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    ok("create", post(srv, PODS, &pod("p", "")).await);
    let raw = core::Binding {
        metadata: Some(meta::ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            ..Default::default()
        }),
        target: Some(core::ObjectReference {
            kind: Some("Node".into()),
            name: Some("n7".into()),
            ..Default::default()
        }),
    }
    .encode_to_vec();
    let body = apiserver::encoding::protobuf_encode::envelope("v1", "Binding", raw);
    let pb = "application/vnd.kubernetes.protobuf";
    let (code, v) = call(
        srv,
        Method::POST,
        &format!("{PODS}/p/binding"),
        Some(pb),
        body,
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        ok("get", get(srv, &format!("{PODS}/p")).await)["spec"]["nodeName"],
        "n7"
    );
    // A body of another kind is refused.
    let wrong = apiserver::encoding::protobuf_encode::envelope("v1", "Pod", Vec::new());
    let (code, v) = call(
        srv,
        Method::POST,
        &format!("{PODS}/p/binding"),
        Some(pb),
        wrong,
    )
    .await;
    assert_status("pod as binding", code, &v, 400, "BadRequest");

    let raw = k8s_pb::api::policy::v1::Eviction {
        metadata: Some(meta::ObjectMeta {
            name: Some("p".into()),
            ..Default::default()
        }),
        delete_options: Some(meta::DeleteOptions {
            grace_period_seconds: Some(0),
            ..Default::default()
        }),
    }
    .encode_to_vec();
    let body = apiserver::encoding::protobuf_encode::envelope("policy/v1", "Eviction", raw);
    let (code, v) = call(
        srv,
        Method::POST,
        &format!("{PODS}/p/eviction"),
        Some(pb),
        body,
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, _) = get(srv, &format!("{PODS}/p")).await;
    assert_eq!(code, 404, "evicted at grace 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_update_may_change_images_deadline_and_tolerations_only() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let created = ok("create", post(srv, PODS, &pod("p", "n1")).await);
    let item = format!("{PODS}/p");
    let p = ok(
        "new image",
        call(
            srv,
            Method::PATCH,
            &item,
            Some("application/strategic-merge-patch+json"),
            serde_json::to_vec(
                &json!({"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}),
            )
            .unwrap(),
        )
        .await,
    );
    assert_eq!(p["spec"]["containers"][0]["image"], "nginx:2");
    let p = ok(
        "deadline and a toleration",
        call(
            srv,
            Method::PATCH,
            &item,
            Some("application/json-patch+json"),
            serde_json::to_vec(&json!([
                {"op": "add", "path": "/spec/activeDeadlineSeconds", "value": 600},
                {"op": "add", "path": "/spec/tolerations/-",
                 "value": {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}},
            ]))
            .unwrap(),
        )
        .await,
    );
    assert_eq!(p["spec"]["activeDeadlineSeconds"], 600);
    assert_eq!(p["spec"]["tolerations"].as_array().unwrap().len(), 3);
    // A full replace that changes nothing else passes (defaults and admission included).
    let mut same = p.clone();
    same["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    ok("replace unchanged", put(srv, &item, &same).await);

    let rev = storage_rev(srv).await;
    let mut moved = p.clone();
    moved["spec"]["nodeName"] = json!("n2");
    let (code, v) = put(srv, &item, &moved).await;
    assert_status("move", code, &v, 422, "Invalid");
    let message = v["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than"
        ),
        "{message}"
    );
    assert!(
        message.contains("spec.nodeName: \"n1\" -> \"n2\""),
        "{message}"
    );
    let (code, v) = merge_patch(srv, &item, &json!({"spec": {"activeDeadlineSeconds": 900}})).await;
    assert_status("raise deadline", code, &v, 422, "Invalid");
    assert_eq!(
        v["details"]["causes"][0]["field"],
        "spec.activeDeadlineSeconds"
    );
    assert_eq!(storage_rev(srv).await, rev, "nothing stored");
    assert_eq!(created["spec"]["nodeName"], "n1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_get_the_default_tolerations_unless_they_have_their_own() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let p = ok("create", post(srv, PODS, &pod("p", "")).await);
    assert_eq!(
        p["spec"]["tolerations"],
        json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ])
    );
    let mut own = pod("q", "");
    own["spec"]["tolerations"] = json!([
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
    ]);
    let q = ok("create own", post(srv, PODS, &own).await);
    let keys: Vec<(String, i64)> = q["spec"]["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["key"].as_str().unwrap().to_string(),
                t["tolerationSeconds"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            ("node.kubernetes.io/unreachable".to_string(), 5),
            ("node.kubernetes.io/not-ready".to_string(), 300)
        ]
    );
    // Templates are not pods: a deployment's stays as written.
    let d = ok(
        "deployment",
        post(
            srv,
            "/apis/apps/v1/namespaces/default/deployments",
            &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
        )
        .await,
    );
    assert!(
        d["spec"]["template"]["spec"].get("tolerations").is_none(),
        "{d}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_nodes_get_the_not_ready_taint_and_updates_may_lift_it() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let not_ready = json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"});
    let n = ok(
        "create",
        post(
            srv,
            "/api/v1/nodes",
            &json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1"},
            "spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}}),
        )
        .await,
    );
    assert_eq!(
        n["spec"]["taints"],
        json!([{"key": "gpu", "value": "yes", "effect": "NoSchedule"}, not_ready])
    );
    // The node lifecycle controller's update takes it away, and no later write adds it back.
    let mut lifted = n.clone();
    lifted["spec"]["taints"] = json!([{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]);
    let u = ok("update", put(srv, "/api/v1/nodes/n1", &lifted).await);
    assert_eq!(u["spec"]["taints"].as_array().map(Vec::len), Some(1), "{u}");
    let mut labelled = u.clone();
    labelled["metadata"]["labels"] = json!({"disk": "ssd"});
    let l = ok("relabel", put(srv, "/api/v1/nodes/n1", &labelled).await);
    assert_eq!(l["spec"]["taints"].as_array().map(Vec::len), Some(1), "{l}");
    // A node created with the taint already (any value) keeps just that one.
    let m = ok(
        "create tainted",
        post(srv, "/api/v1/nodes", &json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n2"},
            "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "value": "v", "effect": "NoSchedule"}]}}))
        .await,
    );
    assert_eq!(
        m["spec"]["taints"],
        json!([{"key": "node.kubernetes.io/not-ready", "value": "v", "effect": "NoSchedule"}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagation_policies_leave_the_garbage_collector_its_finalizers() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let cm =
        |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    let base = "/api/v1/namespaces/default/configmaps";
    for name in ["o", "f", "b"] {
        ok("create", post(srv, base, &cm(name)).await);
    }
    // Orphan and Foreground hold the object, marked, with the collector's finalizer.
    let o = ok(
        "orphan",
        delete(srv, &format!("{base}/o?propagationPolicy=Orphan")).await,
    );
    assert_eq!(o["metadata"]["finalizers"], json!(["orphan"]));
    assert!(o["metadata"]["deletionTimestamp"].is_string(), "{o}");
    let f = ok(
        "foreground",
        delete(srv, &format!("{base}/f?propagationPolicy=Foreground")).await,
    );
    assert_eq!(f["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    // Asked again in the background, the finalizer goes and so does the object.
    ok(
        "background again",
        delete(srv, &format!("{base}/f?propagationPolicy=Background")).await,
    );
    assert_eq!(get(srv, &format!("{base}/f")).await.0, 404);
    // Background (and orphanDependents=false) delete at once.
    ok(
        "background",
        delete(srv, &format!("{base}/b?orphanDependents=false")).await,
    );
    assert_eq!(get(srv, &format!("{base}/b")).await.0, 404);
    // The collector's update removing the finalizer finishes the deletion.
    let (code, held) = get(srv, &format!("{base}/o")).await;
    assert_eq!(code, 200);
    let mut done = held.clone();
    done["metadata"]["finalizers"] = json!([]);
    ok(
        "finalizer removed",
        put(srv, &format!("{base}/o"), &done).await,
    );
    assert_eq!(get(srv, &format!("{base}/o")).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_is_deleted_gracefully() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let created = ok("create", post(srv, PODS, &pod("p", "n1")).await);
    let mut w = watch(
        srv,
        &format!(
            "{PODS}?watch=1&resourceVersion={}",
            created["metadata"]["resourceVersion"].as_str().unwrap()
        ),
    )
    .await;
    let item = format!("{PODS}/p");
    let before = api::time::unix_now();
    let marked = ok("delete", delete(srv, &item).await);
    let meta = &marked["metadata"];
    assert_eq!(meta["deletionGracePeriodSeconds"], 30, "{marked}");
    let at = api::time::parse_rfc3339(meta["deletionTimestamp"].as_str().unwrap()).unwrap();
    assert!(
        (before + 30..=api::time::unix_now() + 30).contains(&at),
        "{marked}"
    );
    // Watchers see it marked, and it is still there (Terminating).
    let ev = w.expect(WAIT).await;
    assert_eq!(ev_type(&ev), "MODIFIED", "{ev}");
    assert_eq!(ev["object"]["metadata"]["deletionGracePeriodSeconds"], 30);
    let still = ok("get", get(srv, &item).await);
    assert_eq!(rv_of(&still), rv_of(&marked));

    // Deleting again with the same or a longer grace period changes nothing; a shorter one
    // moves the deadline earlier.
    let again = ok(
        "delete again",
        delete(srv, &format!("{item}?gracePeriodSeconds=60")).await,
    );
    assert_eq!(rv_of(&again), rv_of(&marked));
    let shorter = ok(
        "shorten",
        delete(srv, &format!("{item}?gracePeriodSeconds=10")).await,
    );
    assert_eq!(shorter["metadata"]["deletionGracePeriodSeconds"], 10);
    let ev = w.expect(WAIT).await;
    assert_eq!(ev_type(&ev), "MODIFIED", "{ev}");
    // Its node agent may still report on it; that does not delete it.
    ok(
        "status while terminating",
        merge_patch(
            srv,
            &format!("{item}/status"),
            &json!({"status": {"phase": "Succeeded"}}),
        )
        .await,
    );
    let ev = w.expect(WAIT).await;
    assert_eq!(ev_type(&ev), "MODIFIED", "{ev}");
    // A pod being deleted cannot be bound.
    let (code, v) = post(srv, &format!("{item}/binding"), &binding("p", "n2")).await;
    assert_status("bind terminating", code, &v, 409, "Conflict");
    // The node agent finishes it with grace 0.
    let gone = ok(
        "final delete",
        call(
            srv,
            Method::DELETE,
            &item,
            Some("application/json"),
            serde_json::to_vec(
                &json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}),
            )
            .unwrap(),
        )
        .await,
    );
    let ev = w.expect(WAIT).await;
    assert_eq!(ev_type(&ev), "DELETED", "{ev}");
    // The answer is the last state; the event carries the deletion's version.
    assert!(rv_of(&ev["object"]) > rv_of(&gone), "{ev} {gone}");
    assert_eq!(get(srv, &item).await.0, 404);

    // Unbound pods go at once: ADDED then DELETED, nothing in between.
    ok("create unbound", post(srv, PODS, &pod("u", "")).await);
    assert_eq!(ev_type(&w.expect(WAIT).await), "ADDED");
    ok("delete unbound", delete(srv, &format!("{PODS}/u")).await);
    let ev = w.expect(WAIT).await;
    assert_eq!((ev_type(&ev), name_of(&ev["object"])), ("DELETED", "u"));
    // So do pods asked to with --grace-period=0 --force (kubectl sends gracePeriodSeconds 0).
    ok("create forced", post(srv, PODS, &pod("f", "n1")).await);
    assert_eq!(ev_type(&w.expect(WAIT).await), "ADDED");
    ok(
        "force delete",
        delete(srv, &format!("{PODS}/f?gracePeriodSeconds=0")).await,
    );
    let ev = w.expect(WAIT).await;
    assert_eq!((ev_type(&ev), name_of(&ev["object"])), ("DELETED", "f"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_honour_pod_disruption_budgets() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    // No budget: the pod gets its DisruptionTarget condition and is deleted gracefully.
    running_pod(srv, "free", json!({"app": "free"}), true).await;
    assert_created(
        "evict free",
        post(srv, &format!("{PODS}/free/eviction"), &eviction("free")).await,
    );
    let p = ok("get free", get(srv, &format!("{PODS}/free")).await);
    assert!(p["metadata"]["deletionTimestamp"].is_string(), "{p}");
    let target = condition(&p, "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!(target["reason"], "EvictionByEvictionAPI");

    // A budget its controller has not looked at yet: 429, come back in 10 s.
    for name in ["web-1", "web-2"] {
        running_pod(srv, name, json!({"app": "web"}), true).await;
    }
    ok(
        "pdb",
        post(
            srv,
            PDBS,
            &json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "web"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .await,
    );
    let rev = storage_rev(srv).await;
    let resp = send(
        srv,
        Method::POST,
        &format!("{PODS}/web-1/eviction"),
        Some("application/json"),
        serde_json::to_vec(&eviction("web-1")).unwrap(),
    )
    .await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "10");
    let budget_status = |allowed: i64| {
        json!({"status": {"observedGeneration": 1, "disruptionsAllowed": allowed,
                          "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2}})
    };
    // The controller's view: one disruption allowed.
    ok(
        "pdb status",
        merge_patch(srv, &format!("{PDBS}/web/status"), &budget_status(1)).await,
    );
    let rev_after_status = storage_rev(srv).await;
    assert!(rev_after_status > rev);
    assert_created(
        "evict web-1",
        post(srv, &format!("{PODS}/web-1/eviction"), &eviction("web-1")).await,
    );
    let pdb = ok("get pdb", get(srv, &format!("{PDBS}/web")).await);
    assert_eq!(pdb["status"]["disruptionsAllowed"], 0, "{pdb}");
    assert!(pdb["status"]["disruptedPods"]["web-1"].is_string(), "{pdb}");
    assert!(
        ok("web-1", get(srv, &format!("{PODS}/web-1")).await)["metadata"]["deletionTimestamp"]
            .is_string()
    );
    // The budget is spent: 429 with a DisruptionBudget cause, and nothing is written.
    let rev = storage_rev(srv).await;
    let (code, v) = post(srv, &format!("{PODS}/web-2/eviction"), &eviction("web-2")).await;
    assert_status("budget spent", code, &v, 429, "TooManyRequests");
    assert_eq!(
        v["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(v["details"]["causes"][0]["reason"], "DisruptionBudget");
    assert_eq!(
        v["details"]["causes"][0]["message"],
        "The disruption budget web needs 1 healthy pods and has 2 currently"
    );
    assert_eq!(storage_rev(srv).await, rev, "nothing stored");
    // A dry run checks the same and writes nothing either way.
    ok(
        "pdb status",
        merge_patch(srv, &format!("{PDBS}/web/status"), &budget_status(1)).await,
    );
    let rev = storage_rev(srv).await;
    assert_created(
        "dry-run evict",
        post(
            srv,
            &format!("{PODS}/web-2/eviction?dryRun=All"),
            &eviction("web-2"),
        )
        .await,
    );
    assert_eq!(storage_rev(srv).await, rev);

    // Pending pods disrupt nothing: they go whatever the budget says.
    let mut pending = pod("web-3", "");
    pending["metadata"]["labels"] = json!({"app": "web"});
    ok("pending pod", post(srv, PODS, &pending).await);
    ok(
        "spend the budget",
        merge_patch(srv, &format!("{PDBS}/web/status"), &budget_status(0)).await,
    );
    assert_created(
        "evict pending",
        post(srv, &format!("{PODS}/web-3/eviction"), &eviction("web-3")).await,
    );
    assert_eq!(get(srv, &format!("{PODS}/web-3")).await.0, 404);

    // An unready pod may go when the budget has its healthy pods (IfHealthyBudget). The
    // older policy/v1beta1 Eviction is still accepted.
    running_pod(srv, "web-4", json!({"app": "web"}), false).await;
    ok(
        "one disruption allowed",
        merge_patch(srv, &format!("{PDBS}/web/status"), &budget_status(1)).await,
    );
    let mut beta = eviction("web-4");
    beta["apiVersion"] = json!("policy/v1beta1");
    assert_created(
        "evict unready",
        post(srv, &format!("{PODS}/web-4/eviction"), &beta).await,
    );
    let pdb = ok("get pdb", get(srv, &format!("{PDBS}/web")).await);
    assert_eq!(pdb["status"]["disruptionsAllowed"], 1, "not spent: {pdb}");

    // Two budgets for one pod: the eviction API does not know which to use.
    ok(
        "second pdb",
        post(
            srv,
            PDBS,
            &json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "all"}, "spec": {"maxUnavailable": 1, "selector": {}}}),
        )
        .await,
    );
    let (code, v) = post(srv, &format!("{PODS}/web-2/eviction"), &eviction("web-2")).await;
    assert_status("two budgets", code, &v, 500, "InternalError");
    assert!(v["message"]
        .as_str()
        .unwrap()
        .contains("more than one PodDisruptionBudget"));
}
