//! How long the server takes to refuse deeply nested YAML bodies, and how `/healthz` answers
//! meanwhile.
//!
//! ```sh
//! cargo run --release -p apiserver --example yaml_nesting -- [BYTES] [CONCURRENT] [deep|wide]
//! ```
//!
//! Starts the server (memory storage, a two-thread runtime of its own) on a loopback port,
//! sends CONCURRENT bodies (default 2) of BYTES bytes each (default 3 MiB, the body limit)
//! as `application/yaml` creates, each on its own connection, and polls `GET /healthz` on
//! another connection every 5 ms until every create was answered. A `deep` body (the
//! default) is `x: [[[…]]]`, nested as deep as its size allows; a `wide` one is a sequence
//! of lines `- [[[…]]]` nested 120 deep, which the server must parse in full (and then
//! refuses, for it is no object). Prints each create's status and time, and the `/healthz`
//! latencies.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends one request and reads the whole response: (status code, body).
async fn request(stream: &mut TcpStream, head: &str, body: &[u8]) -> (u16, Vec<u8>) {
    stream.write_all(head.as_bytes()).await.expect("write head");
    stream.write_all(body).await.expect("write body");
    let mut buf = Vec::new();
    let mut tmp = vec![0u8; 64 * 1024];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = stream.read(&mut tmp).await.expect("read");
        assert!(n > 0, "connection closed before the response head");
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = stream.read(&mut tmp).await.expect("read body");
        assert!(n > 0, "connection closed inside the body");
        buf.extend_from_slice(&tmp[..n]);
    }
    (code, buf[head_end..head_end + len].to_vec())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let k = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[k]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bytes: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3 * 1024 * 1024);
    let concurrent: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2);
    let wide = args.get(3).is_some_and(|a| a == "wide");

    // The server, on a runtime of its own.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("server runtime");
        rt.block_on(async move {
            let storage: Arc<dyn storage::Storage> =
                Arc::new(storage::memory::MemoryStorage::new());
            let srv = apiserver::ApiServer::new(storage, apiserver::ServerConfig::default())
                .await
                .expect("server");
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            addr_tx
                .send(listener.local_addr().expect("address"))
                .expect("send address");
            apiserver::serve(listener, srv, std::future::pending()).await;
        });
    });
    let addr = addr_rx.recv().expect("server address");

    let mut body = Vec::with_capacity(bytes);
    let levels = if wide {
        let line = format!("- {}{}\n", "[".repeat(120), "]".repeat(120));
        while body.len() + line.len() <= bytes {
            body.extend_from_slice(line.as_bytes());
        }
        121
    } else {
        let levels = bytes.saturating_sub(3) / 2;
        body.extend_from_slice(b"x: ");
        body.extend(std::iter::repeat_n(b'[', levels));
        body.extend(std::iter::repeat_n(b']', levels));
        levels + 1
    };
    let body = Arc::new(body);
    println!(
        "{concurrent} concurrent bodies of {} bytes ({levels} levels of nesting)",
        body.len()
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    rt.block_on(async move {
        let done = Arc::new(AtomicBool::new(false));
        let poller = {
            let done = done.clone();
            tokio::spawn(async move {
                let mut s = TcpStream::connect(addr).await.expect("connect");
                let mut samples = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let (code, _) = request(
                        &mut s,
                        &format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n"),
                        b"",
                    )
                    .await;
                    assert_eq!(code, 200, "/healthz");
                    samples.push(t.elapsed());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                samples
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        let creates: Vec<_> = (0..concurrent)
            .map(|_| {
                let body = body.clone();
                tokio::spawn(async move {
                    let mut s = TcpStream::connect(addr).await.expect("connect");
                    let head = format!(
                        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: {addr}\r\n\
                         Content-Type: application/yaml\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    let t = Instant::now();
                    let (code, answer) = request(&mut s, &head, &body).await;
                    (code, t.elapsed(), String::from_utf8_lossy(&answer).to_string())
                })
            })
            .collect();
        for (i, c) in creates.into_iter().enumerate() {
            let (code, took, answer) = c.await.expect("create task");
            let message = serde_json::from_str::<serde_json::Value>(&answer)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or(answer);
            println!(
                "create {i}: {code} after {:.3} s: {message}",
                took.as_secs_f64()
            );
        }
        let all = started.elapsed();
        done.store(true, Ordering::Relaxed);
        let mut samples = poller.await.expect("poller");
        samples.sort();
        println!(
            "all answered after {:.3} s; /healthz meanwhile: {} answers, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            all.as_secs_f64(),
            samples.len(),
            percentile(&samples, 0.5).as_secs_f64() * 1e3,
            percentile(&samples, 0.99).as_secs_f64() * 1e3,
            samples.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        );
    });
}
