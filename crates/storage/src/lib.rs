//! MVCC key-value storage for listwatch.
//!
//! Data flow: the API server's registry calls [`Storage::create`] / [`Storage::update`] /
//! [`Storage::delete`]; each successful write is one new store-wide revision (strictly
//! increasing, shared by all keys, like etcd's; the memory and embedded stores start empty at
//! revision 0, etcd at 1, so their first writes get 1 and 2). The watch cache (cacher)
//! lists a key prefix with [`Storage::range`] and then follows it with [`Storage::watch`]
//! from the list's revision. Old history is dropped by [`Storage::compact`]; reads and watches
//! below the compacted revision fail with [`StorageError::Compacted`].
//!
//! The trait is shaped after etcd v3 (revision = etcd mod_revision) so that the embedded store
//! and an etcd backend are interchangeable behind `Arc<dyn Storage>`.
//!
//! Backends: [`memory::MemoryStorage`] (tests), [`embedded::EmbeddedStorage`] (the persistent
//! default, on redb, with group commit), and [`disk_faults`] to make the embedded store's
//! disk fail under it in tests.
#![warn(missing_docs)]

pub mod conformance;
pub mod disk_faults;
pub mod embedded;
pub mod memory;
mod mvcc;

use bytes::Bytes;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

/// How many messages a storage watcher may have queued before it is closed with
/// [`StorageError::WatchOverflow`]. Writers never wait for a watcher: a full queue ends it.
/// Events of one commit are batched into one message.
pub const WATCH_CHANNEL_CAPACITY: usize = 1024;

/// A store-wide revision. 0 means "none / not yet written" and is never assigned to a write.
pub type Revision = u64;

/// One key's state at some revision.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The full key, e.g. `/registry/pods/default/nginx`.
    pub key: Bytes,
    /// The stored value (opaque to storage).
    pub value: Bytes,
    /// Revision of the write that created this key (since its last deletion).
    pub create_revision: Revision,
    /// Revision of the last write to this key: the object's resourceVersion.
    pub mod_revision: Revision,
    /// Number of writes to this key since creation (1 after create).
    pub version: u64,
}

impl fmt::Debug for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyValue")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("value_len", &self.value.len())
            .field("create_revision", &self.create_revision)
            .field("mod_revision", &self.mod_revision)
            .field("version", &self.version)
            .finish()
    }
}

/// What a change did to its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The key was created (did not exist before this revision).
    Create,
    /// The key existed and got a new value.
    Update,
    /// The key was deleted.
    Delete,
}

/// One committed change, as delivered by [`Storage::watch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Create, update or delete.
    pub kind: EventKind,
    /// The revision of this change (for a delete: the deletion's revision).
    pub revision: Revision,
    /// The key's state after the change. For a delete, `value` is empty and
    /// `mod_revision == revision`; `key` is always set.
    pub kv: KeyValue,
    /// The key's state before the change (`None` for a create).
    pub prev: Option<KeyValue>,
}

/// A request for a range of keys at one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeRequest {
    /// First key, inclusive.
    pub start: Bytes,
    /// End key, exclusive. Empty = only the key `start` itself; the single byte `\0`
    /// = no upper bound (every key `>= start`, as in etcd). Use [`RangeRequest::prefix`] for
    /// prefixes. An `end <= start` (other than those two cases) selects nothing.
    pub end: Bytes,
    /// Read at this revision; 0 = the current revision.
    pub revision: Revision,
    /// Return at most this many keys; 0 = no limit.
    pub limit: usize,
}

impl RangeRequest {
    /// All keys starting with `prefix`, at the current revision, no limit.
    /// An empty prefix (or one of only `0xff` bytes) has no upper bound.
    pub fn prefix(prefix: impl Into<Bytes>) -> Self {
        let start: Bytes = prefix.into();
        let mut end = prefix_end(&start);
        if end.is_empty() {
            end = Bytes::from_static(b"\0");
        }
        RangeRequest {
            start,
            end,
            revision: 0,
            limit: 0,
        }
    }
}

