//! [`MemoryStorage`]: the whole MVCC store in memory. For tests and for running the API
//! server without a disk; nothing survives the process.

use crate::mvcc::{delete_result, put_result, Core, WriteOp};
use crate::{KeyValue, RangeRequest, RangeResponse, Revision, Storage, StorageError, WatchStream};
use bytes::Bytes;
use std::sync::Arc;

/// An in-memory [`Storage`]. Clones share one store. Writes are visible (and their watch
/// events queued) before their futures resolve; there is no durability.
#[derive(Clone, Default)]
pub struct MemoryStorage {
    core: Arc<Core>,
}

impl MemoryStorage {
    /// An empty store at revision 0.
    pub fn new() -> Self {
        MemoryStorage {
            core: Arc::new(Core::new()),
        }
    }
}

#[async_trait::async_trait]
impl Storage for MemoryStorage {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StorageError> {
        Ok(self.core.get(key))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, StorageError> {
        self.core.range(&req)
    }

    async fn create(&self, key: Bytes, value: Bytes) -> Result<KeyValue, StorageError> {
        put_result(self.core.write_now(WriteOp::Create { key, value }))
    }

    async fn update(
        &self,
        key: Bytes,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        put_result(self.core.write_now(WriteOp::Update {
            key,
            value,
            expected,
        }))
    }

    async fn delete(
        &self,
        key: Bytes,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StorageError> {
        delete_result(self.core.write_now(WriteOp::Delete { key, expected }))
    }

    async fn watch(&self, prefix: Bytes, after: Revision) -> Result<WatchStream, StorageError> {
        self.core.watch(prefix, after)
    }

    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        self.core.compact_now(revision)
    }

    async fn request_progress(&self, prefix: &[u8]) -> Result<(), StorageError> {
        self.core.request_progress(prefix);
        Ok(())
    }

    async fn current_revision(&self) -> Result<Revision, StorageError> {
        Ok(self.core.current())
    }

    async fn compacted_revision(&self) -> Result<Revision, StorageError> {
        Ok(self.core.compacted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn clones_share_one_store() {
        let a = MemoryStorage::new();
        let b = a.clone();
        let kv = a.create("k".into(), "v".into()).await.unwrap();
        assert_eq!(kv.mod_revision, 1);
        assert_eq!(b.get(b"k").await.unwrap(), Some(kv));
        assert_eq!(b.current_revision().await.unwrap(), 1);
    }
}
