//! Requests to an API server running in the same process, for a binary that runs the server
//! and its components together (`listwatch up`): each request is a call into the server's
//! request handler, and each response body is the server's own body, polled by the client.
//! No socket, no TLS, no HTTP framing.
//!
//! Such a request is not authenticated by a credential: the server trusts the identity each
//! request names in the front-proxy headers (`X-Remote-User`, `X-Remote-Group`), as
//! kube-apiserver trusts an authenticating proxy. That is safe only because nothing outside
//! the process can make such a call, which is why a [`Client`](super::Client) sends those
//! headers only to an [`InProcessServer`]
//! ([`Client::as_front_proxied`](super::Client::as_front_proxied)).

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::Full;

/// The authority in-process requests are addressed to (it names no host: every request goes
/// to the [`InProcessServer`]).
pub const IN_PROCESS_ORIGIN: &str = "http://in-process.listwatch.local";

/// The body of an in-process response: the server's own response body.
pub type InProcessBody = UnsyncBoxBody<Bytes, Infallible>;

/// What an in-process server answers a request with: a future of the response head, whose
/// body streams the rest (a watch's body for as long as the watch lasts).
pub type InProcessResponse = Pin<Box<dyn Future<Output = http::Response<InProcessBody>> + Send>>;

/// An API server in this process, as its clients reach it: a function from a request to
/// its response.
///
/// The function must answer every request with a response (errors as `Status` responses),
/// and must be called within the tokio runtime. Dropping the response future before it is
/// ready cancels the request, as resetting an HTTP/2 stream does; dropping the body ends a
/// watch.
///
/// Clones are the same server: the clients of one `InProcessServer` and of its clones share
/// the objects their watches decode ([`crate::object_interner`]), so give every client of
/// one server a clone of one `InProcessServer`, and never one to two servers.
#[derive(Clone)]
pub struct InProcessServer {
    serve: Arc<dyn Fn(http::Request<Full<Bytes>>) -> InProcessResponse + Send + Sync>,
    /// This server's number in the process (its clones share it).
    server: u64,
}

impl InProcessServer {
    /// The server that answers requests with `serve`.
    pub fn new(
        serve: impl Fn(http::Request<Full<Bytes>>) -> InProcessResponse + Send + Sync + 'static,
    ) -> InProcessServer {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        InProcessServer {
            serve: Arc::new(serve),
            server: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The number that stands for this server in [`crate::object_interner::Scope`].
    pub(crate) fn server(&self) -> u64 {
        self.server
    }

    /// Sends `req` to the server.
    pub(super) fn call(&self, req: http::Request<Full<Bytes>>) -> InProcessResponse {
        (self.serve)(req)
    }
}

impl fmt::Debug for InProcessServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InProcessServer")
    }
}

/// The body of a response a [`Client`](super::Client) received: from the network, or from
/// an in-process server (which cannot fail to deliver what it has).
pub(super) enum ResponseBody {
    Network(hyper::body::Incoming),
    InProcess(InProcessBody),
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ResponseBody::Network(b) => Pin::new(b).poll_frame(cx),
            ResponseBody::InProcess(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(|e| match e {}))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Network(b) => b.is_end_stream(),
            ResponseBody::InProcess(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Network(b) => b.size_hint(),
            ResponseBody::InProcess(b) => b.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::{Client, Config};
    use http_body_util::BodyExt as _;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A server that answers each request with the front-proxy headers it carried (and its
    /// `Authorization`), counting the requests.
    fn echo_server(calls: Arc<AtomicUsize>) -> InProcessServer {
        InProcessServer::new(move |req| {
            calls.fetch_add(1, Ordering::SeqCst);
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
            Box::pin(
                async move { http::Response::new(Full::new(Bytes::from(text)).boxed_unsync()) },
            )
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn identities_share_one_server_each_request_naming_its_own() {
        let calls = Arc::new(AtomicUsize::new(0));
        let base = Client::in_process(echo_server(calls.clone()));
        let get = |c: Client| async move {
            let (code, body) = c
                .request_bytes(http::Method::GET, "/api/v1/pods", None)
                .await
                .unwrap();
            assert_eq!(code, 200);
            String::from_utf8(body.to_vec()).unwrap()
        };
        let concurrent = (0..50).map(|i| {
            let c = base
                .as_front_proxied(&format!("system:node:n{i}"), &[])
                .unwrap();
            async move { (i, get(c).await) }
        });
        for (i, seen) in futures::future::join_all(concurrent).await {
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
        assert_eq!(calls.load(Ordering::SeqCst), 53, "one call per request");
    }

    /// A server that answers every request with `body` (a watch stream's lines), or with
    /// `selected` when the request has a field selector.
    fn watch_server(body: &'static str, selected: &'static str) -> InProcessServer {
        InProcessServer::new(move |req| {
            let with_selector = req.uri().query().unwrap_or("").contains("fieldSelector");
            let text = if with_selector { selected } else { body };
            let mut resp =
                http::Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed_unsync());
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            Box::pin(std::future::ready(resp))
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

    /// Clients of one server (or of its clones) that receive the same object version share
    /// one decoded object; other versions, objects without a uid, untrimmed watches and
    /// clients of another server decode their own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clients_of_one_server_share_each_object_version_they_decode() {
        let server = watch_server(EVENTS, SELECTED);
        let scheduler = Client::in_process(server.clone())
            .as_front_proxied("system:kube-scheduler", &[])
            .unwrap();
        let node = Client::in_process(server.clone())
            .as_front_proxied("system:node:n1", &["system:nodes".into()])
            .unwrap();
        let other_server = Client::in_process(watch_server(EVENTS, SELECTED));
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
        let base = Client::in_process(echo_server(Arc::new(AtomicUsize::new(0))));
        assert!(base.as_front_proxied("", &[]).is_err());
        assert!(base.as_front_proxied("a\nb", &[]).is_err());
        assert!(base.as_front_proxied("a", &["".into()]).is_err());
    }
}
