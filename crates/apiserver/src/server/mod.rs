//! The HTTP server: listeners speaking HTTP/1.1 (chunked watches), HTTP/2 (h2c with prior
//! knowledge, or ALPN `h2` over TLS) and WebSocket watches, optionally with TLS and bearer
//! token authentication; routing to the discovery documents and the resource handlers, with
//! Accept negotiation (JSON, Table, PartialObjectMetadata) and protobuf request bodies.

pub mod blocking;
pub mod body;
pub mod bounded_yaml;
pub mod discovery;
pub mod http1_errors;
pub mod http2;
pub mod loopback_guard;
pub mod negotiate;
pub mod openapi;
pub mod openapi_types;
pub mod protobuf;
pub mod protobuf_encode;
pub mod protobuf_generic;
#[rustfmt::skip]
pub mod protobuf_schema;
pub mod protobuf_transcode;
pub mod router;
pub mod table;
pub mod tls;
pub mod websocket;
pub mod yaml_depth;

use crate::cacher::cacher::CacherOptions;
use crate::cacher::direct_conn::ConnHandle;
use crate::cacher::outbox::Outbox;
use crate::cacher::{Cacher, DirectConn};
use crate::handlers::{self, status_response, RequestInfo, MAX_BODY_BYTES};
use crate::metrics::Metrics;
use crate::registry::field_validation::FieldValidation;
use crate::registry::{ResourceInfo, RESOURCES};
use api::list_options::ListOptions;
use api::Status;
use body::Body;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response};
use http_body_util::{BodyExt, Limited};
use router::Route;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use storage::Storage;
use tokio::net::TcpListener;

/// Server settings.
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    /// Watch cache tunables, shared by every resource.
    pub cacher: CacherOptions,
    /// How long events live after their last activity (`--event-ttl`); `None`: one hour,
    /// kube-apiserver's default. See [`handlers::event_ttl`].
    pub event_ttl: Option<Duration>,
}

/// Options common to writes, from the query string.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// `fieldValidation`: what to do about fields the kind does not have.
    pub field_validation: FieldValidation,
    /// Warnings a handler found (sent as `Warning: 299 - "…"` headers).
    pub warnings: Arc<parking_lot::Mutex<Vec<String>>>,
    /// `fieldManager`, as given.
    pub field_manager: Option<String>,
    /// The manager named by the `User-Agent`, for writes without `fieldManager`.
    pub user_agent_manager: String,
    /// `force`: whether a server-side apply takes conflicting fields (`None`: not given).
    pub force: Option<bool>,
}

impl WriteOptions {
    fn from_query(q: &str, user_agent: Option<&str>) -> Result<WriteOptions, Status> {
        let mut o = WriteOptions {
            user_agent_manager: api::managed_fields::manager_from_user_agent(user_agent),
            ..WriteOptions::default()
        };
        for (k, v) in form_urlencoded::parse(q.as_bytes()) {
            match &*k {
                "dryRun" if v == "All" => o.dry_run = true,
                // Anything else would otherwise be a real write the client meant as a trial.
                "dryRun" => {
                    return Err(Status::new(
                        api::Reason::Invalid,
                        format!("dryRun: Unsupported value: {v:?}: supported values: \"All\""),
                    )
                    .with_cause(
                        "FieldValueNotSupported",
                        "dryRun",
                        "unsupported value",
                    ))
                }
                "fieldValidation" => o.field_validation = FieldValidation::parse(&v)?,
                "fieldManager" => {
                    if v.chars().count() > api::managed_fields::MAX_MANAGER_LEN
                        || v.chars().any(char::is_control)
                    {
                        return Err(Status::new(
                            api::Reason::Invalid,
                            format!(
                                "fieldManager: Invalid value: {v:?}: must be at most {} printable characters",
                                api::managed_fields::MAX_MANAGER_LEN
                            ),
                        )
                        .with_cause("FieldValueInvalid", "fieldManager", "invalid field manager"));
                    }
                    o.field_manager = Some(v.into_owned());
                }
                "force" => {
                    o.force = Some(match &*v {
                        "true" | "1" => true,
                        "false" | "0" | "" => false,
                        _ => {
                            return Err(Status::bad_request(format!(
                                "force: invalid value {v:?}: must be true or false"
                            )))
                        }
                    })
                }
                _ => {}
            }
        }
        Ok(o)
    }

    /// The manager a non-apply write is recorded under: `fieldManager`, else the
    /// `User-Agent`'s name.
    pub fn manager(&self) -> &str {
        self.field_manager
            .as_deref()
            .unwrap_or(&self.user_agent_manager)
    }

