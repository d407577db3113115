//! [`EmbeddedStorage`]: the persistent default backend, on redb, with group commit.
//!
//! Layout: one redb file `listwatch.redb` in the store's directory, with a `history` table
//! (revision → encoded change record) and a `meta` table (the compacted revision). The
//! in-memory MVCC core ([`crate::mvcc`]) is rebuilt from `history` on open and serves every
//! read and watch; redb is only written.
//!
//! Writes go to one writer thread. It takes every pending request, checks the preconditions
//! in order (later operations see earlier ones), writes all successful changes in ONE redb
//! write transaction with immediate durability (fsync), commits, and only then publishes them
//! (visible to reads, sent to watchers) and resolves the callers' futures. So many concurrent
//! writers share one fsync, and a write that was acknowledged survives a crash.

use crate::disk_faults::{DiskFaults, FaultyBackend};
use crate::mvcc::{delete_result, put_result, Core, WriteOp};
use crate::{
    Event, EventKind, KeyValue, RangeRequest, RangeResponse, Revision, Storage, StorageError,
    WatchStream,
};
use bytes::Bytes;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

const HISTORY: TableDefinition<u64, &[u8]> = TableDefinition::new("history");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const META_COMPACTED: &str = "compacted";
const DB_FILE: &str = "listwatch.redb";
/// Most operations one commit takes.
const MAX_BATCH: usize = 4096;

/// Tuning for [`EmbeddedStorage`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbeddedOptions {
    /// Automatic compaction keeps at least this many recent revisions of history
    /// (compacts to `current - history_window_revisions`). 0 disables automatic compaction.
    pub history_window_revisions: u64,
    /// How often automatic compaction runs.
    pub compaction_interval: Duration,
    /// The most bytes of superseded values (old revisions of objects that changed since)
    /// the history may hold, in memory and on disk: a write that takes it past this compacts
    /// at once, down to half of it, however few revisions that leaves. 0 = no byte bound.
    pub history_window_bytes: u64,
    /// Under concurrent writes (the last commit took more than one write, and the next
    /// was already waiting when it ended), how long the writer waits for more before the
    /// next commit: fewer, larger commits for at most this much more latency. A write that
    /// finds the writer idle is never held back. Zero commits whatever is pending at once.
    pub commit_window: Duration,
}

/// The default [`EmbeddedOptions::history_window_bytes`]: 64 MiB.
pub const DEFAULT_HISTORY_WINDOW_BYTES: u64 = 64 << 20;

/// The default [`EmbeddedOptions::commit_window`]: 1 ms.
pub const DEFAULT_COMMIT_WINDOW: Duration = Duration::from_millis(1);

impl Default for EmbeddedOptions {
    /// 100 000 revisions of history, checked every 60 s, at most 64 MiB of old values, and
    /// a [`DEFAULT_COMMIT_WINDOW`].
    fn default() -> Self {
        EmbeddedOptions {
            history_window_revisions: 100_000,
            compaction_interval: Duration::from_secs(60),
            history_window_bytes: DEFAULT_HISTORY_WINDOW_BYTES,
            commit_window: DEFAULT_COMMIT_WINDOW,
        }
    }
}

/// Work for the writer thread.
enum Request {
    Write {
        op: WriteOp,
        reply: oneshot::Sender<Result<Event, StorageError>>,
    },
    Compact {
        revision: Revision,
        reply: oneshot::Sender<Result<(), StorageError>>,
    },
}

/// A persistent [`Storage`] in one directory. Clones share one store; the writer thread
/// stops (after finishing the requests it has) when the last clone is dropped, and dropping
/// the last clone waits for that, so the directory can be reopened right after.
#[derive(Clone)]
pub struct EmbeddedStorage {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    tx: Option<std_mpsc::Sender<Request>>,
    writer: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel ends the writer loop; wait so the database file is released.
        self.tx.take();
        if let Some(handle) = self.writer.take() {
            if handle.join().is_err() {
                tracing::error!("embedded storage writer thread panicked");
            }
        }
    }
}

fn internal(e: impl std::fmt::Display) -> StorageError {
    StorageError::Internal(e.to_string())
}

