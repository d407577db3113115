//! Server-side apply, field ownership and the scale subresource over the HTTP handler:
//! what is stored, who owns what, and the Status of every refusal (with nothing stored).

mod common;

use common::*;
use http::Method;
use serde_json::{json, Value};

const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const APPLY: &str = "application/apply-patch+yaml";

fn deployment(replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "web", "image": image}]}}
        }
    })
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or("").to_string(),
                e["operation"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

async fn apply(
    srv: &std::sync::Arc<apiserver::ApiServer>,
    query: &str,
    body: impl Into<bytes::Bytes>,
) -> (http::StatusCode, Value) {
    call(
        srv,
        Method::PATCH,
        &format!("{DEPLOYS}/web?{query}"),
        Some(APPLY),
        body,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_updates_and_reports_conflicts() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;

    // YAML body, object absent: created (201), owned by the applier.
    let yaml = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1\n";
    let (code, created) = apply(srv, "fieldManager=ci", yaml).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(managers(&created), vec![("ci".into(), "Apply".into())]);
    assert_eq!(created["metadata"]["generation"], 1);

    // An ordinary merge patch by another manager takes spec.replicas.
    let (code, patched) = call(
        srv,
        Method::PATCH,
        &format!("{DEPLOYS}/web?fieldManager=scaler"),
        Some("application/merge-patch+json"),
        r#"{"spec":{"replicas":7}}"#,
    )
    .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(
        managers(&patched),
        vec![
            ("ci".into(), "Apply".into()),
            ("scaler".into(), "Update".into())
        ]
    );

    // Re-applying replicas: 2 conflicts; nothing is written.
    let before = storage_rev(srv).await;
    let (code, err) = apply(srv, "fieldManager=ci", deployment(2, "nginx:1").to_string()).await;
    assert_status("conflict", code, &err, 409, "Conflict");
    assert_eq!(
        err["message"],
        "Apply failed with 1 conflict: conflict with \"scaler\" using apps/v1: .spec.replicas"
    );
    assert_eq!(
        err["details"]["causes"][0]["reason"],
        "FieldManagerConflict"
    );
    assert_eq!(err["details"]["causes"][0]["field"], ".spec.replicas");
    assert_eq!(storage_rev(srv).await, before);

    // Agreeing with the live value shares the field; forcing takes it.
    let (code, shared) = apply(srv, "fieldManager=ci", deployment(7, "nginx:2").to_string()).await;
    assert_eq!(code, 200, "{shared}");
    assert_eq!(
        shared["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
    let (code, forced) = apply(
        srv,
        "fieldManager=ci&force=true",
        deployment(3, "nginx:2").to_string(),
    )
    .await;
    assert_eq!(code, 200, "{forced}");
    assert_eq!(forced["spec"]["replicas"], 3);
    assert_eq!(managers(&forced), vec![("ci".into(), "Apply".into())]);

    // Dropping a field from the configuration removes it; the same config twice is a no-op.
    let mut smaller = deployment(3, "nginx:2");
    smaller["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    let (code, dropped) = apply(srv, "fieldManager=ci", smaller.to_string()).await;
    assert_eq!(code, 200, "{dropped}");
    assert!(dropped["metadata"].get("labels").is_none(), "{dropped}");
    let rev = storage_rev(srv).await;
    let (code, _) = apply(srv, "fieldManager=ci", smaller.to_string()).await;
    assert_eq!(code, 200);
    assert_eq!(
        storage_rev(srv).await,
        rev,
        "an unchanged apply writes nothing"
    );
    // Also when the managedFields time would have moved on: wait into the next second.
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_millis())
        .unwrap_or(0);
    tokio::time::sleep(std::time::Duration::from_millis(1050 - u64::from(millis))).await;
    let (code, again) = apply(srv, "fieldManager=ci", smaller.to_string()).await;
    assert_eq!(code, 200);
    assert_eq!(
        storage_rev(srv).await,
        rev,
        "a re-apply a second later writes nothing either"
    );
    assert_eq!(
        again["metadata"]["managedFields"],
        dropped["metadata"]["managedFields"]
    );

    // A dry-run apply of a new object answers 201 and stores nothing.
    let (code, v) = call(
        srv,
        Method::PATCH,
        &format!("{DEPLOYS}/other?fieldManager=ci&dryRun=All"),
        Some(APPLY),
        deployment(1, "x")
            .to_string()
            .replace("\"web\"}", "\"other\"}"),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, _) = get(srv, &format!("{DEPLOYS}/other")).await;
    assert_eq!(code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_apply_requests_change_nothing() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let (code, _) = apply(srv, "fieldManager=ci", deployment(1, "a").to_string()).await;
    assert_eq!(code, 201);
    let good = deployment(2, "b").to_string();
    let mut wrong_kind = deployment(2, "b");
    wrong_kind["kind"] = json!("ReplicaSet");
    let mut other_name = deployment(2, "b");
    other_name["metadata"]["name"] = json!("nope");
    let mut with_mf = deployment(2, "b");
    with_mf["metadata"]["managedFields"] = json!([]);
    let long = "m".repeat(200);
    let cases: Vec<(&str, String, String, u16, &str)> = vec![
        (
            "no fieldManager",
            String::new(),
            good.clone(),
            422,
            "Invalid",
        ),
        (
            "fieldManager too long",
            format!("fieldManager={long}"),
            good.clone(),
            422,
            "Invalid",
        ),
        (
            "force not a boolean",
            "fieldManager=ci&force=maybe".into(),
            good.clone(),
            400,
            "BadRequest",
        ),
        (
            "neither JSON nor YAML",
            "fieldManager=ci".into(),
            "{: [".into(),
            400,
            "BadRequest",
        ),
        (
            "not an object",
            "fieldManager=ci".into(),
            "[1, 2]".into(),
            400,
            "BadRequest",
        ),
        (
            "wrong kind",
            "fieldManager=ci".into(),
            wrong_kind.to_string(),
            400,
            "BadRequest",
        ),
        (
            "other name",
            "fieldManager=ci".into(),
            other_name.to_string(),
            400,
            "BadRequest",
        ),
        (
            "managedFields set",
            "fieldManager=ci".into(),
            with_mf.to_string(),
            400,
            "BadRequest",
        ),
        (
            "stale resourceVersion",
            "fieldManager=ci".into(),
            good.replace(
                "\"name\":\"web\"",
                "\"name\":\"web\",\"resourceVersion\":\"1\"",
            ),
            409,
            "Conflict",
        ),
    ];
    for (what, query, body, want, reason) in cases {
        let before = storage_rev(srv).await;
        let (code, v) = apply(srv, &query, body).await;
        assert_status(what, code, &v, want, reason);
        assert_eq!(
            storage_rev(srv).await,
            before,
            "{what}: something was stored"
        );
    }
    // `force` belongs to apply only.
    let (code, v) = call(
        srv,
        Method::PATCH,
        &format!("{DEPLOYS}/web?force=true"),
        Some("application/merge-patch+json"),
        "{}",
    )
    .await;
    assert_status("force on a merge patch", code, &v, 422, "Invalid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_record_managers_from_field_manager_or_user_agent() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let (code, created) = post(srv, DEPLOYS, &deployment(1, "a")).await;
    assert_eq!(code, 201, "{created}");
    // No fieldManager and no User-Agent in these test requests.
    assert_eq!(
        managers(&created),
        vec![("unknown".into(), "Update".into())]
    );
    let mut next = created.clone();
    next["spec"]["replicas"] = json!(4);
    let (code, updated) = put(srv, &format!("{DEPLOYS}/web?fieldManager=editor"), &next).await;
    assert_eq!(code, 200, "{updated}");
    let entries = updated["metadata"]["managedFields"].as_array().unwrap();
    let editor = entries.iter().find(|e| e["manager"] == "editor").unwrap();
    assert_eq!(editor["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    let creator = entries.iter().find(|e| e["manager"] == "unknown").unwrap();
    assert!(creator["fieldsV1"]["f:spec"].get("f:replicas").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_subresource() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let (code, _) = post(srv, DEPLOYS, &deployment(2, "a")).await;
    assert_eq!(code, 201);
    let scale_url = format!("{DEPLOYS}/web/scale");
    let scale = ok("get scale", get(srv, &scale_url).await);
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 2);
    assert_eq!(scale["status"]["selector"], "app=web");

    let (code, s) = merge_patch(srv, &scale_url, &json!({"spec": {"replicas": 4}})).await;
    assert_eq!(code, 200, "{s}");
    assert_eq!(s["spec"]["replicas"], 4);
    let d = ok("get", get(srv, &format!("{DEPLOYS}/web")).await);
    assert_eq!(d["spec"]["replicas"], 4);
    assert_eq!(d["metadata"]["generation"], 2);

    let mut put_body = s.clone();
    put_body["spec"]["replicas"] = json!(6);
    let (code, s6) = put(srv, &scale_url, &put_body).await;
    assert_eq!(code, 200, "{s6}");
    assert_eq!(s6["spec"]["replicas"], 6);

    // The old resourceVersion is stale now; negative counts are invalid; nothing is stored.
    let before = storage_rev(srv).await;
    let (code, v) = put(srv, &scale_url, &put_body).await;
    assert_status("stale scale", code, &v, 409, "Conflict");
    let (code, v) = merge_patch(srv, &scale_url, &json!({"spec": {"replicas": -1}})).await;
    assert_status("negative replicas", code, &v, 422, "Invalid");
    let (code, v) = merge_patch(srv, &scale_url, &json!({"spec": {"replicas": "many"}})).await;
    assert_status("replicas not a number", code, &v, 422, "Invalid");
    assert_eq!(storage_rev(srv).await, before);

    // Only deployments and replicasets scale.
    let (code, v) = get(srv, "/api/v1/namespaces/default/configmaps/x/scale").await;
    assert_status("configmap scale", code, &v, 404, "NotFound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_to_the_status_subresource_owns_status_only() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let pods = "/api/v1/namespaces/default/pods";
    let (code, _) = post(srv, pods, &pod("p", "n1")).await;
    assert_eq!(code, 201);
    let cfg = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"nodeName": "elsewhere"},
        "status": {"phase": "Running", "podIP": "10.0.0.7"}
    });
    let (code, v) = call(
        srv,
        Method::PATCH,
        &format!("{pods}/p/status?fieldManager=kubelet"),
        Some(APPLY),
        cfg.to_string(),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["status"]["phase"], "Running");
    assert_eq!(
        v["spec"]["nodeName"], "n1",
        "the status subresource leaves spec alone"
    );
    let kubelet = v["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "kubelet")
        .cloned()
        .unwrap_or_default();
    assert_eq!(kubelet["operation"], "Apply");
    assert_eq!(kubelet["subresource"], "status");
    assert_eq!(
        kubelet["fieldsV1"],
        json!({"f:status": {"f:phase": {}, "f:podIP": {}}})
    );
}

/// A service created by server-side apply gets its cluster IP and node port like one that
/// was POSTed, and a later apply that does not mention them keeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applied_services_get_and_keep_their_allocations() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let uri = "/api/v1/namespaces/default/services/web?fieldManager=ci";
    let svc = |port: i64| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": port}]}})
        .to_string()
    };
    let (code, created) = call(srv, Method::PATCH, uri, Some(APPLY), svc(80)).await;
    assert_eq!(code, 201, "{created}");
    let ip = created["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10."), "{created}");
    let node_port = created["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&node_port));
    let (code, again) = call(srv, Method::PATCH, uri, Some(APPLY), svc(80)).await;
    assert_eq!(code, 200, "{again}");
    assert_eq!(again["spec"]["clusterIP"], ip.as_str());
    assert_eq!(again["spec"]["ports"][0]["nodePort"], node_port);
}
