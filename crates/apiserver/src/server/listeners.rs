//! The listeners: accept connections, tell HTTP/2 (prior knowledge or ALPN `h2`) from
//! HTTP/1.1, do TLS and serve each connection with the server's tunables. It assumes the
//! state ([`ApiServer`]) outlives every connection it serves.

use super::direct_conn::{ConnHandle, DirectConn};
use super::dispatch::BODY_READ_TIMEOUT;
use super::{http1_errors, http2, loopback_guard};
use crate::auth::authenticator::Authenticator;
use crate::auth::client_cert;
use crate::auth::user_info::{Authenticated, UserInfo};
use crate::handlers::state::ApiServer;
use crate::handlers::status_response;
use http::Request;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// HTTP/1.1 tunables of a listener.
#[derive(Debug, Clone)]
pub struct Http1Options {
    /// How long a client may take to send a request's headers, counted from when the
    /// connection is ready for the next request (so it also ends idle keep-alive
    /// connections). Without it, connections that never finish a request would each hold a
    /// task and a file descriptor forever. kube-apiserver allows 32 s.
    pub header_read_timeout: Duration,
}

impl Default for Http1Options {
    fn default() -> Self {
        Http1Options {
            header_read_timeout: Duration::from_secs(32),
        }
    }
}

/// HTTP/2 tunables of a listener.
#[derive(Debug, Clone)]
pub struct Http2Options {
    /// Concurrent streams a client may open on one connection (each watch is one stream).
    pub max_concurrent_streams: u32,
    /// Flow-control window of each stream for data the client sends.
    pub initial_stream_window: u32,
    /// Flow-control window of the whole connection for data the client sends.
    pub initial_connection_window: u32,
    /// Interval of the server's PING frames (dead-connection detection); `None` = off.
    pub keep_alive_interval: Option<Duration>,
    /// How long to wait for a PING's answer before closing the connection.
    pub keep_alive_timeout: Duration,
    /// How long a request's body may take to arrive in full, from its HEADERS: past it the
    /// request is answered 504 (default [`BODY_READ_TIMEOUT`]).
    pub body_timeout: Duration,
}

impl Default for Http2Options {
    fn default() -> Self {
        Http2Options {
            max_concurrent_streams: 10_000,
            initial_stream_window: 1 << 20,
            initial_connection_window: 16 << 20,
            keep_alive_interval: Some(Duration::from_secs(30)),
            keep_alive_timeout: Duration::from_secs(20),
            body_timeout: BODY_READ_TIMEOUT,
        }
    }
}

/// How a listener is served.
#[derive(Clone, Default)]
pub struct ServeOptions {
    /// Serve TLS with this configuration (ALPN picks HTTP/2 or HTTP/1.1); `None` = plain TCP
    /// (HTTP/1.1 and h2c with prior knowledge).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Authenticate every request (client certificate, bearer token, ServiceAccount token,
    /// else anonymous) and authorize it as that user; a bad credential is a 401 Status.
    /// `None` = no authentication: every request runs unchecked (the loopback port).
    pub authenticator: Option<Arc<Authenticator>>,
    /// HTTP/1.1 settings.
    pub http1: Http1Options,
    /// HTTP/2 settings.
    pub http2: Http2Options,
    /// Refuse what a web page could send to a loopback port: requests naming a host that is
    /// not a loopback one, carrying a foreign `Origin`, or writing without a body media type
    /// (see [`loopback_guard`]). For listeners without authentication.
    pub loopback_only: bool,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("tls", &self.tls.is_some())
            .field("authenticator", &self.authenticator)
            .field("http1", &self.http1)
            .field("http2", &self.http2)
            .field("loopback_only", &self.loopback_only)
            .finish()
    }
}

/// The request extension naming the client's address (for the audit log's `sourceIPs`).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub std::net::SocketAddr);

