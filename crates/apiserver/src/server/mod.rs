//! The HTTP server: listeners speaking HTTP/1.1 (chunked watches), HTTP/2 (h2c with prior
//! knowledge, or ALPN `h2` over TLS) and WebSocket watches, optionally with TLS and bearer
//! token authentication; routing to the discovery documents and the resource handlers, with
//! Accept negotiation (JSON, Table, PartialObjectMetadata) and protobuf request bodies.

pub mod blocking;
pub mod body;
pub mod bounded_yaml;
pub mod discovery;
pub mod http1_errors;
pub mod http2;
pub mod loopback_guard;
pub mod negotiate;
pub mod openapi;
pub mod openapi_types;
pub mod protobuf;
pub mod protobuf_encode;
pub mod protobuf_generic;
#[rustfmt::skip]
pub mod protobuf_schema;
pub mod protobuf_transcode;
pub mod router;
pub mod table;
pub mod tls;
pub mod websocket;
pub mod yaml_depth;
pub mod dispatch;
pub mod listeners;
pub mod state;

pub use dispatch::BODY_READ_TIMEOUT;
pub(crate) use dispatch::body_timeout_status;
pub use listeners::{serve, serve_with, Http1Options, Http2Options, ServeOptions};
pub use state::{ApiServer, ServerConfig, WriteOptions};
