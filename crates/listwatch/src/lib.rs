//! The `listwatch` package: the `listwatch` binary (`serve`, `up`, `kubeconfig`, `bench`, …).
//!
//! The benchmarks live in the `bench` crate and run in its own binary, `listwatch-bench`,
//! because of memory allocators: the server is linked with mimalloc (measured faster on its
//! write path: docs/benchmark-history.md, session 6), while the client library's benchmarks
//! must measure what a library user gets by default — the system allocator.
//! `listwatch bench …` runs `listwatch-bench …` next to it (build both:
//! `cargo build --release -p listwatch -p bench`), and the benchmarks spawn `listwatch serve`
//! from the same directory.
//! `listwatch bench --mimalloc …` runs them inside `listwatch` instead, to measure a client
//! linked with mimalloc; that, and parsing the `bench` arguments, is why this package depends
//! on `bench`.
#![warn(missing_docs)]

pub mod components;
pub mod data_dir;
