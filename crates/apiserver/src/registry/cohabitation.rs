//! Resources that share another resource's storage, as Kubernetes' cohabitating resources
//! do: `events.k8s.io/v1` events are the core events, kept once under `/registry/events/` in
//! the core form. An object written through one API is read, listed and watched through the
//! other, with one resourceVersion.
//!
//! [`CohabitingStorage`] wraps the store and gives each such resource its own key space (the
//! alias prefix its [`ResourceInfo::key_prefix`](super::ResourceInfo::key_prefix) names):
//! a key under the alias is the stored key under the real prefix, and values are converted
//! on the way in and out. So the rest of the server — handlers, cacher, paging — treats the
//! alias like any other resource. Writes, reads, ranges and watches at or below an alias
//! prefix are translated; a range or watch over a wider prefix (e.g. all of `/registry/`)
//! sees the stored keys only, once.

use super::event_conversion;
use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Map, Value};
use std::sync::Arc;
use storage::{
    Event, KeyValue, RangeRequest, RangeResponse, Revision, Storage, StorageError, WatchStream,
};

/// A resource whose objects live under another resource's keys.
#[derive(Debug)]
pub struct Cohabitant {
    /// The key prefix its clients use (its own resource prefix), ending in `/`.
    pub alias: &'static str,
    /// Where its objects are stored, ending in `/`.
    pub stored: &'static str,
    /// Turns a stored object into the alias resource's form.
    pub read: fn(&mut Map<String, Value>),
    /// Turns an object of the alias resource into the stored form.
    pub write: fn(&mut Map<String, Value>),
}

/// The cohabitants listwatch serves: `events.k8s.io/v1` events over the core events.
pub static COHABITANTS: &[Cohabitant] = &[Cohabitant {
    alias: "/registry/events.k8s.io/events/",
    stored: "/registry/events/",
    read: event_conversion::core_to_events_v1,
    write: event_conversion::events_v1_to_core,
}];

/// A [`Storage`] that serves each of its cohabitants' alias keys from the stored ones.
pub struct CohabitingStorage {
    inner: Arc<dyn Storage>,
    cohabitants: &'static [Cohabitant],
}

impl std::fmt::Debug for CohabitingStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CohabitingStorage")
            .field("cohabitants", &self.cohabitants)
            .finish()
    }
}

impl CohabitingStorage {
    /// `inner` with `cohabitants`' aliases served from their stored keys.
    pub fn new(inner: Arc<dyn Storage>, cohabitants: &'static [Cohabitant]) -> CohabitingStorage {
        CohabitingStorage { inner, cohabitants }
    }

    /// The cohabitant whose alias `key` is under, and the stored key.
    fn resolve(&self, key: &[u8]) -> Option<(&'static Cohabitant, Bytes)> {
        self.cohabitants.iter().find_map(|c| {
            let rest = key.strip_prefix(c.alias.as_bytes())?;
            let mut real = Vec::with_capacity(c.stored.len() + rest.len());
            real.extend_from_slice(c.stored.as_bytes());
            real.extend_from_slice(rest);
            Some((c, Bytes::from(real)))
        })
    }
}

/// `value` (JSON) converted by `f`; left as it is when it is no JSON object (empty for a
/// delete, or not decodable: the reader reports that).
fn convert(value: &Bytes, f: fn(&mut Map<String, Value>)) -> Bytes {
    if value.is_empty() {
        return value.clone();
    }
    match serde_json::from_slice::<Value>(value) {
        Ok(Value::Object(mut m)) => {
            f(&mut m);
            Bytes::from(serde_json::to_vec(&Value::Object(m)).unwrap_or_default())
        }
        _ => value.clone(),
    }
}

