//! `listwatch serve --encryption-provider-config`, end to end on the real binary: the store
//! file holds Secrets only as ciphertext while clients read them in clear, keys rotate with
//! `kubectl get secrets -A -o json | kubectl replace -f -`, a wrong key is a 500 for the
//! objects it cannot read, and bad configurations stop the server at start with a message.

mod common;

use common::{http_client, http_json, http_request, TestServer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// base64 of three different 32-byte secrets, and of a 16-byte one.
const KEY_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_B: &str = "ISEhISEhISEhISEhISEhISEhISEhISEhISEhISEhISE=";
const KEY_C: &str = "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=";
const KEY_16: &str = "AAECAwQFBgcICQoLDA0ODw==";
/// A secret's value, and the base64 its `data` carries.
const PLAINTEXT: &str = "correct-horse-battery-staple";
const PLAINTEXT_B64: &str = "Y29ycmVjdC1ob3JzZS1iYXR0ZXJ5LXN0YXBsZQ==";

/// Writes an EncryptionConfiguration for secrets with `providers` (a YAML flow list) to
/// `<dir>/<file>` and returns its path.
fn write_config(dir: &Path, file: &str, providers: &str) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(
        &path,
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers: {providers}\n"
        ),
    )
    .unwrap();
    path
}

fn aesgcm(name: &str, secret: &str) -> String {
    format!("{{aesgcm: {{keys: [{{name: {name}, secret: '{secret}'}}]}}}}")
}

/// Starts a server on `dir` with the encryption configuration at `config`.
fn start(dir: tempfile::TempDir, config: &Path) -> TestServer {
    let config = config.to_str().unwrap().to_string();
    TestServer::start_in(dir, &["--encryption-provider-config", &config])
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The bytes of the server's store file.
fn store_file(srv: &TestServer) -> Vec<u8> {
    std::fs::read(srv.dir().join("data/listwatch.redb")).expect("reading the store file")
}

fn secret(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name},
        "data": {"password": PLAINTEXT_B64},
    })
}

#[test]
fn secrets_are_ciphertext_in_the_store_file_and_plaintext_to_clients() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "enc.yaml",
        &format!("[{}]", aesgcm("k1", KEY_A)),
    );
    let srv = start(dir, &config);
    let secrets = format!("{}/api/v1/namespaces/default/secrets", srv.url);
    let (code, created) = http_json("POST", &secrets, Some(&secret("db")));
    assert_eq!(code, 201, "{created}");
    // A configmap is not listed: its data is in the file as written, which shows that the
    // scan below would find the secret's if it were there.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
                    "data": {"note": "plain-configmap-marker"}});
    let (code, _) = http_json(
        "POST",
        &format!("{}/api/v1/namespaces/default/configmaps", srv.url),
        Some(&cm),
    );
    assert_eq!(code, 201);

    let file = store_file(&srv);
    assert!(contains(&file, "plain-configmap-marker"));
    assert!(contains(&file, "k8s:enc:aesgcm:v1:k1:"));
    assert!(
        !contains(&file, PLAINTEXT_B64),
        "the secret's base64 is in the store file"
    );
    assert!(
        !contains(&file, PLAINTEXT),
        "the secret is in the store file"
    );

    let (code, got) = http_json("GET", &format!("{secrets}/db"), None);
    assert_eq!(code, 200);
    assert_eq!(got["data"]["password"], PLAINTEXT_B64);
    let (_, list) = http_json("GET", &secrets, None);
    assert_eq!(list["items"][0]["data"]["password"], PLAINTEXT_B64);
    // A watch from the start: its first event, before the server ends it after a second.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (code, body) = rt
        .block_on(http_request(
            &http_client(),
            "GET",
            &format!("{secrets}?watch=1&resourceVersion=0&timeoutSeconds=1"),
            None,
        ))
        .unwrap();
    assert_eq!(code, 200);
    let event: Value = serde_json::from_slice(body.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["data"]["password"], PLAINTEXT_B64);
    let kubectl = srv.kubectl_ok(&["get", "secret", "db", "-o", "jsonpath={.data.password}"]);
    assert_eq!(kubectl, PLAINTEXT_B64);
    assert!(
        srv.stderr()
            .contains("encryption at rest: written with aesgcm key \"k1\""),
        "the start-up log says how secrets are written: {}",
        srv.stderr()
    );

    // Restarted with the same key name but another secret: that object is a 500 Status,
    // the server goes on serving the others.
    let dir = srv.kill9();
    let wrong = write_config(
        dir.path(),
        "wrong.yaml",
        &format!("[{}]", aesgcm("k1", KEY_B)),
    );
    let srv = start(dir, &wrong);
    let secrets = format!("{}/api/v1/namespaces/default/secrets", srv.url);
    let (code, status) = http_json("GET", &format!("{secrets}/db"), None);
    assert_eq!(code, 500, "{status}");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "InternalError");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("could not decrypt"),
        "{status}"
    );
    let (code, _) = http_json("POST", &secrets, Some(&secret("other")));
    assert_eq!(code, 201);
    let (code, list) = http_json("GET", &secrets, None);
    assert_eq!(code, 200);
    assert_eq!(common::item_names(&list), ["other"]);
    assert!(
        srv.stderr().contains("cannot be decrypted"),
        "{}",
        srv.stderr()
    );
}

