//! Authorization as users meet it: a matrix of users × verbs × resources (subresources,
//! resourceNames, namespaces, non-resource paths) against the answers Kubernetes' RBAC gives,
//! impersonation, escalation attempts on roles and bindings, a binding to a missing role,
//! the Node authorizer, and authentication over a real listener (tokens from a token file,
//! ServiceAccount tokens tampered with, expired or outliving their ServiceAccount).

mod common;

use apiserver::auth::authenticator::Authenticator;
use apiserver::auth::token_file::TokenFile;
use apiserver::auth::user_info::{Authenticated, UserInfo};
use apiserver::{ApiServer, ServerConfig};
use bytes::Bytes;
use common::*;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// One request as `user` (with extra `headers`), straight into the server's dispatch.
async fn as_user(
    srv: &Arc<ApiServer>,
    user: &UserInfo,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, Value) {
    let mut b = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let payload = match body {
        Some(v) => {
            b = b.header("content-type", "application/json");
            Bytes::from(serde_json::to_vec(v).unwrap())
        }
        None => Bytes::new(),
    };
    let mut req = b.body(Full::new(payload)).unwrap();
    req.extensions_mut()
        .insert(Authenticated(Arc::new(user.clone())));
    let resp = srv.clone().handle(req).await;
    let code = resp.status().as_u16();
    if uri.contains("watch=") && code == 200 {
        // A watch that started: its stream is not read.
        return (code, Value::Null);
    }
    let bytes = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo::authenticated(name, groups.iter().map(|g| g.to_string()).collect())
}

async fn admin_post(srv: &Arc<ApiServer>, uri: &str, body: Value) {
    let (code, v) = post(srv, uri, &body).await;
    assert!(code.is_success(), "{uri}: {code} {v}");
}

fn role(kind: &str, ns: &str, name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
           "metadata": {"name": name, "namespace": ns}, "rules": rules})
}

fn binding(
    kind: &str,
    ns: &str,
    name: &str,
    role_kind: &str,
    role: &str,
    subjects: Value,
) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
           "metadata": {"name": name, "namespace": ns},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
           "subjects": subjects})
}

fn subject_user(name: &str) -> Value {
    json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name}])
}

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

