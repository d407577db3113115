//! Encryption at rest through the API, over the embedded store and over a real etcd: what
//! storage holds is ciphertext in kube-apiserver's format, while get, list and watch answer
//! with the plaintext object; rotation re-encrypts on (even unchanged) writes; a value no
//! configured key decrypts is a 500 Status for that object while the others are served.

mod common;

use apiserver::encryption::{EncryptedStorage, EncryptionConfig};
use apiserver::ApiServer;
use common::*;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use storage::embedded::{EmbeddedOptions, EmbeddedStorage};
use storage::Storage;

const WAIT: Duration = Duration::from_secs(10);
/// base64 of two different 32-byte secrets.
const KEY_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_B: &str = "ISEhISEhISEhISEhISEhISEhISEhISEhISEhISEhISE=";
/// The secret's value, and the base64 a Secret's `data` carries it as.
const PLAINTEXT: &str = "correct-horse-battery-staple";
const PLAINTEXT_B64: &str = "Y29ycmVjdC1ob3JzZS1iYXR0ZXJ5LXN0YXBsZQ==";

/// An EncryptionConfiguration for secrets with `providers` (YAML flow list).
fn encryption(providers: &str) -> EncryptionConfig {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("enc.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: {providers}\n"
        ),
    )
    .unwrap();
    EncryptionConfig::load(&path).unwrap()
}

fn aesgcm(name: &str, secret: &str) -> String {
    format!("{{aesgcm: {{keys: [{{name: {name}, secret: '{secret}'}}]}}}}")
}

fn secretbox(name: &str, secret: &str) -> String {
    format!("{{secretbox: {{keys: [{{name: {name}, secret: '{secret}'}}]}}}}")
}

fn secret(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name},
        "data": {"password": PLAINTEXT_B64},
    })
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// A server over `raw` with `enc`.
async fn server(raw: &Arc<dyn Storage>, enc: &EncryptionConfig) -> Arc<ApiServer> {
    let store = EncryptedStorage::wrap(raw.clone(), enc);
    ApiServer::new(store, config(1000, 100)).await.unwrap()
}

/// What `raw` holds for the secret `name` in `default`.
async fn raw_value(raw: &Arc<dyn Storage>, name: &str) -> bytes::Bytes {
    raw.get(format!("/registry/secrets/default/{name}").as_bytes())
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{name} is not stored"))
        .value
}

const SECRETS: &str = "/api/v1/namespaces/default/secrets";