#[test]
fn kubectl_replace_migrates_every_secret_to_the_new_key() {
    let dir = tempfile::tempdir().unwrap();
    let old = write_config(
        dir.path(),
        "old.yaml",
        &format!("[{}]", aesgcm("k1", KEY_A)),
    );
    let srv = start(dir, &old);
    srv.kubectl_ok(&["create", "namespace", "team"]);
    for (ns, name) in [("default", "a"), ("default", "b"), ("team", "c")] {
        srv.kubectl_ok(&[
            "-n",
            ns,
            "create",
            "secret",
            "generic",
            name,
            &format!("--from-literal=password={PLAINTEXT}"),
        ]);
    }
    let dir = srv.kill9();

    // The new key first, the old one kept: everything still reads, and a replace of every
    // secret rewrites each under the new key.
    let both = format!("[{}, {}]", aesgcm("k2", KEY_C), aesgcm("k1", KEY_A));
    let rotating = write_config(dir.path(), "rotating.yaml", &both);
    let srv = start(dir, &rotating);
    let all = srv.kubectl_ok(&["get", "secrets", "-A", "-o", "json"]);
    let file = srv.write_file("all.json", &all);
    // kubectl checks a List against /openapi/v2, which it asks for in protobuf, and this
    // server serves it as JSON only: --validate=false skips that client-side check.
    srv.kubectl_ok(&["replace", "--validate=false", "-f", file.to_str().unwrap()]);
    assert!(contains(&store_file(&srv), "k8s:enc:aesgcm:v1:k2:"));
    let dir = srv.kill9();

    // The old key removed: every secret still reads.
    let new = write_config(
        dir.path(),
        "new.yaml",
        &format!("[{}]", aesgcm("k2", KEY_C)),
    );
    let srv = start(dir, &new);
    for (ns, name) in [("default", "a"), ("default", "b"), ("team", "c")] {
        let password = srv.kubectl_ok(&[
            "-n",
            ns,
            "get",
            "secret",
            name,
            "-o",
            "jsonpath={.data.password}",
        ]);
        assert_eq!(password, PLAINTEXT_B64, "{ns}/{name}");
    }
}

#[test]
fn identity_first_stores_new_secrets_in_clear_and_reads_encrypted_ones() {
    let dir = tempfile::tempdir().unwrap();
    let enc = write_config(
        dir.path(),
        "enc.yaml",
        &format!("[{}]", aesgcm("k1", KEY_16)),
    );
    let srv = start(dir, &enc);
    srv.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "old",
        "--from-literal=p=encrypted-one",
    ]);
    let dir = srv.kill9();
    let ident = format!("[{{identity: {{}}}}, {}]", aesgcm("k1", KEY_16));
    let config = write_config(dir.path(), "identity.yaml", &ident);
    let srv = start(dir, &config);
    srv.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "new",
        "--from-literal=p=plain-one",
    ]);
    // base64("plain-one")
    assert!(contains(&store_file(&srv), "cGxhaW4tb25l"));
    let old = srv.kubectl_ok(&["get", "secret", "old", "-o", "jsonpath={.data.p}"]);
    assert_eq!(old, "ZW5jcnlwdGVkLW9uZQ==");
}

/// Runs `listwatch serve` with `extra` arguments, expecting it to exit with an error within
/// 20 seconds; returns its stderr.
fn serve_fails(dir: &Path, extra: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_listwatch"))
        .arg("serve")
        .args(["--bind", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("data"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning the listwatch binary");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("listwatch serve {extra:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        !status.success(),
        "listwatch serve {extra:?} succeeded:\n{err}"
    );
    err
}

#[test]
fn bad_configurations_stop_the_server_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            write_config(d, "b64.yaml", "[{aesgcm: {keys: [{name: k, secret: 'not base64!'}]}}]"),
            "resources[0].providers[0].aesgcm.keys[0].secret: Invalid value: \"REDACTED\": secrets must be base64 encoded",
        ),
        (
            write_config(d, "len.yaml", &format!("[{{secretbox: {{keys: [{{name: k, secret: '{KEY_16}'}}]}}}}]")),
            "secret is not of the expected length, got 16, expected one of [32]",
        ),
        (
            write_config(d, "unknown.yaml", &format!("[{{aesgcm: {{keys: [{{name: k, secret: '{KEY_A}'}}], rotate: true}}}}]")),
            "unknown field `rotate`",
        ),
        (
            write_config(d, "dup.yaml", &format!("[{{aesgcm: {{keys: [{{name: k, secret: '{KEY_A}'}}, {{name: k, secret: '{KEY_B}'}}]}}}}]")),
            "resources[0].providers[0].aesgcm.keys[1].name: Duplicate value: \"k\"",
        ),
        (
            write_config(d, "kms.yaml", "[{kms: {apiVersion: v2, name: vault, endpoint: 'unix:///kms.sock'}}]"),
            "the kms provider is not supported by this server",
        ),
        (
            write_config(d, "cbc.yaml", &format!("[{{aescbc: {{keys: [{{name: k, secret: '{KEY_A}'}}]}}}}]")),
            "the aescbc provider is not supported by this server",
        ),
        (d.join("missing.yaml"), "reading the encryption provider configuration"),
    ];
    for (path, want) in cases {
        let err = serve_fails(d, &["--encryption-provider-config", path.to_str().unwrap()]);
        assert!(
            err.contains(want),
            "{}: want {want:?} in:\n{err}",
            path.display()
        );
        assert!(
            err.contains(path.file_name().unwrap().to_str().unwrap()),
            "the message names the file: {err}"
        );
        for key in [KEY_A, KEY_B, KEY_16] {
            assert!(
                !err.contains(key),
                "a secret leaked into the message: {err}"
            );
        }
    }
}
