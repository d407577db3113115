//! Users, ServiceAccounts and RBAC as kubectl and our client meet them over TLS: the
//! issue's findings replayed (a certificate user bound to one Role), `kubectl auth whoami`,
//! `auth can-i --as` and `--list`, `kubectl create token` and its token used by kubectl and
//! our client until its ServiceAccount is deleted, a token file, and one user flooding the
//! server with LISTs while another's requests still succeed.

mod common;

use client::rest::{Auth, Client, Config};
use common::TestServer;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// A kubeconfig for the TLS port authenticating with a client certificate for `user` in
/// `group`, issued by the server's CA.
fn cert_kubeconfig(srv: &TestServer, user: &str, group: Option<&str>) -> PathBuf {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_listwatch"));
    cmd.args(["kubeconfig", "--server", &srv.https_url, "--data-dir"])
        .arg(srv.dir().join("data"))
        .args(["--client-cert", "--user", user]);
    if let Some(g) = group {
        cmd.args(["--group", g]);
    }
    let out = cmd.output().expect("running listwatch kubeconfig");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = srv.dir().join(format!("kubeconfig-{user}"));
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

fn as_kc(kc: &std::path::Path) -> String {
    format!("--kubeconfig={}", kc.display())
}

#[test]
fn a_certificate_user_gets_what_rbac_grants_and_nothing_more() {
    let srv = TestServer::start();
    let alice = as_kc(&cert_kubeconfig(&srv, "alice", Some("developers")));
    srv.kubectl_ok(&[
        "create",
        "role",
        "cm-get",
        "-n",
        "default",
        "--verb=get",
        "--resource=configmaps",
    ]);
    srv.kubectl_ok(&[
        "create",
        "rolebinding",
        "alice-cm",
        "-n",
        "default",
        "--role=cm-get",
        "--user=alice",
    ]);
    srv.kubectl_ok(&["create", "configmap", "c1", "-n", "default"]);
    srv.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "s1",
        "-n",
        "kube-system",
        "--from-literal=k=v",
    ]);

    let who = srv.kubectl_ok(&[&alice, "auth", "whoami", "-o", "json"]);
    let who: serde_json::Value = serde_json::from_str(&who).unwrap();
    assert_eq!(who["status"]["userInfo"]["username"], "alice");
    assert_eq!(
        who["status"]["userInfo"]["groups"],
        serde_json::json!(["developers", "system:authenticated"])
    );
    srv.kubectl_ok(&[&alice, "get", "configmap", "c1", "-n", "default"]);
    let err = srv.kubectl_err(&[&alice, "get", "secret", "s1", "-n", "kube-system"]);
    assert!(
        err.contains("secrets \"s1\" is forbidden: User \"alice\" cannot get resource \"secrets\" in API group \"\" in the namespace \"kube-system\""),
        "{err}"
    );
    let err = srv.kubectl_err(&[&alice, "delete", "rolebinding", "alice-cm", "-n", "default"]);
    assert!(
        err.contains("cannot delete resource \"rolebindings\""),
        "{err}"
    );
    srv.kubectl_ok(&["get", "rolebinding", "alice-cm", "-n", "default"]);
    let err = srv.kubectl_err(&[&alice, "get", "configmaps", "-n", "default"]);
    assert!(err.contains("cannot list resource \"configmaps\""), "{err}");
    let err = srv.kubectl_err(&[&alice, "get", "configmaps", "-n", "default", "--as", "bob"]);
    assert!(
        err.contains("cannot impersonate resource \"users\""),
        "{err}"
    );

    // can-i, for herself and (as the admin) for her.
    let can = |args: &[&str]| srv.kubectl(args).stdout;
    assert_eq!(
        can(&[
            &alice,
            "auth",
            "can-i",
            "get",
            "configmaps",
            "-n",
            "default"
        ]),
        b"yes\n"
    );
    assert_eq!(
        can(&[
            &alice,
            "auth",
            "can-i",
            "list",
            "configmaps",
            "-n",
            "default"
        ]),
        b"no\n"
    );
    assert_eq!(
        can(&[
            "auth",
            "can-i",
            "get",
            "configmaps/c1",
            "-n",
            "default",
            "--as",
            "alice"
        ]),
        b"yes\n"
    );
    assert_eq!(
        can(&[
            "auth",
            "can-i",
            "delete",
            "secrets",
            "-n",
            "kube-system",
            "--as",
            "alice"
        ]),
        b"no\n"
    );
    assert_eq!(
        can(&[
            "auth",
            "can-i",
            "delete",
            "secrets",
            "-n",
            "kube-system",
            "--as",
            "alice",
            "--as-group",
            "system:masters"
        ]),
        b"yes\n"
    );
    let list = srv.kubectl_ok(&[&alice, "auth", "can-i", "--list", "-n", "default"]);
    let line = list
        .lines()
        .find(|l| l.starts_with("configmaps "))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(line.contains("[get]"), "{line}");
    assert!(!list.contains("secrets"), "{list}");
    // The admin certificate is still the admin.
    let admin = as_kc(&cert_kubeconfig(&srv, "root", Some("system:masters")));
    srv.kubectl_ok(&[&admin, "get", "secret", "s1", "-n", "kube-system"]);
}

