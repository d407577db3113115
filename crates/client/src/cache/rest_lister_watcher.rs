//! `RestListerWatcher`: the [`ListerWatcher`] that talks to an API server through the REST
//! [`Client`].
//!
//! One `RestListerWatcher` is about one filtered set of objects: an [`ApiResource`], a
//! namespace (or all of them), a label selector and a field selector — for example the seed
//! 001 scheduler's unfinished pods, `status.phase!=Succeeded,status.phase!=Failed`. Both of
//! its calls send the same selection, so the list and the watch agree on what exists.
//!
//! Objects are read from the raw JSON text of each list item and each watch event (the
//! client slices it out of the response without building a JSON tree) and decoded with
//! [`DecodeObject`]: [`DynamicObject`](crate::object::DynamicObject) parses only the
//! metadata the caches need, typed `k8s-openapi` objects go through `serde`. For a type read
//! from protobuf ([`ProtobufObject`](crate::protobuf_object::ProtobufObject)) both calls ask
//! for Kubernetes' protobuf encoding instead, as Go controllers do.
//!
//! Failures are mapped to the [`WatchError`] the [`Reflector`](crate::cache::Reflector)
//! recovers from:
//!
//! | REST failure | `WatchError` |
//! |---|---|
//! | HTTP 410 (`Gone`/`Expired`), or an `ERROR` event with code 410 inside the stream | `Gone` |
//! | HTTP 429, or an `ERROR` event with code 429 | `TooManyRequests` (with the server's retry-after) |
//! | the TCP connection was refused | `ConnectionRefused` |
//! | nothing received for the idle timeout | `IdleTimeout` |
//! | any other transport failure | `Transport` |
//! | anything else (other statuses, undecodable objects) | `Other` |
//!
//! A watch is given a client-side **idle timeout** ([`DEFAULT_WATCH_IDLE_TIMEOUT`] unless
//! configured): the server sends a bookmark about once a minute, so a watch silent for much
//! longer than that is on a dead connection and is abandoned (the reflector re-watches).

use crate::cache::factory::ListWatchOptions;
use crate::cache::list_watch::{
    EventSource, ListPage, ListRequest, ListerWatcher, WatchError, WatchEvent, WatchRequest,
};
use crate::managed_fields_trim::{decode_trimmed, decode_well_formed_trimmed};
use crate::object::DecodeObject;
use crate::rest::watch_decoder::INITIAL_EVENTS_END_ANNOTATION;
use crate::rest::{ApiResource, Client, Error, ListParams, Selection, WatchParams, WatchStream};
use api::status::{Reason, Status};
use async_trait::async_trait;
use bytes::Bytes;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// The idle timeout of a watch unless configured: 2.5 × the server's one-minute bookmark
/// period, so one late bookmark never cuts a healthy watch.
pub const DEFAULT_WATCH_IDLE_TIMEOUT: Duration = Duration::from_secs(150);

/// Lists and watches one filtered resource through the REST [`Client`]. Cheap to clone.
///
/// `K` is the object type: [`DynamicObject`](crate::object::DynamicObject) for any resource,
/// or a typed `k8s-openapi` object (see [`RestListerWatcher::for_type`]).
///
/// ```no_run
/// # async fn demo() -> Result<(), client::rest::Error> {
/// use client::cache::{ConfigureReflector as _, RestListerWatcher, SharedIndexInformer};
/// use client::object::DynamicObject;
/// use client::rest::{resource::PODS, Client};
/// use std::sync::Arc;
///
/// let client = Client::try_default()?;
/// let lw = RestListerWatcher::<DynamicObject>::new(client, PODS)
///     .fields("status.phase!=Succeeded,status.phase!=Failed");
/// let informer = SharedIndexInformer::builder(Arc::new(lw)).name("pods").build();
/// informer.start();
/// # Ok(())
/// # }
/// ```
#[must_use]
pub struct RestListerWatcher<K> {
    client: Client,
    resource: ApiResource,
    options: ListWatchOptions,
    idle_timeout: Option<Duration>,
    _object: PhantomData<fn() -> K>,
}

