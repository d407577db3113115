//! `FakeListerWatcher`: a scriptable, in-memory [`ListerWatcher`] for tests.
//!
//! It holds the current objects and a log of events ordered by resourceVersion, and
//! behaves like a small API server: lists (paged with continue tokens) return the current
//! state at the current resourceVersion; a watch from version `N` replays the logged events
//! after `N` and then follows new ones live; a watch from `""`/`"0"` (or with
//! `send_initial_events`) starts with synthetic `Added` events for the current state.
//!
//! On top of that, failures can be scripted: fail the next lists or watch calls, drop
//! events, close every open watch, inject an error into the open watches, compact the
//! history (watches from older versions get 410 `Gone`), end every watch after a number of
//! events, or refuse watch-list requests. Every call is recorded for assertions.
//!
//! Objects must carry numeric resourceVersions that grow with every change (the fake does
//! not rewrite objects); an object whose version does not parse gets "current + 1".

use crate::cache::key::object_key;
use crate::cache::list_watch::{
    EventSource, ListPage, ListRequest, ListerWatcher, WatchError, WatchEvent, WatchRequest,
};
use crate::object::KubeObject;
use async_trait::async_trait;
use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// A `list` with these options.
    List(ListRequest),
    /// A `watch` with these options.
    Watch(WatchRequest),
}

struct State<K> {
    objects: BTreeMap<String, Arc<K>>,
    rv: u64,
    log: Vec<(u64, WatchEvent<K>)>,
    /// Watches from a version below this one get `Gone`.
    floor: u64,
    list_failures: VecDeque<WatchError>,
    watch_failures: VecDeque<WatchError>,
    calls: Vec<Call>,
    drop_next: usize,
    epoch: u64,
    close_epoch: u64,
    stream_error: Option<(u64, WatchError)>,
    close_after: Option<usize>,
    supports_watch_list: bool,
    gone_as_stream_error: bool,
    paged_lists_at_exact_version: bool,
    whole_lists_at_zero: bool,
}

struct Shared<K> {
    state: Mutex<State<K>>,
    notify: Notify,
    open_watches: AtomicUsize,
}

/// The scriptable fake. See the [module docs](self). Cheap to share as an `Arc`.
pub struct FakeListerWatcher<K> {
    shared: Arc<Shared<K>>,
}

impl<K: KubeObject> Default for FakeListerWatcher<K> {
    fn default() -> Self {
        Self::new()
    }
}

fn parse_rv(rv: &str) -> Option<u64> {
    rv.parse().ok()
}

