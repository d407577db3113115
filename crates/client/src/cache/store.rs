//! The local cache: a thread-safe map of key → object with secondary indexes.
//!
//! [`ThreadSafeStore`] is the key-addressed map plus its [`Indices`]; [`Indexer`] wraps it and
//! computes keys from objects (see [`crate::cache::key`]). This is what an informer's process
//! loop writes and what listers read.
//!
//! Contract:
//! - Objects are stored and handed out as `Arc<K>`: `list`, `get` and the index lookups never
//!   deep-clone an object. Objects are read-only; to change one, store a new `Arc`.
//! - Every write (add, update, delete, replace) updates the indices before the write lock is
//!   released, so a reader never sees an index that disagrees with the map.
//! - Reads take a shared lock and may run concurrently with each other.
//! - Indexers can be added only while the store has never held an object
//!   ([`IndexError::AlreadyStarted`] afterwards).

use crate::cache::delta_fifo::KnownObjects;
use crate::cache::index::{Index, IndexFunc, Indexers, Indices, NAMESPACE_INDEX};
use crate::cache::key::{is_key_for, object_key};
use crate::object::KubeObject;
use parking_lot::RwLock;
use std::collections::HashSet;
use std::sync::Arc;

/// Errors of index lookups and of adding indexers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// No indexer of that name was registered.
    #[error("index {0:?} does not exist")]
    UnknownIndex(String),
    /// [`ThreadSafeStore::add_indexers`] was given names that are already registered.
    #[error("indexer conflict: {0:?} already registered")]
    Conflict(Vec<String>),
    /// [`ThreadSafeStore::add_indexers`] was called after the store had held an object.
    #[error("cannot add indexers to a store that has already held objects")]
    AlreadyStarted,
}

/// Key → object. Hashed with foldhash (seeded per store): every event looks a key up here,
/// and the keys come from the API server.
type Items<K> = hashbrown::HashMap<Arc<str>, Arc<K>, foldhash::fast::RandomState>;

struct Inner<K> {
    items: Items<K>,
    indexers: Indexers<K>,
    indices: Indices,
    /// Set once the store has held an object; freezes the set of indexers.
    started: bool,
    /// Every object is stored under its own key (`namespace/name`), so an object that
    /// replaces another under the same key has the same namespace. Cleared by a raw
    /// [`ThreadSafeStore::add`] under any other key, until a `replace` restores it.
    identity_keys: bool,
}

/// A thread-safe map from key to `Arc<K>` that maintains secondary indexes incrementally.
///
/// Keys are whatever the caller chooses (an [`Indexer`] uses `namespace/name`). Each key is
/// kept once (as an `Arc<str>`) and shared by every index that refers to it.
pub struct ThreadSafeStore<K> {
    inner: RwLock<Inner<K>>,
}

/// Values of `f(obj)`, or none when there is no object.
fn values_of<K>(f: &IndexFunc<K>, obj: Option<&K>) -> Vec<String> {
    obj.map(|o| f(o)).unwrap_or_default()
}

fn remove_from_index(index: &mut Index, value: &str, key: &str) {
    if let Some(set) = index.get_mut(value) {
        set.remove(key);
        if set.is_empty() {
            index.remove(value);
        }
    }
}