impl<K> Clone for RestListerWatcher<K> {
    fn clone(&self) -> Self {
        RestListerWatcher {
            client: self.client.clone(),
            resource: self.resource.clone(),
            options: self.options.clone(),
            idle_timeout: self.idle_timeout,
            _object: PhantomData,
        }
    }
}

impl<K> fmt::Debug for RestListerWatcher<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestListerWatcher")
            .field("resource", &self.resource)
            .field("options", &self.options)
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl<K: DecodeObject> RestListerWatcher<K> {
    /// Every object of `resource` in all namespaces, with the default idle timeout.
    pub fn new(client: Client, resource: ApiResource) -> RestListerWatcher<K> {
        RestListerWatcher {
            client,
            resource,
            options: ListWatchOptions::default(),
            idle_timeout: Some(DEFAULT_WATCH_IDLE_TIMEOUT),
            _object: PhantomData,
        }
    }

    /// Only objects in `namespace` (ignored for cluster-scoped resources; `""` = all).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.options.namespace = Some(namespace.into()).filter(|n| !n.is_empty());
        self
    }

    /// Only objects matching this label selector (wire syntax, e.g. `app=web,tier!=db`),
    /// replacing any set before (`""` = none): [`Selection::labels`].
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.options.selection = std::mem::take(&mut self.options.selection).labels(selector);
        self
    }

    /// Only objects matching this field selector (wire syntax, e.g. `spec.nodeName=n1`),
    /// replacing any set before (`""` = none): [`Selection::fields`].
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.options.selection = std::mem::take(&mut self.options.selection).fields(selector);
        self
    }

    /// Only objects matching both selectors of `selection`, replacing the selectors set
    /// before (the namespace stays).
    pub fn selection(mut self, selection: Selection) -> Self {
        self.options.selection = selection;
        self
    }

    /// Replaces namespace, selectors and managed-field stripping at once (as a factory
    /// hands them out).
    pub fn with_options(mut self, options: &ListWatchOptions) -> Self {
        self.options = options.clone();
        self
    }

    /// Objects are decoded without `metadata.managedFields`
    /// ([`ListWatchOptions::strip_managed_fields`]). Protobuf objects keep them.
    pub fn strip_managed_fields(mut self, strip: bool) -> Self {
        self.options.strip_managed_fields = strip;
        self
    }

    /// The client-side idle timeout of every watch (`None` = never give up on a silent
    /// watch). Keep it well above the server's bookmark period (about a minute).
    pub fn idle_timeout(mut self, idle_timeout: Option<Duration>) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// The resource listed and watched.
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The namespace and selectors every call sends.
    pub fn options(&self) -> &ListWatchOptions {
        &self.options
    }

    fn namespace_ref(&self) -> Option<&str> {
        self.options.namespace.as_deref()
    }
}

impl<K> RestListerWatcher<K>
where
    K: DecodeObject + k8s_openapi::Resource,
    K::Scope: 'static,
{
    /// Every object of the typed `k8s-openapi` kind `K` (its resource is
    /// [`ApiResource::of::<K>`](ApiResource::of)), e.g.
    /// `RestListerWatcher::<Pod>::for_type(client)`.
    pub fn for_type(client: Client) -> RestListerWatcher<K> {
        RestListerWatcher::new(client, ApiResource::of::<K>())
    }
}

/// Maps a REST failure to the reflector's recovery classes (see the [module docs](self)).
pub fn watch_error_from_rest(error: &Error) -> WatchError {
    if error.is_gone() || error.code() == Some(410) {
        return WatchError::Gone;
    }
    if error.is_resource_version_too_large() {
        return WatchError::TooLargeResourceVersion;
    }
    if error.is_too_many_requests() || error.code() == Some(429) {
        return WatchError::TooManyRequests {
            retry_after: error.retry_after(),
        };
    }
    match error {
        Error::IdleTimeout(_) => WatchError::IdleTimeout,
        Error::Transport { .. } if is_connection_refused(error) => WatchError::ConnectionRefused,
        Error::Transport { .. } | Error::Timeout(_) => WatchError::Transport(error.to_string()),
        other => WatchError::Other(other.to_string()),
    }
}

