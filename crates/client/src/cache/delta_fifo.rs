//! `DeltaFifo`: the queue between a `Reflector` and an informer's process loop.
//!
//! For every object key the queue holds the ordered list of changes ([`Delta`]s) seen since
//! the key was last popped, and a FIFO of keys in which each key appears at most once. The
//! reflector is the producer ([`DeltaFifo::add`], [`DeltaFifo::update`],
//! [`DeltaFifo::delete`], [`DeltaFifo::replace`], [`DeltaFifo::resync`]); the process loop is
//! the consumer ([`DeltaFifo::pop`]), which applies a key's deltas to the [`Indexer`] and
//! notifies handlers.
//!
//! What a consumer may rely on:
//! - **Per-key order**: the deltas handed out for one key are in the order they were queued,
//!   oldest first; the last one describes the newest known state.
//! - **At most once**: a delta is handed to exactly one `pop`, unless the consumer puts it
//!   back with [`DeltaFifo::add_if_not_present`] (or [`DeltaFifo::pop_or_requeue`]).
//! - **Keys in FIFO order**: keys are popped in the order they were first queued since
//!   their last pop; new deltas for a waiting key do not move it.
//! - **Deletions are not lost**: when a relist ([`DeltaFifo::replace`]) no longer contains
//!   an object the consumer knows, a `Deleted` delta carrying
//!   [`DeltaObject::DeletedFinalStateUnknown`] (with the last known state) is queued.
//! - Objects are shared `Arc`s and read-only.
//!
//! [`Indexer`]: crate::cache::store::Indexer

use crate::cache::key::{object_key, write_key};
use crate::cache::queued_keys::QueuedKeys;
use crate::object::KubeObject;
use parking_lot::Mutex;
use smallvec::{smallvec, SmallVec};
use std::collections::HashSet;
use std::fmt;
use std::pin::pin;
use std::sync::Arc;
use tokio::sync::Notify;

/// What kind of change a [`Delta`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeltaType {
    /// The object was created (a watch `ADDED`).
    Added,
    /// The object changed (a watch `MODIFIED`).
    Updated,
    /// The object was deleted (a watch `DELETED`, or a relist no longer containing it).
    Deleted,
    /// The object was part of a relist ([`DeltaFifo::replace`]); it may or may not have
    /// changed since the consumer last saw it.
    Replaced,
    /// A periodic resync re-delivered the consumer's own current state
    /// ([`DeltaFifo::resync`]); nothing changed on the server.
    Sync,
}

/// The object a [`Delta`] carries, and what a delete notification hands to handlers (the
/// same type, also named [`DeleteEvent`](crate::cache::DeleteEvent)): either the object's
/// state or, for a deletion noticed by a relist, a tombstone.
pub enum DeltaObject<K> {
    /// The object's state after the change (for `Deleted`: its final state).
    Object(Arc<K>),
    /// The object was deleted while the watch was not looking (found missing on a relist), so
    /// its final state is unknown; `last_known` is the newest state the queue or the consumer
    /// had, and may be stale.
    DeletedFinalStateUnknown {
        /// The key of the deleted object.
        key: String,
        /// The last state known locally.
        last_known: Arc<K>,
    },
}

impl<K> DeltaObject<K> {
    /// The object, or the tombstone's last known state.
    pub fn object(&self) -> &Arc<K> {
        match self {
            DeltaObject::Object(o) => o,
            DeltaObject::DeletedFinalStateUnknown { last_known, .. } => last_known,
        }
    }

    /// Whether this is a [`DeltaObject::DeletedFinalStateUnknown`] tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, DeltaObject::DeletedFinalStateUnknown { .. })
    }
}

impl<K> Clone for DeltaObject<K> {
    fn clone(&self) -> Self {
        match self {
            DeltaObject::Object(o) => DeltaObject::Object(Arc::clone(o)),
            DeltaObject::DeletedFinalStateUnknown { key, last_known } => {
                DeltaObject::DeletedFinalStateUnknown {
                    key: key.clone(),
                    last_known: Arc::clone(last_known),
                }
            }
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for DeltaObject<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeltaObject::Object(o) => f.debug_tuple("Object").field(o).finish(),
            DeltaObject::DeletedFinalStateUnknown { key, last_known } => f
                .debug_struct("DeletedFinalStateUnknown")
                .field("key", key)
                .field("last_known", last_known)
                .finish(),
        }
    }
}

/// One change to one object: what happened, and the object's state after it (for a
/// deletion, its final state, or a tombstone).
pub struct Delta<K> {
    /// What happened.
    pub kind: DeltaType,
    /// The object after the change.
    pub object: DeltaObject<K>,
}

impl<K> Delta<K> {
    /// A delta carrying a real object.
    pub fn new(kind: DeltaType, object: Arc<K>) -> Delta<K> {
        Delta {
            kind,
            object: DeltaObject::Object(object),
        }
    }
}

impl<K> Clone for Delta<K> {
    fn clone(&self) -> Self {
        Delta {
            kind: self.kind,
            object: self.object.clone(),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for Delta<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delta")
            .field("kind", &self.kind)
            .field("object", &self.object)
            .finish()
    }
}

/// The deltas of one key, oldest first. Most keys have one when they are popped, which is
/// kept inline (no allocation of its own); a slice and a vector otherwise.
pub type Deltas<K> = SmallVec<[Delta<K>; 1]>;

/// What the consumer already knows: the queue asks it which objects exist, so a relist can
/// queue deletions for the ones that vanished and a resync can re-deliver them. The informer
/// passes its [`Indexer`](crate::cache::store::Indexer).
///
/// The queue calls these methods while holding its own lock; implementations must not call
/// back into the queue.
pub trait KnownObjects<K>: Send + Sync {
    /// The keys of every known object.
    fn list_keys(&self) -> Vec<String>;
    /// The known object under `key`, if any.
    fn get_by_key(&self, key: &str) -> Option<Arc<K>>;
}

/// One key handed out by [`DeltaFifo::pop_batch`].
pub struct Popped<K> {
    /// The key.
    pub key: String,
    /// All its deltas, oldest first.
    pub deltas: Deltas<K>,
    /// Popped before the queue reported synced: part of the initial population.
    pub initial: bool,
}

/// A relist delivered page by page; see [`DeltaFifo::begin_replace`]. Dropping it without
/// [`Replace::finish`] abandons the relist (no tombstones are queued).
#[must_use = "a relist takes effect (tombstones, has_synced) only at finish"]
pub struct Replace<'a, K: KubeObject> {
    fifo: &'a DeltaFifo<K>,
    /// The keys of every item added so far.
    listed: HashSet<String>,
    open: bool,
}

