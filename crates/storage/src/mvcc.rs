//! The MVCC core shared by the memory and embedded backends.
//!
//! Shape (after etcd's `mvcc` package, in our own terms):
//! - a **history** of change records, one per revision (`revision → Event`, with the key's
//!   previous state so watch replay can report it);
//! - a **key index** mapping each key to the ascending list of revisions that touched it
//!   (puts and tombstones), so a read at revision `r` picks the last entry `<= r`;
//! - the **watchers**, each a prefix, a first revision it wants, and a bounded queue.
//!
//! The core owns no I/O. A backend decides a batch of writes with [`Core::plan`] (which
//! checks each precondition in order, later operations seeing earlier ones), makes them
//! durable however it likes, then makes them visible with [`Core::publish`], which also
//! notifies watchers. The memory backend does both under one lock ([`Core::write_now`]); the
//! embedded backend plans and publishes from its single writer thread around a redb commit.
//!
//! Invariant: every record with revision `> compacted` is in the history, and for every key
//! its latest record `<= compacted` is too unless that record is a tombstone. That is all a
//! read at any revision `>= compacted`, and a watch from any `after >= compacted`, needs.

use crate::{
    Event, EventKind, KeyValue, RangeRequest, RangeResponse, Revision, StorageError, WatchEnd,
    WatchMessage, WatchStream, WATCH_CHANNEL_CAPACITY,
};
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use tokio::sync::mpsc;

/// At most this many events go into one replayed watch message.
const REPLAY_CHUNK: usize = 512;

/// One write request, before it is checked.
#[derive(Clone, Debug)]
pub(crate) enum WriteOp {
    /// Create `key` if absent.
    Create { key: Bytes, value: Bytes },
    /// Replace `key`'s value if its mod_revision is `expected`.
    Update {
        key: Bytes,
        value: Bytes,
        expected: Revision,
    },
    /// Delete `key`, if `expected` is set only when its mod_revision matches.
    Delete {
        key: Bytes,
        expected: Option<Revision>,
    },
}

/// The result of a create or update, from its committed event.
pub(crate) fn put_result(ev: Result<Event, StorageError>) -> Result<KeyValue, StorageError> {
    ev.map(|e| e.kv)
}

/// The result of a delete, from its committed event: the last state and the deletion revision.
pub(crate) fn delete_result(
    ev: Result<Event, StorageError>,
) -> Result<(KeyValue, Revision), StorageError> {
    let ev = ev?;
    match ev.prev {
        Some(prev) => Ok((prev, ev.revision)),
        None => Err(StorageError::Internal(
            "delete event without a previous state".into(),
        )),
    }
}

/// One registered watcher.
struct Watcher {
    prefix: Bytes,
    /// Events below this revision were already replayed (or are before what it asked for).
    min_rev: Revision,
    tx: mpsc::Sender<Result<WatchMessage, StorageError>>,
    end: WatchEnd,
    /// The revision of the last progress queued on request: many requests at one revision
    /// (readers waiting on a busy cache) queue one message, not one each.
    progressed: std::sync::atomic::AtomicU64,
}

/// Everything behind the core's lock.
#[derive(Default)]
struct State {
    current: Revision,
    compacted: Revision,
    /// key → ascending revisions of its records still in `history`.
    keys: BTreeMap<Bytes, Vec<Revision>>,
    /// revision → the change made at that revision.
    history: BTreeMap<Revision, Event>,
    watchers: Vec<Watcher>,
    /// Bytes of the values of records a later record of their key superseded: what the
    /// history costs beyond the current state, and what compaction can free.
    superseded_bytes: u64,
}

impl State {
    /// The key's record at or before `rev`, if it exists and is not a tombstone.
    fn kv_at(&self, key: &[u8], rev: Revision) -> Option<&KeyValue> {
        self.record_at(self.keys.get(key)?, rev)
    }

    /// Of a key's ascending `revs`, the record at or before `rev`, if it is not a tombstone.
    fn record_at(&self, revs: &[Revision], rev: Revision) -> Option<&KeyValue> {
        let idx = revs.partition_point(|r| *r <= rev);
        let r = revs.get(idx.checked_sub(1)?)?;
        let ev = self.history.get(r)?;
        (ev.kind != EventKind::Delete).then_some(&ev.kv)
    }

    fn latest(&self, key: &[u8]) -> Option<&KeyValue> {
        self.kv_at(key, Revision::MAX)
    }