/// Moves `key` in every index from the values of `old` to those of `new` (either may be
/// absent: an add has no old object, a delete no new one).
fn update_indices<K: KubeObject>(
    indexers: &Indexers<K>,
    indices: &mut Indices,
    key: &Arc<str>,
    old: Option<&K>,
    new: Option<&K>,
    same_identity: bool,
) {
    // Under a key made of namespace and name, old and new share their namespace; otherwise
    // it is compared (which reads the old object, long out of the CPU's caches).
    let same_namespace = match (old, new) {
        (Some(o), Some(n)) => same_identity || o.namespace() == n.namespace(),
        _ => false,
    };
    for (name, f) in indexers {
        if same_namespace && name == NAMESPACE_INDEX {
            // Its values depend on the namespace alone (see NAMESPACE_INDEX): an update
            // that keeps it, the common case, moves nothing, and saves two calls.
            continue;
        }
        let old_values = values_of(f, old);
        let new_values = values_of(f, new);
        if old_values == new_values {
            // The common case (an update that keeps the namespace): nothing moves.
            continue;
        }
        let index = indices.entry(name.clone()).or_default();
        let new_set: HashSet<&str> = new_values.iter().map(String::as_str).collect();
        for value in &old_values {
            if !new_set.contains(value.as_str()) {
                remove_from_index(index, value, key);
            }
        }
        for value in new_values {
            index.entry(value).or_default().insert(Arc::clone(key));
        }
    }
}

impl<K: KubeObject> ThreadSafeStore<K> {
    /// An empty store with the given indexers (pass `Indexers::new()` for none).
    pub fn new(indexers: Indexers<K>) -> ThreadSafeStore<K> {
        let indices = indexers
            .keys()
            .map(|name| (name.clone(), Index::new()))
            .collect();
        ThreadSafeStore {
            inner: RwLock::new(Inner {
                items: Items::default(),
                indexers,
                indices,
                started: false,
                identity_keys: true,
            }),
        }
    }

    /// Stores `obj` under `key`, replacing (and returning) any previous object; the indices
    /// move the key from the old object's values to the new object's.
    pub fn add(&self, key: &str, obj: Arc<K>) -> Option<Arc<K>> {
        self.put(key, obj, false)
    }

    /// [`ThreadSafeStore::add`]. `same_identity` promises that `key` is `obj`'s own key
    /// (`namespace/name`, as an [`Indexer`]'s keys are); without it, that is checked. While
    /// every stored object sits under its own key, an object replaced under the same key has
    /// the same namespace, and the namespace index is left as it is.
    fn put(&self, key: &str, obj: Arc<K>, same_identity: bool) -> Option<Arc<K>> {
        let identity = same_identity || is_key_for(key, obj.namespace(), obj.name());
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        inner.started = true;
        inner.identity_keys &= identity;
        let same_identity = inner.identity_keys;
        if let Some((k, slot)) = inner.items.get_key_value_mut(key) {
            update_indices(
                &inner.indexers,
                &mut inner.indices,
                k,
                Some(&**slot),
                Some(&*obj),
                same_identity,
            );
            return Some(std::mem::replace(slot, obj));
        }
        let shared_key: Arc<str> = Arc::from(key);
        update_indices(
            &inner.indexers,
            &mut inner.indices,
            &shared_key,
            None,
            Some(&*obj),
            same_identity,
        );
        inner.items.insert(shared_key, obj);
        None
    }

    /// Same as [`ThreadSafeStore::add`]: stores are upserts; the name is kept for readers who
    /// know client-go.
    pub fn update(&self, key: &str, obj: Arc<K>) -> Option<Arc<K>> {
        self.add(key, obj)
    }

    /// Removes the object under `key` (and its index entries), returning it. A missing key is
    /// not an error.
    pub fn delete(&self, key: &str) -> Option<Arc<K>> {
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        let (shared_key, old) = inner.items.remove_entry(key)?;
        update_indices(
            &inner.indexers,
            &mut inner.indices,
            &shared_key,
            Some(&*old),
            None,
            false,
        );
        Some(old)
    }