impl<K: KubeObject> Replace<'_, K> {
    /// Queues a `Replaced` delta for every item of one page (under one lock acquisition).
    pub fn add_page(&mut self, items: impl IntoIterator<Item = Arc<K>>) {
        let mut state = self.fifo.state.lock();
        let mut woke = false;
        for obj in items {
            let key = object_key(&*obj);
            woke |= state.queue_action(&key, Delta::new(DeltaType::Replaced, obj));
            self.listed.insert(key);
        }
        drop(state);
        // One wake-up per page rather than per key.
        if woke {
            self.fifo.notify.notify_waiters();
        }
    }

    /// The number of distinct keys added so far.
    pub fn len(&self) -> usize {
        self.listed.len()
    }

    /// Whether no item was added yet.
    pub fn is_empty(&self) -> bool {
        self.listed.is_empty()
    }

    /// Ends the relist: queues the tombstones for every key known to the queue or to the
    /// known objects that no page contained, and records `resource_version` (see
    /// [`DeltaFifo::replace`]).
    pub fn finish(mut self, resource_version: &str) {
        self.open = false;
        self.fifo.finish_replace(&self.listed, resource_version);
    }
}

impl<K: KubeObject> Drop for Replace<'_, K> {
    fn drop(&mut self) {
        if self.open {
            self.fifo.state.lock().replacing = false;
        }
    }
}

/// [`DeltaFifo::pop`] was called on a closed, drained queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("DeltaFIFO: manipulating with closed queue")]
pub struct FifoClosed;

struct State<K> {
    /// Keys in pop order, each once, with their deltas (never an empty list).
    items: QueuedKeys<Deltas<K>>,
    /// Whether the first `replace`, or any add/update/delete/add_if_not_present, happened.
    populated: bool,
    /// Keys from the first `replace` not yet popped.
    initial_population_count: usize,
    closed: bool,
    last_replace_resource_version: Option<String>,
    /// A [`Replace`] session is open (between its first page and `finish`).
    replacing: bool,
}

/// The delta queue. See the [module documentation](self) for its guarantees.
///
/// Thread-safe: producers and consumers may call it from any thread or task.
pub struct DeltaFifo<K> {
    state: Mutex<State<K>>,
    notify: Notify,
    /// Woken whenever keys are popped (see [`DeltaFifo::wait_for_room`]).
    popped: Notify,
    known: Option<Arc<dyn KnownObjects<K>>>,
}

/// Keeps one of two consecutive `Deleted` deltas: the one with more information (a real
/// object over a tombstone; the newer if both are alike).
fn dedup_deletes<K>(deltas: &mut Deltas<K>) {
    let n = deltas.len();
    if n < 2 || deltas[n - 1].kind != DeltaType::Deleted || deltas[n - 2].kind != DeltaType::Deleted
    {
        return;
    }
    if deltas[n - 1].object.is_tombstone() {
        deltas.pop();
    } else {
        deltas.remove(n - 2);
    }
}

impl<K: KubeObject> State<K> {
    fn last_is_deleted(&self, key: &str) -> bool {
        self.items
            .get(key)
            .and_then(|d| d.last())
            .is_some_and(|d| d.kind == DeltaType::Deleted)
    }

    /// Appends a delta for `key`; returns whether the key was newly queued. The key is
    /// copied only if it is new.
    fn queue_action(&mut self, key: &str, delta: Delta<K>) -> bool {
        // A Sync after a pending delete would resurrect the object.
        if delta.kind == DeltaType::Sync && self.last_is_deleted(key) {
            return false;
        }
        match self.items.get_mut(key) {
            Some(deltas) => {
                deltas.push(delta);
                dedup_deletes(deltas);
                false
            }
            None => {
                self.items.push_back(key.to_string(), smallvec![delta]);
                true
            }
        }
    }

    fn has_synced(&self) -> bool {
        self.populated && self.initial_population_count == 0
    }

    /// Removes the first key; the flag says whether it was popped before the queue reported
    /// synced (it belongs to the initial population).
    fn pop_front(&mut self) -> Option<(String, Deltas<K>, bool)> {
        let (key, deltas) = self.items.pop_front()?;
        let initial = !self.has_synced();
        if self.initial_population_count > 0 {
            self.initial_population_count -= 1;
        }
        self.shrink_if_sparse();
        Some((key, deltas, initial))
    }

    /// Gives memory back after a burst (an initial list of many keys leaves a large, empty
    /// map and ring behind).
    fn shrink_if_sparse(&mut self) {
        const MIN_CAPACITY: usize = 1024;
        let cap = self.items.capacity();
        if cap > MIN_CAPACITY && self.items.len() * 8 < cap {
            let keep = (self.items.len() * 2).max(MIN_CAPACITY / 2);
            self.items.shrink_to(keep);
        }
    }

    fn add_if_not_present(&mut self, key: String, deltas: Deltas<K>) -> bool {
        // During a relist session the population is defined when it finishes.
        self.populated |= !self.replacing;
        if deltas.is_empty() || self.items.contains_key(&key) {
            return false;
        }
        self.items.push_back(key, deltas);
        true
    }
}

impl<K: KubeObject> DeltaFifo<K> {
    /// A queue that detects deletions on relist against its own content only (it cannot
    /// know about objects it has already handed out, so deletions of those are missed), and
    /// whose [`DeltaFifo::resync`] does nothing.
    pub fn new() -> DeltaFifo<K> {
        DeltaFifo::build(None)
    }