/// Whether an `io::Error` with kind `ConnectionRefused` is somewhere in the source chain.
fn is_connection_refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        current = e.source();
    }
    false
}

/// The error an `ERROR` watch event stands for.
fn watch_error_from_status(status: &Status) -> WatchError {
    if status
        .causes
        .iter()
        .any(|c| c.reason == "ResourceVersionTooLarge")
    {
        return WatchError::TooLargeResourceVersion;
    }
    match (status.code(), status.reason) {
        (410, _) | (_, Reason::Gone | Reason::Expired) => WatchError::Gone,
        (429, _) | (_, Reason::TooManyRequests) => WatchError::TooManyRequests {
            retry_after: status
                .retry_after
                .map(|s| Duration::from_secs(u64::from(s))),
        },
        _ => WatchError::Other(format!(
            "watch ERROR event: {} ({}): {}",
            status.code(),
            status.reason.as_str(),
            status.message
        )),
    }
}

/// Decodes the raw text of a list item (JSON that the parse which cut it out of the response
/// validated, so the object need not re-validate), or its protobuf message.
fn decode<K: DecodeObject>(raw: &Bytes, what: &str, trim: bool) -> Result<Arc<K>, WatchError> {
    if K::PROTOBUF {
        K::decode_protobuf(raw)
    } else if trim {
        decode_well_formed_trimmed(raw)
    } else {
        K::decode_well_formed(raw)
    }
    .map(Arc::new)
    .map_err(|e| WatchError::Other(format!("cannot decode {what}: {e}")))
}

/// Items a streamed list hands over at once (the reflector's page size).
const STREAMED_BATCH: usize = 500;

impl<K> RestListerWatcher<K> {
    fn list_params(&self, request: ListRequest) -> ListParams {
        ListParams {
            selection: self.options.selection.clone(),
            limit: request.limit,
            continue_token: request.continue_token.filter(|t| !t.is_empty()),
            resource_version: Some(request.resource_version).filter(|rv| !rv.is_empty()),
            resource_version_match: None,
            timeout_seconds: None,
        }
    }
}

#[async_trait]
impl<K: DecodeObject> ListerWatcher<K> for RestListerWatcher<K> {
    async fn list_streaming(
        &self,
        request: ListRequest,
        sink: &mut (dyn FnMut(Vec<Arc<K>>) + Send),
    ) -> Result<ListPage<K>, WatchError> {
        let params = self.list_params(request);
        let trim = self.options.strip_managed_fields;
        let mut batch = Vec::new();
        let mut on_item = |raw: &[u8]| {
            // Validating decode: nothing parsed the whole body first.
            let obj = if K::PROTOBUF {
                K::decode_protobuf(raw)
            } else if trim {
                decode_trimmed(raw)
            } else {
                K::decode(raw)
            }
            .map_err(|e| {
                crate::rest::Error::decode(
                    "a list item",
                    <serde_json::Error as serde::de::Error>::custom(e),
                )
            })?;
            batch.push(Arc::new(obj));
            if batch.len() >= STREAMED_BATCH {
                sink(std::mem::take(&mut batch));
            }
            Ok(())
        };
        let (resource, namespace) = (&self.resource, self.namespace_ref());
        let page = if K::PROTOBUF {
            self.client
                .list_protobuf_streaming(resource, namespace, &params, &mut on_item)
                .await
        } else {
            self.client
                .list_raw_streaming(resource, namespace, &params, &mut on_item)
                .await
        }
        .map_err(|e| watch_error_from_rest(&e))?;
        if !batch.is_empty() {
            sink(batch);
        }
        Ok(ListPage {
            items: Vec::new(),
            resource_version: page.resource_version,
            continue_token: page.continue_token,
        })
    }

