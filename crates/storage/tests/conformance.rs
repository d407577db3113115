//! Runs the conformance suite on every backend, plus embedded-only persistence and
//! concurrency tests.

use bytes::Bytes;
use std::collections::HashSet;
use std::sync::Arc;
use storage::conformance;
use storage::embedded::{EmbeddedOptions, EmbeddedStorage};
use storage::memory::MemoryStorage;
use storage::{RangeRequest, Storage, StorageError, WatchMessage};

#[tokio::test]
async fn memory_conformance() {
    conformance::run_all(MemoryStorage::new).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_conformance() {
    let mut dirs = Vec::new();
    conformance::run_all(|| {
        let dir = tempfile::tempdir().unwrap();
        let s = EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
        dirs.push(dir);
        s
    })
    .await;
}

/// The memory and embedded stores start at revision 0 and number writes from 1 (the suite
/// itself only checks revisions relative to a store's start, so that etcd, which starts at 1,
/// passes it with its revisions unchanged).
#[tokio::test]
async fn memory_and_embedded_start_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let stores: Vec<Arc<dyn Storage>> = vec![
        Arc::new(MemoryStorage::new()),
        Arc::new(EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap()),
    ];
    for s in stores {
        assert_eq!(s.current_revision().await.unwrap(), 0);
        assert_eq!(s.compacted_revision().await.unwrap(), 0);
        let kv = s.create("/a".into(), "1".into()).await.unwrap();
        assert_eq!(kv.mod_revision, 1);
        assert_eq!(s.current_revision().await.unwrap(), 1);
    }
}

#[tokio::test]
async fn embedded_reopen_keeps_data_revisions_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let (a2, deleted_at, compacted) = {
        let s = EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
        let a = s.create("/a".into(), "1".into()).await.unwrap();
        let a2 = s
            .update("/a".into(), "2".into(), a.mod_revision)
            .await
            .unwrap();
        s.create("/b".into(), "1".into()).await.unwrap();
        let (_, deleted_at) = s.delete("/b".into(), None).await.unwrap();
        // Compact at the delete: its tombstone is the newest record and is dropped.
        s.compact(deleted_at).await.unwrap();
        (a2, deleted_at, deleted_at)
    };
    let s = EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
    assert_eq!(s.current_revision().await.unwrap(), deleted_at);
    assert_eq!(s.compacted_revision().await.unwrap(), compacted);
    assert_eq!(s.get(b"/a").await.unwrap(), Some(a2.clone()));
    assert_eq!(s.get(b"/b").await.unwrap(), None);
    assert!(matches!(
        s.range(RangeRequest {
            revision: compacted - 1,
            ..RangeRequest::prefix("/")
        })
        .await,
        Err(StorageError::Compacted { .. })
    ));
    // Revisions continue, never reused; watch from before the restart replays with prev.
    let a3 = s
        .update("/a".into(), "3".into(), a2.mod_revision)
        .await
        .unwrap();
    assert_eq!(a3.mod_revision, deleted_at + 1);
    drop(s);
    let s = EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
    let mut w = s.watch("/".into(), compacted).await.unwrap();
    match w.next().await {
        Some(Ok(WatchMessage::Events(evs))) => {
            assert_eq!(evs.len(), 1);
            assert_eq!(evs[0].kv, a3);
            assert_eq!(evs[0].prev.as_ref(), Some(&a2));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn embedded_open_twice_fails_while_held() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
    assert!(matches!(
        EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()),
        Err(StorageError::Internal(_))
    ));
    drop(s);
    EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_concurrent_writers_get_distinct_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap());
    let value = Bytes::from(vec![7u8; 2048]);
    let mut tasks = Vec::new();
    for t in 0..64 {
        let s = s.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut revs = Vec::new();
            for i in 0..20 {
                let kv = s
                    .create(format!("/c/{t}/{i}").into(), value.clone())
                    .await
                    .unwrap();
                revs.push(kv.mod_revision);
            }
            revs
        }));
    }
    let mut all = HashSet::new();
    for t in tasks {
        for r in t.await.unwrap() {
            assert!(all.insert(r), "revision {r} handed out twice");
        }
    }
    assert_eq!(all.len(), 64 * 20);
    assert_eq!(s.current_revision().await.unwrap(), 64 * 20);
    assert_eq!(*all.iter().max().unwrap(), 64 * 20);
    let resp = s.range(RangeRequest::prefix("/c/")).await.unwrap();
    assert_eq!(resp.count, 64 * 20);
    drop(resp);
    drop(s);
    let s = EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
    assert_eq!(
        s.range(RangeRequest::prefix("/c/")).await.unwrap().count,
        64 * 20
    );
}

/// Throughput smoke check (run with `cargo test -p storage --release -- --ignored --nocapture`):
/// 64 concurrent writers creating ~2 KB values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a throughput benchmark: run explicitly with --ignored --nocapture, in release"]
async fn embedded_group_commit_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap());
    let value = Bytes::from(vec![7u8; 2048]);
    let per_task = 500;
    let start = std::time::Instant::now();
    let mut tasks = Vec::new();
    for t in 0..64 {
        let s = s.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per_task {
                s.create(format!("/bench/{t}/{i}").into(), value.clone())
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n = 64 * per_task;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{n} durable creates in {secs:.2}s = {:.0}/s",
        n as f64 / secs
    );
    assert_eq!(s.current_revision().await.unwrap(), n as u64);
}