    /// Records `new` (over `old`, `None` for a create) in `metadata.managedFields`.
    pub fn track_update(
        &self,
        info: &ResourceInfo,
        status_only: bool,
        old: Option<&api::Object>,
        new: &mut api::Object,
    ) -> Result<(), Status> {
        let api_version = info.api_version();
        let now = api::time::now_rfc3339();
        let writer = api::managed_fields::Writer {
            manager: self.manager(),
            api_version: &api_version,
            kind: api::patch::PatchKindHint::new(info.group, info.kind),
            status_only,
            has_status: info.has_status,
            now: &now,
        };
        api::managed_fields::track_update(old.map(|o| &o.0), &mut new.0, &writer)
            .map_err(Status::bad_request)
    }

    /// Checks `obj` for unknown fields as asked (400 under Strict; under Warn they are
    /// dropped and the warnings kept for the response).
    pub fn check_fields(&self, info: &ResourceInfo, obj: &mut api::Object) -> Result<(), Status> {
        let w = crate::registry::field_validation::check(info, &mut obj.0, self.field_validation)?;
        *self.warnings.lock() = w;
        Ok(())
    }
}

/// The API server: storage, one cacher per resource, and metrics.
pub struct ApiServer {
    storage: Arc<dyn Storage>,
    cachers: HashMap<(&'static str, &'static str), Arc<Cacher>>,
    metrics: Arc<Metrics>,
    self_ref: Weak<ApiServer>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("resources", &self.cachers.len())
            .finish()
    }
}

/// Namespaces that exist from the start.
const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

impl ApiServer {
    /// Starts a cacher per resource over `storage`, creates the initial namespaces if they
    /// are missing, and waits until every cache has loaded.
    pub async fn new(
        storage: Arc<dyn Storage>,
        config: ServerConfig,
    ) -> Result<Arc<ApiServer>, Status> {
        let metrics = Metrics::new();
        let storage: Arc<dyn Storage> =
            Arc::new(crate::registry::cohabitation::CohabitingStorage::new(
                storage,
                crate::registry::cohabitation::COHABITANTS,
            ));
        let srv = Arc::new_cyclic(|weak| {
            let cachers = RESOURCES
                .iter()
                .map(|info| {
                    (
                        (info.group, info.resource),
                        Cacher::start(info, storage.clone(), config.cacher.clone(), &metrics),
                    )
                })
                .collect();
            ApiServer {
                storage: storage.clone(),
                cachers,
                metrics: metrics.clone(),
                self_ref: weak.clone(),
            }
        });
        srv.bootstrap_namespaces().await?;
        for c in srv.cachers.values() {
            c.wait_until_fresh(0).await?;
        }
        srv.start_service_allocation_repair();
        srv.start_event_ttl(
            config
                .event_ttl
                .unwrap_or(handlers::event_ttl::DEFAULT_EVENT_TTL),
        );
        Ok(srv)
    }

