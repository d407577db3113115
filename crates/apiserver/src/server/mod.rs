//! The HTTP server: listeners speaking HTTP/1.1 (chunked watches), HTTP/2 (h2c with prior
//! knowledge, or ALPN `h2` over TLS) and WebSocket watches, optionally with TLS and bearer
//! token authentication; routing to the discovery documents and the resource handlers, with
//! Accept negotiation (JSON, Table, PartialObjectMetadata) and protobuf request bodies.

pub mod direct_conn;
pub mod discovery;
pub mod dispatch;
pub mod http1_errors;
pub mod http2;
pub mod in_process;
pub mod listeners;
pub mod loopback_guard;
pub mod openapi;
pub mod router;
pub mod tls;
pub mod watch_body;
pub mod watch_response;
pub mod websocket;
pub mod wire;

pub use crate::handlers::state::{ApiServer, ServerConfig, WriteOptions};
pub(crate) use dispatch::body_timeout_status;
pub use dispatch::BODY_READ_TIMEOUT;
pub use listeners::{serve, serve_with, Http1Options, Http2Options, ServeOptions};
