//! HTTP/2 frames, through the server's connection task (see [`crate::connection`]).

pub use crate::connection::http2;
