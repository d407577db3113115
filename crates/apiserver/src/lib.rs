//! The listwatch API server.
//!
//! Data flow (see DESIGN.md): `server` routes a request to a `handlers` function. Writes go
//! through the `registry` strategy (server-owned fields, validation) into `storage` as a
//! compare-and-swap; the committed change comes back through the per-resource `cacher`'s
//! storage watch, is stamped and applied to the watch cache, and is dispatched to every
//! matching cache watcher. Lists and watches are served from the cacher, never from storage
//! directly (except paging continuations, read from storage at the first page's revision).
//!
//! Layers, each importing only those below it: `schema` (the kinds' protobuf tables and
//! OpenAPI types) → `registry` → `cacher` (no transport: a watch is a registration, and
//! connections take its direct writes through `cacher::sink`) → `auth` (who a request comes
//! from and whether it may run, read from the RBAC caches) → `encoding` (JSON, protobuf,
//! Table, YAML) → `handlers` (with the server state they work on, and the `admission` plugins
//! the write handlers run over that state) → `server` (listeners,
//! dispatch, HTTP/1.1, WebSocket, HTTP/2, watch bodies and their wire framing). A watch event
//! walks storage → cacher → server → socket.
#![warn(missing_docs)]
// `Status` is deliberately rich (details, causes); it is the error of every handler.
#![allow(clippy::result_large_err)]

pub mod admission;
pub mod audit;
pub mod auth;
pub mod cacher;
pub mod encoding;
pub mod encryption;
pub mod flow_control;
pub mod handlers;
pub mod metrics;
pub mod process_metrics;
pub mod registry;
pub mod schema;
pub mod server;

pub use server::{serve, serve_with, ApiServer, ServeOptions, ServerConfig};
