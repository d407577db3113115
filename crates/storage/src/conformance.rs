//! The storage conformance suite: one set of checks that every [`Storage`] backend must pass.
//!
//! Each `check_*` function takes a fresh store that nobody else writes to and panics (with a
//! message naming the broken guarantee) if the backend violates the contract; they are meant
//! to be called from `#[tokio::test]` functions (a multi-threaded runtime is not required).
//! [`run_all`] runs every check, each on a new store from `make`; the etcd backend calls the
//! checks one by one from its own test file.
//!
//! Revisions are checked relative to the store's revision when a check starts (its *base*,
//! read with [`Storage::current_revision`]): a fresh memory or embedded store starts at 0, a
//! fresh etcd at 1 (etcd's revisions are used unchanged). Within a check, the first write gets
//! `base + 1` and every further write exactly one more, because nothing else writes to the
//! store meanwhile.

use crate::{
    Event, EventKind, RangeRequest, Revision, Storage, StorageError, WatchMessage, WatchStream,
    WATCH_CHANNEL_CAPACITY,
};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

/// How long a check waits for an expected watch message before failing.
const WAIT: Duration = Duration::from_secs(10);

/// Runs every check of the suite, each on a fresh empty store from `make`.
/// Panics on the first violated guarantee.
pub async fn run_all<S: Storage>(mut make: impl FnMut() -> S) {
    check_revisions_increase(Arc::new(make())).await;
    check_create_update_delete_preconditions(Arc::new(make())).await;
    check_reads_at_old_revisions(Arc::new(make())).await;
    check_range_paging_and_prefix(Arc::new(make())).await;
    check_watch_replays_then_goes_live(Arc::new(make())).await;
    check_watch_no_gap_under_concurrent_writes(Arc::new(make())).await;
    check_watch_from_current_and_future(Arc::new(make())).await;
    check_compaction(Arc::new(make())).await;
    check_slow_watcher_overflows(Arc::new(make())).await;
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The next watch message, failing the check if none arrives within [`WAIT`].
async fn next_msg(w: &mut WatchStream) -> Option<Result<WatchMessage, StorageError>> {
    match tokio::time::timeout(WAIT, w.next()).await {
        Ok(m) => m,
        Err(_) => panic!("watch: no message within {WAIT:?}"),
    }
}

/// Collects events from `w` until one with revision >= `until` arrives (skipping progress
/// messages). Panics on errors or a closed stream.
async fn collect_until(w: &mut WatchStream, until: Revision) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    while out.last().is_none_or(|e| e.revision < until) {
        match next_msg(w).await {
            Some(Ok(WatchMessage::Events(evs))) => {
                assert!(!evs.is_empty(), "watch: empty event batch");
                out.extend(evs);
            }
            Some(Ok(WatchMessage::Progress(_))) => {}
            Some(Err(e)) => panic!("watch: unexpected error {e}"),
            None => panic!("watch: stream ended early"),
        }
    }
    out
}

/// The store's revision at the start of a check (the check's base).
async fn base_revision<S: Storage>(s: &S) -> Revision {
    s.current_revision()
        .await
        .unwrap_or_else(|e| panic!("current_revision: {e}"))
}

/// Every successful write gets a revision above every earlier one, across keys, the first one
/// directly after the store's starting revision, each next one exactly one more;
/// `current_revision` follows.
pub async fn check_revisions_increase<S: Storage>(s: Arc<S>) {
    let base = base_revision(&*s).await;
    assert_eq!(
        s.current_revision().await.unwrap(),
        base,
        "reading the revision does not move it"
    );
    let a = s.create(b("/a"), b("1")).await.unwrap();
    let c = s.create(b("/c"), b("1")).await.unwrap();
    let a2 = s.update(b("/a"), b("2"), a.mod_revision).await.unwrap();
    let (_, del) = s.delete(b("/c"), None).await.unwrap();
    let revs = [a.mod_revision, c.mod_revision, a2.mod_revision, del];
    assert_eq!(
        revs[0],
        base + 1,
        "first write is one after the base {base}"
    );
    assert!(
        revs.windows(2).all(|w| w[0] + 1 == w[1]),
        "each write is one revision after the previous: {revs:?}"
    );
    assert_eq!(s.current_revision().await.unwrap(), del);
    assert_eq!((a.create_revision, a.version), (a.mod_revision, 1));
    assert_eq!((a2.create_revision, a2.version), (a.mod_revision, 2));
}