/// Runs kubectl against the TLS port with a bearer token (no kubeconfig user).
fn kubectl_with_token(srv: &TestServer, token: &str, args: &[&str]) -> std::process::Output {
    let ca = srv.dir().join("data").join("pki").join("ca.crt");
    srv.kubectl_cmd(args)
        .env("KUBECONFIG", "/dev/null")
        .arg(format!("--server={}", srv.https_url))
        .arg(format!("--certificate-authority={}", ca.display()))
        .arg(format!("--token={token}"))
        .output()
        .expect("running kubectl")
}

fn client_with_token(srv: &TestServer, token: &str) -> Client {
    let mut config = Config::from_kubeconfig_file(srv.tls_kubeconfig(), None).unwrap();
    config.auth = Auth::Bearer(token.to_string());
    Client::new(config).unwrap()
}

#[test]
fn kubectl_create_token_and_its_service_account() {
    let srv = TestServer::start();
    srv.kubectl_ok(&["create", "serviceaccount", "bot", "-n", "default"]);
    srv.kubectl_ok(&[
        "create",
        "rolebinding",
        "bot-view",
        "-n",
        "default",
        "--clusterrole=view",
        "--serviceaccount=default:bot",
    ]);
    let token = srv.kubectl_ok(&["create", "token", "bot", "-n", "default", "--duration=20m"]);
    let token = token.trim();
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    let out = kubectl_with_token(
        &srv,
        token,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "system:serviceaccount:default:bot"
    );
    let out = kubectl_with_token(
        &srv,
        token,
        &["get", "serviceaccounts", "-n", "default", "-o", "name"],
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("serviceaccount/bot"),
        "{out:?}"
    );
    let out = kubectl_with_token(&srv, token, &["create", "configmap", "x", "-n", "default"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("forbidden"),
        "{out:?}"
    );
    let out = kubectl_with_token(
        &srv,
        token,
        &["auth", "can-i", "list", "pods", "-n", "kube-system"],
    );
    assert_eq!(out.stdout, b"no\n");

    // Our own client with the same token: the view role's reads and nothing more.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = client_with_token(&srv, token);
        c.request_bytes(http::Method::GET, "/api/v1/namespaces/default/pods", None)
            .await
            .unwrap();
        let e = c
            .request_bytes(
                http::Method::GET,
                "/api/v1/namespaces/kube-system/pods",
                None,
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("forbidden"), "{e}");
    });

    // A token altered by one character, and a token for a ServiceAccount that is gone.
    let mut tampered = token.to_string();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let out = kubectl_with_token(&srv, &tampered, &["get", "pods", "-n", "default"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
        "{out:?}"
    );
    srv.kubectl_ok(&["delete", "serviceaccount", "bot", "-n", "default"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let out = kubectl_with_token(&srv, token, &["get", "pods", "-n", "default"]);
        if String::from_utf8_lossy(&out.stderr).contains("Unauthorized") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the token outlived its ServiceAccount: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let err = srv.kubectl_err(&["create", "token", "ghost", "-n", "default"]);
    assert!(err.contains("not found"), "{err}");
}

#[test]
fn a_token_file_user_and_one_user_flooding_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "flood-token,flooder,1\nquiet-token,quiet,2,\"readers\"\n",
    )
    .unwrap();
    let srv = TestServer::start_in(
        dir,
        &[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            // Few seats, so that the flood fills them.
            "--max-requests-inflight",
            "20",
            "--max-mutating-requests-inflight",
            "10",
        ],
    );
    srv.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "all-read",
        "--clusterrole=view",
        "--user=flooder",
        "--group=readers",
    ]);
    for i in 0..200 {
        srv.kubectl_ok(&[
            "create",
            "configmap",
            &format!("cm-{i}"),
            "-n",
            "default",
            "--from-literal=k=v",
        ]);
    }
    let out = kubectl_with_token(
        &srv,
        "quiet-token",
        &["get", "configmaps", "-n", "default", "-o", "name"],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).lines().count() >= 200,
        "{out:?}"
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let flooder = client_with_token(&srv, "flood-token");
        let quiet = client_with_token(&srv, "quiet-token");
        quiet
            .request_bytes(
                http::Method::GET,
                "/api/v1/namespaces/default/configmaps",
                None,
            )
            .await
            .unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flood: Vec<_> = (0..1000)
            .map(|_| {
                let c = flooder.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut done = 0u32;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if c.request_bytes(http::Method::GET, "/api/v1/configmaps", None)
                            .await
                            .is_ok()
                        {
                            done += 1;
                        }
                    }
                    done
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut latencies = Vec::new();
        for _ in 0..100 {
            let t = Instant::now();
            let r = quiet
                .request_bytes(
                    http::Method::GET,
                    "/api/v1/namespaces/default/configmaps/cm-7",
                    None,
                )
                .await;
            latencies.push(t.elapsed());
            r.expect("the quiet user's request fails under the flood");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut served = 0;
        for f in flood {
            served += f.await.unwrap();
        }
        latencies.sort();
        eprintln!(
            "flood: {served} LISTs served; quiet user's 100 GETs: p50 {:?}, p99 {:?}, max {:?}",
            latencies[49], latencies[98], latencies[99]
        );
        assert!(served > 0, "the flooder is served too, within its share");
    });
    // The server still answers, and counted the shed requests.
    srv.kubectl_ok(&["get", "--raw", "/readyz"]);
}

