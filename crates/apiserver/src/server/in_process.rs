//! In-process requests: the server's answer to components running in its own process
//! (`listwatch up`'s controller-manager, scheduler and node agents), which call the request
//! handler directly instead of connecting through a socket, TLS and HTTP framing.
//!
//! Each request is authenticated by the request-header authenticator
//! ([`crate::auth::request_header`]): it runs as the user its `X-Remote-User` and
//! `X-Remote-Group` headers name. That is sound because only code in this process can make
//! such a call (the handler is a value, not an address), and that code could as well call
//! the server's internals; every request is still authorized as its user, so a thousand node
//! identities can share one handler, each held to its node by the Node authorizer.

use crate::auth::authenticator::Authenticator;
use crate::auth::user_info::Authenticated;
use crate::encoding::body::Body;
use crate::handlers::state::ApiServer;
use crate::handlers::status_response;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Full};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The response future of an in-process request.
pub type Responding = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// The function in-process clients send their requests to (`client::rest::InProcessServer`
/// wraps it): authenticates each request by its front-proxy headers (401 without a user)
/// and runs it as the network listeners run theirs, in a task of its own. A handler that
/// fails is the request's 500, and a response body that fails ends (as a reset stream
/// would), never unwinding into the caller.
///
/// Dropping the future before the response head cancels the request, as resetting an
/// HTTP/2 stream does; dropping the body of a watch ends the watch. Must be called within
/// the tokio runtime.
pub fn handler(srv: Arc<ApiServer>) -> impl Fn(Request<Full<Bytes>>) -> Responding + Send + Sync {
    let authenticator = Arc::new(Authenticator::front_proxy());
    move |req| {
        let (mut parts, body) = req.into_parts();
        // Only what the server itself attaches reaches the handler.
        parts.extensions.clear();
        match authenticator.authenticate(&parts.headers, None, &*srv) {
            Ok(user) => {
                parts.extensions.insert(Authenticated(user));
            }
            Err(s) => return Box::pin(std::future::ready(status_response(&s))),
        }
        let task = tokio::spawn(srv.clone().handle(Request::from_parts(parts, body)));
        Box::pin(Running(task))
    }
}

/// A request's task, aborted if its caller stops waiting for the response.
struct Running(tokio::task::JoinHandle<Response<Body>>);

impl Future for Running {
    type Output = Response<Body>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response<Body>> {
        Pin::new(&mut self.0).poll(cx).map(|done| match done {
            Ok(resp) => resp.map(|body| Guarded(Some(body)).boxed_unsync()),
            Err(e) => {
                tracing::error!(error = %e, "an in-process request's handler failed");
                status_response(&api::Status::internal(
                    "the request's handler failed; see the server's log",
                ))
            }
        })
    }
}

/// A response body polled by its in-process caller's task: a panic while producing it ends
/// the body instead of unwinding into the caller (a network client would see its stream
/// reset).
struct Guarded(Option<Body>);

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let Some(body) = self.0.as_mut() else {
            return Poll::Ready(None);
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(body).poll_frame(cx))) {
            Ok(p) => p,
            Err(_) => {
                tracing::error!("an in-process response body failed; it ends here");
                self.0 = None;
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.as_ref().is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match &self.0 {
            Some(b) => http_body::Body::size_hint(b),
            None => http_body::SizeHint::with_exact(0),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}
