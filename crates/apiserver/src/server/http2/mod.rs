//! The server's own HTTP/2 (RFC 9113), for h2c with prior knowledge and for ALPN `h2` over TLS.
//!
//! Why not hyper's: a watch stream is a long response of small DATA frames, and with many
//! watches per connection the per-stream machinery dominates — hyper runs a task per stream
//! and h2 writes each DATA frame over 256 bytes with its own `writev`. Here a connection has
//! one send queue ([`writer::ConnWriter`]) that the watch cache's dispatcher appends DATA frames
//! to directly, so one event for a hundred streams of a connection leaves in one write.
//!
//! Data flow: [`connection::serve_connection`] reads frames, decodes request headers
//! ([`hpack`]), collects request bodies and spawns one task per request ([`stream::respond`]),
//! which runs the API server's handler and sends the response through the stream's
//! [`writer::StreamSink`]; a JSON watch hands its sink to the watch cache instead, which then
//! appends each event itself. The connection task writes the queue out, answers SETTINGS and
//! PING, applies WINDOW_UPDATEs, and pings idle clients to detect dead connections.
//!
//! Not supported (not needed by Kubernetes clients): server push, extended CONNECT (WebSocket
//! over HTTP/2; WebSocket clients use HTTP/1.1), stream priorities (ignored), request trailers
//! (ignored).

pub mod connection;
pub mod frame;
pub mod hpack;
pub mod send_queue;
pub mod stream;
pub mod writer;

pub use connection::serve_connection;
