//! [`EtcdStorage`]: the etcd v3 backend of [`storage::Storage`], for running several listwatch
//! API servers over one etcd cluster.
//!
//! Mapping (Kubernetes' own layout; module `keys` has the details):
//! - keys are the API server's keys (`/registry/{resource}/{namespace}/{name}`), with an
//!   optional extra namespace ([`EtcdOptions::prefix`]) prepended;
//! - revisions are etcd revisions, unchanged (resourceVersion = etcd mod revision, as in
//!   Kubernetes; a fresh etcd is at revision 1); every process on the same etcd agrees on
//!   them, so a client may resume a watch on another API server;
//! - create = txn(create_revision(key) == 0 → put), else [`StorageError::AlreadyExists`];
//!   update / delete with an expected revision = txn(mod_revision(key) == expected → write,
//!   else get) → [`StorageError::Conflict`] with the current state, or
//!   [`StorageError::NotFound`];
//! - range = etcd range at a revision with limit (`more` and `count` are etcd's);
//! - watch = etcd watch with previous values and progress notifications from `after + 1`,
//!   re-established transparently when the connection breaks (module `watch`);
//! - compact = etcd compaction (logical; etcd frees space itself).
//!
//! Errors: etcd's "required revision has been compacted" becomes [`StorageError::Compacted`],
//! "future revision" [`StorageError::FutureRevision`]; an unreachable etcd, a lost leader or a
//! timeout [`StorageError::Unavailable`] (the API server answers 503/504). Reads are retried
//! within [`EtcdOptions::request_timeout`]; writes only when the error proves they were never
//! applied (module `retry`). Values are returned as stored: decoding is the API server's job.
//!
//! Idle watches advance (`WatchMessage::Progress`) only when etcd sends progress notifications,
//! every `--experimental-watch-progress-notify-interval` (10 min by default; run etcd with a
//! few seconds so that watch caches stay fresh while their keys are idle). Client-requested
//! progress is deliberately not used: etcd 3.4.23 may send it ahead of pending events.
//!
//! Periodic compaction shared by several API servers: [`spawn_compactor`] (one compaction per
//! interval in total, decided by a compare-and-swap on [`COMPACT_REV_KEY`]).
//!
//! Readiness: [`Storage::ready`] is a quorum read with a short timeout, cached for a second.
//!
//! Compacted revision: etcd does not report it on request. [`EtcdStorage`] tracks the highest
//! compaction it made or learned of, and [`Storage::compacted_revision`] checks cheaply whether
//! etcd has compacted past it (someone else compacted), learning the exact value from etcd if so.
#![warn(missing_docs)]

mod compactor;
mod keys;
mod retry;
#[cfg(feature = "testing")]
pub mod testing;
mod watch;

pub use compactor::{spawn_compactor, Compactor, CompactorStats, COMPACT_REV_KEY};

use crate::keys::{from_etcd, to_etcd, Keyspace};
use crate::retry::{with_retry, Failure, Idempotency};
use bytes::Bytes;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, KvClient, PutOptions,
    Txn, TxnOp, TxnOpResponse, WatchClient,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use storage::{
    KeyValue, RangeRequest, RangeResponse, Revision, Storage, StorageError, WatchStream,
};

/// How [`EtcdStorage`] connects and how long it waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdOptions {
    /// An extra namespace prepended to every key (default empty: the API server's keys, which
    /// already start with `/registry/`, are stored as they are). Use it to share one etcd
    /// between independent listwatch installations; end it with a separator such as `/` so
    /// that one namespace is never a prefix of another (`/a` would overlap `/ab`).
    pub prefix: String,
    /// How long opening a connection to one endpoint may take.
    pub connect_timeout: Duration,
    /// The whole time budget of one storage call, retries included.
    pub request_timeout: Duration,
}

