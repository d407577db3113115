//! The listwatch API server.
//!
//! Data flow (see DESIGN.md): `server` routes a request to a `handlers` function. Writes go
//! through the `registry` strategy (server-owned fields, validation) into `storage` as a
//! compare-and-swap; the committed change comes back through the per-resource `cacher`'s
//! storage watch, is stamped and applied to the watch cache, and is dispatched to every
//! matching cache watcher. Lists and watches are served from the cacher, never from storage
//! directly (except paging continuations, read from storage at the first page's revision).
#![warn(missing_docs)]
// `Status` is deliberately rich (details, causes); it is the error of every handler.
#![allow(clippy::result_large_err)]

pub mod cacher;
pub mod encoding;
pub mod encryption;
pub mod handlers;
pub mod metrics;
pub mod registry;
pub mod schema;
pub mod server;

pub use server::{serve, serve_with, ApiServer, ServeOptions, ServerConfig};
