//! The periodic etcd compactor: several API servers over one etcd compact it once per
//! interval between them, not once each.
//!
//! Scheme (the one Kubernetes' API servers use, in our own code): a well-known key,
//! [`COMPACT_REV_KEY`] in the storage's key namespace, is the election. Each compactor
//! remembers the key's version as it last saw it and the revision it recorded then. Every
//! interval it runs one transaction:
//!
//! - if the key's version still equals the version it last saw, nobody else acted since:
//!   it puts a new value (which bumps the version), remembers the transaction's revision,
//!   and compacts etcd to the revision it remembered from the previous interval;
//! - otherwise another server won this interval: it learns the key's current version and the
//!   current revision, and skips.
//!
//! So each interval's first compactor wins and everybody else learns and skips; the history
//! kept is always at least one interval long (the compaction target was recorded one interval
//! earlier), and there is one compaction per interval however many servers run. A failed
//! transaction changes nothing and is tried again next interval.

use crate::keys::from_etcd;
use crate::EtcdStorage;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use storage::{Revision, Storage, StorageError};
use tokio::task::JoinHandle;

/// The election key (inside the storage's key namespace). Its value is the revision the
/// winner of the latest interval compacted to (decimal), its version counts the intervals won.
pub const COMPACT_REV_KEY: &[u8] = b"compact_rev_key";

/// What one compactor has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactorStats {
    /// Intervals in which it ran the election transaction (successfully or not).
    pub attempts: u64,
    /// Intervals it won (it bumped the election key).
    pub won: u64,
    /// Intervals another server won (it learned and skipped).
    pub lost: u64,
    /// Compactions it made (wins with a revision recorded one interval earlier).
    pub compactions: u64,
    /// Failed transactions or compactions (etcd unreachable, …).
    pub errors: u64,
    /// The revision of its latest compaction (0 = none yet).
    pub last_compacted: Revision,
}

/// A running compactor task (see the module documentation). Dropping it stops the task.
#[must_use = "dropping the Compactor stops it"]
#[derive(Debug)]
pub struct Compactor {
    task: JoinHandle<()>,
    stats: Arc<Mutex<CompactorStats>>,
}

impl Compactor {
    /// A snapshot of what this compactor has done so far.
    pub fn stats(&self) -> CompactorStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the task (an election or compaction in flight is abandoned; that is harmless:
    /// etcd applies a transaction entirely or not at all).
    pub fn stop(self) {
        // Drop aborts.
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a compactor on `storage` that runs once every `interval` (first after one
/// interval). Must be called inside a tokio runtime. Every API server on the same etcd (and
/// key namespace) may run one; together they compact once per interval.
pub fn spawn_compactor(storage: EtcdStorage, interval: Duration) -> Compactor {
    let stats = Arc::new(Mutex::new(CompactorStats::default()));
    let task_stats = stats.clone();
    let interval = interval.max(Duration::from_millis(10));
    let task = tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut state = Election::default();
        loop {
            ticks.tick().await;
            let outcome = state.step(&storage).await;
            let mut s = task_stats.lock().unwrap_or_else(|e| e.into_inner());
            s.attempts += 1;
            match outcome {
                Ok(Outcome::Won { compacted }) => {
                    s.won += 1;
                    match compacted {
                        Ok(Some(rev)) => {
                            s.compactions += 1;
                            s.last_compacted = rev;
                            tracing::info!(revision = rev, "compacted etcd");
                        }
                        Ok(None) => {}
                        Err(e) => {
                            s.errors += 1;
                            tracing::warn!(error = %e, "etcd compaction failed; the next interval compacts further");
                        }
                    }
                }
                Ok(Outcome::Lost) => {
                    s.lost += 1;
                    tracing::debug!("another API server compacts etcd this interval");
                }
                Err(e) => {
                    s.errors += 1;
                    tracing::warn!(error = %e, "etcd compaction failed; trying again next interval");
                }
            }
        }
    });
    Compactor { task, stats }
}

/// What one interval's election did.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// This compactor won; it compacted to the carried revision (`Ok(None)` on its first
    /// win without an earlier recorded revision), or the compaction failed.
    Won {
        compacted: Result<Option<Revision>, StorageError>,
    },
    /// Another compactor won this interval.
    Lost,
}

/// One compactor's memory between intervals.
#[derive(Debug, Default)]
struct Election {
    /// The election key's version as last seen (0 = the key does not exist).
    version: i64,
    /// The revision recorded at the last interval (0 = none yet): the next compaction target.
    recorded: Revision,
}

impl Election {
    /// Runs one interval's transaction (and compaction, if won).
    async fn step(&mut self, storage: &EtcdStorage) -> Result<Outcome, StorageError> {
        let key = storage.keyspace.key(COMPACT_REV_KEY);
        let txn = Txn::new()
            .when([Compare::version(
                key.clone(),
                CompareOp::Equal,
                self.version,
            )])
            .and_then([TxnOp::put(
                key.clone(),
                self.recorded.to_string().into_bytes(),
                None,
            )])
            .or_else([TxnOp::get(key, None)]);
        let resp = storage.txn("compaction election", txn).await?;
        let now = resp.header().map_or(0, |h| from_etcd(h.revision()));
        if !resp.succeeded() {
            let seen = crate::first_get(&resp)
                .and_then(|mut g| g.take_kvs().into_iter().next())
                .map_or(0, |kv| kv.version());
            self.version = seen;
            self.recorded = now;
            return Ok(Outcome::Lost);
        }
        self.version = self.version.saturating_add(1);
        let target = std::mem::replace(&mut self.recorded, now);
        if target == 0 {
            return Ok(Outcome::Won {
                compacted: Ok(None),
            });
        }
        let compacted = storage.compact(target).await.map(|()| Some(target));
        Ok(Outcome::Won { compacted })
    }
}
