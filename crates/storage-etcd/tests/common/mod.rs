//! Test helper: a real single-member etcd on free loopback ports with a temporary data dir.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use storage_etcd::{EtcdOptions, EtcdStorage};

/// Where the etcd binary is: `$LISTWATCH_ETCD`, else Debian's `/usr/bin/etcd`.
pub fn etcd_binary() -> PathBuf {
    let path = std::env::var_os("LISTWATCH_ETCD")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"));
    assert!(
        path.exists(),
        "{} is missing: these tests need a real etcd 3.4 (Debian's etcd-server). \
         Run scripts/test.sh, which installs it, or `apt-get install -y etcd-server`.",
        path.display()
    );
    path
}

/// Two distinct free loopback ports (bound to :0, then released).
fn free_ports() -> (u16, u16) {
    let a = TcpListener::bind("127.0.0.1:0").unwrap();
    let b = TcpListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

/// A running etcd, killed (and its data dir removed) on drop.
pub struct EtcdServer {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
}

impl EtcdServer {
    /// Starts etcd and waits until it answers.
    pub async fn start() -> EtcdServer {
        // tmpfs makes etcd's fsyncs free; fall back to the default temp dir.
        let dir = tempfile::Builder::new()
            .prefix("listwatch-etcd-")
            .tempdir_in("/dev/shm")
            .or_else(|_| tempfile::Builder::new().prefix("listwatch-etcd-").tempdir())
            .unwrap();
        let (client_port, peer_port) = free_ports();
        let mut srv = EtcdServer {
            child: None,
            dir,
            client_port,
            peer_port,
        };
        srv.spawn();
        srv.wait_ready().await;
        srv
    }

    /// The client URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    fn spawn(&mut self) {
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let data = self.dir.path().join("data");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .unwrap();
        let child = Command::new(etcd_binary())
            .arg("--name=test")
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={}", self.endpoint()))
            .arg(format!("--advertise-client-urls={}", self.endpoint()))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .arg("--experimental-watch-progress-notify-interval=1s")
            .arg("--logger=zap")
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", etcd_binary().display()));
        self.child = Some(child);
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "etcd exited during start-up ({status}); log:\n{}",
                        self.log()
                    );
                }
            }
            let opts = EtcdOptions {
                connect_timeout: Duration::from_millis(500),
                request_timeout: Duration::from_secs(1),
                ..EtcdOptions::default()
            };
            if EtcdStorage::connect(&[self.endpoint()], opts).await.is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not become ready within 30 s; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// etcd's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// Kills etcd (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same data dir and ports, and waits until it answers.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn();
        self.wait_ready().await;
    }

    /// A storage on this etcd with the given key namespace.
    pub async fn storage(&self, prefix: &str) -> EtcdStorage {
        let opts = EtcdOptions {
            prefix: prefix.to_string(),
            ..EtcdOptions::default()
        };
        EtcdStorage::connect(&[self.endpoint()], opts)
            .await
            .unwrap()
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}