/// redb's page cache size.
const REDB_CACHE_BYTES: usize = 32 * 1024 * 1024;

/// Creates `dir` (mode 0700) and the database file in it (mode 0600) if they do not exist,
/// so that the store is never readable by other users, not even for a moment; returns the
/// file's path. Modes of what already exists are left alone.
fn create_private(dir: &Path) -> Result<std::path::PathBuf, StorageError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    let mut file = std::fs::OpenOptions::new();
    file.write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
        builder.mode(0o700);
        file.mode(0o600);
    }
    builder.create(dir).map_err(internal)?;
    let path = dir.join(DB_FILE);
    file.open(&path).map_err(internal)?;
    Ok(path)
}

/// Opens redb on `path`, through [`DiskFaults`] when given.
fn open_database(
    path: &Path,
    faults: Option<&DiskFaults>,
) -> Result<Database, redb::DatabaseError> {
    // Reads are served from the in-memory index, so redb's page cache only helps the
    // writer; a small one keeps the server's memory close to its data.
    let mut builder = redb::Builder::new();
    builder.set_cache_size(REDB_CACHE_BYTES);
    match faults {
        None => builder.create(path),
        Some(faults) => {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map_err(|e| redb::DatabaseError::Storage(redb::StorageError::Io(e)))?;
            builder.create_with_backend(FaultyBackend::new(file, faults.clone())?)
        }
    }
}

/// What a store that cannot be opened says: which file, why, and what to do.
fn unreadable(path: &Path, e: impl std::fmt::Display) -> StorageError {
    StorageError::Internal(format!(
        "the store {} cannot be read ({e}): it is damaged or was not written by listwatch; \
         nothing was changed. Restore the data directory from a backup, or move it away to \
         start with an empty store",
        path.display()
    ))
}

impl EmbeddedStorage {
    /// Opens (or creates: the directory with mode 0700, the file 0600) the store in `dir`,
    /// rebuilding the in-memory index from disk, and starts its writer thread. Fails with
    /// [`StorageError::Internal`] if the directory or database cannot be opened: another
    /// process holds it, or the file is damaged (truncated, overwritten, a corrupt record;
    /// the message names the file and says what to do, and the store is left as it was).
    pub fn open(dir: &Path, opts: EmbeddedOptions) -> Result<EmbeddedStorage, StorageError> {
        EmbeddedStorage::open_with(dir, opts, None)
    }

    /// [`EmbeddedStorage::open`] over a disk that shows the `faults` switched on (a full
    /// disk, failing `fsync`s), for reliability tests.
    pub fn open_with_faults(
        dir: &Path,
        opts: EmbeddedOptions,
        faults: DiskFaults,
    ) -> Result<EmbeddedStorage, StorageError> {
        EmbeddedStorage::open_with(dir, opts, Some(faults))
    }

