//! TLS and authentication of `listwatch serve`: the real kubectl 1.32 over https with the
//! generated kubeconfig (token or client certificate), 401 without or with a wrong token,
//! client certificates of a foreign CA refused, handshake garbage, and the loopback-only
//! rule of `--insecure-bind`.

mod common;

use bytes::Bytes;
use common::TestServer;
use http_body_util::{BodyExt, Full};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn host_port(url: &str) -> String {
    url.trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

fn ca_and_token(srv: &TestServer) -> (String, String) {
    let pki = srv.dir().join("data").join("pki");
    (
        std::fs::read_to_string(pki.join("ca.crt")).unwrap(),
        std::fs::read_to_string(pki.join("admin.token"))
            .unwrap()
            .trim()
            .to_string(),
    )
}

/// A client trusting `ca_pem`, offering `alpn`, presenting the PEM `(cert, key)` if given.
fn client_config(
    ca_pem: &str,
    alpn: &[&[u8]],
    cert_and_key: Option<(&str, &str)>,
) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::PrivateKeyDer;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut cfg = match cert_and_key {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

/// One GET over TLS; returns (negotiated ALPN, status, body).
async fn tls_get(
    addr: &str,
    ca_pem: &str,
    alpn: &[&[u8]],
    path: &str,
    token: Option<&str>,
) -> (Option<Vec<u8>>, u16, Bytes) {
    tls_request(addr, ca_pem, alpn, "GET", path, token, Bytes::new()).await
}

/// One request over TLS, its body sent without a content type; returns (negotiated ALPN,
/// status, body).
async fn tls_request(
    addr: &str,
    ca_pem: &str,
    alpn: &[&[u8]],
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Bytes,
) -> (Option<Vec<u8>>, u16, Bytes) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(client_config(ca_pem, alpn, None));
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let negotiated = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    let io = hyper_util::rt::TokioIo::new(tls);
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("https://{addr}{path}"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req.body(Full::new(body)).unwrap();
    let resp = if negotiated.as_deref() == Some(b"h2") {
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .unwrap();
        tokio::spawn(conn);
        send.send_request(req).await.unwrap()
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        send.send_request(req).await.unwrap()
    };
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (negotiated, code, body)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Without credentials a request runs as `system:anonymous`, whom the default policy lets
/// read only health and version (403 elsewhere, as kube-apiserver with anonymous auth);
/// a wrong token is a 401.
#[test]
fn tokens_are_required_over_tls_except_for_health_and_version() {
    let srv = TestServer::start();
    let addr = host_port(&srv.https_url);
    let (ca, token) = ca_and_token(&srv);
    rt().block_on(async {
        for alpn in [&[&b"h2"[..]][..], &[&b"http/1.1"[..]][..]] {
            let (proto, code, body) = tls_get(&addr, &ca, alpn, "/api/v1/namespaces", None).await;
            assert_eq!(proto.as_deref(), Some(alpn[0]), "ALPN");
            assert_eq!(code, 403, "no token: anonymous");
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["kind"], "Status");
            assert_eq!(v["reason"], "Forbidden");
            assert_eq!(
                v["message"],
                "namespaces is forbidden: User \"system:anonymous\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"
            );
            let (_, code, body) = tls_get(
                &addr,
                &ca,
                alpn,
                "/api/v1/namespaces",
                Some("not-the-token"),
            )
            .await;
            assert_eq!(code, 401, "wrong token");
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!((&v["reason"], &v["code"]), (&"Unauthorized".into(), &401.into()));
            let (_, code, body) =
                tls_get(&addr, &ca, alpn, "/api/v1/namespaces", Some(&token)).await;
            assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
            for open in ["/healthz", "/livez", "/readyz", "/version"] {
                let (_, code, _) = tls_get(&addr, &ca, alpn, open, None).await;
                assert_eq!(code, 200, "{open} needs no token");
            }
        }
        // The insecure port needs no token.
        let (code, _) = {
            let (c, v) = tokio::task::spawn_blocking({
                let url = format!("{}/api/v1/namespaces", srv.url);
                move || common::http_json("GET", &url, None)
            })
            .await
            .unwrap();
            (c, v)
        };
        assert_eq!(code, 200);
    });
}

#[test]
fn handshake_garbage_closes_the_connection_and_the_server_lives_on() {
    let srv = TestServer::start();
    let addr = host_port(&srv.https_url);
    let (ca, token) = ca_and_token(&srv);
    rt().block_on(async {
        for garbage in [
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            &[0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3, 4, 5][..],
            &[0u8; 4096][..],
        ] {
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let _ = s.write_all(garbage).await;
            let mut buf = [0u8; 1024];
            // The server answers with at most a TLS alert, then closes.
            let closed = tokio::time::timeout(Duration::from_secs(15), async {
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
            })
            .await;
            assert!(closed.is_ok(), "connection not closed after garbage");
        }
        // A client that connects and says nothing does not block others.
        let _idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let (_, code, _) = tls_get(&addr, &ca, &[b"h2"], "/api/v1/namespaces", Some(&token)).await;
        assert_eq!(code, 200);
    });
}

#[test]
fn untyped_writes_are_json_over_tls_and_refused_on_the_plain_port() {
    let srv = TestServer::start();
    let addr = host_port(&srv.https_url);
    let plain = host_port(&srv.url);
    let (ca, token) = ca_and_token(&srv);
    let path = "/api/v1/namespaces/default/configmaps";
    let cm = |name: &str| {
        Bytes::from(format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}}}}"#
        ))
    };
    rt().block_on(async {
        // Over TLS a body without a content type is read as JSON, as kube-apiserver does.
        for (alpn, name) in [(&b"h2"[..], "untyped-h2"), (&b"http/1.1"[..], "untyped-h1")] {
            let (_, code, body) =
                tls_request(&addr, &ca, &[alpn], "POST", path, Some(&token), cm(name)).await;
            assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
        }
        // The plain port refuses it (a web page's no-cors POST looks like that), and
        // requests for a host that is not a loopback one.
        for (extra, code) in [
            (format!("Host: {plain}\r\n"), "415"),
            (
                format!("Host: {plain}\r\nOrigin: http://evil.example\r\n"),
                "403",
            ),
            (
                "Host: evil.example\r\nContent-Type: application/json\r\n".to_string(),
                "403",
            ),
        ] {
            let body = cm("from-a-page");
            let mut s = tokio::net::TcpStream::connect(&plain).await.unwrap();
            let req = format!(
                "POST {path} HTTP/1.1\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            s.write_all(req.as_bytes()).await.unwrap();
            s.write_all(&body).await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            let got = String::from_utf8_lossy(&got);
            assert!(
                got.starts_with(&format!("HTTP/1.1 {code} ")),
                "{extra}: {got}"
            );
            assert!(got.contains("\"kind\":\"Status\""), "{got}");
        }
        let (_, code, body) = tls_get(
            &addr,
            &ca,
            &[b"h2"],
            &format!("{path}/from-a-page"),
            Some(&token),
        )
        .await;
        assert_eq!(code, 404, "{}", String::from_utf8_lossy(&body));
    });
}

