//! The watch cache (seeds' article 003): one [`Cacher`] per resource serves every list and
//! watch of that resource from memory.
//!
//! Data flow: a reflector task lists the resource's key prefix from storage and then follows a
//! storage watch from that revision. Each change is decoded once into a [`CachedObject`]
//! (JSON with its resourceVersion stamped, plus the labels and selectable fields filters need),
//! applied to the [`WatchCache`] (current state + a bounded ring of recent events), and then
//! dispatched to the [`CacheWatcher`]s whose index bucket (namespace, name, `spec.nodeName`)
//! can match it. Each watcher filters with the old/new rule and pushes shared bytes into its
//! bounded queue; a watcher whose queue is full is terminated instead of growing memory.
//!
//! The cacher knows no transport: a watch is handed out as a [`WatchRegistration`], and the
//! server's connections take the dispatcher's direct writes through the [`sink`] traits.

pub mod cache_watcher;
pub mod cached_object;
#[allow(clippy::module_inception)]
pub mod cacher;
pub mod dispatch;
pub mod filter;
pub mod list;
pub mod outbox;
mod pacer;
pub mod prefetch;
mod reflector;
pub mod sink;
pub mod stored_json;
pub mod time_budget;
pub mod watch_cache;
pub mod watch_frame;
mod watcher_index;

pub use cache_watcher::{CacheWatcher, WatchFrame, WatchRegistration};
pub use cached_object::CachedObject;
pub use cacher::Cacher;
pub use filter::Filter;
pub use watch_cache::{WatchCache, WatchCacheEvent};