    fn open_with(
        dir: &Path,
        opts: EmbeddedOptions,
        faults: Option<DiskFaults>,
    ) -> Result<EmbeddedStorage, StorageError> {
        let path = create_private(dir)?;
        let db = match open_database(&path, faults.as_ref()) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StorageError::Internal(format!(
                    "the store {} is in use by another process (another listwatch on the same data directory?)",
                    path.display()
                )))
            }
            Err(e) => return Err(unreadable(&path, e)),
        };
        let bad = |e: &dyn std::fmt::Display| unreadable(&path, e);
        // A new store gets its two tables; an existing one is only read until every record
        // has been checked, so that a damaged store is left exactly as it was found.
        let fresh = {
            let read = db.begin_read().map_err(|e| bad(&e))?;
            match read.open_table(HISTORY) {
                Ok(_) => false,
                Err(redb::TableError::TableDoesNotExist(_)) => true,
                Err(e) => return Err(bad(&e)),
            }
        };
        if fresh {
            let txn = db.begin_write().map_err(|e| bad(&e))?;
            txn.open_table(HISTORY).map_err(|e| bad(&e))?;
            txn.open_table(META).map_err(|e| bad(&e))?;
            txn.commit().map_err(|e| bad(&e))?;
        }

        let read = db.begin_read().map_err(|e| bad(&e))?;
        // A store whose history has records but no meta table yet (written before the
        // meta table existed) has compacted nothing.
        let compacted = match read.open_table(META) {
            Ok(meta) => meta
                .get(META_COMPACTED)
                .map_err(|e| bad(&e))?
                .map(|g| g.value())
                .unwrap_or(0),
            Err(redb::TableError::TableDoesNotExist(_)) => 0,
            Err(e) => return Err(bad(&e)),
        };
        let history = read.open_table(HISTORY).map_err(|e| bad(&e))?;
        let mut records = Vec::new();
        for item in history.iter().map_err(|e| bad(&e))? {
            let (rev, data) = item.map_err(|e| bad(&e))?;
            records.push(decode(rev.value(), data.value()).map_err(|e| bad(&e))?);
        }
        drop((history, read));
        let core = Arc::new(Core::restore(records, compacted));
        tracing::info!(
            dir = %dir.display(),
            revision = core.current(),
            compacted,
            "embedded storage opened"
        );

        let (tx, rx) = std_mpsc::channel();
        let writer_core = core.clone();
        let writer = std::thread::Builder::new()
            .name("storage-writer".into())
            .spawn(move || {
                let reopen = move || open_database(&path, faults.as_ref()).map_err(internal);
                writer_loop(db, reopen, writer_core, rx, opts)
            })
            .map_err(internal)?;
        Ok(EmbeddedStorage {
            inner: Arc::new(Inner {
                core,
                tx: Some(tx),
                writer: Some(writer),
            }),
        })
    }

    fn send(&self, req: Request) -> Result<(), StorageError> {
        match &self.inner.tx {
            Some(tx) => tx
                .send(req)
                .map_err(|_| StorageError::Unavailable("storage writer has stopped".into())),
            None => Err(StorageError::Unavailable("storage is closed".into())),
        }
    }

    async fn write(&self, op: WriteOp) -> Result<Event, StorageError> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Write { op, reply })?;
        rx.await
            .map_err(|_| StorageError::Unavailable("storage writer has stopped".into()))?
    }
}

#[async_trait::async_trait]
impl Storage for EmbeddedStorage {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StorageError> {
        Ok(self.inner.core.get(key))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, StorageError> {
        self.inner.core.range(&req)
    }

    async fn create(&self, key: Bytes, value: Bytes) -> Result<KeyValue, StorageError> {
        put_result(self.write(WriteOp::Create { key, value }).await)
    }

    async fn update(
        &self,
        key: Bytes,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        put_result(
            self.write(WriteOp::Update {
                key,
                value,
                expected,
            })
            .await,
        )
    }

    async fn delete(
        &self,
        key: Bytes,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StorageError> {
        delete_result(self.write(WriteOp::Delete { key, expected }).await)
    }

    async fn watch(&self, prefix: Bytes, after: Revision) -> Result<WatchStream, StorageError> {
        self.inner.core.watch(prefix, after)
    }

    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Compact { revision, reply })?;
        rx.await
            .map_err(|_| StorageError::Unavailable("storage writer has stopped".into()))?
    }

    async fn request_progress(&self, prefix: &[u8]) -> Result<(), StorageError> {
        self.inner.core.request_progress(prefix);
        Ok(())
    }

    async fn current_revision(&self) -> Result<Revision, StorageError> {
        Ok(self.inner.core.current())
    }

    async fn compacted_revision(&self) -> Result<Revision, StorageError> {
        Ok(self.inner.core.compacted())
    }
}