#[test]
fn insecure_bind_must_be_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_listwatch"))
        .args([
            "serve",
            "--insecure-bind",
            "0.0.0.0:0",
            "--bind",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loopback"), "{err}");
    assert!(out.stdout.is_empty(), "nothing served");
}

#[test]
fn kubeconfig_embeds_ca_and_token_only_when_the_data_dir_has_them() {
    let srv = TestServer::start();
    let text = std::fs::read_to_string(srv.tls_kubeconfig()).unwrap();
    let (_, token) = ca_and_token(&srv);
    assert!(text.contains("certificate-authority-data: "), "{text}");
    assert!(text.contains(&format!("token: {token}")), "{text}");
    assert!(
        text.contains(&format!("server: {}", srv.https_url)),
        "{text}"
    );
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_listwatch"))
        .args(["kubeconfig", "--data-dir"])
        .arg(empty.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("server: http://127.0.0.1:8080"), "{text}");
    assert!(!text.contains("token"), "{text}");
}

fn kubectl_tls(srv: &TestServer, args: &[&str]) -> std::process::Output {
    kubectl_with(srv, &srv.tls_kubeconfig(), args)
}

/// kubectl with `kubeconfig`, sharing [`kubectl_tls`]'s discovery cache.
fn kubectl_with(
    srv: &TestServer,
    kubeconfig: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    Command::new(common::KUBECTL)
        .env("KUBECONFIG", kubeconfig)
        .arg("--request-timeout=20s")
        .arg(format!(
            "--cache-dir={}",
            srv.dir().join("kube-cache-tls").display()
        ))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn kubectl_tls_ok(srv: &TestServer, args: &[&str]) -> String {
    let out = kubectl_tls(srv, args);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}\n{}\nserver:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        srv.stderr()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A write with a wrong (say, expired) token is refused with 401 before its body arrives;
/// kubectl sends the body right behind the headers, and still sees "Unauthorized", not a
/// stream error.
#[test]
fn kubectl_writes_with_a_wrong_token_are_told_unauthorized() {
    let srv = TestServer::start();
    // Discovery with the right token first: it is cached, so the write is the first request
    // the wrong token makes.
    kubectl_tls_ok(&srv, &["api-resources"]);
    let good = std::fs::read_to_string(srv.tls_kubeconfig()).unwrap();
    let bad: String = good
        .lines()
        .map(|l| match l.find("token: ") {
            Some(i) => format!("{}token: not-the-token\n", &l[..i]),
            None => format!("{l}\n"),
        })
        .collect();
    assert_ne!(bad, good);
    let bad = srv.write_file("kubeconfig-wrong-token", &bad);
    let cm = srv.write_file(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: refused\ndata:\n  a: \"1\"\n",
    );
    for _ in 0..3 {
        let out = kubectl_with(
            &srv,
            &bad,
            &["create", "--validate=false", "-f", cm.to_str().unwrap()],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains("Unauthorized"), "{err}");
        assert!(!err.contains("stream error"), "{err}");
    }
    let out = kubectl_tls(&srv, &["get", "configmap", "refused"]);
    assert!(!out.status.success(), "nothing was stored");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NotFound"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn kubectl_over_https_with_the_generated_kubeconfig() {
    let srv = TestServer::start();
    let out = kubectl_tls_ok(&srv, &["get", "namespaces"]);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "STATUS", "AGE"], "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("default ") && l.contains("Active")),
        "{out}"
    );
    let pod = srv.write_file(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: tls-pod\nspec:\n  containers:\n  - name: main\n    image: nginx\n  - name: side\n    image: busybox\n",
    );
    let pod = pod.to_str().unwrap().to_string();
    kubectl_tls_ok(&srv, &["create", "-f", &pod]);
    let out = kubectl_tls_ok(&srv, &["get", "pods"]);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{out}"
    );
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..4], ["tls-pod", "0/2", "Pending", "0"], "{out}");
    let out = kubectl_tls_ok(&srv, &["get", "pods", "-o", "wide"]);
    assert!(
        out.lines().next().unwrap().contains("NOMINATED NODE"),
        "{out}"
    );
    assert!(out.lines().next().unwrap().contains(" IP "), "{out}");
    // get -w: the current state, then live changes, each as one table line.
    let mut watch = Command::new(common::KUBECTL)
        .env("KUBECONFIG", srv.tls_kubeconfig())
        .arg(format!(
            "--cache-dir={}",
            srv.dir().join("kube-cache-tls").display()
        ))
        .args(["get", "configmaps", "-w", "--request-timeout=30s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    for n in ["w1", "w2", "w3"] {
        let f = srv.write_file(
            &format!("{n}.yaml"),
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {n}\ndata:\n  k: v\n"),
        );
        kubectl_tls_ok(&srv, &["create", "-f", f.to_str().unwrap()]);
    }
    kubectl_tls_ok(&srv, &["delete", "configmap", "w2"]);
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lines = Vec::new();
    while lines
        .iter()
        .filter(|l: &&String| l.starts_with("w"))
        .count()
        < 4
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(_) => break,
        }
    }
    let _ = watch.kill();
    let err = {
        let mut s = String::new();
        use std::io::Read;
        let _ = watch.stderr.take().unwrap().read_to_string(&mut s);
        s
    };
    let _ = watch.wait();
    let names: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names.first(), Some(&"NAME"), "{lines:?} {err}");
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with('w'))
            .copied()
            .collect::<Vec<_>>(),
        ["w1", "w2", "w3", "w2"],
        "{lines:?} {err}"
    );
    // apply -f: a label change on the existing pod.
    let applied = srv.write_file(
        "pod2.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: tls-pod\n  labels:\n    tier: web\nspec:\n  containers:\n  - name: main\n    image: nginx\n  - name: side\n    image: busybox\n",
    );
    let out = kubectl_tls_ok(&srv, &["apply", "-f", applied.to_str().unwrap()]);
    assert!(out.contains("configured"), "{out}");
    let out = kubectl_tls_ok(&srv, &["get", "pods", "-l", "tier=web", "-o", "name"]);
    assert_eq!(out.trim(), "pod/tls-pod");
    // Protobuf bodies: kubectl sends these creates only that way.
    kubectl_tls_ok(&srv, &["create", "namespace", "team-a"]);
    kubectl_tls_ok(
        &srv,
        &[
            "create",
            "configmap",
            "pb",
            "-n",
            "team-a",
            "--from-literal=k=v",
        ],
    );
    let out = kubectl_tls_ok(
        &srv,
        &[
            "get",
            "configmap",
            "pb",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.data.k}",
        ],
    );
    assert_eq!(out, "v");
    kubectl_tls_ok(&srv, &["delete", "pod", "tls-pod", "--wait=false"]);
    kubectl_tls_ok(
        &srv,
        &["wait", "--for=delete", "pod/tls-pod", "--timeout=20s"],
    );
    let out = kubectl_tls(&srv, &["get", "pod", "tls-pod"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NotFound"));
}

/// A kubeconfig with a client certificate from `srv`'s CA (no token), and the certificate
/// and key it holds (PEM).
fn client_cert_kubeconfig(srv: &TestServer) -> (std::path::PathBuf, String, String) {
    use base64::Engine as _;
    let out = Command::new(env!("CARGO_BIN_EXE_listwatch"))
        .args([
            "kubeconfig",
            "--client-cert",
            "--server",
            &srv.https_url,
            "--data-dir",
        ])
        .arg(srv.dir().join("data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("token"), "{text}");
    let field = |name: &str| {
        let line = text
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"));
        let pem = base64::engine::general_purpose::STANDARD
            .decode(line.trim())
            .unwrap();
        String::from_utf8(pem).unwrap()
    };
    let (cert, key) = (field("client-certificate-data:"), field("client-key-data:"));
    let path = srv.dir().join("kubeconfig-cert");
    std::fs::write(&path, &text).unwrap();
    (path, cert, key)
}

/// One GET over TLS presenting `cert`/`key`; the status, or the error of the handshake or
/// request.
async fn tls_get_with_cert(
    addr: &str,
    ca_pem: &str,
    alpn: &[u8],
    cert: &str,
    key: &str,
) -> Result<u16, String> {
    let cfg = client_config(ca_pem, &[alpn], Some((cert, key)));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let io = hyper_util::rt::TokioIo::new(tls);
    let req = http::Request::builder()
        .uri(format!("https://{addr}/api/v1/namespaces"))
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let resp = if alpn == b"h2" {
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        send.send_request(req).await
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        send.send_request(req).await
    };
    resp.map(|r| r.status().as_u16()).map_err(|e| e.to_string())
}

#[test]
fn client_certificates_from_our_ca_authenticate_and_others_are_refused() {
    let srv = TestServer::start();
    let addr = host_port(&srv.https_url);
    let (ca, _) = ca_and_token(&srv);
    let (kubeconfig, cert, key) = client_cert_kubeconfig(&srv);
    // kubectl with nothing but the certificate.
    let out = Command::new(common::KUBECTL)
        .env("KUBECONFIG", &kubeconfig)
        .arg("--request-timeout=20s")
        .arg(format!(
            "--cache-dir={}",
            srv.dir().join("kube-cache-cert").display()
        ))
        .args(["get", "namespaces", "-o", "name"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.lines().any(|l| l == "namespace/default"), "{stdout}");
    // Another server's CA issued this one: the handshake (or the first request) fails.
    let other = TestServer::start();
    let (_, foreign_cert, foreign_key) = client_cert_kubeconfig(&other);
    rt().block_on(async {
        for alpn in [&b"h2"[..], &b"http/1.1"[..]] {
            assert_eq!(
                tls_get_with_cert(&addr, &ca, alpn, &cert, &key).await,
                Ok(200)
            );
            let refused = tls_get_with_cert(&addr, &ca, alpn, &foreign_cert, &foreign_key).await;
            assert!(
                refused.is_err(),
                "a foreign CA's certificate was accepted: {refused:?}"
            );
        }
    });
}

/// kubectl's self-reviews travel as protobuf over https; the single administrator may do
/// everything and is told who it is.
#[test]
fn kubectl_auth_can_i_and_whoami() {
    let srv = TestServer::start();
    let out = kubectl_tls_ok(&srv, &["auth", "can-i", "create", "pods"]);
    assert_eq!(out.trim(), "yes");
    let out = kubectl_tls_ok(&srv, &["auth", "can-i", "delete", "nodes", "-A"]);
    assert_eq!(out.trim(), "yes");
    let out = kubectl_tls_ok(&srv, &["auth", "can-i", "get", "/healthz"]);
    assert_eq!(out.trim(), "yes");
    let out = kubectl_tls_ok(&srv, &["auth", "can-i", "--list"]);
    assert!(out.lines().any(|l| l.starts_with("*.*")), "{out}");
    let out = kubectl_tls_ok(&srv, &["auth", "whoami", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], "SelfSubjectReview");
    assert_eq!(v["status"]["userInfo"]["username"], "admin");
    // Nothing is stored: a review cannot be read back.
    let out = kubectl_tls(
        &srv,
        &[
            "get",
            "--raw",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("MethodNotAllowed") || err.contains("405"),
        "{err}"
    );
}

/// Every typed create kubectl sends as protobuf: secrets, services and deployments come out
/// as the JSON a Kubernetes server stores.
#[test]
fn kubectl_typed_creates_in_protobuf() {
    let srv = TestServer::start();
    let get = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&kubectl_tls_ok(&srv, &all)).unwrap()
    };
    kubectl_tls_ok(
        &srv,
        &[
            "create",
            "secret",
            "generic",
            "s1",
            "--from-literal=x=y",
            "--from-literal=e=",
        ],
    );
    let s = get(&["secret", "s1"]);
    assert_eq!(s["data"], serde_json::json!({"x": "eQ==", "e": ""}));
    assert_eq!(s["type"], "Opaque");
    assert!(s["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(s["metadata"]
        .get("creationTimestamp")
        .is_some_and(|t| t.is_string()));

    kubectl_tls_ok(
        &srv,
        &["create", "service", "clusterip", "web", "--tcp=80:8080"],
    );
    let svc = get(&["service", "web"]);
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(svc["spec"]["ports"][0]["port"], 80);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(svc["spec"]["selector"], serde_json::json!({"app": "web"}));
    // A cluster IP from 10.96.0.0/12, and node ports for a NodePort service.
    let ip: std::net::Ipv4Addr = svc["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        u32::from(ip) >> 20,
        u32::from(std::net::Ipv4Addr::new(10, 96, 0, 0)) >> 20
    );
    kubectl_tls_ok(
        &srv,
        &["create", "service", "nodeport", "np", "--tcp=80:8080"],
    );
    let np = get(&["service", "np"]);
    let node_port = np["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&node_port), "{np}");
    assert_ne!(np["spec"]["clusterIP"], svc["spec"]["clusterIP"]);
    let out = kubectl_tls_ok(&srv, &["get", "service", "np"]);
    assert!(out.contains(&format!("80:{node_port}/TCP")), "{out}");
    // The address is taken until its service is deleted, then free again.
    let same_ip = format!("--clusterip={ip}");
    let create_other = [
        "create",
        "service",
        "clusterip",
        "other",
        "--tcp=80",
        &same_ip,
    ];
    let taken = kubectl_tls(&srv, &create_other);
    assert!(String::from_utf8_lossy(&taken.stderr).contains("already allocated"));
    kubectl_tls_ok(&srv, &["delete", "service", "web"]);
    kubectl_tls_ok(&srv, &create_other);

    kubectl_tls_ok(
        &srv,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=0",
            "--port=80",
        ],
    );
    let d = get(&["deployment", "web"]);
    // A pointer field's zero survives the trip.
    assert_eq!(d["spec"]["replicas"], 0);
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "nginx");
    assert_eq!(c["ports"][0]["containerPort"], 80);
    // The zero time of the template's metadata is absent, not year 1 or 1970.
    assert!(d["spec"]["template"]["metadata"]
        .get("creationTimestamp")
        .is_none());
    assert_eq!(d["metadata"]["generation"], 1);
    // And the usual columns work on what was stored.
    let out = kubectl_tls_ok(&srv, &["get", "deployment", "web"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("web ") && l.contains("0/0")),
        "{out}"
    );
}