/// The cluster every test below starts from.
async fn policy(srv: &Arc<ApiServer>) {
    for ns in ["team-a", "team-b"] {
        create_namespace(srv, ns).await;
    }
    let cm = |name: &str| configmap(name, json!({}), json!({"k": "v"}));
    for name in ["special", "other"] {
        admin_post(srv, "/api/v1/namespaces/team-a/configmaps", cm(name)).await;
    }
    admin_post(srv, "/api/v1/namespaces/team-b/configmaps", cm("b1")).await;
    let roles = format!("{RBAC}/namespaces/team-a/roles");
    let bindings = format!("{RBAC}/namespaces/team-a/rolebindings");
    admin_post(
        srv,
        &roles,
        role(
            "Role",
            "team-a",
            "cm-reader",
            json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]),
        ),
    )
    .await;
    admin_post(
        srv,
        &bindings,
        binding(
            "RoleBinding",
            "team-a",
            "alice-cm",
            "Role",
            "cm-reader",
            subject_user("alice"),
        ),
    )
    .await;
    admin_post(srv, &roles, role("Role", "team-a", "special-only", json!([
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["special"], "verbs": ["get", "update", "list", "watch"]}]))).await;
    admin_post(
        srv,
        &bindings,
        binding(
            "RoleBinding",
            "team-a",
            "bob-special",
            "Role",
            "special-only",
            subject_user("bob"),
        ),
    )
    .await;
    admin_post(
        srv,
        &bindings,
        binding(
            "RoleBinding",
            "team-a",
            "mallory-missing",
            "Role",
            "does-not-exist",
            subject_user("mallory"),
        ),
    )
    .await;
    admin_post(srv, &roles, role("Role", "team-a", "rbac-writer", json!([
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create", "update", "get"]}]))).await;
    admin_post(
        srv,
        &bindings,
        binding(
            "RoleBinding",
            "team-a",
            "alice-rbac",
            "Role",
            "rbac-writer",
            subject_user("alice"),
        ),
    )
    .await;
    admin_post(
        srv,
        &format!("{RBAC}/namespaces/team-b/rolebindings"),
        binding(
            "RoleBinding",
            "team-b",
            "ops-view",
            "ClusterRole",
            "view",
            json!([{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "ops"}]),
        ),
    )
    .await;
    admin_post(srv, &format!("{RBAC}/clusterroles"), role("ClusterRole", "", "scaler", json!([
        {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["update", "get"]},
        {"apiGroups": [""], "resources": ["users"], "resourceNames": ["alice"], "verbs": ["impersonate"]},
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]))).await;
    admin_post(
        srv,
        &format!("{RBAC}/clusterrolebindings"),
        binding(
            "ClusterRoleBinding",
            "",
            "carol-scaler",
            "ClusterRole",
            "scaler",
            subject_user("carol"),
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authorization_matrix() {
    let h = Memory.start(ServerConfig::default()).await;
    let srv = &h.srv;
    policy(srv).await;
    let alice = user("alice", &["developers"]);
    let bob = user("bob", &[]);
    let carol = user("carol", &["ops"]);
    let mallory = user("mallory", &[]);
    let anonymous = UserInfo::anonymous();
    let cms = "/api/v1/namespaces/team-a/configmaps";
    let cm_body = configmap("new", json!({}), json!({}));
    let special = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "special", "namespace": "team-a"}, "data": {"k": "w"}});
    type Case<'a> = (&'a UserInfo, Method, String, Option<Value>, u16);
    let cases: Vec<Case> = vec![
        // A Role and RoleBinding: the verbs and namespace they name, nothing else.
        (&alice, Method::GET, cms.into(), None, 200),
        (&alice, Method::GET, format!("{cms}?watch=true"), None, 200),
        (&alice, Method::GET, format!("{cms}/other"), None, 200),
        (&alice, Method::POST, cms.into(), Some(cm_body.clone()), 403),
        (&alice, Method::DELETE, format!("{cms}/other"), None, 403),
        (&alice, Method::DELETE, cms.into(), None, 403),
        (
            &alice,
            Method::GET,
            "/api/v1/namespaces/team-b/configmaps".into(),
            None,
            403,
        ),
        (&alice, Method::GET, "/api/v1/configmaps".into(), None, 403),
        (
            &alice,
            Method::GET,
            "/api/v1/namespaces/team-a/secrets".into(),
            None,
            403,
        ),
        (
            &alice,
            Method::GET,
            "/api/v1/namespaces/kube-system/secrets/nope".into(),
            None,
            403,
        ),
        // A resource the server does not serve: 403 for whoever may not ask, never a 404.
        (
            &alice,
            Method::GET,
            "/apis/example.com/v1/widgets".into(),
            None,
            403,
        ),
        // Discovery and self-reviews are open to every authenticated user.
        (&alice, Method::GET, "/api".into(), None, 200),
        (&alice, Method::GET, "/apis/apps/v1".into(), None, 200),
        (&alice, Method::GET, "/metrics".into(), None, 403),
        // resourceNames: that one object, and list/watch only when selected by its name.
        (&bob, Method::GET, format!("{cms}/special"), None, 200),
        (
            &bob,
            Method::PUT,
            format!("{cms}/special"),
            Some(special.clone()),
            200,
        ),
        (&bob, Method::GET, format!("{cms}/other"), None, 403),
        (&bob, Method::GET, cms.into(), None, 403),
        (
            &bob,
            Method::GET,
            format!("{cms}?fieldSelector=metadata.name%3Dspecial"),
            None,
            200,
        ),
        (
            &bob,
            Method::GET,
            format!("{cms}?watch=1&fieldSelector=metadata.name%3Dspecial"),
            None,
            200,
        ),
        (
            &bob,
            Method::GET,
            format!("{cms}?fieldSelector=metadata.name%3Dother"),
            None,
            403,
        ),
        // A ClusterRole bound in one namespace to a group (view, by aggregation).
        (
            &carol,
            Method::GET,
            "/api/v1/namespaces/team-b/pods".into(),
            None,
            200,
        ),
        (
            &carol,
            Method::GET,
            "/apis/apps/v1/namespaces/team-b/deployments".into(),
            None,
            200,
        ),
        (
            &carol,
            Method::GET,
            "/api/v1/namespaces/team-b/secrets".into(),
            None,
            403,
        ),
        (
            &carol,
            Method::GET,
            "/api/v1/namespaces/team-a/pods".into(),
            None,
            403,
        ),
        (
            &carol,
            Method::POST,
            "/api/v1/namespaces/team-b/configmaps".into(),
            Some(configmap("x", json!({}), json!({}))),
            403,
        ),
        // A subresource rule: scale, not the deployment itself (404: allowed, nothing there).
        (
            &carol,
            Method::GET,
            "/apis/apps/v1/namespaces/team-a/deployments/d/scale".into(),
            None,
            404,
        ),
        (
            &carol,
            Method::GET,
            "/apis/apps/v1/namespaces/team-a/deployments/d".into(),
            None,
            403,
        ),
        (&carol, Method::GET, "/metrics".into(), None, 200),
        // A binding to a role that does not exist grants nothing.
        (&mallory, Method::GET, cms.into(), None, 403),
        (&mallory, Method::GET, format!("{cms}/special"), None, 403),
        // Anonymous: health and version, nothing else.
        (&anonymous, Method::GET, "/healthz".into(), None, 200),
        (&anonymous, Method::GET, "/version".into(), None, 200),
        (&anonymous, Method::GET, "/api".into(), None, 403),
        (
            &anonymous,
            Method::GET,
            "/api/v1/namespaces".into(),
            None,
            403,
        ),
    ];
    for (u, method, uri, body, want) in cases {
        let (code, v) = as_user(srv, u, method.clone(), &uri, &[], body.as_ref()).await;
        assert_eq!(code, want, "{} {method} {uri}: {v}", u.name);
        if want == 403 {
            assert_eq!(v["reason"], "Forbidden", "{v}");
            assert!(
                v["message"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("User \"{}\"", u.name)),
                "{v}"
            );
        }
    }
    // The refusal reads as kube-apiserver's.
    let (_, v) = as_user(
        srv,
        &alice,
        Method::GET,
        "/api/v1/namespaces/kube-system/secrets/s",
        &[],
        None,
    )
    .await;
    assert_eq!(
        v["message"],
        "secrets \"s\" is forbidden: User \"alice\" cannot get resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
    );
    assert_eq!(v["details"], json!({"name": "s", "kind": "secrets"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_needs_the_impersonate_verb() {
    let h = Memory.start(ServerConfig::default()).await;
    let srv = &h.srv;
    policy(srv).await;
    let carol = user("carol", &["ops"]);
    let cms = "/api/v1/namespaces/team-a/configmaps";
    // carol may impersonate alice, and then has alice's rights (and only hers).
    let (code, _) = as_user(
        srv,
        &carol,
        Method::GET,
        cms,
        &[("Impersonate-User", "alice")],
        None,
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = as_user(
        srv,
        &carol,
        Method::GET,
        "/api/v1/namespaces/team-b/pods",
        &[("Impersonate-User", "alice")],
        None,
    )
    .await;
    assert_eq!(code, 403, "impersonating drops the caller's own rights");
    let (code, v) = as_user(
        srv,
        &carol,
        Method::GET,
        cms,
        &[("Impersonate-User", "bob")],
        None,
    )
    .await;
    assert_eq!(code, 403);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("cannot impersonate resource \"users\""),
        "{v}"
    );
    let (code, _) = as_user(
        srv,
        &carol,
        Method::GET,
        cms,
        &[
            ("Impersonate-User", "alice"),
            ("Impersonate-Group", "system:masters"),
        ],
        None,
    )
    .await;
    assert_eq!(code, 403, "groups need their own grant");
    let (code, _) = as_user(
        srv,
        &carol,
        Method::GET,
        cms,
        &[("Impersonate-Group", "system:masters")],
        None,
    )
    .await;
    assert_eq!(code, 400);
    // whoami under impersonation names the impersonated user.
    let (code, v) = as_user(
        srv,
        &carol,
        Method::POST,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &[("Impersonate-User", "alice")],
        Some(&json!({})),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(v["status"]["userInfo"]["username"], "alice");
    // A member of system:masters may impersonate anyone.
    let admin = user("root", &["system:masters"]);
    let (code, _) = as_user(
        srv,
        &admin,
        Method::GET,
        cms,
        &[("Impersonate-User", "mallory")],
        None,
    )
    .await;
    assert_eq!(code, 403, "as mallory, who holds nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalation_through_roles_and_bindings_is_refused() {
    let h = Memory.start(ServerConfig::default()).await;
    let srv = &h.srv;
    policy(srv).await;
    let alice = user("alice", &["developers"]);
    let roles = format!("{RBAC}/namespaces/team-a/roles");
    let bindings = format!("{RBAC}/namespaces/team-a/rolebindings");
    // A role with rules alice holds: allowed.
    let mine = role(
        "Role",
        "team-a",
        "mine",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
    );
    let (code, v) = as_user(srv, &alice, Method::POST, &roles, &[], Some(&mine)).await;
    assert_eq!(code, 201, "{v}");
    // A role granting what she does not hold: refused, naming the rule.
    let more = role(
        "Role",
        "team-a",
        "more",
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
    );
    let (code, v) = as_user(srv, &alice, Method::POST, &roles, &[], Some(&more)).await;
    assert_eq!(code, 403, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("attempting to grant RBAC permissions not currently held"),
        "{v}"
    );
    // Nor by updating her own role.
    let widened = role(
        "Role",
        "team-a",
        "mine",
        json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
    );
    let (code, _) = as_user(
        srv,
        &alice,
        Method::PUT,
        &format!("{roles}/mine"),
        &[],
        Some(&widened),
    )
    .await;
    assert_eq!(code, 403);
    // Binding a role she holds to another user: allowed; binding admin to herself: refused.
    let ok = binding(
        "RoleBinding",
        "team-a",
        "bob-reads",
        "Role",
        "cm-reader",
        subject_user("bob"),
    );
    let (code, v) = as_user(srv, &alice, Method::POST, &bindings, &[], Some(&ok)).await;
    assert_eq!(code, 201, "{v}");
    let grab = binding(
        "RoleBinding",
        "team-a",
        "alice-admin",
        "ClusterRole",
        "admin",
        subject_user("alice"),
    );
    let (code, _) = as_user(srv, &alice, Method::POST, &bindings, &[], Some(&grab)).await;
    assert_eq!(code, 403);
    let ghost = binding(
        "RoleBinding",
        "team-a",
        "alice-ghost",
        "Role",
        "later",
        subject_user("alice"),
    );
    let (code, _) = as_user(srv, &alice, Method::POST, &bindings, &[], Some(&ghost)).await;
    assert_eq!(
        code, 403,
        "a binding to a role that does not exist yet is not hers to make"
    );
    // She may not delete her own binding (no delete verb), the first finding.
    let (code, _) = as_user(
        srv,
        &alice,
        Method::DELETE,
        &format!("{bindings}/alice-cm"),
        &[],
        None,
    )
    .await;
    assert_eq!(code, 403);
    // With the escalate and bind verbs, the same writes are allowed.
    admin_post(srv, &format!("{RBAC}/clusterroles"), role("ClusterRole", "", "escalator", json!([
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": ["admin"], "verbs": ["bind"]}]))).await;
    admin_post(
        srv,
        &bindings,
        binding(
            "RoleBinding",
            "team-a",
            "alice-escalator",
            "ClusterRole",
            "escalator",
            subject_user("alice"),
        ),
    )
    .await;
    let (code, v) = as_user(srv, &alice, Method::POST, &roles, &[], Some(&more)).await;
    assert_eq!(code, 201, "{v}");
    let (code, v) = as_user(srv, &alice, Method::POST, &bindings, &[], Some(&grab)).await;
    assert_eq!(code, 201, "{v}");
    // Nothing refused was stored.
    let (code, _) = get(srv, &format!("{bindings}/alice-ghost")).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_reviews_tell_the_truth() {
    let h = Memory.start(ServerConfig::default()).await;
    let srv = &h.srv;
    policy(srv).await;
    let alice = user("alice", &["developers"]);
    let ssar = |verb: &str, ns: &str, resource: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "spec": {"resourceAttributes": {"verb": verb, "namespace": ns, "resource": resource}}})
    };
    let url = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    for (verb, ns, res, want) in [
        ("list", "team-a", "configmaps", true),
        ("create", "team-a", "configmaps", false),
        ("list", "team-b", "configmaps", false),
        ("get", "kube-system", "secrets", false),
    ] {
        let (code, v) = as_user(
            srv,
            &alice,
            Method::POST,
            url,
            &[],
            Some(&ssar(verb, ns, res)),
        )
        .await;
        assert_eq!(code, 201);
        assert_eq!(v["status"]["allowed"], want, "{verb} {ns} {res}: {v}");
    }
    // A SubjectAccessReview asks for someone else, and needs its own permission.
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "bob", "resourceAttributes": {"verb": "get", "namespace": "team-a", "resource": "configmaps", "name": "special"}}});
    let sar_url = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let (code, _) = as_user(srv, &alice, Method::POST, sar_url, &[], Some(&sar)).await;
    assert_eq!(code, 403);
    let (code, v) = post(srv, sar_url, &sar).await;
    assert_eq!(code, StatusCode::CREATED);
    assert_eq!(v["status"]["allowed"], true, "{v}");
    // The rules review lists what alice holds in team-a.
    let (_, v) = as_user(
        srv,
        &alice,
        Method::POST,
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        &[],
        Some(&json!({"spec": {"namespace": "team-a"}})),
    )
    .await;
    let rules = v["status"]["resourceRules"].as_array().unwrap();
    assert!(
        rules.iter().any(|r| r["resources"] == json!(["configmaps"])
            && r["verbs"] == json!(["get", "list", "watch"])),
        "{v}"
    );
    assert!(!rules.iter().any(|r| r["resources"] == json!(["*"])), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_changes_only_its_own_node_lease_and_pods() {
    let h = Memory.start(ServerConfig::default()).await;
    let srv = &h.srv;
    for n in ["n1", "n2"] {
        admin_post(
            srv,
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}}),
        )
        .await;
    }
    admin_post(srv, "/api/v1/namespaces/default/pods", pod("on-n1", "n1")).await;
    admin_post(srv, "/api/v1/namespaces/default/pods", pod("on-n2", "n2")).await;
    admin_post(
        srv,
        "/api/v1/namespaces/default/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
    )
    .await;
    let n1 = user("system:node:n1", &["system:nodes"]);
    let patch = json!({"metadata": {"labels": {"touched": "yes"}}});
    let merge = [("content-type", "application/merge-patch+json")];
    let cases: Vec<(Method, &str, Option<&Value>, u16)> = vec![
        (
            Method::GET,
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1",
            None,
            200,
        ),
        (Method::GET, "/api/v1/nodes/n2", None, 200),
        (Method::PATCH, "/api/v1/nodes/n1/status", Some(&patch), 200),
        (Method::PATCH, "/api/v1/nodes/n2/status", Some(&patch), 403),
        (Method::PATCH, "/api/v1/nodes/n2", Some(&patch), 403),
        (
            Method::PATCH,
            "/api/v1/namespaces/default/pods/on-n1/status",
            Some(&patch),
            200,
        ),
        (
            Method::PATCH,
            "/api/v1/namespaces/default/pods/on-n2/status",
            Some(&patch),
            403,
        ),
        (
            Method::DELETE,
            "/api/v1/namespaces/default/pods/on-n2",
            None,
            403,
        ),
        (
            Method::GET,
            "/api/v1/namespaces/default/secrets/s",
            None,
            403,
        ),
        (Method::DELETE, "/api/v1/nodes/n2", None, 403),
    ];
    for (method, uri, body, want) in cases {
        let mut headers: Vec<(&str, &str)> = Vec::new();
        if method == Method::PATCH {
            headers.extend(merge);
        }
        let (code, v) = async {
            let mut b = Request::builder().method(method.clone()).uri(uri);
            for (k, v) in &headers {
                b = b.header(*k, *v);
            }
            let payload = body
                .map(|v| Bytes::from(serde_json::to_vec(v).unwrap()))
                .unwrap_or_default();
            let mut req = b.body(Full::new(payload)).unwrap();
            req.extensions_mut()
                .insert(Authenticated(Arc::new(n1.clone())));
            let resp = srv.clone().handle(req).await;
            let code = resp.status().as_u16();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            (
                code,
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
            )
        }
        .await;
        assert_eq!(code, want, "{method} {uri}: {v}");
    }
    // Someone claiming a node's name without the nodes group is no node.
    let fake = user("system:node:n1", &[]);
    let (code, _) = as_user(srv, &fake, Method::GET, "/api/v1/nodes/n1", &[], None).await;
    assert_eq!(code, 403);
}

/// A request over a real listener with an `Authorization` header; (status, body).
async fn over_http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    use hyper_util::client::legacy::Client;
    let client: Client<_, Full<Bytes>> =
        Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let mut b = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    if let Some(a) = auth {
        b = b.header("authorization", a);
    }
    let payload = match body {
        Some(v) => {
            b = b.header("content-type", "application/json");
            Bytes::from(serde_json::to_vec(v).unwrap())
        }
        None => Bytes::new(),
    };
    let resp = client
        .request(b.body(Full::new(payload)).unwrap())
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_authenticate_and_bad_ones_are_401() {
    let h = Memory.start(ServerConfig::default()).await;
    let srv = &h.srv;
    policy(srv).await;
    let tokens = TokenFile::parse("alice-token,alice,1,developers\n").unwrap();
    let opts = apiserver::ServeOptions {
        authenticator: Some(Arc::new(Authenticator::new(
            Some("admin-token".into()),
            tokens,
        ))),
        ..Default::default()
    };
    let addr = serve_on_loopback(srv, opts).await;
    let cms = "/api/v1/namespaces/team-a/configmaps";
    assert_eq!(
        over_http(addr, "GET", cms, Some("Bearer alice-token"), None)
            .await
            .0,
        200
    );
    assert_eq!(
        over_http(
            addr,
            "GET",
            "/api/v1/secrets",
            Some("Bearer alice-token"),
            None
        )
        .await
        .0,
        403
    );
    assert_eq!(
        over_http(
            addr,
            "GET",
            "/api/v1/secrets",
            Some("Bearer admin-token"),
            None
        )
        .await
        .0,
        200
    );
    assert_eq!(
        over_http(addr, "GET", cms, None, None).await.0,
        403,
        "anonymous"
    );
    assert_eq!(
        over_http(addr, "GET", "/healthz", None, None).await.0,
        200,
        "anonymous"
    );
    for bad in [
        "Bearer wrong",
        "Bearer ",
        "Basic YWxpY2U6eA==",
        "Bearer a.b.c",
    ] {
        let (code, v) = over_http(addr, "GET", cms, Some(bad), None).await;
        assert_eq!(code, 401, "{bad:?}: {v}");
        assert_eq!(v["reason"], "Unauthorized");
    }

    // ServiceAccount tokens from the TokenRequest API.
    admin_post(
        srv,
        "/api/v1/namespaces/team-a/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot"}}),
    )
    .await;
    admin_post(
        srv,
        &format!("{RBAC}/namespaces/team-a/rolebindings"),
        binding(
            "RoleBinding",
            "team-a",
            "bot-cm",
            "Role",
            "cm-reader",
            json!([{"kind": "ServiceAccount", "name": "bot", "namespace": "team-a"}]),
        ),
    )
    .await;
    let token_url = "/api/v1/namespaces/team-a/serviceaccounts/bot/token";
    let tr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}});
    // alice may not mint the bot's tokens; the admin may.
    assert_eq!(
        over_http(
            addr,
            "POST",
            token_url,
            Some("Bearer alice-token"),
            Some(&tr)
        )
        .await
        .0,
        403
    );
    let (code, v) = over_http(
        addr,
        "POST",
        token_url,
        Some("Bearer admin-token"),
        Some(&tr),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let token = v["status"]["token"].as_str().unwrap().to_string();
    assert!(v["status"]["expirationTimestamp"].is_string());
    let bearer = format!("Bearer {token}");
    assert_eq!(
        over_http(addr, "GET", cms, Some(&bearer), None).await.0,
        200
    );
    assert_eq!(
        over_http(
            addr,
            "GET",
            "/api/v1/namespaces/team-b/configmaps",
            Some(&bearer),
            None
        )
        .await
        .0,
        403
    );
    let (_, who) = over_http(
        addr,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        Some(&bearer),
        Some(&json!({})),
    )
    .await;
    assert_eq!(
        who["status"]["userInfo"]["username"],
        "system:serviceaccount:team-a:bot"
    );
    assert!(who["status"]["userInfo"]["groups"]
        .as_array()
        .unwrap()
        .contains(&json!("system:serviceaccounts:team-a")));
    // The issuer's discovery documents, for ServiceAccounts (and not for alice).
    let (code, oidc) = over_http(
        addr,
        "GET",
        "/.well-known/openid-configuration",
        Some(&bearer),
        None,
    )
    .await;
    assert_eq!(code, 200, "{oidc}");
    assert_eq!(
        oidc["issuer"],
        "https://kubernetes.default.svc.cluster.local"
    );
    let (code, jwks) = over_http(addr, "GET", "/openid/v1/jwks", Some(&bearer), None).await;
    assert_eq!(code, 200);
    let header: Value = {
        use base64::Engine as _;
        let h = token.split('.').next().unwrap();
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(h)
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(jwks["keys"][0]["kid"], header["kid"], "{jwks}");
    assert_eq!(jwks["keys"][0]["alg"], header["alg"]);
    assert_eq!(
        over_http(
            addr,
            "GET",
            "/openid/v1/jwks",
            Some("Bearer alice-token"),
            None
        )
        .await
        .0,
        403
    );
    // Tampered: one character of the signature, or of the claims.
    let mut sig_flipped = token.clone().into_bytes();
    let last = sig_flipped.len() - 2;
    sig_flipped[last] = if sig_flipped[last] == b'A' {
        b'B'
    } else {
        b'A'
    };
    let sig_flipped = String::from_utf8(sig_flipped).unwrap();
    assert_eq!(
        over_http(
            addr,
            "GET",
            cms,
            Some(&format!("Bearer {sig_flipped}")),
            None
        )
        .await
        .0,
        401
    );
    let parts: Vec<&str> = token.split('.').collect();
    let claims = parts[1].replacen('t', "u", 1);
    assert_eq!(
        over_http(
            addr,
            "GET",
            cms,
            Some(&format!("Bearer {}.{claims}.{}", parts[0], parts[2])),
            None
        )
        .await
        .0,
        401
    );
    // Too short a lifetime is refused.
    let short = json!({"spec": {"expirationSeconds": 10}});
    assert_eq!(
        over_http(
            addr,
            "POST",
            token_url,
            Some("Bearer admin-token"),
            Some(&short)
        )
        .await
        .0,
        422
    );
    // Not bound to a pod that runs as another ServiceAccount.
    admin_post(srv, "/api/v1/namespaces/team-a/pods", pod("other-sa", "")).await;
    let elsewhere = json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "other-sa"}}});
    let (code, v) = over_http(
        addr,
        "POST",
        token_url,
        Some("Bearer admin-token"),
        Some(&elsewhere),
    )
    .await;
    assert_eq!(code, 400, "{v}");
    // Bound to a pod: valid while the pod lives.
    let mut p1 = pod("p1", "");
    p1["spec"]["serviceAccountName"] = json!("bot");
    admin_post(srv, "/api/v1/namespaces/team-a/pods", p1).await;
    let bound =
        json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p1"}}});
    let (code, v) = over_http(
        addr,
        "POST",
        token_url,
        Some("Bearer admin-token"),
        Some(&bound),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let pod_bearer = format!("Bearer {}", v["status"]["token"].as_str().unwrap());
    assert_eq!(
        over_http(addr, "GET", cms, Some(&pod_bearer), None).await.0,
        200
    );
    let (code, _) = delete(
        srv,
        "/api/v1/namespaces/team-a/pods/p1?gracePeriodSeconds=0",
    )
    .await;
    assert!(code.is_success());
    wait_for_code(addr, cms, &pod_bearer, 401).await;
    assert_eq!(
        over_http(addr, "GET", cms, Some(&bearer), None).await.0,
        200,
        "the unbound token lives on"
    );
    // The ServiceAccount deleted: its tokens die with it.
    let (code, _) = delete(srv, "/api/v1/namespaces/team-a/serviceaccounts/bot").await;
    assert!(code.is_success());
    wait_for_code(addr, cms, &bearer, 401).await;
    // Re-created under the same name, it is another account: the old token stays dead.
    admin_post(
        srv,
        "/api/v1/namespaces/team-a/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot"}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        over_http(addr, "GET", cms, Some(&bearer), None).await.0,
        401
    );
}

