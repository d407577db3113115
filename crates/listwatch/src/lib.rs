//! The `listwatch` package: the `listwatch` binary (`serve`, `kubeconfig`, `bench`) and the
//! `listwatch-bench` binary that runs the benchmarks.
//!
//! The benchmarks live in their own binary because of memory allocators: the server is
//! linked with mimalloc (measured faster on its write path, see BENCHMARKS.md), while the
//! client library's benchmarks must measure what a library user gets by default — the
//! system allocator. `listwatch bench …` runs `listwatch-bench …` next to it, and the
//! benchmarks spawn `listwatch serve` from the same directory. `listwatch bench --mimalloc …`
//! runs them inside `listwatch` instead, to measure a client linked with mimalloc.
#![warn(missing_docs)]

pub mod bench;
pub mod components;
pub mod data_dir;