    /// Deletes events that outlived `ttl`, every [`handlers::event_ttl::sweep_interval`].
    /// Stops when the server is dropped.
    fn start_event_ttl(&self, ttl: Duration) {
        let Some(info) = crate::registry::resources::find("", "v1", "events") else {
            return;
        };
        let weak = self.self_ref.clone();
        tokio::spawn(async move {
            let prefix = info.key_prefix();
            loop {
                tokio::time::sleep(handlers::event_ttl::sweep_interval(ttl)).await;
                let Some(srv) = weak.upgrade() else { return };
                match handlers::event_ttl::sweep(srv.storage.as_ref(), &prefix, ttl).await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(deleted = n, "deleted events past their TTL"),
                    Err(e) => tracing::warn!("event TTL sweep: {e}"),
                }
            }
        });
    }

    /// Every 30 s, releases service IPs and node ports no service holds any more (see
    /// [`handlers::service_allocation::repair`]). Stops when the server is dropped.
    fn start_service_allocation_repair(&self) {
        let Some(info) = crate::registry::resources::find("", "v1", "services") else {
            return;
        };
        let weak = self.self_ref.clone();
        tokio::spawn(async move {
            let mut suspects = std::collections::HashMap::new();
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                let Some(srv) = weak.upgrade() else { return };
                match handlers::service_allocation::repair(
                    srv.storage.as_ref(),
                    info,
                    &mut suspects,
                )
                .await
                {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(
                        released = n,
                        "released service IPs and node ports no service holds"
                    ),
                    Err(e) => tracing::warn!("service allocation repair: {e}"),
                }
            }
        });
    }

    async fn bootstrap_namespaces(&self) -> Result<(), Status> {
        let Some(info) = crate::registry::resources::find("", "v1", "namespaces") else {
            return Ok(());
        };
        for ns in INITIAL_NAMESPACES {
            let key = format!("{}{ns}", info.key_prefix());
            if self
                .storage
                .get(key.as_bytes())
                .await
                .map_err(|e| handlers::storage_error(info, ns, e))?
                .is_some()
            {
                continue;
            }
            let mut obj = api::Object::from_value(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .unwrap_or_default();
            crate::registry::strategy::prepare_for_create(info, &mut obj, "")?;
            let value = handlers::encode_for_storage(&mut obj)?;
            match self.storage.create(key.into_bytes().into(), value).await {
                Ok(_) | Err(storage::StorageError::AlreadyExists) => {}
                Err(e) => return Err(handlers::storage_error(info, ns, e)),
            }
        }
        Ok(())
    }

    /// The storage backend.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The cacher of a resource.
    pub fn cacher(&self, info: &ResourceInfo) -> Result<&Arc<Cacher>, Status> {
        self.cachers
            .get(&(info.group, info.resource))
            .ok_or_else(|| Status::internal(format!("no watch cache for {}", info.resource)))
    }

    /// Whether object `name` of `target`'s resource may be created in namespace `ns`, as
    /// kube-apiserver's `NamespaceLifecycle` admission decides.
    ///
    /// # Errors
    /// 404 if namespace `ns` does not exist, 403 (with a `NamespaceTerminating` cause) if it
    /// is being deleted.
    pub async fn ensure_namespace_accepts_writes(
        &self,
        target: &ResourceInfo,
        name: &str,
        ns: &str,
    ) -> Result<(), Status> {
        let Some(info) = crate::registry::resources::find("", "v1", "namespaces") else {
            return Ok(());
        };
        let phase = match self.cacher(info)?.get_cached(ns) {
            Some(o) => o.field(info, "status.phase").unwrap_or("").to_string(),
            None => {
                // The cache may lag a namespace created a moment ago: ask storage.
                let key = format!("{}{ns}", info.key_prefix());
                match self
                    .storage
                    .get(key.as_bytes())
                    .await
                    .map_err(|e| handlers::storage_error(info, ns, e))?
                {
                    Some(kv) => handlers::decode_stored(info, &kv)?
                        .field_str("status.phase")
                        .map(|c| c.into_owned())
                        .unwrap_or_default(),
                    None => return Err(Status::not_found("namespaces", ns)),
                }
            }
        };
        if phase == "Terminating" {
            return Err(crate::registry::namespace_lifecycle::terminating(
                target, name, ns,
            ));
        }
        Ok(())
    }

    /// Handles one HTTP request. Never fails: errors become Status responses.
    pub async fn handle<B>(self: Arc<Self>, mut req: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let started = Instant::now();
        let upgrade =
            websocket::is_upgrade_request(req.headers()).then(|| hyper::upgrade::on(&mut req));
        if req.version() != http::Version::HTTP_11 {
            // Only HTTP/1.1 responses (chunked, or a WebSocket after the upgrade) may be
            // written to directly.
            req.extensions_mut().remove::<Arc<DirectConn>>();
        }
        let (parts, body) = req.into_parts();
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().unwrap_or("").to_string();
        let route = router::route(&path);
        let (verb, resource) = match &route {
            Ok(Route::Resource(r)) => (verb_of(&parts.method, r, &query), r.info.resource),
            _ => (parts.method.as_str().to_string(), ""),
        };
        let result = match route {
            Ok(Route::Resource(r)) => match upgrade {
                Some(up) if verb == "WATCH" => {
                    self.handle_websocket(&parts, &query, r, body, up).await
                }
                _ => self.handle_resource(&parts, &query, r, body, None).await,
            },
            Ok(Route::Review(review)) => {
                if parts.method == Method::POST {
                    let protobuf_body = parts
                        .headers
                        .get(http::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(protobuf::is_protobuf);
                    // Answered in JSON, which every client that sends protobuf also accepts.
                    match read_body(body).await {
                        Ok(bytes) if protobuf_body => {
                            let (g, v, _, kind) = *review;
                            protobuf::decode_review_to_json(&format!("{g}/{v}"), kind, &bytes)
                                .and_then(|json| handlers::access_review::review(review, &json))
                        }
                        Ok(bytes) => handlers::access_review::review(review, &bytes),
                        Err(s) => Err(s),
                    }
                } else {
                    Err(Status::method_not_allowed(parts.method.as_str(), review.2))
                }
            }
            // Readiness also needs the storage to answer (e.g. etcd reachable, with quorum).
            Ok(Route::Health(h))
                if h == "readyz"
                    && (parts.method == Method::GET || parts.method == Method::HEAD) =>
            {
                match self.storage.ready().await {
                    Ok(()) => self.handle_meta(&parts, Route::Health(h)),
                    Err(e) => Ok(text_response(
                        500,
                        &format!("[-]storage failed: {e}\nreadyz check failed"),
                    )),
                }
            }
            Ok(other) => self.handle_meta(&parts, other),
            Err(s) => Err(s),
        };
        let resp = result.unwrap_or_else(|s| status_response(&s));
        let code = resp.status().as_u16().to_string();
        if !resource.is_empty() {
            self.metrics
                .counter("apiserver_request_total", "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.", &[("verb", &verb), ("resource", resource), ("code", &code)])
                .fetch_add(1, Ordering::Relaxed);
            if verb != "WATCH" {
                self.metrics
                    .histogram("apiserver_request_duration_seconds", "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.", &[("verb", &verb), ("resource", resource)])
                    .observe(started.elapsed().as_secs_f64());
            }
        }
        if verb == "WATCH" && resp.status().is_success() {
            let (parts, body) = resp.into_parts();
            return Response::from_parts(parts, self.track_watch(resource, body));
        }
        resp
    }

    /// Counts a running watch in `apiserver_longrunning_requests` until `body` is dropped.
    fn track_watch(&self, resource: &str, body: Body) -> Body {
        let gauge = self.metrics.gauge("apiserver_longrunning_requests", "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component.", &[("verb", "WATCH"), ("resource", resource)]);
        gauge.fetch_add(1, Ordering::Relaxed);
        body::on_drop(body, move || {
            gauge.fetch_sub(1, Ordering::Relaxed);
        })
    }

    /// A watch over WebSocket: validates the handshake, starts the watch (errors are plain
    /// HTTP Status responses), answers 101 and streams the events once hyper hands over the
    /// connection.
    async fn handle_websocket<B>(
        &self,
        parts: &http::request::Parts,
        query: &str,
        r: RequestInfo,
        body: B,
        upgrade: hyper::upgrade::OnUpgrade,
    ) -> Result<Response<Body>, Status>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let hs = websocket::validate(&parts.method, &parts.headers)
            .map_err(|e| Status::bad_request(e.to_string()))?;
        let resource = r.info.resource;
        let control = Arc::new(std::sync::OnceLock::new());
        let resp = self
            .handle_resource(parts, query, r, body, Some(&control))
            .await?;
        if !resp.status().is_success() {
            return Ok(resp);
        }
        let watch = self.track_watch(resource, resp.into_body());
        tokio::spawn(async move {
            match upgrade.await {
                Ok(upgraded) => {
                    websocket::pump_watch(
                        hyper_util::rt::TokioIo::new(upgraded),
                        watch,
                        control.get().cloned(),
                    )
                    .await
                }
                Err(e) => tracing::debug!("websocket upgrade failed: {e}"),
            }
        });
        Ok(websocket::switching_response(&hs))
    }

    fn handle_meta(
        &self,
        parts: &http::request::Parts,
        route: Route,
    ) -> Result<Response<Body>, Status> {
        let method = &parts.method;
        if method != Method::GET && method != Method::HEAD {
            return Err(Status::method_not_allowed(method.as_str(), "this path"));
        }
        let doc: Value = match route {
            Route::Version => discovery::version_info(),
            Route::Health(_) => {
                let ready = self.cachers.values().all(|c| c.is_ready());
                return Ok(if ready {
                    text_response(200, "ok")
                } else {
                    text_response(500, "[-]watch-cache not ready\nhealthz check failed")
                });
            }
            Route::Metrics => {
                let mut resp = text_response(200, &self.metrics.render());
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                return Ok(resp);
            }
            Route::CoreVersions => discovery::api_versions(),
            Route::Groups => discovery::api_group_list(),
            Route::Group(g) => discovery::api_group(&g).ok_or_else(Status::path_not_found)?,
            Route::ResourceList(g, v) => {
                discovery::api_resource_list(&g, &v).ok_or_else(Status::path_not_found)?
            }
            Route::OpenApiV3Root => openapi::openapi_v3_root(),
            Route::OpenApiV3(p) => {
                openapi::openapi_v3_document(&p).ok_or_else(Status::path_not_found)?
            }
            Route::OpenApiV2 => {
                // client-go asks for the v2 document as protobuf only; it cannot read JSON
                // there, so say 406 and let it fall back.
                let accept = parts
                    .headers
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                if accept.contains("protobuf") && !accept.contains("json") {
                    return Err(Status::not_acceptable(accept));
                }
                openapi::openapi_v2()
            }
            Route::Resource(_) | Route::Review(_) => return Err(Status::path_not_found()),
        };
        Ok(handlers::json_response(
            200,
            serde_json::to_vec(&doc).unwrap_or_default(),
        ))
    }

    async fn handle_resource<B>(
        &self,
        parts: &http::request::Parts,
        query: &str,
        r: RequestInfo,
        body: B,
        ws_control: Option<&Arc<std::sync::OnceLock<Arc<Outbox>>>>,
    ) -> Result<Response<Body>, Status>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let method = &parts.method;
        let accept = parts
            .headers
            .get(http::header::ACCEPT)
            .map(|v| v.to_str().unwrap_or("\u{fffd}"));
        // WebSocket messages carry JSON lines; protobuf is offered on plain responses only.
        let protobuf_ok =
            protobuf_encode::supports(r.info) && !websocket::is_upgrade_request(&parts.headers);
        if r.subresource.as_deref() == Some("scale") {
            return self.handle_scale(parts, query, &r, body).await;
        }
        if handlers::is_create_only(&r) && method != Method::POST {
            return Err(Status::method_not_allowed(method.as_str(), r.info.resource));
        }
        if r.subresource.as_deref() == Some("finalize") && method != Method::PUT {
            // A namespace's `finalize` is written with PUT only.
            return Err(Status::method_not_allowed(method.as_str(), r.info.resource));
        }
        if method == Method::GET {
            let mut opts = ListOptions::from_query(query)?;
            if r.legacy_watch {
                opts.watch = true;
            }
            let target = match (&r.name, opts.is_watch()) {
                (Some(_), false) => negotiate::Target::Object,
                (_, true) => negotiate::Target::Watch,
                (None, false) => negotiate::Target::List,
            };
            let output = negotiate::negotiate(
                accept,
                target,
                negotiate::include_object(query)?,
                protobuf_ok,
            )?;
            let pb = output == negotiate::Output::Protobuf;
            return match target {
                negotiate::Target::Object => {
                    let resp = handlers::get::get(self, &r).await;
                    if pb {
                        return Ok(to_protobuf(resp).await);
                    }
                    render_object(&r, resp?, output).await
                }
                negotiate::Target::Watch => {
                    let direct = match parts.extensions.get::<Arc<DirectConn>>().cloned() {
                        Some(c) => Some(match ws_control {
                            Some(slot) => handlers::watch::DirectWatch::WebSocket(c, slot.clone()),
                            None => handlers::watch::DirectWatch::Chunked(c),
                        }),
                        None => parts
                            .extensions
                            .get::<http2::writer::StreamSink>()
                            .cloned()
                            .map(handlers::watch::DirectWatch::Http2),
                    };
                    let conn = parts.extensions.get::<ConnHandle>().map(|h| h.0.clone());
                    handlers::watch::watch(self, &r, &opts, output, direct, conn).await
                }
                negotiate::Target::List => {
                    let resp = handlers::list::list(self, &r, &opts, output).await;
                    if pb {
                        return Ok(to_protobuf(resp).await);
                    }
                    resp
                }
            };
        }
        // A write answers in protobuf when that is preferred; otherwise JSON, which every
        // client that writes protobuf also accepts.
        let pb = negotiate::negotiate(
            accept,
            negotiate::Target::Object,
            table::IncludeObject::Metadata,
            protobuf_ok,
        ) == Ok(negotiate::Output::Protobuf);
        let resp = self.handle_write(parts, query, r, body).await;
        if pb {
            return Ok(to_protobuf(resp).await);
        }
        resp
    }

    async fn handle_scale<B>(
        &self,
        parts: &http::request::Parts,
        query: &str,
        r: &RequestInfo,
        body: B,
    ) -> Result<Response<Body>, Status>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let mut body = read_body(body).await?;
        if parts.method == Method::PUT {
            body = json_body(&content_type, body, &JSON_OR_YAML).await?;
        }
        let user_agent = parts
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        let wopts = WriteOptions::from_query(query, user_agent)?;
        handlers::scale::scale(self, r, &parts.method, &content_type, body, &wopts).await
    }

    async fn handle_write<B>(
        &self,
        parts: &http::request::Parts,
        query: &str,
        r: RequestInfo,
        body: B,
    ) -> Result<Response<Body>, Status>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let method = &parts.method;
        if r.legacy_watch {
            return Err(Status::method_not_allowed(method.as_str(), r.info.resource));
        }
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let mut body = read_body(body).await?;
        let mut content_type = content_type;
        if protobuf::is_protobuf(&content_type)
            && (*method == Method::POST || *method == Method::PUT)
        {
            body = protobuf::decode_request_to_json(&r, &body)?.into();
            content_type = "application/json".into();
        }
        let user_agent = parts
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        let wopts = WriteOptions::from_query(query, user_agent)?;
        let resp = self
            .dispatch_write(parts, &r, &content_type, body, &wopts)
            .await;
        let warnings = std::mem::take(&mut *wopts.warnings.lock());
        resp.map(|mut resp| {
            for w in warnings {
                let text = format!("299 - {}", serde_json::Value::String(w));
                if let Ok(v) = HeaderValue::from_str(&text) {
                    resp.headers_mut().append(http::header::WARNING, v);
                }
            }
            resp
        })
    }

    async fn dispatch_write(
        &self,
        parts: &http::request::Parts,
        r: &RequestInfo,
        content_type: &str,
        body: Bytes,
        wopts: &WriteOptions,
    ) -> Result<Response<Body>, Status> {
        let method = &parts.method;
        match *method {
            Method::POST => {
                let body = json_body(content_type, body, &BODY_MEDIA_TYPES).await?;
                match r.subresource.as_deref() {
                    Some("binding") => handlers::binding::bind(self, r, body, wopts).await,
                    Some("eviction") => handlers::eviction::evict(self, r, body, wopts).await,
                    _ => handlers::create::create(self, r, body, wopts).await,
                }
            }
            Method::PUT => {
                let body = json_body(content_type, body, &BODY_MEDIA_TYPES).await?;
                handlers::update::update(self, r, body, wopts).await
            }
            Method::PATCH => handlers::patch::patch(self, r, content_type, body, wopts).await,
            Method::DELETE => {
                if r.name.is_none() {
                    return Err(Status::method_not_allowed("DELETE", r.info.resource));
                }
                let query = parts.uri.query().unwrap_or("");
                handlers::delete::delete(self, r, body, query, wopts).await
            }
            _ => Err(Status::method_not_allowed(method.as_str(), r.info.resource)),
        }
    }
}

