//! HTTP/1.1 watches over real sockets. Once a plain HTTP/1.1 watch response's headers are
//! out, the watch cache writes each event's chunk straight to the socket; these tests check
//! the wire stays exact chunked HTTP/1.1 through a full socket (partial writes handed back to
//! the connection's task), at the end of the stream (terminating chunk, then keep-alive reuse
//! of the connection), and when the client goes away.

mod common;

use common::{metric_sum, ok, post, put, Factory, Memory};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start(
    watcher_queue: usize,
) -> (
    common::Harness,
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
) {
    let h = Memory.start(common::config(1000, watcher_queue)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(apiserver::serve(listener, h.srv.clone(), async move {
        let _ = rx.await;
    }));
    (h, addr, tx)
}

fn cm(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": value}})
}

/// A raw HTTP/1.1 client with a strict chunked-encoding reader.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn connect(addr: SocketAddr) -> Conn {
        Conn {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    async fn get(&mut self, path: &str) {
        let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nAccept: application/json\r\n\r\n");
        self.stream.write_all(req.as_bytes()).await.unwrap();
    }

    /// Reads more bytes; false on EOF or timeout.
    async fn fill(&mut self, wait: Duration) -> bool {
        let mut tmp = vec![0u8; 256 * 1024];
        match tokio::time::timeout(wait, self.stream.read(&mut tmp)).await {
            Ok(Ok(0)) | Err(_) => false,
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&tmp[..n]);
                true
            }
            Ok(Err(e)) => panic!("read: {e}"),
        }
    }

    /// Reads a CRLF-terminated line (without the CRLF).
    async fn line(&mut self, wait: Duration) -> String {
        loop {
            if let Some(pos) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8(self.buf[..pos].to_vec()).unwrap();
                self.buf.drain(..pos + 2);
                return line;
            }
            assert!(
                self.fill(wait).await,
                "connection ended or stalled inside a line"
            );
        }
    }

    async fn exact(&mut self, n: usize, wait: Duration) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(
                self.fill(wait).await,
                "connection ended or stalled inside a body"
            );
        }
        self.buf.drain(..n).collect()
    }

    /// The status code and headers (names lower-cased) of the next response.
    async fn head(&mut self, wait: Duration) -> (u16, Vec<(String, String)>) {
        let status = self.line(wait).await;
        let code = status
            .strip_prefix("HTTP/1.1 ")
            .and_then(|r| r.get(..3))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("status line {status:?}"));
        let mut headers = Vec::new();
        loop {
            let l = self.line(wait).await;
            if l.is_empty() {
                return (code, headers);
            }
            let (k, v) = l.split_once(':').unwrap();
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }

    /// The next chunk's data; `None` for the terminating chunk (and its empty trailer).
    async fn chunk(&mut self, wait: Duration) -> Option<Vec<u8>> {
        let size = self.line(wait).await;
        let n = usize::from_str_radix(&size, 16)
            .unwrap_or_else(|_| panic!("bad chunk size line {size:?}"));
        if n == 0 {
            assert_eq!(
                self.line(wait).await,
                "",
                "terminating chunk must end the trailer"
            );
            return None;
        }
        let data = self.exact(n, wait).await;
        assert_eq!(
            self.exact(2, wait).await,
            b"\r\n",
            "chunk data must end with CRLF"
        );
        Some(data)
    }

    /// The events of the next chunk: each a complete JSON line.
    async fn events(&mut self, wait: Duration) -> Option<Vec<Value>> {
        let data = self.chunk(wait).await?;
        assert!(data.ends_with(b"\n"), "a chunk holds whole lines");
        Some(
            data.split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_slice(l).expect("event line is JSON"))
                .collect(),
        )
    }
}

fn rv(v: &Value) -> u64 {
    common::rv_of(v)
}

const WAIT: Duration = Duration::from_secs(10);

