//! In-process connections: the server end of in-memory pipes that components running in
//! the server's own process (`listwatch up`'s controller-manager, scheduler and node agents)
//! connect through, instead of a socket and TLS.
//!
//! Each pipe is served as HTTP/2 (the client knows it: there is nothing to negotiate), with
//! the request-header authenticator ([`crate::auth::request_header`]): a request runs as the
//! user its `X-Remote-User` and `X-Remote-Group` headers name. That is sound because only
//! code in this process can obtain a pipe (the dialer is a value, not an address), and that
//! code could as well call the server directly; every request is still authorized as its
//! user, so one connection can carry a thousand node identities, each held to its node by
//! the Node authorizer.

use super::{http2, Http2Options, ServeOptions};
use crate::auth::authenticator::Authenticator;
use crate::handlers::state::ApiServer;
use std::sync::Arc;
use tokio::io::DuplexStream;

/// How many bytes each direction of a pipe holds before its writer waits for the reader.
pub const PIPE_BUFFER: usize = 1 << 20;

/// A function that opens a connection to `srv`: each call returns the client's end of a new
/// pipe and spawns the task serving the other end (so it must be called within the tokio
/// runtime). The connection ends when the client drops its end.
///
/// The connection sends no PINGs (`http2.keep_alive_interval` is ignored): a pipe cannot
/// die silently, and on a loaded machine a late answer would end every request and watch of
/// the components sharing it at once.
pub fn dialer(
    srv: Arc<ApiServer>,
    http2: Http2Options,
) -> impl Fn() -> DuplexStream + Send + Sync + 'static {
    let opts = Arc::new(ServeOptions {
        authenticator: Some(Arc::new(Authenticator::front_proxy())),
        http2: Http2Options {
            keep_alive_interval: None,
            ..http2
        },
        ..Default::default()
    });
    move || {
        let (client, server) = tokio::io::duplex(PIPE_BUFFER);
        tokio::spawn(http2::serve_connection(
            server,
            srv.clone(),
            opts.clone(),
            None,
            None,
        ));
        client
    }
}
