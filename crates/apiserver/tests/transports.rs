//! Transports over real sockets: WebSocket watches (handshake, one event per text message,
//! pings, close), malformed upgrades, and HTTP/2 (h2c prior knowledge) watches.

mod common;

use common::{ok, post, Factory, Memory};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Starts the server on a loopback port; the server stops when the returned sender drops.
async fn start() -> (
    common::Harness,
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
) {
    let h = Memory.start(common::config(1000, 1000)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let srv = h.srv.clone();
    tokio::spawn(apiserver::serve(listener, srv, async move {
        let _ = rx.await;
    }));
    (h, addr, tx)
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

/// A raw WebSocket client: enough to test the server's framing.
struct Ws {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// The response head of an upgrade attempt and, on 101, the client.
async fn ws_connect(addr: SocketAddr, path: &str, extra: &[(&str, &str)]) -> (String, Ws) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    );
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut tmp))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "connection closed before the response head");
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let rest = buf[head_end..].to_vec();
    (head, Ws { stream, buf: rest })
}

const KEY: (&str, &str) = ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==");
const VERSION: (&str, &str) = ("Sec-WebSocket-Version", "13");

impl Ws {
    /// The next server frame: (opcode, payload).
    async fn frame(&mut self, wait: Duration) -> Option<(u8, Vec<u8>)> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if self.buf.len() >= 2 {
                let b1 = self.buf[1];
                assert_eq!(b1 & 0x80, 0, "server frames must not be masked");
                assert_eq!(self.buf[0] & 0x80, 0x80, "server frames are unfragmented");
                let (len, hdr) = match b1 & 0x7F {
                    126 if self.buf.len() >= 4 => {
                        (u16::from_be_bytes([self.buf[2], self.buf[3]]) as usize, 4)
                    }
                    127 if self.buf.len() >= 10 => (
                        u64::from_be_bytes(self.buf[2..10].try_into().unwrap()) as usize,
                        10,
                    ),
                    126 | 127 => (usize::MAX, 0),
                    n => (n as usize, 2),
                };
                if len != usize::MAX && self.buf.len() >= hdr + len {
                    let op = self.buf[0] & 0x0F;
                    let payload = self.buf[hdr..hdr + len].to_vec();
                    self.buf.drain(..hdr + len);
                    return Some((op, payload));
                }
            }
            let mut tmp = [0u8; 8192];
            let n = tokio::time::timeout_at(deadline, self.stream.read(&mut tmp))
                .await
                .ok()?
                .ok()?;
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&tmp[..n]);
        }
    }

    /// The next text message as JSON.
    async fn event(&mut self) -> Value {
        let (op, payload) = self.frame(Duration::from_secs(10)).await.expect("a frame");
        assert_eq!(op, 1, "text frame expected, got opcode {op}");
        serde_json::from_slice(&payload).unwrap()
    }

    async fn send(&mut self, op: u8, payload: &[u8]) {
        let mask = [0x11u8, 0x22, 0x33, 0x44];
        let mut out = vec![0x80 | op, 0x80 | payload.len() as u8];
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.write_all(&out).await.unwrap();
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

#[tokio::test]
async fn websocket_watch_streams_one_event_per_message() {
    let (h, addr, _stop) = start().await;
    let srv = &h.srv;
    ok(
        "create a",
        post(srv, "/api/v1/namespaces/default/configmaps", &cm("a")).await,
    );
    let (head, mut ws) = ws_connect(
        addr,
        "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=3",
        &[KEY, VERSION],
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_eq!(
        header(&head, "sec-websocket-accept"),
        Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    );
    assert_eq!(header(&head, "sec-websocket-protocol"), None);
    let ev = ws.event().await;
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["name"], "a");
    for n in ["b", "c"] {
        ok(
            "create",
            post(srv, "/api/v1/namespaces/default/configmaps", &cm(n)).await,
        );
    }
    // Two events written close together still arrive as two messages.
    assert_eq!(ws.event().await["object"]["metadata"]["name"], "b");
    assert_eq!(ws.event().await["object"]["metadata"]["name"], "c");
    ws.send(0x9, b"are you there").await;
    let (op, payload) = ws.frame(Duration::from_secs(5)).await.unwrap();
    assert_eq!((op, payload.as_slice()), (0xA, &b"are you there"[..]));
    // timeoutSeconds ends the watch with a normal close.
    let (op, payload) = ws.frame(Duration::from_secs(10)).await.unwrap();
    assert_eq!(op, 0x8);
    assert_eq!(payload, 1000u16.to_be_bytes());
    ws.send(0x8, &1000u16.to_be_bytes()).await;
    assert!(ws.frame(Duration::from_secs(5)).await.is_none());
}

#[tokio::test]
async fn websocket_echoes_a_single_subprotocol_and_answers_close() {
    let (h, addr, _stop) = start().await;
    let (head, mut ws) = ws_connect(
        addr,
        "/api/v1/watch/namespaces/default/configmaps",
        &[
            KEY,
            VERSION,
            ("Sec-WebSocket-Protocol", "v4.channel.k8s.io"),
        ],
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_eq!(
        header(&head, "sec-websocket-protocol"),
        Some("v4.channel.k8s.io")
    );
    ok(
        "create",
        post(&h.srv, "/api/v1/namespaces/default/configmaps", &cm("x")).await,
    );
    assert_eq!(ws.event().await["object"]["metadata"]["name"], "x");
    ws.send(0x8, &1001u16.to_be_bytes()).await;
    let (op, payload) = ws.frame(Duration::from_secs(5)).await.unwrap();
    assert_eq!(op, 0x8);
    assert_eq!(payload, 1001u16.to_be_bytes());
    // The watcher is gone once the client closed.
    let cacher = h
        .srv
        .cacher(apiserver::registry::resources::find("", "v1", "configmaps").unwrap())
        .unwrap()
        .clone();
    let t = std::time::Instant::now();
    while cacher.watcher_count() > 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "watcher not released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn malformed_upgrades_are_400_and_the_server_keeps_serving() {
    let (h, addr, _stop) = start().await;
    let path = "/api/v1/namespaces/default/configmaps?watch=1";
    for (what, headers) in [
        ("no key", vec![VERSION]),
        (
            "bad key",
            vec![("Sec-WebSocket-Key", "not base64!"), VERSION],
        ),
        (
            "short key",
            vec![("Sec-WebSocket-Key", "c2hvcnQ="), VERSION],
        ),
        ("no version", vec![KEY]),
        ("old version", vec![KEY, ("Sec-WebSocket-Version", "8")]),
    ] {
        let (head, mut ws) = ws_connect(addr, path, &headers).await;
        assert!(head.starts_with("HTTP/1.1 400"), "{what}: {head}");
        let len: usize = header(&head, "content-length").unwrap().parse().unwrap();
        while ws.buf.len() < len {
            let mut tmp = [0u8; 1024];
            let n = ws.stream.read(&mut tmp).await.unwrap();
            assert!(n > 0);
            ws.buf.extend_from_slice(&tmp[..n]);
        }
        let v: Value = serde_json::from_slice(&ws.buf[..len]).unwrap();
        assert_eq!(v["kind"], "Status", "{what}");
        assert_eq!(v["reason"], "BadRequest", "{what}");
        assert_eq!(v["code"], 400, "{what}");
    }
    // An invalid watch (bad selector) over WebSocket is a plain HTTP error, not a 101.
    let (head, _) = ws_connect(
        addr,
        "/api/v1/namespaces/default/configmaps?watch=1&fieldSelector=bogus.field%3Dx",
        &[KEY, VERSION],
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    // Garbage after a successful upgrade: a protocol-error close, and the server lives on.
    let (head, mut ws) = ws_connect(addr, path, &[KEY, VERSION]).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    ws.stream
        .write_all(&[0x81, 0x05, b'h', b'e', b'l', b'l', b'o'])
        .await
        .unwrap();
    let (op, payload) = ws.frame(Duration::from_secs(5)).await.unwrap();
    assert_eq!(op, 0x8);
    assert_eq!(payload, 1002u16.to_be_bytes());
    ok(
        "still serving",
        post(
            &h.srv,
            "/api/v1/namespaces/default/configmaps",
            &cm("after"),
        )
        .await,
    );
    let (head, _) = ws_connect(addr, "/version", &[KEY, VERSION]).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let _ = Arc::clone(&h.srv);
}

// ---------------------------------------------------------------------------------------
// HTTP/2 (h2c with prior knowledge)
// ---------------------------------------------------------------------------------------

type H2Sender = hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>;

/// One HTTP/2 connection with prior knowledge, with the given client stream window.
async fn h2_connect(addr: SocketAddr, stream_window: u32) -> H2Sender {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(stream_window)
            .initial_connection_window_size(64 << 20)
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    send
}

/// Opens a watch stream on `send` and returns its response body.
async fn h2_watch(send: &mut H2Sender, path: &str) -> hyper::body::Incoming {
    send.ready().await.unwrap();
    let req = http::Request::builder()
        .uri(format!("http://localhost{path}"))
        .body(http_body_util::Empty::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), http::Version::HTTP_2);
    resp.into_body()
}

/// Reads JSON lines from a streaming body until `n` events arrived; returns their names.
async fn read_events(body: &mut hyper::body::Incoming, n: usize, wait: Duration) -> Vec<String> {
    use http_body_util::BodyExt;
    let mut buf = Vec::new();
    let mut names = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    while names.len() < n {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(f))) => f,
            other => panic!(
                "stream ended or stalled after {} events: {other:?}",
                names.len()
            ),
        };
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
            while let Some(p) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=p).collect();
                let v: Value = serde_json::from_slice(&line[..p]).unwrap();
                names.push(
                    v["object"]["metadata"]["name"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                );
            }
        }
    }
    names
}

