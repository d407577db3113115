//! The server's own HTTP/2 over real sockets: writes and error answers through hyper's HTTP/2
//! client, and protocol errors, resets and flow control with a raw frame client.

mod common;

use apiserver::server::http2::frame::{self, flag, kind, ErrorCode, FrameHead, HEAD_LEN};
use apiserver::server::http2::hpack;
use bytes::{Bytes, BytesMut};
use common::{ok, post, Factory, Memory};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start() -> (
    common::Harness,
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
) {
    let h = Memory.start(common::config(1000, 1000)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(apiserver::serve(listener, h.srv.clone(), async move {
        let _ = rx.await;
    }));
    (h, addr, tx)
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> Sender {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    send
}

async fn request(
    send: &mut Sender,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> (u16, http::HeaderMap, Bytes) {
    send.ready().await.unwrap();
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts.status.as_u16(), parts.headers, bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_reads_and_errors_over_http2() {
    let (h, addr, _stop) = start().await;
    let mut send = connect(addr).await;
    let path = "/api/v1/namespaces/default/configmaps";
    let (code, headers, body) = request(
        &mut send,
        "POST",
        path,
        serde_json::to_vec(&cm("a")).unwrap(),
    )
    .await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    assert_eq!(headers["content-type"], "application/json");
    let created: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(created["metadata"]["name"], "a");
    // A conflict, a missing object, malformed JSON: Status errors, nothing stored.
    let (code, _, body) = request(
        &mut send,
        "POST",
        path,
        serde_json::to_vec(&cm("a")).unwrap(),
    )
    .await;
    assert_eq!(code, 409);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["reason"],
        "AlreadyExists"
    );
    let (code, _, _) = request(&mut send, "GET", &format!("{path}/nope"), vec![]).await;
    assert_eq!(code, 404);
    let (code, _, _) = request(&mut send, "POST", path, b"{not json".to_vec()).await;
    assert_eq!(code, 400);
    // A body over the limit is refused with 413 (sent in many DATA frames and windows).
    let mut big = cm("big");
    big["data"]["k"] = json!("x".repeat(4 << 20));
    let (code, _, _) = request(&mut send, "POST", path, serde_json::to_vec(&big).unwrap()).await;
    assert_eq!(code, 413);
    // A large response (a list of 300 objects of 20 KB) crosses the default windows.
    for i in 0..300 {
        let mut o = cm(&format!("l-{i}"));
        o["data"]["k"] = json!("y".repeat(20_000));
        ok("create", post(&h.srv, path, &o).await);
    }
    let (code, _, body) = request(&mut send, "GET", path, vec![]).await;
    assert_eq!(code, 200);
    let list: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 301);
    // HEAD: headers only.
    let (code, _, body) = request(&mut send, "HEAD", "/version", vec![]).await;
    assert_eq!(code, 200);
    assert!(body.is_empty());
}

/// A minimal raw HTTP/2 client for protocol-level checks.
struct Raw {
    s: TcpStream,
    buf: BytesMut,
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Raw {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut out = BytesMut::from(frame::PREFACE);
        frame::put_settings(&[], &mut out);
        s.write_all(&out).await.unwrap();
        Raw {
            s,
            buf: BytesMut::new(),
        }
    }

    async fn send(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let mut out = BytesMut::new();
        frame::put_frame(kind, flags, stream, payload, &mut out);
        self.s.write_all(&out).await.unwrap();
    }

    /// Sends several frames with one write, so the server reads them together.
    async fn send_together(&mut self, frames: &[(u8, u8, u32, &[u8])]) {
        let mut out = BytesMut::new();
        for &(kind, flags, stream, payload) in frames {
            frame::put_frame(kind, flags, stream, payload, &mut out);
        }
        self.s.write_all(&out).await.unwrap();
    }

    async fn settings(&mut self, settings: &[frame::Setting]) {
        let mut out = BytesMut::new();
        frame::put_settings(settings, &mut out);
        self.s.write_all(&out).await.unwrap();
    }

    async fn get(&mut self, stream: u32, path: &str) {
        let mut block = Vec::new();
        for (n, v) in [(":method", "GET"), (":scheme", "http"), (":path", path)] {
            hpack::encode_literal(n.as_bytes(), v.as_bytes(), &mut block);
        }
        self.send(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            stream,
            &block,
        )
        .await;
    }

    /// The next frame, `None` when the server closed the connection or nothing came in time.
    async fn next(&mut self, wait: Duration) -> Option<(FrameHead, Bytes)> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(h) = FrameHead::parse(&self.buf) {
                if self.buf.len() >= HEAD_LEN + h.len {
                    let f = self.buf.split_to(HEAD_LEN + h.len).freeze();
                    return Some((h, f.slice(HEAD_LEN..)));
                }
            }
            let mut tmp = [0u8; 65536];
            match tokio::time::timeout_at(deadline, self.s.read(&mut tmp)).await {
                Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&tmp[..n]),
                _ => return None,
            }
        }
    }

    /// Frames until one matches `want` (SETTINGS, PING and WINDOW_UPDATE are skipped).
    async fn expect(&mut self, want: impl Fn(&FrameHead) -> bool) -> (FrameHead, Bytes) {
        loop {
            match self.next(Duration::from_secs(5)).await {
                Some((h, p)) if want(&h) => return (h, p),
                Some(_) => continue,
                None => panic!("connection closed before the expected frame"),
            }
        }
    }

    async fn expect_goaway(&mut self, code: ErrorCode) {
        let (_, p) = self.expect(|h| h.kind == kind::GOAWAY).await;
        assert_eq!(u32::from_be_bytes([p[4], p[5], p[6], p[7]]), code as u32);
        assert!(
            self.next(Duration::from_secs(5)).await.is_none(),
            "closed after GOAWAY"
        );
    }
}