    /// A queue whose consumer's state is `known` (normally the informer's `Indexer`): used
    /// to queue deletions on relist and to re-deliver objects on resync.
    pub fn with_known_objects(known: Arc<dyn KnownObjects<K>>) -> DeltaFifo<K> {
        DeltaFifo::build(Some(known))
    }

    fn build(known: Option<Arc<dyn KnownObjects<K>>>) -> DeltaFifo<K> {
        DeltaFifo {
            state: Mutex::new(State {
                items: QueuedKeys::default(),
                populated: false,
                initial_population_count: 0,
                closed: false,
                last_replace_resource_version: None,
                replacing: false,
            }),
            notify: Notify::new(),
            popped: Notify::new(),
            known,
        }
    }

    fn queue_and_wake(&self, state: &mut State<K>, key: &str, delta: Delta<K>) {
        if state.queue_action(key, delta) {
            self.notify.notify_waiters();
        }
    }

    /// Queues an `Added` delta for `obj`.
    pub fn add(&self, obj: Arc<K>) {
        let key = object_key(&*obj);
        let mut state = self.state.lock();
        state.populated = true;
        self.queue_and_wake(&mut state, &key, Delta::new(DeltaType::Added, obj));
    }

    /// Queues an `Updated` delta for `obj`.
    pub fn update(&self, obj: Arc<K>) {
        let key = object_key(&*obj);
        let mut state = self.state.lock();
        state.populated = true;
        self.queue_and_wake(&mut state, &key, Delta::new(DeltaType::Updated, obj));
    }

    /// Queues a `Deleted` delta for `obj` (its final state), unless nobody knows the object:
    /// neither the queue nor the known objects hold its key. Returns whether a delta was
    /// queued. Two consecutive deletions of one key collapse into one.
    pub fn delete(&self, obj: Arc<K>) -> bool {
        let key = object_key(&*obj);
        let mut state = self.state.lock();
        state.populated = true;
        let queued = state.items.contains_key(&key);
        let known = self
            .known
            .as_ref()
            .is_some_and(|k| k.get_by_key(&key).is_some());
        if !queued && !known {
            return false;
        }
        self.queue_and_wake(&mut state, &key, Delta::new(DeltaType::Deleted, obj));
        true
    }

    /// Queues several changes under one lock acquisition (and one wake-up), in order: each
    /// `(kind, object)` is handled exactly as the matching single call — `Added` as
    /// [`DeltaFifo::add`], `Updated` as [`DeltaFifo::update`], `Deleted` as
    /// [`DeltaFifo::delete`] (skipped when nobody knows the object); `Replaced` and `Sync`
    /// are queued as they are. Returns how many changes were queued.
    pub fn queue_changes(&self, changes: impl IntoIterator<Item = (DeltaType, Arc<K>)>) -> usize {
        let mut state = self.state.lock();
        let mut woke = false;
        let mut queued = 0;
        // One buffer for every key of the batch: a key is copied only when it is new to
        // the queue.
        let mut key = String::new();
        for (kind, obj) in changes {
            write_key(&mut key, obj.namespace(), obj.name());
            state.populated = true;
            if kind == DeltaType::Deleted && !state.items.contains_key(&key) {
                // As `delete`: nobody knows the object, so there is nothing to delete.
                let known = self
                    .known
                    .as_ref()
                    .is_some_and(|k| k.get_by_key(&key).is_some());
                if !known {
                    continue;
                }
            }
            woke |= state.queue_action(&key, Delta::new(kind, obj));
            queued += 1;
        }
        drop(state);
        if woke {
            self.notify.notify_waiters();
        }
        queued
    }

    /// Applies a full relist: queues `Replaced` for every item of `list`, then, for every
    /// key known (to the queue itself, and to the known objects if any) but absent from
    /// `list`, a `Deleted` delta carrying a [`DeltaObject::DeletedFinalStateUnknown`] with the
    /// newest locally known state. Keys whose newest queued delta already is `Deleted` get no
    /// second deletion.
    ///
    /// The first call (if no add/update/delete came before) defines the initial population
    /// that [`DeltaFifo::has_synced`] waits for: every key it leaves queued.
    ///
    /// The same as one [`DeltaFifo::begin_replace`] session with a single page.
    pub fn replace(&self, list: Vec<Arc<K>>, resource_version: &str) {
        let mut session = self.begin_replace();
        session.add_page(list);
        session.finish(resource_version);
    }