    /// The object under `key`.
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.inner.read().items.get(key).cloned()
    }

    /// Whether an object is stored under `key`.
    pub fn contains_key(&self, key: &str) -> bool {
        self.inner.read().items.contains_key(key)
    }

    /// The number of objects stored.
    pub fn len(&self) -> usize {
        self.inner.read().items.len()
    }

    /// Whether the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.inner.read().items.is_empty()
    }

    /// Every stored object, in no particular order (shared, not cloned).
    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner.read().items.values().cloned().collect()
    }

    /// Every key, in no particular order.
    pub fn list_keys(&self) -> Vec<String> {
        self.inner
            .read()
            .items
            .keys()
            .map(|k| k.to_string())
            .collect()
    }

    /// Replaces the whole content with `items` and rebuilds every index from scratch. When a
    /// key appears more than once, the last object wins.
    pub fn replace(&self, items: impl IntoIterator<Item = (String, Arc<K>)>) {
        let mut map = Items::default();
        let mut identity = true;
        for (key, obj) in items {
            identity &= is_key_for(&key, obj.namespace(), obj.name());
            map.insert(Arc::from(key), obj);
        }
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        inner.identity_keys = identity;
        let mut indices: Indices = inner
            .indexers
            .keys()
            .map(|name| (name.clone(), Index::new()))
            .collect();
        for (key, obj) in &map {
            update_indices(
                &inner.indexers,
                &mut indices,
                key,
                None,
                Some(&**obj),
                false,
            );
        }
        inner.started |= !map.is_empty();
        inner.items = map;
        inner.indices = indices;
    }

    /// The objects that share at least one value of index `index_name` with `obj` (each
    /// object once).
    pub fn index(&self, index_name: &str, obj: &K) -> Result<Vec<Arc<K>>, IndexError> {
        let inner = self.inner.read();
        let f = inner
            .indexers
            .get(index_name)
            .ok_or_else(|| IndexError::UnknownIndex(index_name.to_string()))?;
        let values = f(obj);
        let Some(index) = inner.indices.get(index_name) else {
            return Ok(Vec::new());
        };
        let mut keys: HashSet<&Arc<str>> = HashSet::new();
        for value in &values {
            if let Some(set) = index.get(value) {
                keys.extend(set.iter());
            }
        }
        Ok(keys
            .into_iter()
            .filter_map(|k| inner.items.get(k).cloned())
            .collect())
    }

    /// The objects whose index `index_name` produced `value`, in no particular order.
    pub fn by_index(&self, index_name: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        let inner = self.inner.read();
        let set = Self::index_set(&inner, index_name, value)?;
        Ok(set
            .map(|set| {
                set.iter()
                    .filter_map(|k| inner.items.get(k).cloned())
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The keys of the objects whose index `index_name` produced `value`.
    pub fn index_keys(&self, index_name: &str, value: &str) -> Result<Vec<String>, IndexError> {
        let inner = self.inner.read();
        let set = Self::index_set(&inner, index_name, value)?;
        Ok(set
            .map(|set| set.iter().map(|k| k.to_string()).collect())
            .unwrap_or_default())
    }

    /// Every value index `index_name` currently holds at least one object under.
    pub fn list_index_func_values(&self, index_name: &str) -> Result<Vec<String>, IndexError> {
        let inner = self.inner.read();
        if !inner.indexers.contains_key(index_name) {
            return Err(IndexError::UnknownIndex(index_name.to_string()));
        }
        Ok(inner
            .indices
            .get(index_name)
            .map(|index| index.keys().cloned().collect())
            .unwrap_or_default())
    }

    /// The names of the registered indexers.
    pub fn indexer_names(&self) -> Vec<String> {
        self.inner.read().indexers.keys().cloned().collect()
    }

    /// Registers more indexers. Fails with [`IndexError::AlreadyStarted`] once the store has
    /// held any object, and with [`IndexError::Conflict`] (adding none of them) if a name is
    /// already registered.
    pub fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), IndexError> {
        let mut inner = self.inner.write();
        if inner.started {
            return Err(IndexError::AlreadyStarted);
        }
        let mut conflicts: Vec<String> = indexers
            .keys()
            .filter(|name| inner.indexers.contains_key(*name))
            .cloned()
            .collect();
        if !conflicts.is_empty() {
            conflicts.sort();
            return Err(IndexError::Conflict(conflicts));
        }
        for (name, f) in indexers {
            inner.indices.insert(name.clone(), Index::new());
            inner.indexers.insert(name, f);
        }
        Ok(())
    }

    fn index_set<'a>(
        inner: &'a Inner<K>,
        index_name: &str,
        value: &str,
    ) -> Result<Option<&'a HashSet<Arc<str>>>, IndexError> {
        if !inner.indexers.contains_key(index_name) {
            return Err(IndexError::UnknownIndex(index_name.to_string()));
        }
        Ok(inner.indices.get(index_name).and_then(|i| i.get(value)))
    }
}

