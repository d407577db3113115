//! One request stream: turning its decoded header fields into an `http::Request`, running the
//! API server's handler, and sending the response through the stream's sink.

use super::hpack;
use super::writer::StreamSink;
use crate::handlers::status_response;
use crate::server::ApiServer;
use api::Status;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Response};
use http_body_util::{BodyExt, Full};
use std::sync::Arc;

/// Why a request's header block does not make a valid HTTP/2 request (RFC 9113 §8.3); the
/// stream is reset with PROTOCOL_ERROR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed HTTP/2 request: {0}")]
pub struct Malformed(pub &'static str);

/// Headers that only make sense on one HTTP/1.1 connection and are forbidden in HTTP/2.
const CONNECTION_SPECIFIC: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Builds the request head from a header block's fields, in order: pseudo-headers first
/// (`:method`, `:scheme`, `:path` required, `:authority` optional), then lower-case regular
/// fields without connection-specific ones.
pub fn request_parts(fields: &[(Vec<u8>, Vec<u8>)]) -> Result<http::request::Parts, Malformed> {
    let (mut method, mut scheme, mut path, mut authority) = (None, None, None, None);
    let mut headers = http::HeaderMap::new();
    let mut regular_seen = false;
    for (name, value) in fields {
        if let Some(pseudo) = name.strip_prefix(b":") {
            if regular_seen {
                return Err(Malformed("pseudo-header after a regular header"));
            }
            let slot = match pseudo {
                b"method" => &mut method,
                b"scheme" => &mut scheme,
                b"path" => &mut path,
                b"authority" => &mut authority,
                _ => return Err(Malformed("unknown pseudo-header")),
            };
            if slot.replace(value.as_slice()).is_some() {
                return Err(Malformed("repeated pseudo-header"));
            }
            continue;
        }
        regular_seen = true;
        if name.iter().any(|b| b.is_ascii_uppercase()) {
            return Err(Malformed("upper-case header name"));
        }
        let name = HeaderName::from_bytes(name).map_err(|_| Malformed("invalid header name"))?;
        if CONNECTION_SPECIFIC.contains(&name.as_str()) {
            return Err(Malformed("connection-specific header"));
        }
        if name == http::header::TE && value.as_slice() != b"trailers" {
            return Err(Malformed("te other than trailers"));
        }
        let value =
            HeaderValue::from_bytes(value).map_err(|_| Malformed("invalid header value"))?;
        headers.append(name, value);
    }
    let method = Method::from_bytes(method.ok_or(Malformed("no :method"))?)
        .map_err(|_| Malformed("invalid :method"))?;
    if method == Method::CONNECT {
        return Err(Malformed("CONNECT is not supported"));
    }
    let scheme = scheme.ok_or(Malformed("no :scheme"))?;
    let path = path.ok_or(Malformed("no :path"))?;
    if path.is_empty() {
        return Err(Malformed("empty :path"));
    }
    let uri = match authority {
        Some(a) if !a.is_empty() => {
            let mut u = Vec::with_capacity(scheme.len() + a.len() + path.len() + 3);
            u.extend_from_slice(scheme);
            u.extend_from_slice(b"://");
            u.extend_from_slice(a);
            u.extend_from_slice(path);
            http::Uri::try_from(u)
        }
        _ => http::Uri::try_from(path),
    }
    .map_err(|_| Malformed("invalid :path"))?;
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = http::Version::HTTP_2;
    parts.headers = headers;
    Ok(parts)
}

/// The HPACK block of a response head: `:status`, then the headers except connection-specific
/// ones (never indexed: responses differ too much to gain from the dynamic table).
pub fn response_block(parts: &http::response::Parts) -> Vec<u8> {
    let mut block = Vec::with_capacity(64 + parts.headers.len() * 32);
    hpack::encode_status(parts.status.as_u16(), &mut block);
    for (name, value) in &parts.headers {
        if CONNECTION_SPECIFIC.contains(&name.as_str()) {
            continue;
        }
        hpack::encode_literal(name.as_str().as_bytes(), value.as_bytes(), &mut block);
    }
    block
}

/// Runs one request and sends its response on `sink`: HEADERS, then the body as DATA within
/// the flow-control windows, then END_STREAM. A JSON watch's body switches to the watch
/// cache's direct appends after its initial events (see `WatchBody::with_direct_http2`);
/// this task then only waits for the watch to end. Ends quietly when the stream is reset.
/// A `refusal` (the connection checked the request's token, and what the listener's
/// loopback guard refuses, when its headers came) is answered without running the request.
pub async fn respond(
    srv: Arc<ApiServer>,
    refusal: Option<Status>,
    req: Request<Full<Bytes>>,
    sink: StreamSink,
) {
    let head_only = req.method() == Method::HEAD;
    let resp: Response<crate::encoding::body::Body> = match refusal {
        None => srv.handle(req).await,
        Some(s) => status_response(&s),
    };
    send_response(resp, head_only, sink).await;
}

/// Answers a stream with `status` without running a request (whose body never came).
pub async fn respond_status(status: Status, sink: StreamSink) {
    send_response(status_response(&status), false, sink).await;
}

/// Writes `resp` to the stream: its headers (alone for a HEAD request), then its body.
async fn send_response(
    resp: Response<crate::encoding::body::Body>,
    head_only: bool,
    sink: StreamSink,
) {
    let (parts, mut body) = resp.into_parts();
    let end = head_only || http_body::Body::is_end_stream(&body);
    if sink.send_headers(&response_block(&parts), end).is_err() || end {
        return;
    }
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue; // trailers: not sent
                };
                if data.is_empty() {
                    continue;
                }
                if sink.send(data).await.is_err() {
                    return;
                }
            }
            Some(Err(e)) => match e {},
            None => break,
        }
    }
    sink.end();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(n: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
        (n.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    #[test]
    fn builds_requests_and_rejects_malformed_ones() {
        let p = request_parts(&[
            f(":method", "GET"),
            f(":scheme", "https"),
            f(":authority", "127.0.0.1:6443"),
            f(":path", "/api/v1/pods?watch=1"),
            f("accept", "application/json"),
            f("user-agent", "kubectl"),
        ])
        .unwrap();
        assert_eq!(p.method, Method::GET);
        assert_eq!(p.uri.path(), "/api/v1/pods");
        assert_eq!(p.uri.query(), Some("watch=1"));
        assert_eq!(p.version, http::Version::HTTP_2);
        assert_eq!(p.headers["accept"], "application/json");
        let base = [f(":method", "GET"), f(":scheme", "http"), f(":path", "/")];
        assert!(request_parts(&base).is_ok());
        for bad in [
            vec![f(":method", "GET"), f(":path", "/")],
            vec![f(":method", "GET"), f(":scheme", "http")],
            vec![f(":scheme", "http"), f(":path", "/")],
            vec![
                f(":method", "GET"),
                f(":method", "GET"),
                f(":scheme", "http"),
                f(":path", "/"),
            ],
            vec![
                f(":method", "GET"),
                f("accept", "x"),
                f(":scheme", "http"),
                f(":path", "/"),
            ],
            vec![
                f(":method", "GET"),
                f(":scheme", "http"),
                f(":path", "/"),
                f("Accept", "x"),
            ],
            vec![
                f(":method", "GET"),
                f(":scheme", "http"),
                f(":path", "/"),
                f("connection", "close"),
            ],
            vec![
                f(":method", "GET"),
                f(":scheme", "http"),
                f(":path", "/"),
                f("te", "gzip"),
            ],
            vec![
                f(":method", "GET"),
                f(":scheme", "http"),
                f(":path", "/"),
                f(":x", "y"),
            ],
            vec![
                f(":method", "CONNECT"),
                f(":scheme", "http"),
                f(":path", "/"),
            ],
            vec![f(":method", "GET"), f(":scheme", "http"), f(":path", "")],
            vec![f(":method", "G ET"), f(":scheme", "http"), f(":path", "/")],
            vec![
                f(":method", "GET"),
                f(":scheme", "http"),
                f(":path", "/"),
                f("x", "a\nb"),
            ],
        ] {
            assert!(request_parts(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn response_block_decodes_back() {
        let mut resp = Response::new(());
        *resp.status_mut() = http::StatusCode::NOT_FOUND;
        resp.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        resp.headers_mut()
            .insert("connection", HeaderValue::from_static("close"));
        let (parts, ()) = resp.into_parts();
        let block = response_block(&parts);
        let mut d = hpack::Decoder::new(4096, 1 << 16);
        let mut got = Vec::new();
        d.decode(&block, |n, v| got.push((n.to_vec(), v.to_vec())))
            .unwrap();
        assert_eq!(
            got,
            vec![f(":status", "404"), f("content-type", "application/json")]
        );
    }
}