/// A JSON response (object, list or Status, success or error) re-encoded as protobuf. Left
/// as JSON if it cannot be (logged; it does not happen for the kinds negotiation allows).
async fn to_protobuf(resp: Result<Response<Body>, Status>) -> Response<Body> {
    let resp = resp.unwrap_or_else(|s| status_response(&s));
    let is_json = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = match body.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => match e {},
    };
    match protobuf_encode::encode_body(&bytes) {
        Ok(pb) => {
            parts.headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(protobuf::MEDIA_TYPE),
            );
            parts.headers.remove(http::header::CONTENT_LENGTH);
            Response::from_parts(parts, body::full(pb.into()))
        }
        Err(e) => {
            tracing::warn!("answering JSON instead of protobuf: {}", e.message);
            Response::from_parts(parts, body::full(bytes))
        }
    }
}

/// Renders a single-object JSON response as `output` (a one-row Table or a
/// PartialObjectMetadata).
async fn render_object(
    r: &RequestInfo,
    resp: Response<Body>,
    output: negotiate::Output,
) -> Result<Response<Body>, Status> {
    if matches!(
        output,
        negotiate::Output::Json | negotiate::Output::Protobuf
    ) || !resp.status().is_success()
    {
        return Ok(resp);
    }
    let (parts, body) = resp.into_parts();
    let bytes = match body.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => match e {},
    };
    let obj = api::Object::from_slice(&bytes)?;
    let rv = obj.resource_version().parse().unwrap_or(0);
    let key = format!("{}/{}", obj.namespace(), obj.name());
    let cached = crate::cacher::CachedObject::from_object(r.info, &key, obj, rv);
    let mut out = bytes::BytesMut::new();
    match output {
        negotiate::Output::Json | negotiate::Output::Protobuf => {}
        negotiate::Output::Metadata { meta_version } => {
            table::write_partial(&cached, meta_version, &mut out)
        }
        negotiate::Output::Table {
            meta_version,
            include,
        } => table::write_event_table(
            r.info,
            &cached,
            include,
            meta_version,
            true,
            api::time::unix_now(),
            &mut out,
        ),
    }
    let mut resp = Response::from_parts(parts, body::full(out.freeze()));
    resp.headers_mut().remove(http::header::CONTENT_LENGTH);
    Ok(resp)
}