/// The answer to a [`RangeRequest`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResponse {
    /// Keys in ascending byte order.
    pub kvs: Vec<KeyValue>,
    /// True if the limit cut the result short.
    pub more: bool,
    /// Number of keys in the whole range at that revision (before the limit).
    pub count: usize,
    /// The revision the range was read at (the current revision if the request said 0).
    pub revision: Revision,
}

/// What a watch stream delivers, in revision order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchMessage {
    /// Committed changes, revisions strictly increasing across messages.
    Events(Vec<Event>),
    /// Nothing under the prefix changed up to and including this revision (lets a cache
    /// advance its resourceVersion while its keys are idle; see
    /// [`Storage::request_progress`]).
    Progress(Revision),
}

/// A live watch. Dropping it cancels the watch.
pub struct WatchStream {
    /// Catch-up messages read from history, delivered before anything from `rx`.
    replay: VecDeque<WatchMessage>,
    rx: tokio::sync::mpsc::Receiver<Result<WatchMessage, StorageError>>,
    /// Why the sender side ended the stream, if it says so (e.g. overflow); reported once
    /// after the queued messages.
    end: Option<WatchEnd>,
    /// Applied to every event on its way out (see [`WatchStream::map_events`]).
    map: Option<EventMap>,
}

/// What [`WatchStream::map_events`] applies to each event.
type EventMap = Box<dyn FnMut(&mut Event) + Send + Sync>;

/// A slot the producer of a watch fills with the reason it closed the stream, for errors
/// that cannot be queued (the queue being full is the usual reason).
pub(crate) type WatchEnd = Arc<parking_lot::Mutex<Option<StorageError>>>;

impl WatchStream {
    /// Wraps a receiver; backends use this. Messages are delivered as received; the stream
    /// ends when every sender is dropped.
    pub fn new(rx: tokio::sync::mpsc::Receiver<Result<WatchMessage, StorageError>>) -> Self {
        WatchStream {
            replay: VecDeque::new(),
            rx,
            end: None,
            map: None,
        }
    }

    /// A stream that first yields `replay`, then what arrives on `rx`, then (once `rx` is
    /// closed) the error left in `end`, if any.
    pub(crate) fn with_replay(
        replay: VecDeque<WatchMessage>,
        rx: tokio::sync::mpsc::Receiver<Result<WatchMessage, StorageError>>,
        end: WatchEnd,
    ) -> Self {
        WatchStream {
            replay,
            rx,
            end: Some(end),
            map: None,
        }
    }

    /// This stream with `f` applied, in place, to every event it delivers from now on
    /// (replayed history and live changes alike, `kv` and `prev`), in order. For storage
    /// wrappers that change values on their way out, such as decryption; a stream nobody
    /// maps costs nothing extra.
    pub fn map_events(mut self, f: impl FnMut(&mut Event) + Send + Sync + 'static) -> Self {
        self.map = Some(match self.map.take() {
            None => Box::new(f),
            Some(mut first) => {
                let mut then = f;
                Box::new(move |e: &mut Event| {
                    first(e);
                    then(e);
                })
            }
        });
        self
    }

    /// Applies the stream's event map, if any, to `item`.
    fn mapped(
        &mut self,
        mut item: Result<WatchMessage, StorageError>,
    ) -> Result<WatchMessage, StorageError> {
        if let (Some(map), Ok(WatchMessage::Events(events))) = (self.map.as_mut(), &mut item) {
            events.iter_mut().for_each(map);
        }
        item
    }

    /// The next message if one is ready now: `Some(m)` is what [`WatchStream::next`] would
    /// return at once, `None` means nothing is ready yet.
    pub fn try_next(&mut self) -> Option<Option<Result<WatchMessage, StorageError>>> {
        if let Some(msg) = self.replay.pop_front() {
            return Some(Some(self.mapped(Ok(msg))));
        }
        match self.rx.try_recv() {
            Ok(item) => Some(Some(self.mapped(item))),
            Err(tokio::sync::mpsc::error::TryRecvError::Empty) => None,
            Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                Some(self.end.take().and_then(|end| end.lock().take()).map(Err))
            }
        }
    }

    /// The next message; `None` when the stream ended (e.g. the store shut down).
    /// After an `Err` (e.g. [`StorageError::Compacted`] or [`StorageError::WatchOverflow`])
    /// the stream ends; the caller re-watches from the last revision it saw.
    pub async fn next(&mut self) -> Option<Result<WatchMessage, StorageError>> {
        if let Some(msg) = self.replay.pop_front() {
            return Some(self.mapped(Ok(msg)));
        }
        match self.rx.recv().await {
            Some(item) => Some(self.mapped(item)),
            None => self.end.take().and_then(|end| end.lock().take()).map(Err),
        }
    }
}

