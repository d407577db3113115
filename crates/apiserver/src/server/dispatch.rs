//! Request dispatch: routes one HTTP request to the discovery documents or a resource
//! handler, negotiates its encodings (JSON, YAML, protobuf, Table), reads bodies within their
//! limits and counts the request. It assumes the connection layer ([`super::listeners`]) has
//! attached the connection's direct-write handle to HTTP/1.1 requests only.

use super::direct_conn::{ConnHandle, DirectConn};
use super::listeners::PeerAddr;
use super::router::Route;
use super::watch_response::{watch_response, DirectWatch};
use super::{discovery, http2, openapi, router, websocket};
use crate::audit::policy::Stage;
use crate::audit::AuditBody;
use crate::auth::attributes::Attributes;
use crate::auth::impersonation;
use crate::auth::service_account_token::ISSUER;
use crate::auth::user_info::{Authenticated, UserInfo};
use crate::cacher::outbox::Outbox;
use crate::encoding::body::Body;
use crate::encoding::JSON_OR_YAML;
use crate::encoding::{body, bounded_yaml, negotiate, protobuf, protobuf_encode, table};
use crate::handlers::state::{ApiServer, WriteOptions};
use crate::handlers::{self, status_response, RequestInfo, MAX_BODY_BYTES};
use api::list_options::ListOptions;
use api::Status;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response};
use http_body_util::{BodyExt, Limited};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl ApiServer {
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
        let (mut parts, body) = req.into_parts();
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().unwrap_or("").to_string();
        // Authorized before routing, so that a caller who may not ask learns nothing of what
        // exists (403, never 404).
        let mut _seat = None;
        // The user the request runs as once impersonation is applied, refused or not.
        let mut effective: Option<Arc<UserInfo>> = None;
        let caller = parts
            .extensions
            .get::<Authenticated>()
            .map(|a| a.0.clone())
            .unwrap_or_else(UserInfo::unsecured);
        // A member of system:masters asking as themselves is neither checked nor limited.
        let refused = if caller.is_master() && !impersonation::requested(&parts.headers) {
            parts.extensions.insert(Authenticated(caller.clone()));
            None
        } else {
            match self
                .authorize_request(&parts, &caller, &mut effective)
                .await
            {
                Ok((user, watch)) => {
                    // A watch holds no seat: it is long-running, and costs per event.
                    let seat = if watch {
                        Ok(None)
                    } else {
                        self.flow_control.acquire(&user).await
                    };
                    parts.extensions.insert(Authenticated(user));
                    match seat {
                        Ok(s) => {
                            _seat = s;
                            None
                        }
                        Err(s) => Some(s),
                    }
                }
                Err(s) => Some(s),
            }
        };
        let audit = self.auditor.as_ref().and_then(|a| {
            let attrs = Attributes::from_request(&parts.method, &path, &query);
            let user = effective.clone().unwrap_or_else(|| caller.clone());
            let decision = match &refused {
                None => Some(Ok(())),
                Some(s) if s.code() == 403 => Some(Err(s.message.as_str())),
                // Shed by flow control after it was authorized.
                Some(s) if s.code() == 429 => Some(Ok(())),
                Some(_) => None,
            };
            let user_agent = parts
                .headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok());
            let peer = parts.extensions.get::<PeerAddr>().map(|p| p.0.ip());
            a.begin(
                &caller,
                &user,
                &attrs,
                &parts.uri.to_string(),
                user_agent,
                peer,
                decision,
            )
        });
        if let Some(b) = audit.as_ref().and_then(|a| a.body.clone()) {
            parts.extensions.insert(b);
        }
        let route = match refused {
            Some(s) => Err(s),
            None => router::route(&path, &self.custom),
        };
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
                    let user = parts.extensions.get::<Authenticated>().map(|a| a.0.clone());
                    // Answered in JSON, which every client that sends protobuf also accepts.
                    match read_body(body).await {
                        Ok(bytes) if protobuf_body => {
                            let (g, v, _, kind) = *review;
                            match protobuf::decode_review_to_json(&format!("{g}/{v}"), kind, &bytes)
                            {
                                Ok(json) => {
                                    handlers::access_review::review(&self, review, &json, user)
                                        .await
                                }
                                Err(e) => Err(e),
                            }
                        }
                        Ok(bytes) => {
                            handlers::access_review::review(&self, review, &bytes, user).await
                        }
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
            let mut body = self.track_watch(resource, body);
            if let Some(a) = audit {
                let code = parts.status.as_u16();
                a.write(Stage::ResponseStarted, Some(code));
                body = body::on_drop(body, move || a.write(Stage::ResponseComplete, Some(code)));
            }
            return Response::from_parts(parts, body);
        }
        if let Some(a) = audit {
            a.write(Stage::ResponseComplete, Some(resp.status().as_u16()));
        }
        resp
    }

    /// Applies impersonation and asks the authorizer whether the request may run; `Ok` with
    /// the user it runs as, and whether it is a watch.
    ///
    /// Shortly after a role or binding was written, a refusal is decided again once the RBAC
    /// caches have caught up with storage, so that the grant is in force (see
    /// [`crate::auth::rbac::Rbac::catch_up`]). `effective` receives the user the request
    /// runs as once impersonation is applied, also when it is then refused (for the audit).
    async fn authorize_request(
        &self,
        parts: &http::request::Parts,
        caller: &Arc<UserInfo>,
        effective: &mut Option<Arc<UserInfo>>,
    ) -> Result<(Arc<UserInfo>, bool), Status> {
        let impersonate = || {
            impersonation::impersonate(&parts.headers, caller, |a| {
                self.authorizer.authorize(caller, a).allowed
            })
        };
        let impersonated = match impersonate() {
            Err(s) if s.code() == 403 => {
                self.authorizer.rbac().catch_up().await;
                impersonate()
            }
            other => other,
        };
        let user = match impersonated? {
            Some(u) => Arc::new(u),
            None => caller.clone(),
        };
        *effective = Some(user.clone());
        let attrs = Attributes::from_request(
            &parts.method,
            parts.uri.path(),
            parts.uri.query().unwrap_or(""),
        );
        let mut decision = self.authorizer.authorize(&user, &attrs);
        if !decision.allowed {
            self.authorizer.rbac().catch_up().await;
            decision = self.authorizer.authorize(&user, &attrs);
        }
        if decision.allowed {
            return Ok((user, attrs.verb == "watch"));
        }
        let mut message = attrs.forbidden_message(&user.name);
        if !decision.reason.is_empty() {
            message = format!("{message}: {}", decision.reason);
        }
        let status = Status::new(api::Reason::Forbidden, message);
        Err(if attrs.resource_request {
            status
                .with_details(&attrs.resource, &attrs.name)
                .with_group(&attrs.api_group)
        } else {
            status
        })
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
                // A cache loaded on demand serves only its own resource, and loads (or
                // reloads) while a request for it waits: never a reason to turn traffic away.
                let ready = self
                    .cachers
                    .values()
                    .all(|c| c.loads_on_demand() || c.is_ready());
                return Ok(if ready {
                    text_response(200, "ok")
                } else {
                    text_response(500, "[-]watch-cache not ready\nhealthz check failed")
                });
            }
            Route::Metrics => {
                let mut text = self.metrics.render();
                crate::process_metrics::render(&mut text);
                let mut resp = text_response(200, &text);
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                return Ok(resp);
            }
            Route::CoreVersions | Route::Groups => {
                let core = matches!(route, Route::CoreVersions);
                let accept = parts
                    .headers
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                match discovery::aggregated_version(accept) {
                    Some(v) => {
                        let doc = discovery::aggregated(&self.custom.all(), core, v);
                        let mut resp = handlers::json_response(
                            200,
                            serde_json::to_vec(&doc).unwrap_or_default(),
                        );
                        if let Ok(ct) = HeaderValue::from_str(&discovery::aggregated_media_type(v))
                        {
                            resp.headers_mut().insert(http::header::CONTENT_TYPE, ct);
                        }
                        resp.headers_mut()
                            .insert(http::header::VARY, HeaderValue::from_static("Accept"));
                        return Ok(resp);
                    }
                    None => {
                        // The answer depends on the Accept header: caches must know.
                        let doc = if core {
                            discovery::api_versions()
                        } else {
                            discovery::api_group_list(&self.custom.all())
                        };
                        let mut resp = handlers::json_response(
                            200,
                            serde_json::to_vec(&doc).unwrap_or_default(),
                        );
                        resp.headers_mut()
                            .insert(http::header::VARY, HeaderValue::from_static("Accept"));
                        return Ok(resp);
                    }
                }
            }
            Route::Group(g) => {
                discovery::api_group(&self.custom.all(), &g).ok_or_else(Status::path_not_found)?
            }
            Route::ResourceList(g, v) => discovery::api_resource_list(&self.custom.all(), &g, &v)
                .ok_or_else(Status::path_not_found)?,
            Route::OpenApiV3Root => openapi::openapi_v3_root(&self.custom.snapshot().infos),
            Route::OpenApiV3(p) => openapi::openapi_v3_document(&self.custom.snapshot().infos, &p)
                .ok_or_else(Status::path_not_found)?,
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
            Route::OidcDiscovery => json!({
                "issuer": ISSUER,
                "jwks_uri": format!("{ISSUER}/openid/v1/jwks"),
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["ES256"],
            }),
            Route::Jwks => {
                let doc = json!({"keys": [self.service_account_tokens().jwk()]});
                let mut resp =
                    handlers::json_response(200, serde_json::to_vec(&doc).unwrap_or_default());
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/jwk-set+json"),
                );
                return Ok(resp);
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
                            Some(slot) => DirectWatch::WebSocket(c, slot.clone()),
                            None => DirectWatch::Chunked(c),
                        }),
                        None => parts
                            .extensions
                            .get::<http2::writer::StreamSink>()
                            .cloned()
                            .map(DirectWatch::Http2),
                    };
                    let conn = parts.extensions.get::<ConnHandle>().map(|h| h.0.clone());
                    let reg = handlers::watch::watch(self, &r, &opts).await?;
                    Ok(watch_response(reg, r.info, output, direct, conn))
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
        if let Some(b) = parts.extensions.get::<AuditBody>() {
            let _ = b.0.set(body.clone());
        }
        let user_agent = parts
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        let mut wopts = WriteOptions::from_query(query, user_agent)?;
        wopts.user = parts.extensions.get::<Authenticated>().map(|a| a.0.clone());
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
            body =
                protobuf::decode_request_to_json(r.info, r.subresource.as_deref(), &body)?.into();
            content_type = "application/json".into();
        }
        if let Some(b) = parts.extensions.get::<AuditBody>() {
            let _ = b.0.set(body.clone());
        }
        let user_agent = parts
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        let mut wopts = WriteOptions::from_query(query, user_agent)?;
        wopts.user = parts.extensions.get::<Authenticated>().map(|a| a.0.clone());
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
                    Some("token") => {
                        handlers::token_request::create_token(self, r, body, wopts).await
                    }
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
