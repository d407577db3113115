//! The HTTP server: one port speaking HTTP/1.1 (chunked watches) and h2c, routing to the
//! discovery documents and the resource handlers.

pub mod body;
pub mod discovery;
pub mod openapi;
pub mod router;

use crate::cacher::cacher::CacherOptions;
use crate::cacher::Cacher;
use crate::handlers::{self, status_response, RequestInfo, MAX_BODY_BYTES};
use crate::metrics::Metrics;
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
use std::time::Instant;
use storage::Storage;
use tokio::net::TcpListener;

/// Server settings.
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    /// Watch cache tunables, shared by every resource.
    pub cacher: CacherOptions,
}

/// Options common to writes, from the query string.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
}

impl WriteOptions {
    fn from_query(q: &str) -> WriteOptions {
        let dry_run =
            form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "dryRun" && v == "All");
        WriteOptions { dry_run }
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
        Ok(srv)
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
            let value = handlers::encode_for_storage(&mut obj);
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

    /// 404 if namespace `ns` does not exist, 403 if it is being deleted.
    pub async fn ensure_namespace_accepts_writes(&self, ns: &str) -> Result<(), Status> {
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
            return Err(Status::new(
                api::Reason::Forbidden,
                format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            ));
        }
        Ok(())
    }

    /// Deletes everything in namespace `ns`, then the namespace itself (in the background,
    /// as the namespace controller does).
    pub fn finish_namespace_deletion(&self, ns: String) {
        let Some(srv) = self.self_ref.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            for info in RESOURCES.iter().filter(|r| r.namespaced) {
                let prefix = format!("{}{ns}/", info.key_prefix());
                let Ok(resp) = srv
                    .storage
                    .range(storage::RangeRequest::prefix(prefix.into_bytes()))
                    .await
                else {
                    continue;
                };
                for kv in resp.kvs {
                    let _ = srv.storage.delete(kv.key.clone(), None).await;
                }
            }
            if let Some(info) = crate::registry::resources::find("", "v1", "namespaces") {
                let key = format!("{}{ns}", info.key_prefix());
                let _ = srv.storage.delete(key.into_bytes().into(), None).await;
            }
        });
    }

    /// Handles one HTTP request. Never fails: errors become Status responses.
    pub async fn handle<B>(self: Arc<Self>, req: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let started = Instant::now();
        let (parts, body) = req.into_parts();
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().unwrap_or("").to_string();
        let route = router::route(&path);
        let (verb, resource) = match &route {
            Ok(Route::Resource(r)) => (verb_of(&parts.method, r, &query), r.info.resource),
            _ => (parts.method.as_str().to_string(), ""),
        };
        let result = match route {
            Ok(Route::Resource(r)) => self.handle_resource(&parts, &query, r, body).await,
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
            let gauge = self.metrics.gauge("apiserver_longrunning_requests", "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component.", &[("verb", "WATCH"), ("resource", resource)]);
            gauge.fetch_add(1, Ordering::Relaxed);
            let (parts, body) = resp.into_parts();
            let body = body::on_drop(body, move || {
                gauge.fetch_sub(1, Ordering::Relaxed);
            });
            return Response::from_parts(parts, body);
        }
        resp
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
            Route::Resource(_) => return Err(Status::path_not_found()),
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
    ) -> Result<Response<Body>, Status>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let method = &parts.method;
        if method == Method::GET {
            let mut opts = ListOptions::from_query(query)?;
            if r.legacy_watch {
                opts.watch = true;
            }
            return match (&r.name, opts.is_watch()) {
                (Some(_), false) => handlers::get::get(self, &r).await,
                (_, true) => handlers::watch::watch(self, &r, &opts).await,
                (None, false) => handlers::list::list(self, &r, &opts).await,
            };
        }
        if r.legacy_watch {
            return Err(Status::method_not_allowed(method.as_str(), r.info.resource));
        }
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let body = read_body(body).await?;
        let wopts = WriteOptions::from_query(query);
        match *method {
            Method::POST => {
                require_json(&content_type)?;
                handlers::create::create(self, &r, body, &wopts).await
            }
            Method::PUT => {
                require_json(&content_type)?;
                handlers::update::update(self, &r, body, &wopts).await
            }
            Method::PATCH => handlers::patch::patch(self, &r, &content_type, body, &wopts).await,
            Method::DELETE => {
                if r.name.is_none() {
                    return Err(Status::method_not_allowed("DELETE", r.info.resource));
                }
                handlers::delete::delete(self, &r, body, &wopts).await
            }
            _ => Err(Status::method_not_allowed(method.as_str(), r.info.resource)),
        }
    }
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

fn require_json(content_type: &str) -> Result<(), Status> {
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if mime.is_empty() || mime == "application/json" || mime == "*/*" {
        Ok(())
    } else {
        Err(Status::unsupported_media_type(content_type))
    }
}

async fn read_body<B>(body: B) -> Result<Bytes, Status>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
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

/// Serves HTTP/1.1 and h2c (prior knowledge) on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    srv: Arc<ApiServer>,
    shutdown: impl std::future::Future<Output = ()>,
) {
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
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let srv = srv.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let srv = srv.clone();
                async move { Ok::<_, std::convert::Infallible>(srv.handle(req).await) }
            });
            let mut builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            builder.http2().max_concurrent_streams(Some(10_000));
            if let Err(e) = builder.serve_connection(io, service).await {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
}
