//! Kubernetes' protobuf encoding at the wire level: the `k8s\0` envelope, varints and
//! fields as (number, value) pairs.
//!
//! The codecs live in [`api::protobuf_wire`], shared with the server; this module re-exports
//! them so the client's paths (`client::protobuf_wire::...`) stay as they were.

pub use api::protobuf_wire::*;
