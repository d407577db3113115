//! Connections to an API server running in the same process: an in-memory byte pipe per
//! connection, spoken as HTTP/2 (no socket, no TLS), for a binary that runs the server and
//! its components together (`listwatch up`).
//!
//! Such a connection is not authenticated by a credential: the server that hands out the
//! pipes trusts the identity each request names in the front-proxy headers
//! (`X-Remote-User`, `X-Remote-Group`), as kube-apiserver trusts an authenticating proxy.
//! That is safe only because nothing outside the process can reach the pipe, which is why a
//! [`Client`](super::Client) sends those headers only over an [`InProcessDialer`]'s
//! connections ([`Client::as_front_proxied`](super::Client::as_front_proxied)).

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;

/// The authority in-process requests are addressed to (it names no host: every connection
/// goes to the dialer).
pub const IN_PROCESS_ORIGIN: &str = "http://in-process.listwatch.local";

/// Opens a connection to an API server in this process: each call returns the client's end
/// of a new pipe whose other end the server already serves as HTTP/2.
///
/// Called from within the tokio runtime, once per connection the client's pool opens (one
/// for all its requests and watches, as HTTP/2 multiplexes them).
///
/// Clones are the same dialer: the clients of one dialer and of its clones share the
/// objects their watches decode ([`crate::object_interner`]), so give every client of one
/// server a clone of one dialer, and never one dialer to two servers.
#[derive(Clone)]
pub struct InProcessDialer {
    dial: Arc<dyn Fn() -> DuplexStream + Send + Sync>,
    /// This dialer's number in the process (its clones share it).
    server: u64,
}

impl InProcessDialer {
    /// A dialer that opens connections with `dial`, all to one server.
    pub fn new(dial: impl Fn() -> DuplexStream + Send + Sync + 'static) -> InProcessDialer {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        InProcessDialer {
            dial: Arc::new(dial),
            server: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The number that stands for this dialer's server in [`crate::object_interner::Scope`].
    pub(crate) fn server(&self) -> u64 {
        self.server
    }
}

impl fmt::Debug for InProcessDialer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InProcessDialer")
    }
}

/// How a client's pool opens connections: over the network (TCP, TLS for `https://`), or
/// through an [`InProcessDialer`].
#[derive(Clone)]
pub(super) enum Connector {
    Network(HttpsConnector<HttpConnector>),
    InProcess(InProcessDialer),
}

/// A connection opened by a [`Connector`].
pub(super) enum Stream {
    /// Boxed: a TLS connection's state is over a kilobyte, a pipe's a pointer.
    Network(Box<MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>>),
    InProcess(TokioIo<DuplexStream>),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<http::Uri> for Connector {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Connector::Network(c) => c.poll_ready(cx),
            Connector::InProcess(_) => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        match self {
            Connector::Network(c) => {
                let fut = c.call(uri);
                Box::pin(async move { fut.await.map(|s| Stream::Network(Box::new(s))) })
            }
            Connector::InProcess(d) => {
                let stream = Stream::InProcess(TokioIo::new((d.dial)()));
                Box::pin(std::future::ready(Ok(stream)))
            }
        }
    }
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        match self {
            Stream::Network(s) => s.connected(),
            // The server end speaks only HTTP/2: saying so makes the pool multiplex every
            // request over one pipe.
            Stream::InProcess(_) => Connected::new().negotiated_h2(),
        }
    }
}