    /// Starts a relist delivered page by page (a *streaming replace*): each
    /// [`Replace::add_page`] queues `Replaced` deltas for its items at once, so the consumer
    /// can apply them while later pages are still being fetched and no complete copy of the
    /// new list is ever held; [`Replace::finish`] then queues the tombstones exactly as
    /// [`DeltaFifo::replace`] would for the union of all pages, and records the
    /// resourceVersion.
    ///
    /// Until `finish`, the relist does not count as the initial population: `has_synced`
    /// stays false if this is the first one (the keys popped meanwhile are reported as part
    /// of the initial population). A session dropped without `finish` (a failed list) queues
    /// no tombstones; the `Replaced` deltas it queued stay (they are real states from the
    /// server, and the next relist will reconcile). One session at a time.
    pub fn begin_replace(&self) -> Replace<'_, K> {
        self.state.lock().replacing = true;
        Replace {
            fifo: self,
            listed: HashSet::new(),
            open: true,
        }
    }

    fn finish_replace(&self, listed: &HashSet<String>, resource_version: &str) {
        let mut state = self.state.lock();
        state.replacing = false;
        // Queued keys that vanished from the list.
        let vanished: Vec<String> = state
            .items
            .iter()
            .map(|(k, _)| k)
            .filter(|k| !listed.contains(*k))
            .map(str::to_string)
            .collect();
        for key in vanished {
            if state.last_is_deleted(&key) {
                continue;
            }
            let last_known = state
                .items
                .get(&key)
                .and_then(|d| d.last())
                .map(|d| Arc::clone(d.object.object()));
            if let Some(last_known) = last_known {
                self.queue_tombstone(&mut state, key, last_known);
            }
        }

        // Keys only the consumer knows about.
        if let Some(known) = &self.known {
            for key in known.list_keys() {
                if listed.contains(&key) || state.items.contains_key(&key) {
                    continue;
                }
                // The consumer may have dropped it meanwhile; then there is nothing to delete.
                if let Some(last_known) = known.get_by_key(&key) {
                    self.queue_tombstone(&mut state, key, last_known);
                }
            }
        }

        if !state.populated {
            state.populated = true;
            state.initial_population_count = state.items.len();
        }
        state.last_replace_resource_version = Some(resource_version.to_string());
    }

    fn queue_tombstone(&self, state: &mut State<K>, key: String, last_known: Arc<K>) {
        let delta = Delta {
            kind: DeltaType::Deleted,
            object: DeltaObject::DeletedFinalStateUnknown {
                key: key.clone(),
                last_known,
            },
        };
        self.queue_and_wake(state, &key, delta);
    }

    /// Queues a `Sync` delta for every known object whose key has nothing queued (a key with
    /// pending deltas will deliver a newer state anyway). Does nothing without known
    /// objects. Returns how many keys were queued.
    pub fn resync(&self) -> usize {
        let Some(known) = &self.known else {
            return 0;
        };
        let mut state = self.state.lock();
        let mut queued = 0;
        for key in known.list_keys() {
            if state.items.contains_key(&key) {
                continue;
            }
            if let Some(obj) = known.get_by_key(&key) {
                self.queue_and_wake(&mut state, &key, Delta::new(DeltaType::Sync, obj));
                queued += 1;
            }
        }
        queued
    }

    /// Waits until a key is queued, removes it and calls `process(key, deltas)` with all its
    /// deltas, oldest first; returns what `process` returns.
    ///
    /// `process` runs while the queue's lock is held, so applying the deltas to the known
    /// objects is atomic with respect to `replace` and `resync` (which could otherwise read a
    /// state the consumer is in the middle of changing). It must therefore be quick and must
    /// not call this queue. To retry a failed key, hand its deltas back with
    /// [`DeltaFifo::add_if_not_present`] afterwards, or use [`DeltaFifo::pop_or_requeue`].
    ///
    /// After [`DeltaFifo::close`], queued keys are still handed out; once the queue is empty
    /// `pop` returns [`FifoClosed`].
    pub async fn pop<F, R>(&self, process: F) -> Result<R, FifoClosed>
    where
        F: FnOnce(String, Deltas<K>) -> R,
    {
        let mut process = Some(process);
        loop {
            let mut notified = pin!(self.notify.notified());
            notified.as_mut().enable();
            {
                let mut state = self.state.lock();
                if let Some((key, deltas, _)) = state.pop_front() {
                    self.popped.notify_waiters();
                    if let Some(process) = process.take() {
                        return Ok(process(key, deltas));
                    }
                }
                if state.closed {
                    return Err(FifoClosed);
                }
            }
            notified.await;
        }
    }

    /// Like [`DeltaFifo::pop`], but `process` borrows the deltas and, if it fails, they are
    /// put back under the same lock (unless new deltas for the key arrived meanwhile — those
    /// are newer and win), to be retried later.
    pub async fn pop_or_requeue<F, T, E>(&self, process: F) -> Result<Result<T, E>, FifoClosed>
    where
        F: FnOnce(&str, &[Delta<K>]) -> Result<T, E>,
    {
        let mut process = Some(process);
        loop {
            let mut notified = pin!(self.notify.notified());
            notified.as_mut().enable();
            {
                let mut state = self.state.lock();
                if let Some((key, deltas, _)) = state.pop_front() {
                    self.popped.notify_waiters();
                    if let Some(process) = process.take() {
                        let result = process(&key, &deltas);
                        if result.is_err() {
                            state.add_if_not_present(key, deltas);
                        }
                        return Ok(result);
                    }
                }
                if state.closed {
                    return Err(FifoClosed);
                }
            }
            notified.await;
        }
    }

    /// Like [`DeltaFifo::pop`], for up to `max` keys at once (at least one): waits until a
    /// key is queued, removes the first `min(max, queued)` keys and calls `process` once
    /// with all of them, in pop order, each with all its deltas (oldest first) — the same
    /// per-key contract as `pop`, with one lock acquisition and one wake-up per batch
    /// instead of per key.
    ///
    /// [`Popped::initial`] tells whether a key was popped before the queue reported synced
    /// (it belongs to the initial population). `process` runs under the queue's lock, as
    /// with `pop`.
    pub async fn pop_batch<F, R>(&self, max: usize, process: F) -> Result<R, FifoClosed>
    where
        F: FnOnce(Vec<Popped<K>>) -> R,
    {
        let max = max.max(1);
        let mut process = Some(process);
        loop {
            let mut notified = pin!(self.notify.notified());
            notified.as_mut().enable();
            {
                let mut state = self.state.lock();
                let mut batch = Vec::with_capacity(max.min(state.items.len()));
                while batch.len() < max {
                    match state.pop_front() {
                        Some((key, deltas, initial)) => batch.push(Popped {
                            key,
                            deltas,
                            initial,
                        }),
                        None => break,
                    }
                }
                if !batch.is_empty() {
                    self.popped.notify_waiters();
                    if let Some(process) = process.take() {
                        return Ok(process(batch));
                    }
                }
                if state.closed {
                    return Err(FifoClosed);
                }
            }
            notified.await;
        }
    }

    /// The non-blocking [`DeltaFifo::pop`]: `None` if nothing is queued.
    pub fn try_pop<F, R>(&self, process: F) -> Option<R>
    where
        F: FnOnce(String, Deltas<K>) -> R,
    {
        let mut state = self.state.lock();
        let (key, deltas, _) = state.pop_front()?;
        self.popped.notify_waiters();
        Some(process(key, deltas))
    }

    /// Waits until at most `max_queued` keys are queued (or the queue is closed). A producer
    /// that can go at its own pace — a paged list — calls this between pages so that it
    /// never runs far ahead of the consumer: what waits in the queue is memory held twice
    /// (the new state queued, the old one still in the consumer's cache). It returns only
    /// when something pops, so only call it when a consumer is running.
    pub async fn wait_for_room(&self, max_queued: usize) {
        loop {
            let mut popped = pin!(self.popped.notified());
            popped.as_mut().enable();
            {
                let state = self.state.lock();
                if state.items.len() <= max_queued || state.closed {
                    return;
                }
            }
            popped.await;
        }
    }

    /// Queues `deltas` under `key` unless the key already has deltas queued (newer ones,
    /// which win). Meant for putting back what a failed `pop` handed out. Returns whether
    /// they were queued.
    pub fn add_if_not_present(&self, key: String, deltas: Deltas<K>) -> bool {
        let mut state = self.state.lock();
        let added = state.add_if_not_present(key, deltas);
        if added {
            self.notify.notify_waiters();
        }
        added
    }

    /// True once the initial population has been fully popped: the items of the first
    /// `replace` (and the deletions it queued) — or, if an add/update/delete came before any
    /// `replace`, right away, as in client-go. It never goes back to false.
    pub fn has_synced(&self) -> bool {
        self.state.lock().has_synced()
    }

    /// Closes the queue: waiting and future `pop`s return [`FifoClosed`] once it is empty.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.notify.notify_waiters();
        self.popped.notify_waiters();
    }

    /// Whether [`DeltaFifo::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// The number of queued keys.
    pub fn len(&self) -> usize {
        self.state.lock().items.len()
    }

    /// Whether no key is queued.
    pub fn is_empty(&self) -> bool {
        self.state.lock().items.is_empty()
    }

    /// The queued keys, in pop order.
    pub fn list_keys(&self) -> Vec<String> {
        self.state
            .lock()
            .items
            .iter()
            .map(|(k, _)| k.to_string())
            .collect()
    }

    /// A copy (sharing the objects) of the deltas queued for `key`.
    pub fn get_by_key(&self, key: &str) -> Option<Deltas<K>> {
        self.state.lock().items.get(key).cloned()
    }

    /// The resourceVersion passed to the latest `replace`.
    pub fn last_replace_resource_version(&self) -> Option<String> {
        self.state.lock().last_replace_resource_version.clone()
    }
}

