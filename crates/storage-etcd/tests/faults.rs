//! etcd-specific behaviour: watches that survive an etcd restart, key namespaces, compaction
//! made by another client, and errors while etcd is down.

mod common;

use bytes::Bytes;
use common::EtcdServer;
use std::time::Duration;
use storage::{Event, RangeRequest, Revision, Storage, StorageError, WatchMessage, WatchStream};
use storage_etcd::{ConnectError, EtcdOptions, EtcdStorage};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Events from `w` until one at `until` or later; panics on errors or after 20 s of silence.
async fn events_until(w: &mut WatchStream, until: Revision) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    while out.last().is_none_or(|e| e.revision < until) {
        match tokio::time::timeout(Duration::from_secs(20), w.next()).await {
            Ok(Some(Ok(WatchMessage::Events(evs)))) => out.extend(evs),
            Ok(Some(Ok(WatchMessage::Progress(_)))) => {}
            Ok(Some(Err(e))) => panic!("watch error: {e}"),
            Ok(None) => panic!("watch ended"),
            Err(_) => panic!("no watch message within 20 s (have {} events)", out.len()),
        }
    }
    out
}

/// Creates `key`, retrying while etcd is still coming back (a retried create that reports
/// AlreadyExists was applied by an earlier attempt).
async fn create_retrying(s: &EtcdStorage, key: &str) -> Revision {
    for _ in 0..100 {
        match s.create(b(key), b("v")).await {
            Ok(kv) => return kv.mod_revision,
            Err(StorageError::AlreadyExists) => {
                return s.get(key.as_bytes()).await.unwrap().unwrap().mod_revision
            }
            Err(StorageError::Unavailable(_)) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("create {key}: {e}"),
        }
    }
    panic!("create {key}: etcd did not come back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_survives_etcd_restart_without_gap_or_duplicate() {
    let mut etcd = EtcdServer::start().await;
    let s = etcd.storage("/restart/").await;
    let start = s.create(b("/k/0"), b("v")).await.unwrap().mod_revision;
    let mut w = s.watch(b("/k/"), start).await.unwrap();
    let mut last = start;
    for i in 1..=5 {
        last = s
            .create(b(&format!("/k/{i}")), b("v"))
            .await
            .unwrap()
            .mod_revision;
    }
    // Read part of the stream before the crash, so the resume point is mid-way.
    let before = events_until(&mut w, start + 2).await;
    etcd.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Reads fail as Unavailable while etcd is down, never hang past the budget.
    let down = EtcdStorage::connect(
        &[etcd.endpoint()],
        EtcdOptions {
            connect_timeout: Duration::from_millis(300),
            ..EtcdOptions::default()
        },
    )
    .await;
    assert!(
        matches!(down, Err(ConnectError::Unreachable { .. })),
        "connect while down: {down:?}"
    );
    etcd.restart().await;
    for i in 6..=10 {
        last = create_retrying(&s, &format!("/k/{i}")).await;
    }
    let after = events_until(&mut w, last).await;
    let revs: Vec<Revision> = before.iter().chain(&after).map(|e| e.revision).collect();
    let want: Vec<Revision> = (start + 1..=last).collect();
    assert_eq!(
        revs, want,
        "every event exactly once, in order, across the restart"
    );
    let keys: Vec<Bytes> = before
        .iter()
        .chain(&after)
        .map(|e| e.kv.key.clone())
        .collect();
    let want_keys: Vec<Bytes> = (1..=10).map(|i| b(&format!("/k/{i}"))).collect();
    assert_eq!(keys, want_keys);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_isolate_and_keys_come_back_unprefixed() {
    let etcd = EtcdServer::start().await;
    let a = etcd.storage("/tenant-a/").await;
    let bb = etcd.storage("/tenant-b/").await;
    let raw = etcd.storage("").await;
    let ka = a
        .create(b("/registry/pods/default/x"), b("A"))
        .await
        .unwrap();
    bb.create(b("/registry/pods/default/x"), b("B"))
        .await
        .unwrap();
    assert_eq!(ka.key, b("/registry/pods/default/x"));
    let la = a.range(RangeRequest::prefix("/registry/")).await.unwrap();
    assert_eq!(la.count, 1);
    assert_eq!(la.kvs[0].key, b("/registry/pods/default/x"));
    assert_eq!(la.kvs[0].value, b("A"));
    let all_a = a.range(RangeRequest::prefix("")).await.unwrap();
    assert_eq!(
        all_a.count, 1,
        "the empty prefix is the whole namespace only"
    );
    let everything = raw.range(RangeRequest::prefix("")).await.unwrap();
    let keys: Vec<Bytes> = everything.kvs.iter().map(|kv| kv.key.clone()).collect();
    assert_eq!(
        keys,
        vec![
            b("/tenant-a//registry/pods/default/x"),
            b("/tenant-b//registry/pods/default/x")
        ]
    );
    // A watch in one namespace does not see the other.
    let now = a.current_revision().await.unwrap();
    let mut w = a.watch(b("/registry/"), now).await.unwrap();
    bb.create(b("/registry/pods/default/y"), b("B"))
        .await
        .unwrap();
    let mine = a
        .create(b("/registry/pods/default/y"), b("A"))
        .await
        .unwrap();
    let evs = events_until(&mut w, mine.mod_revision).await;
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].kv, mine);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_by_another_client_is_learned() {
    let etcd = EtcdServer::start().await;
    let one = etcd.storage("").await;
    let other = etcd.storage("").await;
    let a = one.create(b("/a"), b("1")).await.unwrap();
    let a2 = one.update(b("/a"), b("2"), a.mod_revision).await.unwrap();
    let a3 = one.update(b("/a"), b("3"), a2.mod_revision).await.unwrap();
    other.compact(a3.mod_revision).await.unwrap();
    // `one` never compacted, yet reports etcd's compacted revision.
    assert_eq!(one.compacted_revision().await.unwrap(), a3.mod_revision);
    let fresh = etcd.storage("").await;
    match fresh
        .range(RangeRequest {
            revision: a.mod_revision,
            ..RangeRequest::prefix("/")
        })
        .await
    {
        Err(StorageError::Compacted {
            requested,
            compacted,
        }) => assert_eq!((requested, compacted), (a.mod_revision, a3.mod_revision)),
        other => panic!("expected Compacted, got {other:?}"),
    }
    let fresh = etcd.storage("").await;
    assert!(matches!(
        fresh.watch(b("/"), a2.mod_revision).await.err(),
        Some(StorageError::Compacted { compacted, .. }) if compacted == a3.mod_revision
    ));
    // Compacting below etcd's compaction is a no-op, not an error.
    fresh.compact(a.mod_revision).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_fail_as_unavailable_while_etcd_is_down() {
    let mut etcd = EtcdServer::start().await;
    let s = EtcdStorage::connect(
        &[etcd.endpoint()],
        EtcdOptions {
            request_timeout: Duration::from_secs(2),
            ..EtcdOptions::default()
        },
    )
    .await
    .unwrap();
    s.create(b("/x"), b("1")).await.unwrap();
    etcd.kill();
    let t = std::time::Instant::now();
    assert!(matches!(
        s.get(b"/x").await,
        Err(StorageError::Unavailable(_))
    ));
    assert!(matches!(
        s.create(b("/y"), b("1")).await,
        Err(StorageError::Unavailable(_))
    ));
    assert!(
        t.elapsed() < Duration::from_secs(6),
        "bounded by the request budget: {:?}",
        t.elapsed()
    );
    etcd.restart().await;
    // The same storage works again once etcd is back.
    let kv = create_retrying(&s, "/y").await;
    assert!(kv > 1);
    assert_eq!(s.get(b"/x").await.unwrap().unwrap().value, b("1"));
}

#[tokio::test]
async fn connect_rejects_bad_configuration() {
    assert!(matches!(
        EtcdStorage::connect(&[], EtcdOptions::default()).await,
        Err(ConnectError::NoEndpoints)
    ));
    let bad = EtcdStorage::connect(&["127.0.0.1:2379".to_string()], EtcdOptions::default()).await;
    assert!(matches!(bad, Err(ConnectError::InvalidEndpoint { .. })));
    assert!(!bad.unwrap_err().is_retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_watch_gets_progress_at_the_current_revision() {
    let etcd = EtcdServer::start().await;
    let s = etcd.storage("/progress/").await;
    let mine = s.create(b("/w/a"), b("1")).await.unwrap();
    let mut w = s.watch(b("/w/"), mine.mod_revision).await.unwrap();
    // Writes outside the watched prefix move the revision without events for `w`.
    let mut other = 0;
    for i in 0..3 {
        other = s
            .create(b(&format!("/other/{i}")), b("1"))
            .await
            .unwrap()
            .mod_revision;
    }
    // etcd runs with a 1 s progress interval in these tests.
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match w.next().await {
                Some(Ok(WatchMessage::Progress(rev))) if rev >= other => return rev,
                Some(Ok(WatchMessage::Progress(_))) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    })
    .await
    .expect("no progress notification within 10 s");
    assert_eq!(got, other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_are_etcd_revisions_unchanged() {
    let etcd = EtcdServer::start().await;
    let s = etcd.storage("/rev/").await;
    // A fresh etcd is at revision 1; its first write gets 2.
    assert_eq!(s.current_revision().await.unwrap(), 1);
    let kv = s.create(b("/a"), b("1")).await.unwrap();
    assert_eq!((kv.create_revision, kv.mod_revision), (2, 2));
    // A plain etcd client sees the same numbers under the namespaced key.
    let mut raw = etcd_client::Client::connect([etcd.endpoint()], None)
        .await
        .unwrap();
    let resp = raw.get("/rev//a", None).await.unwrap();
    let got = &resp.kvs()[0];
    assert_eq!(
        (got.mod_revision(), resp.header().unwrap().revision()),
        (2, 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_follows_etcd_and_is_cached_briefly() {
    let mut etcd = EtcdServer::start().await;
    let s = EtcdStorage::connect(
        &[etcd.endpoint()],
        EtcdOptions {
            request_timeout: Duration::from_secs(2),
            ..EtcdOptions::default()
        },
    )
    .await
    .unwrap();
    s.ready().await.unwrap();
    etcd.kill();
    // The answer from before the kill may be reused for up to a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let t = std::time::Instant::now();
    assert!(
        matches!(s.ready().await, Err(StorageError::Unavailable(_))),
        "not ready while etcd is down"
    );
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    // Cached: an immediate second probe answers at once.
    let t = std::time::Instant::now();
    assert!(s.ready().await.is_err());
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    etcd.restart().await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while s.ready().await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "ready again after restart"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