/// The HTTP/2 client preface every h2c (prior knowledge) connection starts with.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// True if the client's first bytes are the HTTP/2 preface (read without consuming them).
/// False as soon as they differ, or if the client closes or errs first.
async fn is_h2_preface(stream: &tokio::net::TcpStream) -> bool {
    let mut buf = [0u8; 24];
    loop {
        let n = match stream.peek(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        if buf[..n] != H2_PREFACE[..n] {
            return false;
        }
        if n == H2_PREFACE.len() {
            return true;
        }
        // Part of the preface so far: wait for more.
        if stream.readable().await.is_err() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// How long a client may take to complete the TLS handshake (or, on plain TCP, to show
/// whether it speaks HTTP/2).
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections that may be in their TLS handshake at once; more are closed as soon as
/// accepted, so that clients which never finish a handshake hold a bounded number of tasks,
/// descriptors and TLS states (each for [`TLS_HANDSHAKE_TIMEOUT`] at most).
pub const MAX_PENDING_HANDSHAKES: usize = 4096;

/// Serves HTTP/1.1, h2c (prior knowledge) and WebSocket watches on `listener`, without TLS
/// or authentication, until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    srv: Arc<ApiServer>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    serve_with(listener, srv, ServeOptions::default(), shutdown).await
}

/// Serves `listener` as `opts` says until `shutdown` resolves. A connection that fails (bad
/// TLS handshake, protocol error) is closed and logged at debug level; the listener goes on.
pub async fn serve_with(
    listener: TcpListener,
    srv: Arc<ApiServer>,
    opts: ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = opts.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let opts = Arc::new(opts);
    let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => return,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let handshake = match &acceptor {
            Some(_) => match handshakes.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    tracing::debug!("{MAX_PENDING_HANDSHAKES} TLS handshakes pending: closed");
                    drop(stream);
                    continue;
                }
            },
            None => None,
        };
        let _ = stream.set_nodelay(true);
        let srv = srv.clone();
        let opts = opts.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            match acceptor {
                Some(acceptor) => {
                    // Under TLS too, so that the connection can be reset (never written to
                    // directly: the bytes are encrypted).
                    let (handle, stream) = DirectConn::new(stream);
                    let accepted =
                        tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                    drop(handshake);
                    match accepted {
                        Ok(Ok(tls)) => {
                            // rustls accepted a client certificate only if our CA issued it;
                            // one that names no user authenticates nobody.
                            let user = tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .and_then(|c| client_cert::user_of(c.as_ref()))
                                .map(Arc::new);
                            if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                                http2::serve_connection(tls, srv, opts, user, Some(peer)).await
                            } else {
                                serve_connection(tls, srv, &opts, Some(handle), false, user, peer)
                                    .await
                            }
                        }
                        Ok(Err(e)) => tracing::debug!("TLS handshake failed: {e}"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
                None => {
                    // A client that sends part of the preface and stalls would keep the
                    // sniffing loop polling forever.
                    let sniffed =
                        tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, is_h2_preface(&stream)).await;
                    let Ok(h2) = sniffed else {
                        tracing::debug!("no complete first request line or preface in time");
                        return;
                    };
                    if h2 {
                        http2::serve_connection(stream, srv, opts, None, Some(peer)).await
                    } else {
                        let (conn, io) = DirectConn::new(stream);
                        serve_connection(io, srv, &opts, Some(conn), true, None, peer).await
                    }
                }
            }
        });
    }
}

/// Serves one plain HTTP/1.1 connection (with WebSocket upgrades) over any transport, as
/// [`serve_with`] serves a TCP connection that does not start with the HTTP/2 preface, but
/// without a [`DirectConn`]: the cacher never writes to it directly and it cannot be reset.
/// For the fuzz targets (crate `fuzz`), which feed the real connection handling in-memory
/// byte streams; `peer` is the client address requests are attributed to.
#[doc(hidden)]
pub async fn serve_http1_connection<IO>(
    io: IO,
    srv: Arc<ApiServer>,
    opts: &ServeOptions,
    peer: std::net::SocketAddr,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    serve_connection(io, srv, opts, None, false, None, peer).await
}

/// Serves one HTTP/1.1 connection (with WebSocket upgrades) over `conn`'s socket (`io` is
/// its transport, or TLS over it; `conn` is `None` only for in-memory transports); `direct`
/// when the cacher may write watch chunks to the socket directly (plain TCP only);
/// `client_user` is the user of the connection's client certificate, if any.
async fn serve_connection<IO>(
    io: IO,
    srv: Arc<ApiServer>,
    opts: &ServeOptions,
    conn: Option<Arc<DirectConn>>,
    direct: bool,
    client_user: Option<Arc<UserInfo>>,
    peer: std::net::SocketAddr,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(http1_errors::StatusOnParseError::new(io));
    let authn = opts.authenticator.clone();
    let loopback_only = opts.loopback_only;
    let service = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
        let srv = srv.clone();
        let mut refusal = None;
        if let Some(a) = &authn {
            match a.authenticate(req.headers(), client_user.as_ref(), &*srv) {
                Ok(user) => {
                    req.extensions_mut().insert(Authenticated(user));
                }
                Err(s) => refusal = Some(s),
            }
        }
        if let Some(conn) = &conn {
            if direct {
                req.extensions_mut().insert(conn.clone());
            }
            req.extensions_mut().insert(ConnHandle(conn.clone()));
        }
        req.extensions_mut().insert(PeerAddr(peer));
        async move {
            if loopback_only {
                if let Err(s) = loopback_guard::check(req.method(), req.uri(), req.headers()) {
                    return Ok(status_response(&s));
                }
            }
            if let Some(s) = refusal {
                return Ok(status_response(&s));
            }
            Ok::<_, std::convert::Infallible>(srv.handle(req).await)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(opts.http1.header_read_timeout)
        .serve_connection(io, service)
        .with_upgrades();
    if let Err(e) = conn.await {
        tracing::debug!("connection ended: {e}");
    }
}
