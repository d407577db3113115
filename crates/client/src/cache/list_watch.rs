//! `ListerWatcher`: the two calls a [`Reflector`](crate::cache::reflector::Reflector) needs
//! from the server — a (paged) list and a watch — for one resource.
//!
//! The trait is deliberately small and transport-free: the REST-backed implementation lives
//! elsewhere, tests use [`FakeListerWatcher`](crate::cache::fake_lister_watcher). Selectors
//! (namespace, label, field) are the implementation's concern: every call of one
//! `ListerWatcher` is about the same filtered set of objects.

use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The options of one list call.
///
/// `resource_version` follows the Kubernetes semantics: `"0"` = any state (served from the
/// server's cache), `""` = the most recent state (a quorum read), `"N"` = a state not older
/// than `N`. When `continue_token` is set, `resource_version` must be `""` (the token pins
/// the snapshot).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListRequest {
    /// The resourceVersion constraint (see the type documentation).
    pub resource_version: String,
    /// The page size; `None` asks for everything at once.
    pub limit: Option<u32>,
    /// The continue token of the previous page, if this asks for a later page.
    pub continue_token: Option<String>,
}

/// One page of a list answer. Objects are shared and read-only.
#[derive(Debug)]
pub struct ListPage<K> {
    /// The objects of this page.
    pub items: Vec<Arc<K>>,
    /// The resourceVersion of the list snapshot (`metadata.resourceVersion` of the list).
    pub resource_version: String,
    /// The token for the next page; `None` (or empty) when this is the last page.
    pub continue_token: Option<String>,
}

/// The options of one watch call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchRequest {
    /// Deliver the changes after this resourceVersion (`""` or `"0"`: start with synthetic
    /// `Added` events for the current state).
    pub resource_version: String,
    /// Ask the server for `BOOKMARK` events (progress notifications without objects).
    pub allow_bookmarks: bool,
    /// Ask the server to end the watch after this many seconds.
    pub timeout_seconds: Option<u64>,
    /// Watch-list mode: start with `Added` events for the whole current state, ended by a
    /// bookmark with `initial_events_end = true` (the server's `sendInitialEvents=true`).
    pub send_initial_events: bool,
}

/// One event of a watch. Objects are shared and read-only.
pub enum WatchEvent<K> {
    /// The object was created (or, in an initial-events phase, exists).
    Added(Arc<K>),
    /// The object changed; the payload is the new state.
    Modified(Arc<K>),
    /// The object was deleted; the payload is its final state.
    Deleted(Arc<K>),
    /// The server has delivered every change up to `resource_version`.
    Bookmark {
        /// The resourceVersion the watch has progressed to.
        resource_version: String,
        /// Set on the bookmark that ends the initial events of a watch-list request.
        initial_events_end: bool,
    },
}

impl<K> WatchEvent<K> {
    /// The object an added, modified or deleted event carries; `None` for a bookmark.
    pub fn object(&self) -> Option<&Arc<K>> {
        match self {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => Some(o),
            WatchEvent::Bookmark { .. } => None,
        }
    }
}

impl<K: crate::object::KubeObject> WatchEvent<K> {
    /// The resourceVersion this event carries (the object's, or the bookmark's).
    pub fn resource_version(&self) -> Option<&str> {
        match self {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                o.resource_version()
            }
            WatchEvent::Bookmark {
                resource_version, ..
            } => Some(resource_version),
        }
    }
}

impl<K> Clone for WatchEvent<K> {
    fn clone(&self) -> Self {
        match self {
            WatchEvent::Added(o) => WatchEvent::Added(Arc::clone(o)),
            WatchEvent::Modified(o) => WatchEvent::Modified(Arc::clone(o)),
            WatchEvent::Deleted(o) => WatchEvent::Deleted(Arc::clone(o)),
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => WatchEvent::Bookmark {
                resource_version: resource_version.clone(),
                initial_events_end: *initial_events_end,
            },
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for WatchEvent<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchEvent::Added(o) => f.debug_tuple("Added").field(o).finish(),
            WatchEvent::Modified(o) => f.debug_tuple("Modified").field(o).finish(),
            WatchEvent::Deleted(o) => f.debug_tuple("Deleted").field(o).finish(),
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => f
                .debug_struct("Bookmark")
                .field("resource_version", resource_version)
                .field("initial_events_end", initial_events_end)
                .finish(),
        }
    }
}

/// Why a list or a watch failed; the reflector picks its recovery from the variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// 410 Gone / Expired: the requested resourceVersion is no longer in the server's
    /// history (or a continue token expired). The reflector relists.
    #[error("resource version too old (410 Gone)")]
    Gone,
    /// 504 with the `ResourceVersionTooLarge` cause: the requested resourceVersion is newer
    /// than the server has. A list retries at once at `""` (the newest state); a watch ends
    /// its cycle, like any other error.
    #[error("resource version too large (the server is behind it)")]
    TooLargeResourceVersion,
    /// 429: the server asks the client to slow down. The reflector backs off and retries.
    #[error("too many requests (429), retry after {retry_after:?}")]
    TooManyRequests {
        /// The server's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },
    /// The connection was refused (the server is down or restarting). Backoff and retry.
    #[error("connection refused")]
    ConnectionRefused,
    /// The watch received nothing (not even a bookmark) for longer than the client's idle
    /// limit, so the connection is presumed dead. The reflector re-watches.
    #[error("watch idle timeout")]
    IdleTimeout,
    /// A transport failure (reset, TLS, malformed frame ...).
    #[error("transport error: {0}")]
    Transport(String),
    /// Anything else (a server error status, a decode failure ...).
    #[error("{0}")]
    Other(String),
}

