//! Requests found by fault injection and hostile testing, over real sockets to the real
//! server: deeply nested YAML, what a web page can send to the port without authentication,
//! requests hyper refuses before any handler, patches that change an object's identity,
//! delete options, and WebSocket clients that break the protocol. Each is answered with a
//! `Status` (or, on a WebSocket, a close frame) and changes nothing it should not.

mod common;

use bytes::Bytes;
use common::{Factory, Harness, Memory};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CM: &str = "/api/v1/namespaces/default/configmaps";

async fn start(opts: apiserver::ServeOptions) -> (Harness, SocketAddr) {
    let h = Memory.start(common::config(1000, 1000)).await;
    let addr = common::serve_on_loopback(&h.srv, opts).await;
    (h, addr)
}

/// An HTTP/1.1 answer read off a socket.
#[derive(Debug)]
struct Answer {
    code: u16,
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// Asserts a `Status` of `code` (and `reason`, if given) and returns its message.
    fn status(&self, code: u16, reason: Option<&str>) -> String {
        let v = self.json();
        assert_eq!(self.code, code, "{}{v}", self.head);
        assert!(
            self.head
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{}",
            self.head
        );
        assert_eq!(
            (&v["kind"], &v["status"], &v["code"]),
            (&json!("Status"), &json!("Failure"), &json!(code)),
            "{v}"
        );
        if let Some(r) = reason {
            assert_eq!(v["reason"], r, "{v}");
        }
        v["message"].as_str().unwrap_or_default().to_string()
    }
}

/// Writes `request` (whole) on a new connection and reads one answer (to its
/// `content-length`, or to the end of the connection).
async fn exchange(addr: SocketAddr, request: &[u8]) -> Answer {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // The server may answer and close before it read everything (it refuses early).
    let _ = s.write_all(request).await;
    read_answer(&mut s).await
}

async fn read_answer(s: &mut TcpStream) -> Answer {
    let mut buf = Vec::new();
    let mut tmp = vec![0u8; 64 * 1024];
    let read = async {
        loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..p + 4]).to_string();
                let len = head.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                });
                if len.is_some_and(|n| buf.len() >= p + 4 + n) {
                    return (head, buf[p + 4..p + 4 + len.unwrap_or(0)].to_vec());
                }
            }
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => {
                    let p = buf
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .unwrap_or_else(|| {
                            panic!("no answer: {:?}", String::from_utf8_lossy(&buf))
                        });
                    let head = String::from_utf8_lossy(&buf[..p + 4]).to_string();
                    return (head, buf[p + 4..].to_vec());
                }
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
    };
    let (head, body) = tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("an answer in time");
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Answer { code, head, body }
}

/// A request with a body: `headers` are extra header lines.
fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    let mut r = r.into_bytes();
    r.extend_from_slice(body);
    r
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

/// Everything stored: its revision and the configmaps' names.
async fn stored(h: &Harness) -> (u64, Vec<String>) {
    let list = common::ok("list", common::get(&h.srv, CM).await);
    let names = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| common::name_of(o).to_string())
        .collect();
    (common::storage_rev(&h.srv).await, names)
}

// ---------------------------------------------------------------------------------------
// Nested YAML
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_nested_deeper_than_json_may_be_is_refused_by_every_entry_point() {
    let (h, addr) = start(Default::default()).await;
    let host = ("Host", "127.0.0.1");
    let yaml = ("Content-Type", "application/yaml");
    let apply = ("Content-Type", "application/apply-patch+yaml");
    let created = exchange(
        addr,
        &request(
            "POST",
            CM,
            &[host, yaml],
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n",
        ),
    )
    .await;
    assert_eq!(created.code, 201, "{created:?}");
    let before = stored(&h).await;
    let flow = format!("x: {}{}\n", "[".repeat(40_000), "]".repeat(40_000));
    let block = "- ".repeat(200) + "x\n";
    let json_as_yaml = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for (what, method, path, ct, body) in [
        ("create, flow", "POST", CM.to_string(), yaml, flow.clone()),
        ("create, block", "POST", CM.to_string(), yaml, block.clone()),
        ("update", "PUT", format!("{CM}/kept"), yaml, flow.clone()),
        (
            "apply",
            "PATCH",
            format!("{CM}/kept?fieldManager=m"),
            apply,
            flow.clone(),
        ),
        (
            "apply, JSON",
            "PATCH",
            format!("{CM}/kept?fieldManager=m"),
            apply,
            json_as_yaml,
        ),
    ] {
        let a = exchange(addr, &request(method, &path, &[host, ct], body.as_bytes())).await;
        let message = a.status(400, Some("BadRequest"));
        assert!(
            message.contains("nests collections deeper than 127 levels"),
            "{what}: {message}"
        );
    }
    assert_eq!(stored(&h).await, before, "nothing stored");
    // As deep as JSON may be, and brackets where YAML holds text, are fine.
    let deepest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep\n  annotations:\n    a: |\n      {}\nx: {}{}\n",
        "[".repeat(5000),
        "[".repeat(126),
        "]".repeat(126)
    );
    let a = exchange(
        addr,
        &request("POST", CM, &[host, yaml], deepest.as_bytes()),
    )
    .await;
    assert_eq!(a.code, 201, "{:?}", a.json());
    assert_eq!(
        a.json()["metadata"]["annotations"]["a"],
        format!("{}\n", "[".repeat(5000))
    );
}

