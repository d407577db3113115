//! The storage reflector of a cacher: lists the resource's key prefix, follows a storage
//! watch from that revision, applies each change to the watch cache and hands it to the
//! dispatcher; relists when storage has compacted past it. It assumes it is the only writer of
//! the cacher's state.

use super::cached_object::CachedObject;
use super::cacher::Cacher;
use super::pacer::Pacer;
use super::watch_cache::{EventType, WatchCache, WatchCacheEvent};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use storage::{Event, EventKind, RangeRequest, StorageError, WatchMessage};

impl Cacher {
    /// Applies storage events to the cache, in order, then dispatches the changes: one by one
    /// when there is one, per watcher in one go when several arrived together (a dispatcher
    /// that falls behind then writes several events per socket write instead of falling
    /// further behind).
    pub(super) async fn process_batch(&self, events: Vec<Event>) {
        let applied: Vec<Arc<WatchCacheEvent>> = events
            .into_iter()
            .filter_map(|e| self.apply_event(e))
            .collect();
        match applied.as_slice() {
            [] => {}
            [one] => self.dispatch(one).await,
            many => self.dispatch_batch(many).await,
        }
    }

    /// Applies a storage event to the cache; the change to dispatch, if any.
    pub(super) fn apply_event(&self, ev: Event) -> Option<Arc<WatchCacheEvent>> {
        self.counters.received.fetch_add(1, Ordering::Relaxed);
        let revision = ev.revision;
        let (key, decoded) = self.decode_event(&ev)?;
        let applied = {
            let mut state = self.state.write();
            let applied = self.apply_decoded(&mut state, key, ev, decoded);
            if applied.is_some() {
                self.generation.fetch_add(1, Ordering::AcqRel);
            }
            applied
        };
        self.rv_tx.send_if_modified(|cur| {
            if revision > *cur {
                *cur = revision;
                true
            } else {
                false
            }
        });
        applied
    }

    /// The key of a storage event under the prefix and, for a create or an update, its
    /// decoded object (`None` when it cannot be decoded: logged, and applied as progress).
    /// Done before the state is locked, so that readers do not wait for the decoding.
    fn decode_event(&self, ev: &Event) -> Option<(String, Option<Arc<CachedObject>>)> {
        let key = ev
            .kv
            .key
            .get(self.prefix.len()..)
            .map(|k| String::from_utf8_lossy(k).into_owned())?;
        let decoded = match ev.kind {
            EventKind::Create | EventKind::Update => {
                match self.decode(&key, &ev.kv.value, ev.revision) {
                    Ok(o) => Some(Arc::new(o)),
                    Err(e) => {
                        tracing::error!(resource = self.info.resource, "{e}");
                        None
                    }
                }
            }
            EventKind::Delete => None,
        };
        Some((key, decoded))
    }