/// Storage failures. Handlers map them to Kubernetes Status codes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// Create of a key that exists.
    #[error("key already exists")]
    AlreadyExists,
    /// Update/delete of a key that does not exist.
    #[error("key not found")]
    NotFound,
    /// The key's mod_revision is not the expected one; carries the current state.
    #[error("revision conflict (current mod_revision {})", .current.mod_revision)]
    Conflict {
        /// The key's state now.
        current: Box<KeyValue>,
    },
    /// The requested revision was compacted away: a read below the compacted revision, or a
    /// watch whose `after` is below it.
    #[error("required revision {requested} has been compacted (compacted revision {compacted})")]
    Compacted {
        /// What the caller asked for (the read revision, or the watch's `after`).
        requested: Revision,
        /// The store's compacted revision: the oldest revision still readable, and the
        /// smallest `after` a watch may start from.
        compacted: Revision,
    },
    /// A revision ahead of the store's current revision.
    #[error("revision {requested} is in the future (current {current})")]
    FutureRevision {
        /// What the caller asked for.
        requested: Revision,
        /// The current revision.
        current: Revision,
    },
    /// A watcher did not keep up and was dropped; re-watch from the last revision seen.
    #[error("watcher fell behind and was closed")]
    WatchOverflow,
    /// The store is not reachable or has shut down.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// Disk or encoding failure.
    #[error("storage internal error: {0}")]
    Internal(String),
}

