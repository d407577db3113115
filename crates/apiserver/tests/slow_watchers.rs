//! Watchers that never read, over real sockets: once terminated for not keeping up, their
//! connections are reset within a bounded time and stop counting as running requests.

mod common;

use common::*;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CM: &str = "/api/v1/namespaces/default/configmaps";

async fn watching(srv: &std::sync::Arc<apiserver::ApiServer>) -> f64 {
    metric_sum(srv, "apiserver_longrunning_requests").await
}

/// Opens a watch of every configmap in `default` and never reads its answer; `upgrade` asks
/// for a WebSocket. The receive buffer is kept small so that it fills soon.
async fn unread_watch(addr: std::net::SocketAddr, upgrade: bool) -> TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(16 * 1024).unwrap();
    let mut s = sock.connect(addr).await.unwrap();
    let extra = if upgrade {
        "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    } else {
        ""
    };
    let req = format!("GET {CM}?watch=true HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    s
}

/// Creates 64 KiB ConfigMaps until `terminated` watchers have been terminated.
async fn write_until_terminated(srv: &std::sync::Arc<apiserver::ApiServer>, terminated: f64) {
    let blob = "x".repeat(64 * 1024);
    let mut i = 0;
    while metric_sum(srv, "apiserver_terminated_watchers_total").await < terminated {
        assert!(i < 2_000, "watchers not terminated after {i} writes");
        let cm = configmap(&format!("big-{i}"), json!({}), json!({"b": blob}));
        ok("create", post(srv, CM, &cm).await);
        i += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_of_a_terminated_watcher_that_reads_nothing_is_reset() {
    let h = Memory.start(config(10_000, 16)).await;
    let srv = &h.srv;
    let addr = serve_on_loopback(srv, apiserver::ServeOptions::default()).await;
    let mut clients = Vec::new();
    for i in 0..6 {
        clients.push(unread_watch(addr, i % 3 == 2).await);
    }
    let started = Instant::now();
    while watching(srv).await < 6.0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "watches not started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Large events fill the sockets and then the queues: every watcher is terminated.
    write_until_terminated(srv, 6.0).await;
    let terminated = Instant::now();
    // Their clients read nothing: the connections go within the grace period (and then no
    // longer count as running watches).
    while watching(srv).await > 0.0 {
        assert!(
            terminated.elapsed() < Duration::from_secs(15),
            "{} watches still running {:?} after their termination",
            watching(srv).await,
            terminated.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "terminated watchers' connections gone {:.1} s after termination",
        terminated.elapsed().as_secs_f64()
    );
    // And from the client's side, the connection has ended: what is buffered reads out,
    // then EOF or a reset.
    for mut c in clients {
        let mut buf = vec![0u8; 64 * 1024];
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match c.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "the connection is still open");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_watcher_whose_client_reads_keeps_its_connection() {
    let h = Memory.start(config(10_000, 16)).await;
    let srv = &h.srv;
    let addr = serve_on_loopback(srv, apiserver::ServeOptions::default()).await;
    let mut c = unread_watch(addr, false).await;
    write_until_terminated(srv, 1.0).await;
    // The client reads again: it gets the rest of the response, whose chunked body ends,
    // and then the same connection serves another request.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        while !got.ends_with(b"\r\n0\r\n\r\n") {
            let n = c.read(&mut buf).await.unwrap();
            assert!(n > 0, "the connection was closed");
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(read.is_ok(), "the terminated response did not end");
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut buf))
        .await
        .expect("no answer on the kept connection")
        .unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
}