fn verb_of(method: &Method, r: &RequestInfo, query: &str) -> String {
    let watch = r.legacy_watch
        || form_urlencoded::parse(query.as_bytes())
            .any(|(k, v)| k == "watch" && !(v == "0" || v.eq_ignore_ascii_case("false")));
    match *method {
        Method::GET if watch => "WATCH",
        Method::GET if r.name.is_none() => "LIST",
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => "OTHER",
    }
    .to_string()
}

/// The media types of a body that is read as JSON (YAML is converted, see [`json_body`]).
const JSON_OR_YAML: [&str; 2] = ["application/json", "application/yaml"];

/// The media types a create or update body may have (protobuf is turned into JSON first).
const BODY_MEDIA_TYPES: [&str; 3] = [JSON_OR_YAML[0], JSON_OR_YAML[1], protobuf::MEDIA_TYPE];

/// A create or update body as JSON: JSON as it is, YAML converted (as kube-apiserver reads
/// both); any other media type is a 415 naming the `accepted` ones.
async fn json_body(content_type: &str, body: Bytes, accepted: &[&str]) -> Result<Bytes, Status> {
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if mime.is_empty() || mime.eq_ignore_ascii_case("application/json") || mime == "*/*" {
        Ok(body)
    } else if mime.eq_ignore_ascii_case("application/yaml") {
        bounded_yaml::to_json(body).await.map_err(|e| {
            Status::bad_request(format!(
                "the body of the request could not be decoded as YAML: {e}"
            ))
        })
    } else {
        Err(Status::unsupported_media_type(content_type, accepted))
    }
}