/// The writer thread: group commit of writes, compactions (requested and periodic).
///
/// After a commit fails (a full disk, a failed `fsync`), redb refuses every later
/// transaction of that handle: the database is closed and opened again (`reopen`) before the
/// next batch, so that writes work again once the disk does. Until it opens, writes fail.
fn writer_loop(
    db: Database,
    reopen: impl Fn() -> Result<Database, StorageError>,
    core: Arc<Core>,
    rx: std_mpsc::Receiver<Request>,
    opts: EmbeddedOptions,
) {
    let mut db = Some(db);
    let auto = opts.history_window_revisions > 0 && !opts.compaction_interval.is_zero();
    let mut next_auto = Instant::now() + opts.compaction_interval;
    // Writes in the last commit.
    let mut last_batch = 0;
    loop {
        // A request already waiting when the last commit ended came while it ran: the
        // writers are concurrent. One this thread has to wait for is a lone write.
        let (first, queued) = match rx.try_recv() {
            Ok(req) => (req, true),
            Err(std_mpsc::TryRecvError::Disconnected) => break,
            Err(std_mpsc::TryRecvError::Empty) => {
                let req = if auto {
                    let wait = next_auto.saturating_duration_since(Instant::now());
                    match rx.recv_timeout(wait) {
                        Ok(req) => req,
                        Err(std_mpsc::RecvTimeoutError::Timeout) => {
                            next_auto = Instant::now() + opts.compaction_interval;
                            let target =
                                core.current().saturating_sub(opts.history_window_revisions);
                            if target > core.compacted() {
                                let Some(open) = usable(&mut db, &reopen) else {
                                    continue;
                                };
                                let started = Instant::now();
                                match compact(open, &core, target) {
                                    Ok(()) => tracing::info!(
                                        revision = target,
                                        took_ms = started.elapsed().as_millis() as u64,
                                        "auto-compacted storage"
                                    ),
                                    Err(e) => {
                                        tracing::warn!(error = %e, "automatic compaction failed")
                                    }
                                }
                            }
                            continue;
                        }
                        Err(std_mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                } else {
                    match rx.recv() {
                        Ok(req) => req,
                        Err(_) => break,
                    }
                };
                (req, false)
            }
        };
        let mut ops = Vec::new();
        let mut replies = Vec::new();
        let mut compactions = Vec::new();
        // Concurrent writers keep coming while a commit runs: give them the window to
        // join this one (each commit costs a sync and a dozen page writes, whatever its
        // size). Asleep rather than waiting on the channel, so that senders do not wake
        // this thread once per write.
        if queued
            && last_batch > 1
            && matches!(first, Request::Write { .. })
            && !opts.commit_window.is_zero()
        {
            std::thread::sleep(opts.commit_window);
        }
        let mut next = Some(first);
        while let Some(req) = next {
            match req {
                Request::Write { op, reply } => {
                    ops.push(op);
                    replies.push(reply);
                }
                Request::Compact { revision, reply } => compactions.push((revision, reply)),
            }
            next = if ops.len() < MAX_BATCH {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        last_batch = ops.len();
        if !ops.is_empty() {
            let Some(open) = usable(&mut db, &reopen) else {
                let e = StorageError::Internal(
                    "the store cannot be written: its file could not be opened again after a failed commit".into(),
                );
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
                for (_, reply) in compactions {
                    let _ = reply.send(Err(e.clone()));
                }
                continue;
            };
            if !commit_batch(open, &core, &ops, replies) {
                // redb poisons a handle whose commit failed; open it again next time.
                db = None;
                continue;
            }
            if opts.history_window_bytes > 0 {
                if let Some(target) = core.byte_compaction_target(opts.history_window_bytes) {
                    let started = Instant::now();
                    match compact(open, &core, target) {
                        Ok(()) => tracing::info!(
                            revision = target,
                            superseded_bytes = core.superseded_bytes(),
                            took_ms = started.elapsed().as_millis() as u64,
                            "compacted storage: old values over the history's byte bound"
                        ),
                        Err(e) => tracing::warn!(error = %e, "byte-bound compaction failed"),
                    }
                }
            }
        }
        for (revision, reply) in compactions {
            let result = match usable(&mut db, &reopen) {
                Some(open) => compact(open, &core, revision),
                None => Err(StorageError::Internal(
                    "the store cannot be written: its file could not be opened again".into(),
                )),
            };
            let _ = reply.send(result);
        }
    }
    tracing::debug!("embedded storage writer stopped");
}

/// The open database, opening it again first if a failed commit closed it (`None` if that
/// fails too).
fn usable<'a>(
    db: &'a mut Option<Database>,
    reopen: &impl Fn() -> Result<Database, StorageError>,
) -> Option<&'a Database> {
    if db.is_none() {
        match reopen() {
            Ok(open) => {
                tracing::info!("embedded storage reopened after a failed commit");
                *db = Some(open);
            }
            Err(e) => tracing::error!(error = %e, "the store could not be opened again"),
        }
    }
    db.as_ref()
}

/// Checks, persists (one transaction, one fsync), publishes and answers one batch; false
/// when persisting failed (every caller then gets the error, nothing was published).
fn commit_batch(
    db: &Database,
    core: &Core,
    ops: &[WriteOp],
    replies: Vec<oneshot::Sender<Result<Event, StorageError>>>,
) -> bool {
    let plan = core.plan(ops);
    let events: Vec<Event> = plan
        .iter()
        .filter_map(|r| r.as_ref().ok().cloned())
        .collect();
    let persisted = if events.is_empty() {
        Ok(())
    } else {
        persist(db, &events)
    };
    let outcome = persisted.clone().and_then(|()| {
        if events.is_empty() {
            Ok(())
        } else {
            core.publish(&events)
        }
    });
    match outcome {
        Ok(()) => {
            for (reply, result) in replies.into_iter().zip(plan) {
                let _ = reply.send(result);
            }
        }
        Err(e) => {
            tracing::error!(error = %e, ops = ops.len(), "storage commit failed");
            let e = StorageError::Internal(format!("the write was not stored: {e}"));
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
    persisted.is_ok()
}

fn persist(db: &Database, events: &[Event]) -> Result<(), StorageError> {
    let txn = db.begin_write().map_err(internal)?;
    {
        let mut table = txn.open_table(HISTORY).map_err(internal)?;
        let mut buf = Vec::new();
        for ev in events {
            encode(ev, &mut buf);
            table
                .insert(ev.revision, buf.as_slice())
                .map_err(internal)?;
        }
    }
    txn.commit().map_err(internal)
}

/// Compacts on disk (drops records, records the compacted revision) and then in memory.
fn compact(db: &Database, core: &Core, revision: Revision) -> Result<(), StorageError> {
    let Some(dropped) = core.compaction_plan(revision)? else {
        return Ok(());
    };
    let txn = db.begin_write().map_err(internal)?;
    {
        let mut table = txn.open_table(HISTORY).map_err(internal)?;
        for r in &dropped {
            table.remove(*r).map_err(internal)?;
        }
        let mut meta = txn.open_table(META).map_err(internal)?;
        meta.insert(META_COMPACTED, revision).map_err(internal)?;
    }
    txn.commit().map_err(internal)?;
    core.apply_compaction(revision, &dropped);
    Ok(())
}

/// The kind byte's flag for a record that carries a checksum (records written before
/// checksums have none, and are read as they are).
const CHECKSUMMED: u8 = 0x80;

/// A 64-bit checksum of a record's body: FNV-1a over 8-byte words, so that a record damaged
/// on disk is found when the store opens instead of being served.
fn checksum(data: &[u8]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ data.len() as u64;
    let mut words = data.chunks_exact(8);
    for w in words.by_ref() {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(word)).wrapping_mul(PRIME);
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(PRIME);
    }
    h
}

/// Record layout: kind (1 byte, with [`CHECKSUMMED`]), the checksum of the rest (8), then
/// create_revision (8), version (8), key length (4), key, value. The revision is the table
/// key and is the record's mod_revision.
fn encode(ev: &Event, buf: &mut Vec<u8>) {
    buf.clear();
    buf.push(
        CHECKSUMMED
            | match ev.kind {
                EventKind::Create => 0,
                EventKind::Update => 1,
                EventKind::Delete => 2,
            },
    );
    buf.extend_from_slice(&[0; 8]);
    buf.extend_from_slice(&ev.kv.create_revision.to_be_bytes());
    buf.extend_from_slice(&ev.kv.version.to_be_bytes());
    // Keys are far below 4 GiB (requests over 3 MiB are refused upstream).
    buf.extend_from_slice(&(ev.kv.key.len() as u32).to_be_bytes());
    buf.extend_from_slice(&ev.kv.key);
    buf.extend_from_slice(&ev.kv.value);
    let sum = checksum(&buf[9..]);
    buf[1..9].copy_from_slice(&sum.to_be_bytes());
}

fn decode(rev: Revision, data: &[u8]) -> Result<(EventKind, KeyValue), StorageError> {
    let corrupt = || StorageError::Internal(format!("corrupt history record at revision {rev}"));
    let (&kind, mut rest) = data.split_first().ok_or_else(corrupt)?;
    if kind & CHECKSUMMED != 0 {
        let (sum, body) = rest.split_first_chunk::<8>().ok_or_else(corrupt)?;
        if u64::from_be_bytes(*sum) != checksum(body) {
            return Err(StorageError::Internal(format!(
                "corrupt history record at revision {rev}: its checksum does not match"
            )));
        }
        rest = body;
    }
    let kind = match kind & !CHECKSUMMED {
        0 => EventKind::Create,
        1 => EventKind::Update,
        2 => EventKind::Delete,
        _ => return Err(corrupt()),
    };
    let (create, rest) = rest.split_first_chunk::<8>().ok_or_else(corrupt)?;
    let (version, rest) = rest.split_first_chunk::<8>().ok_or_else(corrupt)?;
    let (key_len, rest) = rest.split_first_chunk::<4>().ok_or_else(corrupt)?;
    let key_len = u32::from_be_bytes(*key_len) as usize;
    if rest.len() < key_len {
        return Err(corrupt());
    }
    let (key, value) = rest.split_at(key_len);
    Ok((
        kind,
        KeyValue {
            key: Bytes::copy_from_slice(key),
            value: Bytes::copy_from_slice(value),
            create_revision: u64::from_be_bytes(*create),
            mod_revision: rev,
            version: u64::from_be_bytes(*version),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_new_store_is_private_to_its_user() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a").join("data");
        drop(EmbeddedStorage::open(&dir, EmbeddedOptions::default()).unwrap());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&tmp.path().join("a")), 0o700);
        assert_eq!(mode(&dir.join(DB_FILE)), 0o600);
        // Reopening works and changes nothing.
        drop(EmbeddedStorage::open(&dir, EmbeddedOptions::default()).unwrap());
        assert_eq!(mode(&dir.join(DB_FILE)), 0o600);
    }

    #[test]
    fn record_round_trip_and_corruption() {
        let ev = Event {
            kind: EventKind::Update,
            revision: 7,
            kv: KeyValue {
                key: Bytes::from_static(b"/k"),
                value: Bytes::from_static(b"value"),
                create_revision: 3,
                mod_revision: 7,
                version: 2,
            },
            prev: None,
        };
        let mut buf = Vec::new();
        encode(&ev, &mut buf);
        let (kind, kv) = decode(7, &buf).unwrap();
        assert_eq!(kind, EventKind::Update);
        assert_eq!(kv, ev.kv);
        assert!(decode(7, &buf[..10]).is_err());
        let mut bad = buf.clone();
        bad[0] = 9;
        assert!(decode(7, &bad).is_err());
        // Key length larger than the record (the checksum made to match, so that the
        // layout check is what refuses it).
        let mut long = buf.clone();
        long[25..29].copy_from_slice(&1000u32.to_be_bytes());
        let sum = checksum(&long[9..]);
        long[1..9].copy_from_slice(&sum.to_be_bytes());
        assert!(decode(7, &long).is_err());
        // Any byte of the value changed: the checksum tells.
        let mut flipped = buf.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        let err = decode(7, &flipped).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        // A record written before checksums (no flag, no checksum) still reads.
        let mut legacy = vec![1u8];
        legacy.extend_from_slice(&buf[9..]);
        let (kind, kv) = decode(7, &legacy).unwrap();
        assert_eq!((kind, kv), (EventKind::Update, ev.kv.clone()));
    }

    #[tokio::test]
    async fn automatic_compaction_keeps_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let opts = EmbeddedOptions {
            history_window_revisions: 3,
            compaction_interval: Duration::from_millis(50),
            history_window_bytes: 0,
            ..EmbeddedOptions::default()
        };
        let s = EmbeddedStorage::open(dir.path(), opts).unwrap();
        for i in 0..10 {
            s.create(format!("/k{i}").into(), "v".into()).await.unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.compacted_revision().await.unwrap() < 7 {
            assert!(Instant::now() < deadline, "auto compaction did not run");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(s.compacted_revision().await.unwrap(), 7);
        assert_eq!(s.range(RangeRequest::prefix("/")).await.unwrap().count, 10);
    }

    /// The commit window holds back only writes that come while others are committed: one
    /// writer at a time is answered without waiting for it, and concurrent writers are all
    /// answered, in one order, once their commit is made.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_commit_window_never_holds_a_lone_writer() {
        let dir = tempfile::tempdir().unwrap();
        let opts = EmbeddedOptions {
            commit_window: Duration::from_secs(30),
            ..EmbeddedOptions::default()
        };
        let s = EmbeddedStorage::open(dir.path(), opts).unwrap();
        // A 30 s window applied to any of these would blow the 20 s budget.
        let lone = async {
            for i in 0..5 {
                s.create(format!("/lone{i}").into(), "v".into())
                    .await
                    .unwrap();
            }
        };
        tokio::time::timeout(Duration::from_secs(20), lone)
            .await
            .expect("sequential writes were held back by the commit window");
        let dir = tempfile::tempdir().unwrap();
        let opts = EmbeddedOptions {
            commit_window: Duration::from_millis(50),
            ..EmbeddedOptions::default()
        };
        let s = EmbeddedStorage::open(dir.path(), opts).unwrap();
        for wave in 0..3 {
            let writes = (0..64).map(|i| {
                let s = s.clone();
                tokio::spawn(
                    async move { s.create(format!("/w{wave}-{i}").into(), "v".into()).await },
                )
            });
            let mut revisions = Vec::new();
            for w in writes {
                revisions.push(w.await.unwrap().unwrap().mod_revision);
            }
            revisions.sort_unstable();
            revisions.dedup();
            assert_eq!(revisions.len(), 64, "every write has its own revision");
        }
        assert_eq!(
            s.range(RangeRequest::prefix("/w")).await.unwrap().count,
            192
        );
        drop(s);
        let s = EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
        assert_eq!(
            s.range(RangeRequest::prefix("/w")).await.unwrap().count,
            192
        );
    }

    #[tokio::test]
    async fn old_revisions_of_large_values_are_compacted_to_the_byte_bound() {
        let dir = tempfile::tempdir().unwrap();
        let opts = EmbeddedOptions {
            history_window_bytes: 1 << 20,
            ..EmbeddedOptions::default()
        };
        let s = EmbeddedStorage::open(dir.path(), opts.clone()).unwrap();
        let value = |i: u8| Bytes::from(vec![i; 100 << 10]);
        let mut kv = s.create("/big".into(), value(0)).await.unwrap();
        s.create("/small".into(), "v".into()).await.unwrap();
        for i in 1..=50u8 {
            kv = s
                .update("/big".into(), value(i), kv.mod_revision)
                .await
                .unwrap();
            // The writer answers first and compacts right after: at most this one write
            // beyond the bound.
            let held = s.inner.core.superseded_bytes();
            assert!(
                held <= (1 << 20) + (100 << 10),
                "{held} bytes of old values after update {i}"
            );
        }
        let compacted = s.compacted_revision().await.unwrap();
        assert!(compacted > 30, "compacted only to {compacted}");
        // Recent history is still readable, the compacted part is gone, nothing current lost.
        let at = kv.mod_revision - 2;
        let old = s
            .range(RangeRequest {
                revision: at,
                ..RangeRequest::prefix("/big")
            })
            .await
            .unwrap();
        assert_eq!(old.kvs[0].value, value(48));
        let gone = s
            .range(RangeRequest {
                revision: 2,
                ..RangeRequest::prefix("/")
            })
            .await;
        assert!(
            matches!(gone, Err(StorageError::Compacted { .. })),
            "{gone:?}"
        );
        assert_eq!(s.range(RangeRequest::prefix("/")).await.unwrap().count, 2);
        // And on disk: reopened, the history holds no more than the bound either.
        drop(s);
        let s = EmbeddedStorage::open(dir.path(), opts).unwrap();
        assert!(s.inner.core.superseded_bytes() <= 1 << 20);
        assert_eq!(s.get(b"/big").await.unwrap().unwrap().value, value(50));
    }
}
