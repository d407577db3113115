//! The log backend of the audit log (`--audit-log-path`): events as JSON lines appended to a
//! file by a thread of its own, so that a request never waits for the disk. The file is
//! created readable by its owner only (it names users and, at level `Request`, holds
//! request bodies). When the writer falls more than [`QUEUE`] events behind, events are
//! dropped and counted (`apiserver_audit_error_total`) rather than slowing requests.

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

/// Events that may wait for the writer.
pub const QUEUE: usize = 10_000;

/// A handle to the writer thread; dropping every handle ends it (after the queue drains).
#[derive(Clone)]
pub struct LogBackend {
    tx: SyncSender<Vec<u8>>,
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for LogBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogBackend").finish_non_exhaustive()
    }
}

impl LogBackend {
    /// Opens (appending; created 0600) `path` and starts the writer.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(path: &Path) -> std::io::Result<LogBackend> {
        let mut opts = std::fs::OpenOptions::new();
        opts.create(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(0o600);
        }
        let file = opts.open(path)?;
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE);
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || {
                let mut out = std::io::BufWriter::with_capacity(256 * 1024, file);
                while let Ok(line) = rx.recv() {
                    let mut ok = out.write_all(&line).is_ok();
                    // Write what else is queued, then flush once.
                    while let Ok(line) = rx.try_recv() {
                        ok &= out.write_all(&line).is_ok();
                    }
                    if !ok || out.flush().is_err() {
                        tracing::error!("writing the audit log failed");
                    }
                }
            })?;
        Ok(LogBackend {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Queues one event (a JSON object, written as one line). Never blocks.
    pub fn write(&self, event: &serde_json::Value) {
        let mut line = serde_json::to_vec(event).unwrap_or_default();
        line.push(b'\n');
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Events dropped so far because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