impl<K: KubeObject> FakeListerWatcher<K> {
    /// An empty fake at resourceVersion 0 that supports watch-list.
    pub fn new() -> FakeListerWatcher<K> {
        FakeListerWatcher {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    objects: BTreeMap::new(),
                    rv: 0,
                    log: Vec::new(),
                    floor: 0,
                    list_failures: VecDeque::new(),
                    watch_failures: VecDeque::new(),
                    calls: Vec::new(),
                    drop_next: 0,
                    epoch: 0,
                    close_epoch: 0,
                    stream_error: None,
                    close_after: None,
                    supports_watch_list: true,
                    gone_as_stream_error: false,
                    paged_lists_at_exact_version: false,
                    whole_lists_at_zero: false,
                }),
                notify: Notify::new(),
                open_watches: AtomicUsize::new(0),
            }),
        }
    }

    fn record(&self, obj: Arc<K>, event: impl FnOnce(Arc<K>) -> WatchEvent<K>, delete: bool) {
        let mut st = self.shared.state.lock();
        let rv = obj
            .resource_version()
            .and_then(parse_rv)
            .filter(|rv| *rv > st.rv)
            .unwrap_or(st.rv + 1);
        st.rv = rv;
        let key = object_key(&*obj);
        if delete {
            st.objects.remove(&key);
        } else {
            st.objects.insert(key, Arc::clone(&obj));
        }
        st.log.push((rv, event(obj)));
        drop(st);
        self.shared.notify.notify_waiters();
    }

    /// Creates `obj` (an `ADDED` event at its resourceVersion).
    pub fn add(&self, obj: Arc<K>) {
        self.record(obj, WatchEvent::Added, false);
    }

    /// Changes `obj` (a `MODIFIED` event).
    pub fn modify(&self, obj: Arc<K>) {
        self.record(obj, WatchEvent::Modified, false);
    }

    /// Deletes the object with `obj`'s key (a `DELETED` event carrying `obj`).
    pub fn delete(&self, obj: Arc<K>) {
        self.record(obj, WatchEvent::Deleted, true);
    }

    /// Sets the current state of `obj` without any event (as if the event was lost).
    pub fn set_silently(&self, obj: Arc<K>) {
        let mut st = self.shared.state.lock();
        if let Some(rv) = obj.resource_version().and_then(parse_rv) {
            st.rv = st.rv.max(rv);
        }
        st.objects.insert(object_key(&*obj), obj);
    }

    /// Removes the object under `key` without any event (a lost deletion).
    pub fn remove_silently(&self, key: &str) {
        let mut st = self.shared.state.lock();
        st.objects.remove(key);
        st.rv += 1;
    }

    /// Logs a bookmark at version `rv` (raising the current version to it).
    pub fn bookmark_at(&self, rv: u64) {
        let mut st = self.shared.state.lock();
        st.rv = st.rv.max(rv);
        st.log.push((
            rv,
            WatchEvent::Bookmark {
                resource_version: rv.to_string(),
                initial_events_end: false,
            },
        ));
        drop(st);
        self.shared.notify.notify_waiters();
    }

    /// Forgets the history up to the current version: watches from an older version (and
    /// open watches that had not yet read the forgotten events) get `Gone`.
    pub fn compact(&self) {
        let mut st = self.shared.state.lock();
        st.floor = st.rv;
        let floor = st.floor;
        st.log.retain(|(rv, _)| *rv > floor);
        drop(st);
        self.shared.notify.notify_waiters();
    }

    /// The next lists fail with these errors, in order.
    pub fn fail_next_lists(&self, errors: Vec<WatchError>) {
        self.shared.state.lock().list_failures.extend(errors);
    }

    /// The next watch calls fail with these errors, in order.
    pub fn fail_next_watches(&self, errors: Vec<WatchError>) {
        self.shared.state.lock().watch_failures.extend(errors);
    }

    /// The next `n` events any watch would deliver are silently lost instead.
    pub fn drop_next_events(&self, n: usize) {
        self.shared.state.lock().drop_next += n;
    }

    /// Ends every open watch cleanly (their `next` returns `None`).
    pub fn close_watches(&self) {
        let mut st = self.shared.state.lock();
        st.epoch += 1;
        st.close_epoch = st.epoch;
        drop(st);
        self.shared.notify.notify_waiters();
    }

    /// Every open watch reports `error` (once, then ends).
    pub fn inject_stream_error(&self, error: WatchError) {
        let mut st = self.shared.state.lock();
        st.epoch += 1;
        st.stream_error = Some((st.epoch, error));
        drop(st);
        self.shared.notify.notify_waiters();
    }

    /// Ends each watch cleanly after it delivered `n` events (`None`: never).
    pub fn close_each_watch_after(&self, n: Option<usize>) {
        self.shared.state.lock().close_after = n;
    }

    /// Whether watch requests with `send_initial_events` are accepted (default true). When
    /// not, they fail with [`WatchError::Other`].
    pub fn set_supports_watch_list(&self, supported: bool) {
        self.shared.state.lock().supports_watch_list = supported;
    }

    /// Whether a watch from a compacted version fails inside the stream (as a real server
    /// does with an `ERROR` event) rather than at the call (the default).
    pub fn set_gone_as_stream_error(&self, in_stream: bool) {
        self.shared.state.lock().gone_as_stream_error = in_stream;
    }

    /// Whether a paged list (one with a limit) at an explicit version `N` is answered as
    /// of version `N` (kube-apiserver serves it from storage at exactly that version, as
    /// long as storage has not compacted it), instead of at the current version. The
    /// objects listed are still the current ones: only the version told differs.
    pub fn set_paged_lists_at_exact_version(&self, exact: bool) {
        self.shared.state.lock().paged_lists_at_exact_version = exact;
    }

    /// Whether a list at resourceVersion `"0"` is answered whole, whatever its limit (as a
    /// server with a watch cache answers it), instead of paged.
    pub fn set_whole_lists_at_zero(&self, whole: bool) {
        self.shared.state.lock().whole_lists_at_zero = whole;
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.state.lock().calls.clone()
    }

    /// The options of every list call so far.
    pub fn list_calls(&self) -> Vec<ListRequest> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::List(l) => Some(l),
                Call::Watch(_) => None,
            })
            .collect()
    }

    /// The options of every watch call so far.
    pub fn watch_calls(&self) -> Vec<WatchRequest> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Watch(w) => Some(w),
                Call::List(_) => None,
            })
            .collect()
    }

    /// Forgets the recorded calls.
    pub fn clear_calls(&self) {
        self.shared.state.lock().calls.clear();
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.state.lock().rv
    }

    /// The current objects, by key.
    pub fn objects(&self) -> BTreeMap<String, Arc<K>> {
        self.shared.state.lock().objects.clone()
    }

    /// How many watch streams are open (created and not dropped).
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl<K: KubeObject> ListerWatcher<K> for FakeListerWatcher<K> {
    async fn list(&self, request: ListRequest) -> Result<ListPage<K>, WatchError> {
        let mut st = self.shared.state.lock();
        st.calls.push(Call::List(request.clone()));
        if let Some(err) = st.list_failures.pop_front() {
            return Err(err);
        }
        let (offset, rv) = match &request.continue_token {
            Some(token) => {
                let (offset, rv) = token
                    .split_once(':')
                    .and_then(|(o, r)| Some((o.parse::<usize>().ok()?, r.parse::<u64>().ok()?)))
                    .ok_or_else(|| WatchError::Other("invalid continue token".to_string()))?;
                (offset, rv)
            }
            None => match parse_rv(&request.resource_version) {
                Some(n) if n > 0 && request.limit.is_some() && st.paged_lists_at_exact_version => {
                    (0, n.min(st.rv))
                }
                _ => (0, st.rv),
            },
        };
        let whole = st.whole_lists_at_zero && request.resource_version == "0";
        let limit = request
            .limit
            .filter(|l| *l > 0 && !whole)
            .map(|l| l as usize);
        let take = limit.unwrap_or(usize::MAX);
        let items: Vec<Arc<K>> = st
            .objects
            .values()
            .skip(offset)
            .take(take)
            .cloned()
            .collect();
        let next = offset + items.len();
        let continue_token = if limit.is_some() && next < st.objects.len() {
            Some(format!("{next}:{rv}"))
        } else {
            None
        };
        Ok(ListPage {
            items,
            resource_version: rv.to_string(),
            continue_token,
        })
    }

    async fn watch(&self, request: WatchRequest) -> Result<Box<dyn EventSource<K>>, WatchError> {
        let mut st = self.shared.state.lock();
        st.calls.push(Call::Watch(request.clone()));
        if let Some(err) = st.watch_failures.pop_front() {
            return Err(err);
        }
        if request.send_initial_events && !st.supports_watch_list {
            return Err(WatchError::Other(
                "sendInitialEvents is not supported".to_string(),
            ));
        }
        let from = parse_rv(&request.resource_version).filter(|rv| *rv > 0);
        let mut pending = VecDeque::new();
        let mut gone = false;
        let last_rv = match from {
            Some(rv) if !request.send_initial_events => {
                if rv < st.floor {
                    if st.gone_as_stream_error {
                        gone = true;
                    } else {
                        return Err(WatchError::Gone);
                    }
                }
                rv
            }
            _ => {
                pending.extend(st.objects.values().cloned().map(WatchEvent::Added));
                if request.send_initial_events {
                    pending.push_back(WatchEvent::Bookmark {
                        resource_version: st.rv.to_string(),
                        initial_events_end: true,
                    });
                }
                st.rv
            }
        };
        self.shared.open_watches.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(FakeWatch {
            shared: Arc::clone(&self.shared),
            opened_epoch: st.epoch,
            last_rv,
            pending,
            delivered: 0,
            gone,
            done: false,
        }))
    }
}