#[tokio::test]
async fn h2c_prior_knowledge_watch() {
    let (h, addr, _stop) = start().await;
    let mut send = h2_connect(addr, 1 << 20).await;
    let mut body = h2_watch(
        &mut send,
        "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=10",
    )
    .await;
    ok(
        "create",
        post(&h.srv, "/api/v1/namespaces/default/configmaps", &cm("h2")).await,
    );
    assert_eq!(
        read_events(&mut body, 1, Duration::from_secs(5)).await,
        ["h2"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_watch_streams_on_one_http2_connection() {
    let (h, addr, _stop) = start().await;
    let mut send = h2_connect(addr, 1 << 20).await;
    let mut bodies = Vec::new();
    for _ in 0..1000 {
        bodies.push(
            h2_watch(
                &mut send,
                "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0&timeoutSeconds=60",
            )
            .await,
        );
    }
    let cacher = h
        .srv
        .cacher(apiserver::registry::resources::find("", "v1", "configmaps").unwrap())
        .unwrap()
        .clone();
    assert_eq!(cacher.watcher_count(), 1000);
    let names: Vec<String> = (0..5).map(|i| format!("cm-{i}")).collect();
    for n in &names {
        ok(
            "create",
            post(&h.srv, "/api/v1/namespaces/default/configmaps", &cm(n)).await,
        );
    }
    let readers: Vec<_> = bodies
        .into_iter()
        .map(|mut b| {
            tokio::spawn(async move { read_events(&mut b, 5, Duration::from_secs(30)).await })
        })
        .collect();
    for r in readers {
        assert_eq!(r.await.unwrap(), names);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_http2_stream_does_not_stall_its_neighbours() {
    let (h, addr, _stop) = start().await;
    // A small per-stream window, so the stream nobody reads fills it quickly.
    let mut send = h2_connect(addr, 16 * 1024).await;
    let path = "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0&timeoutSeconds=60";
    let _stalled = h2_watch(&mut send, path).await;
    let mut live = h2_watch(&mut send, path).await;
    let big = "x".repeat(4096);
    let n = 200;
    let reader =
        tokio::spawn(async move { read_events(&mut live, n, Duration::from_secs(30)).await });
    for i in 0..n {
        let mut obj = cm(&format!("big-{i}"));
        obj["data"]["k"] = json!(big);
        ok(
            "create",
            post(&h.srv, "/api/v1/namespaces/default/configmaps", &obj).await,
        );
    }
    let got = reader.await.unwrap();
    assert_eq!(got.len(), n);
    assert_eq!(got.last().map(String::as_str), Some("big-199"));
}

/// Everything the server sends until it closes the connection; false if it has not closed
/// it within 5 s.
async fn read_until_closed(mut s: TcpStream) -> (bool, Vec<u8>) {
    let mut buf = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        let mut tmp = [0u8; 4096];
        loop {
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
    })
    .await;
    (ended.is_ok(), buf)
}

#[tokio::test]
async fn http2_pings_detect_dead_connections() {
    let h = Memory.start(common::config(1000, 1000)).await;
    let opts = apiserver::ServeOptions {
        http2: apiserver::server::Http2Options {
            keep_alive_interval: Some(Duration::from_millis(200)),
            keep_alive_timeout: Duration::from_millis(300),
            ..Default::default()
        },
        ..Default::default()
    };
    let addr = common::serve_on_loopback(&h.srv, opts).await;
    // A client that speaks the HTTP/2 preface and then never answers anything.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let (closed, buf) = read_until_closed(s).await;
    assert!(closed, "the server did not close the silent connection");
    // Walk the frames the server sent: there must be a PING (type 6).
    let mut types = Vec::new();
    let mut i = 0;
    while i + 9 <= buf.len() {
        let len = u32::from_be_bytes([0, buf[i], buf[i + 1], buf[i + 2]]) as usize;
        types.push(buf[i + 3]);
        i += 9 + len;
    }
    assert!(types.contains(&6), "no PING among frame types {types:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_watch_written_directly_keeps_whole_frames_through_a_full_socket() {
    let h = Memory.start(common::config(1000, 100_000)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(apiserver::serve(listener, h.srv.clone(), async move {
        let _ = rx.await;
    }));
    let srv = &h.srv;
    let base = "/api/v1/namespaces/default/configmaps";
    let first = ok("create", post(srv, base, &cm("big")).await);
    let (head, mut ws) = ws_connect(
        addr,
        &format!(
            "{base}?watch=true&resourceVersion={}",
            common::rv_of(&first)
        ),
        &[KEY, VERSION],
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let written_before = common::metric_sum(srv, "listwatch_watch_direct_writes_total").await;
    // Not reading while ~20 MB of events are written; a ping sent in the middle must come
    // back as a whole pong between whole messages.
    let big = "x".repeat(64 * 1024);
    let mut want = Vec::new();
    for i in 0..300 {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
                          "data": {"k": format!("{i}{big}")}});
        let v = ok(
            "update",
            common::put(srv, &format!("{base}/big"), &body).await,
        );
        want.push(common::rv_of(&v));
        if i == 150 {
            ws.send(0x9, b"mid-stream").await;
        }
    }
    let mut got = Vec::new();
    let mut pongs = 0;
    while got.len() < want.len() {
        let (op, payload) = ws.frame(Duration::from_secs(10)).await.expect("a frame");
        match op {
            0x1 => {
                let ev: Value = serde_json::from_slice(&payload).expect("one event per message");
                assert_eq!(ev["type"], "MODIFIED");
                got.push(common::rv_of(&ev["object"]));
            }
            0xA => {
                assert_eq!(payload, b"mid-stream");
                pongs += 1;
            }
            other => panic!("unexpected opcode {other}"),
        }
    }
    assert_eq!(got, want, "every event once, in order");
    if pongs == 0 {
        let (op, payload) = ws.frame(Duration::from_secs(10)).await.expect("the pong");
        assert_eq!((op, payload.as_slice()), (0xA, &b"mid-stream"[..]));
    }
    let written = common::metric_sum(srv, "listwatch_watch_direct_writes_total").await;
    assert!(
        written >= written_before + 300.0,
        "events went out directly ({written_before} -> {written})"
    );
    ws.send(0x8, &1000u16.to_be_bytes()).await;
    let (op, _) = ws.frame(Duration::from_secs(5)).await.unwrap();
    assert_eq!(op, 0x8);
}

#[tokio::test]
async fn http1_connections_that_never_finish_their_headers_are_closed() {
    let h = Memory.start(common::config(1000, 1000)).await;
    let opts = apiserver::ServeOptions {
        http1: apiserver::server::Http1Options {
            header_read_timeout: Duration::from_millis(500),
        },
        ..Default::default()
    };
    let addr = common::serve_on_loopback(&h.srv, opts).await;
    // Half a request, then nothing: closed without an answer once the time is up.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (closed, got) = read_until_closed(s).await;
    assert!(closed && got.is_empty(), "closed {closed}, got {got:?}");
    // A whole request on a fresh connection is answered as usual.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (closed, got) = read_until_closed(s).await;
    assert!(closed && got.starts_with(b"HTTP/1.1 200"), "{got:?}");
    // A watch is not cut by the timeout: its headers were read long ago.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"GET /api/v1/namespaces/default/configmaps?watch=true HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await
    .unwrap();
    let mut tmp = [0u8; 4096];
    let n = s.read(&mut tmp).await.unwrap();
    assert!(tmp[..n].starts_with(b"HTTP/1.1 200"));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    ok(
        "create",
        post(
            &h.srv,
            "/api/v1/namespaces/default/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late"}}),
        )
        .await,
    );
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut tmp))
        .await
        .expect("the watch still delivers")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&tmp[..n]).contains("\"late\""),
        "{:?}",
        String::from_utf8_lossy(&tmp[..n])
    );
}
