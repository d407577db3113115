//! The watch cache proper: the current state of one resource plus a ring of recent events.
//!
//! Invariants (held under the cacher's lock):
//! - `resource_version` is the newest revision applied (events or storage progress);
//! - the ring holds every event with revision in `(ring_start, resource_version]`, oldest
//!   first, so a watch from any version `>= ring_start` can be replayed with no gap;
//! - the ring holds at most `capacity` events and, beyond its newest event, at most
//!   `max_bytes` of their objects' JSON (so large objects shorten the history, not memory);
//! - `store` is exactly the state at `resource_version`.

use super::cached_object::CachedObject;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, OnceLock};

/// What a change did, as the watch cache records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// The object appeared.
    Added,
    /// The object changed.
    Modified,
    /// The object was removed.
    Deleted,
}

/// One change in the ring. Shared (`Arc`) between the ring and every watcher's replay.
#[derive(Debug)]
pub struct WatchCacheEvent {
    /// Added, Modified or Deleted.
    pub event_type: EventType,
    /// The state after the change; for Deleted, the last state stamped with the deletion's
    /// resourceVersion.
    pub object: Arc<CachedObject>,
    /// The state before the change (None for Added).
    pub prev: Option<Arc<CachedObject>>,
    /// The change's resourceVersion.
    pub resource_version: u64,
    /// `prev` stamped with `resource_version`: what a watcher gets when an update moves the
    /// object out of its selector. Computed at most once, on first need.
    pub prev_restamped: OnceLock<Arc<CachedObject>>,
}

impl WatchCacheEvent {
    /// Prefetches the first line of the event's objects (new and previous) and the line with
    /// each one's namespace, which a replay's filter reads (a hint, see
    /// [`super::prefetch`]). Reads the event, so prefetch the event first.
    #[inline]
    pub fn prefetch_objects(&self) {
        for o in std::iter::once(&self.object).chain(&self.prev) {
            super::prefetch::prefetch(Arc::as_ptr(o));
            super::prefetch::prefetch(&o.namespace);
        }
    }

    /// Prefetches the bytes of the objects' namespaces (a hint). Reads the objects, so
    /// prefetch them first ([`WatchCacheEvent::prefetch_objects`]).
    #[inline]
    pub fn prefetch_namespaces(&self) {
        for o in std::iter::once(&self.object).chain(&self.prev) {
            super::prefetch::prefetch(o.namespace.as_ptr());
        }
    }
}

/// Current state + ring of recent events for one resource.
#[derive(Debug)]
pub struct WatchCache {
    store: BTreeMap<String, Arc<CachedObject>>,
    ring: VecDeque<Arc<WatchCacheEvent>>,
    capacity: usize,
    max_bytes: usize,
    /// The JSON bytes of the ring's events' objects.
    ring_bytes: usize,
    resource_version: u64,
    ring_start: u64,
}

/// What an event costs the ring's byte budget: its object's JSON (the previous state it
/// points to is the previous event's object or the state's, already counted).
fn event_bytes(event: &WatchCacheEvent) -> usize {
    event.object.json.len()
}

impl WatchCache {
    /// An empty cache keeping at most `capacity` events (at least 1) and, beyond the newest
    /// one, at most `max_bytes` of their objects.
    pub fn new(capacity: usize, max_bytes: usize) -> WatchCache {
        WatchCache {
            store: BTreeMap::new(),
            ring: VecDeque::with_capacity(capacity.clamp(1, 4096)),
            capacity: capacity.max(1),
            max_bytes,
            ring_bytes: 0,
            resource_version: 0,
            ring_start: 0,
        }
    }

    /// Replaces the whole state with a list taken at `resource_version`; the ring restarts
    /// there (older versions are no longer replayable).
    pub fn replace(&mut self, objects: Vec<Arc<CachedObject>>, resource_version: u64) {
        self.store = objects.into_iter().map(|o| (o.key.clone(), o)).collect();
        self.ring.clear();
        self.ring_bytes = 0;
        self.resource_version = resource_version;
        self.ring_start = resource_version;
    }

    /// Applies one change. Events must come in strictly increasing resourceVersion order;
    /// anything at or below the current version is ignored (returns None).
    pub fn apply(&mut self, event: WatchCacheEvent) -> Option<Arc<WatchCacheEvent>> {
        if event.resource_version <= self.resource_version {
            return None;
        }
        match event.event_type {
            EventType::Deleted => {
                self.store.remove(&event.object.key);
            }
            EventType::Added | EventType::Modified => {
                self.store
                    .insert(event.object.key.clone(), event.object.clone());
            }
        }
        self.resource_version = event.resource_version;
        let event = Arc::new(event);
        let bytes = event_bytes(&event);
        while !self.ring.is_empty()
            && (self.ring.len() >= self.capacity
                || self.ring_bytes.saturating_add(bytes) > self.max_bytes)
        {
            if let Some(old) = self.ring.pop_front() {
                self.ring_start = old.resource_version;
                self.ring_bytes -= event_bytes(&old);
            }
        }
        self.ring_bytes += bytes;
        self.ring.push_back(event.clone());
        Some(event)
    }

    /// Records that storage has nothing newer for this resource up to `rv`.
    pub fn progress(&mut self, rv: u64) {
        if rv > self.resource_version {
            self.resource_version = rv;
        }
    }