    /// Applies a decoded storage event (see [`Cacher::decode_event`]) to `state`: the
    /// change, with the object's previous state, or `None` when nothing changed (an event
    /// already applied, a delete of an unknown key, an object that could not be decoded).
    fn apply_decoded(
        &self,
        state: &mut WatchCache,
        key: String,
        ev: Event,
        decoded: Option<Arc<CachedObject>>,
    ) -> Option<Arc<WatchCacheEvent>> {
        let prev = state.get(&key).cloned().or_else(|| {
            ev.prev.as_ref().and_then(|p| {
                self.decode(&key, &p.value, p.mod_revision)
                    .ok()
                    .map(Arc::new)
            })
        });
        let event = match (ev.kind, decoded, prev) {
            (EventKind::Delete, _, Some(prev)) => Some(WatchCacheEvent {
                event_type: EventType::Deleted,
                object: Arc::new(prev.restamped(self.info, ev.revision)),
                prev: Some(prev),
                resource_version: ev.revision,
                prev_restamped: OnceLock::new(),
            }),
            (EventKind::Create | EventKind::Update, Some(obj), prev) => Some(WatchCacheEvent {
                event_type: if prev.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                },
                object: obj,
                prev,
                resource_version: ev.revision,
                prev_restamped: OnceLock::new(),
            }),
            _ => None,
        };
        match event {
            Some(e) => state.apply(e),
            None => {
                state.progress(ev.revision);
                None
            }
        }
    }

    /// Loads the state from storage and returns the revision it is at. Watchers are ended.
    ///
    /// The state is listed at an older revision when storage still has it — as many
    /// revisions back as the ring holds events — and storage's history from there is
    /// replayed into the ring. So after a restart (or a relist) the ring covers what it
    /// would have covered had the cache never stopped, and clients resume their watches
    /// from the versions they had instead of relisting. If storage has compacted that far,
    /// or the replay stalls short of what clients have already been shown, the state is
    /// listed afresh at the current revision and the ring starts there.
    ///
    /// The new state is built aside and swapped in whole: until then every list and watch is
    /// served from the old one, so no client ever sees a state older than one it was shown,
    /// or a half-replayed one. Watchers are ended at the swap, under the state's write lock:
    /// a watch registers under its read lock, so it is either ended there or starts from the
    /// new state, never left registered against a state whose events it will not be sent.
    pub(super) async fn relist(&self) -> Result<u64, StorageError> {
        // What clients may already have been shown: the new state must not be older.
        let shown = *self.rv_tx.borrow();
        let current = self.storage.current_revision().await?;
        let back = u64::try_from(self.opts.watch_cache_size).unwrap_or(u64::MAX);
        // Revision 0 would mean "current" to storage; the first revision is 1.
        let from = current
            .saturating_sub(back)
            .max(self.storage.compacted_revision().await?)
            .max(1);
        let mut fresh = WatchCache::new(self.opts.watch_cache_size, self.opts.watch_cache_bytes);
        let (objects, listed) = if from < current {
            match self.range_all(from).await {
                Ok(listed) => listed,
                Err(StorageError::Compacted { .. }) => self.range_all(0).await?,
                Err(e) => return Err(e),
            }
        } else {
            self.range_all(0).await?
        };
        fresh.replace(objects, listed);
        let mut revision = if listed < current {
            self.replay_history(&mut fresh, listed, current).await
        } else {
            listed
        };
        if revision < shown {
            tracing::info!(
                resource = self.info.resource,
                replayed_to = revision,
                shown,
                "the replay stopped short of what clients were shown; listing the current state"
            );
            let (objects, listed) = self.range_all(0).await?;
            fresh.replace(objects, listed);
            revision = listed;
        }
        let resumable_from = fresh.oldest_resumable();
        {
            let mut state = self.state.write();
            self.terminate_all();
            *state = fresh;
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.rv_tx.send_replace(revision.max(shown));
        self.ready_tx.send_replace(true);
        if shown > 0 {
            // A relist while serving (storage compacted past the cache's watch): rare, and
            // every watcher had to resume.
            tracing::info!(
                resource = self.info.resource,
                revision,
                resumable_from,
                "watch cache relisted; its watchers were ended and resume"
            );
        }
        Ok(revision)
    }

    /// Applies storage's changes after `from` to `state` (a state being built, not yet
    /// served: nothing is dispatched), until `until` or until storage goes quiet for a moment
    /// (etcd says nothing about an idle prefix between its progress notifications); the state
    /// is exactly at the returned revision either way.
    pub(super) async fn replay_history(
        &self,
        state: &mut WatchCache,
        from: u64,
        until: u64,
    ) -> u64 {
        const QUIET: Duration = Duration::from_secs(1);
        let prefix: bytes::Bytes = self.prefix.clone().into_bytes().into();
        let mut stream = match self.storage.watch(prefix, from).await {
            Ok(stream) => stream,
            Err(e) => {
                tracing::info!(resource = self.info.resource, "no history to replay: {e}");
                return from;
            }
        };
        let mut last = from;
        while last < until {
            match tokio::time::timeout(QUIET, stream.next()).await {
                Ok(Some(Ok(WatchMessage::Events(events)))) => {
                    for e in events {
                        last = last.max(e.revision);
                        self.counters.received.fetch_add(1, Ordering::Relaxed);
                        if let Some((key, decoded)) = self.decode_event(&e) {
                            self.apply_decoded(state, key, e, decoded);
                        }
                    }
                }
                Ok(Some(Ok(WatchMessage::Progress(rv)))) if rv > last => {
                    last = rv;
                    state.progress(rv);
                }
                Ok(Some(Ok(WatchMessage::Progress(_)))) => {}
                _ => break,
            }
        }
        last
    }

    /// Every object under the prefix at `revision` (0 = current), read in pages, and the
    /// revision read at.
    pub(super) async fn range_all(
        &self,
        mut revision: u64,
    ) -> Result<(Vec<Arc<CachedObject>>, u64), StorageError> {
        let mut objects = Vec::new();
        let mut start: bytes::Bytes = self.prefix.clone().into_bytes().into();
        let end = storage::prefix_end(self.prefix.as_bytes());
        loop {
            let resp = self
                .storage
                .range(RangeRequest {
                    start: start.clone(),
                    end: end.clone(),
                    revision,
                    limit: 10_000,
                })
                .await?;
            revision = resp.revision;
            for kv in &resp.kvs {
                let key = String::from_utf8_lossy(&kv.key[self.prefix.len().min(kv.key.len())..])
                    .into_owned();
                match self.decode(&key, &kv.value, kv.mod_revision) {
                    Ok(o) => objects.push(Arc::new(o)),
                    Err(e) => tracing::error!(resource = self.info.resource, "{e}"),
                }
            }
            match resp.kvs.last() {
                Some(last) if resp.more => {
                    let mut next = last.key.to_vec();
                    next.push(0);
                    start = next.into();
                }
                _ => break,
            }
        }
        Ok((objects, revision))
    }
}

