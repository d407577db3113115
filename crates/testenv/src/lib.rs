//! A test environment for operators: a real listwatch API server inside the test's own
//! process, on a memory store (nothing persisted) and an ephemeral loopback port, with the
//! test's CustomResourceDefinitions installed and established before it is handed over.
//! It is what envtest is to controller-runtime users, without a kube-apiserver and an etcd
//! to download and start: it is ready in milliseconds.
//!
//! Data flow: [`TestEnv::builder`] collects CRD manifests (files, directories, strings);
//! [`TestEnvBuilder::start`] opens a memory store, starts the API server and its plain-HTTP
//! listener on `127.0.0.1:0`, creates every CRD through the API (so they are validated as
//! any client's would be) and waits until each is served. The caller then talks to
//! [`TestEnv::url`] with any client: ours ([`TestEnv::client`]), kube-rs (build its
//! `Config` from [`TestEnv::kubeconfig_yaml`] or [`TestEnv::url`]), kubectl or the Python
//! client (with [`TestEnv::kubeconfig_path`]). Dropping the environment stops the server.
//!
//! ```no_run
//! # async fn demo() -> Result<(), testenv::Error> {
//! let env = testenv::TestEnv::builder()
//!     .crd_path("config/crd")          // a file or a directory of YAML/JSON manifests
//!     .start()
//!     .await?;
//! let client = env.client();           // listwatch's client, ready
//! let kubeconfig = env.kubeconfig_path(); // for kubectl, kube-rs, Python…
//! # let _ = (client, kubeconfig);
//! env.stop().await;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

use apiserver::{ApiServer, ServerConfig};
use client::rest::{ApiResource, Client, Config, PostParams};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use storage::memory::MemoryStorage;
use storage::Storage;

/// Why a test environment could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A CRD manifest could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A manifest is not YAML or JSON, or holds something other than CRDs.
    #[error("{0}")]
    Manifest(String),
    /// The server could not start.
    #[error("starting the API server: {0}")]
    Server(String),
    /// A CRD was refused by the server (its message says why).
    #[error("installing CRD {name}: {source}")]
    Install {
        /// The CRD's name.
        name: String,
        /// The server's answer.
        source: client::rest::Error,
    },
    /// CRDs were not established in time (their names, comma-separated).
    #[error("CRDs not established within {timeout:?}: {names}")]
    NotEstablished {
        /// The ones still not served.
        names: String,
        /// How long was waited.
        timeout: Duration,
    },
}

/// The CRD resource, for creating CRDs.
const CRDS: ApiResource = ApiResource {
    group: std::borrow::Cow::Borrowed("apiextensions.k8s.io"),
    version: std::borrow::Cow::Borrowed("v1"),
    plural: std::borrow::Cow::Borrowed("customresourcedefinitions"),
    kind: std::borrow::Cow::Borrowed("CustomResourceDefinition"),
    namespaced: false,
};

/// Configures a [`TestEnv`].
#[derive(Debug, Default)]
#[must_use]
pub struct TestEnvBuilder {
    paths: Vec<PathBuf>,
    manifests: Vec<String>,
    timeout: Option<Duration>,
}

impl TestEnvBuilder {
    /// Installs the CRDs of `path`: a YAML (several documents allowed) or JSON file, or a
    /// directory, whose `*.yaml`, `*.yml` and `*.json` files are read in name order (not
    /// recursively). Documents that are not CRDs are an error.
    pub fn crd_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.paths.push(path.into());
        self
    }

    /// Installs the CRDs of one manifest given as text (YAML or JSON, several documents
    /// allowed).
    pub fn crd_yaml(mut self, manifest: impl Into<String>) -> Self {
        self.manifests.push(manifest.into());
        self
    }

    /// How long to wait for the CRDs to be established (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Starts the server, installs the CRDs and waits until every one of them is served.
    /// Must run inside a Tokio runtime.
    ///
    /// # Errors
    /// A manifest that cannot be read or is not a CRD, a CRD the server refuses (its
    /// validation errors), or one not established within the timeout.
    pub async fn start(self) -> Result<TestEnv, Error> {
        let mut crds = Vec::new();
        for path in &self.paths {
            for file in manifest_files(path)? {
                let text = std::fs::read_to_string(&file).map_err(|source| Error::Read {
                    path: file.clone(),
                    source,
                })?;
                crds.extend(parse_crds(&text, &file.display().to_string())?);
            }
        }
        for (i, text) in self.manifests.iter().enumerate() {
            crds.extend(parse_crds(text, &format!("manifest {i}"))?);
        }
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let server = ApiServer::new(store, ServerConfig::default())
            .await
            .map_err(|s| Error::Server(s.message))?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| Error::Server(e.to_string()))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Server(e.to_string()))?;
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        let opts = apiserver::ServeOptions {
            loopback_only: true,
            ..Default::default()
        };
        let task = tokio::spawn(apiserver::serve_with(
            listener,
            server.clone(),
            opts,
            async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            },
        ));
        let url = format!("http://{addr}");
        let config = Config::new(&url).map_err(|e| Error::Server(e.to_string()))?;
        let client = Client::new(config).map_err(|e| Error::Server(e.to_string()))?;
        let kubeconfig = KubeconfigFile::write(&url).map_err(|e| Error::Server(e.to_string()))?;
        let env = TestEnv {
            url,
            client,
            server,
            kubeconfig,
            stop_tx,
            task: Some(task),
        };
        env.install(&crds, self.timeout.unwrap_or(Duration::from_secs(10)))
            .await?;
        Ok(env)
    }
}

