//! Disk faults for the embedded store, injected below redb: a full disk (every write or
//! extension of the file fails with `ENOSPC`) and a failing `fsync` (`EIO`), switched on and
//! off while the store runs. Used by the reliability tests to show that a write the disk
//! refused is never acknowledged, that reads go on, and that writes work again once the
//! disk does.

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};
use std::fs::File;
use std::io;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The switches of the faults one store's disk shows. Clones share the switches.
#[derive(Debug, Clone, Default)]
pub struct DiskFaults(Arc<Switches>);

#[derive(Debug, Default)]
struct Switches {
    full: AtomicBool,
    failing_sync: AtomicBool,
    injected: AtomicU64,
}

impl DiskFaults {
    /// No fault yet.
    pub fn new() -> DiskFaults {
        DiskFaults::default()
    }

    /// From now on every write that would store bytes fails as on a full disk (or, with
    /// `false`, works again).
    pub fn set_full(&self, full: bool) {
        self.0.full.store(full, Ordering::SeqCst);
    }

    /// From now on every `fsync` fails with an I/O error (or, with `false`, works again).
    pub fn set_failing_sync(&self, failing: bool) {
        self.0.failing_sync.store(failing, Ordering::SeqCst);
    }

    /// How many operations have failed because of a fault so far.
    pub fn injected(&self) -> u64 {
        self.0.injected.load(Ordering::SeqCst)
    }

    fn check(&self, on: &AtomicBool, error: fn() -> io::Error) -> Result<(), io::Error> {
        if on.load(Ordering::SeqCst) {
            self.0.injected.fetch_add(1, Ordering::SeqCst);
            return Err(error());
        }
        Ok(())
    }
}

fn no_space() -> io::Error {
    io::Error::from_raw_os_error(28) // ENOSPC
}

fn io_error() -> io::Error {
    io::Error::from_raw_os_error(5) // EIO
}

/// redb's file backend with [`DiskFaults`] in front of its writes and syncs.
#[derive(Debug)]
pub(crate) struct FaultyBackend {
    inner: FileBackend,
    faults: DiskFaults,
}

impl FaultyBackend {
    pub(crate) fn new(
        file: File,
        faults: DiskFaults,
    ) -> Result<FaultyBackend, redb::DatabaseError> {
        Ok(FaultyBackend {
            inner: FileBackend::new(file)?,
            faults,
        })
    }
}

impl StorageBackend for FaultyBackend {
    fn len(&self) -> Result<u64, io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        // Growing needs space; shrinking does not.
        if len > self.inner.len()? {
            self.faults.check(&self.faults.0.full, no_space)?;
        }
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.faults.check(&self.faults.0.failing_sync, io_error)?;
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.faults.check(&self.faults.0.full, no_space)?;
        self.inner.write(offset, data)
    }

    fn close(&self) -> Result<(), io::Error> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}