    async fn list(&self, request: ListRequest) -> Result<ListPage<K>, WatchError> {
        let params = self.list_params(request);
        let page = if K::PROTOBUF {
            self.client
                .list_protobuf(&self.resource, self.namespace_ref(), &params)
                .await
        } else {
            self.client
                .list_raw(&self.resource, self.namespace_ref(), &params)
                .await
        }
        .map_err(|e| watch_error_from_rest(&e))?;
        let items = page
            .items
            .iter()
            .map(|raw| decode::<K>(raw, "a list item", self.options.strip_managed_fields))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ListPage {
            items,
            resource_version: page.resource_version,
            continue_token: page.continue_token,
        })
    }

    async fn watch(&self, request: WatchRequest) -> Result<Box<dyn EventSource<K>>, WatchError> {
        let params = WatchParams {
            selection: self.options.selection.clone(),
            resource_version: Some(request.resource_version).filter(|rv| !rv.is_empty()),
            allow_bookmarks: request.allow_bookmarks,
            timeout_seconds: request
                .timeout_seconds
                .map(|s| u32::try_from(s).unwrap_or(u32::MAX)),
            send_initial_events: request.send_initial_events,
            idle_timeout: self.idle_timeout,
            max_line: None,
        };
        let stream = self
            .client
            .watch_objects_trimmed::<K>(
                &self.resource,
                self.namespace_ref(),
                &params,
                self.options.strip_managed_fields,
            )
            .await
            .map_err(|e| watch_error_from_rest(&e))?;
        Ok(Box::new(RestWatch::<K> {
            stream,
            done: false,
        }))
    }
}

/// One open watch of a [`RestListerWatcher`].
struct RestWatch<K> {
    stream: WatchStream<Arc<K>>,
    /// Set after the first error: the source yields nothing more.
    done: bool,
}

impl<K> RestWatch<K> {
    fn fail(&mut self, error: WatchError) -> Option<Result<WatchEvent<K>, WatchError>> {
        self.done = true;
        Some(Err(error))
    }
}

impl<K: DecodeObject> RestWatch<K> {
    fn map(
        &mut self,
        event: Result<crate::rest::WatchEvent<Arc<K>>, Error>,
    ) -> Option<Result<WatchEvent<K>, WatchError>> {
        use crate::rest::WatchEvent as Wire;
        let event = match event {
            Ok(event) => event,
            // Includes an event that could not be decoded: going on would silently lose
            // it, so the watch ends and the reflector relists.
            Err(e) => return self.fail(watch_error_from_rest(&e)),
        };
        let mapped = match event {
            Wire::Added(o) => Ok(WatchEvent::Added(o)),
            Wire::Modified(o) => Ok(WatchEvent::Modified(o)),
            Wire::Deleted(o) => Ok(WatchEvent::Deleted(o)),
            Wire::Bookmark {
                resource_version,
                annotations,
            } => Ok(WatchEvent::Bookmark {
                resource_version,
                initial_events_end: annotations
                    .get(INITIAL_EVENTS_END_ANNOTATION)
                    .is_some_and(|v| v == "true"),
            }),
            Wire::Error(status) => Err(watch_error_from_status(&status)),
        };
        match mapped {
            Ok(event) => Some(Ok(event)),
            Err(e) => self.fail(e),
        }
    }
}

#[async_trait]
impl<K: DecodeObject> EventSource<K> for RestWatch<K> {
    async fn next(&mut self) -> Option<Result<WatchEvent<K>, WatchError>> {
        if self.done {
            return None;
        }
        let event = self.stream.next().await?;
        self.map(event)
    }