/// The most storage events the reflector applies and dispatches as one batch.
const MAX_DISPATCH_BATCH: usize = 1024;

/// Keeps one resource's cache in step with storage: list, then watch from the list's
/// revision, re-watching from the last event seen when a watch ends and relisting when
/// storage has compacted past it. Failed or short-lived attempts are spaced out by the
/// [`Pacer`]s, one for lists and one for watches.
pub(super) async fn reflector_loop(weak: Weak<Cacher>) {
    let mut relists = Pacer::default();
    let mut rewatches = Pacer::default();
    'relist: loop {
        relists.pace().await;
        let Some(c) = weak.upgrade() else { return };
        let mut last = match c.relist().await {
            Ok(rv) => rv,
            Err(e) => {
                tracing::warn!(resource = c.info.resource, "watch cache list failed: {e}");
                continue;
            }
        };
        let prefix: bytes::Bytes = c.prefix.clone().into_bytes().into();
        drop(c);
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            rewatches.pace().await;
            let Some(c) = weak.upgrade() else { return };
            let mut stream = match c.storage.watch(prefix.clone(), last).await {
                Ok(s) => s,
                Err(StorageError::Compacted { .. }) => continue 'relist,
                Err(e) => {
                    tracing::warn!(resource = c.info.resource, "storage watch failed: {e}");
                    continue;
                }
            };
            drop(c);
            loop {
                tokio::select! {
                    msg = stream.next() => {
                        let Some(c) = weak.upgrade() else { return };
                        // Take whatever else is already waiting too, so a dispatcher that fell
                        // behind catches up in batches.
                        let mut msg = msg;
                        let mut batch: Vec<Event> = Vec::new();
                        let mut progress = 0;
                        let end = loop {
                            match msg {
                                Some(Ok(WatchMessage::Events(events))) => {
                                    for e in &events {
                                        last = last.max(e.revision);
                                    }
                                    batch.extend(events);
                                }
                                Some(Ok(WatchMessage::Progress(rv))) => {
                                    progress = progress.max(rv);
                                    last = last.max(rv);
                                }
                                other => break other,
                            }
                            if batch.len() >= MAX_DISPATCH_BATCH {
                                break Some(Ok(WatchMessage::Progress(0)));
                            }
                            match stream.try_next() {
                                Some(m) => msg = m,
                                None => break Some(Ok(WatchMessage::Progress(0))),
                            }
                        };
                        c.process_batch(batch).await;
                        if progress > 0 {
                            c.state.write().progress(progress);
                            c.rv_tx.send_if_modified(|cur| if progress > *cur { *cur = progress; true } else { false });
                        }
                        match end {
                            Some(Ok(_)) => {}
                            Some(Err(StorageError::Compacted { .. })) => continue 'relist,
                            Some(Err(e)) => {
                                tracing::info!(resource = c.info.resource, "storage watch ended ({e}); resuming from {last}");
                                break;
                            }
                            None => break,
                        }
                    }
                    _ = ticker.tick() => {
                        let Some(c) = weak.upgrade() else { return };
                        if c.unload_if_idle() {
                            return;
                        }
                        c.send_bookmarks();
                        // Storage tells an idle resource's cache of other commits only when
                        // asked: ask, so that the next bookmarks carry a current revision (a
                        // client resuming from it after a restart of the server is then
                        // within what the new cache replays).
                        if c.watcher_count() > 0 {
                            if let Err(e) = c.storage.request_progress(&prefix).await {
                                tracing::debug!(resource = c.info.resource, "progress request failed: {e}");
                            }
                        }
                    }
                }
            }
        }
    }
}