struct FakeWatch<K> {
    shared: Arc<Shared<K>>,
    opened_epoch: u64,
    last_rv: u64,
    pending: VecDeque<WatchEvent<K>>,
    delivered: usize,
    gone: bool,
    done: bool,
}

impl<K> Drop for FakeWatch<K> {
    fn drop(&mut self) {
        self.shared.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<K: KubeObject> FakeWatch<K> {
    fn poll_state(&mut self) -> Option<Option<Result<WatchEvent<K>, WatchError>>> {
        if self.done {
            return Some(None);
        }
        if self.gone {
            self.done = true;
            return Some(Some(Err(WatchError::Gone)));
        }
        let mut st = self.shared.state.lock();
        if st.close_epoch > self.opened_epoch {
            self.done = true;
            return Some(None);
        }
        if let Some((epoch, err)) = &st.stream_error {
            if *epoch > self.opened_epoch {
                self.done = true;
                return Some(Some(Err(err.clone())));
            }
        }
        if let Some(limit) = st.close_after {
            if self.delivered >= limit {
                self.done = true;
                return Some(None);
            }
        }
        if let Some(event) = self.pending.pop_front() {
            self.delivered += 1;
            return Some(Some(Ok(event)));
        }
        // History this watch had not read yet was compacted away.
        if self.last_rv < st.floor {
            self.done = true;
            return Some(Some(Err(WatchError::Gone)));
        }
        // Read ahead a chunk of the log under this one lock (events to drop are dropped as
        // they are read, as if delivered one by one at this moment).
        const READ_AHEAD: usize = 128;
        let st = &mut *st;
        loop {
            let start = st.log.partition_point(|(rv, _)| *rv <= self.last_rv);
            let chunk = st.log.get(start..).unwrap_or_default();
            if chunk.is_empty() {
                return None;
            }
            for (rv, event) in chunk.iter().take(READ_AHEAD) {
                self.last_rv = *rv;
                if st.drop_next > 0 {
                    st.drop_next -= 1;
                    continue;
                }
                self.pending.push_back(event.clone());
            }
            if let Some(event) = self.pending.pop_front() {
                self.delivered += 1;
                return Some(Some(Ok(event)));
            }
        }
    }
}

#[async_trait]
impl<K: KubeObject> EventSource<K> for FakeWatch<K> {
    fn try_next(&mut self) -> Option<Result<WatchEvent<K>, WatchError>> {
        // An end of stream is left for `next` to report.
        match self.poll_state() {
            Some(Some(result)) => Some(result),
            _ => None,
        }
    }

    async fn next(&mut self) -> Option<Result<WatchEvent<K>, WatchError>> {
        let shared = Arc::clone(&self.shared);
        loop {
            let mut notified = pin!(shared.notify.notified());
            notified.as_mut().enable();
            if let Some(result) = self.poll_state() {
                return result;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::DynamicObject;
    use serde_json::json;

    fn obj(name: &str, rv: u64) -> Arc<DynamicObject> {
        let v = json!({"metadata": {"name": name, "resourceVersion": rv.to_string()}});
        Arc::new(DynamicObject::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap())
    }

    fn names(ev: &WatchEvent<DynamicObject>) -> String {
        match ev {
            WatchEvent::Added(o) => format!("+{}", o.name()),
            WatchEvent::Modified(o) => format!("~{}", o.name()),
            WatchEvent::Deleted(o) => format!("-{}", o.name()),
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => format!(
                "@{resource_version}{}",
                if *initial_events_end { "!" } else { "" }
            ),
        }
    }

    #[tokio::test]
    async fn paged_list_and_replaying_watch() {
        let f = FakeListerWatcher::new();
        for i in 1..=3 {
            f.add(obj(&format!("o{i}"), i));
        }
        f.modify(obj("o1", 4));
        let p1 = f
            .list(ListRequest {
                resource_version: "0".into(),
                limit: Some(2),
                continue_token: None,
            })
            .await
            .unwrap();
        assert_eq!(p1.items.len(), 2);
        let p2 = f
            .list(ListRequest {
                resource_version: String::new(),
                limit: Some(2),
                continue_token: p1.continue_token.clone(),
            })
            .await
            .unwrap();
        assert_eq!(p2.items.len(), 1);
        assert!(p2.continue_token.is_none());
        assert_eq!(p2.resource_version, "4");

        let mut w = f
            .watch(WatchRequest {
                resource_version: "2".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(names(&w.next().await.unwrap().unwrap()), "+o3");
        assert_eq!(names(&w.next().await.unwrap().unwrap()), "~o1");
        f.delete(obj("o2", 5));
        assert_eq!(names(&w.next().await.unwrap().unwrap()), "-o2");
        assert_eq!(f.open_watches(), 1);
        f.close_watches();
        assert!(w.next().await.is_none());
        drop(w);
        assert_eq!(f.open_watches(), 0);
        assert_eq!(f.calls().len(), 3);
    }

    #[tokio::test]
    async fn compaction_drops_and_failures() {
        let f = FakeListerWatcher::new();
        f.add(obj("a", 1));
        f.add(obj("b", 2));
        f.compact();
        let err = f
            .watch(WatchRequest {
                resource_version: "1".into(),
                ..Default::default()
            })
            .await
            .err();
        assert_eq!(err, Some(WatchError::Gone));
        f.set_gone_as_stream_error(true);
        let mut w = f
            .watch(WatchRequest {
                resource_version: "1".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(w.next().await.unwrap().err(), Some(WatchError::Gone));
        assert!(w.next().await.is_none());

        let mut w = f
            .watch(WatchRequest {
                resource_version: "2".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        f.drop_next_events(1);
        f.add(obj("c", 3));
        f.add(obj("d", 4));
        assert_eq!(names(&w.next().await.unwrap().unwrap()), "+d");
        f.inject_stream_error(WatchError::IdleTimeout);
        assert_eq!(w.next().await.unwrap().err(), Some(WatchError::IdleTimeout));

        f.fail_next_lists(vec![WatchError::ConnectionRefused]);
        assert!(f.list(ListRequest::default()).await.is_err());
        assert_eq!(f.list(ListRequest::default()).await.unwrap().items.len(), 4);
    }

    #[tokio::test]
    async fn watch_list_initial_events() {
        let f = FakeListerWatcher::new();
        f.add(obj("a", 1));
        f.add(obj("b", 2));
        let mut w = f
            .watch(WatchRequest {
                send_initial_events: true,
                allow_bookmarks: true,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(names(&w.next().await.unwrap().unwrap()));
        }
        assert_eq!(got, vec!["+a", "+b", "@2!"]);
        f.close_each_watch_after(Some(4));
        f.add(obj("c", 3));
        assert_eq!(names(&w.next().await.unwrap().unwrap()), "+c");
        assert!(w.next().await.is_none());
    }
}
