//! [`EncryptedStorage`]: a [`Storage`] that encrypts the values of the configured resources
//! on their way in and decrypts them on their way out, over any backend (the embedded
//! store, etcd), as kube-apiserver's storage transformers do.
//!
//! Only keys under an encrypted resource's prefix (`/registry/secrets/`) are touched: every
//! other key, range and watch goes straight to the backend, with no copy and no allocation.
//!
//! A value that cannot be decrypted (a key removed from the configuration, a wrong secret,
//! altered data, plaintext without an identity provider) fails [`Storage::get`] (and so the
//! object's GET, update and delete) with [`StorageError::Internal`], which the API answers
//! with a 500 Status. In ranges and watch events it is logged and handed on as an empty
//! value, which no reader decodes: the watch cache skips that one object, as it skips any
//! undecodable value, and keeps serving the others.

use super::config::EncryptionConfig;
use super::value_transformer::{TransformError, ValueTransformer};
use bytes::Bytes;
use std::sync::Arc;
use storage::{
    prefix_end, Event, KeyValue, RangeRequest, RangeResponse, Revision, Storage, StorageError,
    WatchStream,
};

/// One encrypted resource: its key prefix, the end of that prefix's range, its transformer.
#[derive(Clone)]
struct Prefix {
    start: Bytes,
    end: Bytes,
    transformer: Arc<ValueTransformer>,
}

/// The transformers by key prefix (disjoint prefixes), shared with watch streams.
#[derive(Clone)]
struct Prefixes(Arc<[Prefix]>);

impl Prefixes {
    /// The transformer of `key`, if it is under an encrypted resource.
    fn of(&self, key: &[u8]) -> Option<&ValueTransformer> {
        self.0
            .iter()
            .find(|p| key.starts_with(&p.start))
            .map(|p| &*p.transformer)
    }

    /// Decrypts `kv` in place if it is under an encrypted resource; a value that does not
    /// decrypt is logged and emptied.
    fn decrypt_lossy(&self, kv: &mut KeyValue) {
        if kv.value.is_empty() {
            return; // a deletion's
        }
        if let Some(t) = self.of(&kv.key) {
            kv.value = match t.from_storage(&kv.key, &kv.value) {
                Ok((plain, _)) => plain,
                Err(e) => {
                    tracing::error!(
                        key = %String::from_utf8_lossy(&kv.key),
                        "skipping a stored value that cannot be decrypted: {e}"
                    );
                    Bytes::new()
                }
            };
        }
    }
}

/// A [`Storage`] that encrypts and decrypts the values of the resources of an
/// [`EncryptionConfig`] and passes everything else through unchanged.
pub struct EncryptedStorage {
    inner: Arc<dyn Storage>,
    prefixes: Prefixes,
}

impl EncryptedStorage {
    /// `inner` with the encryption of `config`.
    pub fn new(inner: Arc<dyn Storage>, config: &EncryptionConfig) -> EncryptedStorage {
        let transformers = config
            .resources()
            .iter()
            .map(|r| (r.key_prefix.clone(), r.transformer.clone()))
            .collect();
        Self::with_prefixes(inner, transformers)
    }

    /// `inner` with `transformers` applied to the keys under their prefixes (which must be
    /// disjoint): what [`EncryptedStorage::new`] builds from a configuration.
    pub(crate) fn with_prefixes(
        inner: Arc<dyn Storage>,
        transformers: Vec<(String, Arc<ValueTransformer>)>,
    ) -> EncryptedStorage {
        let prefixes = transformers
            .into_iter()
            .map(|(prefix, transformer)| {
                let start = Bytes::from(prefix.into_bytes());
                Prefix {
                    end: prefix_end(&start),
                    start,
                    transformer,
                }
            })
            .collect();
        EncryptedStorage {
            inner,
            prefixes: Prefixes(prefixes),
        }
    }

    /// `inner` with the encryption of `config`, or `inner` itself if `config` encrypts no
    /// served resource.
    pub fn wrap(inner: Arc<dyn Storage>, config: &EncryptionConfig) -> Arc<dyn Storage> {
        if config.resources().is_empty() {
            inner
        } else {
            Arc::new(EncryptedStorage::new(inner, config))
        }
    }

    /// Whether a range request for `[start, end)` (with [`RangeRequest`]'s meaning of an
    /// empty and a `\0` end) may return keys of an encrypted resource.
    fn range_may_cover(&self, start: &[u8], end: &[u8]) -> bool {
        self.prefixes.0.iter().any(|p| match end {
            b"" => start.starts_with(&p.start),
            b"\0" => p.end.is_empty() || start < &p.end[..],
            _ => (p.end.is_empty() || start < &p.end[..]) && &p.start[..] < end,
        })
    }