/// AlreadyExists, NotFound and Conflict (carrying the current state), and delete with an
/// expected revision.
pub async fn check_create_update_delete_preconditions<S: Storage>(s: Arc<S>) {
    let a = s.create(b("/a"), b("1")).await.unwrap();
    assert_eq!(
        s.create(b("/a"), b("x")).await,
        Err(StorageError::AlreadyExists)
    );
    assert_eq!(
        s.update(b("/missing"), b("x"), 1).await,
        Err(StorageError::NotFound)
    );
    assert_eq!(
        s.delete(b("/missing"), None).await,
        Err(StorageError::NotFound)
    );
    let a2 = s.update(b("/a"), b("2"), a.mod_revision).await.unwrap();
    match s.update(b("/a"), b("3"), a.mod_revision).await {
        Err(StorageError::Conflict { current }) => assert_eq!(*current, a2),
        other => panic!("stale update: expected Conflict, got {other:?}"),
    }
    match s.delete(b("/a"), Some(a.mod_revision)).await {
        Err(StorageError::Conflict { current }) => assert_eq!(*current, a2),
        other => panic!("stale delete: expected Conflict, got {other:?}"),
    }
    assert_eq!(
        s.get(b"/a").await.unwrap(),
        Some(a2.clone()),
        "failed ops changed nothing"
    );
    let (last, rev) = s.delete(b("/a"), Some(a2.mod_revision)).await.unwrap();
    assert_eq!(last, a2, "delete returns the last state");
    assert!(rev > a2.mod_revision);
    assert_eq!(s.get(b"/a").await.unwrap(), None);
    let again = s.create(b("/a"), b("new")).await.unwrap();
    assert_eq!(
        (again.create_revision, again.version),
        (again.mod_revision, 1)
    );
    assert!(again.mod_revision > rev);
}

/// get/range at old revisions see the state as of that revision.
pub async fn check_reads_at_old_revisions<S: Storage>(s: Arc<S>) {
    let a1 = s.create(b("/a"), b("1")).await.unwrap();
    let a2 = s.update(b("/a"), b("2"), a1.mod_revision).await.unwrap();
    let b1 = s.create(b("/b"), b("1")).await.unwrap();
    let (_, del) = s.delete(b("/a"), None).await.unwrap();
    let at = |rev: Revision| {
        let s = s.clone();
        async move {
            let resp = s
                .range(RangeRequest {
                    revision: rev,
                    ..RangeRequest::prefix("/")
                })
                .await
                .unwrap();
            assert_eq!(resp.revision, rev);
            resp.kvs
        }
    };
    assert_eq!(at(a1.mod_revision).await, vec![a1.clone()]);
    assert_eq!(at(a2.mod_revision).await, vec![a2.clone()]);
    assert_eq!(at(b1.mod_revision).await, vec![a2.clone(), b1.clone()]);
    assert_eq!(at(del).await, vec![b1.clone()]);
    // Single-key range (empty end) at an old revision.
    let single = s
        .range(RangeRequest {
            start: b("/a"),
            end: Bytes::new(),
            revision: a1.mod_revision,
            limit: 0,
        })
        .await
        .unwrap();
    assert_eq!(single.kvs, vec![a1]);
    let now = s.range(RangeRequest::prefix("/")).await.unwrap();
    assert_eq!((now.revision, now.kvs), (del, vec![b1]));
    match s
        .range(RangeRequest {
            revision: del + 5,
            ..RangeRequest::prefix("/")
        })
        .await
    {
        Err(StorageError::FutureRevision { requested, current }) => {
            assert_eq!((requested, current), (del + 5, del))
        }
        other => panic!("future read: expected FutureRevision, got {other:?}"),
    }
}

/// limit / more / count, continuing after the last key, and prefix bounds.
pub async fn check_range_paging_and_prefix<S: Storage>(s: Arc<S>) {
    for i in 0..10 {
        s.create(b(&format!("/p/{i:02}")), b("v")).await.unwrap();
    }
    s.create(b("/p"), b("not under /p/")).await.unwrap();
    s.create(b("/q/0"), b("other")).await.unwrap();
    s.create(b("/o/9"), b("other")).await.unwrap();
    let rev = s.current_revision().await.unwrap();
    let mut req = RangeRequest {
        limit: 3,
        ..RangeRequest::prefix("/p/")
    };
    let mut seen = Vec::new();
    loop {
        let page = s.range(req.clone()).await.unwrap();
        assert_eq!(
            page.count,
            10 - seen.len(),
            "count is of the remaining range"
        );
        assert!(page.kvs.len() <= 3);
        seen.extend(page.kvs.iter().map(|kv| kv.key.clone()));
        if !page.more {
            break;
        }
        assert_eq!(page.kvs.len(), 3, "a page with more=true is full");
        // Continue just after the last key, at the same revision.
        let mut next = page.kvs[2].key.to_vec();
        next.push(0);
        req.start = Bytes::from(next);
        req.revision = page.revision;
        assert_eq!(page.revision, rev);
    }
    let want: Vec<Bytes> = (0..10).map(|i| b(&format!("/p/{i:02}"))).collect();
    assert_eq!(seen, want);
    let all = s.range(RangeRequest::prefix("")).await.unwrap();
    assert_eq!(
        (all.count, all.more),
        (13, false),
        "empty prefix = every key"
    );
    let exact = s
        .range(RangeRequest {
            start: b("/p"),
            end: Bytes::new(),
            revision: 0,
            limit: 0,
        })
        .await
        .unwrap();
    assert_eq!(exact.count, 1);
    assert_eq!(exact.kvs[0].value, b("not under /p/"));
}

