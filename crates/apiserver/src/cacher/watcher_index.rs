//! The watcher index: a cacher's registered watchers, grouped by the [`Bucket`] (namespace,
//! name, `spec.nodeName`) an event must fall in to reach them.
//!
//! Owns the per-bucket watcher maps and their shared snapshots; it assumes the caller holds the
//! cacher's index lock and keeps the `apiserver_registered_watchers` gauge itself.

use super::cache_watcher::CacheWatcher;
use super::filter::Bucket;
use std::collections::HashMap;
use std::sync::Arc;

/// Every watcher of one cacher, by bucket.
#[derive(Default)]
pub(super) struct WatcherIndex {
    pub(super) buckets: HashMap<Bucket, BucketWatchers>,
    pub(super) count: usize,
}

/// The watchers of one bucket.
#[derive(Default)]
pub(super) struct BucketWatchers {
    pub(super) by_id: HashMap<u64, Arc<CacheWatcher>>,
    /// The same watchers as one shared list, built when the dispatcher first needs it after a
    /// change: an event then costs one reference count, not one per watcher.
    snapshot: Option<Arc<[Arc<CacheWatcher>]>>,
}

impl BucketWatchers {
    pub(super) fn snapshot(&mut self) -> Arc<[Arc<CacheWatcher>]> {
        self.snapshot
            .get_or_insert_with(|| self.by_id.values().cloned().collect())
            .clone()
    }
}

impl WatcherIndex {
    pub(super) fn insert(&mut self, w: Arc<CacheWatcher>) {
        let b = self.buckets.entry(w.bucket.clone()).or_default();
        b.by_id.insert(w.id, w);
        b.snapshot = None;
        self.count += 1;
    }

    pub(super) fn remove(&mut self, bucket: &Bucket, id: u64) -> Option<Arc<CacheWatcher>> {
        let b = self.buckets.get_mut(bucket)?;
        let removed = b.by_id.remove(&id);
        if removed.is_some() {
            b.snapshot = None;
            self.count -= 1;
        }
        if b.by_id.is_empty() {
            self.buckets.remove(bucket);
        }
        removed
    }
}