impl<K: KubeObject> Default for ThreadSafeStore<K> {
    /// An empty store without indexers.
    fn default() -> Self {
        ThreadSafeStore::new(Indexers::new())
    }
}

/// The informer's local cache: a [`ThreadSafeStore`] keyed by each object's `namespace/name`
/// key (see [`crate::cache::key::object_key`]).
///
/// Everything said about [`ThreadSafeStore`] holds: objects are shared `Arc`s and read-only,
/// indices are maintained on every write, reads run concurrently.
pub struct Indexer<K> {
    store: ThreadSafeStore<K>,
}

impl<K: KubeObject> Indexer<K> {
    /// An empty indexer with the given indexers (often
    /// [`crate::cache::index::namespace_indexers`]).
    pub fn new(indexers: Indexers<K>) -> Indexer<K> {
        Indexer {
            store: ThreadSafeStore::new(indexers),
        }
    }

    /// Inserts or replaces `obj` under its key; returns the previous object.
    pub fn add(&self, obj: Arc<K>) -> Option<Arc<K>> {
        let key = object_key(&*obj);
        self.store.put(&key, obj, true)
    }

    /// Same as [`Indexer::add`].
    pub fn update(&self, obj: Arc<K>) -> Option<Arc<K>> {
        self.add(obj)
    }

    /// [`Indexer::add`] under a key the caller already holds, which must be `obj`'s key
    /// (the informer's, from its DeltaFIFO), saving building it again.
    pub(crate) fn add_by_key(&self, key: &str, obj: Arc<K>) -> Option<Arc<K>> {
        debug_assert_eq!(key, object_key(&*obj));
        self.store.put(key, obj, true)
    }

    /// Removes the object with `obj`'s key; returns what was stored.
    pub fn delete(&self, obj: &K) -> Option<Arc<K>> {
        self.store.delete(&object_key(obj))
    }

    /// Removes the object under `key` (used for tombstones, which carry their key).
    pub fn delete_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.store.delete(key)
    }

    /// The stored object with `obj`'s key.
    pub fn get(&self, obj: &K) -> Option<Arc<K>> {
        self.store.get(&object_key(obj))
    }

    /// The stored object under `key` (`namespace/name` or `name`).
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.store.get(key)
    }

    /// Every stored object, shared, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.store.list()
    }

    /// Every key, in no particular order.
    pub fn list_keys(&self) -> Vec<String> {
        self.store.list_keys()
    }

    /// The number of objects.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether the indexer holds no object.
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// Replaces the whole content with `list` and rebuilds the indices.
    pub fn replace(&self, list: Vec<Arc<K>>) {
        self.store
            .replace(list.into_iter().map(|obj| (object_key(&*obj), obj)));
    }

    /// See [`ThreadSafeStore::index`].
    pub fn index(&self, index_name: &str, obj: &K) -> Result<Vec<Arc<K>>, IndexError> {
        self.store.index(index_name, obj)
    }

    /// See [`ThreadSafeStore::by_index`].
    pub fn by_index(&self, index_name: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        self.store.by_index(index_name, value)
    }

    /// See [`ThreadSafeStore::index_keys`].
    pub fn index_keys(&self, index_name: &str, value: &str) -> Result<Vec<String>, IndexError> {
        self.store.index_keys(index_name, value)
    }

    /// See [`ThreadSafeStore::list_index_func_values`].
    pub fn list_index_func_values(&self, index_name: &str) -> Result<Vec<String>, IndexError> {
        self.store.list_index_func_values(index_name)
    }

    /// See [`ThreadSafeStore::add_indexers`].
    pub fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), IndexError> {
        self.store.add_indexers(indexers)
    }

    /// The names of the registered indexers.
    pub fn indexer_names(&self) -> Vec<String> {
        self.store.indexer_names()
    }

    /// The underlying key-addressed store.
    pub fn store(&self) -> &ThreadSafeStore<K> {
        &self.store
    }
}

