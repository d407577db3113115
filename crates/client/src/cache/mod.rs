//! What client-go calls `tools/cache`: the machinery that keeps a local, indexed copy of one
//! resource up to date through list + watch.
//!
//! One concept per file:
//! - [`key`]: object keys (`namespace/name` or `name`).
//! - [`index`]: [`IndexFunc`], [`Indexers`], [`Indices`] and the namespace index.
//! - [`store`]: [`ThreadSafeStore`] and [`Indexer`], the local cache listers read.
//! - [`delta_fifo`]: [`DeltaFifo`], the queue of per-object changes between the reflector
//!   and the informer's process loop; `queued_keys` (private) holds its keys in pop order.
//! - [`list_watch`]: the [`ListerWatcher`] trait a reflector lists and watches through.
//! - [`backoff`]: the jittered exponential [`Backoff`] between failed calls.
//! - [`reflector`]: [`Reflector`], list + watch into a `DeltaFifo`, with resync.
//! - [`reflector_options`]: [`ReflectorOptions`], what a reflector is configured with, and
//!   [`ConfigureReflector`], the setters the reflector and informer builders share.
//! - [`reflector_metrics`]: [`ReflectorMetrics`], what a reflector has done (lists,
//!   watches, events, 410s, relists).
//! - [`processor`]: per-handler notification queues, [`ResourceEventHandler`],
//!   [`NotificationStream`] (a `futures` `Stream` through `into_stream`).
//! - [`shared_informer`]: [`SharedIndexInformer`], tying all of the above together.
//! - [`factory`]: [`SharedInformerFactory`] and [`wait_for_cache_sync`].
//! - [`lister`]: [`Lister`] and [`NamespaceLister`], queries over the cache.
//! - [`rest_lister_watcher`]: [`RestListerWatcher`], the `ListerWatcher` over the REST
//!   client.
//! - [`fake_lister_watcher`]: [`FakeListerWatcher`], a scriptable source for tests.
//!
//! Objects are shared as `Arc<K>` (`K: `[`KubeObject`](crate::object::KubeObject)) from the
//! moment they are decoded, and are read-only from then on: no cache clones them.

pub mod backoff;
pub mod delta_fifo;
pub mod factory;
pub mod fake_lister_watcher;
pub mod index;
pub mod key;
pub mod list_watch;
pub mod lister;
pub mod processor;
mod queued_keys;
pub mod reflector;
pub mod reflector_metrics;
pub mod reflector_options;
pub mod rest_lister_watcher;
pub mod shared_informer;
pub mod store;

pub use backoff::Backoff;
pub use delta_fifo::{
    Delta, DeltaFifo, DeltaObject, DeltaType, Deltas, FifoClosed, KnownObjects, Popped, Replace,
};
pub use factory::{
    wait_for_cache_sync, FactoryBuilder, FactoryError, HasSynced, InformerOptions,
    ListWatchOptions, SharedInformerFactory,
};
pub use fake_lister_watcher::FakeListerWatcher;
pub use index::{
    label_index_func, namespace_index_func, namespace_indexers, Index, IndexFunc, Indexers,
    Indices, NAMESPACE_INDEX,
};
pub use key::{key_for, object_key, split_key, KeyError};
pub use list_watch::{
    EventSource, EventStream, ListPage, ListRequest, ListerWatcher, WatchError, WatchEvent,
    WatchRequest,
};
pub use lister::{Lister, NamespaceLister};
pub use processor::{
    DeleteEvent, HandlerOptions, Notification, NotificationStream, Notifications, Registration,
    ResourceEventHandler, ResourceEventHandlerFuncs,
};
pub use reflector::Reflector;
pub use reflector_metrics::ReflectorMetrics;
pub use reflector_options::{ConfigureReflector, ReflectorOptions};
pub use rest_lister_watcher::{RestListerWatcher, DEFAULT_WATCH_IDLE_TIMEOUT};
pub use shared_informer::{InformerBuilder, InformerError, SharedIndexInformer};
pub use store::{IndexError, Indexer, ThreadSafeStore};
