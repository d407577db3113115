//! A fault-injecting TCP proxy for integration tests: clients connect to the proxy, the
//! proxy to the server, and the test cuts, stalls or refuses connections in
//! between, as a flaky network or a restarting server would.
//!
//! - [`FaultProxy::cut`] resets every open connection (both sides get an RST);
//! - [`FaultProxy::set_refusing`] makes new connections fail at once (accepted, then reset);
//! - [`FaultProxy::set_stalled`] stops moving bytes in both directions while connections
//!   stay open (a partition that TCP does not notice); [`FaultProxy::hold`] in one
//!   direction (requests reach the server, answers do not);
//! - [`FaultProxy::set_target`] points new connections at another server address.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

struct Shared {
    target: Mutex<SocketAddr>,
    refusing: std::sync::atomic::AtomicBool,
    /// Client to server.
    stalled_up: watch::Sender<bool>,
    /// Server to client.
    stalled_down: watch::Sender<bool>,
    conns: Mutex<Vec<AbortHandle>>,
    accepted: AtomicUsize,
}

/// The proxy; it stops (and resets its connections) when dropped.
pub struct FaultProxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
    acceptor: AbortHandle,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.cut();
    }
}

impl FaultProxy {
    /// Starts a proxy on an ephemeral loopback port that forwards to `target`.
    pub async fn start(target: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (stalled_up, _) = watch::channel(false);
        let (stalled_down, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            target: Mutex::new(target),
            refusing: Default::default(),
            stalled_up,
            stalled_down,
            conns: Mutex::new(Vec::new()),
            accepted: AtomicUsize::new(0),
        });
        let s = shared.clone();
        let acceptor = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                s.accepted.fetch_add(1, Ordering::Relaxed);
                // Reset rather than close, so that nothing lingers. (A zero linger never
                // blocks the dropping thread, which is what the deprecation warns of.)
                #[allow(deprecated)]
                let _ = client.set_linger(Some(Duration::ZERO));
                if s.refusing.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let s2 = s.clone();
                let task = tokio::spawn(async move {
                    let target = *s2.target.lock().unwrap_or_else(PoisonError::into_inner);
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    #[allow(deprecated)]
                    let _ = server.set_linger(Some(Duration::ZERO));
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up = pump(cr, sw, s2.stalled_up.subscribe());
                    let down = pump(sr, cw, s2.stalled_down.subscribe());
                    // Either side ending ends both (dropping the halves resets them).
                    tokio::select! {
                        _ = up => {}
                        _ = down => {}
                    }
                });
                let mut conns = s.conns.lock().unwrap_or_else(PoisonError::into_inner);
                conns.retain(|c| !c.is_finished());
                conns.push(task.abort_handle());
            }
        })
        .abort_handle();
        FaultProxy {
            shared,
            addr,
            acceptor,
        }
    }

    /// `http://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Points new connections at `target` (open ones keep their server).
    pub fn set_target(&self, target: SocketAddr) {
        *self
            .shared
            .target
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = target;
    }

    /// Resets every open connection.
    pub fn cut(&self) {
        let conns: Vec<AbortHandle> = self
            .shared
            .conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        for c in conns {
            c.abort();
        }
    }

    /// While set, new connections are reset as soon as they are accepted.
    pub fn set_refusing(&self, refusing: bool) {
        self.shared.refusing.store(refusing, Ordering::SeqCst);
    }

    /// While set, no byte moves through any connection (they stay open).
    pub fn set_stalled(&self, stalled: bool) {
        self.hold(stalled, stalled);
    }

    /// Holds the bytes going to the server (`requests`) and those coming back (`answers`):
    /// with only `answers`, a request is applied and its client never hears of it.
    pub fn hold(&self, requests: bool, answers: bool) {
        self.shared.stalled_up.send_replace(requests);
        self.shared.stalled_down.send_replace(answers);
    }

    /// Connections accepted so far (refused ones included).
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::Relaxed)
    }
}

/// Copies `from` to `to` until either ends, holding each chunk while the proxy is stalled.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut stalled: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if stalled.wait_for(|s| !*s).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stalled.wait_for(|s| !*s).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
