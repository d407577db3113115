//! Shared helpers for the `listwatch` integration tests: a [`TestServer`] that runs the real
//! binary on a temporary data directory, a kubectl runner pointed at it, and a small raw HTTP
//! client for checks that kubectl cannot express.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tempfile::TempDir;

/// The kubectl these tests are written against.
pub const KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.32";

/// How long a server may take to print its "serving on" line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `listwatch serve` child process on a temporary directory. The data directory
/// is `<dir>/data`, the kubeconfig `<dir>/kubeconfig`. Dropping it kills the child (SIGKILL).
pub struct TestServer {
    /// The server process.
    pub child: Child,
    /// The base URL, `http://127.0.0.1:PORT` (the insecure port).
    pub url: String,
    /// The TLS URL, `https://127.0.0.1:PORT` (needs the admin token).
    pub https_url: String,
    /// The temporary directory holding the data dir and the kubeconfig; `None` only after
    /// [`TestServer::kill9`] handed it back.
    pub dir: Option<TempDir>,
    /// Everything the server wrote to stderr so far.
    stderr: Arc<Mutex<String>>,
}

impl TestServer {
    /// Starts a server on a fresh temporary directory.
    pub fn start() -> TestServer {
        Self::start_in(tempfile::tempdir().expect("creating a temp dir"), &[])
    }

    /// Starts a server on `dir` (reusing `<dir>/data` if it exists) with `extra` arguments
    /// after `serve`. Panics, with the server's stderr, if it does not report its URL within
    /// 20 seconds.
    pub fn start_in(dir: TempDir, extra: &[&str]) -> TestServer {
        Self::start_command(dir, &["serve"], extra)
    }

    /// Starts `listwatch up --nodes NODES` (the server with the control plane in one
    /// process) on a fresh temporary directory, with `extra` arguments.
    pub fn start_up(nodes: usize, extra: &[&str]) -> TestServer {
        let nodes = nodes.to_string();
        Self::start_command(
            tempfile::tempdir().expect("creating a temp dir"),
            &["up", "--nodes", &nodes],
            extra,
        )
    }

    fn start_command(dir: TempDir, command: &[&str], extra: &[&str]) -> TestServer {
        let data = dir.path().join("data");
        let mut child = Command::new(env!("CARGO_BIN_EXE_listwatch"))
            .args(command)
            .args(["--insecure-bind", "127.0.0.1:0", "--bind", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(&data)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the listwatch binary");

        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err_pipe = child.stderr.take().expect("stderr is piped");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match err_pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n])),
                }
            }
        });

        let out_pipe = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(out_pipe).lines();
            for _ in 0..2 {
                if let Some(Ok(line)) = lines.next() {
                    let _ = tx.send(line);
                }
            }
            // Keep draining so the child never blocks on a full pipe.
            for _ in lines {}
        });

        let line = match rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(l) => l,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "listwatch serve did not print its URL within {STARTUP_TIMEOUT:?} ({e}); stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        let url = line
            .strip_prefix("listwatch serving on ")
            .unwrap_or_else(|| {
                panic!(
                    "unexpected first stdout line {line:?}; stderr:\n{}",
                    stderr.lock().unwrap()
                )
            })
            .trim()
            .to_string();
        let https_url = rx
            .recv_timeout(STARTUP_TIMEOUT)
            .ok()
            .and_then(|l| {
                l.strip_prefix("listwatch serving on ")
                    .map(|u| u.trim().to_string())
            })
            .unwrap_or_default();
        assert!(
            https_url.starts_with("https://"),
            "second stdout line should be the TLS URL, got {https_url:?}"
        );

        let srv = TestServer {
            child,
            url,
            https_url,
            dir: Some(dir),
            stderr,
        };
        srv.write_kubeconfig();
        srv
    }

    /// The temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("the dir is still owned").path()
    }

    /// The path of the kubeconfig that points at this server.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir().join("kubeconfig")
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The path of a kubeconfig for the TLS port, with the server's CA and admin token (as
    /// `listwatch kubeconfig --data-dir` writes it).
    pub fn tls_kubeconfig(&self) -> PathBuf {
        let path = self.dir().join("kubeconfig-tls");
        if !path.exists() {
            self.write_admin_kubeconfig(&path, &self.https_url);
        }
        path
    }

    /// Writes to `path` a kubeconfig with the admin identity and this server's CA, for the
    /// TLS address `server` (this server's, or a proxy's in front of it).
    pub fn write_admin_kubeconfig(&self, path: &Path, server: &str) {
        let out = Command::new(env!("CARGO_BIN_EXE_listwatch"))
            .args(["kubeconfig", "--server", server, "--data-dir"])
            .arg(self.dir().join("data"))
            .output()
            .expect("running listwatch kubeconfig");
        assert!(
            out.status.success(),
            "listwatch kubeconfig failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(path, &out.stdout).expect("writing the kubeconfig");
    }

    fn write_kubeconfig(&self) {
        let out = Command::new(env!("CARGO_BIN_EXE_listwatch"))
            .args(["kubeconfig", "--server", &self.url])
            .output()
            .expect("running listwatch kubeconfig");
        assert!(
            out.status.success(),
            "listwatch kubeconfig failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(self.kubeconfig(), &out.stdout).expect("writing the kubeconfig");
    }

    /// Kills the server with SIGKILL, waits for it, and hands back its directory so that a
    /// new server can be started on the same data.
    pub fn kill9(mut self) -> TempDir {
        self.child.kill().expect("sending SIGKILL");
        self.child.wait().expect("reaping the server");
        self.dir.take().expect("the dir is still owned")
    }

    /// Writes `contents` to `<dir>/<name>` and returns the path (for `kubectl -f`).
    pub fn write_file(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.dir().join(name);
        std::fs::write(&p, contents).expect("writing a manifest");
        p
    }

    /// A kubectl command pointed at this server (kubeconfig, request timeout, private
    /// discovery cache), not yet run. Panics with a clear message if kubectl is missing.
    pub fn kubectl_cmd(&self, args: &[&str]) -> Command {
        assert!(
            Path::new(KUBECTL).exists(),
            "{KUBECTL} is missing: these tests need kubectl 1.32 (the project set-up installs it)"
        );
        let mut cmd = Command::new(KUBECTL);
        cmd.env("KUBECONFIG", self.kubeconfig())
            .arg("--request-timeout=20s")
            .arg(format!(
                "--cache-dir={}",
                self.dir().join("kube-cache").display()
            ))
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs kubectl with `args` and returns its output, whatever its exit status.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_cmd(args).output().expect("running kubectl")
    }

    /// Runs kubectl with `args`; panics with its stdout and stderr unless it succeeds.
    /// Returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}\nserver stderr (tail):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            tail(&self.stderr(), 3000)
        );
        String::from_utf8(out.stdout).expect("kubectl prints UTF-8")
    }

    /// Runs kubectl with `args` expecting JSON on stdout, and parses it.
    pub fn kubectl_json(&self, args: &[&str]) -> Value {
        let out = self.kubectl_ok(args);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("kubectl {args:?} printed invalid JSON ({e}):\n{out}"))
    }

    /// Runs kubectl with `args`; panics unless it FAILS. Returns stderr.
    pub fn kubectl_err(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} unexpectedly succeeded:\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `listwatch` component (scheduler, controller-manager, node agents) running against a