    /// Whether a watch of `prefix` sees keys of an encrypted resource.
    fn watch_may_cover(&self, prefix: &[u8]) -> bool {
        self.prefixes
            .0
            .iter()
            .any(|p| p.start.starts_with(prefix) || prefix.starts_with(&p.start))
    }
}

/// The error of a read or write whose value could not be transformed.
fn transform_error(key: &[u8], e: TransformError) -> StorageError {
    StorageError::Internal(format!(
        "unable to transform key {:?}: {e}",
        String::from_utf8_lossy(key)
    ))
}

#[async_trait::async_trait]
impl Storage for EncryptedStorage {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StorageError> {
        if self.prefixes.of(key).is_none() {
            return self.inner.get(key).await;
        }
        Ok(self.get_for_update(key).await?.map(|(kv, _)| kv))
    }

    async fn get_for_update(&self, key: &[u8]) -> Result<Option<(KeyValue, bool)>, StorageError> {
        let Some(t) = self.prefixes.of(key) else {
            return self.inner.get_for_update(key).await;
        };
        let Some(mut kv) = self.inner.get(key).await? else {
            return Ok(None);
        };
        let (plain, stale) = t
            .from_storage(&kv.key, &kv.value)
            .map_err(|e| transform_error(key, e))?;
        kv.value = plain;
        Ok(Some((kv, stale)))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, StorageError> {
        let covered = self.range_may_cover(&req.start, &req.end);
        let mut resp = self.inner.range(req).await?;
        if covered {
            resp.kvs
                .iter_mut()
                .for_each(|kv| self.prefixes.decrypt_lossy(kv));
        }
        Ok(resp)
    }

    async fn create(&self, key: Bytes, value: Bytes) -> Result<KeyValue, StorageError> {
        let Some(t) = self.prefixes.of(&key) else {
            return self.inner.create(key, value).await;
        };
        let stored = t
            .to_storage(&key, &value)
            .map_err(|e| transform_error(&key, e))?;
        let mut kv = self.inner.create(key, stored).await?;
        kv.value = value;
        Ok(kv)
    }

    async fn update(
        &self,
        key: Bytes,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        let Some(t) = self.prefixes.of(&key) else {
            return self.inner.update(key, value, expected).await;
        };
        let stored = t
            .to_storage(&key, &value)
            .map_err(|e| transform_error(&key, e))?;
        match self.inner.update(key, stored, expected).await {
            Ok(mut kv) => {
                kv.value = value;
                Ok(kv)
            }
            Err(StorageError::Conflict { mut current }) => {
                self.prefixes.decrypt_lossy(&mut current);
                Err(StorageError::Conflict { current })
            }
            Err(e) => Err(e),
        }
    }

    async fn delete(
        &self,
        key: Bytes,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StorageError> {
        match self.inner.delete(key, expected).await {
            Ok((mut kv, rev)) => {
                self.prefixes.decrypt_lossy(&mut kv);
                Ok((kv, rev))
            }
            Err(StorageError::Conflict { mut current }) => {
                self.prefixes.decrypt_lossy(&mut current);
                Err(StorageError::Conflict { current })
            }
            Err(e) => Err(e),
        }
    }

    async fn watch(&self, prefix: Bytes, after: Revision) -> Result<WatchStream, StorageError> {
        let covered = self.watch_may_cover(&prefix);
        let stream = self.inner.watch(prefix, after).await?;
        if !covered {
            return Ok(stream);
        }
        let prefixes = self.prefixes.clone();
        Ok(stream.map_events(move |e: &mut Event| {
            prefixes.decrypt_lossy(&mut e.kv);
            if let Some(prev) = &mut e.prev {
                prefixes.decrypt_lossy(prev);
            }
        }))
    }

    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        self.inner.compact(revision).await
    }

    async fn request_progress(&self, prefix: &[u8]) -> Result<(), StorageError> {
        self.inner.request_progress(prefix).await
    }

    async fn current_revision(&self) -> Result<Revision, StorageError> {
        self.inner.current_revision().await
    }

    async fn compacted_revision(&self) -> Result<Revision, StorageError> {
        self.inner.compacted_revision().await
    }

    async fn ready(&self) -> Result<(), StorageError> {
        self.inner.ready().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encryption::value_transformer::ProviderKeys;
    use storage::memory::MemoryStorage;
    use storage::{EventKind, WatchMessage};

    const SECRET: &str = "/registry/secrets/default/db";
    const POD: &str = "/registry/pods/default/web";
    const PLAIN: &[u8] = br#"{"kind":"Secret","data":{"password":"aHVudGVyMg=="}}"#;

    fn keys(providers: &[(&str, u8)]) -> Arc<ValueTransformer> {
        let list: Vec<ProviderKeys> = providers
            .iter()
            .map(|(name, byte)| match *name {
                "identity" => ProviderKeys::Identity,
                _ if name.starts_with("box") => {
                    ProviderKeys::Secretbox(vec![(name.to_string(), vec![*byte; 32])])
                }
                _ => ProviderKeys::AesGcm(vec![(name.to_string(), vec![*byte; 32])]),
            })
            .collect();
        Arc::new(ValueTransformer::new(&list).unwrap().unwrap())
    }

    fn secrets_with(inner: &Arc<dyn Storage>, t: Arc<ValueTransformer>) -> EncryptedStorage {
        EncryptedStorage::with_prefixes(inner.clone(), vec![("/registry/secrets/".into(), t)])
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    /// The storage contract holds with every key encrypted.
    #[tokio::test]
    async fn conformance_with_every_value_encrypted() {
        for t in [keys(&[("k1", 1)]), keys(&[("box1", 2)])] {
            storage::conformance::run_all(|| {
                EncryptedStorage::with_prefixes(
                    Arc::new(MemoryStorage::new()),
                    vec![("/".into(), t.clone())],
                )
            })
            .await;
        }
    }

    #[tokio::test]
    async fn listed_resources_are_encrypted_and_others_untouched() {
        let inner: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let s = secrets_with(&inner, keys(&[("k1", 1)]));
        let plain = Bytes::from_static(PLAIN);
        let created = s.create(SECRET.into(), plain.clone()).await.unwrap();
        assert_eq!(created.value, plain);
        let pod = Bytes::from_static(b"{\"kind\":\"Pod\"}");
        s.create(POD.into(), pod.clone()).await.unwrap();

        let raw = inner.get(SECRET.as_bytes()).await.unwrap().unwrap().value;
        assert!(raw.starts_with(b"k8s:enc:aesgcm:v1:k1:"));
        assert!(!contains(&raw, b"aHVudGVyMg==") && !contains(&raw, b"Secret"));
        let direct = inner.get(POD.as_bytes()).await.unwrap().unwrap().value;
        assert_eq!(direct, pod);
        let through = s.get(POD.as_bytes()).await.unwrap().unwrap().value;
        assert_eq!(
            through.as_ptr(),
            direct.as_ptr(),
            "no copy of unlisted values"
        );

        assert_eq!(
            s.get(SECRET.as_bytes()).await.unwrap().unwrap().value,
            plain
        );
        assert_eq!(
            s.get_for_update(SECRET.as_bytes()).await.unwrap().unwrap(),
            (created.clone(), false)
        );
        // A range over everything decrypts what it must and nothing else.
        let all = s.range(RangeRequest::prefix("/registry/")).await.unwrap();
        let values: Vec<_> = all.kvs.iter().map(|kv| kv.value.clone()).collect();
        assert_eq!(values, [pod.clone(), plain.clone()]);
        // A range of pods alone is not looked at.
        let pods = s
            .range(RangeRequest::prefix("/registry/pods/"))
            .await
            .unwrap();
        assert_eq!(pods.kvs[0].value, pod);
        assert!(!s.range_may_cover(b"/registry/pods/", &prefix_end(b"/registry/pods/")));
        assert!(s.range_may_cover(b"/registry/", b"\0"));
        assert!(s.range_may_cover(SECRET.as_bytes(), b""));
        assert!(!s.range_may_cover(POD.as_bytes(), b""));
        assert!(!s.range_may_cover(b"/registry/t", b"\0"));
        assert!(!s.watch_may_cover(b"/registry/pods/"));
        assert!(s.watch_may_cover(b"/registry/"));
        assert!(s.watch_may_cover(b"/registry/secrets/default/"));

        // Conflicts and deletions hand back plaintext.
        let err = s
            .update(SECRET.into(), plain.clone(), created.mod_revision + 100)
            .await
            .unwrap_err();
        let StorageError::Conflict { current } = err else {
            panic!("{err:?}")
        };
        assert_eq!(current.value, plain);
        let (deleted, _) = s.delete(SECRET.into(), None).await.unwrap();
        assert_eq!(deleted.value, plain);
    }

    #[tokio::test]
    async fn watches_deliver_plaintext_with_previous_values() {
        let inner: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let s = secrets_with(&inner, keys(&[("box1", 3)]));
        let mut secrets = s.watch("/registry/secrets/".into(), 0).await.unwrap();
        let mut all = s.watch("/registry/".into(), 0).await.unwrap();
        let (v1, v2) = (
            Bytes::from_static(b"{\"v\":1}"),
            Bytes::from_static(b"{\"v\":2}"),
        );
        let kv = s.create(SECRET.into(), v1.clone()).await.unwrap();
        s.update(SECRET.into(), v2.clone(), kv.mod_revision)
            .await
            .unwrap();
        s.create(POD.into(), v1.clone()).await.unwrap();
        s.delete(SECRET.into(), None).await.unwrap();
        for w in [&mut secrets, &mut all] {
            let mut seen = Vec::new();
            while seen.len() < 3 {
                match w.next().await.unwrap().unwrap() {
                    WatchMessage::Events(evs) => seen.extend(
                        evs.into_iter()
                            .filter(|e| e.kv.key.starts_with(b"/registry/secrets/")),
                    ),
                    WatchMessage::Progress(_) => {}
                }
            }
            assert_eq!(seen[0].kind, EventKind::Create);
            assert_eq!(seen[0].kv.value, v1);
            assert_eq!(seen[1].kv.value, v2);
            assert_eq!(seen[1].prev.as_ref().unwrap().value, v1);
            assert_eq!(seen[2].kind, EventKind::Delete);
            assert_eq!(seen[2].prev.as_ref().unwrap().value, v2);
        }
    }

    #[tokio::test]
    async fn rotation_marks_values_under_other_keys_stale() {
        let inner: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let old = secrets_with(&inner, keys(&[("k1", 1)]));
        let plain = Bytes::from_static(PLAIN);
        let kv = old.create(SECRET.into(), plain.clone()).await.unwrap();
        let rotated = secrets_with(&inner, keys(&[("k2", 2), ("k1", 1)]));
        let (cur, stale) = rotated
            .get_for_update(SECRET.as_bytes())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((cur.value, stale), (plain.clone(), true));
        rotated
            .update(SECRET.into(), plain.clone(), kv.mod_revision)
            .await
            .unwrap();
        let raw = inner.get(SECRET.as_bytes()).await.unwrap().unwrap().value;
        assert!(raw.starts_with(b"k8s:enc:aesgcm:v1:k2:"));
        let (_, stale) = rotated
            .get_for_update(SECRET.as_bytes())
            .await
            .unwrap()
            .unwrap();
        assert!(!stale);
        // The old key alone can no longer read it.
        assert!(old.get(SECRET.as_bytes()).await.is_err());
    }

    #[tokio::test]
    async fn undecryptable_values_fail_gets_and_are_emptied_in_lists_and_watches() {
        let inner: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let writer = secrets_with(&inner, keys(&[("k1", 1)]));
        let other = format!("{SECRET}2");
        writer
            .create(SECRET.into(), Bytes::from_static(PLAIN))
            .await
            .unwrap();
        let wrong = secrets_with(&inner, keys(&[("k1", 9)]));
        let mut w = wrong.watch("/registry/secrets/".into(), 0).await.unwrap();
        // Plaintext written by a server without encryption, and a good value.
        inner
            .create(other.clone().into(), Bytes::from_static(b"{}"))
            .await
            .unwrap();
        let err = wrong.get(SECRET.as_bytes()).await.unwrap_err();
        let StorageError::Internal(msg) = err else {
            panic!("{err:?}")
        };
        assert!(
            msg.contains(SECRET) && msg.contains("could not decrypt"),
            "{msg}"
        );
        let err = wrong.get(other.as_bytes()).await.unwrap_err();
        assert!(err.to_string().contains("no identity provider"), "{err}");
        let list = wrong
            .range(RangeRequest::prefix("/registry/"))
            .await
            .unwrap();
        assert_eq!(list.kvs.len(), 2);
        assert!(list.kvs.iter().all(|kv| kv.value.is_empty()));
        let mut values = Vec::new();
        while values.len() < 2 {
            if let WatchMessage::Events(evs) = w.next().await.unwrap().unwrap() {
                values.extend(evs.into_iter().map(|e| e.kv.value));
            }
        }
        assert!(values.iter().all(Bytes::is_empty));
        // With identity listed, the plaintext one reads.
        let ident = secrets_with(&inner, keys(&[("k1", 9), ("identity", 0)]));
        let (kv, stale) = ident
            .get_for_update(other.as_bytes())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((kv.value, stale), (Bytes::from_static(b"{}"), true));
    }
}