    /// Resolves a read revision (0 = current) and checks it is readable.
    fn read_revision(&self, rev: Revision) -> Result<Revision, StorageError> {
        if rev == 0 {
            return Ok(self.current);
        }
        if rev > self.current {
            return Err(StorageError::FutureRevision {
                requested: rev,
                current: self.current,
            });
        }
        if rev < self.compacted {
            return Err(StorageError::Compacted {
                requested: rev,
                compacted: self.compacted,
            });
        }
        Ok(rev)
    }

    fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StorageError> {
        let rev = self.read_revision(req.revision)?;
        let mut resp = RangeResponse {
            revision: rev,
            ..RangeResponse::default()
        };
        let upper: Bound<&[u8]> = if req.end.is_empty() {
            Bound::Included(&req.start[..])
        } else if req.end[..] == b"\0"[..] {
            Bound::Unbounded
        } else if req.end <= req.start {
            return Ok(resp);
        } else {
            Bound::Excluded(&req.end[..])
        };
        let lower: Bound<&[u8]> = Bound::Included(&req.start[..]);
        // The index entry walked gives each key's revisions: no second lookup per key (a
        // range counts every key to its end, so this loop is a LIST's and a sweep's cost).
        for revs in self.keys.range::<[u8], _>((lower, upper)).map(|(_, v)| v) {
            if let Some(kv) = self.record_at(revs, rev) {
                resp.count += 1;
                if req.limit == 0 || resp.kvs.len() < req.limit {
                    resp.kvs.push(kv.clone());
                } else {
                    resp.more = true;
                }
            }
        }
        Ok(resp)
    }

