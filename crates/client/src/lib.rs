//! The listwatch client library: what client-go calls `tools/cache` and `util/workqueue`,
//! in Rust.
//!
//! Data flow (seeds' articles 000, 001, 004): a `ListerWatcher` lists and watches one
//! resource; the `Reflector` feeds what it sees into a `DeltaFifo`; the informer's process
//! loop pops each key's deltas, updates the `Indexer` (the local cache) and notifies every
//! registered handler through its own queue; handlers usually enqueue keys into a
//! rate-limited work queue that workers drain, reading objects from a `Lister`.
//!
//! Objects arrive as JSON (`object::DynamicObject`, or typed `k8s-openapi` objects) or, for
//! built-in kinds, in Kubernetes' protobuf encoding (`protobuf_object::ProtobufObject`,
//! read at the wire level by `protobuf_wire`), which costs far less to receive.
//!
//! The allocator is the application's choice. With protobuf, much of the cost per event
//! was allocating each object's buffer on one thread and freeing it on another, which
//! glibc's allocator does slowly; `buffer_pool` now recycles those buffers. Linking
//! mimalloc or jemalloc still takes more off the client's CPU per event, while holding
//! cached objects in somewhat more memory (BENCHMARKS.md, sessions 6, 13 and 16).
#![warn(missing_docs)]

pub mod buffer_pool;
pub mod cache;
pub mod clock;
pub mod json_validate;
pub mod managed_fields_trim;
pub mod object;
mod object_interner;
mod prefetch;
pub mod protobuf_object;
pub mod protobuf_wire;
pub mod rest;
pub mod stream;
pub mod workqueue;

/// The label selector [`cache::Lister::list`] and [`cache::NamespaceLister::list`] take
/// (`api::labels::LabelSelector`), re-exported so that a program using the client needs no
/// direct dependency on `api`: parse one with `LabelSelector::parse("app=web,tier!=db")`,
/// or match everything with `LabelSelector::everything()`.
pub use api::labels::LabelSelector;

/// The label and field selectors of a list or a watch ([`rest::Selection`]), re-exported at
/// the root next to [`LabelSelector`]: build one with
/// `Selection::default().labels("app=web").and_fields("spec.nodeName=n1")` and hand it to
/// [`rest::ListParams::selection`], [`rest::WatchParams::selection`],
/// [`cache::RestListerWatcher::selection`] or [`cache::InformerOptions::selection`]. An
/// empty selector selects every object.
pub use rest::Selection;