/// How long a request body may take to arrive in full: kube-apiserver's default
/// `--request-timeout`, which bounds a whole non-long-running request. A client that sends
/// headers and then stalls (an HTTP/1.1 body or an HTTP/2 stream left half-open) gets a 504
/// instead of holding a task and its buffers forever.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The 504 answered to a request whose body did not arrive within `timeout`.
pub(crate) fn body_timeout_status(timeout: Duration) -> Status {
    Status::new(
        api::Reason::Timeout,
        format!(
            "request did not complete within the allotted timeout: the body did not arrive \
             in {timeout:?}"
        ),
    )
}

async fn read_body<B>(body: B) -> Result<Bytes, Status>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let read = tokio::time::timeout(
        BODY_READ_TIMEOUT,
        Limited::new(body, MAX_BODY_BYTES).collect(),
    );
    let Ok(collected) = read.await else {
        return Err(body_timeout_status(BODY_READ_TIMEOUT));
    };
    match collected {
        Ok(c) => Ok(c.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(Status::too_large(MAX_BODY_BYTES))
        }
        Err(e) => Err(Status::bad_request(format!(
            "failed to read the request body: {e}"
        ))),
    }
}

fn text_response(code: u16, text: &str) -> Response<Body> {
    let mut resp = Response::new(body::full(Bytes::from(text.to_string())));
    *resp.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::OK);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// HTTP/1.1 tunables of a listener.