/// Under `listwatch up` the control plane runs under least-privilege identities, as the
/// audit log shows: each node agent speaks as its node (the Lease renewals and pod status
/// writes of `node-N` are made by `system:node:node-N` and no other node), the scheduler
/// binds as `system:kube-scheduler`, and each controller writes as its own ServiceAccount
/// (ReplicaSets of a Deployment by `deployment-controller`, their pods by
/// `replicaset-controller`), which may not do what its role does not allow.
#[test]
fn the_control_plane_of_up_runs_as_least_privileged_identities() {
    let audit_dir = tempfile::tempdir().expect("temp dir");
    let log = audit_dir.path().join("audit.log");
    let policy = audit_dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
    )
    .expect("writing the audit policy");
    let srv = TestServer::start_up(
        2,
        &[
            "--audit-log-path",
            log.to_str().expect("utf-8 path"),
            "--audit-policy-file",
            policy.to_str().expect("utf-8 path"),
        ],
    );
    let kc = srv.kubeconfig();
    let kubectl = |args: &[&str]| {
        Command::new(common::KUBECTL)
            .arg(format!("--kubeconfig={}", kc.display()))
            .args(args)
            .output()
            .expect("running kubectl")
    };
    let out = kubectl(&["run", "p", "--image=nginx"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl(&[
        "create",
        "deployment",
        "web",
        "--image=nginx",
        "--replicas=2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = Instant::now();
    let (leases, pod_status) = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let events: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|e: &serde_json::Value| e["stage"] == "ResponseComplete")
            .collect();
        let by = |resource: &str, sub: Option<&str>| -> Vec<(String, String)> {
            events
                .iter()
                .filter(|e| {
                    e["objectRef"]["resource"] == resource
                        && e["objectRef"]["subresource"].as_str() == sub
                        && ["update", "patch"].contains(&e["verb"].as_str().unwrap_or(""))
                })
                .map(|e| {
                    (
                        e["user"]["username"].as_str().unwrap_or("").to_string(),
                        e["objectRef"]["name"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        };
        let (leases, pod_status) = (by("leases", None), by("pods", Some("status")));
        if leases.iter().any(|(_, n)| n == "node-0")
            && leases.iter().any(|(_, n)| n == "node-1")
            && !pod_status.is_empty()
        {
            break (leases, pod_status);
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no lease renewals or pod status in the audit log: {leases:?} {pod_status:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for (user, lease) in &leases {
        if lease.starts_with("node-") {
            assert_eq!(user, &format!("system:node:{lease}"), "{leases:?}");
        }
    }
    // The controllers' and the scheduler's writes, once the deployment's pods are bound.
    let t = Instant::now();
    let writes = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let writes: Vec<(String, String, String, String)> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["stage"] == "ResponseComplete" && e["responseStatus"]["code"] == 201)
            .map(|e| {
                let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
                (
                    s(&e["user"]["username"]),
                    s(&e["verb"]),
                    s(&e["objectRef"]["resource"]),
                    s(&e["objectRef"]["subresource"]),
                )
            })
            .collect();
        let bindings = writes
            .iter()
            .filter(|(_, _, r, sub)| r == "pods" && sub == "binding")
            .count();
        if bindings >= 3 {
            break writes;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the deployment's pods were not bound: {writes:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let by = |resource: &str, sub: &str| -> Vec<&str> {
        writes
            .iter()
            .filter(|(_, v, r, s)| v == "create" && r == resource && s == sub)
            .map(|(u, ..)| u.as_str())
            .collect()
    };
    assert_eq!(
        by("replicasets", ""),
        vec!["system:serviceaccount:kube-system:deployment-controller"]
    );
    let pod_creators = by("pods", "");
    assert_eq!(pod_creators.len(), 3, "{writes:?}");
    assert_eq!(
        pod_creators
            .iter()
            .filter(|u| **u == "system:serviceaccount:kube-system:replicaset-controller")
            .count(),
        2,
        "{writes:?}"
    );
    assert!(
        by("pods", "binding")
            .iter()
            .all(|u| *u == "system:kube-scheduler"),
        "{writes:?}"
    );
    // Each controller holds its own role and no more.
    for (verb, resource, want) in [
        ("create", "pods", "yes"),
        ("delete", "pods", "yes"),
        ("get", "secrets", "no"),
        ("create", "deployments.apps", "no"),
        (
            "create",
            "clusterrolebindings.rbac.authorization.k8s.io",
            "no",
        ),
    ] {
        let out = kubectl(&[
            "auth",
            "can-i",
            verb,
            resource,
            "--as=system:serviceaccount:kube-system:replicaset-controller",
        ]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            want,
            "replicaset-controller {verb} {resource}"
        );
    }
    let out = kubectl(&["get", "pod", "p", "-o", "jsonpath={.spec.nodeName}"]);
    let node = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(node.starts_with("node-"), "{node}");
    // The pod's status is written by its node (and possibly by the scheduler, while no node
    // was ready), never by another node or the admin.
    let own = format!("system:node:{node}");
    let writers: Vec<&str> = pod_status
        .iter()
        .filter(|(_, pod)| pod == "p")
        .map(|(user, _)| user.as_str())
        .collect();
    assert!(writers.contains(&own.as_str()), "{pod_status:?}");
    assert!(
        writers
            .iter()
            .all(|u| *u == own || *u == "system:kube-scheduler"),
        "{pod_status:?}"
    );
}