/// Waits (up to 5 s, for the cache to see a deletion) until `auth` gets `want` on `path`.
async fn wait_for_code(addr: std::net::SocketAddr, path: &str, auth: &str, want: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (code, _) = over_http(addr, "GET", path, Some(auth), None).await;
        if code == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still {code}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Where [`send_to`] sends a request: the server's in-process handler, or an HTTP/2
/// connection.
enum Conn<F> {
    InProcess(F),
    Http2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// One GET on `conn`, with `headers`: the code and body.
async fn over<F>(conn: &mut Conn<F>, path: &str, headers: &[(&str, &str)]) -> (u16, Value)
where
    F: Fn(Request<Full<Bytes>>) -> apiserver::server::in_process::Responding,
{
    send_to(conn, Method::GET, path, headers, None).await
}

/// One request on `conn`, with `headers` and a merge patch or JSON body: the code and
/// body.
async fn send_to<F>(
    conn: &mut Conn<F>,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, Value)
where
    F: Fn(Request<Full<Bytes>>) -> apiserver::server::in_process::Responding,
{
    let mut b = Request::builder()
        .method(method.clone())
        .uri(format!("http://in-process{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let payload = match body {
        Some(v) => {
            let ct = if method == Method::PATCH {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            b = b.header("content-type", ct);
            Bytes::from(serde_json::to_vec(v).unwrap())
        }
        None => Bytes::new(),
    };
    let req = b.body(Full::new(payload)).unwrap();
    let (code, bytes) = match conn {
        Conn::InProcess(handle) => {
            let resp = handle(req).await;
            let code = resp.status().as_u16();
            (code, resp.into_body().collect().await.unwrap().to_bytes())
        }
        Conn::Http2(sender) => {
            sender.ready().await.unwrap();
            let resp = sender.send_request(req).await.unwrap();
            let code = resp.status().as_u16();
            (code, resp.into_body().collect().await.unwrap().to_bytes())
        }
    };
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// `listwatch up`'s in-process requests: each runs as the user its front-proxy
/// headers name, and is authorized as that user (many users through one handler); without
/// them it is a 401, and no token authenticates there. On a network listener the same
/// headers are ignored: they prove nothing there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_proxy_headers_authenticate_only_in_process_connections() {
    let h = Memory.start(ServerConfig::default()).await;
    let srv = &h.srv;
    policy(srv).await;
    let mut sender = Conn::InProcess(apiserver::server::in_process::handler(srv.clone()));
    let cms = "/api/v1/namespaces/team-a/configmaps";
    let alice = [("x-remote-user", "alice"), ("x-remote-group", "developers")];
    let masters = [
        ("x-remote-user", "root"),
        ("x-remote-group", "system:masters"),
    ];
    for _ in 0..3 {
        assert_eq!(over(&mut sender, cms, &alice).await.0, 200);
        let (code, v) = over(&mut sender, "/api/v1/secrets", &alice).await;
        assert_eq!(code, 403, "{v}");
        assert!(
            v["message"].as_str().unwrap_or("").contains("\"alice\""),
            "{v}"
        );
        assert_eq!(over(&mut sender, "/api/v1/secrets", &masters).await.0, 200);
    }
    let (code, v) = over(&mut sender, cms, &[("x-remote-user", "bob")]).await;
    assert_eq!(code, 403, "bob may read only the special one: {v}");
    // Nodes sharing the connection are each held to their own Node, and none can
    // impersonate its way out.
    for n in ["n1", "n2"] {
        admin_post(
            srv,
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}}),
        )
        .await;
    }
    let patch = json!({"status": {"capacity": {"pods": "110"}}});
    for (node, target, want) in [("n1", "n1", 200), ("n1", "n2", 403), ("n2", "n2", 200)] {
        let user = format!("system:node:{node}");
        let as_node = [
            ("x-remote-user", user.as_str()),
            ("x-remote-group", "system:nodes"),
        ];
        let path = format!("/api/v1/nodes/{target}/status");
        let (code, v) = send_to(&mut sender, Method::PATCH, &path, &as_node, Some(&patch)).await;
        assert_eq!(code, want, "{node} patching {target}: {v}");
        let impersonating = [
            ("x-remote-user", user.as_str()),
            ("x-remote-group", "system:nodes"),
            ("impersonate-user", "admin"),
            ("impersonate-group", "system:masters"),
        ];
        let (code, v) = over(&mut sender, "/api/v1/secrets", &impersonating).await;
        assert_eq!(code, 403, "{node} impersonating the admin: {v}");
    }
    for refused in [
        &[][..],
        &[("x-remote-group", "system:masters")][..],
        &[("x-remote-user", "")][..],
        &[("authorization", "Bearer admin-token")][..],
    ] {
        let (code, v) = over(&mut sender, cms, refused).await;
        assert_eq!(code, 401, "{refused:?}: {v}");
    }

    // A network listener with tokens: the headers are not credentials there.
    let opts = apiserver::ServeOptions {
        authenticator: Some(Arc::new(Authenticator::new(
            Some("admin-token".into()),
            TokenFile::default(),
        ))),
        ..Default::default()
    };
    let addr = serve_on_loopback(srv, opts).await;
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (net, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let mut net =
        Conn::<fn(Request<Full<Bytes>>) -> apiserver::server::in_process::Responding>::Http2(net);
    let (code, v) = over(&mut net, "/api/v1/secrets", &masters).await;
    assert_eq!(code, 403, "anonymous, whatever the headers say: {v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .contains("system:anonymous"),
        "{v}"
    );
    let (code, _) = over(
        &mut net,
        "/api/v1/secrets",
        &[
            ("authorization", "Bearer admin-token"),
            ("x-remote-user", "alice"),
        ],
    )
    .await;
    assert_eq!(code, 200, "the token's user, not the header's");
    // Nor over HTTP/1.1.
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut h1, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = Request::builder()
        .uri("/api/v1/secrets")
        .header("host", addr.to_string())
        .header("x-remote-user", "root")
        .header("x-remote-group", "system:masters")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = h1.send_request(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 403, "anonymous over HTTP/1.1 too");
}

/// A watch made in-process streams its events into the body its caller polls, and ends
/// when the caller drops that body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_process_watch_ends_when_its_body_is_dropped() {
    let h = Memory.start(ServerConfig::default()).await;
    let srv = &h.srv;
    let handle = apiserver::server::in_process::handler(srv.clone());
    let admin = |method: Method, path: &str, body: Option<Value>| {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("http://in-process{path}"))
            .header("x-remote-user", "admin")
            .header("x-remote-group", "system:masters");
        if body.is_some() {
            b = b.header("content-type", "application/json");
        }
        let payload = body.map_or_else(Bytes::new, |v| Bytes::from(v.to_string()));
        b.body(Full::new(payload)).unwrap()
    };
    let watching = || {
        let text = srv.metrics().render();
        text.lines()
            .filter(|l| {
                l.starts_with("apiserver_longrunning_requests{") && l.contains("configmaps")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
            .sum::<i64>()
    };
    let resp = handle(admin(
        Method::GET,
        "/api/v1/namespaces/default/configmaps?watch=1",
        None,
    ))
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    assert_eq!(watching(), 1);
    let created = handle(admin(
        Method::POST,
        "/api/v1/namespaces/default/configmaps",
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})),
    ))
    .await;
    assert_eq!(created.status(), 201);
    let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("an event")
        .unwrap()
        .unwrap();
    let line: Value = serde_json::from_slice(frame.data_ref().unwrap()).unwrap();
    assert_eq!(line["type"], "ADDED");
    assert_eq!(line["object"]["metadata"]["name"], "a");
    drop(body);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while watching() != 0 {
        assert!(std::time::Instant::now() < deadline, "the watch still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