// ---------------------------------------------------------------------------------------
// The port without authentication
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_port_without_authentication_refuses_what_a_web_page_could_send() {
    let (h, addr) = start(apiserver::ServeOptions {
        loopback_only: true,
        ..Default::default()
    })
    .await;
    let own = addr.to_string();
    let body = serde_json::to_vec(&configmap("from-page")).unwrap();
    let before = stored(&h).await;
    // A page's no-cors POST: no content type (and its origin).
    for (headers, code) in [
        (
            vec![("Host", own.as_str()), ("Origin", "http://evil.example")],
            403,
        ),
        (vec![("Host", own.as_str())], 415),
        (
            vec![("Host", own.as_str()), ("Content-Type", "text/plain")],
            415,
        ),
        (
            vec![
                ("Host", "evil.example"),
                ("Content-Type", "application/json"),
            ],
            403,
        ),
    ] {
        let a = exchange(addr, &request("POST", CM, &headers, &body)).await;
        a.status(code, None);
    }
    assert_eq!(stored(&h).await, before, "nothing stored");
    // DNS rebinding: the page's host name.
    for host in [
        "evil.example",
        "evil.example:8080",
        "127.0.0.1.evil.example",
    ] {
        let a = exchange(
            addr,
            &request("GET", "/api/v1/secrets", &[("Host", host)], b""),
        )
        .await;
        let message = a.status(403, Some("Forbidden"));
        assert!(message.contains("loopback"), "{message}");
    }
    // A WebSocket from a page carries its origin.
    let a = exchange(
        addr,
        &request(
            "GET",
            &format!("{CM}?watch=true"),
            &[
                ("Host", &own),
                ("Origin", "http://evil.example"),
                ("Connection", "Upgrade"),
                ("Upgrade", "websocket"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("Sec-WebSocket-Version", "13"),
            ],
            b"",
        ),
    )
    .await;
    a.status(403, Some("Forbidden"));
    // What the API's clients send is served: loopback hosts, typed writes, no origin (or
    // this very one).
    let localhost = format!("localhost:{}", addr.port());
    let v6 = format!("[::1]:{}", addr.port());
    let own_origin = format!("http://{own}");
    for headers in [
        vec![("Host", own.as_str())],
        vec![("Host", localhost.as_str())],
        vec![("Host", v6.as_str())],
        vec![("Host", own.as_str()), ("Origin", own_origin.as_str())],
    ] {
        let a = exchange(addr, &request("GET", CM, &headers, b"")).await;
        assert_eq!(a.code, 200, "{headers:?}: {a:?}");
    }
    let json_ct = ("Content-Type", "application/json");
    let a = exchange(
        addr,
        &request("POST", CM, &[("Host", &own), json_ct], &body),
    )
    .await;
    assert_eq!(a.code, 201, "{a:?}");

    // The same over h2c.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake::<_, Full<Bytes>>(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut h2 = async |method: &str, uri: String, ct: Option<&str>, body: Vec<u8>| {
        send.ready().await.unwrap();
        let mut req = http::Request::builder().method(method).uri(uri);
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        let resp = send
            .send_request(req.body(Full::new(Bytes::from(body))).unwrap())
            .await
            .unwrap();
        let code = resp.status().as_u16();
        let v: Value =
            serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes())
                .unwrap_or(Value::Null);
        (code, v)
    };
    let (code, v) = h2(
        "GET",
        "http://evil.example/api/v1/secrets".into(),
        None,
        vec![],
    )
    .await;
    assert_eq!((code, &v["kind"]), (403, &json!("Status")), "{v}");
    let body2 = serde_json::to_vec(&configmap("from-page-h2")).unwrap();
    let (code, v) = h2("POST", format!("http://{own}{CM}"), None, body2.clone()).await;
    assert_eq!((code, &v["kind"]), (415, &json!("Status")), "{v}");
    let (code, v) = h2(
        "POST",
        format!("http://{own}{CM}"),
        Some("application/json"),
        body2,
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, _) = h2("GET", format!("http://localhost{CM}"), None, vec![]).await;
    assert_eq!(code, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_listeners_read_a_write_without_content_type_as_json() {
    // As kube-apiserver does (its TLS port is served this way, only with a token).
    let (h, addr) = start(Default::default()).await;
    let body = serde_json::to_vec(&configmap("untyped")).unwrap();
    let a = exchange(
        addr,
        &request("POST", CM, &[("Host", "evil.example")], &body),
    )
    .await;
    assert_eq!(a.code, 201, "{a:?}");
    assert!(stored(&h).await.1.contains(&"untyped".to_string()));
}

// ---------------------------------------------------------------------------------------
// Errors answered before a handler
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_hyper_cannot_parse_are_answered_with_a_status() {
    let (_h, addr) = start(Default::default()).await;
    let long_uri = format!(
        "GET /api/v1/pods?labelSelector={} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(70_000)
    );
    // 2 MB: beyond hyper's read buffer (about 408 KiB, a soft bound: one read may take the
    // buffer past it, so a header of 500 KB was sometimes served) and beyond Kubernetes' own
    // 1 MiB limit.
    let big_header = format!(
        "GET /version HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "b".repeat(2_000_000)
    );
    let many_headers = format!(
        "GET /version HTTP/1.1\r\nHost: x\r\n{}\r\n",
        (0..150)
            .map(|i| format!("X-H{i}: v\r\n"))
            .collect::<String>()
    );
    for (what, raw, code) in [
        ("long URI", long_uri.into_bytes(), 414),
        ("large header", big_header.into_bytes(), 431),
        ("many headers", many_headers.into_bytes(), 431),
        (
            "bad request line",
            b"GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n".to_vec(),
            400,
        ),
        (
            "bad header",
            b"GET / HTTP/1.1\r\nHost x\r\n\r\n".to_vec(),
            400,
        ),
        ("garbage", b"\x01\x02\x03 nonsense\r\n\r\n".to_vec(), 400),
    ] {
        let a = exchange(addr, &raw).await;
        let message = a.status(code, None);
        assert!(!message.is_empty(), "{what}");
    }
    // The connection before such a request was served as usual.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_answer(&mut s).await.code, 200);
    s.write_all(b"GET / HTTP/1.1\r\nHost x\r\n\r\n")
        .await
        .unwrap();
    read_answer(&mut s).await.status(400, Some("BadRequest"));
}

// ---------------------------------------------------------------------------------------
// Patches of an object's identity
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_may_not_move_an_object_or_change_its_uid() {
    let (h, addr) = start(Default::default()).await;
    let host = ("Host", "127.0.0.1");
    let created = exchange(
        addr,
        &request(
            "POST",
            CM,
            &[host, ("Content-Type", "application/json")],
            &serde_json::to_vec(&configmap("id")).unwrap(),
        ),
    )
    .await;
    assert_eq!(created.code, 201);
    let uid = created.json()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let before = stored(&h).await;
    let json_patch = ("Content-Type", "application/json-patch+json");
    let merge_patch = ("Content-Type", "application/merge-patch+json");
    let path = format!("{CM}/id");
    for (ct, patch, code, reason) in [
        (
            json_patch,
            json!([{"op": "replace", "path": "/metadata/namespace", "value": "kube-system"}]),
            400,
            "BadRequest",
        ),
        (
            merge_patch,
            json!({"metadata": {"namespace": "kube-system"}}),
            400,
            "BadRequest",
        ),
        (
            json_patch,
            json!([{"op": "replace", "path": "/metadata/uid", "value": "another"}]),
            422,
            "Invalid",
        ),
        (
            merge_patch,
            json!({"metadata": {"uid": "another"}}),
            422,
            "Invalid",
        ),
    ] {
        let a = exchange(
            addr,
            &request(
                "PATCH",
                &path,
                &[host, ct],
                &serde_json::to_vec(&patch).unwrap(),
            ),
        )
        .await;
        let message = a.status(code, Some(reason));
        if code == 422 {
            assert_eq!(
                message,
                "ConfigMap \"id\" is invalid: metadata.uid: Invalid value: \"another\": field is immutable"
            );
            assert_eq!(a.json()["details"]["causes"][0]["field"], "metadata.uid");
        } else {
            assert_eq!(
                message,
                "the namespace of the provided object does not match the namespace sent on the request"
            );
        }
    }
    assert_eq!(stored(&h).await, before, "nothing stored");
    // Naming the same namespace and uid, or removing them, changes nothing about them.
    for patch in [
        json!([{"op": "replace", "path": "/metadata/namespace", "value": "default"},
               {"op": "replace", "path": "/metadata/uid", "value": uid},
               {"op": "add", "path": "/data/a", "value": "1"}]),
        json!([{"op": "remove", "path": "/metadata/namespace"},
               {"op": "remove", "path": "/metadata/uid"},
               {"op": "add", "path": "/data/b", "value": "2"}]),
    ] {
        let a = exchange(
            addr,
            &request(
                "PATCH",
                &path,
                &[host, json_patch],
                &serde_json::to_vec(&patch).unwrap(),
            ),
        )
        .await;
        assert_eq!(a.code, 200, "{:?}", a.json());
        assert_eq!(a.json()["metadata"]["namespace"], "default");
        assert_eq!(a.json()["metadata"]["uid"], uid.as_str());
    }
}

// ---------------------------------------------------------------------------------------
// Delete options
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_negative_grace_period_is_one_second_and_a_malformed_one_is_refused() {
    let (h, addr) = start(Default::default()).await;
    let host = ("Host", "127.0.0.1");
    let json_ct = ("Content-Type", "application/json");
    let pods = "/api/v1/namespaces/default/pods";
    for name in ["held-q", "held-b", "held-u"] {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "finalizers": ["example.com/hold"]},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        if name != "held-u" {
            pod["spec"]["nodeName"] = json!("n1");
        }
        let a = exchange(
            addr,
            &request(
                "POST",
                pods,
                &[host, json_ct],
                &serde_json::to_vec(&pod).unwrap(),
            ),
        )
        .await;
        assert_eq!(a.code, 201, "{:?}", a.json());
    }
    let before = common::storage_rev(&h.srv).await;
    for (path, body) in [
        (
            format!("{pods}/held-q?gracePeriodSeconds=abc"),
            String::new(),
        ),
        (
            format!("{pods}/held-q?gracePeriodSeconds=1.5"),
            String::new(),
        ),
        (
            format!("{pods}/held-q"),
            r#"{"gracePeriodSeconds": "5"}"#.into(),
        ),
        (
            format!("{pods}/held-q?propagationPolicy=Sideways"),
            String::new(),
        ),
    ] {
        let a = exchange(
            addr,
            &request("DELETE", &path, &[host, json_ct], body.as_bytes()),
        )
        .await;
        assert!(a.code == 400 || a.code == 422, "{path} {body}: {a:?}");
        a.status(a.code, None);
    }
    assert_eq!(common::storage_rev(&h.srv).await, before, "nothing stored");
    // Negative: 1 s (the pod is held by its finalizer, so the mark shows).
    for (path, body, grace) in [
        (
            format!("{pods}/held-q?gracePeriodSeconds=-5"),
            String::new(),
            1,
        ),
        (
            format!("{pods}/held-b"),
            r#"{"gracePeriodSeconds": -5}"#.to_string(),
            1,
        ),
        // Not scheduled: deleted at once, whatever is asked.
        (
            format!("{pods}/held-u?gracePeriodSeconds=30"),
            String::new(),
            0,
        ),
    ] {
        let a = exchange(
            addr,
            &request("DELETE", &path, &[host, json_ct], body.as_bytes()),
        )
        .await;
        assert_eq!(a.code, 200, "{path}: {:?}", a.json());
        let meta = &a.json()["metadata"];
        assert_eq!(meta["deletionGracePeriodSeconds"], grace, "{path}: {meta}");
        assert!(meta["deletionTimestamp"].is_string(), "{meta}");
    }
}