// Both variants are `Unpin`, so each call pins the variant in place.
impl hyper::rt::Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Network(s) => Pin::new(&mut **s).poll_read(cx, buf),
            Stream::InProcess(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Network(s) => Pin::new(&mut **s).poll_write(cx, buf),
            Stream::InProcess(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Network(s) => Pin::new(&mut **s).poll_flush(cx),
            Stream::InProcess(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Network(s) => Pin::new(&mut **s).poll_shutdown(cx),
            Stream::InProcess(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Network(s) => s.is_write_vectored(),
            Stream::InProcess(s) => s.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Network(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
            Stream::InProcess(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::{Client, Config};
    use bytes::Bytes;
    use http_body_util::Full;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A dialer whose pipes are served by an HTTP/2 server that answers each request with
    /// the front-proxy headers it carried, counting the connections opened.
    fn echo_dialer(dials: Arc<AtomicUsize>) -> InProcessDialer {
        InProcessDialer::new(move || {
            dials.fetch_add(1, Ordering::SeqCst);
            let (client, server) = tokio::io::duplex(64 * 1024);
            let service =
                hyper::service::service_fn(|req: http::Request<hyper::body::Incoming>| {
                    let all = |name: &str| {
                        req.headers()
                            .get_all(name)
                            .iter()
                            .map(|v| v.to_str().unwrap_or("?").to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    };
                    let text = format!(
                        "{}|{}|{}",
                        all("x-remote-user"),
                        all("x-remote-group"),
                        all("authorization")
                    );
                    async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from(text),
                        )))
                    }
                });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(TokioIo::new(server), service),
            );
            client
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn identities_share_one_in_process_connection_each_request_naming_its_own() {
        let dials = Arc::new(AtomicUsize::new(0));
        let base = Client::in_process(echo_dialer(dials.clone()));
        let get = |c: Client| async move {
            let (code, body) = c
                .request_bytes(http::Method::GET, "/api/v1/pods", None)
                .await
                .unwrap();
            assert_eq!(code, 200);
            String::from_utf8(body.to_vec()).unwrap()
        };
        // Requests made before the first connection is up all wait for it.
        let first = (0..50).map(|i| {
            let c = base
                .as_front_proxied(&format!("system:node:n{i}"), &[])
                .unwrap();
            async move { (i, get(c).await) }
        });
        for (i, seen) in futures::future::join_all(first).await {
            assert_eq!(seen, format!("system:node:n{i}||"));
        }
        // Without an identity nothing is named (the real server answers 401).
        assert_eq!(get(base.clone()).await, "||");
        let node = base
            .as_front_proxied("system:node:n1", &["system:nodes".into(), "extra".into()])
            .unwrap();
        let scheduler = base.as_front_proxied("system:kube-scheduler", &[]).unwrap();
        let (a, b) = tokio::join!(get(node.clone()), get(scheduler.clone()));
        assert_eq!(a, "system:node:n1|system:nodes,extra|");
        assert_eq!(b, "system:kube-scheduler||");
        for _ in 0..20 {
            assert_eq!(
                get(node.clone()).await,
                "system:node:n1|system:nodes,extra|"
            );
        }
        assert_eq!(
            dials.load(Ordering::SeqCst),
            1,
            "one connection for all identities"
        );
    }

    /// A dialer whose server answers every request with `body` (a watch stream's lines),
    /// or with `selected` when the request has a field selector.
    fn watch_dialer(body: &'static str, selected: &'static str) -> InProcessDialer {
        InProcessDialer::new(move || {
            let (client, server) = tokio::io::duplex(64 * 1024);
            let service = hyper::service::service_fn(move |req: http::Request<_>| async move {
                let with_selector = req.uri().query().unwrap_or("").contains("fieldSelector");
                let text = if with_selector { selected } else { body };
                let mut resp = http::Response::new(Full::new(Bytes::from_static(text.as_bytes())));
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                Ok::<_, std::convert::Infallible>(resp)
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(TokioIo::new(server), service),
            );
            client
        })
    }

    type PodStream = crate::rest::WatchStream<Arc<k8s_openapi::api::core::v1::Pod>>;

    /// A watch of pods by `client` (trimmed or not, with a field selector or not).
    async fn pod_watch(client: &Client, trimmed: bool, fields: Option<&str>) -> PodStream {
        let resource = crate::rest::ApiResource::of::<k8s_openapi::api::core::v1::Pod>();
        let mut params = crate::rest::WatchParams::default();
        if let Some(fields) = fields {
            params.selection = crate::rest::Selection::default().and_fields(fields);
        }
        client
            .watch_objects_trimmed::<k8s_openapi::api::core::v1::Pod>(
                &resource,
                Some("default"),
                &params,
                trimmed,
            )
            .await
            .unwrap()
    }

    /// The pod of the stream's next event (few events are decoded as they are taken, so
    /// alternating between streams alternates their decoding).
    async fn next_pod(stream: &mut PodStream) -> Arc<k8s_openapi::api::core::v1::Pod> {
        match stream.next().await.expect("an event").unwrap() {
            crate::rest::WatchEvent::Added(p)
            | crate::rest::WatchEvent::Modified(p)
            | crate::rest::WatchEvent::Deleted(p) => p,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// The pods of `streams`' next `n` events, taken from each in turn.
    async fn in_turn(
        streams: &mut [PodStream],
        n: usize,
    ) -> Vec<Vec<Arc<k8s_openapi::api::core::v1::Pod>>> {
        let mut pods = vec![Vec::new(); streams.len()];
        for _ in 0..n {
            for (stream, seen) in streams.iter_mut().zip(&mut pods) {
                seen.push(next_pod(stream).await);
            }
        }
        pods
    }

    fn node_name(pod: &k8s_openapi::api::core::v1::Pod) -> Option<&str> {
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
    }

    const EVENTS: &str = concat!(
        r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"default","uid":"u-a","resourceVersion":"5","managedFields":[{"manager":"m"}]},"spec":{"nodeName":"n1"}}}"#,
        "\n",
        r#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"default","uid":"u-a","resourceVersion":"6"},"spec":{"nodeName":"n2"}}}"#,
        "\n",
        r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"b","namespace":"default","resourceVersion":"7"}}}"#,
        "\n",
        r#"{"type":"DELETED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"default","uid":"u-a","resourceVersion":"8"}}}"#,
        "\n",
    );

    /// What a watcher selecting `spec.nodeName=n1` receives of the same changes: when the
    /// pod moves to n2 at resourceVersion 6, a DELETED event with its previous state
    /// stamped with that version.
    const SELECTED: &str = concat!(
        r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"default","uid":"u-a","resourceVersion":"5","managedFields":[{"manager":"m"}]},"spec":{"nodeName":"n1"}}}"#,
        "\n",
        r#"{"type":"DELETED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"default","uid":"u-a","resourceVersion":"6"},"spec":{"nodeName":"n1"}}}"#,
        "\n",
    );

    /// Clients of one dialer (or of its clones) that receive the same object version
    /// share one decoded object; other versions, objects without a uid, untrimmed watches
    /// and clients of another dialer decode their own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clients_of_one_server_share_each_object_version_they_decode() {
        let dialer = watch_dialer(EVENTS, SELECTED);
        let scheduler = Client::in_process(dialer.clone())
            .as_front_proxied("system:kube-scheduler", &[])
            .unwrap();
        let node = Client::in_process(dialer.clone())
            .as_front_proxied("system:node:n1", &["system:nodes".into()])
            .unwrap();
        let other_server = Client::in_process(watch_dialer(EVENTS, SELECTED));
        let mut streams = [
            pod_watch(&scheduler, true, None).await,
            pod_watch(&node, true, None).await,
            pod_watch(&other_server, true, None).await,
            pod_watch(&node, false, None).await,
        ];
        let pods = in_turn(&mut streams, 4).await;
        let [first, second, elsewhere, untrimmed] = &pods[..] else {
            unreachable!()
        };
        assert_eq!(first, second, "the same objects either way");
        for (i, shared) in [(0, true), (1, true), (2, false), (3, true)] {
            assert_eq!(Arc::ptr_eq(&first[i], &second[i]), shared, "event {i}");
        }
        assert!(first[0].metadata.managed_fields.is_none(), "trimmed");
        assert_eq!(node_name(&first[1]), Some("n2"));
        // Another server's clients and untrimmed watches decode their own.
        assert_eq!(elsewhere, first);
        assert!((0..4).all(|i| !Arc::ptr_eq(&elsewhere[i], &first[i])));
        assert!((0..4).all(|i| !Arc::ptr_eq(&untrimmed[i], &first[i])));
        assert!(untrimmed[0].metadata.managed_fields.is_some());
        // A watcher selecting n1 receives version 6 as a DELETED event holding the pod's
        // previous state: whichever stream decodes version 6 first, each gets its own.
        for selecting_first in [true, false] {
            let mut streams = [
                pod_watch(&node, true, Some("spec.nodeName=n1")).await,
                pod_watch(&scheduler, true, None).await,
            ];
            if !selecting_first {
                streams.reverse();
            }
            let mut pods = in_turn(&mut streams, 2).await;
            if !selecting_first {
                pods.reverse();
            }
            let [selected, all] = &pods[..] else {
                unreachable!()
            };
            assert!(Arc::ptr_eq(&selected[0], &all[0]), "version 5 is shared");
            assert_eq!(node_name(&selected[1]), Some("n1"), "{selecting_first}");
            assert_eq!(node_name(&all[1]), Some("n2"), "{selecting_first}");
        }
    }

    #[test]
    fn front_proxy_headers_are_never_sent_over_the_network() {
        // Even to a server named like the in-process one.
        let net = Client::new(Config::new(IN_PROCESS_ORIGIN).unwrap()).unwrap();
        let e = net.as_front_proxied("admin", &[]).unwrap_err();
        assert!(e.to_string().contains("in-process"), "{e}");
        let base = Client::in_process(echo_dialer(Arc::new(AtomicUsize::new(0))));
        assert!(base.as_front_proxied("", &[]).is_err());
        assert!(base.as_front_proxied("a\nb", &[]).is_err());
        assert!(base.as_front_proxied("a", &["".into()]).is_err());
    }
}
