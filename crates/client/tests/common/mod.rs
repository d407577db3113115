//! Shared helpers of the client's integration tests: a real `listwatch serve` child on an
//! ephemeral port, deadline-bounded waiting, and a test pod.
//!
//! The server binary is expected at `<workspace>/target/debug/listwatch` (or under
//! `$CARGO_TARGET_DIR/debug/`); build it with `cargo build -p listwatch`.

#![allow(dead_code)]

use client::rest::{Client, Config};
use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A `listwatch serve` child on a fresh data directory, serving plain HTTP on an ephemeral
/// loopback port; killed and cleaned up on drop.
pub struct Server {
    child: Child,
    dir: PathBuf,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn server_binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let exe = target.join("debug").join("listwatch");
    assert!(
        exe.exists(),
        "the listwatch server binary is missing at {}: run `cargo build -p listwatch` first",
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
        let dir = std::env::temp_dir().join(format!(
            "listwatch-client-it-{}-{stamp:x}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
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
        let mut server = Server {
            child,
            dir,
            url: String::new(),
        };
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("server did not start; log:\n{}", server.log()));
        server.url = line
            .strip_prefix("listwatch serving on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .trim()
            .to_string();
        assert!(
            server.url.starts_with("http://"),
            "plain listener first: {line}"
        );
        server
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
/// A one-container pod `name` (image `nginx:1`) labelled `app=<app>`; its namespace is the
/// one it is created in.
pub fn pod(name: &str, app: &str) -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app".to_string(), app.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("nginx:1".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

pub async fn until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
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