async fn direct(h: &common::Harness, result: &str) -> f64 {
    let text = common::send(
        &h.srv,
        http::Method::GET,
        "/metrics",
        None,
        bytes::Bytes::new(),
    )
    .await;
    let body = http_body_util::BodyExt::collect(text.into_body())
        .await
        .unwrap()
        .to_bytes();
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| {
            l.starts_with("listwatch_watch_direct_writes_total{")
                && l.contains(&format!("result=\"{result}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_watch_keeps_exact_chunks_through_a_full_socket() {
    let (h, addr, _stop) = start(100_000).await;
    let base = "/api/v1/namespaces/default/configmaps";
    let created = ok("create", post(&h.srv, base, &cm("big", "0")).await);
    let mut c = Conn::connect(addr).await;
    c.get(&format!(
        "{base}?watch=true&resourceVersion={}",
        rv(&created)
    ))
    .await;
    let (code, headers) = c.head(WAIT).await;
    assert_eq!(code, 200);
    assert!(headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v == "chunked"));

    // One event end to end first, so the hand-over to direct writes has happened.
    let first = ok(
        "update",
        put(&h.srv, &format!("{base}/big"), &cm("big", "1")).await,
    );
    let evs = c.events(WAIT).await.expect("an event chunk");
    assert_eq!(rv(&evs[0]["object"]), rv(&first));

    // Stop reading while ~20 MB of events are produced: far more than the socket buffers,
    // so writes come back partial or refused and the rest waits for the connection's task.
    let big = "x".repeat(64 * 1024);
    let mut want = Vec::new();
    for i in 0..300 {
        let v = ok(
            "update",
            put(
                &h.srv,
                &format!("{base}/big"),
                &cm("big", &format!("{i}{big}")),
            )
            .await,
        );
        want.push(rv(&v));
    }
    let mut got = Vec::new();
    while got.len() < want.len() {
        for ev in c.events(WAIT).await.expect("stream ended early") {
            assert_eq!(ev["type"], "MODIFIED");
            let data = ev["object"]["data"]["k"].as_str().unwrap();
            assert_eq!(data.len(), big.len() + format!("{}", got.len()).len());
            got.push(rv(&ev["object"]));
        }
    }
    assert_eq!(got, want, "every event once, in order");
    assert!(
        direct(&h, "written").await >= 1.0,
        "the dispatcher wrote to the socket"
    );
    assert!(
        direct(&h, "deferred").await >= 1.0,
        "the socket filled up at least once"
    );
    assert_eq!(
        metric_sum(&h.srv, "apiserver_terminated_watchers_total").await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_watch_ends_with_the_last_chunk_and_the_connection_is_reused() {
    let (h, addr, _stop) = start(1000).await;
    let base = "/api/v1/namespaces/default/configmaps";
    let created = ok("create", post(&h.srv, base, &cm("a", "0")).await);
    let mut c = Conn::connect(addr).await;
    c.get(&format!(
        "{base}?watch=true&resourceVersion={}&timeoutSeconds=2",
        rv(&created)
    ))
    .await;
    assert_eq!(c.head(WAIT).await.0, 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = direct(&h, "written").await;
    let mut want = Vec::new();
    for i in 1..=5 {
        let v = ok(
            "update",
            put(&h.srv, &format!("{base}/a"), &cm("a", &i.to_string())).await,
        );
        want.push(rv(&v));
    }
    let mut got = Vec::new();
    while let Some(evs) = c.events(WAIT).await {
        got.extend(evs.iter().map(|e| rv(&e["object"])));
    }
    assert_eq!(got, want);
    assert!(
        direct(&h, "written").await >= before + 5.0,
        "the events were written directly"
    );

    // The terminating chunk left the connection clean for the next request.
    c.get(&format!("{base}/a")).await;
    let (code, headers) = c.head(WAIT).await;
    assert_eq!(code, 200);
    let body = match headers.iter().find(|(k, _)| k == "content-length") {
        Some((_, n)) => c.exact(n.parse().unwrap(), WAIT).await,
        None => {
            let mut all = Vec::new();
            while let Some(d) = c.chunk(WAIT).await {
                all.extend(d);
            }
            all
        }
    };
    let obj: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(obj["data"]["k"], "5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_departed_direct_watcher_is_unregistered() {
    let (h, addr, _stop) = start(1000).await;
    let base = "/api/v1/namespaces/default/configmaps";
    let created = ok("create", post(&h.srv, base, &cm("gone", "0")).await);
    let mut c = Conn::connect(addr).await;
    c.get(&format!(
        "{base}?watch=true&resourceVersion={}",
        rv(&created)
    ))
    .await;
    assert_eq!(c.head(WAIT).await.0, 200);
    ok(
        "update",
        put(&h.srv, &format!("{base}/gone"), &cm("gone", "1")).await,
    );
    assert!(c.events(WAIT).await.is_some());
    let watchers = || metric_sum(&h.srv, "apiserver_registered_watchers");
    assert_eq!(watchers().await, 1.0);
    drop(c);
    // Whichever notices first (hyper reading EOF, or the next direct write failing), the
    // watcher goes away and later events are no trouble.
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut i = 2;
    while watchers().await != 0.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "watcher still registered"
        );
        ok(
            "update",
            put(&h.srv, &format!("{base}/gone"), &cm("gone", &i.to_string())).await,
        );
        i += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ok(
        "update",
        put(&h.srv, &format!("{base}/gone"), &cm("gone", "last")).await,
    );
    let mut again = Conn::connect(addr).await;
    again.get(&format!("{base}/gone")).await;
    assert_eq!(again.head(WAIT).await.0, 200);
}