/// The events of one open watch, in the order the server sent them.
///
/// `next` returns `None` when the server ended the watch cleanly (timeout, shutdown);
/// `Some(Err(_))` reports a failure, after which the source should not be polled again.
/// Dropping the source closes the watch.
#[async_trait]
pub trait EventSource<K>: Send {
    /// The next event, `None` at a clean end of the stream.
    async fn next(&mut self) -> Option<Result<WatchEvent<K>, WatchError>>;

    /// The next event if it is available without waiting (already received and buffered);
    /// `None` means only "nothing ready right now" — call [`EventSource::next`] to wait, and
    /// to learn about the end of the stream. Lets a consumer take a burst of events in one
    /// go. The default never has anything ready.
    fn try_next(&mut self) -> Option<Result<WatchEvent<K>, WatchError>> {
        None
    }
}

/// An open watch ([`EventSource`]) as a [`futures_core::Stream`], from
/// `<dyn EventSource<K>>::into_stream`.
pub type EventStream<K> =
    crate::stream::NextStream<Box<dyn EventSource<K>>, Result<WatchEvent<K>, WatchError>>;

impl<K: 'static> dyn EventSource<K> {
    /// This watch as a [`futures_core::Stream`], to compose with `futures::StreamExt`: the
    /// same events as [`EventSource::next`], in order, ending where `next` returns `None`.
    /// See [`NextStream`](crate::stream::NextStream).
    pub fn into_stream(self: Box<Self>) -> EventStream<K> {
        crate::stream::NextStream::new(self, |mut source| {
            Box::pin(async move {
                let event = source.next().await;
                (source, event)
            })
        })
    }
}

/// Lists and watches one (filtered) resource.
///
/// Contract: both calls see the same set of objects (same namespace and selectors); the
/// list's `resource_version` can be used to watch from; objects are returned as shared,
/// read-only `Arc`s.
#[async_trait]
pub trait ListerWatcher<K>: Send + Sync + 'static {
    /// One page of a list.
    async fn list(&self, request: ListRequest) -> Result<ListPage<K>, WatchError>;

    /// One page of a list, handed to `sink` in order while it arrives (in one batch or
    /// several); the page returned holds no items, only its resourceVersion and continue
    /// token. Items already handed over stay handed over if the call then fails. The default
    /// lists the page with [`ListerWatcher::list`] and hands it over whole; the REST
    /// implementation decodes items as the response arrives, so a large unpaged list is
    /// never held whole.
    async fn list_streaming(
        &self,
        request: ListRequest,
        sink: &mut (dyn FnMut(Vec<Arc<K>>) + Send),
    ) -> Result<ListPage<K>, WatchError> {
        let mut page = self.list(request).await?;
        sink(std::mem::take(&mut page.items));
        Ok(page)
    }
    /// Opens a watch.
    async fn watch(&self, request: WatchRequest) -> Result<Box<dyn EventSource<K>>, WatchError>;
}

#[async_trait]
impl<K: Send + Sync + 'static, T: ListerWatcher<K> + ?Sized> ListerWatcher<K> for Arc<T> {
    async fn list(&self, request: ListRequest) -> Result<ListPage<K>, WatchError> {
        (**self).list(request).await
    }
    async fn list_streaming(
        &self,
        request: ListRequest,
        sink: &mut (dyn FnMut(Vec<Arc<K>>) + Send),
    ) -> Result<ListPage<K>, WatchError> {
        (**self).list_streaming(request, sink).await
    }
    async fn watch(&self, request: WatchRequest) -> Result<Box<dyn EventSource<K>>, WatchError> {
        (**self).watch(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::DynamicObject;

    #[test]
    fn event_resource_version() {
        let o = Arc::new(
            DynamicObject::from_slice(br#"{"metadata":{"name":"a","resourceVersion":"7"}}"#)
                .unwrap(),
        );
        assert_eq!(WatchEvent::Added(o.clone()).resource_version(), Some("7"));
        assert!(Arc::ptr_eq(
            WatchEvent::Modified(o.clone()).object().unwrap(),
            &o
        ));
        assert_eq!(WatchEvent::Deleted(o).resource_version(), Some("7"));
        let b: WatchEvent<DynamicObject> = WatchEvent::Bookmark {
            resource_version: "9".into(),
            initial_events_end: false,
        };
        assert!(b.object().is_none());
        assert_eq!(b.resource_version(), Some("9"));
        assert!(format!("{:?}", b.clone()).contains("Bookmark"));
    }

    #[test]
    fn errors_display() {
        assert!(WatchError::Gone.to_string().contains("410"));
        assert!(WatchError::TooManyRequests { retry_after: None }
            .to_string()
            .contains("429"));
    }
}