/// A watch from an old revision replays exactly the missed changes (with previous values)
/// in order, then delivers live changes.
pub async fn check_watch_replays_then_goes_live<S: Storage>(s: Arc<S>) {
    let a = s.create(b("/w/a"), b("1")).await.unwrap();
    s.create(b("/x/other"), b("1")).await.unwrap();
    let a2 = s.update(b("/w/a"), b("2"), a.mod_revision).await.unwrap();
    let bkv = s.create(b("/w/b"), b("1")).await.unwrap();
    let (_, del) = s.delete(b("/w/a"), None).await.unwrap();
    let mut w = s.watch(b("/w/"), a.mod_revision).await.unwrap();
    let replay = collect_until(&mut w, del).await;
    let summary: Vec<(EventKind, Revision)> = replay.iter().map(|e| (e.kind, e.revision)).collect();
    assert_eq!(
        summary,
        vec![
            (EventKind::Update, a2.mod_revision),
            (EventKind::Create, bkv.mod_revision),
            (EventKind::Delete, del),
        ]
    );
    assert_eq!(replay[0].prev.as_ref(), Some(&a), "update carries prev");
    assert_eq!(replay[0].kv, a2);
    assert_eq!(replay[1].prev, None, "create has no prev");
    assert_eq!(
        replay[2].prev.as_ref(),
        Some(&a2),
        "delete carries the last state"
    );
    assert_eq!(
        (replay[2].kv.key.clone(), replay[2].kv.mod_revision),
        (b("/w/a"), del)
    );
    assert!(replay[2].kv.value.is_empty());
    // Live.
    s.create(b("/x/ignored"), b("1")).await.unwrap();
    let c = s.create(b("/w/c"), b("1")).await.unwrap();
    let live = collect_until(&mut w, c.mod_revision).await;
    assert_eq!(live.len(), 1, "only the change under the prefix");
    assert_eq!(live[0].kv, c);
}

/// Watches started at various points while writers run see every change after their start
/// exactly once, in order.
pub async fn check_watch_no_gap_under_concurrent_writes<S: Storage>(s: Arc<S>) {
    const WRITERS: usize = 4;
    const PER_WRITER: usize = 50;
    let base = base_revision(&*s).await;
    let total = base + (WRITERS * PER_WRITER) as Revision;
    let mut tasks = Vec::new();
    for t in 0..WRITERS {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let key = b(&format!("/g/{t}"));
            let mut kv = s.create(key.clone(), b("0")).await.unwrap();
            for i in 1..PER_WRITER {
                kv = s
                    .update(key.clone(), b(&i.to_string()), kv.mod_revision)
                    .await
                    .unwrap();
            }
        }));
    }
    let mut watchers = Vec::new();
    for _ in 0..8 {
        let after = s.current_revision().await.unwrap();
        watchers.push((after, s.watch(b("/g/"), after).await.unwrap()));
        tokio::task::yield_now().await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(s.current_revision().await.unwrap(), total);
    for (after, mut w) in watchers {
        if after == total {
            continue;
        }
        let evs = collect_until(&mut w, total).await;
        let revs: Vec<Revision> = evs.iter().map(|e| e.revision).collect();
        let want: Vec<Revision> = (after + 1..=total).collect();
        assert_eq!(revs, want, "watch after {after}: gap or duplicate");
        for e in &evs {
            if e.kind == EventKind::Update {
                let prev = e.prev.as_ref().expect("update has prev");
                assert_eq!(prev.version + 1, e.kv.version);
            }
        }
    }
}

/// A watch from the current revision sees only new changes; one from a future revision
/// starts when the store gets there.
pub async fn check_watch_from_current_and_future<S: Storage>(s: Arc<S>) {
    s.create(b("/f/old"), b("1")).await.unwrap();
    let now = s.current_revision().await.unwrap();
    let mut w = s.watch(b("/f/"), now).await.unwrap();
    let mut future = s.watch(b("/f/"), now + 2).await.unwrap();
    let n1 = s.create(b("/f/n1"), b("1")).await.unwrap();
    let n2 = s.create(b("/f/n2"), b("1")).await.unwrap();
    let n3 = s.create(b("/f/n3"), b("1")).await.unwrap();
    let evs = collect_until(&mut w, n3.mod_revision).await;
    let keys: Vec<Bytes> = evs.iter().map(|e| e.kv.key.clone()).collect();
    assert_eq!(keys, vec![n1.key, n2.key.clone(), n3.key.clone()]);
    let evs = collect_until(&mut future, n3.mod_revision).await;
    let revs: Vec<Revision> = evs.iter().map(|e| e.revision).collect();
    assert_eq!(
        revs,
        vec![n3.mod_revision],
        "future watch starts after its revision"
    );
    assert_eq!(n2.mod_revision, now + 2);
}