// ---------------------------------------------------------------------------------------
// WebSocket clients that break the protocol
// ---------------------------------------------------------------------------------------

/// A masked client frame.
fn ws_frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [7u8, 1, 2, 3];
    let mut out = vec![first];
    assert!(payload.len() < 126);
    out.push(0x80 | payload.len() as u8);
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

/// Opens a WebSocket watch; returns the socket after the 101.
async fn ws_watch(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {CM}?watch=true HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).await.unwrap(),
            1,
            "closed during the handshake"
        );
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

/// Reads server frames until a close frame; returns (pongs seen, close code), and asserts
/// that the connection then ends.
async fn until_close(s: &mut TcpStream) -> (usize, u16) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 65536];
    let mut pongs = 0;
    let read = async {
        loop {
            while buf.len() >= 2 {
                let len = match buf[1] & 0x7F {
                    126 => u16::from_be_bytes([buf[2], buf[3]]) as usize + 2,
                    127 => panic!("huge frame"),
                    n => n as usize,
                };
                if buf.len() < 2 + len {
                    break;
                }
                let frame: Vec<u8> = buf.drain(..2 + len).collect();
                match frame[0] & 0x0F {
                    0xA => pongs += 1,
                    0x8 => return (pongs, u16::from_be_bytes([frame[2], frame[3]])),
                    _ => {}
                }
            }
            let n = s.read(&mut tmp).await.unwrap_or(0);
            assert!(n > 0, "the connection ended without a close frame");
            buf.extend_from_slice(&tmp[..n]);
        }
    };
    let (pongs, code) = tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("a close frame in time");
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the connection stayed open after the close");
    (pongs, code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_clients_that_break_the_frame_order_are_closed_with_1002() {
    let (_h, addr) = start(Default::default()).await;
    // A new text message while a fragmented one is open.
    let mut s = ws_watch(addr).await;
    let mut frames = ws_frame(0x01, b"part one");
    frames.extend(ws_frame(0x01, b"another message"));
    s.write_all(&frames).await.unwrap();
    assert_eq!(until_close(&mut s).await.1, 1002);
    // A continuation without a message.
    let mut s = ws_watch(addr).await;
    s.write_all(&ws_frame(0x80, b"orphan")).await.unwrap();
    assert_eq!(until_close(&mut s).await.1, 1002);
    // Fragments in order (with a ping between) are fine: the watch goes on.
    let mut s = ws_watch(addr).await;
    let mut frames = ws_frame(0x01, b"a");
    frames.extend(ws_frame(0x89, b"p"));
    frames.extend(ws_frame(0x00, b"b"));
    frames.extend(ws_frame(0x80, b"c"));
    frames.extend(ws_frame(0x88, &1000u16.to_be_bytes()));
    s.write_all(&frames).await.unwrap();
    assert_eq!(until_close(&mut s).await, (1, 1000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_ping_flood_closes_the_connection() {
    let (_h, addr) = start(Default::default()).await;
    let mut s = ws_watch(addr).await;
    let ping = ws_frame(0x89, b"x");
    let flood: Vec<u8> = std::iter::repeat_n(ping, 20_000).flatten().collect();
    let (mut rd, mut wr) = s.split();
    let writer = async {
        // The server stops reading once it closed; the rest may not be taken.
        let _ = wr.write_all(&flood).await;
    };
    let reader = async {
        let mut sock = Vec::new();
        let mut tmp = [0u8; 65536];
        loop {
            match rd.read(&mut tmp).await {
                Ok(0) | Err(_) => break sock,
                Ok(n) => sock.extend_from_slice(&tmp[..n]),
            }
        }
    };
    let (_, got) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(writer, reader)
    })
    .await
    .expect("the server ended the connection");
    // Walk the frames: pongs (at most the allowed burst, and a few refilled), then 1008.
    let mut i = 0;
    let mut pongs = 0;
    let mut close = None;
    while i + 2 <= got.len() {
        let len = (got[i + 1] & 0x7F) as usize;
        match got[i] & 0x0F {
            0xA => pongs += 1,
            0x8 => close = Some(u16::from_be_bytes([got[i + 2], got[i + 3]])),
            _ => {}
        }
        i += 2 + len;
    }
    assert_eq!(close, Some(1008), "{pongs} pongs");
    assert!((100..1000).contains(&pongs), "{pongs} pongs");
}