impl<K: KubeObject> Default for Indexer<K> {
    /// An empty indexer without indexers.
    fn default() -> Self {
        Indexer::new(Indexers::new())
    }
}

impl<K: KubeObject> KnownObjects<K> for Indexer<K> {
    fn list_keys(&self) -> Vec<String> {
        Indexer::list_keys(self)
    }
    fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        Indexer::get_by_key(self, key)
    }
}

impl<K: KubeObject> KnownObjects<K> for ThreadSafeStore<K> {
    fn list_keys(&self) -> Vec<String> {
        ThreadSafeStore::list_keys(self)
    }
    fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::index::{namespace_indexers, NAMESPACE_INDEX};
    use crate::object::DynamicObject;
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::collections::HashMap;

    fn obj(ns: &str, name: &str, labels: &[(&str, &str)]) -> Arc<DynamicObject> {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let v = json!({"metadata": {"name": name, "namespace": ns, "labels": labels}});
        Arc::new(DynamicObject::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap())
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    fn names(v: Vec<Arc<DynamicObject>>) -> Vec<String> {
        sorted(v.iter().map(|o| o.name().to_string()).collect())
    }

    /// Every label value is an indexed value: a multi-valued index.
    fn label_values_func() -> IndexFunc<DynamicObject> {
        Arc::new(|o: &DynamicObject| {
            o.labels()
                .map(|l| l.iter().map(|(_, v)| v.to_string()).collect())
                .unwrap_or_default()
        })
    }

    #[test]
    fn add_get_list_delete() {
        let idx = Indexer::new(namespace_indexers());
        assert!(idx.add(obj("a", "p1", &[])).is_none());
        idx.add(obj("a", "p2", &[]));
        idx.add(obj("b", "p3", &[]));
        assert_eq!(idx.len(), 3);
        assert_eq!(idx.get_by_key("a/p1").unwrap().name(), "p1");
        assert!(idx.get(&obj("b", "p3", &[])).is_some());
        assert_eq!(sorted(idx.list_keys()), vec!["a/p1", "a/p2", "b/p3"]);
        let listed = idx.list();
        let stored = idx.get_by_key("a/p2").unwrap();
        assert!(
            listed.iter().any(|o| Arc::ptr_eq(o, &stored)),
            "list shares objects"
        );
        assert_eq!(idx.delete(&obj("a", "p1", &[])).unwrap().name(), "p1");
        assert!(idx.delete_by_key("a/p1").is_none());
        assert_eq!(
            names(idx.by_index(NAMESPACE_INDEX, "a").unwrap()),
            vec!["p2"]
        );
    }

    #[test]
    fn an_object_stored_under_a_foreign_key_still_moves_in_the_namespace_index() {
        let indexer = Indexer::new(namespace_indexers());
        indexer.add(obj("a", "x", &[]));
        indexer.add(obj("a", "x", &[("v", "2")]));
        assert_eq!(
            indexer.index_keys(NAMESPACE_INDEX, "a").unwrap(),
            vec!["a/x"]
        );
        // Through the raw store, an object of namespace b under a's key...
        indexer.store().add("a/x", obj("b", "x", &[]));
        assert_eq!(
            indexer.index_keys(NAMESPACE_INDEX, "b").unwrap(),
            vec!["a/x"]
        );
        // ...which the indexer then replaces with its own: the key must leave b again.
        indexer.add(obj("a", "x", &[("v", "3")]));
        assert!(indexer.index_keys(NAMESPACE_INDEX, "b").unwrap().is_empty());
        assert_eq!(
            indexer.index_keys(NAMESPACE_INDEX, "a").unwrap(),
            vec!["a/x"]
        );
        // A replace with every object under its own key makes the shortcut safe again.
        indexer.replace(vec![obj("a", "x", &[])]);
        indexer.add(obj("a", "x", &[("v", "4")]));
        assert_eq!(
            indexer.index_keys(NAMESPACE_INDEX, "a").unwrap(),
            vec!["a/x"]
        );
        assert!(indexer.store().inner.read().identity_keys);
    }

    #[test]
    fn namespace_index_is_not_recomputed_when_the_namespace_stays() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let mut indexers: Indexers<DynamicObject> = HashMap::new();
        indexers.insert(
            NAMESPACE_INDEX.to_string(),
            Arc::new(move |o: &DynamicObject| {
                counted.fetch_add(1, Ordering::Relaxed);
                vec![o.namespace().unwrap_or("").to_string()]
            }),
        );
        let store = ThreadSafeStore::new(indexers);
        store.add("k", obj("a", "x", &[]));
        assert_eq!(
            calls.load(Ordering::Relaxed),
            1,
            "an add indexes the new object"
        );
        store.update("k", obj("a", "x", &[("app", "web")]));
        assert_eq!(
            calls.load(Ordering::Relaxed),
            1,
            "same namespace: nothing to move"
        );
        store.update("k", obj("b", "x", &[]));
        assert_eq!(calls.load(Ordering::Relaxed), 3, "a move reads old and new");
        assert_eq!(store.index_keys(NAMESPACE_INDEX, "b").unwrap(), vec!["k"]);
        assert!(store.index_keys(NAMESPACE_INDEX, "a").unwrap().is_empty());
        store.delete("k");
        assert_eq!(calls.load(Ordering::Relaxed), 4);
        assert!(store
            .list_index_func_values(NAMESPACE_INDEX)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn index_follows_namespace_moves() {
        // Same key, different indexed value: the store is keyed by the caller.
        let store = ThreadSafeStore::new(namespace_indexers());
        store.add("k", obj("a", "x", &[]));
        assert_eq!(store.index_keys(NAMESPACE_INDEX, "a").unwrap(), vec!["k"]);
        let old = store.update("k", obj("b", "x", &[])).unwrap();
        assert_eq!(old.namespace(), Some("a"));
        assert!(store.by_index(NAMESPACE_INDEX, "a").unwrap().is_empty());
        assert_eq!(store.index_keys(NAMESPACE_INDEX, "b").unwrap(), vec!["k"]);
        assert_eq!(
            store.list_index_func_values(NAMESPACE_INDEX).unwrap(),
            vec!["b"]
        );
        store.delete("k");
        assert!(store
            .list_index_func_values(NAMESPACE_INDEX)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn unknown_index_errors() {
        let idx: Indexer<DynamicObject> = Indexer::new(namespace_indexers());
        assert_eq!(
            idx.by_index("nope", "x").unwrap_err(),
            IndexError::UnknownIndex("nope".into())
        );
        assert!(idx.index_keys("nope", "x").is_err());
        assert!(idx.list_index_func_values("nope").is_err());
        assert!(idx.index("nope", &obj("a", "b", &[])).is_err());
        // A known index with no entry is an empty answer, not an error.
        assert!(idx.by_index(NAMESPACE_INDEX, "zzz").unwrap().is_empty());
    }

    #[test]
    fn list_index_func_values_lists_live_values() {
        let idx = Indexer::new(namespace_indexers());
        idx.add(obj("a", "1", &[]));
        idx.add(obj("b", "2", &[]));
        idx.add(obj("b", "3", &[]));
        assert_eq!(
            sorted(idx.list_index_func_values(NAMESPACE_INDEX).unwrap()),
            vec!["a", "b"]
        );
        idx.delete_by_key("a/1");
        assert_eq!(
            idx.list_index_func_values(NAMESPACE_INDEX).unwrap(),
            vec!["b"]
        );
    }

    #[test]
    fn add_indexers_only_before_first_item() {
        let idx: Indexer<DynamicObject> = Indexer::new(namespace_indexers());
        let mut more = Indexers::new();
        more.insert(NAMESPACE_INDEX.to_string(), label_values_func());
        assert_eq!(
            idx.add_indexers(more).unwrap_err(),
            IndexError::Conflict(vec![NAMESPACE_INDEX.to_string()])
        );
        let mut more = Indexers::new();
        more.insert("labels".to_string(), label_values_func());
        idx.add_indexers(more).unwrap();
        assert_eq!(sorted(idx.indexer_names()), vec!["labels", "namespace"]);
        idx.add(obj("a", "1", &[("app", "web")]));
        assert_eq!(names(idx.by_index("labels", "web").unwrap()), vec!["1"]);
        // Even after the only item is gone, the indexer set stays frozen.
        idx.delete_by_key("a/1");
        let mut late = Indexers::new();
        late.insert("late".to_string(), label_values_func());
        assert_eq!(idx.add_indexers(late), Err(IndexError::AlreadyStarted));
    }

    #[test]
    fn multi_valued_index_on_add_update_delete() {
        let mut indexers = Indexers::new();
        indexers.insert("labels".to_string(), label_values_func());
        let idx = Indexer::new(indexers);
        idx.add(obj("ns", "p", &[("app", "web"), ("tier", "front")]));
        idx.add(obj("ns", "q", &[("app", "web"), ("tier", "back")]));
        assert_eq!(
            names(idx.by_index("labels", "web").unwrap()),
            vec!["p", "q"]
        );
        assert_eq!(names(idx.by_index("labels", "front").unwrap()), vec!["p"]);
        // Update p: drops "front", keeps "web", gains "canary".
        idx.update(obj("ns", "p", &[("app", "web"), ("track", "canary")]));
        assert!(idx.by_index("labels", "front").unwrap().is_empty());
        assert_eq!(
            names(idx.by_index("labels", "web").unwrap()),
            vec!["p", "q"]
        );
        assert_eq!(names(idx.by_index("labels", "canary").unwrap()), vec!["p"]);
        // Duplicate values from one object are one membership.
        idx.update(obj("ns", "q", &[("a", "x"), ("b", "x")]));
        assert_eq!(idx.index_keys("labels", "x").unwrap(), vec!["ns/q"]);
        assert_eq!(names(idx.by_index("labels", "web").unwrap()), vec!["p"]);
        assert_eq!(
            names(
                idx.index("labels", &obj("z", "probe", &[("k", "x"), ("j", "canary")]))
                    .unwrap()
            ),
            vec!["p", "q"]
        );
        idx.delete_by_key("ns/q");
        assert!(idx.by_index("labels", "x").unwrap().is_empty());
        assert_eq!(
            sorted(idx.list_index_func_values("labels").unwrap()),
            vec!["canary", "web"]
        );
    }

    #[test]
    fn replace_rebuilds_everything() {
        let idx = Indexer::new(namespace_indexers());
        idx.add(obj("a", "1", &[]));
        idx.add(obj("b", "2", &[]));
        idx.replace(vec![obj("c", "3", &[]), obj("a", "4", &[])]);
        assert_eq!(sorted(idx.list_keys()), vec!["a/4", "c/3"]);
        assert_eq!(
            names(idx.by_index(NAMESPACE_INDEX, "a").unwrap()),
            vec!["4"]
        );
        assert!(idx.by_index(NAMESPACE_INDEX, "b").unwrap().is_empty());
        assert_eq!(
            sorted(idx.list_index_func_values(NAMESPACE_INDEX).unwrap()),
            vec!["a", "c"]
        );
    }

    /// A tiny deterministic PRNG (xorshift64*), so the randomized test needs no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn recomputed(store: &ThreadSafeStore<DynamicObject>) -> Indices {
        let inner = store.inner.read();
        let mut indices: Indices = inner
            .indexers
            .keys()
            .map(|n| (n.clone(), Index::new()))
            .collect();
        for (name, f) in &inner.indexers {
            let index = indices.entry(name.clone()).or_default();
            for (key, o) in &inner.items {
                for v in f(o) {
                    index.entry(v).or_default().insert(Arc::clone(key));
                }
            }
        }
        indices
    }

    #[test]
    fn randomized_incremental_indices_match_recomputed() {
        let mut indexers = namespace_indexers();
        indexers.insert("labels".to_string(), label_values_func());
        let store = ThreadSafeStore::new(indexers);
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let namespaces = ["a", "b", "c", "d"];
        let values = ["v0", "v1", "v2", "v3", "v4", "v5"];
        let mut model: HashMap<String, (String, Vec<String>)> = HashMap::new();
        for step in 0..10_000 {
            let key = format!("k{}", rng.below(60));
            match rng.below(10) {
                0..=5 => {
                    let ns = namespaces[rng.below(4) as usize];
                    let n_labels = rng.below(4) as usize;
                    let labels: Vec<(String, &str)> = (0..n_labels)
                        .map(|i| (format!("l{i}"), values[rng.below(6) as usize]))
                        .collect();
                    let lref: Vec<(&str, &str)> =
                        labels.iter().map(|(k, v)| (k.as_str(), *v)).collect();
                    store.add(&key, obj(ns, &key, &lref));
                    model.insert(
                        key,
                        (
                            ns.to_string(),
                            labels.iter().map(|(_, v)| v.to_string()).collect(),
                        ),
                    );
                }
                6..=8 => {
                    let removed = store.delete(&key);
                    assert_eq!(removed.is_some(), model.remove(&key).is_some());
                }
                _ => {
                    if rng.below(20) == 0 {
                        let keep: Vec<(String, Arc<DynamicObject>)> = store
                            .list_keys()
                            .into_iter()
                            .filter(|_| rng.below(2) == 0)
                            .filter_map(|k| store.get(&k).map(|o| (k, o)))
                            .collect();
                        model.retain(|k, _| keep.iter().any(|(kk, _)| kk == k));
                        store.replace(keep);
                    }
                }
            }
            if step % 1000 == 999 {
                assert_eq!(
                    store.inner.read().indices,
                    recomputed(&store),
                    "step {step}"
                );
            }
        }
        assert_eq!(store.inner.read().indices, recomputed(&store));
        assert_eq!(store.len(), model.len());
        // Cross-check the public lookups against the model.
        for ns in namespaces {
            let mut expected: Vec<String> = model
                .iter()
                .filter(|(_, (n, _))| n == ns)
                .map(|(k, _)| k.clone())
                .collect();
            expected.sort();
            assert_eq!(
                sorted(store.index_keys(NAMESPACE_INDEX, ns).unwrap()),
                expected
            );
        }
        for v in values {
            let mut expected: Vec<String> = model
                .iter()
                .filter(|(_, (_, ls))| ls.iter().any(|l| l == v))
                .map(|(k, _)| k.clone())
                .collect();
            expected.sort();
            assert_eq!(sorted(store.index_keys("labels", v).unwrap()), expected);
        }
    }

    #[test]
    fn concurrent_readers_and_writer() {
        let idx = Arc::new(Indexer::new(namespace_indexers()));
        let writer = {
            let idx = Arc::clone(&idx);
            std::thread::spawn(move || {
                for i in 0..2000 {
                    idx.add(obj(
                        if i % 2 == 0 { "a" } else { "b" },
                        &format!("p{}", i % 50),
                        &[],
                    ));
                }
            })
        };
        for _ in 0..200 {
            // Every object found through the index really is in that namespace.
            for o in idx.by_index(NAMESPACE_INDEX, "a").unwrap() {
                assert_eq!(o.namespace(), Some("a"));
            }
        }
        writer.join().unwrap();
        assert_eq!(idx.len(), 50);
    }
}