#[derive(Debug, Clone)]
pub struct Http1Options {
    /// How long a client may take to send a request's headers, counted from when the
    /// connection is ready for the next request (so it also ends idle keep-alive
    /// connections). Without it, connections that never finish a request would each hold a
    /// task and a file descriptor forever. kube-apiserver allows 32 s.
    pub header_read_timeout: Duration,
}

impl Default for Http1Options {
    fn default() -> Self {
        Http1Options {
            header_read_timeout: Duration::from_secs(32),
        }
    }
}

/// HTTP/2 tunables of a listener.
#[derive(Debug, Clone)]
pub struct Http2Options {
    /// Concurrent streams a client may open on one connection (each watch is one stream).
    pub max_concurrent_streams: u32,
    /// Flow-control window of each stream for data the client sends.
    pub initial_stream_window: u32,
    /// Flow-control window of the whole connection for data the client sends.
    pub initial_connection_window: u32,
    /// Interval of the server's PING frames (dead-connection detection); `None` = off.
    pub keep_alive_interval: Option<Duration>,
    /// How long to wait for a PING's answer before closing the connection.
    pub keep_alive_timeout: Duration,
    /// How long a request's body may take to arrive in full, from its HEADERS: past it the
    /// request is answered 504 (default [`BODY_READ_TIMEOUT`]).
    pub body_timeout: Duration,
}

impl Default for Http2Options {
    fn default() -> Self {
        Http2Options {
            max_concurrent_streams: 10_000,
            initial_stream_window: 1 << 20,
            initial_connection_window: 16 << 20,
            keep_alive_interval: Some(Duration::from_secs(30)),
            keep_alive_timeout: Duration::from_secs(20),
            body_timeout: BODY_READ_TIMEOUT,
        }
    }
}

/// How a listener is served.
#[derive(Clone, Default)]
pub struct ServeOptions {
    /// Serve TLS with this configuration (ALPN picks HTTP/2 or HTTP/1.1); `None` = plain TCP
    /// (HTTP/1.1 and h2c with prior knowledge).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Require `Authorization: Bearer <token>` on every request except `/healthz`, `/livez`,
    /// `/readyz` and `/version` (401 Status otherwise); `None` = no authentication.
    pub token: Option<Arc<str>>,
    /// HTTP/1.1 settings.
    pub http1: Http1Options,
    /// HTTP/2 settings.
    pub http2: Http2Options,
    /// Refuse what a web page could send to a loopback port: requests naming a host that is
    /// not a loopback one, carrying a foreign `Origin`, or writing without a body media type
    /// (see [`loopback_guard`]). For listeners without authentication.
    pub loopback_only: bool,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("tls", &self.tls.is_some())
            .field("token", &self.token.is_some())
            .field("http1", &self.http1)
            .field("http2", &self.http2)
            .field("loopback_only", &self.loopback_only)
            .finish()
    }
}

