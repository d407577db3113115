//! Helpers of the node agent and node lifecycle tests: a real `listwatch serve` child on
//! ephemeral ports (plain HTTP and TLS), deadline-bounded waiting, and a TCP proxy that can
//! cut every connection through it.
//!
//! The server binary is expected at `<workspace>/target/debug/listwatch` (or under
//! `$CARGO_TARGET_DIR/debug/`); build it with `cargo build -p listwatch`.

#![allow(dead_code)]

use client::rest::{Client, Config};
use parking_lot::Mutex;
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

fn binary() -> PathBuf {
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

/// A `listwatch serve` child on a fresh data directory; killed and cleaned up on drop.
pub struct Server {
    child: Child,
    dir: PathBuf,
    /// `http://127.0.0.1:PORT` (no authentication).
    pub url: String,
    /// `https://127.0.0.1:PORT` (token authentication).
    pub tls_url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    /// Starts a server and waits (≤ 30 s) for its two "serving on" lines.
    pub fn start() -> Server {
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "listwatch-controllers-it-{}-{stamp:x}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let mut child = Command::new(binary())
            .args([
                "serve",
                "--insecure-bind",
                "127.0.0.1:0",
                "--bind",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(dir.join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawning listwatch serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let mut urls = Vec::new();
        while urls.len() < 2 {
            let line = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| {
                    panic!(
                        "server did not start; log:\n{}",
                        std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
                    )
                });
            if let Some(url) = line.strip_prefix("listwatch serving on ") {
                urls.push(url.trim().to_string());
            }
        }
        let url = urls
            .iter()
            .find(|u| u.starts_with("http://"))
            .cloned()
            .unwrap();
        let tls_url = urls
            .iter()
            .find(|u| u.starts_with("https://"))
            .cloned()
            .unwrap();
        Server {
            child,
            dir,
            url,
            tls_url,
        }
    }

    /// The plain listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.url.trim_start_matches("http://").parse().unwrap()
    }

    /// The TLS listener's address.
    pub fn tls_addr(&self) -> SocketAddr {
        self.tls_url.trim_start_matches("https://").parse().unwrap()
    }

    /// A client of the plain listener with a 20 s request timeout.
    pub fn client(&self) -> Client {
        client_to(&self.url)
    }

    /// A kubeconfig for the TLS listener at `server` (the CA and admin token of this
    /// server), written by `listwatch kubeconfig`.
    pub fn tls_config(&self, server: &str) -> Config {
        let out = Command::new(binary())
            .args(["kubeconfig", "--server", server, "--data-dir"])
            .arg(self.dir.join("data"))
            .output()
            .expect("running listwatch kubeconfig");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = self
            .dir
            .join(format!("kubeconfig-{}", server.replace([':', '/'], "_")));
        std::fs::write(&path, &out.stdout).unwrap();
        let mut config = Config::from_kubeconfig_file(&path, None).expect("the kubeconfig");
        config.timeout = Some(Duration::from_secs(20));
        config
    }

    /// The server's counter or gauge `name` with every label in `labels`, summed over the
    /// other labels (0 if absent).
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let (_, body) = self
            .client()
            .request_bytes(http::Method::GET, "/metrics", None)
            .await
            .expect("reading /metrics");
        let text = String::from_utf8_lossy(&body);
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let (n, rest) = series.split_once('{').unwrap_or((series, ""));
                (n == name
                    && labels
                        .iter()
                        .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
                .then(|| value.parse::<f64>().ok())
                .flatten()
            })
            .sum()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

/// A client of `url` with a 20 s request timeout.
pub fn client_to(url: &str) -> Client {
    let mut config = Config::new(url).unwrap();
    config.timeout = Some(Duration::from_secs(20));
    Client::new(config).unwrap()
}

/// Polls `cond` every 20 ms until it yields `Some`, failing the test with `what` after
/// `limit`.
pub async fn until<T, F, Fut>(what: &str, limit: Duration, mut cond: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = cond().await {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A TCP proxy on an ephemeral loopback port that can reset every connection through it;
/// it stops (and resets its connections) when dropped.
pub struct CutProxy {
    addr: SocketAddr,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
    accepted: Arc<AtomicUsize>,
    acceptor: AbortHandle,
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.cut();
    }
}

impl CutProxy {
    /// Starts a proxy to `target`.
    pub async fn start(target: SocketAddr) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let accepted: Arc<AtomicUsize> = Arc::default();
        let (c, a) = (conns.clone(), accepted.clone());
        let acceptor = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                a.fetch_add(1, Ordering::Relaxed);
                #[allow(deprecated)]
                let _ = client.set_linger(Some(Duration::ZERO));
                let task = tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else {
                        return;
                    };
                    #[allow(deprecated)]
                    let _ = server.set_linger(Some(Duration::ZERO));
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
                let mut conns = c.lock();
                conns.retain(|h| !h.is_finished());
                conns.push(task.abort_handle());
            }
        })
        .abort_handle();
        CutProxy {
            addr,
            conns,
            accepted,
            acceptor,
        }
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Resets every open connection.
    pub fn cut(&self) {
        for c in self.conns.lock().drain(..) {
            c.abort();
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}