impl Default for EtcdOptions {
    /// No namespace, 5 s to connect, 10 s per request.
    fn default() -> Self {
        EtcdOptions {
            prefix: String::new(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// Why [`EtcdStorage::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The endpoint list was empty.
    #[error("no etcd endpoints given")]
    NoEndpoints,
    /// An endpoint is not a usable URL (e.g. `http://127.0.0.1:2379`).
    #[error("invalid etcd endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No endpoint answered a read within the connect timeout; etcd may be down or still
    /// starting. Retrying later can succeed.
    #[error("etcd at {endpoints} is not reachable: {reason}")]
    Unreachable {
        /// The endpoints tried, comma-separated.
        endpoints: String,
        /// The last error.
        reason: String,
    },
}

impl ConnectError {
    /// Whether trying again later may succeed (etcd down or starting), as opposed to a
    /// configuration error.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ConnectError::Unreachable { .. })
    }
}

/// How long one readiness answer is reused.
const READY_CACHE_FOR: Duration = Duration::from_secs(1);
/// The time budget of one readiness probe (at most the request timeout).
const READY_PROBE_BUDGET: Duration = Duration::from_secs(2);

/// A cached readiness answer and when it was found.
type ReadyCache = Arc<tokio::sync::Mutex<Option<(Instant, Result<(), StorageError>)>>>;

/// The etcd v3 storage backend. Cheap to clone (clones share the connection and what was
/// learned about compaction) and to share behind an `Arc`; all methods are safe to call
/// concurrently. See the crate documentation for the mapping and error semantics.
#[derive(Clone)]
pub struct EtcdStorage {
    kv: KvClient,
    watch: WatchClient,
    keyspace: Keyspace,
    opts: EtcdOptions,
    /// The highest compacted revision this client made or learned of.
    compacted: Arc<AtomicU64>,
    /// The last readiness answer.
    ready: ReadyCache,
}

impl std::fmt::Debug for EtcdStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStorage")
            .field("opts", &self.opts)
            .field("compacted", &self.compacted.load(Ordering::Relaxed))
            .finish()
    }
}