fn code_of(p: &[u8]) -> u32 {
    u32::from_be_bytes([p[0], p[1], p[2], p[3]])
}

#[tokio::test]
async fn protocol_errors_end_the_connection_with_goaway() {
    let (_h, addr, _stop) = start().await;
    // The preface not followed by SETTINGS.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut out = BytesMut::from(frame::PREFACE);
    frame::put_frame(kind::PING, 0, 0, &[0; 8], &mut out);
    s.write_all(&out).await.unwrap();
    let mut raw = Raw {
        s,
        buf: BytesMut::new(),
    };
    raw.expect_goaway(ErrorCode::ProtocolError).await;
    // HEADERS on an even (server-initiated) stream id.
    let mut raw = Raw::connect(addr).await;
    raw.get(2, "/version").await;
    raw.expect_goaway(ErrorCode::ProtocolError).await;
    // A header block that does not decode.
    let mut raw = Raw::connect(addr).await;
    raw.send(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    )
    .await;
    raw.expect_goaway(ErrorCode::CompressionError).await;
    // A frame larger than SETTINGS_MAX_FRAME_SIZE.
    let mut raw = Raw::connect(addr).await;
    raw.send(kind::DATA, 0, 1, &vec![0u8; 20_000]).await;
    raw.expect_goaway(ErrorCode::FrameSizeError).await;
    // A PING of the wrong size; a WINDOW_UPDATE of 0 on the connection.
    let mut raw = Raw::connect(addr).await;
    raw.send(kind::PING, 0, 0, b"short").await;
    raw.expect_goaway(ErrorCode::FrameSizeError).await;
    let mut raw = Raw::connect(addr).await;
    raw.send(kind::WINDOW_UPDATE, 0, 0, &[0, 0, 0, 0]).await;
    raw.expect_goaway(ErrorCode::ProtocolError).await;
    // CONTINUATION expected, something else came.
    let mut raw = Raw::connect(addr).await;
    raw.send(kind::HEADERS, 0, 1, &[]).await;
    raw.send(kind::PING, 0, 0, &[0; 8]).await;
    raw.expect_goaway(ErrorCode::ProtocolError).await;
}