    /// The newest applied revision.
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// The oldest version a watch may resume from (events after it are all in the ring).
    pub fn oldest_resumable(&self) -> u64 {
        self.ring_start
    }

    /// The JSON bytes of the objects of the events in the ring.
    pub fn ring_bytes(&self) -> usize {
        self.ring_bytes
    }

    /// The configured ring capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of objects in the current state.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// True if the current state is empty.
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// The current state of one key.
    pub fn get(&self, key: &str) -> Option<&Arc<CachedObject>> {
        self.store.get(key)
    }

    /// Current objects with key `>= start`, in key order.
    pub fn range_from<'a>(
        &'a self,
        start: &str,
    ) -> impl Iterator<Item = &'a Arc<CachedObject>> + 'a {
        self.store
            .range::<str, _>((std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
            .map(|(_, v)| v)
    }

    /// Current objects whose key starts with `prefix` (e.g. `ns/`), in key order.
    pub fn with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<CachedObject>> + 'a {
        self.range_from(prefix)
            .take_while(move |o| o.key.starts_with(prefix))
    }

    /// Every event with resourceVersion > `rv`, oldest first; `Err(oldest)` if `rv` is older
    /// than the ring can replay.
    ///
    /// Borrowed from the ring: a replay walks up to the whole ring, and counting a reference
    /// to each event would write to every event's (cold) cache line twice.
    pub fn events_after(
        &self,
        rv: u64,
    ) -> Result<std::collections::vec_deque::Iter<'_, Arc<WatchCacheEvent>>, u64> {
        if rv < self.ring_start {
            return Err(self.ring_start + 1);
        }
        let first = self.ring.partition_point(|e| e.resource_version <= rv);
        Ok(self.ring.range(first..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn obj(key: &str, rv: u64) -> Arc<CachedObject> {
        Arc::new(CachedObject {
            key: key.into(),
            namespace: String::new(),
            name: key.into(),
            resource_version: rv,
            labels: Default::default(),
            fields: vec![],
            json: Bytes::from(format!("{{\"rv\":{rv}}}")),
            derived: Default::default(),
        })
    }

    fn ev(t: EventType, key: &str, rv: u64) -> WatchCacheEvent {
        WatchCacheEvent {
            event_type: t,
            object: obj(key, rv),
            prev: None,
            resource_version: rv,
            prev_restamped: OnceLock::new(),
        }
    }

    #[test]
    fn ring_evicts_and_reports_too_old() {
        let mut c = WatchCache::new(3, usize::MAX);
        c.replace(vec![obj("a", 5)], 10);
        assert_eq!(c.events_after(10).unwrap().len(), 0);
        assert_eq!(c.events_after(9).err(), Some(11));
        for rv in 11..=15 {
            c.apply(ev(EventType::Added, &format!("k{rv}"), rv))
                .unwrap();
        }
        // capacity 3: 13, 14, 15 kept; resumable from 12.
        assert_eq!(c.oldest_resumable(), 12);
        let evs: Vec<u64> = c
            .events_after(12)
            .unwrap()
            .map(|e| e.resource_version)
            .collect();
        assert_eq!(evs, vec![13, 14, 15]);
        assert_eq!(c.events_after(14).unwrap().len(), 1);
        assert!(c.events_after(11).is_err());
        assert_eq!(c.len(), 6);
    }

    #[test]
    fn stale_events_are_ignored_and_deletes_remove() {
        let mut c = WatchCache::new(10, usize::MAX);
        c.replace(vec![], 1);
        assert!(c.apply(ev(EventType::Added, "a", 2)).is_some());
        assert!(c.apply(ev(EventType::Added, "b", 2)).is_none());
        assert!(c.apply(ev(EventType::Deleted, "a", 3)).is_some());
        assert!(c.get("a").is_none());
        c.progress(7);
        assert_eq!(c.resource_version(), 7);
        assert_eq!(c.events_after(3).unwrap().len(), 0);
    }

    #[test]
    fn large_objects_shorten_the_ring_to_its_byte_budget() {
        let big = |key: &str, rv: u64| {
            let mut e = ev(EventType::Modified, key, rv);
            let mut o = (*e.object).clone();
            o.json = Bytes::from(vec![b' '; 1000]);
            e.object = Arc::new(o);
            e
        };
        // Room for 100 events by count, 3,000 bytes by size: three 1,000-byte events.
        let mut c = WatchCache::new(100, 3_000);
        c.replace(vec![], 1);
        for rv in 2..=11 {
            c.apply(big("a", rv)).unwrap();
        }
        assert_eq!(c.ring_bytes(), 3_000);
        assert_eq!(c.oldest_resumable(), 8);
        let kept: Vec<u64> = c
            .events_after(8)
            .unwrap()
            .map(|e| e.resource_version)
            .collect();
        assert_eq!(kept, vec![9, 10, 11]);
        // Small events fill the room the big ones leave; one over the budget is kept alone.
        let mut c = WatchCache::new(100, 500);
        c.replace(vec![], 1);
        c.apply(big("a", 2)).unwrap();
        assert_eq!(
            c.events_after(1).unwrap().len(),
            1,
            "the newest event stays"
        );
        c.apply(ev(EventType::Added, "b", 3)).unwrap();
        assert_eq!(c.oldest_resumable(), 2);
        assert_eq!(c.ring_bytes(), "{\"rv\":3}".len());
    }
}