/// A stored key-value as the cohabitant sees it: alias key, converted value.
fn to_alias(c: &Cohabitant, mut kv: KeyValue) -> KeyValue {
    if let Some(rest) = kv.key.strip_prefix(c.stored.as_bytes()) {
        let mut key = Vec::with_capacity(c.alias.len() + rest.len());
        key.extend_from_slice(c.alias.as_bytes());
        key.extend_from_slice(rest);
        kv.key = Bytes::from(key);
    }
    kv.value = convert(&kv.value, c.read);
    kv
}

#[async_trait]
impl Storage for CohabitingStorage {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StorageError> {
        match self.resolve(key) {
            Some((c, real)) => Ok(self.inner.get(&real).await?.map(|kv| to_alias(c, kv))),
            None => self.inner.get(key).await,
        }
    }

    async fn get_for_update(&self, key: &[u8]) -> Result<Option<(KeyValue, bool)>, StorageError> {
        match self.resolve(key) {
            Some((c, real)) => Ok(self
                .inner
                .get_for_update(&real)
                .await?
                .map(|(kv, stale)| (to_alias(c, kv), stale))),
            None => self.inner.get_for_update(key).await,
        }
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, StorageError> {
        let Some((c, start)) = self.resolve(&req.start) else {
            return self.inner.range(req).await;
        };
        let end = if req.end.is_empty() {
            req.end.clone()
        } else if let Some((_, end)) = self.resolve(&req.end).filter(|(e, _)| e.alias == c.alias) {
            end
        } else if req.end.as_ref() != b"\0" && req.end <= req.start {
            // Selects nothing, as the request did.
            start.clone()
        } else {
            // Past the alias' keys: up to the end of the stored ones.
            storage::prefix_end(c.stored.as_bytes())
        };
        let mut resp = self.inner.range(RangeRequest { start, end, ..req }).await?;
        resp.kvs = resp.kvs.into_iter().map(|kv| to_alias(c, kv)).collect();
        Ok(resp)
    }

    async fn create(&self, key: Bytes, value: Bytes) -> Result<KeyValue, StorageError> {
        match self.resolve(&key) {
            Some((c, real)) => {
                let kv = self.inner.create(real, convert(&value, c.write)).await?;
                Ok(to_alias(c, kv))
            }
            None => self.inner.create(key, value).await,
        }
    }

    async fn update(
        &self,
        key: Bytes,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        match self.resolve(&key) {
            Some((c, real)) => {
                let written = self.inner.update(real, convert(&value, c.write), expected);
                match written.await {
                    Ok(kv) => Ok(to_alias(c, kv)),
                    Err(StorageError::Conflict { current }) => Err(StorageError::Conflict {
                        current: Box::new(to_alias(c, *current)),
                    }),
                    Err(e) => Err(e),
                }
            }
            None => self.inner.update(key, value, expected).await,
        }
    }

    async fn delete(
        &self,
        key: Bytes,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StorageError> {
        match self.resolve(&key) {
            Some((c, real)) => match self.inner.delete(real, expected).await {
                Ok((kv, rev)) => Ok((to_alias(c, kv), rev)),
                Err(StorageError::Conflict { current }) => Err(StorageError::Conflict {
                    current: Box::new(to_alias(c, *current)),
                }),
                Err(e) => Err(e),
            },
            None => self.inner.delete(key, expected).await,
        }
    }

    async fn watch(&self, prefix: Bytes, after: Revision) -> Result<WatchStream, StorageError> {
        match self.resolve(&prefix) {
            Some((c, real)) => {
                let stream = self.inner.watch(real, after).await?;
                Ok(stream.map_events(move |e: &mut Event| {
                    e.kv = to_alias(c, e.kv.clone());
                    e.prev = e.prev.take().map(|p| to_alias(c, p));
                }))
            }
            None => self.inner.watch(prefix, after).await,
        }
    }

    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        self.inner.compact(revision).await
    }

    async fn request_progress(&self, prefix: &[u8]) -> Result<(), StorageError> {
        match self.resolve(prefix) {
            Some((_, real)) => self.inner.request_progress(&real).await,
            None => self.inner.request_progress(prefix).await,
        }
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
    use serde_json::json;
    use storage::memory::MemoryStorage;
    use storage::WatchMessage;

    fn core_event(name: &str) -> Bytes {
        Bytes::from(
            serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": "default"},
                "involvedObject": {"kind": "Pod", "name": "p"}, "message": "hello"}))
            .unwrap(),
        )
    }

    fn json_of(b: &Bytes) -> Value {
        serde_json::from_slice(b).unwrap()
    }

    #[tokio::test]
    async fn alias_keys_read_write_range_and_watch_the_stored_objects() {
        let inner: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let s = CohabitingStorage::new(inner.clone(), COHABITANTS);
        let alias = "/registry/events.k8s.io/events/";
        inner
            .create("/registry/events/default/a".into(), core_event("a"))
            .await
            .unwrap();
        let from = s.current_revision().await.unwrap();
        let mut w = s
            .watch(format!("{alias}default/").into(), from)
            .await
            .unwrap();
        // Through the alias, the stored core event reads in the events.k8s.io form.
        let got = s
            .get(format!("{alias}default/a").as_bytes())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.key, format!("{alias}default/a").as_bytes());
        let v = json_of(&got.value);
        assert_eq!(v["apiVersion"], "events.k8s.io/v1");
        assert_eq!(v["note"], "hello");
        assert_eq!(v["regarding"]["name"], "p");
        // A write through the alias is stored in the core form, under the core key.
        let mut new = v.clone();
        new["metadata"]["name"] = json!("b");
        new["note"] = json!("bye");
        let created = s
            .create(
                format!("{alias}default/b").into(),
                serde_json::to_vec(&new).unwrap().into(),
            )
            .await
            .unwrap();
        assert_eq!(json_of(&created.value)["note"], "bye");
        let stored = inner
            .get(b"/registry/events/default/b")
            .await
            .unwrap()
            .unwrap();
        let stored = json_of(&stored.value);
        assert_eq!(
            (stored["apiVersion"].clone(), stored["message"].clone()),
            (json!("v1"), json!("bye"))
        );
        assert!(stored.get("note").is_none());
        // Ranges (whole prefix and a page) and watches see both, as the alias form.
        let all = s
            .range(RangeRequest::prefix(alias.as_bytes().to_vec()))
            .await
            .unwrap();
        assert_eq!(all.kvs.len(), 2);
        assert!(all
            .kvs
            .iter()
            .all(|kv| kv.key.starts_with(alias.as_bytes())));
        let page = s
            .range(RangeRequest {
                start: format!("{alias}default/a\0").into(),
                end: storage::prefix_end(alias.as_bytes()),
                revision: 0,
                limit: 10,
            })
            .await
            .unwrap();
        assert_eq!(page.kvs.len(), 1);
        assert_eq!(page.kvs[0].key, format!("{alias}default/b").as_bytes());
        match w.next().await.unwrap().unwrap() {
            WatchMessage::Events(evs) => {
                assert_eq!(evs[0].kv.key, format!("{alias}default/b").as_bytes());
                assert_eq!(json_of(&evs[0].kv.value)["note"], "bye");
            }
            other => panic!("{other:?}"),
        }
        // A delete through the core key is seen through the alias, with the old value.
        inner
            .delete("/registry/events/default/b".into(), None)
            .await
            .unwrap();
        match w.next().await.unwrap().unwrap() {
            WatchMessage::Events(evs) => {
                assert!(evs[0].kv.value.is_empty());
                let prev = evs[0].prev.as_ref().unwrap();
                assert_eq!(json_of(&prev.value)["note"], "bye");
            }
            other => panic!("{other:?}"),
        }
        // Other keys pass through untouched.
        s.create(
            "/registry/configmaps/default/c".into(),
            Bytes::from_static(b"{}"),
        )
        .await
        .unwrap();
        assert!(inner
            .get(b"/registry/configmaps/default/c")
            .await
            .unwrap()
            .is_some());
    }
}
