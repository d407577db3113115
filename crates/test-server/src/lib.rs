//! A real `listwatch serve` for the integration tests of the crates that talk to it only
//! over the wire (the client library, the control plane): a child process on a fresh data
//! directory and an ephemeral loopback port, restartable on the same data, plus
//! deadline-bounded waiting and a `/metrics` reader. A dev-dependency only.
//!
//! The server binary is expected in the directory of the build profile the tests run under
//! (found from the test binary's own path, so `CARGO_TARGET_DIR`, `--release` and custom
//! profiles are respected): build it with the same profile first, e.g.
//! `cargo build -p listwatch` before `cargo test`, or `cargo build --release -p listwatch`
//! before `cargo test --release`.

pub mod fault_proxy;

use client::rest::{Client, Config};
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A `listwatch serve` child on a fresh data directory, serving plain HTTP on an ephemeral
/// loopback port; killed and cleaned up on drop.
pub struct Server {
    child: Child,
    dir: PathBuf,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    extra: Vec<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The directory of the build profile the running test binary belongs to
/// (`<target>/<profile>`, or `<target>/<triple>/<profile>` when cross-compiling): a test
/// binary lives in that directory's `deps/`. `None` when the executable is elsewhere.
fn profile_dir_of(exe: &Path) -> Option<PathBuf> {
    let deps = exe.parent()?;
    if deps.file_name()? != "deps" {
        return None;
    }
    deps.parent().map(Path::to_path_buf)
}

/// The `listwatch` binary of the profile in use: beside the test binary's `deps/` (so a
/// `cargo test --release`, a custom profile or a `CARGO_TARGET_DIR` elsewhere finds the
/// binary it built); failing that, under `$CARGO_TARGET_DIR/debug/` or the workspace's
/// `target/debug/`.
fn server_binary() -> PathBuf {
    let from_exe = std::env::current_exe()
        .ok()
        .and_then(|exe| profile_dir_of(&exe))
        .map(|dir| dir.join("listwatch"));
    let exe = from_exe.unwrap_or_else(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
        target.join("debug").join("listwatch")
    });
    assert!(
        exe.exists(),
        "the listwatch server binary is missing at {}: build it with the profile of these \
         tests first (`cargo build -p listwatch`, with `--release` or `--profile` as given \
         to `cargo test`)",
        exe.display()
    );
    exe
}

impl Server {
    /// Starts a server with `extra` arguments after the usual ones, and waits (≤ 30 s) for
    /// its "serving on" line.
    pub fn start(extra: &[&str]) -> Server {
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("listwatch-it-{}-{stamp:x}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let (child, url) = Self::spawn(&dir, &extra);
        Server {
            child,
            dir,
            url,
            extra,
        }
    }

    /// Stops the server (SIGKILL) and starts it again on the same data directory, with the
    /// same arguments; it comes back on a new port (`url` changes).
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (child, url) = Self::spawn(&self.dir, &self.extra);
        self.child = child;
        self.url = url;
    }

    fn spawn(dir: &std::path::Path, extra: &[String]) -> (Child, String) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))
            .unwrap();
        let mut child = Command::new(server_binary())
            .args([
                "serve",
                "--insecure-bind",
                "127.0.0.1:0",
                "--bind",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(dir.join("data"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawning listwatch serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            for _ in lines {}
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                panic!(
                    "server did not start; log:\n{}",
                    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
                )
            });
        let url = line
            .strip_prefix("listwatch serving on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .trim()
            .to_string();
        assert!(url.starts_with("http://"), "plain listener first: {line}");
        (child, url)
    }

    /// The `host:port` the plain listener is on.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.url
            .trim_start_matches("http://")
            .parse()
            .expect("the server URL is http://ADDR")
    }

    /// The server's counter or gauge `name` with every label in `labels`, summed over the
    /// other labels (0 if absent), read from its `/metrics`.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let (_, body) = self
            .client()
            .request_bytes(http::Method::GET, "/metrics", None)
            .await
            .expect("reading /metrics");
        metric_in(&String::from_utf8_lossy(&body), name, labels)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Creates the namespaces `names` (existing ones are fine).
    pub async fn namespaces(&self, names: &[&str]) {
        let client = self.client();
        for name in names {
            let ns = k8s_openapi::api::core::v1::Namespace {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some(name.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match client
                .create::<k8s_openapi::api::core::v1::Namespace>(
                    &client::rest::resource::NAMESPACES,
                    None,
                    &client::rest::PostParams::default(),
                    &ns,
                )
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_already_exists() => {}
                Err(e) => panic!("creating namespace {name}: {e}"),
            }
        }
    }

    /// A client with a 20 s request timeout.
    pub fn client(&self) -> Client {
        let mut config = Config::new(&self.url).unwrap();
        config.timeout = Some(Duration::from_secs(20));
        Client::new(config).unwrap()
    }
}

/// Polls `cond` every 5 ms until it holds; fails the test with `what` after `limit`.
pub async fn until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls the asynchronous `cond` every 20 ms until it yields true; fails the test with
/// `what` after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Awaits `fut` for at most `limit`; fails the test with `what` after that.
pub async fn within<T>(
    what: &str,
    limit: Duration,
    fut: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {limit:?}: {what}"),
    }
}

/// The sum of the samples of `name` whose labels include all of `labels`, in a Prometheus
/// text exposition.
pub fn metric_in(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = match series.split_once('{') {
                Some((m, rest)) => (m, rest),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// `namespace/name` (or `name`) → resourceVersion of every object an informer holds: what
/// a fault test compares with a fresh list of the server to say the informer converged.
pub fn cached_versions<K: client::object::KubeObject>(
    informer: &client::cache::SharedIndexInformer<K>,
) -> std::collections::BTreeMap<String, String> {
    informer
        .indexer()
        .list()
        .iter()
        .map(|o| {
            (
                client::cache::object_key(&**o),
                o.resource_version().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_dir_is_the_parent_of_deps() {
        assert_eq!(
            profile_dir_of(Path::new("/t/release/deps/rest-0123abcd")),
            Some(PathBuf::from("/t/release"))
        );
        assert_eq!(
            profile_dir_of(Path::new(
                "/t/x86_64-unknown-linux-gnu/dev-opt/deps/rest-01"
            )),
            Some(PathBuf::from("/t/x86_64-unknown-linux-gnu/dev-opt"))
        );
        assert_eq!(profile_dir_of(Path::new("/usr/bin/rest")), None);
    }

    #[test]
    fn this_test_binary_has_a_profile_dir() {
        let exe = std::env::current_exe().unwrap();
        let dir = profile_dir_of(&exe).unwrap();
        assert!(dir.join("deps").is_dir(), "{}", dir.display());
    }
}