/// Everything a user sees is plaintext; everything storage holds is ciphertext.
async fn encrypted_at_rest_served_in_clear(raw: Arc<dyn Storage>, provider: &str, prefix: &str) {
    let srv = server(&raw, &encryption(&format!("[{provider}]"))).await;
    let mut w = watch(&srv, &format!("{SECRETS}?watch=1")).await;
    let created = ok("create", post(&srv, SECRETS, &secret("db")).await);
    assert_eq!(created["data"]["password"], PLAINTEXT_B64);
    // A configmap is not listed in the configuration: stored as it is.
    let cm = configmap("plain", json!({}), json!({"k": PLAINTEXT}));
    ok(
        "configmap",
        post(&srv, "/api/v1/namespaces/default/configmaps", &cm).await,
    );

    let stored = raw_value(&raw, "db").await;
    assert!(stored.starts_with(prefix.as_bytes()), "{stored:?}");
    assert!(!contains(&stored, PLAINTEXT_B64) && !contains(&stored, PLAINTEXT));
    assert!(!contains(&stored, "\"Secret\""), "even the kind is hidden");
    let cm_stored = raw
        .get(b"/registry/configmaps/default/plain")
        .await
        .unwrap()
        .unwrap()
        .value;
    assert!(contains(&cm_stored, PLAINTEXT));

    let got = ok("get", get(&srv, &format!("{SECRETS}/db")).await);
    assert_eq!(got["data"]["password"], PLAINTEXT_B64);
    assert_eq!(
        got["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    let list = ok("list", get(&srv, SECRETS).await);
    assert_eq!(list["items"][0]["data"]["password"], PLAINTEXT_B64);
    let ev = w.expect(WAIT).await;
    assert_eq!(ev_type(&ev), "ADDED");
    assert_eq!(ev["object"]["data"]["password"], PLAINTEXT_B64);

    // Updates and deletions through the watch, with plaintext too.
    let mut changed = got.clone();
    changed["data"]["other"] = json!(PLAINTEXT_B64);
    ok(
        "update",
        put(&srv, &format!("{SECRETS}/db"), &changed).await,
    );
    let ev = w.expect(WAIT).await;
    assert_eq!(ev_type(&ev), "MODIFIED");
    assert_eq!(ev["object"]["data"]["other"], PLAINTEXT_B64);
    assert!(!contains(&raw_value(&raw, "db").await, PLAINTEXT_B64));
    ok("delete", delete(&srv, &format!("{SECRETS}/db")).await);
    let ev = w.expect(WAIT).await;
    assert_eq!(ev_type(&ev), "DELETED");
    assert_eq!(ev["object"]["data"]["password"], PLAINTEXT_B64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_holds_ciphertext() {
    let dir = tempfile::tempdir().unwrap();
    let raw: Arc<dyn Storage> =
        Arc::new(EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap());
    encrypted_at_rest_served_in_clear(raw, &aesgcm("k1", KEY_A), "k8s:enc:aesgcm:v1:k1:").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_holds_ciphertext() {
    let etcd = storage_etcd::testing::EtcdServer::start().await;
    let raw: Arc<dyn Storage> = Arc::new(etcd.storage("").await);
    encrypted_at_rest_served_in_clear(raw, &secretbox("box1", KEY_B), "k8s:enc:secretbox:v1:box1:")
        .await;
    // What etcd itself holds, read by a client that knows nothing of encryption.
    let srv = server(
        &(Arc::new(etcd.storage("").await) as Arc<dyn Storage>),
        &encryption(&format!("[{}]", secretbox("box1", KEY_B))),
    )
    .await;
    ok("create", post(&srv, SECRETS, &secret("again")).await);
    let direct = etcd.storage("").await;
    let value = direct
        .get(b"/registry/secrets/default/again")
        .await
        .unwrap()
        .unwrap()
        .value;
    assert!(value.starts_with(b"k8s:enc:secretbox:v1:box1:"));
    assert!(!contains(&value, PLAINTEXT_B64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_rewrites_unchanged_objects_under_the_new_key() {
    let raw: Arc<dyn Storage> = Arc::new(storage::memory::MemoryStorage::new());
    let old = server(&raw, &encryption(&format!("[{}]", aesgcm("k1", KEY_A)))).await;
    ok("create", post(&old, SECRETS, &secret("s1")).await);
    drop(old);

    // The new key first, the old one still there: reads work, and a replace that changes
    // nothing writes the object again, under the new key.
    let rotated = format!("[{}, {}]", aesgcm("k2", KEY_B), aesgcm("k1", KEY_A));
    let srv = server(&raw, &encryption(&rotated)).await;
    let got = ok("get", get(&srv, &format!("{SECRETS}/s1")).await);
    assert!(raw_value(&raw, "s1")
        .await
        .starts_with(b"k8s:enc:aesgcm:v1:k1:"));
    let replaced = ok("replace", put(&srv, &format!("{SECRETS}/s1"), &got).await);
    assert_ne!(
        replaced["metadata"]["resourceVersion"], got["metadata"]["resourceVersion"],
        "a stale object is rewritten"
    );
    assert_eq!(replaced["data"], got["data"]);
    assert!(raw_value(&raw, "s1")
        .await
        .starts_with(b"k8s:enc:aesgcm:v1:k2:"));
    // Once under the first key, an unchanged replace is a no-op again.
    let again = ok(
        "replace",
        put(&srv, &format!("{SECRETS}/s1"), &replaced).await,
    );
    assert_eq!(
        again["metadata"]["resourceVersion"],
        replaced["metadata"]["resourceVersion"]
    );
    // A no-op merge patch migrates too.
    ok("create", post(&srv, SECRETS, &secret("s2")).await);
    drop(srv);
    let third = format!("[{}, {}]", aesgcm("k3", KEY_A), aesgcm("k2", KEY_B));
    let srv = server(&raw, &encryption(&third)).await;
    ok(
        "patch",
        merge_patch(&srv, &format!("{SECRETS}/s2"), &json!({})).await,
    );
    assert!(raw_value(&raw, "s2")
        .await
        .starts_with(b"k8s:enc:aesgcm:v1:k3:"));
    drop(srv);

    // The old key can go: s1 (rewritten under k2) still reads.
    let srv = server(&raw, &encryption(&format!("[{}]", aesgcm("k2", KEY_B)))).await;
    let got = ok("get", get(&srv, &format!("{SECRETS}/s1")).await);
    assert_eq!(got["data"]["password"], PLAINTEXT_B64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecryptable_object_is_a_500_and_the_others_are_served() {
    let raw: Arc<dyn Storage> = Arc::new(storage::memory::MemoryStorage::new());
    let first = server(&raw, &encryption(&format!("[{}]", aesgcm("k1", KEY_A)))).await;
    ok("create", post(&first, SECRETS, &secret("lost")).await);
    drop(first);
    // The same key name with another secret.
    let srv = server(&raw, &encryption(&format!("[{}]", aesgcm("k1", KEY_B)))).await;
    ok("create", post(&srv, SECRETS, &secret("fine")).await);
    let (code, v) = get(&srv, &format!("{SECRETS}/lost")).await;
    assert_status("get", code, &v, 500, "InternalError");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains("/registry/secrets/default/lost") && msg.contains("aesgcm key \"k1\""),
        "{msg}"
    );
    let (code, v) = put(&srv, &format!("{SECRETS}/lost"), &secret("lost")).await;
    assert_status("update", code, &v, 500, "InternalError");
    let list = ok("list", get(&srv, SECRETS).await);
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fine"]);
    let got = ok("get", get(&srv, &format!("{SECRETS}/fine")).await);
    assert_eq!(got["data"]["password"], PLAINTEXT_B64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_first_writes_plaintext_and_reads_encrypted_objects() {
    let raw: Arc<dyn Storage> = Arc::new(storage::memory::MemoryStorage::new());
    let enc = server(&raw, &encryption(&format!("[{}]", secretbox("b", KEY_A)))).await;
    ok("create", post(&enc, SECRETS, &secret("old")).await);
    drop(enc);
    let srv = server(
        &raw,
        &encryption(&format!("[{{identity: {{}}}}, {}]", secretbox("b", KEY_A))),
    )
    .await;
    ok("create", post(&srv, SECRETS, &secret("new")).await);
    assert!(contains(&raw_value(&raw, "new").await, PLAINTEXT_B64));
    let got = ok("get", get(&srv, &format!("{SECRETS}/old")).await);
    assert_eq!(got["data"]["password"], PLAINTEXT_B64);
    // Replacing decrypts it for good.
    ok("replace", put(&srv, &format!("{SECRETS}/old"), &got).await);
    assert!(contains(&raw_value(&raw, "old").await, PLAINTEXT_B64));
    // Without an identity provider, plaintext is not read.
    drop(srv);
    let srv = server(&raw, &encryption(&format!("[{}]", secretbox("b", KEY_A)))).await;
    let (code, v) = get(&srv, &format!("{SECRETS}/new")).await;
    assert_status("get", code, &v, 500, "InternalError");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("no identity provider"),
        "{v}"
    );
}