/// Compaction: older revisions are unreadable for range and watch, newer ones still work,
/// each key's latest state at the compacted revision is kept.
pub async fn check_compaction<S: Storage>(s: Arc<S>) {
    let a1 = s.create(b("/c/a"), b("1")).await.unwrap();
    let a2 = s.update(b("/c/a"), b("2"), a1.mod_revision).await.unwrap();
    s.create(b("/c/b"), b("1")).await.unwrap();
    s.delete(b("/c/b"), None).await.unwrap();
    let d1 = s.create(b("/c/d"), b("1")).await.unwrap();
    let c = d1.mod_revision; // compact at the latest write
    let a3 = s.update(b("/c/a"), b("3"), a2.mod_revision).await.unwrap();
    s.compact(c).await.unwrap();
    assert_eq!(s.compacted_revision().await.unwrap(), c);
    match s
        .range(RangeRequest {
            revision: c - 1,
            ..RangeRequest::prefix("/c/")
        })
        .await
    {
        Err(StorageError::Compacted {
            requested,
            compacted,
        }) => assert_eq!((requested, compacted), (c - 1, c)),
        other => panic!("range below compaction: expected Compacted, got {other:?}"),
    }
    let at_c = s
        .range(RangeRequest {
            revision: c,
            ..RangeRequest::prefix("/c/")
        })
        .await
        .unwrap();
    assert_eq!(
        at_c.kvs,
        vec![a2.clone(), d1.clone()],
        "state at the compacted revision"
    );
    assert!(
        matches!(
            s.watch(b("/c/"), c - 1).await.err(),
            Some(StorageError::Compacted { .. })
        ),
        "watch from before the compacted revision must fail"
    );
    let mut w = s.watch(b("/c/"), c).await.unwrap();
    let evs = collect_until(&mut w, a3.mod_revision).await;
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].prev.as_ref(), Some(&a2), "prev survives compaction");
    assert_eq!(evs[0].kv, a3);
    // No-op and future compactions.
    s.compact(c - 1).await.unwrap();
    assert_eq!(s.compacted_revision().await.unwrap(), c);
    let cur = s.current_revision().await.unwrap();
    assert!(matches!(
        s.compact(cur + 1).await,
        Err(StorageError::FutureRevision { .. })
    ));
    // Writes continue normally after compaction.
    let e = s.create(b("/c/e"), b("1")).await.unwrap();
    assert_eq!(e.mod_revision, cur + 1);
    assert_eq!(s.range(RangeRequest::prefix("/c/")).await.unwrap().count, 3);
}

/// A watcher that is not read does not block writers; it ends with WatchOverflow after the
/// messages it had queued.
pub async fn check_slow_watcher_overflows<S: Storage>(s: Arc<S>) {
    let base = base_revision(&*s).await;
    let mut slow = s.watch(b("/s/"), base).await.unwrap();
    let writes = WATCH_CHANNEL_CAPACITY + 16;
    let all_written = async {
        for i in 0..writes {
            s.create(b(&format!("/s/{i:05}")), b("v")).await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(120), all_written)
        .await
        .expect("writes blocked by a slow watcher");
    let mut delivered = 0usize;
    let mut last = base;
    loop {
        match next_msg(&mut slow).await {
            Some(Ok(WatchMessage::Events(evs))) => {
                for e in evs {
                    assert_eq!(e.revision, last + 1, "queued events stay contiguous");
                    last = e.revision;
                    delivered += 1;
                }
            }
            Some(Ok(WatchMessage::Progress(_))) => {}
            Some(Err(StorageError::WatchOverflow)) => break,
            Some(Err(e)) => panic!("slow watcher: expected WatchOverflow, got {e}"),
            None => panic!("slow watcher: stream ended without WatchOverflow"),
        }
    }
    assert!(
        delivered < writes,
        "an overflowed watcher cannot have everything"
    );
    assert!(
        next_msg(&mut slow).await.is_none(),
        "stream ends after the error"
    );
    // Resuming from the last revision seen works.
    let mut again = s.watch(b("/s/"), last).await.unwrap();
    let rest = collect_until(&mut again, base + writes as Revision).await;
    assert_eq!(rest.len(), writes - delivered);
}