/// The HTTP/2 client preface every h2c (prior knowledge) connection starts with.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// True if the client's first bytes are the HTTP/2 preface (read without consuming them).
/// False as soon as they differ, or if the client closes or errs first.
async fn is_h2_preface(stream: &tokio::net::TcpStream) -> bool {
    let mut buf = [0u8; 24];
    loop {
        let n = match stream.peek(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        if buf[..n] != H2_PREFACE[..n] {
            return false;
        }
        if n == H2_PREFACE.len() {
            return true;
        }
        // Part of the preface so far: wait for more.
        if stream.readable().await.is_err() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// How long a client may take to complete the TLS handshake (or, on plain TCP, to show
/// whether it speaks HTTP/2).
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves HTTP/1.1, h2c (prior knowledge) and WebSocket watches on `listener`, without TLS
/// or authentication, until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    srv: Arc<ApiServer>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    serve_with(listener, srv, ServeOptions::default(), shutdown).await
}

/// Serves `listener` as `opts` says until `shutdown` resolves. A connection that fails (bad
/// TLS handshake, protocol error) is closed and logged at debug level; the listener goes on.
pub async fn serve_with(
    listener: TcpListener,
    srv: Arc<ApiServer>,
    opts: ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = opts.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let opts = Arc::new(opts);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => return,
        };
        let (stream, _peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let srv = srv.clone();
        let opts = opts.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            match acceptor {
                Some(acceptor) => {
                    // Under TLS too, so that the connection can be reset (never written to
                    // directly: the bytes are encrypted).
                    let (handle, stream) = DirectConn::new(stream);
                    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
                    {
                        Ok(Ok(tls)) => {
                            // rustls accepted a client certificate only if our CA issued it:
                            // such a connection needs no token.
                            let opts = if tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .is_some_and(|c| !c.is_empty())
                            {
                                Arc::new(ServeOptions {
                                    token: None,
                                    ..(*opts).clone()
                                })
                            } else {
                                opts
                            };
                            if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                                http2::serve_connection(tls, srv, opts).await
                            } else {
                                serve_connection(tls, srv, &opts, handle, false).await
                            }
                        }
                        Ok(Err(e)) => tracing::debug!("TLS handshake failed: {e}"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
                None => {
                    // A client that sends part of the preface and stalls would keep the
                    // sniffing loop polling forever.
                    let sniffed =
                        tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, is_h2_preface(&stream)).await;
                    let Ok(h2) = sniffed else {
                        tracing::debug!("no complete first request line or preface in time");
                        return;
                    };
                    if h2 {
                        http2::serve_connection(stream, srv, opts).await
                    } else {
                        let (conn, io) = DirectConn::new(stream);
                        serve_connection(io, srv, &opts, conn, true).await
                    }
                }
            }
        });
    }
}

/// Serves one HTTP/1.1 connection (with WebSocket upgrades) over `conn`'s socket (`io` is
/// its transport, or TLS over it); `direct` when the cacher may write watch chunks to the
/// socket directly (plain TCP only).
async fn serve_connection<IO>(
    io: IO,
    srv: Arc<ApiServer>,
    opts: &ServeOptions,
    conn: Arc<DirectConn>,
    direct: bool,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(http1_errors::StatusOnParseError::new(io));
    let token = opts.token.clone();
    let loopback_only = opts.loopback_only;
    let service = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
        let srv = srv.clone();
        let token = token.clone();
        if direct {
            req.extensions_mut().insert(conn.clone());
        }
        req.extensions_mut().insert(ConnHandle(conn.clone()));
        async move {
            if loopback_only {
                if let Err(s) = loopback_guard::check(req.method(), req.uri(), req.headers()) {
                    return Ok(status_response(&s));
                }
            }
            if let Some(t) = token.as_deref() {
                if !tls::is_public_path(req.uri().path()) && !tls::has_token(req.headers(), t) {
                    return Ok::<_, std::convert::Infallible>(status_response(
                        &Status::unauthorized(),
                    ));
                }
            }
            Ok(srv.handle(req).await)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(opts.http1.header_read_timeout)
        .serve_connection(io, service)
        .with_upgrades();
    if let Err(e) = conn.await {
        tracing::debug!("connection ended: {e}");
    }
}