    /// Checks `ops` in order against the current state (later ops see earlier ones) and
    /// builds the events the successful ones would commit, numbered from `current + 1`.
    fn plan(&self, ops: &[WriteOp]) -> Vec<Result<Event, StorageError>> {
        // Keys already changed earlier in this batch: their state after those changes.
        let mut overlay: HashMap<Bytes, Option<KeyValue>> = HashMap::new();
        let mut next = self.current + 1;
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            let key = match op {
                WriteOp::Create { key, .. }
                | WriteOp::Update { key, .. }
                | WriteOp::Delete { key, .. } => key,
            };
            let cur: Option<KeyValue> = match overlay.get(key) {
                Some(state) => state.clone(),
                None => self.latest(key).cloned(),
            };
            let result = match (op, cur) {
                (WriteOp::Create { .. }, Some(_)) => Err(StorageError::AlreadyExists),
                (WriteOp::Create { key, value }, None) => Ok(Event {
                    kind: EventKind::Create,
                    revision: next,
                    kv: KeyValue {
                        key: key.clone(),
                        value: value.clone(),
                        create_revision: next,
                        mod_revision: next,
                        version: 1,
                    },
                    prev: None,
                }),
                (WriteOp::Update { .. } | WriteOp::Delete { .. }, None) => {
                    Err(StorageError::NotFound)
                }
                (WriteOp::Update { expected, .. }, Some(cur)) if cur.mod_revision != *expected => {
                    Err(StorageError::Conflict {
                        current: Box::new(cur),
                    })
                }
                (WriteOp::Update { key, value, .. }, Some(cur)) => Ok(Event {
                    kind: EventKind::Update,
                    revision: next,
                    kv: KeyValue {
                        key: key.clone(),
                        value: value.clone(),
                        create_revision: cur.create_revision,
                        mod_revision: next,
                        version: cur.version + 1,
                    },
                    prev: Some(cur),
                }),
                (
                    WriteOp::Delete {
                        expected: Some(expected),
                        ..
                    },
                    Some(cur),
                ) if cur.mod_revision != *expected => Err(StorageError::Conflict {
                    current: Box::new(cur),
                }),
                (WriteOp::Delete { key, .. }, Some(cur)) => Ok(Event {
                    kind: EventKind::Delete,
                    revision: next,
                    kv: tombstone(key.clone(), next),
                    prev: Some(cur),
                }),
            };
            if let Ok(ev) = &result {
                let after = (ev.kind != EventKind::Delete).then(|| ev.kv.clone());
                overlay.insert(key.clone(), after);
                next += 1;
            }
            out.push(result);
        }
        out
    }

    /// Makes committed events visible and tells the watchers. The events must continue the
    /// revision sequence exactly.
    fn publish(&mut self, events: &[Event]) -> Result<(), StorageError> {
        for (expect, ev) in (self.current + 1..).zip(events) {
            if ev.revision != expect {
                return Err(StorageError::Internal(format!(
                    "revision {} published out of order (expected {expect})",
                    ev.revision
                )));
            }
        }
        for ev in events {
            self.insert_record(ev.clone());
        }
        self.notify(events);
        Ok(())
    }

    fn insert_record(&mut self, ev: Event) {
        self.current = self.current.max(ev.revision);
        let revs = self.keys.entry(ev.kv.key.clone()).or_default();
        if let Some(before) = revs.last().and_then(|r| self.history.get(r)) {
            self.superseded_bytes += before.kv.value.len() as u64;
        }
        revs.push(ev.revision);
        self.history.insert(ev.revision, ev);
    }

    /// The lowest revision compacting at which brings the superseded bytes down to half of
    /// `max`, if they are above `max`. Compacting at `r` frees each superseded record whose
    /// successor (the next record of its key) is at or below `r`, so the walk goes through
    /// the successors in revision order.
    fn byte_compaction_target(&self, max: u64) -> Option<Revision> {
        if self.superseded_bytes <= max {
            return None;
        }
        let to_free = self.superseded_bytes - max / 2;
        let mut freed = 0u64;
        for (rev, ev) in self.history.range(self.compacted.saturating_add(1)..) {
            let Some(revs) = self.keys.get(&ev.kv.key) else {
                continue;
            };
            let idx = revs.partition_point(|r| r < rev);
            if let Some(before) = idx.checked_sub(1).and_then(|i| self.history.get(&revs[i])) {
                freed += before.kv.value.len() as u64;
            }
            if freed >= to_free {
                return Some(*rev);
            }
        }
        Some(self.current)
    }

    /// Hands each watcher the events under its prefix; never waits. Watchers with nothing in
    /// these events hear nothing (they learn of the revision when they ask:
    /// [`State::request_progress`]). A watcher whose queue is full is closed with
    /// [`StorageError::WatchOverflow`]; one whose stream was dropped is forgotten.
    fn notify(&mut self, events: &[Event]) {
        if events.is_empty() || self.watchers.is_empty() {
            return;
        }
        self.watchers.retain(|w| {
            let batch: Vec<Event> = events
                .iter()
                .filter(|e| e.revision >= w.min_rev && e.kv.key.starts_with(&w.prefix))
                .cloned()
                .collect();
            if batch.is_empty() {
                return !w.tx.is_closed();
            }
            match w.tx.try_send(Ok(WatchMessage::Events(batch))) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::warn!(
                        prefix = %String::from_utf8_lossy(&w.prefix),
                        "storage watcher fell behind; closing it with WatchOverflow"
                    );
                    *w.end.lock() = Some(StorageError::WatchOverflow);
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
    }

    /// Tells each watcher whose prefix starts with `prefix` the current revision: every
    /// change up to it has been queued for it already, since [`State::notify`] runs under the
    /// same lock as publication. A watcher that asked for a revision still ahead hears nothing,
    /// one already told this revision is not told again, and one whose queue is full is
    /// skipped (events are on their way to it).
    fn request_progress(&self, prefix: &[u8]) {
        use std::sync::atomic::Ordering::Relaxed;
        let current = self.current;
        for w in &self.watchers {
            let due = w.prefix.starts_with(prefix)
                && current.saturating_add(1) >= w.min_rev
                && w.progressed.swap(current, Relaxed) != current;
            // Not queued: a later request must try again.
            if due && w.tx.try_send(Ok(WatchMessage::Progress(current))).is_err() {
                w.progressed.store(0, Relaxed);
            }
        }
    }

    fn watch(&mut self, prefix: Bytes, after: Revision) -> Result<WatchStream, StorageError> {
        if after < self.compacted {
            return Err(StorageError::Compacted {
                requested: after,
                compacted: self.compacted,
            });
        }
        // Forget watchers whose streams were dropped while their keys were idle.
        self.watchers.retain(|w| !w.tx.is_closed());
        let mut replay = VecDeque::new();
        let mut chunk = Vec::new();
        if after < self.current {
            for ev in self.history.range(after + 1..).map(|(_, e)| e) {
                if ev.kv.key.starts_with(&prefix) {
                    chunk.push(ev.clone());
                    if chunk.len() == REPLAY_CHUNK {
                        replay.push_back(WatchMessage::Events(std::mem::take(&mut chunk)));
                    }
                }
            }
        }
        if !chunk.is_empty() {
            replay.push_back(WatchMessage::Events(chunk));
        }
        if self.current > after {
            replay.push_back(WatchMessage::Progress(self.current));
        }
        let (tx, rx) = mpsc::channel(WATCH_CHANNEL_CAPACITY);
        let end: WatchEnd = Arc::new(Mutex::new(None));
        // Replay covers (after, current]; live delivery starts right after, under this lock.
        self.watchers.push(Watcher {
            prefix,
            min_rev: after.max(self.current) + 1,
            tx,
            end: end.clone(),
            progressed: Default::default(),
        });
        Ok(WatchStream::with_replay(replay, rx, end))
    }

    /// The history revisions that `compact(rev)` would drop, or `None` if it is a no-op.
    fn compaction_plan(&self, rev: Revision) -> Result<Option<Vec<Revision>>, StorageError> {
        if rev > self.current {
            return Err(StorageError::FutureRevision {
                requested: rev,
                current: self.current,
            });
        }
        if rev <= self.compacted {
            return Ok(None);
        }
        let mut dropped = Vec::new();
        for (r, ev) in self.history.range(..=rev) {
            let keep = ev.kind != EventKind::Delete
                && self.keys.get(&ev.kv.key).is_some_and(|revs| {
                    let idx = revs.partition_point(|x| *x <= rev);
                    idx > 0 && revs[idx - 1] == *r
                });
            if !keep {
                dropped.push(*r);
            }
        }
        Ok(Some(dropped))
    }

    fn apply_compaction(&mut self, rev: Revision, dropped: &[Revision]) {
        let mut touched = BTreeSet::new();
        for r in dropped {
            if let Some(ev) = self.history.remove(r) {
                // Only superseded records and tombstones (no value) are dropped.
                self.superseded_bytes = self
                    .superseded_bytes
                    .saturating_sub(ev.kv.value.len() as u64);
                touched.insert(ev.kv.key);
            }
        }
        for key in touched {
            let empty = match self.keys.get_mut(&key) {
                Some(revs) => {
                    revs.retain(|r| self.history.contains_key(r));
                    revs.is_empty()
                }
                None => false,
            };
            if empty {
                self.keys.remove(&key);
            }
        }
        self.compacted = self.compacted.max(rev);
    }
}

/// A key's state after a delete: empty value, `mod_revision` = the deletion's revision.
pub(crate) fn tombstone(key: Bytes, rev: Revision) -> KeyValue {
    KeyValue {
        key,
        value: Bytes::new(),
        create_revision: 0,
        mod_revision: rev,
        version: 0,
    }
}

/// The shared revisioned index, history and watcher set. Cheap to share behind an `Arc`.
#[derive(Default)]
pub(crate) struct Core {
    state: RwLock<State>,
}

impl Core {
    /// An empty store at revision 0.
    pub(crate) fn new() -> Self {
        Core::default()
    }

    /// Rebuilds a core from persisted records in ascending revision order (kind + state
    /// after the change), with the persisted compacted revision. Previous states are
    /// reconstructed from earlier records; records whose predecessor was compacted away get
    /// none (they are at or below `compacted`, so no watch replays them).
    pub(crate) fn restore(
        records: impl IntoIterator<Item = (EventKind, KeyValue)>,
        compacted: Revision,
    ) -> Self {
        let mut st = State::default();
        for (kind, kv) in records {
            let prev = st.latest(&kv.key).cloned();
            let revision = kv.mod_revision;
            st.insert_record(Event {
                kind,
                revision,
                kv,
                prev,
            });
        }
        st.compacted = compacted;
        // A compacted tombstone may have been the newest record.
        st.current = st.current.max(compacted);
        Core {
            state: RwLock::new(st),
        }
    }

    /// The key's current state.
    pub(crate) fn get(&self, key: &[u8]) -> Option<KeyValue> {
        self.state.read().latest(key).cloned()
    }

    /// A range read; see [`crate::Storage::range`].
    pub(crate) fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StorageError> {
        self.state.read().range(req)
    }

    /// Registers a watcher and collects its catch-up, under one lock so that replay and live
    /// delivery meet without gap or overlap.
    pub(crate) fn watch(
        &self,
        prefix: Bytes,
        after: Revision,
    ) -> Result<WatchStream, StorageError> {
        self.state.write().watch(prefix, after)
    }

    /// See [`crate::Storage::request_progress`]. A read lock is enough: publication, which
    /// would move the revision, takes the write lock.
    pub(crate) fn request_progress(&self, prefix: &[u8]) {
        self.state.read().request_progress(prefix);
    }

    /// The latest visible revision.
    pub(crate) fn current(&self) -> Revision {
        self.state.read().current
    }

    /// The compacted revision.
    pub(crate) fn compacted(&self) -> Revision {
        self.state.read().compacted
    }

    /// Checks a batch against the visible state; see [`State::plan`]. The caller must be the
    /// only writer until it publishes (or abandons) the plan.
    pub(crate) fn plan(&self, ops: &[WriteOp]) -> Vec<Result<Event, StorageError>> {
        self.state.read().plan(ops)
    }

    /// Makes committed events visible and notifies watchers.
    pub(crate) fn publish(&self, events: &[Event]) -> Result<(), StorageError> {
        self.state.write().publish(events)
    }

    /// Plans, applies and publishes one write atomically (for backends without durability).
    pub(crate) fn write_now(&self, op: WriteOp) -> Result<Event, StorageError> {
        let mut st = self.state.write();
        let ev = st
            .plan(std::slice::from_ref(&op))
            .pop()
            .unwrap_or_else(|| Err(StorageError::Internal("empty plan".into())))?;
        st.publish(std::slice::from_ref(&ev))?;
        Ok(ev)
    }

    /// What `compact(rev)` would drop (`None` = nothing to do). Same single-writer rule as
    /// [`Core::plan`].
    pub(crate) fn compaction_plan(
        &self,
        rev: Revision,
    ) -> Result<Option<Vec<Revision>>, StorageError> {
        self.state.read().compaction_plan(rev)
    }

    /// Applies a compaction planned by [`Core::compaction_plan`].
    pub(crate) fn apply_compaction(&self, rev: Revision, dropped: &[Revision]) {
        self.state.write().apply_compaction(rev, dropped)
    }

    /// Plans and applies a compaction atomically (for backends without durability).
    pub(crate) fn compact_now(&self, rev: Revision) -> Result<(), StorageError> {
        let mut st = self.state.write();
        if let Some(dropped) = st.compaction_plan(rev)? {
            st.apply_compaction(rev, &dropped);
        }
        Ok(())
    }

    /// See [`State::byte_compaction_target`]: where to compact so that superseded values
    /// (history beyond the current state) stay within `max` bytes; `None` while they do.
    pub(crate) fn byte_compaction_target(&self, max: u64) -> Option<Revision> {
        self.state.read().byte_compaction_target(max)
    }

    /// Bytes of superseded values in the history (what it holds beyond the current state).
    pub(crate) fn superseded_bytes(&self) -> u64 {
        self.state.read().superseded_bytes
    }

    /// Number of change records held (for tests).
    #[cfg(test)]
    fn history_len(&self) -> usize {
        self.state.read().history.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(k: &str, v: &str) -> WriteOp {
        WriteOp::Create {
            key: Bytes::copy_from_slice(k.as_bytes()),
            value: Bytes::copy_from_slice(v.as_bytes()),
        }
    }

    #[test]
    fn plan_sees_earlier_ops_of_the_batch() {
        let core = Core::new();
        let ops = vec![
            create("a", "1"),
            create("a", "2"),
            WriteOp::Update {
                key: Bytes::from_static(b"a"),
                value: Bytes::from_static(b"3"),
                expected: 1,
            },
            WriteOp::Delete {
                key: Bytes::from_static(b"a"),
                expected: Some(2),
            },
            create("a", "4"),
        ];
        let plan = core.plan(&ops);
        assert_eq!(plan[0].as_ref().unwrap().revision, 1);
        assert_eq!(plan[1], Err(StorageError::AlreadyExists));
        let upd = plan[2].as_ref().unwrap();
        assert_eq!((upd.revision, upd.kv.version), (2, 2));
        assert_eq!(plan[3].as_ref().unwrap().kind, EventKind::Delete);
        let recreate = plan[4].as_ref().unwrap();
        assert_eq!((recreate.revision, recreate.kv.create_revision), (4, 4));
        let events: Vec<Event> = plan.into_iter().filter_map(Result::ok).collect();
        core.publish(&events).unwrap();
        assert_eq!(core.current(), 4);
        assert_eq!(core.get(b"a").unwrap().value, Bytes::from_static(b"4"));
    }

    #[test]
    fn idle_watchers_hear_the_revision_only_when_it_is_asked_for() {
        let core = Core::new();
        let mut pods = core.watch(Bytes::from_static(b"/pods/"), 0).unwrap();
        let mut nodes = core.watch(Bytes::from_static(b"/nodes/"), 0).unwrap();
        let mut ahead = core.watch(Bytes::from_static(b"/nodes/"), 10).unwrap();
        core.write_now(create("/pods/a", "1")).unwrap(); // 1
        core.write_now(create("/pods/b", "1")).unwrap(); // 2
        for want in [1, 2] {
            match pods.try_next() {
                Some(Some(Ok(WatchMessage::Events(evs)))) => assert_eq!(evs[0].revision, want),
                other => panic!("expected event {want}, got {other:?}"),
            }
        }
        // Commits elsewhere cost an idle watcher nothing.
        assert!(nodes.try_next().is_none(), "an idle watcher was woken");
        core.request_progress(b"/nodes/");
        assert_eq!(nodes.try_next(), Some(Some(Ok(WatchMessage::Progress(2)))));
        // Only watchers under the prefix asked about, and not one waiting for revision 11.
        assert!(pods.try_next().is_none());
        assert!(ahead.try_next().is_none());
        core.request_progress(b"/");
        assert_eq!(pods.try_next(), Some(Some(Ok(WatchMessage::Progress(2)))));
        assert!(ahead.try_next().is_none());
        // Asked again at the same revision: told once; at a later one, told again.
        core.request_progress(b"/nodes/");
        assert!(nodes.try_next().is_none(), "told the same revision twice");
        core.write_now(create("/pods/c", "1")).unwrap(); // 3
        core.request_progress(b"/nodes/");
        assert_eq!(nodes.try_next(), Some(Some(Ok(WatchMessage::Progress(3)))));
    }

    #[test]
    fn publish_rejects_gaps() {
        let core = Core::new();
        let ev = core.plan(&[create("a", "1")]).pop().unwrap().unwrap();
        let mut late = ev.clone();
        late.revision = 5;
        assert!(matches!(
            core.publish(&[late]),
            Err(StorageError::Internal(_))
        ));
        core.publish(&[ev]).unwrap();
        assert_eq!(core.current(), 1);
    }

    #[test]
    fn compaction_keeps_latest_state_and_drops_tombstones() {
        let core = Core::new();
        core.write_now(create("a", "1")).unwrap(); // 1
        core.write_now(create("b", "1")).unwrap(); // 2
        core.write_now(WriteOp::Update {
            key: Bytes::from_static(b"a"),
            value: Bytes::from_static(b"2"),
            expected: 1,
        })
        .unwrap(); // 3
        core.write_now(WriteOp::Delete {
            key: Bytes::from_static(b"b"),
            expected: None,
        })
        .unwrap(); // 4
        core.write_now(create("c", "1")).unwrap(); // 5
        core.compact_now(4).unwrap();
        // Kept: a@3, c@5. Dropped: a@1, b@2, b@4 (tombstone).
        assert_eq!(core.history_len(), 2);
        let at4 = core.range(&RangeRequest {
            start: Bytes::from_static(b"\0"),
            end: Bytes::from_static(b"\0"),
            revision: 4,
            limit: 0,
        });
        let at4 = at4.unwrap();
        assert_eq!(at4.count, 1);
        assert_eq!(at4.kvs[0].value, Bytes::from_static(b"2"));
        assert!(matches!(
            core.range(&RangeRequest {
                revision: 3,
                ..RangeRequest::prefix("")
            }),
            Err(StorageError::Compacted {
                requested: 3,
                compacted: 4
            })
        ));
        // No-op and future compactions.
        core.compact_now(2).unwrap();
        assert_eq!(core.compacted(), 4);
        assert!(matches!(
            core.compact_now(9),
            Err(StorageError::FutureRevision { .. })
        ));
    }

    #[test]
    fn restore_rebuilds_prev_and_current() {
        let kv = |k: &'static str, v: &'static str, c, m, ver| KeyValue {
            key: Bytes::from_static(k.as_bytes()),
            value: Bytes::from_static(v.as_bytes()),
            create_revision: c,
            mod_revision: m,
            version: ver,
        };
        let core = Core::restore(
            vec![
                (EventKind::Create, kv("a", "1", 1, 1, 1)),
                (EventKind::Update, kv("a", "2", 1, 2, 2)),
            ],
            3,
        );
        assert_eq!(core.current(), 3);
        assert_eq!(core.get(b"a").unwrap().version, 2);
        let st = core.state.read();
        assert_eq!(st.history[&2].prev.as_ref().unwrap().value, "1");
    }
}
