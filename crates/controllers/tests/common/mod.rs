//! Shared helpers of the control plane's integration tests: a real `listwatch serve` child
//! (the components talk to it only through the client library, as they would to any API
//! server) and deadline-bounded waiting, from the `test-server` crate.

#![allow(unused_imports)]

pub use test_server::*;
