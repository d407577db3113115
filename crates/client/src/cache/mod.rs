//! What client-go calls `tools/cache`: the machinery that keeps a local, indexed copy of one
//! resource up to date through list + watch.
//!
//! One concept per file:
//! - [`key`]: object keys (`namespace/name` or `name`).
//! - [`index`]: [`IndexFunc`], [`Indexers`], [`Indices`] and the namespace index.
//! - [`store`]: [`ThreadSafeStore`] and [`Indexer`], the local cache listers read.
//! - [`delta_fifo`]: [`DeltaFifo`], the queue of per-object changes between the reflector
//!   and the informer's process loop.
//!
//! Objects are shared as `Arc<K>` (`K: `[`KubeObject`](crate::object::KubeObject)) from the
//! moment they are decoded, and are read-only from then on: no cache clones them.

pub mod delta_fifo;
pub mod index;
pub mod key;
pub mod store;

pub use delta_fifo::{Delta, DeltaFifo, DeltaObject, DeltaType, Deltas, FifoClosed, KnownObjects};
pub use index::{
    label_index_func, namespace_index_func, namespace_indexers, Index, IndexFunc, Indexers,
    Indices, NAMESPACE_INDEX,
};
pub use key::{key_for, object_key, split_key, KeyError};
pub use store::{IndexError, Indexer, ThreadSafeStore};