#[tokio::test]
async fn malformed_requests_reset_only_their_stream() {
    let (_h, addr, _stop) = start().await;
    let mut raw = Raw::connect(addr).await;
    // No :path.
    let mut block = Vec::new();
    hpack::encode_literal(b":method", b"GET", &mut block);
    hpack::encode_literal(b":scheme", b"http", &mut block);
    raw.send(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        &block,
    )
    .await;
    let (h, p) = raw.expect(|h| h.kind == kind::RST_STREAM).await;
    assert_eq!(
        (h.stream, code_of(&p)),
        (1, ErrorCode::ProtocolError as u32)
    );
    // The connection still serves, and PINGs are answered.
    raw.send(kind::PING, 0, 0, b"12345678").await;
    let (_, p) = raw
        .expect(|h| h.kind == kind::PING && h.has(flag::ACK))
        .await;
    assert_eq!(&p[..], b"12345678");
    raw.get(3, "/version").await;
    let (h, _) = raw.expect(|h| h.kind == kind::HEADERS).await;
    assert_eq!(h.stream, 3);
    let (h, p) = raw.expect(|h| h.kind == kind::DATA && h.len > 0).await;
    assert_eq!(h.stream, 3);
    assert!(serde_json::from_slice::<Value>(&p).unwrap()["gitVersion"].is_string());
    // DATA on a closed stream: STREAM_CLOSED for that stream only.
    raw.send(kind::DATA, 0, 3, b"late").await;
    let (h, p) = raw.expect(|h| h.kind == kind::RST_STREAM).await;
    assert_eq!((h.stream, code_of(&p)), (3, ErrorCode::StreamClosed as u32));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_and_disconnects_end_their_watches_and_windows_are_respected() {
    let (h, addr, _stop) = start().await;
    let cacher = h
        .srv
        .cacher(apiserver::registry::resources::find("", "v1", "configmaps").unwrap())
        .unwrap()
        .clone();
    let mut raw = Raw::connect(addr).await;
    // A stream window of 100 bytes: each event must wait for WINDOW_UPDATEs.
    raw.settings(&[(frame::setting::INITIAL_WINDOW_SIZE, 100)])
        .await;
    let path = "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0&timeoutSeconds=60";
    raw.get(1, path).await;
    raw.get(3, path).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while cacher.watcher_count() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "watchers not registered"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ok(
        "create",
        post(&h.srv, "/api/v1/namespaces/default/configmaps", &cm("w1")).await,
    );
    // Stream 1 gets exactly 100 bytes, then nothing until its window grows.
    let mut got = Vec::new();
    while got.len() < 100 {
        let (h, p) = raw.expect(|h| h.kind == kind::DATA && h.stream == 1).await;
        assert!(h.len <= 100);
        got.extend_from_slice(&p);
    }
    assert_eq!(got.len(), 100);
    raw.send(kind::WINDOW_UPDATE, 0, 1, &10_000u32.to_be_bytes())
        .await;
    while !got.ends_with(b"\n") {
        let (_, p) = raw.expect(|h| h.kind == kind::DATA && h.stream == 1).await;
        got.extend_from_slice(&p);
    }
    let ev: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["name"], "w1");
    // Resetting stream 1 ends its watch; stream 3 stays.
    raw.send(
        kind::RST_STREAM,
        0,
        1,
        &(ErrorCode::Cancel as u32).to_be_bytes(),
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while cacher.watcher_count() != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reset watch not removed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Closing the connection ends the other.
    drop(raw);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while cacher.watcher_count() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "watch of a closed connection kept"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_bounded_and_its_watch_ends() {
    let (h, addr, _stop) = start().await;
    let cacher = h
        .srv
        .cacher(apiserver::registry::resources::find("", "v1", "configmaps").unwrap())
        .unwrap()
        .clone();
    let mut raw = Raw::connect(addr).await;
    // Windows so large that flow control never holds the server back.
    raw.settings(&[(frame::setting::INITIAL_WINDOW_SIZE, 0x7fff_ffff)])
        .await;
    raw.send(kind::WINDOW_UPDATE, 0, 0, &0x7fff_0000u32.to_be_bytes())
        .await;
    raw.get(
        1,
        "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0&timeoutSeconds=120",
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while cacher.watcher_count() < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "watcher not registered"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The client reads nothing from here on. 40 MB of events: more than the connection's
    // high-water mark, the socket buffers and the watcher's queue of 1,000 together.
    let big = "z".repeat(20_000);
    let mut ended_after = None;
    for i in 0..2_000 {
        let mut o = cm(&format!("s-{i}"));
        o["data"]["k"] = json!(big);
        ok(
            "create",
            post(&h.srv, "/api/v1/namespaces/default/configmaps", &o).await,
        );
        if cacher.watcher_count() == 0 {
            ended_after = Some(i);
            break;
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while ended_after.is_none() && cacher.watcher_count() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watch of a client that reads nothing was never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing was lost for the writers, and the server still serves others.
    let mut send = connect(addr).await;
    let (code, _, _) = request(&mut send, "GET", "/version", vec![]).await;
    assert_eq!(code, 200);
    drop(raw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_resets_end_the_connection_but_occasional_ones_do_not() {
    let (_h, addr, _stop) = start().await;
    let watch = "/api/v1/namespaces/default/configmaps?watch=true";
    // A client cancelling a few watches keeps its connection.
    let mut raw = Raw::connect(addr).await;
    for i in 0..50u32 {
        let id = 1 + 2 * i;
        raw.get(id, watch).await;
        raw.expect(|h| h.kind == kind::HEADERS && h.stream == id)
            .await;
        raw.send(
            kind::RST_STREAM,
            0,
            id,
            &(ErrorCode::Cancel as u32).to_be_bytes(),
        )
        .await;
    }
    raw.get(101, "/version").await;
    let (h, _) = raw
        .expect(|h| h.kind == kind::HEADERS && h.stream == 101)
        .await;
    assert_eq!(h.stream, 101);
    // Opening and cancelling requests in a loop ("rapid reset") gets ENHANCE_YOUR_CALM.
    let mut raw = Raw::connect(addr).await;
    for i in 0..1_000u32 {
        let id = 1 + 2 * i;
        raw.get(id, watch).await;
        raw.send(
            kind::RST_STREAM,
            0,
            id,
            &(ErrorCode::Cancel as u32).to_be_bytes(),
        )
        .await;
    }
    raw.expect_goaway(ErrorCode::EnhanceYourCalm).await;
}

/// The header block of a POST of a ConfigMap in `default` (body to follow); `extra` adds
/// headers.
fn post_headers(extra: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (n, v) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/api/v1/namespaces/default/configmaps"),
        ("content-type", "application/json"),
    ]
    .iter()
    .chain(extra)
    {
        hpack::encode_literal(n.as_bytes(), v.as_bytes(), &mut block);
    }
    block
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_requests_cannot_hold_unbounded_memory() {
    let (_h, addr, _stop) = start().await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = tcp.into_split();
    // Everything the server sends is read (WINDOW_UPDATEs pile up otherwise, and a client
    // that does not read is not read from); the GOAWAY's code is reported.
    let reader = tokio::spawn(async move {
        let mut buf = BytesMut::new();
        let mut tmp = vec![0u8; 65536];
        loop {
            while let Some(h) = FrameHead::parse(&buf) {
                if buf.len() < HEAD_LEN + h.len {
                    break;
                }
                let f = buf.split_to(HEAD_LEN + h.len);
                if h.kind == kind::GOAWAY {
                    return Some(u32::from_be_bytes([f[13], f[14], f[15], f[16]]));
                }
            }
            match rd.read(&mut tmp).await {
                Ok(n) if n > 0 => buf.extend_from_slice(&tmp[..n]),
                _ => return None,
            }
        }
    });
    let mut out = BytesMut::from(frame::PREFACE);
    frame::put_settings(&[], &mut out);
    wr.write_all(&out).await.unwrap();
    // Requests that never end: headers and 16 KB of body each, ~70 MB in all (more than a
    // connection may have held for it), each within its stream's initial window.
    let block = post_headers(&[]);
    let chunk = vec![b' '; 16_000];
    let mut sent_all = true;
    for i in 0..4_400u32 {
        let id = 1 + 2 * i;
        let mut out = BytesMut::new();
        frame::put_frame(kind::HEADERS, flag::END_HEADERS, id, &block, &mut out);
        frame::put_frame(kind::DATA, 0, id, &chunk, &mut out);
        if wr.write_all(&out).await.is_err() {
            sent_all = false;
            break;
        }
    }
    let code = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the server answers in time")
        .unwrap();
    assert_eq!(
        code,
        Some(ErrorCode::EnhanceYourCalm as u32),
        "GOAWAY code (all written: {sent_all})"
    );
}

/// The `:status` of the first response header block on a connection.
fn status_of(block: &[u8]) -> Vec<u8> {
    let mut dec = hpack::Decoder::new(4096, 65536);
    let mut status = Vec::new();
    dec.decode(block, |n, v| {
        if n == b":status" {
            status = v.to_vec();
        }
    })
    .unwrap();
    status
}

/// A server on loopback that requires the bearer `token` (anonymous requests refused);
/// keep the handle alive.
async fn serve_requiring_token(token: &str) -> (impl Sized, SocketAddr) {
    use apiserver::auth::authenticator::Authenticator;
    let h = Memory.start(common::config(1000, 1000)).await;
    let authn = Authenticator::new(Some(token.into()), Default::default()).without_anonymous();
    let opts = apiserver::server::ServeOptions {
        authenticator: Some(std::sync::Arc::new(authn)),
        ..Default::default()
    };
    let addr = common::serve_on_loopback(&h.srv, opts).await;
    (h, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_the_token_is_refused_before_its_body() {
    let (_h, addr) = serve_requiring_token("secret").await;
    let mut raw = Raw::connect(addr).await;
    // No END_STREAM: the body would follow, but the answer comes now.
    raw.send(kind::HEADERS, flag::END_HEADERS, 1, &post_headers(&[]))
        .await;
    let (_, block) = raw
        .expect(|h| h.kind == kind::HEADERS && h.stream == 1)
        .await;
    assert_eq!(status_of(&block), b"401");
    // With the token the same request waits for its body and creates the object.
    let mut raw = Raw::connect(addr).await;
    let block = post_headers(&[("authorization", "Bearer secret")]);
    raw.send(kind::HEADERS, flag::END_HEADERS, 1, &block).await;
    assert!(
        raw.next(Duration::from_millis(300))
            .await
            .is_none_or(|(h, _)| h.kind != kind::HEADERS),
        "no answer before the body"
    );
    let body = serde_json::to_vec(&cm("with-token")).unwrap();
    raw.send(kind::DATA, flag::END_STREAM, 1, &body).await;
    let (_, block) = raw
        .expect(|h| h.kind == kind::HEADERS && h.stream == 1)
        .await;
    assert_eq!(status_of(&block), b"201");
}

/// A client that sends its body right behind the headers (as Go's does) still gets the 401,
/// not a reset: the body arriving after the early answer is dropped, and once the answer is
/// complete the server asks the client to stop sending with RST_STREAM(NO_ERROR) (RFC 9113
/// §8.1); a client that finishes its body first gets no reset at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_behind_a_refused_request_does_not_hide_the_401() {
    let (_h, addr) = serve_requiring_token("secret").await;
    let mut raw = Raw::connect(addr).await;
    let headers = post_headers(&[]);
    raw.send_together(&[
        (kind::HEADERS, flag::END_HEADERS, 1, &headers),
        (kind::DATA, 0, 1, b"{\"apiVersion\":"),
    ])
    .await;
    let (h1, block) = raw
        .expect(|h| h.stream == 1 && (h.kind == kind::HEADERS || h.kind == kind::RST_STREAM))
        .await;
    assert_eq!(h1.kind, kind::HEADERS, "the answer comes before any reset");
    assert_eq!(status_of(&block), b"401");
    let (h1, p) = raw
        .expect(|h| h.stream == 1 && h.kind == kind::RST_STREAM)
        .await;
    assert_eq!(h1.kind, kind::RST_STREAM);
    assert_eq!(
        code_of(&p),
        ErrorCode::NoError as u32,
        "stop sending, no error"
    );
    // More body after the reset is ignored, and the connection serves the next request.
    raw.send(kind::DATA, flag::END_STREAM, 1, b"\"v1\"}").await;
    raw.get(3, "/api/v1/namespaces").await;
    let (h3, _) = raw
        .expect(|h| h.stream == 3 || h.kind == kind::GOAWAY || h.kind == kind::RST_STREAM)
        .await;
    assert_eq!((h3.kind, h3.stream), (kind::HEADERS, 3), "{h3:?}");

    // The whole body sent before the answer is written: no reset.
    let mut raw = Raw::connect(addr).await;
    raw.send_together(&[
        (kind::HEADERS, flag::END_HEADERS, 1, &headers),
        (kind::DATA, flag::END_STREAM, 1, b"{}"),
    ])
    .await;
    raw.get(3, "/version").await;
    let mut seen = Vec::new();
    while let Some((h, _)) = raw.next(Duration::from_millis(500)).await {
        seen.push((h.kind, h.stream, h.flags));
    }
    assert!(
        !seen
            .iter()
            .any(|&(k, _, _)| k == kind::RST_STREAM || k == kind::GOAWAY),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|&(k, s, _)| k == kind::HEADERS && s == 1),
        "{seen:?}"
    );
}

/// A request left half-open (headers and part of a body, then nothing) is answered 504 once
/// the body timeout has passed, as kube-apiserver answers after its request timeout; a
/// request finished in time on the same connection is served normally, and nothing is
/// stored for the stalled one. (Real time, shortened: a paused clock does not wait for
/// socket I/O.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_body_stalls_gets_a_504_after_the_body_timeout() {
    const TIMEOUT: Duration = Duration::from_millis(1500);
    let h = Memory.start(common::config(1000, 1000)).await;
    let mut opts = apiserver::server::ServeOptions::default();
    opts.http2.body_timeout = TIMEOUT;
    let addr = common::serve_on_loopback(&h.srv, opts).await;
    let mut raw = Raw::connect(addr).await;
    // Taken before the server can have seen the headers it times from.
    let started = std::time::Instant::now();
    raw.send(kind::HEADERS, flag::END_HEADERS, 1, &post_headers(&[]))
        .await;
    raw.send(kind::DATA, 0, 1, b"{\"apiVersion\":").await;
    // Another request, complete, on the same connection: answered at once.
    raw.send(kind::HEADERS, flag::END_HEADERS, 3, &post_headers(&[]))
        .await;
    let body = serde_json::to_vec(&cm("in-time")).unwrap();
    raw.send(kind::DATA, flag::END_STREAM, 3, &body).await;
    let (_, block) = raw
        .expect(|h| h.kind == kind::HEADERS && h.stream == 3)
        .await;
    assert_eq!(status_of(&block), b"201");
    let (_, block) = raw
        .expect(|h| h.kind == kind::HEADERS && h.stream == 1)
        .await;
    assert!(started.elapsed() >= TIMEOUT, "{:?}", started.elapsed());
    assert_eq!(status_of(&block), b"504");
    let (_, data) = raw.expect(|h| h.kind == kind::DATA && h.stream == 1).await;
    let v: Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(v["reason"], "Timeout", "{v}");
    // The answer is complete: the client is asked to stop sending, without an error; more
    // body after that is ignored, and the connection goes on.
    let (h1, p) = raw
        .expect(|h| h.kind == kind::RST_STREAM || h.kind == kind::GOAWAY)
        .await;
    assert_eq!((h1.kind, h1.stream), (kind::RST_STREAM, 1));
    assert_eq!(code_of(&p), ErrorCode::NoError as u32);
    raw.send(kind::DATA, flag::END_STREAM, 1, b"\"v1\"}").await;
    let (code, list) = common::get(&h.srv, "/api/v1/namespaces/default/configmaps").await;
    assert_eq!(code, 200);
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        vec!["in-time"],
        "nothing stored for the stalled request"
    );
}