impl EtcdStorage {
    /// Connects to the etcd cluster at `endpoints` (URLs such as `http://127.0.0.1:2379`;
    /// requests are balanced over them) and checks that it answers a linearizable read within
    /// [`EtcdOptions::connect_timeout`]. Fails with [`ConnectError::Unreachable`] if it does
    /// not (retry later), or with another [`ConnectError`] for a bad configuration.
    pub async fn connect(endpoints: &[String], opts: EtcdOptions) -> Result<Self, ConnectError> {
        if endpoints.is_empty() {
            return Err(ConnectError::NoEndpoints);
        }
        for e in endpoints {
            if !(e.starts_with("http://") || e.starts_with("https://")) || e.len() <= 8 {
                return Err(ConnectError::InvalidEndpoint {
                    endpoint: e.clone(),
                    reason: "expected a URL such as http://127.0.0.1:2379".into(),
                });
            }
        }
        let connect_opts = ConnectOptions::new()
            .with_connect_timeout(opts.connect_timeout)
            // Detect dead connections under long-lived watches.
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5))
            // Without a leader, fail requests and cancel watches at once instead of hanging:
            // the watch task then re-opens (possibly on another member).
            .with_require_leader(true);
        let client = Client::connect(endpoints, Some(connect_opts))
            .await
            .map_err(|e| ConnectError::InvalidEndpoint {
                endpoint: endpoints.join(","),
                reason: e.to_string(),
            })?;
        let storage = EtcdStorage {
            kv: client.kv_client(),
            watch: client.watch_client(),
            keyspace: Keyspace::new(opts.prefix.clone()),
            compacted: Arc::new(AtomicU64::new(0)),
            ready: Arc::new(tokio::sync::Mutex::new(None)),
            opts,
        };
        let probe = storage.current_revision_within(storage.opts.connect_timeout);
        match probe.await {
            Ok(rev) => {
                tracing::info!(endpoints = %endpoints.join(","), revision = rev, "connected to etcd");
                Ok(storage)
            }
            Err(e) => Err(ConnectError::Unreachable {
                endpoints: endpoints.join(","),
                reason: e.to_string(),
            }),
        }
    }

    /// The options this storage was made with.
    pub fn options(&self) -> &EtcdOptions {
        &self.opts
    }

    /// `current_revision` with a given time budget.
    async fn current_revision_within(&self, budget: Duration) -> Result<Revision, StorageError> {
        let key = self.keyspace.probe_key();
        let resp = with_retry(budget, Idempotency::Read, "read revision", || {
            let mut kv = self.kv.clone();
            let key = key.clone();
            async move { kv.get(key, Some(GetOptions::new().with_count_only())).await }
        })
        .await
        .map_err(|f| f.into_storage("read revision"))?;
        Ok(header_revision(resp.header()))
    }

    /// The error for a read at revision `requested` that etcd says was compacted.
    async fn compacted_error(&self, requested: Revision) -> StorageError {
        let mut compacted = self.compacted.load(Ordering::SeqCst);
        if compacted <= requested {
            if let Some(learned) = self.learn_compacted().await {
                compacted = learned;
            }
        }
        // etcd said `requested` is gone, so the compaction is at least one above it.
        let compacted = compacted.max(requested.saturating_add(1));
        self.compacted.fetch_max(compacted, Ordering::SeqCst);
        StorageError::Compacted {
            requested,
            compacted,
        }
    }

    /// The error for a read at revision `requested` that etcd says is in the future.
    async fn future_error(&self, requested: Revision) -> StorageError {
        match self.current_revision().await {
            Ok(current) => StorageError::FutureRevision { requested, current },
            Err(e) => e,
        }
    }

    /// Asks etcd for its compacted revision: a watch from revision 1 on a key nobody writes
    /// is answered at once with the compacted revision if there is one. Only call this when
    /// etcd has just said something was compacted (otherwise nothing answers and this waits
    /// for its timeout). Returns the revision, or `None` if etcd did not tell.
    async fn learn_compacted(&self) -> Option<Revision> {
        let probe = self.keyspace.probe_key();
        match watch::open(
            &self.watch,
            &probe,
            &[],
            0,
            Duration::from_secs(2).min(self.opts.request_timeout),
        )
        .await
        {
            Err(watch::OpenError::Compacted(rev)) => {
                self.compacted.fetch_max(rev, Ordering::SeqCst);
                Some(rev)
            }
            // etcd sends the compaction notice right after "created" (from its background
            // sync of out-of-date watchers, every 100 ms).
            Ok(mut opened) => {
                let rev = opened.next_compaction(Duration::from_secs(2)).await?;
                self.compacted.fetch_max(rev, Ordering::SeqCst);
                Some(rev)
            }
            Err(watch::OpenError::Transient(reason)) => {
                tracing::debug!(%reason, "could not learn etcd's compacted revision");
                None
            }
        }
    }

    /// Runs a read-only etcd range (`count_only` at a revision) to check that storage
    /// revision `rev` is still readable. `Ok(true)` = readable, `Ok(false)` = in the future.
    async fn revision_readable(&self, rev: Revision) -> Result<bool, StorageError> {
        let key = self.keyspace.probe_key();
        let r = with_retry(
            self.opts.request_timeout,
            Idempotency::Read,
            "check revision",
            || {
                let mut kv = self.kv.clone();
                let key = key.clone();
                async move {
                    kv.get(
                        key,
                        Some(
                            GetOptions::new()
                                .with_count_only()
                                .with_serializable()
                                .with_revision(to_etcd(rev)),
                        ),
                    )
                    .await
                }
            },
        )
        .await;
        match r {
            Ok(_) => Ok(true),
            Err(Failure::Future) => Ok(false),
            Err(Failure::Compacted) => Err(self.compacted_error(rev).await),
            Err(f) => Err(f.into_storage("check revision")),
        }
    }

    /// Runs a write transaction (retried only when certainly not applied).
    async fn txn(&self, what: &str, txn: Txn) -> Result<etcd_client::TxnResponse, StorageError> {
        with_retry(self.opts.request_timeout, Idempotency::Write, what, || {
            let mut kv = self.kv.clone();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
        .map_err(|f| f.into_storage(what))
    }

    /// The current state from the `or_else` get of a failed compare-and-swap: Conflict with
    /// it, or NotFound.
    fn conflict_or_not_found(&self, resp: &etcd_client::TxnResponse) -> StorageError {
        match first_get(resp).and_then(|mut g| g.take_kvs().into_iter().next()) {
            Some(kv) => StorageError::Conflict {
                current: Box::new(watch::key_value_owned(&self.keyspace, kv)),
            },
            None => StorageError::NotFound,
        }
    }
}

/// The storage revision in an etcd response header (0 if absent).
fn header_revision(h: Option<&etcd_client::ResponseHeader>) -> Revision {
    h.map_or(0, |h| from_etcd(h.revision()))
}

/// A transaction's responses; none if any of them is empty or of a kind etcd-client does not
/// know (its `op_responses` would panic on those).
fn op_responses(resp: &etcd_client::TxnResponse) -> Vec<TxnOpResponse> {
    if resp.0.responses.iter().any(|r| r.response.is_none()) {
        tracing::warn!("etcd transaction response with an empty or unknown entry; ignored");
        return Vec::new();
    }
    resp.op_responses()
}

/// The first get (range) result of a transaction's responses.
fn first_get(resp: &etcd_client::TxnResponse) -> Option<etcd_client::GetResponse> {
    op_responses(resp).into_iter().find_map(|r| match r {
        TxnOpResponse::Get(g) => Some(g),
        _ => None,
    })
}

/// The previous key-value of the first put in a transaction's responses.
fn first_put_prev(resp: &etcd_client::TxnResponse) -> Option<etcd_client::KeyValue> {
    op_responses(resp).into_iter().find_map(|r| match r {
        TxnOpResponse::Put(mut p) => p.take_prev_key(),
        _ => None,
    })
}

/// The deleted key-value of the first delete in a transaction's responses.
fn first_deleted(resp: &etcd_client::TxnResponse) -> Option<etcd_client::KeyValue> {
    op_responses(resp).into_iter().find_map(|r| match r {
        TxnOpResponse::Delete(mut d) => d.take_prev_kvs().into_iter().next(),
        _ => None,
    })
}

/// Converts a storage limit to etcd's (0 = none).
fn etcd_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

#[async_trait::async_trait]
impl Storage for EtcdStorage {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StorageError> {
        let key = self.keyspace.key(key);
        let mut resp = with_retry(self.opts.request_timeout, Idempotency::Read, "get", || {
            let mut kv = self.kv.clone();
            let key = key.clone();
            async move { kv.get(key, None).await }
        })
        .await
        .map_err(|f| f.into_storage("get"))?;
        Ok(resp
            .take_kvs()
            .into_iter()
            .next()
            .map(|kv| watch::key_value_owned(&self.keyspace, kv)))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, StorageError> {
        let start = self.keyspace.key(&req.start);
        let end = self.keyspace.range_end(&req.end);
        let mut opts = GetOptions::new().with_limit(etcd_limit(req.limit));
        if !end.is_empty() {
            opts = opts.with_range(end);
        }
        if req.revision > 0 {
            opts = opts.with_revision(to_etcd(req.revision));
        }
        let r = with_retry(
            self.opts.request_timeout,
            Idempotency::Read,
            "range",
            || {
                let mut kv = self.kv.clone();
                let start = start.clone();
                let opts = opts.clone();
                async move { kv.get(start, Some(opts)).await }
            },
        )
        .await;
        let mut resp = match r {
            Ok(resp) => resp,
            Err(Failure::Compacted) => return Err(self.compacted_error(req.revision).await),
            Err(Failure::Future) => return Err(self.future_error(req.revision).await),
            Err(f) => return Err(f.into_storage("range")),
        };
        let revision = match req.revision {
            0 => header_revision(resp.header()),
            r => r,
        };
        let more = resp.more();
        let count = usize::try_from(resp.count()).unwrap_or(usize::MAX);
        let kvs = resp
            .take_kvs()
            .into_iter()
            .map(|kv| watch::key_value_owned(&self.keyspace, kv))
            .collect();
        Ok(RangeResponse {
            kvs,
            more,
            count,
            revision,
        })
    }

    async fn create(&self, key: Bytes, value: Bytes) -> Result<KeyValue, StorageError> {
        let ekey = self.keyspace.key(&key);
        let txn = Txn::new()
            .when([Compare::create_revision(ekey.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(ekey, value.to_vec(), None)]);
        let resp = self.txn("create", txn).await?;
        if !resp.succeeded() {
            return Err(StorageError::AlreadyExists);
        }
        let rev = header_revision(resp.header());
        Ok(KeyValue {
            key,
            value,
            create_revision: rev,
            mod_revision: rev,
            version: 1,
        })
    }

    async fn update(
        &self,
        key: Bytes,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        let ekey = self.keyspace.key(&key);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                ekey.clone(),
                CompareOp::Equal,
                to_etcd(expected),
            )])
            .and_then([TxnOp::put(
                ekey.clone(),
                value.to_vec(),
                Some(PutOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(ekey, None)]);
        let resp = self.txn("update", txn).await?;
        if !resp.succeeded() {
            return Err(self.conflict_or_not_found(&resp));
        }
        let rev = header_revision(resp.header());
        let Some(prev) = first_put_prev(&resp) else {
            // The compare proved the key existed, so etcd must have returned it.
            return Err(StorageError::Internal(format!(
                "etcd applied the update of {:?} at revision {rev} but returned no previous value",
                String::from_utf8_lossy(&key)
            )));
        };
        Ok(KeyValue {
            key,
            value,
            create_revision: from_etcd(prev.create_revision()),
            mod_revision: rev,
            version: u64::try_from(prev.version()).unwrap_or(0).saturating_add(1),
        })
    }

    async fn delete(
        &self,
        key: Bytes,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StorageError> {
        let ekey = self.keyspace.key(&key);
        let del = TxnOp::delete(ekey.clone(), Some(DeleteOptions::new().with_prev_key()));
        let txn = match expected {
            Some(expected) => Txn::new()
                .when([Compare::mod_revision(
                    ekey.clone(),
                    CompareOp::Equal,
                    to_etcd(expected),
                )])
                .and_then([del])
                .or_else([TxnOp::get(ekey, None)]),
            None => Txn::new().and_then([del]),
        };
        let resp = self.txn("delete", txn).await?;
        if !resp.succeeded() {
            return Err(self.conflict_or_not_found(&resp));
        }
        match first_deleted(&resp) {
            Some(prev) => Ok((
                watch::key_value_owned(&self.keyspace, prev),
                header_revision(resp.header()),
            )),
            None => Err(StorageError::NotFound),
        }
    }

    async fn watch(&self, prefix: Bytes, after: Revision) -> Result<WatchStream, StorageError> {
        let known = self.compacted.load(Ordering::SeqCst);
        if after < known {
            return Err(StorageError::Compacted {
                requested: after,
                compacted: known,
            });
        }
        // etcd accepts a watch from its compacted revision itself, one earlier than the
        // storage contract allows; a read at `after` fails exactly when the contract says the
        // watch must. A future `after` is fine for a watch.
        self.revision_readable(after).await?;
        let (start, end) = self.keyspace.prefix_range(&prefix);
        let opened =
            match watch::open(&self.watch, &start, &end, after, self.opts.request_timeout).await {
                Ok(o) => o,
                Err(watch::OpenError::Compacted(compacted)) => {
                    self.compacted.fetch_max(compacted, Ordering::SeqCst);
                    return Err(StorageError::Compacted {
                        requested: after,
                        compacted,
                    });
                }
                Err(watch::OpenError::Transient(reason)) => {
                    return Err(StorageError::Unavailable(format!("etcd watch: {reason}")))
                }
            };
        let (tx, rx) = tokio::sync::mpsc::channel(watch::CHANNEL_CAPACITY);
        let task = watch::WatchTask {
            client: self.watch.clone(),
            keyspace: self.keyspace.clone(),
            start,
            end,
            last: after,
            last_progress: after,
            tx,
            compacted: self.compacted.clone(),
            open_timeout: self.opts.request_timeout,
        };
        tokio::spawn(task.run(opened));
        Ok(WatchStream::new(rx))
    }

    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        if revision <= self.compacted.load(Ordering::SeqCst) {
            return Ok(());
        }
        let r = with_retry(
            self.opts.request_timeout,
            // Compaction is idempotent: repeating it is harmless.
            Idempotency::Read,
            "compact",
            || {
                let mut kv = self.kv.clone();
                async move { kv.compact(to_etcd(revision), None).await }
            },
        )
        .await;
        match r {
            Ok(_) => {
                self.compacted.fetch_max(revision, Ordering::SeqCst);
                Ok(())
            }
            // Someone compacted further already: a no-op, as the contract says.
            Err(Failure::Compacted) => {
                self.compacted.fetch_max(revision, Ordering::SeqCst);
                Ok(())
            }
            Err(Failure::Future) => Err(self.future_error(revision).await),
            Err(f) => Err(f.into_storage("compact")),
        }
    }

    async fn current_revision(&self) -> Result<Revision, StorageError> {
        self.current_revision_within(self.opts.request_timeout)
            .await
    }

    async fn ready(&self) -> Result<(), StorageError> {
        // One probe at a time; concurrent callers wait for it and share its answer.
        let mut cache = self.ready.lock().await;
        if let Some((at, answer)) = cache.as_ref() {
            if at.elapsed() < READY_CACHE_FOR {
                return answer.clone();
            }
        }
        let budget = READY_PROBE_BUDGET.min(self.opts.request_timeout);
        let answer = self.current_revision_within(budget).await.map(|_| ());
        *cache = Some((Instant::now(), answer.clone()));
        answer
    }

    async fn compacted_revision(&self) -> Result<Revision, StorageError> {
        let known = self.compacted.load(Ordering::SeqCst);
        // Cheap check whether someone compacted past what we know; if so, learn the value.
        // (etcd's revisions start at 1; a read at 0 would mean "current" and prove nothing.)
        match self.revision_readable(known.max(1)).await {
            Ok(_) => Ok(self.compacted.load(Ordering::SeqCst)),
            Err(StorageError::Compacted { compacted, .. }) => Ok(compacted),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_client::proto::{PbRangeResponse, PbResponseOp, PbTxnOpResponse, PbTxnResponse};

    #[test]
    fn a_transaction_response_with_an_empty_entry_is_no_answer_not_a_panic() {
        let range = PbResponseOp {
            response: Some(PbTxnOpResponse::ResponseRange(PbRangeResponse::default())),
        };
        let whole = etcd_client::TxnResponse(PbTxnResponse {
            responses: vec![range.clone()],
            ..Default::default()
        });
        assert!(first_get(&whole).is_some());
        let broken = etcd_client::TxnResponse(PbTxnResponse {
            responses: vec![range, PbResponseOp { response: None }],
            ..Default::default()
        });
        assert!(first_get(&broken).is_none());
        assert!(first_put_prev(&broken).is_none());
        assert!(first_deleted(&broken).is_none());
    }
}
