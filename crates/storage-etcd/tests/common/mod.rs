//! Test helpers: the crate's `testing` module (real etcd processes on free loopback ports).

#![allow(unused_imports)]

pub use storage_etcd::testing::{EtcdCluster, EtcdServer};