/// [`TestServer`]; dropping it kills it.
pub struct Component(pub Child);

impl Drop for Component {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl TestServer {
    /// Runs only the namespace controller against this server (over TLS, without leader
    /// election), as kube-controller-manager would on a cluster: a bare `listwatch serve`
    /// leaves deleted namespaces Terminating.
    pub fn namespace_controller(&self) -> Component {
        let kubeconfig = self.tls_kubeconfig();
        Component(
            Command::new(env!("CARGO_BIN_EXE_listwatch"))
                .arg("controller-manager")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["--controllers", "namespace", "--leader-elect=false"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawning the namespace controller"),
        )
    }
}

/// The last `n` bytes (roughly) of `s`.
pub fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// A pooled HTTP/1.1 client for raw API requests.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A new pooled HTTP/1.1 client (must be used inside a tokio runtime).
pub fn http_client() -> HttpClient {
    Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

/// Sends one request with an optional JSON body; returns the status code and the body bytes.
pub async fn http_request(
    client: &HttpClient,
    method: &str,
    url: &str,
    body: Option<&Value>,
) -> Result<(u16, Bytes), String> {
    let mut builder = http::Request::builder()
        .method(method)
        .uri(url)
        .header("accept", "application/json");
    let payload = match body {
        Some(v) => {
            builder = builder.header("content-type", "application/json");
            Bytes::from(serde_json::to_vec(v).map_err(|e| e.to_string())?)
        }
        None => Bytes::new(),
    };
    let req = builder
        .body(Full::new(payload))
        .map_err(|e| e.to_string())?;
    let resp = client.request(req).await.map_err(|e| e.to_string())?;
    let code = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((code, bytes))
}

/// [`http_request`] from synchronous code, parsing the body as JSON.
pub fn http_json(method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building a runtime");
    rt.block_on(async {
        let client = http_client();
        let (code, bytes) = http_request(&client, method, url, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {url} failed: {e}"));
        let v = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{method} {url} gave non-JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        });
        (code, v)
    })
}

/// The `metadata.name` of every item of a list document.
pub fn item_names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items array in {list}"))
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}