/// A running test environment. Dropping it stops the server (use [`TestEnv::stop`] to wait
/// for the listener to end).
pub struct TestEnv {
    url: String,
    client: Client,
    server: Arc<ApiServer>,
    kubeconfig: KubeconfigFile,
    stop_tx: tokio::sync::watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv").field("url", &self.url).finish()
    }
}

impl TestEnv {
    /// Starts configuring a test environment.
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder::default()
    }

    /// A test environment without CRDs.
    ///
    /// # Errors
    /// The server could not start.
    pub async fn start() -> Result<TestEnv, Error> {
        Self::builder().start().await
    }

    /// `http://127.0.0.1:PORT`: plain HTTP, no authentication, loopback only.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client of this server (cheap to clone).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A kubeconfig (YAML) whose current context is this server.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&self.url)
    }

    /// The path of a kubeconfig file for this server (removed when the environment is
    /// dropped): for kubectl, the Python client, or anything that reads `KUBECONFIG`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig.path
    }

    /// The server itself, for tests that look inside it.
    pub fn server(&self) -> &Arc<ApiServer> {
        &self.server
    }

    /// Installs more CRDs (manifest text) and waits until they are served.
    ///
    /// # Errors
    /// As [`TestEnvBuilder::start`].
    pub async fn install_crds(&self, manifest: &str, timeout: Duration) -> Result<(), Error> {
        let crds = parse_crds(manifest, "manifest")?;
        self.install(&crds, timeout).await
    }

    async fn install(&self, crds: &[Value], timeout: Duration) -> Result<(), Error> {
        let mut wanted = Vec::with_capacity(crds.len());
        for crd in crds {
            let name = crd
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            self.client
                .create::<Value>(&CRDS, None, &PostParams::default(), crd)
                .await
                .map_err(|source| Error::Install {
                    name: name.clone(),
                    source,
                })?;
            let group = crd.pointer("/spec/group").and_then(Value::as_str);
            let plural = crd.pointer("/spec/names/plural").and_then(Value::as_str);
            let versions: Vec<String> = crd
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .map(|vs| {
                    vs.iter()
                        .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
                        .filter_map(|v| v.get("name").and_then(Value::as_str))
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            if let (Some(g), Some(p)) = (group, plural) {
                for v in versions {
                    wanted.push((name.clone(), g.to_string(), v, p.to_string()));
                }
            }
        }
        // Served means established: the server publishes a resource before it marks its
        // CRD Established. Polled in-process, so the wait costs no requests.
        let deadline = Instant::now() + timeout;
        loop {
            let served = self.server.custom_resources().snapshot();
            let missing: Vec<&str> = wanted
                .iter()
                .filter(|(_, g, v, p)| served.find(g, v, p).is_none())
                .map(|(n, ..)| n.as_str())
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let mut names: Vec<&str> = missing;
                names.dedup();
                return Err(Error::NotEstablished {
                    names: names.join(", "),
                    timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Stops the server and waits for its listener to end.
    pub async fn stop(mut self) {
        let _ = self.stop_tx.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let _ = self.stop_tx.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The kubeconfig of a server at `url`, without credentials.
fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {url}\n\
         contexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: testenv\n\
         current-context: testenv\nusers:\n- name: testenv\n  user: {{}}\n"
    )
}

/// A kubeconfig file, removed on drop.
struct KubeconfigFile {
    path: PathBuf,
}

impl KubeconfigFile {
    fn write(url: &str) -> std::io::Result<KubeconfigFile> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "listwatch-testenv-{}-{}.kubeconfig",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, kubeconfig_yaml(url))?;
        Ok(KubeconfigFile { path })
    }
}

impl Drop for KubeconfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The manifest files of `path`: itself, or a directory's YAML and JSON files in name order.
fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, Error> {
    let read_err = |source| Error::Read {
        path: path.to_path_buf(),
        source,
    };
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read_err)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The CRDs of one manifest (YAML documents or one JSON object); anything else is an error.
fn parse_crds(text: &str, origin: &str) -> Result<Vec<Value>, Error> {
    use serde::Deserialize as _;
    let mut out = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(doc)
            .map_err(|e| Error::Manifest(format!("{origin}: document {i}: {e}")))?;
        if value.is_null() {
            continue;
        }
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let api_version = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind != "CustomResourceDefinition" || api_version != "apiextensions.k8s.io/v1" {
            return Err(Error::Manifest(format!(
                "{origin}: document {i} is a {api_version} {kind}, not an apiextensions.k8s.io/v1 CustomResourceDefinition"
            )));
        }
        out.push(value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_are_split_into_crds_and_other_kinds_refused() {
        let two = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: a.x.io}\n---\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: b.x.io}\n";
        let crds = parse_crds(two, "t").unwrap();
        assert_eq!(crds.len(), 2);
        assert_eq!(crds[1]["metadata"]["name"], "b.x.io");
        let err = parse_crds("apiVersion: v1\nkind: ConfigMap\n", "t").unwrap_err();
        assert!(
            err.to_string().contains("not an apiextensions.k8s.io/v1"),
            "{err}"
        );
        let json = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition"}"#;
        assert_eq!(parse_crds(json, "t").unwrap().len(), 1);
    }
}
