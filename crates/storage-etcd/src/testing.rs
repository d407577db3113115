//! Test helpers (cargo feature `testing`): real etcd processes on free loopback ports with
//! temporary data directories, killed and cleaned up on drop.
//!
//! [`EtcdServer`] is a single-member etcd; [`EtcdCluster`] a cluster of several members (each
//! with its own data directory) whose members can be killed one by one. Every member runs
//! with a 1 s progress-notification interval, so idle watches (and the API server's watch
//! caches) advance within about a second.
//!
//! The etcd binary is `$LISTWATCH_ETCD`, else Debian's `/usr/bin/etcd` (package
//! `etcd-server`, 3.4). These helpers panic with a clear message when something goes wrong:
//! they are for tests only.

use crate::{EtcdOptions, EtcdStorage};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a member (or a whole cluster) may take to answer after start.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the etcd binary is: `$LISTWATCH_ETCD`, else `/usr/bin/etcd`. Panics, saying how to
/// install it, if it is missing.
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

/// `n` distinct free loopback ports (each bound to :0 while the others are chosen, then
/// released; another process could grab one in between, which is unlikely enough for tests).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("binding a free loopback port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local address").port())
        .collect()
}

/// A temporary directory, on tmpfs when there is one (etcd's fsyncs are then free).
fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("listwatch-etcd-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::Builder::new().prefix("listwatch-etcd-").tempdir())
        .expect("creating a temporary directory for etcd")
}

/// One etcd member process: its name, ports, data directory and log.
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Member {
    fn new(name: String, client_port: u16, peer_port: u16) -> Member {
        Member {
            name,
            client_port,
            peer_port,
            dir: temp_dir(),
            child: None,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Starts the process (`initial_cluster` = `name=peer,…` of every member).
    fn spawn(&mut self, initial_cluster: &str) {
        let data = self.dir.path().join("data");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("opening etcd's log file");
        let child = Command::new(etcd_binary())
            .arg(format!("--name={}", self.name))
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={}", self.endpoint()))
            .arg(format!("--advertise-client-urls={}", self.endpoint()))
            .arg(format!("--listen-peer-urls={}", self.peer_url()))
            .arg(format!("--initial-advertise-peer-urls={}", self.peer_url()))
            .arg(format!("--initial-cluster={initial_cluster}"))
            .arg("--initial-cluster-state=new")
            .arg("--initial-cluster-token=listwatch-test")
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

    /// Panics with the log if the process has exited.
    fn assert_running(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "etcd member {} exited ({status}); log:\n{}",
                    self.name,
                    self.log()
                );
            }
        }
    }

    /// Waits until this member answers a linearizable read (which needs a cluster leader).
    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            self.assert_running();
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
                "etcd member {} did not become ready within {READY_TIMEOUT:?}; log:\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running single-member etcd, killed (and its data dir removed) on drop.
pub struct EtcdServer {
    member: Member,
}

impl EtcdServer {
    /// Starts etcd on free loopback ports and waits until it answers.
    pub async fn start() -> EtcdServer {
        let ports = free_ports(2);
        let mut member = Member::new("test".into(), ports[0], ports[1]);
        member.spawn(&format!("test={}", member.peer_url()));
        member.wait_ready().await;
        EtcdServer { member }
    }

    /// The client URL (`http://127.0.0.1:PORT`).
    pub fn endpoint(&self) -> String {
        self.member.endpoint()
    }

    /// The temporary directory holding the data directory and the log.
    pub fn data_dir(&self) -> &Path {
        self.member.dir.path()
    }

    /// etcd's log so far.
    pub fn log(&self) -> String {
        self.member.log()
    }

    /// Kills etcd (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        self.member.kill();
    }

    /// Starts etcd again on the same data dir and ports, and waits until it answers.
    pub async fn restart(&mut self) {
        self.member.kill();
        let cluster = format!("test={}", self.member.peer_url());
        self.member.spawn(&cluster);
        self.member.wait_ready().await;
    }

    /// A storage on this etcd with the given key namespace (default options otherwise).
    pub async fn storage(&self, prefix: &str) -> EtcdStorage {
        let opts = EtcdOptions {
            prefix: prefix.to_string(),
            ..EtcdOptions::default()
        };
        EtcdStorage::connect(&[self.endpoint()], opts)
            .await
            .expect("connecting to the test etcd")
    }
}

/// A running etcd cluster of several members on loopback, each with its own data
/// directory; every member still running is killed on drop.
pub struct EtcdCluster {
    members: Vec<Member>,
    /// `name=peer,…` of every member, which a restarted member is started with again.
    initial: String,
}

impl EtcdCluster {
    /// Starts a cluster of `size` members and waits until every one answers a linearizable
    /// read (so the cluster has a leader).
    pub async fn start(size: usize) -> EtcdCluster {
        assert!(size > 0, "a cluster needs at least one member");
        let ports = free_ports(2 * size);
        let mut members: Vec<Member> = (0..size)
            .map(|i| Member::new(format!("m{i}"), ports[2 * i], ports[2 * i + 1]))
            .collect();
        let initial: Vec<String> = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect();
        let initial = initial.join(",");
        for m in &mut members {
            m.spawn(&initial);
        }
        for m in &mut members {
            m.wait_ready().await;
        }
        EtcdCluster { members, initial }
    }

    /// The client URL of every member, in member order (killed ones included).
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// The index of the current leader, asking each running member in turn; `None` if no
    /// running member answers with a known leader within a few seconds.
    pub async fn leader(&self) -> Option<usize> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            for m in self.members.iter().filter(|m| m.child.is_some()) {
                let Ok(mut client) = etcd_client::Client::connect([m.endpoint()], None).await
                else {
                    continue;
                };
                let status = tokio::time::timeout(Duration::from_secs(2), client.status()).await;
                let Ok(Ok(status)) = status else { continue };
                let me = status.header().map(|h| h.member_id());
                if me == Some(status.leader()) {
                    return self.members.iter().position(|x| x.name == m.name);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    /// Kills member `i` (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self, i: usize) {
        if let Some(m) = self.members.get_mut(i) {
            m.kill();
        }
    }

    /// Starts member `i` again (killing it first if it runs) on its data dir and ports, and
    /// waits until it answers a linearizable read: it has rejoined a cluster with a leader.
    pub async fn restart(&mut self, i: usize) {
        let initial = self.initial.clone();
        if let Some(m) = self.members.get_mut(i) {
            m.kill();
            m.spawn(&initial);
            m.wait_ready().await;
        }
    }

    /// Whether member `i` runs (it was not killed, or was restarted since).
    pub fn is_running(&self, i: usize) -> bool {
        self.members.get(i).is_some_and(|m| m.child.is_some())
    }

    /// The log of member `i` so far (empty if there is no such member).
    pub fn log(&self, i: usize) -> String {
        self.members.get(i).map(Member::log).unwrap_or_default()
    }

    /// A storage over every member with the given key namespace.
    pub async fn storage(&self, prefix: &str) -> EtcdStorage {
        let opts = EtcdOptions {
            prefix: prefix.to_string(),
            ..EtcdOptions::default()
        };
        EtcdStorage::connect(&self.endpoints(), opts)
            .await
            .expect("connecting to the test etcd cluster")
    }
}