    fn try_next(&mut self) -> Option<Result<WatchEvent<K>, WatchError>> {
        if self.done {
            return None;
        }
        let event = self.stream.try_next()?;
        self.map(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{DynamicObject, KubeObject};
    use crate::rest::Config;
    use std::io::{Read as _, Write as _};
    use std::net::TcpListener;

    /// A one-shot HTTP/1.1 server on a thread: answers each accepted connection with the
    /// next canned response and records the request line.
    struct Canned {
        url: String,
        requests: Arc<parking_lot::Mutex<Vec<String>>>,
    }

    fn canned(responses: Vec<String>) -> Canned {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for response in responses {
                let Ok((mut conn, _)) = listener.accept() else {
                    return;
                };
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&got);
                seen.lock()
                    .push(text.lines().next().unwrap_or_default().to_string());
                let _ = conn.write_all(response.as_bytes());
                let _ = conn.flush();
            }
        });
        Canned { url, requests }
    }

    fn response(code: u16, headers: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n{body}",
            body.len()
        )
    }

    fn client(url: &str) -> Client {
        let mut config = Config::new(url).unwrap();
        config.timeout = Some(Duration::from_secs(10));
        Client::new(config).unwrap()
    }

    fn status(code: u16, reason: &str) -> String {
        format!(
            r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"m","reason":"{reason}","code":{code}}}"#
        )
    }

    const POD_A: &str = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"5","labels":{"app":"web"}},"spec":{"containers":[]}}"#;

    #[tokio::test]
    async fn streamed_lists_hand_over_items_in_batches() {
        let items: Vec<String> = (0..1_203)
            .map(|i| POD_A.replace("\"name\":\"a\"", &format!("\"name\":\"p{i}\"")))
            .collect();
        let body = format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"9"}},"items":[{}]}}"#,
            items.join(",")
        );
        let bad = body.replacen("\"spec\":{", "\"spec\":{,", 1);
        let server = canned(vec![response(200, "", &body), response(200, "", &bad)]);
        let lw = RestListerWatcher::<DynamicObject>::new(
            client(&server.url),
            crate::rest::resource::PODS,
        );
        let mut batches = Vec::new();
        let page = lw
            .list_streaming(ListRequest::default(), &mut |b: Vec<Arc<DynamicObject>>| {
                batches.push(b)
            })
            .await
            .unwrap();
        assert_eq!(page.resource_version, "9");
        assert!(page.items.is_empty());
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![500, 500, 203]);
        assert_eq!(batches[2][202].name(), "p1202");
        // Items are validated one by one: a malformed one fails the list.
        let err = lw
            .list_streaming(ListRequest::default(), &mut |_b: Vec<
                Arc<DynamicObject>,
            >| {})
            .await
            .unwrap_err();
        assert!(format!("{err:?}").contains("list item"), "{err:?}");
    }

    #[tokio::test]
    async fn list_sends_selectors_and_decodes_items() {
        let body = format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"9","continue":"tok"}},"items":[{POD_A}]}}"#
        );
        let server = canned(vec![response(200, "", &body), response(200, "", &body)]);
        let lw = RestListerWatcher::<DynamicObject>::new(
            client(&server.url),
            crate::rest::resource::PODS,
        )
        .namespace("ns")
        .labels("app=web")
        .fields("status.phase!=Succeeded,status.phase!=Failed");
        let page = lw
            .list(ListRequest {
                resource_version: "0".into(),
                limit: Some(500),
                continue_token: None,
            })
            .await
            .unwrap();
        assert_eq!(page.resource_version, "9");
        assert_eq!(page.continue_token.as_deref(), Some("tok"));
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].name(), "a");
        assert_eq!(page.items[0].resource_version(), Some("5"));
        // The same selection through the typed path.
        let typed =
            RestListerWatcher::<k8s_openapi::api::core::v1::Pod>::for_type(client(&server.url))
                .with_options(lw.options());
        let page = typed
            .list(ListRequest {
                resource_version: String::new(),
                limit: None,
                continue_token: Some("tok".into()),
            })
            .await
            .unwrap();
        assert_eq!(page.items[0].metadata.name.as_deref(), Some("a"));
        let reqs = server.requests.lock().clone();
        assert!(
            reqs[0].starts_with("GET /api/v1/namespaces/ns/pods?"),
            "{reqs:?}"
        );
        for part in [
            "labelSelector=app%3Dweb",
            "fieldSelector=status.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed",
            "limit=500",
            "resourceVersion=0",
        ] {
            assert!(reqs[0].contains(part), "{part} missing in {}", reqs[0]);
        }
        assert!(reqs[1].contains("continue=tok") && !reqs[1].contains("resourceVersion"));
    }

    #[tokio::test]
    async fn watch_maps_events_bookmarks_and_in_stream_gone() {
        let body = format!(
            "{{\"type\":\"ADDED\",\"object\":{POD_A}}}\n\
             {{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"12\",\"annotations\":{{\"k8s.io/initial-events-end\":\"true\"}}}}}}}}\n\
             {{\"type\":\"ERROR\",\"object\":{}}}\n",
            status(410, "Expired")
        );
        let server = canned(vec![response(200, "", &body)]);
        let lw = RestListerWatcher::<DynamicObject>::new(
            client(&server.url),
            crate::rest::resource::PODS,
        );
        let mut w = lw
            .watch(WatchRequest {
                resource_version: "4".into(),
                allow_bookmarks: true,
                timeout_seconds: Some(300),
                send_initial_events: true,
            })
            .await
            .unwrap();
        match w.next().await {
            Some(Ok(WatchEvent::Added(o))) => assert_eq!(o.name(), "a"),
            other => panic!("unexpected {other:?}"),
        }
        match w.next().await {
            Some(Ok(WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            })) => assert!(resource_version == "12" && initial_events_end),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(w.next().await.unwrap().unwrap_err(), WatchError::Gone);
        assert!(w.next().await.is_none());
        let req = server.requests.lock()[0].clone();
        for part in [
            "watch=true",
            "allowWatchBookmarks=true",
            "resourceVersion=4",
            "timeoutSeconds=300",
            "sendInitialEvents=true",
            "resourceVersionMatch=NotOlderThan",
        ] {
            assert!(req.contains(part), "{part} missing in {req}");
        }
    }

    #[tokio::test]
    async fn http_errors_map_to_watch_errors() {
        // A 429 with Retry-After is sent again (MAX_RETRIES times) before it is reported.
        let mut answers = vec![response(410, "", &status(410, "Expired"))];
        for _ in 0..=crate::rest::transport::MAX_RETRIES {
            answers.push(response(
                429,
                "Retry-After: 0\r\n",
                &status(429, "TooManyRequests"),
            ));
        }
        answers.push(response(500, "", &status(500, "InternalError")));
        let server = canned(answers);
        let lw = RestListerWatcher::<DynamicObject>::new(
            client(&server.url),
            crate::rest::resource::PODS,
        );
        let err = lw.list(ListRequest::default()).await.unwrap_err();
        assert_eq!(err, WatchError::Gone);
        let err = lw.watch(WatchRequest::default()).await.err().unwrap();
        assert_eq!(
            err,
            WatchError::TooManyRequests {
                retry_after: Some(Duration::from_secs(0))
            }
        );
        let err = lw.list(ListRequest::default()).await.unwrap_err();
        assert!(matches!(err, WatchError::Other(_)), "{err:?}");
    }

    #[tokio::test]
    async fn refused_connections_and_idle_watches() {
        // A port nobody listens on: bind, note the port, close.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let lw = RestListerWatcher::<DynamicObject>::new(
            client(&format!("http://127.0.0.1:{port}")),
            crate::rest::resource::PODS,
        );
        assert_eq!(
            lw.list(ListRequest::default()).await.unwrap_err(),
            WatchError::ConnectionRefused
        );
        // A watch whose server sends the head and then nothing.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Ok((mut conn, _)) = listener.accept() {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                );
                // Keep the connection open until the test ends.
                let _ = hold_rx.recv_timeout(Duration::from_secs(30));
            }
        });
        let lw = RestListerWatcher::<DynamicObject>::new(client(&url), crate::rest::resource::PODS)
            .idle_timeout(Some(Duration::from_millis(200)));
        let mut w = lw.watch(WatchRequest::default()).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .expect("the idle timeout must end the watch");
        assert_eq!(got.unwrap().unwrap_err(), WatchError::IdleTimeout);
        assert!(w.next().await.is_none());
        drop(hold_tx);
    }

    #[test]
    fn status_mapping() {
        assert_eq!(
            watch_error_from_status(&Status::new(Reason::Expired, "m")),
            WatchError::Gone
        );
        assert_eq!(
            watch_error_from_status(&Status::too_many_requests(2)),
            WatchError::TooManyRequests {
                retry_after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(
            watch_error_from_status(&Status::resource_version_too_large(9, 5)),
            WatchError::TooLargeResourceVersion
        );
        assert_eq!(
            watch_error_from_rest(&Error::from(Status::resource_version_too_large(9, 5))),
            WatchError::TooLargeResourceVersion
        );
        assert!(matches!(
            watch_error_from_status(&Status::internal("boom")),
            WatchError::Other(_)
        ));
    }
}
