//! The shared compactor against a real etcd: several compactors compact once per interval
//! between them, and what they compact really is compacted in etcd.

mod common;

use bytes::Bytes;
use common::EtcdServer;
use std::time::Duration;
use storage::{RangeRequest, Storage, StorageError};
use storage_etcd::{spawn_compactor, COMPACT_REV_KEY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_compactors_compact_once_per_interval_between_them() {
    const INTERVAL: Duration = Duration::from_millis(400);
    const INTERVALS: u32 = 10;
    let etcd = EtcdServer::start().await;
    let writer = etcd.storage("/cmp/").await;
    let first = writer
        .create(Bytes::from("/k/0"), Bytes::from("v"))
        .await
        .unwrap();
    let (sa_store, sb_store) = (etcd.storage("/cmp/").await, etcd.storage("/cmp/").await);
    let t0 = tokio::time::Instant::now();
    let a = spawn_compactor(sa_store, INTERVAL);
    // The second server starts a third of an interval later, as servers do.
    tokio::time::sleep(INTERVAL / 3).await;
    let b = spawn_compactor(sb_store, INTERVAL);
    // Keep the revision moving, as a live cluster does. Stop two thirds into an interval of
    // A (one third into one of B), so that no election is in flight when the stats are read.
    let end = t0 + INTERVAL * INTERVALS + INTERVAL * 2 / 3;
    let mut i = 1;
    while tokio::time::Instant::now() < end {
        writer
            .create(Bytes::from(format!("/k/{i}")), Bytes::from("v"))
            .await
            .unwrap();
        i += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (sa, sb) = (a.stats(), b.stats());
    a.stop();
    b.stop();
    assert_eq!((sa.errors, sb.errors), (0, 0), "no errors: {sa:?} {sb:?}");
    let intervals = sa.attempts.max(sb.attempts);
    let won = sa.won + sb.won;
    assert!(
        intervals >= u64::from(INTERVALS) - 2,
        "each compactor ran about once per interval: {sa:?} {sb:?}"
    );
    assert!(
        won + 1 >= intervals && won <= intervals + 1,
        "one election won per interval in total ({won} over {intervals} intervals), \
         not one per server: {sa:?} {sb:?}"
    );
    assert_eq!(
        sa.won + sa.lost,
        sa.attempts,
        "every attempt won or lost: {sa:?}"
    );
    assert_eq!(
        sa.compactions + sb.compactions + 1,
        won,
        "every win compacts, except the very first (nothing recorded yet): {sa:?} {sb:?}"
    );
    // The election key's version counts the wins (puts), as the other servers see it.
    let key = writer
        .get(COMPACT_REV_KEY)
        .await
        .unwrap()
        .expect("the election key exists");
    assert_eq!(key.version, won, "election key {key:?}");
    // etcd really was compacted, to the latest compaction made by either compactor.
    let latest = sa.last_compacted.max(sb.last_compacted);
    assert!(
        latest > first.mod_revision,
        "compacted past the first write: {latest}"
    );
    let fresh = etcd.storage("/cmp/").await;
    assert_eq!(fresh.compacted_revision().await.unwrap(), latest);
    assert!(matches!(
        fresh
            .range(RangeRequest {
                revision: first.mod_revision,
                ..RangeRequest::prefix("/k/")
            })
            .await,
        Err(StorageError::Compacted { .. })
    ));
    // Reads at the compacted revision still work.
    fresh
        .range(RangeRequest {
            revision: latest,
            ..RangeRequest::prefix("/k/")
        })
        .await
        .unwrap();
}
