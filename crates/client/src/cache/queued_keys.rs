//! [`QueuedKeys`]: the DeltaFIFO's queue and its per-key lookup in one structure.
//!
//! The queue needs both "the key at the front" and "the deltas of this key". Keeping a
//! `VecDeque` of keys beside a `HashMap` from key to deltas stores every key twice (two
//! allocations per queued key) and probes the map once more on every pop. Here each key is
//! stored once, with its value, in a deque in pop order; a hash table of positions finds a
//! key's slot. Positions are sequence numbers that never change while a key waits, because
//! keys only ever leave from the front.

use hashbrown::HashTable;
use std::collections::VecDeque;
use std::hash::BuildHasher;

/// Keys in first-queued order, each once, each with a value.
///
/// Contract: [`QueuedKeys::pop_front`] returns keys in the order [`QueuedKeys::push_back`]
/// queued them; lookups by key do not change that order. Not thread-safe by itself (the
/// DeltaFIFO holds it under its lock).
///
/// Keys are hashed with foldhash, seeded per queue: keys come from the API server and
/// the queue is short-lived per key, so speed is worth more here than SipHash's
/// resistance to chosen collisions.
pub(crate) struct QueuedKeys<V> {
    /// In pop order; entry `i` has sequence number `head + i`.
    entries: VecDeque<(String, V)>,
    /// The sequence number of every queued key, found by the key's hash.
    positions: HashTable<u64>,
    /// The sequence number of `entries`' front.
    head: u64,
    hasher: foldhash::fast::RandomState,
}

impl<V> Default for QueuedKeys<V> {
    fn default() -> Self {
        QueuedKeys {
            entries: VecDeque::new(),
            positions: HashTable::new(),
            head: 0,
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl<V> QueuedKeys<V> {
    /// The number of queued keys.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn slot(&self, key: &str) -> Option<usize> {
        let (entries, head) = (&self.entries, self.head);
        let hash = self.hasher.hash_one(key);
        let seq = self.positions.find(hash, |&seq| {
            entries
                .get(offset(seq, head))
                .is_some_and(|(k, _)| k == key)
        })?;
        Some(offset(*seq, head))
    }

    /// The value queued under `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&V> {
        let i = self.slot(key)?;
        self.entries.get(i).map(|(_, v)| v)
    }

    /// The value queued under `key`, to change in place (the key keeps its place).
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        let i = self.slot(key)?;
        self.entries.get_mut(i).map(|(_, v)| v)
    }

    /// Whether `key` is queued.
    pub(crate) fn contains_key(&self, key: &str) -> bool {
        self.slot(key).is_some()
    }

    /// Queues `key` last with `value`. The caller has checked that `key` is not queued.
    pub(crate) fn push_back(&mut self, key: String, value: V) {
        debug_assert!(!self.contains_key(&key), "{key} is queued twice");
        let hash = self.hasher.hash_one(key.as_str());
        let seq = self.head + self.entries.len() as u64;
        self.entries.push_back((key, value));
        let (entries, head, hasher) = (&self.entries, self.head, &self.hasher);
        self.positions
            .insert_unique(hash, seq, |&seq| rehash(entries, head, hasher, seq));
    }

    /// Removes and returns the first key and its value.
    pub(crate) fn pop_front(&mut self) -> Option<(String, V)> {
        let (key, value) = self.entries.pop_front()?;
        let hash = self.hasher.hash_one(key.as_str());
        let head = self.head;
        if let Ok(found) = self.positions.find_entry(hash, |&seq| seq == head) {
            found.remove();
        }
        self.head += 1;
        Some((key, value))
    }

    /// The queued keys and values, in pop order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The larger of the deque's and the table's capacity, in keys.
    pub(crate) fn capacity(&self) -> usize {
        self.entries.capacity().max(self.positions.capacity())
    }

    /// Gives memory back down to room for `keep` keys (or the queued ones, if more).
    pub(crate) fn shrink_to(&mut self, keep: usize) {
        self.entries.shrink_to(keep);
        let (entries, head, hasher) = (&self.entries, self.head, &self.hasher);
        self.positions
            .shrink_to(keep, |&seq| rehash(entries, head, hasher, seq));
    }
}

/// The deque index of sequence number `seq` (queued keys always have `seq >= head`).
fn offset(seq: u64, head: u64) -> usize {
    usize::try_from(seq.wrapping_sub(head)).unwrap_or(usize::MAX)
}

fn rehash<V>(
    entries: &VecDeque<(String, V)>,
    head: u64,
    hasher: &foldhash::fast::RandomState,
    seq: u64,
) -> u64 {
    // Every position in the table belongs to a queued key, so the lookup always succeeds.
    let key = entries
        .get(offset(seq, head))
        .map_or("", |(k, _)| k.as_str());
    hasher.hash_one(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn pops_in_queue_order_and_finds_by_key() {
        let mut q = QueuedKeys::default();
        for (i, k) in ["b", "a", "c"].into_iter().enumerate() {
            q.push_back(k.to_string(), i);
        }
        *q.get_mut("a").unwrap() += 10;
        assert_eq!(q.get("a"), Some(&11));
        assert!(!q.contains_key("d"));
        assert_eq!(q.pop_front(), Some(("b".to_string(), 0)));
        assert!(!q.contains_key("b"));
        q.push_back("b".to_string(), 5);
        let rest: Vec<_> = std::iter::from_fn(|| q.pop_front()).collect();
        assert_eq!(
            rest,
            vec![
                ("a".to_string(), 11),
                ("c".to_string(), 2),
                ("b".to_string(), 5)
            ]
        );
        assert!(q.is_empty());
    }

    #[test]
    fn memory_is_given_back() {
        let mut q = QueuedKeys::default();
        for i in 0..5000 {
            q.push_back(format!("k{i}"), i);
        }
        for _ in 0..4990 {
            q.pop_front();
        }
        q.shrink_to(16);
        assert!(q.capacity() < 64, "{}", q.capacity());
        let left: Vec<_> = q.iter().map(|(_, v)| *v).collect();
        assert_eq!(left, (4990..5000).collect::<Vec<_>>());
        assert_eq!(q.get("k4995"), Some(&4995));
    }

    proptest! {
        /// Against a model (a map and a list of keys): pushes of absent keys, pops and
        /// lookups, with shrinks in between, agree at every step.
        #[test]
        fn behaves_like_a_map_beside_a_queue(
            ops in prop::collection::vec((0u8..4, 0u8..24), 1..400),
        ) {
            let mut q = QueuedKeys::default();
            let mut map = HashMap::new();
            let mut order = VecDeque::new();
            for (n, (op, k)) in ops.into_iter().enumerate() {
                let key = format!("key-{k}");
                match op {
                    0 | 1 => {
                        if !map.contains_key(&key) {
                            q.push_back(key.clone(), n);
                            map.insert(key.clone(), n);
                            order.push_back(key);
                        }
                    }
                    2 => {
                        let want = order.pop_front().map(|k| {
                            let v = map.remove(&k).unwrap();
                            (k, v)
                        });
                        prop_assert_eq!(q.pop_front(), want);
                    }
                    _ => q.shrink_to(usize::from(k)),
                }
                prop_assert_eq!(q.len(), order.len());
                for probe in 0..24u8 {
                    let probe = format!("key-{probe}");
                    prop_assert_eq!(q.get(&probe), map.get(&probe));
                }
                let keys: Vec<&str> = q.iter().map(|(k, _)| k).collect();
                prop_assert_eq!(keys, order.iter().map(String::as_str).collect::<Vec<_>>());
            }
        }
    }
}
