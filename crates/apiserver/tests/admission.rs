//! Admission over the HTTP handler, as kube-apiserver 1.32 admits: ServiceAccount (the
//! `default` account and its projected token), LimitRanger (defaults, bounds) and
//! ResourceQuota (refusals, charges, racing creates). Nothing here runs a controller-manager:
//! the ResourceQuota status a controller would fill in is written by the test.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn pod_with(name: &str, containers: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": containers}})
}

/// Waits until the server has created namespace `ns`'s `default` ServiceAccount.
async fn default_account(
    srv: &std::sync::Arc<apiserver::handlers::state::ApiServer>,
    ns: &str,
) -> Value {
    let t = Instant::now();
    loop {
        let (code, v) = get(
            srv,
            &format!("/api/v1/namespaces/{ns}/serviceaccounts/default"),
        )
        .await;
        if code == 200 {
            return v;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no default ServiceAccount in {ns}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_as_an_existing_service_account_with_its_token_mounted() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    create_namespace(srv, "team").await;
    // A pod created at once after its namespace waits for the default account.
    let p = ok(
        "pod",
        post(srv, "/api/v1/namespaces/team/pods", &pod("p", "")).await,
    );
    default_account(srv, "team").await;
    assert_eq!(p["spec"]["serviceAccountName"], "default");
    assert_eq!(p["spec"]["serviceAccount"], "default");
    let volume = &p["spec"]["volumes"][0];
    let vname = volume["name"].as_str().unwrap_or("");
    assert!(vname.starts_with("kube-api-access-"), "{p}");
    assert_eq!(
        volume["projected"]["sources"][0]["serviceAccountToken"],
        json!({"expirationSeconds": 3607, "path": "token"})
    );
    assert_eq!(
        p["spec"]["containers"][0]["volumeMounts"][0],
        json!({"name": vname, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    );

    // An account that does not exist: 403, nothing stored.
    let mut ghost = pod("ghost", "");
    ghost["spec"]["serviceAccountName"] = json!("nobody");
    let (code, v) = post(srv, "/api/v1/namespaces/team/pods", &ghost).await;
    assert_status("missing account", code, &v, 403, "Forbidden");
    assert_eq!(
        v["message"],
        "pods \"ghost\" is forbidden: error looking up service account team/nobody: serviceaccount \"nobody\" not found"
    );
    let (code, _) = get(srv, "/api/v1/namespaces/team/pods/ghost").await;
    assert_eq!(code, 404);

    // An account that opts out mounts nothing; a pod that opts in again does.
    ok(
        "robot",
        post(
            srv,
            "/api/v1/namespaces/team/serviceaccounts",
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"},
                "automountServiceAccountToken": false}),
        )
        .await,
    );
    let mut quiet = pod("quiet", "");
    quiet["spec"]["serviceAccountName"] = json!("robot");
    let q = ok(
        "quiet",
        post(srv, "/api/v1/namespaces/team/pods", &quiet).await,
    );
    assert!(q["spec"].get("volumes").is_none(), "{q}");
    let mut loud = quiet.clone();
    loud["metadata"]["name"] = json!("loud");
    loud["spec"]["automountServiceAccountToken"] = json!(true);
    let l = ok(
        "loud",
        post(srv, "/api/v1/namespaces/team/pods", &loud).await,
    );
    assert_eq!(l["spec"]["volumes"].as_array().map(Vec::len), Some(1));

    // The deleted default account comes back, as the controller-manager would bring it.
    ok(
        "delete",
        delete(srv, "/api/v1/namespaces/team/serviceaccounts/default").await,
    );
    let back = default_account(srv, "team").await;
    assert_eq!(back["metadata"]["name"], "default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_ranges_default_and_bound_containers() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    create_namespace(srv, "lr").await;
    default_account(srv, "lr").await;
    let range = ok(
        "limitrange",
        post(
            srv,
            "/api/v1/namespaces/lr/limitranges",
            &json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "bounds"},
                "spec": {"limits": [{"type": "Container",
                    "max": {"cpu": "1"}, "min": {"cpu": "50m"},
                    "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "100m", "memory": "64Mi"}}]}}),
        )
        .await,
    );
    // Stored with its item's defaults filled in.
    assert_eq!(
        range["spec"]["limits"][0]["default"],
        json!({"cpu": "500m"})
    );
    // The range applies once the watch cache holds it.
    let t = Instant::now();
    let mut n = 0;
    let p = loop {
        n += 1;
        let (code, v) = post(
            srv,
            "/api/v1/namespaces/lr/pods",
            &pod_with(&format!("p{n}"), json!([{"name": "c", "image": "x"}])),
        )
        .await;
        assert_eq!(code, 201, "{v}");
        if v["spec"]["containers"][0]["resources"]["limits"].is_object() {
            break v;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the LimitRange never applied: {v}"
        );
    };
    assert_eq!(
        p["spec"]["containers"][0]["resources"],
        json!({"limits": {"cpu": "500m"}, "requests": {"cpu": "100m", "memory": "64Mi"}})
    );
    assert_eq!(
        p["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu, memory request for container c; cpu limit for container c"
    );
    let (code, v) = post(
        srv,
        "/api/v1/namespaces/lr/pods",
        &pod_with(
            "big",
            json!([{"name": "c", "image": "x", "resources": {"requests": {"cpu": "10m"}, "limits": {"cpu": "2"}}}]),
        ),
    )
    .await;
    assert_status("out of range", code, &v, 403, "Forbidden");
    assert_eq!(
        v["message"],
        "pods \"big\" is forbidden: [minimum cpu usage per Container is 50m, but request is 10m, maximum cpu usage per Container is 1, but limit is 2]"
    );
    let (code, _) = get(srv, "/api/v1/namespaces/lr/pods/big").await;
    assert_eq!(code, 404);
}

/// Writes quota `name`'s status as the ResourceQuota controller would.
async fn fill_quota_status(
    srv: &std::sync::Arc<apiserver::handlers::state::ApiServer>,
    ns: &str,
    name: &str,
    used: Value,
) {
    let uri = format!("/api/v1/namespaces/{ns}/resourcequotas/{name}");
    let mut q = ok("get quota", get(srv, &uri).await);
    q["status"] = json!({"hard": q["spec"]["hard"], "used": used});
    ok("quota status", put(srv, &format!("{uri}/status"), &q).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_refuse_what_exceeds_them_and_charge_what_fits() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    create_namespace(srv, "q").await;
    default_account(srv, "q").await;
    let quotas = "/api/v1/namespaces/q/resourcequotas";
    ok(
        "quota",
        post(
            srv,
            quotas,
            &json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"},
                "spec": {"hard": {"pods": "3", "requests.cpu": "1", "count/configmaps": "2"}}}),
        )
        .await,
    );
    let cpu_pod = |name: &str, cpu: &str| {
        pod_with(
            name,
            json!([{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]),
        )
    };
    // Until a controller has counted the namespace, the quota's usage is unknown.
    // (Once the quota has reached the watch cache: a create admitted before that is
    // deleted again.)
    let t = Instant::now();
    for n in 0.. {
        let name = format!("early{n}");
        let (code, v) = post(srv, "/api/v1/namespaces/q/pods", &cpu_pod(&name, "100m")).await;
        if code == 201 {
            ok(
                "delete",
                delete(srv, &format!("/api/v1/namespaces/q/pods/{name}")).await,
            );
        }
        if v["message"]
            .as_str()
            .unwrap_or("")
            .contains("status unknown for quota: compute")
        {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fill_quota_status(
        srv,
        "q",
        "compute",
        json!({"pods": "0", "requests.cpu": "0", "count/configmaps": "0"}),
    )
    .await;

    ok(
        "a",
        post(srv, "/api/v1/namespaces/q/pods", &cpu_pod("a", "400m")).await,
    );
    let q = ok("quota", get(srv, &format!("{quotas}/compute")).await);
    assert_eq!(
        q["status"]["used"],
        json!({"pods": "1", "requests.cpu": "400m", "count/configmaps": "0"})
    );

    // A pod that states no CPU request is refused rather than let through uncounted.
    let (code, v) = post(srv, "/api/v1/namespaces/q/pods", &pod("bare", "")).await;
    assert_status("no request", code, &v, 403, "Forbidden");
    assert_eq!(
        v["message"],
        "pods \"bare\" is forbidden: failed quota: compute: must specify requests.cpu for: c"
    );

    let (code, v) = post(srv, "/api/v1/namespaces/q/pods", &cpu_pod("huge", "700m")).await;
    assert_status("too much", code, &v, 403, "Forbidden");
    assert_eq!(
        v["message"],
        "pods \"huge\" is forbidden: exceeded quota: compute, requested: requests.cpu=700m, used: requests.cpu=400m, limited: requests.cpu=1"
    );

    // A dry run is decided but not charged.
    let (code, _) = post(
        srv,
        "/api/v1/namespaces/q/pods?dryRun=All",
        &cpu_pod("dry", "100m"),
    )
    .await;
    assert_eq!(code, 201);
    let q = ok("quota", get(srv, &format!("{quotas}/compute")).await);
    assert_eq!(q["status"]["used"]["requests.cpu"], "400m");

    // Ten creates race for the two pods left: exactly two win.
    let mut tasks = Vec::new();
    for i in 0..10 {
        let srv = srv.clone();
        tasks.push(tokio::spawn(async move {
            post(
                &srv,
                "/api/v1/namespaces/q/pods",
                &cpu_pod(&format!("r{i}"), "100m"),
            )
            .await
            .0
        }));
    }
    let mut won = 0;
    for t in tasks {
        if t.await.map(|c| c == 201).unwrap_or(false) {
            won += 1;
        }
    }
    assert_eq!(won, 2);
    let q = ok("quota", get(srv, &format!("{quotas}/compute")).await);
    assert_eq!(q["status"]["used"]["pods"], "3");
    assert_eq!(q["status"]["used"]["requests.cpu"], "600m");

    // Other kinds count under count/…; a kind the quota does not name is not limited.
    for name in ["c1", "c2"] {
        ok(
            "cm",
            post(
                srv,
                "/api/v1/namespaces/q/configmaps",
                &configmap(name, json!({}), json!({})),
            )
            .await,
        );
    }
    let (code, v) = post(
        srv,
        "/api/v1/namespaces/q/configmaps",
        &configmap("c3", json!({}), json!({})),
    )
    .await;
    assert_status("third configmap", code, &v, 403, "Forbidden");
    ok(
        "secret",
        post(
            srv,
            "/api/v1/namespaces/q/secrets",
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
        )
        .await,
    );
}

fn deployment(name: &str, replicas: i64, labels: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validating_admission_policies_deny_warn_and_take_parameters() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    for ns in ["test", "prod"] {
        ok(
            "namespace",
            post(
                srv,
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": ns, "labels": {"environment": ns}}}),
            )
            .await,
        );
    }
    let vap = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
    let vapb = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";
    // A policy that does not compile is refused.
    let (code, v) = post(
        srv,
        vap,
        &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "broken"},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["deployments"]}]},
                "validations": [{"expression": "object.spec.replicas <="}]}}),
    )
    .await;
    assert_status("broken policy", code, &v, 422, "Invalid");
    let policy = ok(
        "policy",
        post(
            srv,
            vap,
            &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": "replica-limit"},
                "spec": {
                    "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                    "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
                    "matchConditions": [{"name": "not-exempt",
                        "expression": "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"}],
                    "variables": [{"name": "limit", "expression": "int(params.data.maxReplicas)"}],
                    "validations": [
                        {"expression": "object.spec.replicas <= variables.limit",
                         "messageExpression": "'replicas must be at most ' + string(variables.limit)"},
                        {"expression": "object.metadata.name != 'forbidden'", "reason": "Forbidden"}
                    ]}}),
        )
        .await,
    );
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    ok(
        "params",
        post(
            srv,
            "/api/v1/namespaces/test/configmaps",
            &configmap("limits", json!({}), json!({"maxReplicas": "5"})),
        )
        .await,
    );
    ok(
        "binding",
        post(
            srv,
            vapb,
            &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": "replica-limit-test"},
                "spec": {"policyName": "replica-limit", "validationActions": ["Deny"],
                    "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"},
                    "matchResources": {"namespaceSelector": {"matchLabels": {"environment": "test"}}}}}),
        )
        .await,
    );
    // Once the binding is in the caches, six replicas are refused in `test`.
    let deploys = "/apis/apps/v1/namespaces/test/deployments";
    let t = Instant::now();
    let refused = loop {
        let (code, v) = post(srv, deploys, &deployment("six", 6, json!({}))).await;
        if code == 201 {
            ok("delete", delete(srv, &format!("{deploys}/six")).await);
        } else {
            break v;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "never refused: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(refused["code"], 422, "{refused}");
    assert_eq!(refused["reason"], "Invalid");
    assert_eq!(
        refused["message"],
        "deployments.apps \"six\" is forbidden: ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-test' denied request: replicas must be at most 5"
    );
    // Five pass; scaling the five past the limit by an update is refused too.
    let five = ok(
        "five",
        post(srv, deploys, &deployment("five", 5, json!({}))).await,
    );
    let mut more = five.clone();
    more["spec"]["replicas"] = json!(7);
    let (code, v) = put(srv, &format!("{deploys}/five"), &more).await;
    assert_eq!(code, 422, "{v}");
    // A validation's own reason; a match condition that exempts; other namespaces untouched.
    let (code, v) = post(srv, deploys, &deployment("forbidden", 1, json!({}))).await;
    assert_status("reason", code, &v, 403, "Forbidden");
    ok(
        "exempt",
        post(
            srv,
            deploys,
            &deployment("big", 9, json!({"exempt": "yes"})),
        )
        .await,
    );
    ok(
        "prod",
        post(
            srv,
            "/apis/apps/v1/namespaces/prod/deployments",
            &deployment("six", 6, json!({})),
        )
        .await,
    );
    // Without its parameter the binding refuses (parameterNotFoundAction: Deny).
    ok(
        "delete params",
        delete(srv, "/api/v1/namespaces/test/configmaps/limits").await,
    );
    let t = Instant::now();
    let v = loop {
        let (code, v) = post(srv, deploys, &deployment("one", 1, json!({}))).await;
        if code == 201 {
            ok("delete", delete(srv, &format!("{deploys}/one")).await);
        } else {
            break v;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "never refused: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .ends_with("no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{v}"
    );

    // Warn instead of Deny: admitted, with a Warning header.
    ok(
        "delete binding",
        delete(srv, &format!("{vapb}/replica-limit-test")).await,
    );
    ok(
        "warn binding",
        post(
            srv,
            vapb,
            &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": "replica-limit-warn"},
                "spec": {"policyName": "replica-limit", "validationActions": ["Warn"],
                    "paramRef": {"name": "limits", "namespace": "prod", "parameterNotFoundAction": "Deny"}}}),
        )
        .await,
    );
    ok(
        "prod params",
        post(
            srv,
            "/api/v1/namespaces/prod/configmaps",
            &configmap("limits", json!({}), json!({"maxReplicas": "2"})),
        )
        .await,
    );
    let t = Instant::now();
    loop {
        let body = deployment(&format!("w{}", t.elapsed().as_micros()), 3, json!({}));
        let resp = send(
            srv,
            http::Method::POST,
            deploys,
            Some("application/json"),
            body.to_string(),
        )
        .await;
        if resp.status() != 201 {
            // The deleted Deny binding may refuse until the policy cache hears of it.
            let code = resp.status();
            let body = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                .unwrap_or_default();
            assert!(
                body.contains("no params found for policy binding"),
                "{code}: {body}"
            );
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "still refused by the deleted binding: {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let warning = resp
            .headers()
            .get("warning")
            .and_then(|w| w.to_str().ok())
            .unwrap_or("")
            .to_string();
        if warning.contains("Validation failed for ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-warn': replicas must be at most 2") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no warning: {warning:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
