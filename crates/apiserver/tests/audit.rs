//! The audit log as an operator reads it: the policy picks requests and levels; each event
//! names the user (and the impersonated one), the verb, the object, the code and the
//! authorization decision; `Request` level carries the body; a watch is written when it
//! starts and when it ends; refusals are audited; the file is private.

mod common;

use apiserver::audit::log_backend::LogBackend;
use apiserver::audit::policy::Policy;
use apiserver::audit::Auditor;
use apiserver::auth::user_info::{Authenticated, UserInfo};
use apiserver::{ApiServer, ServerConfig};
use bytes::Bytes;
use common::*;
use http::{Method, Request};
use http_body_util::Full;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    nonResourceURLs: ["/healthz*"]
  - level: Metadata
    resources: [{group: "", resources: ["secrets"]}]
  - level: Request
    resources: [{group: "", resources: ["configmaps"]}]
  - level: Metadata
"#;

async fn send_as(
    srv: &Arc<ApiServer>,
    user: &UserInfo,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> http::Response<apiserver::encoding::body::Body> {
    let mut b = Request::builder()
        .method(method)
        .uri(uri)
        .header("user-agent", "audit-test/1.0");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let payload = match body {
        Some(v) => {
            b = b.header("content-type", "application/json");
            Bytes::from(serde_json::to_vec(&v).unwrap())
        }
        None => Bytes::new(),
    };
    let mut req = b.body(Full::new(payload)).unwrap();
    req.extensions_mut()
        .insert(Authenticated(Arc::new(user.clone())));
    srv.clone().handle(req).await
}

/// The log's events once it holds at least `n` (waiting up to 5 s for the writer thread).
async fn events(path: &std::path::Path, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // Only whole lines: the writer may be in the middle of one.
        let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        let evs: Vec<Value> = whole
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if evs.len() >= n || Instant::now() > deadline {
            return evs;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_records_what_the_policy_selects() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let auditor = Auditor::new(
        Policy::parse(POLICY).unwrap(),
        LogBackend::open(&path).unwrap(),
    );
    let cfg = ServerConfig {
        audit: Some(Arc::new(auditor)),
        ..ServerConfig::default()
    };
    let h = Memory.start(cfg).await;
    let srv = &h.srv;
    let admin = UserInfo::authenticated("root", vec!["system:masters".into()]);
    let alice = UserInfo::authenticated("alice", vec!["developers".into()]);

    // 1: a create at level Request: the body is in the event.
    let resp = send_as(
        srv,
        &admin,
        Method::POST,
        "/api/v1/namespaces/default/configmaps",
        &[],
        Some(configmap("audited", json!({}), json!({"k": "v"}))),
    )
    .await;
    assert_eq!(resp.status(), 201);
    // 2: a secret at level Metadata: no body.
    let resp = send_as(srv, &admin, Method::POST, "/api/v1/namespaces/default/secrets", &[],
        Some(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"password": "hunter2"}}))).await;
    assert_eq!(resp.status(), 201);
    // 3: a refusal.
    let resp = send_as(
        srv,
        &alice,
        Method::GET,
        "/api/v1/namespaces/kube-system/secrets/s",
        &[],
        None,
    )
    .await;
    assert_eq!(resp.status(), 403);
    // Not audited (level None).
    let resp = send_as(srv, &alice, Method::GET, "/healthz", &[], None).await;
    assert_eq!(resp.status(), 200);
    // 4: impersonation.
    let resp = send_as(
        srv,
        &admin,
        Method::GET,
        "/api/v1/namespaces/default/configmaps/audited",
        &[("Impersonate-User", "bob")],
        None,
    )
    .await;
    assert_eq!(resp.status(), 403, "bob holds nothing");
    // 5 and 6: a watch, when it starts and when it ends.
    let resp = send_as(
        srv,
        &admin,
        Method::GET,
        "/api/v1/namespaces/default/pods?watch=true",
        &[],
        None,
    )
    .await;
    assert_eq!(resp.status(), 200);
    let evs = events(&path, 5).await;
    assert_eq!(evs.len(), 5, "{evs:#?}");
    drop(resp);
    let evs = events(&path, 6).await;
    assert_eq!(evs.len(), 6, "{evs:#?}");

    let create = &evs[0];
    assert_eq!(create["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(create["kind"], "Event");
    assert_eq!(create["stage"], "ResponseComplete");
    assert_eq!(create["level"], "Request");
    assert_eq!(create["verb"], "create");
    assert_eq!(create["user"]["username"], "root");
    assert_eq!(create["userAgent"], "audit-test/1.0");
    assert_eq!(
        create["objectRef"],
        json!({"resource": "configmaps", "namespace": "default", "apiVersion": "v1"})
    );
    assert_eq!(create["responseStatus"]["code"], 201);
    assert_eq!(create["requestObject"]["metadata"]["name"], "audited");
    assert_eq!(
        create["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );
    assert!(create["auditID"].as_str().unwrap().len() >= 32);
    assert!(create["requestReceivedTimestamp"]
        .as_str()
        .unwrap()
        .ends_with('Z'));

    let secret = &evs[1];
    assert_eq!(secret["level"], "Metadata");
    assert!(
        secret.get("requestObject").is_none(),
        "no body at Metadata: {secret}"
    );
    assert!(!secret.to_string().contains("hunter2"));

    let refused = &evs[2];
    assert_eq!(refused["responseStatus"]["code"], 403);
    assert_eq!(refused["user"]["username"], "alice");
    assert_eq!(
        refused["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    assert_eq!(refused["objectRef"]["name"], "s");

    let impersonated = &evs[3];
    assert_eq!(impersonated["user"]["username"], "root");
    assert_eq!(impersonated["impersonatedUser"]["username"], "bob");

    assert_eq!(
        (&evs[4]["stage"], &evs[4]["verb"]),
        (&json!("ResponseStarted"), &json!("watch"))
    );
    assert_eq!(evs[5]["stage"], "ResponseComplete");
    assert_eq!(evs[4]["auditID"], evs[5]["auditID"]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the audit log is private");
    }
}