impl<K: KubeObject> Default for DeltaFifo<K> {
    /// Same as [`DeltaFifo::new`].
    fn default() -> Self {
        DeltaFifo::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::store::Indexer;
    use crate::object::DynamicObject;
    use serde_json::json;
    use std::time::Duration;

    fn obj(name: &str, rv: &str) -> Arc<DynamicObject> {
        let v = json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}});
        Arc::new(DynamicObject::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap())
    }

    /// (kind, resourceVersion, is_tombstone) of each delta.
    fn shape(deltas: &[Delta<DynamicObject>]) -> Vec<(DeltaType, String, bool)> {
        deltas
            .iter()
            .map(|d| {
                (
                    d.kind,
                    d.object
                        .object()
                        .resource_version()
                        .unwrap_or("")
                        .to_string(),
                    d.object.is_tombstone(),
                )
            })
            .collect()
    }

    fn pop_now(f: &DeltaFifo<DynamicObject>) -> (String, Deltas<DynamicObject>) {
        f.try_pop(|k, d| (k, d)).expect("something queued")
    }

    /// Applies popped deltas to an indexer the way an informer does.
    fn apply(indexer: &Indexer<DynamicObject>, deltas: &[Delta<DynamicObject>]) {
        for d in deltas {
            match (&d.kind, &d.object) {
                (DeltaType::Deleted, DeltaObject::DeletedFinalStateUnknown { key, .. }) => {
                    indexer.delete_by_key(key);
                }
                (DeltaType::Deleted, DeltaObject::Object(o)) => {
                    indexer.delete(o);
                }
                (_, o) => {
                    indexer.add(Arc::clone(o.object()));
                }
            }
        }
    }

    fn with_indexer() -> (Arc<Indexer<DynamicObject>>, DeltaFifo<DynamicObject>) {
        let indexer = Arc::new(Indexer::default());
        let fifo = DeltaFifo::with_known_objects(indexer.clone() as Arc<dyn KnownObjects<_>>);
        (indexer, fifo)
    }

    #[test]
    fn per_key_order_and_key_fifo() {
        let f = DeltaFifo::new();
        f.add(obj("a", "1"));
        f.add(obj("b", "2"));
        f.update(obj("a", "3"));
        f.delete(obj("a", "4"));
        assert_eq!(f.list_keys(), vec!["ns/a", "ns/b"]);
        assert_eq!(f.len(), 2);
        let (k, d) = pop_now(&f);
        assert_eq!(k, "ns/a");
        assert_eq!(
            shape(&d),
            vec![
                (DeltaType::Added, "1".into(), false),
                (DeltaType::Updated, "3".into(), false),
                (DeltaType::Deleted, "4".into(), false),
            ]
        );
        // A key popped and queued again goes to the back.
        f.update(obj("a", "5"));
        assert_eq!(f.list_keys(), vec!["ns/b", "ns/a"]);
        assert_eq!(pop_now(&f).0, "ns/b");
        assert_eq!(pop_now(&f).0, "ns/a");
        assert!(f.is_empty());
        assert!(f.try_pop(|k, _| k).is_none());
    }

    #[test]
    fn delete_of_unknown_key_is_ignored() {
        let f: DeltaFifo<DynamicObject> = DeltaFifo::new();
        assert!(!f.delete(obj("ghost", "1")));
        assert!(f.is_empty());
        let (indexer, f) = with_indexer();
        indexer.add(obj("known", "1"));
        assert!(f.delete(obj("known", "2")));
        assert!(!f.delete(obj("ghost", "1")));
        assert_eq!(f.list_keys(), vec!["ns/known"]);
    }

    #[test]
    fn consecutive_deletes_collapse_keeping_the_real_object() {
        let (indexer, f) = with_indexer();
        indexer.add(obj("a", "1"));
        // Real delete, then a relist tombstone: the real one stays.
        f.delete(obj("a", "2"));
        f.queue_tombstone_for_test("ns/a", obj("a", "1"));
        assert_eq!(
            shape(&f.get_by_key("ns/a").unwrap()),
            vec![(DeltaType::Deleted, "2".into(), false)]
        );
        pop_now(&f);
        // Tombstone, then a real delete: the real one replaces it.
        f.queue_tombstone_for_test("ns/a", obj("a", "1"));
        f.delete(obj("a", "3"));
        assert_eq!(
            shape(&f.get_by_key("ns/a").unwrap()),
            vec![(DeltaType::Deleted, "3".into(), false)]
        );
        // Two real deletes: the newer stays.
        f.delete(obj("a", "4"));
        assert_eq!(
            shape(&f.get_by_key("ns/a").unwrap()),
            vec![(DeltaType::Deleted, "4".into(), false)]
        );
    }

    #[test]
    fn replace_queues_replaced_and_tombstones_for_missing_known_keys() {
        let (indexer, f) = with_indexer();
        indexer.add(obj("a", "1"));
        indexer.add(obj("b", "1"));
        f.replace(vec![obj("a", "5"), obj("c", "5")], "5");
        assert_eq!(f.last_replace_resource_version().as_deref(), Some("5"));
        let mut keys = f.list_keys();
        keys.sort();
        assert_eq!(keys, vec!["ns/a", "ns/b", "ns/c"]);
        assert_eq!(
            shape(&f.get_by_key("ns/a").unwrap()),
            vec![(DeltaType::Replaced, "5".into(), false)]
        );
        let b = f.get_by_key("ns/b").unwrap();
        assert_eq!(shape(&b), vec![(DeltaType::Deleted, "1".into(), true)]);
        match &b[0].object {
            DeltaObject::DeletedFinalStateUnknown { key, last_known } => {
                assert_eq!(key, "ns/b");
                assert_eq!(last_known.name(), "b");
            }
            DeltaObject::Object(_) => panic!("expected a tombstone"),
        }
    }

    #[test]
    fn replace_without_known_objects_uses_the_queue() {
        let f = DeltaFifo::new();
        f.add(obj("a", "1"));
        f.update(obj("gone", "2"));
        f.replace(vec![obj("a", "3")], "3");
        assert_eq!(
            shape(&f.get_by_key("ns/gone").unwrap()),
            vec![
                (DeltaType::Updated, "2".into(), false),
                (DeltaType::Deleted, "2".into(), true),
            ]
        );
    }

    #[test]
    fn queued_but_unprocessed_keys_also_get_tombstones() {
        // "x" was added by the watch but not yet popped when the relist came back without it.
        let (_indexer, f) = with_indexer();
        f.add(obj("x", "1"));
        f.replace(vec![], "2");
        assert_eq!(
            shape(&f.get_by_key("ns/x").unwrap()),
            vec![
                (DeltaType::Added, "1".into(), false),
                (DeltaType::Deleted, "1".into(), true),
            ]
        );
    }

    #[test]
    fn second_replace_does_not_tombstone_already_deleted_keys() {
        let (indexer, f) = with_indexer();
        indexer.add(obj("a", "1"));
        indexer.add(obj("b", "1"));
        f.replace(vec![obj("a", "2")], "2");
        // b is now pending deletion; a second relist (still without b) must not add another.
        f.replace(vec![obj("a", "3")], "3");
        assert_eq!(
            shape(&f.get_by_key("ns/b").unwrap()),
            vec![(DeltaType::Deleted, "1".into(), true)]
        );
        // After the deletion was processed, a relist without b queues nothing for it.
        while let Some((_, d)) = f.try_pop(|k, d| (k, d)) {
            apply(&indexer, &d);
        }
        assert!(indexer.get_by_key("ns/b").is_none());
        f.replace(vec![obj("a", "4")], "4");
        assert_eq!(f.list_keys(), vec!["ns/a"]);
        // Same when the deletion is a real watch delete still queued.
        indexer.add(obj("c", "5"));
        f.delete(obj("c", "6"));
        f.replace(vec![obj("a", "7")], "7");
        assert_eq!(
            shape(&f.get_by_key("ns/c").unwrap()),
            vec![(DeltaType::Deleted, "6".into(), false)]
        );
    }

    #[test]
    fn streaming_replace_matches_a_one_shot_replace_while_the_consumer_pops() {
        let (indexer, f) = with_indexer();
        let mut session = f.begin_replace();
        session.add_page(vec![obj("a", "1"), obj("b", "1")]);
        // The consumer applies the first page while the list goes on: still not synced.
        while let Some((_, d)) = f.try_pop(|k, d| (k, d)) {
            apply(&indexer, &d);
        }
        assert!(!f.has_synced(), "synced before the relist finished");
        session.add_page(vec![obj("c", "1")]);
        assert_eq!(session.len(), 3);
        session.finish("1");
        assert_eq!(f.last_replace_resource_version().as_deref(), Some("1"));
        assert!(!f.has_synced(), "c is still queued");
        apply(&indexer, &pop_now(&f).1);
        assert!(f.has_synced());
        let mut keys = indexer.list_keys();
        keys.sort();
        assert_eq!(keys, vec!["ns/a", "ns/b", "ns/c"]);

        // A later relist in pages: known keys that no page held get tombstones at the end,
        // keys listed in an early page (and already popped) do not.
        while let Some((_, d)) = f.try_pop(|k, d| (k, d)) {
            apply(&indexer, &d);
        }
        let mut session = f.begin_replace();
        session.add_page(vec![obj("a", "2")]);
        apply(&indexer, &pop_now(&f).1);
        session.add_page(vec![obj("d", "2")]);
        session.finish("2");
        let mut queued = f.list_keys();
        queued.sort();
        assert_eq!(queued, vec!["ns/b", "ns/c", "ns/d"]);
        assert_eq!(
            shape(&f.get_by_key("ns/b").unwrap()),
            vec![(DeltaType::Deleted, "1".into(), true)]
        );
        assert_eq!(
            shape(&f.get_by_key("ns/d").unwrap()),
            vec![(DeltaType::Replaced, "2".into(), false)]
        );
    }

    #[test]
    fn abandoned_streaming_replace_queues_no_tombstones_and_keeps_its_pages() {
        let (indexer, f) = with_indexer();
        indexer.add(obj("old", "1"));
        {
            let mut session = f.begin_replace();
            session.add_page(vec![obj("a", "2")]);
            // Dropped without finish: a failed list.
        }
        assert_eq!(f.list_keys(), vec!["ns/a"]);
        assert!(
            !f.has_synced(),
            "an abandoned relist is not the initial population"
        );
        assert_eq!(f.last_replace_resource_version(), None);
        // A requeue during a session does not mark the queue populated either.
        let session = f.begin_replace();
        let (k, d) = pop_now(&f);
        assert!(f.add_if_not_present(k, d));
        assert!(!f.has_synced());
        session.finish("3");
        // Both "a" (queued) and the tombstone for "old" make up the initial population.
        assert_eq!(f.len(), 2);
        pop_now(&f);
        pop_now(&f);
        assert!(f.has_synced());
    }

    #[tokio::test]
    async fn pop_batch_hands_out_whole_keys_in_order_with_initial_flags() {
        let f = DeltaFifo::new();
        f.replace(vec![obj("a", "1"), obj("b", "1")], "1");
        f.update(obj("a", "2"));
        f.add(obj("c", "3"));
        let got = f
            .pop_batch(2, |batch| {
                batch
                    .into_iter()
                    .map(|p| (p.key, shape(&p.deltas), p.initial))
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap();
        assert_eq!(
            got,
            vec![
                (
                    "ns/a".to_string(),
                    vec![
                        (DeltaType::Replaced, "1".into(), false),
                        (DeltaType::Updated, "2".into(), false)
                    ],
                    true
                ),
                (
                    "ns/b".to_string(),
                    vec![(DeltaType::Replaced, "1".into(), false)],
                    true
                ),
            ]
        );
        assert!(f.has_synced());
        let rest = f
            .pop_batch(10, |batch| {
                batch
                    .into_iter()
                    .map(|p| (p.key, p.initial))
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap();
        assert_eq!(rest, vec![("ns/c".to_string(), false)]);
        f.close();
        assert_eq!(f.pop_batch(10, |b| b.len()).await, Err(FifoClosed));
    }

    #[test]
    fn queue_changes_behaves_like_single_calls() {
        let (indexer, f) = with_indexer();
        indexer.add(obj("known", "1"));
        let n = f.queue_changes(vec![
            (DeltaType::Added, obj("a", "2")),
            (DeltaType::Updated, obj("a", "3")),
            (DeltaType::Deleted, obj("ghost", "4")),
            (DeltaType::Deleted, obj("known", "5")),
            (DeltaType::Deleted, obj("a", "6")),
        ]);
        assert_eq!(n, 4, "the unknown ghost's deletion is skipped");
        assert_eq!(f.list_keys(), vec!["ns/a", "ns/known"]);
        assert_eq!(
            shape(&f.get_by_key("ns/a").unwrap()),
            vec![
                (DeltaType::Added, "2".into(), false),
                (DeltaType::Updated, "3".into(), false),
                (DeltaType::Deleted, "6".into(), false),
            ]
        );
        assert!(
            f.has_synced(),
            "watch changes before any replace count as populated"
        );
    }

    #[test]
    fn memory_is_given_back_after_a_burst() {
        let f = DeltaFifo::new();
        for i in 0..5000 {
            f.add(obj(&format!("o{i}"), "1"));
        }
        while f.try_pop(|_, _| ()).is_some() {}
        let state = f.state.lock();
        assert!(state.items.capacity() < 2048, "{}", state.items.capacity());
    }

    #[test]
    fn resync_only_for_idle_keys() {
        let (indexer, f) = with_indexer();
        indexer.add(obj("idle", "1"));
        indexer.add(obj("busy", "1"));
        f.update(obj("busy", "2"));
        assert_eq!(f.resync(), 1);
        assert_eq!(
            shape(&f.get_by_key("ns/idle").unwrap()),
            vec![(DeltaType::Sync, "1".into(), false)]
        );
        assert_eq!(
            shape(&f.get_by_key("ns/busy").unwrap()),
            vec![(DeltaType::Updated, "2".into(), false)]
        );
        // Nothing is idle any more.
        assert_eq!(f.resync(), 0);
        // Without known objects, resync does nothing.
        let plain: DeltaFifo<DynamicObject> = DeltaFifo::new();
        assert_eq!(plain.resync(), 0);
    }

    #[test]
    fn has_synced_exactly_when_initial_replace_is_popped() {
        let (indexer, f) = with_indexer();
        assert!(!f.has_synced());
        f.replace(vec![obj("a", "1"), obj("b", "1"), obj("c", "1")], "1");
        // Events after the list are not part of the initial population.
        f.add(obj("d", "2"));
        f.update(obj("a", "2"));
        for i in 0..3 {
            assert!(!f.has_synced(), "synced too early after {i} pops");
            let (_, d) = pop_now(&f);
            apply(&indexer, &d);
        }
        assert!(f.has_synced());
        pop_now(&f);
        assert!(f.has_synced());
        // A later relist does not reset it.
        f.replace(vec![obj("z", "9")], "9");
        assert!(f.has_synced());
    }

    #[test]
    fn has_synced_counts_initial_tombstones() {
        let (indexer, f) = with_indexer();
        indexer.add(obj("old", "1"));
        f.replace(vec![obj("a", "2")], "2");
        assert_eq!(f.len(), 2);
        pop_now(&f);
        assert!(!f.has_synced());
        pop_now(&f);
        assert!(f.has_synced());
    }

    #[test]
    fn has_synced_right_away_when_add_comes_first() {
        let f = DeltaFifo::new();
        f.add(obj("a", "1"));
        assert!(f.has_synced());
    }

    #[test]
    fn empty_initial_replace_is_synced() {
        let f: DeltaFifo<DynamicObject> = DeltaFifo::new();
        f.replace(vec![], "1");
        assert!(f.has_synced());
    }

    #[test]
    fn sync_after_pending_delete_is_dropped() {
        let (indexer, f) = with_indexer();
        indexer.add(obj("a", "1"));
        f.delete(obj("a", "2"));
        let mut state = f.state.lock();
        assert!(!state.queue_action("ns/a", Delta::new(DeltaType::Sync, obj("a", "1"))));
        assert_eq!(state.items.get("ns/a").map(|d| d.len()), Some(1));
    }

    #[test]
    fn add_if_not_present_requeues_only_when_absent() {
        let f = DeltaFifo::new();
        f.add(obj("a", "1"));
        let (k, d) = pop_now(&f);
        assert!(f.add_if_not_present(k.clone(), d.clone()));
        assert_eq!(shape(&f.get_by_key(&k).unwrap()), shape(&d));
        // Newer deltas win over a stale requeue.
        let (k, _) = pop_now(&f);
        f.update(obj("a", "2"));
        assert!(!f.add_if_not_present(k.clone(), d));
        assert_eq!(
            shape(&f.get_by_key(&k).unwrap()),
            vec![(DeltaType::Updated, "2".into(), false)]
        );
        assert!(!f.add_if_not_present("x".into(), Deltas::new()));
    }

    #[tokio::test]
    async fn pop_or_requeue_puts_failed_deltas_back() {
        let f = DeltaFifo::new();
        f.add(obj("a", "1"));
        let r: Result<(), &str> = f.pop_or_requeue(|_, _| Err("boom")).await.unwrap();
        assert_eq!(r, Err("boom"));
        assert_eq!(f.list_keys(), vec!["ns/a"]);
        let r: Result<usize, &str> = f.pop_or_requeue(|_, d| Ok(d.len())).await.unwrap();
        assert_eq!(r, Ok(1));
        assert!(f.is_empty());
    }

    #[tokio::test]
    async fn wait_for_room_returns_once_pops_bring_the_queue_down() {
        let f = Arc::new(DeltaFifo::new());
        for i in 0..5 {
            f.add(obj(&format!("o{i}"), "1"));
        }
        // Already at most 5 queued: no wait.
        tokio::time::timeout(Duration::from_secs(5), f.wait_for_room(5))
            .await
            .unwrap();
        let waiter = {
            let f = Arc::clone(&f);
            tokio::spawn(async move { f.wait_for_room(2).await })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished(), "returned with 5 keys queued");
        f.pop(|_, _| ()).await.unwrap();
        f.try_pop(|_, _| ()).unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished(), "returned with 3 keys queued");
        f.pop_batch(1, |_| ()).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        // Closing releases a waiter too.
        let waiter = {
            let f = Arc::clone(&f);
            tokio::spawn(async move { f.wait_for_room(0).await })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished());
        f.close();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn pop_waits_for_an_item() {
        let f = Arc::new(DeltaFifo::new());
        let popper = {
            let f = Arc::clone(&f);
            tokio::spawn(async move { f.pop(|k, d| (k, d.len())).await })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!popper.is_finished(), "pop returned with nothing queued");
        f.add(obj("a", "1"));
        let got = tokio::time::timeout(Duration::from_secs(5), popper)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, Ok(("ns/a".to_string(), 1)));
    }

    #[tokio::test]
    async fn close_wakes_waiters_and_drains_first() {
        let f: Arc<DeltaFifo<DynamicObject>> = Arc::new(DeltaFifo::new());
        let popper = {
            let f = Arc::clone(&f);
            tokio::spawn(async move { f.pop(|k, _| k).await })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        f.close();
        let got = tokio::time::timeout(Duration::from_secs(5), popper)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, Err(FifoClosed));
        assert!(f.is_closed());
        // Items queued before (or after) close are still handed out, then the error.
        f.add(obj("late", "1"));
        assert_eq!(f.pop(|k, _| k).await, Ok("ns/late".to_string()));
        assert_eq!(f.pop(|k, _| k).await, Err(FifoClosed));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_producer_and_consumers_lose_nothing() {
        let f: Arc<DeltaFifo<DynamicObject>> = Arc::new(DeltaFifo::new());
        let mut consumers = Vec::new();
        for _ in 0..3 {
            let f = Arc::clone(&f);
            consumers.push(tokio::spawn(async move {
                let mut seen = Vec::new();
                while let Ok(deltas) = f.pop(|_, d| d).await {
                    seen.extend(deltas.iter().map(|d| {
                        d.object
                            .object()
                            .resource_version()
                            .unwrap_or("")
                            .to_string()
                    }));
                }
                seen
            }));
        }
        for i in 0..2000 {
            f.add(obj(&format!("o{}", i % 37), &i.to_string()));
            if i % 100 == 0 {
                tokio::task::yield_now().await;
            }
        }
        // Let the consumers drain, then close.
        while !f.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        f.close();
        let mut all = Vec::new();
        for c in consumers {
            all.extend(c.await.unwrap());
        }
        all.sort_by_key(|s| s.parse::<u32>().unwrap());
        let expected: Vec<String> = (0..2000).map(|i: u32| i.to_string()).collect();
        assert_eq!(all, expected);
    }

    #[test]
    fn pop_futures_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        let f: DeltaFifo<DynamicObject> = DeltaFifo::new();
        let a = f.pop(|k, _| k);
        assert_send(&a);
        let b = f.pop_or_requeue(|k, _| Ok::<_, String>(k.to_string()));
        assert_send(&b);
    }

    impl DeltaFifo<DynamicObject> {
        fn queue_tombstone_for_test(&self, key: &str, last_known: Arc<DynamicObject>) {
            let mut state = self.state.lock();
            self.queue_tombstone(&mut state, key.to_string(), last_known);
        }
    }
}
