//! A namespace's deletion as kube-apiserver 1.32 serves it, over the HTTP handler: the
//! server only marks the namespace Terminating, refuses new content in it, and removes it
//! once its `spec.finalizers` (through the `finalize` subresource) and `metadata.finalizers`
//! are empty. Removing the content is the namespace controller's job; nothing here runs one.

mod common;

use common::*;
use http::Method;
use serde_json::{json, Value};

const NS: &str = "/api/v1/namespaces";

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_marks_terminating_and_finalize_removes_it() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let created = ok("create", post(srv, NS, &namespace("a")).await);
    assert_eq!(created["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(created["status"]["phase"], "Active");
    let cms = "/api/v1/namespaces/a/configmaps";
    ok(
        "a configmap",
        post(srv, cms, &configmap("c", json!({}), json!({}))).await,
    );

    // An ordinary update cannot drop the finalizer.
    let mut stripped = created.clone();
    stripped["spec"] = json!({});
    stripped["metadata"]["labels"] = json!({"team": "x"});
    let updated = ok("update", put(srv, &format!("{NS}/a"), &stripped).await);
    assert_eq!(updated["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(updated["metadata"]["labels"]["team"], "x");

    // The delete marks it, and keeps it and its content.
    let marked = ok("delete", delete(srv, &format!("{NS}/a")).await);
    assert_eq!(marked["status"]["phase"], "Terminating");
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "{marked}"
    );
    assert_eq!(marked["spec"]["finalizers"], json!(["kubernetes"]));
    let again = ok("delete again", delete(srv, &format!("{NS}/a")).await);
    assert_eq!(
        again["metadata"]["resourceVersion"],
        marked["metadata"]["resourceVersion"]
    );
    ok("still there", get(srv, &format!("{NS}/a")).await);
    ok("content kept", get(srv, &format!("{cms}/c")).await);

    // Nothing new may be created in it (once the namespaces' watch cache, which the check
    // reads as kube-apiserver's admission reads its informer, has seen the delete).
    let fresh = format!(
        "{NS}?resourceVersion={}&resourceVersionMatch=NotOlderThan",
        rv_of(&marked)
    );
    ok("cache caught up", get(srv, &fresh).await);
    let (code, v) = post(srv, cms, &configmap("d", json!({}), json!({}))).await;
    assert_status("create in terminating", code, &v, 403, "Forbidden");
    assert_eq!(
        v["message"],
        "configmaps \"d\" is forbidden: unable to create new content in namespace a because it is being terminated"
    );
    assert_eq!(
        v["details"]["causes"],
        json!([{"reason": "NamespaceTerminating", "message": "namespace a is being terminated",
                "field": "metadata.namespace"}])
    );

    // The status subresource changes the status only.
    let mut st = ok("get", get(srv, &format!("{NS}/a")).await);
    st["status"]["conditions"] = json!([{"type": "NamespaceContentRemaining", "status": "True",
        "reason": "SomeResourcesRemain", "message": "m"}]);
    st["spec"] = json!({});
    let st = ok("status", put(srv, &format!("{NS}/a/status"), &st).await);
    assert_eq!(st["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(
        st["status"]["conditions"][0]["reason"],
        "SomeResourcesRemain"
    );
    assert_eq!(st["status"]["phase"], "Terminating");

    // finalize takes PUT only.
    let (code, v) = merge_patch(srv, &format!("{NS}/a/finalize"), &json!({"spec": {}})).await;
    assert_status("patch finalize", code, &v, 405, "MethodNotAllowed");

    // finalize replaces spec.finalizers, not the status; emptied, the namespace goes.
    let mut fin = st.clone();
    fin["spec"]["finalizers"] = json!([]);
    fin["status"] = json!({"phase": "Active"});
    let out = ok(
        "finalize",
        put(srv, &format!("{NS}/a/finalize"), &fin).await,
    );
    assert_eq!(out["status"]["phase"], "Terminating", "{out}");
    let (code, v) = get(srv, &format!("{NS}/a")).await;
    assert_status("gone", code, &v, 404, "NotFound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_finalizers_hold_a_finalized_namespace() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let mut ns = namespace("b");
    ns["metadata"]["finalizers"] = json!(["example.com/hold"]);
    ns["spec"] = json!({"finalizers": ["example.com/mine"]});
    let created = ok("create", post(srv, NS, &ns).await);
    assert_eq!(
        created["spec"]["finalizers"],
        json!(["example.com/mine", "kubernetes"])
    );
    // Orphan asks the garbage collector to orphan its dependents first.
    let marked = ok(
        "delete",
        call(
            srv,
            Method::DELETE,
            &format!("{NS}/b"),
            Some("application/json"),
            serde_json::to_vec(&json!({"propagationPolicy": "Orphan"})).unwrap(),
        )
        .await,
    );
    assert_eq!(
        marked["metadata"]["finalizers"],
        json!(["example.com/hold", "orphan"])
    );
    let mut fin = marked.clone();
    fin["spec"]["finalizers"] = json!(["example.com/mine"]);
    ok(
        "finalize one",
        put(srv, &format!("{NS}/b/finalize"), &fin).await,
    );
    fin = ok("get", get(srv, &format!("{NS}/b")).await);
    fin["spec"] = json!({});
    let out = ok(
        "finalize all",
        put(srv, &format!("{NS}/b/finalize"), &fin).await,
    );
    assert_eq!(out["spec"].get("finalizers"), None, "{out}");
    // metadata.finalizers still hold it.
    let held = ok("held", get(srv, &format!("{NS}/b")).await);
    assert_eq!(
        held["metadata"]["finalizers"],
        json!(["example.com/hold", "orphan"])
    );
    let mut done = held.clone();
    done["metadata"]["finalizers"] = json!([]);
    ok("last finalizers", put(srv, &format!("{NS}/b"), &done).await);
    let (code, v) = get(srv, &format!("{NS}/b")).await;
    assert_status("gone", code, &v, 404, "NotFound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_namespaces_cannot_be_deleted() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    for name in ["default", "kube-system", "kube-public"] {
        let (code, v) = delete(srv, &format!("{NS}/{name}")).await;
        assert_status(name, code, &v, 403, "Forbidden");
        assert_eq!(
            v["message"],
            format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")
        );
        assert_eq!(v["details"], json!({"name": name, "kind": "namespaces"}));
        let ns = ok("still active", get(srv, &format!("{NS}/{name}")).await);
        assert_eq!(ns["status"]["phase"], "Active");
    }
    // The discovery document lists the finalize subresource.
    let v1 = ok("discovery", get(srv, "/api/v1").await);
    let finalize = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "namespaces/finalize")
        .unwrap_or_else(|| panic!("no namespaces/finalize in {v1}"));
    assert_eq!(finalize["verbs"], json!(["update"]));
}
