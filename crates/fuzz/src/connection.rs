//! The server's connection handling fed raw bytes: what a client writes on a plain
//! connection (HTTP/1.1 with WebSocket upgrades, or h2c with prior knowledge), against one
//! in-process API server.

use apiserver::server::http2::connection::serve_connection as serve_h2;
use apiserver::server::http2::frame::PREFACE;
use apiserver::server::listeners::serve_http1_connection;
use apiserver::{ApiServer, ServeOptions, ServerConfig};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The API server the connection targets talk to, with the runtime it lives on.
struct Harness {
    rt: tokio::runtime::Runtime,
    srv: Arc<ApiServer>,
    opts: Arc<ServeOptions>,
}

static HARNESS: OnceLock<Harness> = OnceLock::new();

/// Built once per process: an `ApiServer` on the memory backend, on a single-threaded runtime
/// whose clock is paused. The paused clock auto-advances to the next timer whenever no task
/// can run, so a connection the client has finished writing to ends as soon as the server
/// has done all it would do, with no real waiting; and the server's own timers (idle
/// connections, PINGs, watch timeouts) fire in no time.
fn harness() -> &'static Harness {
    HARNESS.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a tokio runtime for the fuzzed server");
        let storage = Arc::new(storage::memory::MemoryStorage::new());
        let srv = rt
            .block_on(ApiServer::new(storage, ServerConfig::default()))
            .expect("an API server on the memory backend");
        Harness {
            rt,
            srv,
            opts: Arc::new(ServeOptions::default()),
        }
    })
}

/// The client address requests are attributed to.
const PEER: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    40000,
));

/// How long (on the paused clock) the client waits, after writing its bytes, for the server
/// to say more before it closes its writing half. A client that closed at once would not see
/// its requests answered: both HTTP/1.1 (without half-close support) and HTTP/2 drop a
/// connection's requests at the client's EOF.
const IDLE: Duration = Duration::from_secs(5);

/// How long (on the paused clock) a connection may go on after the client has closed its
/// writing half: past the server's body read timeout (60 s), so only a response that streams
/// on (a watch on HTTP/1.1, where a half-closed client may still read) lasts longer.
const HALF_CLOSED_BOUND: Duration = Duration::from_secs(90);

/// How long (on the paused clock) a connection may go on once the client has gone away
/// altogether: past the longest watch timeout (an hour), since a watch that has nothing to
/// send notices a vanished client only when it next writes.
const GONE_BOUND: Duration = Duration::from_secs(4000);

/// Which protocol a connection is served with.
#[derive(Clone, Copy)]
enum Protocol {
    Http1,
    H2,
}

/// Writes `input` into a fresh in-memory connection to the shared server and reads (and
/// drops) what the server answers; once the server has been quiet for [`IDLE`], closes the
/// client's writing half and reads on until the server closes the connection. A connection
/// still open [`HALF_CLOSED_BOUND`] later is dropped by the client, and must then end within
/// [`GONE_BOUND`].
fn serve(input: &[u8], protocol: Protocol) {
    let h = harness();
    h.rt.block_on(async {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (srv, opts) = (h.srv.clone(), h.opts.clone());
        let mut task = tokio::spawn(async move {
            match protocol {
                Protocol::H2 => serve_h2(server, srv, opts, None, Some(PEER)).await,
                Protocol::Http1 => serve_http1_connection(server, srv, &opts, PEER).await,
            }
        });
        let (mut rd, mut wr) = tokio::io::split(client);
        let mut buf = vec![0u8; 64 * 1024];
        // Reads until the server closes (true) or stays quiet for `IDLE` (false).
        let read_until_idle = async {
            loop {
                match tokio::time::timeout(IDLE, rd.read(&mut buf)).await {
                    Ok(Ok(0) | Err(_)) => return true,
                    Ok(Ok(_)) => {}
                    Err(_) => return false,
                }
            }
        };
        let (_, closed) = tokio::join!(wr.write_all(input), read_until_idle);
        if !closed {
            let _ = wr.shutdown().await;
            let _ = tokio::time::timeout(HALF_CLOSED_BOUND, async {
                while let Ok(n) = rd.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            })
            .await;
        }
        drop((rd, wr));
        let ended = tokio::time::timeout(GONE_BOUND, &mut task).await;
        assert!(
            ended.is_ok(),
            "the connection did not end within {GONE_BOUND:?} of its client going away"
        );
    });
}

/// Feeds the bytes as everything a client writes on a plain (insecure-port) connection to an
/// in-process server on the memory backend, chosen as the listener chooses: bytes starting
/// with the HTTP/2 client preface go to the HTTP/2 connection task (h2c with prior
/// knowledge), anything else to the HTTP/1.1 server (which also answers WebSocket upgrades
/// of watch URLs). The connection must end (within a bound of the paused clock) once the
/// client has written the bytes and gone away; nothing may panic.
pub fn connection(data: &[u8]) {
    let protocol = if data.starts_with(PREFACE) {
        Protocol::H2
    } else {
        Protocol::Http1
    };
    serve(data, protocol);
}

/// Feeds the HTTP/2 client preface followed by the bytes (frames, in the fuzzer's hands) to
/// the server's HTTP/2 connection task ([`serve_h2`]) over an in-memory connection to an
/// in-process server. The connection must end once the client has gone away; nothing may
/// panic.
pub fn http2(data: &[u8]) {
    let mut input = Vec::with_capacity(PREFACE.len() + data.len());
    input.extend_from_slice(PREFACE);
    input.extend_from_slice(data);
    serve(&input, Protocol::H2);
}