/// The MVCC store contract shared by every backend. All methods are safe to call concurrently.
///
/// Guarantees every backend must give (checked by [`conformance`]):
/// - every successful write gets a revision greater than every earlier write's;
/// - a write is durable (for persistent backends) before its future resolves;
/// - `watch(prefix, after)` delivers every change under `prefix` with revision > `after`,
///   exactly once, in revision order, with previous values, then live changes;
/// - reads and watches below the compacted revision fail with [`StorageError::Compacted`].
#[async_trait::async_trait]
pub trait Storage: Send + Sync + 'static {
    /// The key's current state, if it exists.
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StorageError>;

    /// [`Storage::get`] for a read-modify-write, also telling whether the stored value is
    /// stale: kept in a form this store would no longer write (e.g. encrypted with a key that
    /// is not the primary one any more). An update of a stale value must be written even when
    /// the object did not change, so that rewriting every object migrates it. The default,
    /// for stores that keep values as they are given, is never stale.
    async fn get_for_update(&self, key: &[u8]) -> Result<Option<(KeyValue, bool)>, StorageError> {
        Ok(self.get(key).await?.map(|kv| (kv, false)))
    }

    /// Keys in `[start, end)` at a revision, ascending, at most `limit`.
    /// Fails with [`StorageError::Compacted`] below the compacted revision and
    /// [`StorageError::FutureRevision`] above the current one.
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, StorageError>;

    /// Creates `key` if absent. Returns the new state (create_revision == mod_revision).
    async fn create(&self, key: Bytes, value: Bytes) -> Result<KeyValue, StorageError>;

    /// Replaces `key`'s value if its mod_revision is `expected` (compare-and-swap).
    async fn update(
        &self,
        key: Bytes,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError>;

    /// Deletes `key`, if `expected` is given only when its mod_revision matches.
    /// Returns the deleted state (its last value) and the deletion's revision.
    async fn delete(
        &self,
        key: Bytes,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StorageError>;

    /// Watches every key starting with `prefix` for changes with revision > `after`.
    /// History after `after` is replayed first, then live changes follow with no gap and no
    /// duplicate. `after` may be ahead of the current revision (events start once the store
    /// gets there); below the compacted revision it fails with [`StorageError::Compacted`].
    async fn watch(&self, prefix: Bytes, after: Revision) -> Result<WatchStream, StorageError>;

    /// Asks that each watch whose prefix starts with `prefix` be told soon (a
    /// [`WatchMessage::Progress`]) the revision up to which it has been sent every change, so
    /// that a cache whose keys are idle can prove it is current. Watches are not told of
    /// commits that leave their keys alone unless asked: with one watch per resource, a
    /// message to every watch at every commit would cost more than the commit. A backend
    /// that cannot answer does nothing (the default); its idle watches then advance only
    /// when it sends progress of its own accord.
    async fn request_progress(&self, prefix: &[u8]) -> Result<(), StorageError> {
        let _ = prefix;
        Ok(())
    }

    /// Drops history below `revision`, keeping each key's latest state at or before it (like
    /// etcd). Afterwards [`Storage::compacted_revision`] is `revision`; reads at revisions
    /// `< revision` and watches with `after < revision` fail with [`StorageError::Compacted`],
    /// while reads at `>= revision` and watches from `after >= revision` still work.
    /// A `revision` at or below the current compacted revision is a no-op; one above the
    /// current revision fails with [`StorageError::FutureRevision`].
    async fn compact(&self, revision: Revision) -> Result<(), StorageError>;

    /// The latest committed revision. A never-written store is at its starting revision: 0
    /// for the memory and embedded stores, 1 for etcd (whose revisions are used unchanged).
    async fn current_revision(&self) -> Result<Revision, StorageError>;

    /// The compacted revision: change records at or below it may be gone, reads below it fail
    /// (0 = nothing compacted).
    async fn compacted_revision(&self) -> Result<Revision, StorageError>;

    /// Whether the store can serve requests now (for the API server's `/readyz`): `Ok` if
    /// so, else the reason, typically [`StorageError::Unavailable`]. Meant to be cheap and
    /// called often; a remote backend may answer from a short-lived cache. The default (for
    /// in-process stores, which are ready whenever they exist) is `Ok`.
    async fn ready(&self) -> Result<(), StorageError> {
        Ok(())
    }
}

/// The smallest key greater than every key starting with `prefix` (etcd's prefix end).
pub fn prefix_end(prefix: &[u8]) -> Bytes {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Bytes::from(end);
        }
    }
    // All 0xff (or empty): no upper bound; represented by an empty end key.
    Bytes::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(rev: Revision, value: &'static [u8]) -> Event {
        let kv = KeyValue {
            key: Bytes::from_static(b"/k"),
            value: Bytes::from_static(value),
            create_revision: 1,
            mod_revision: rev,
            version: rev,
        };
        Event {
            kind: EventKind::Update,
            revision: rev,
            prev: Some(kv.clone()),
            kv,
        }
    }

    #[tokio::test]
    async fn mapped_streams_map_replayed_and_live_events_in_order() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let replay = VecDeque::from([WatchMessage::Events(vec![event(1, b"a")])]);
        let end: WatchEnd = Arc::default();
        let mut w = WatchStream::with_replay(replay, rx, end)
            .map_events(|e| e.kv.value = Bytes::from(e.kv.value.to_ascii_uppercase()))
            .map_events(|e| {
                if let Some(p) = &mut e.prev {
                    p.value = Bytes::from_static(b"prev");
                }
            });
        tx.send(Ok(WatchMessage::Events(vec![event(2, b"b")])))
            .await
            .unwrap();
        tx.send(Ok(WatchMessage::Progress(2))).await.unwrap();
        tx.send(Ok(WatchMessage::Events(vec![event(3, b"c")])))
            .await
            .unwrap();
        drop(tx);
        let mut seen = Vec::new();
        while let Some(msg) = w.next().await {
            match msg.unwrap() {
                WatchMessage::Events(evs) => {
                    for e in evs {
                        assert_eq!(e.prev.unwrap().value, Bytes::from_static(b"prev"));
                        seen.push(e.kv.value);
                    }
                }
                WatchMessage::Progress(rev) => assert_eq!(rev, 2),
            }
        }
        assert_eq!(seen, [&b"A"[..], b"B", b"C"]);
    }
}
