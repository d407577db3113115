//! The HTTP client: one connection pool per [`Client`], and the verbs of the Kubernetes API
//! (list, watch, get, create, replace, patch, delete) for any [`ApiResource`].
//!
//! `http://` servers are spoken to with HTTP/1.1; `https://` servers through rustls with
//! ALPN offering `h2` and `http/1.1`, so a real kube-apiserver negotiates HTTP/2 and many
//! watches share one connection. Objects are generic: anything `serde` can decode (typed
//! `k8s-openapi` objects, `serde_json::Value`, your own structs), or raw JSON bytes through
//! the `*_raw` methods, which hand out each list item and watch object as a zero-copy
//! [`Bytes`] slice of the response without building a JSON tree.
//!
//! [`Api<K>`] is a typed handle that fixes the resource and namespace.

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use api::list_options::ResourceVersionMatch;

use super::config::{Auth, Config, ConfigError};
use super::error::{error_from_response, BoxError, Error};
use super::protobuf_decoder::{
    decode_protobuf_list, ACCEPT_PROTOBUF, MEDIA_TYPE as PROTOBUF_MEDIA_TYPE,
};
use super::resource::ApiResource;
use super::watch_decoder::{cache_object, raw_object, subslice, typed_object, DEFAULT_MAX_LINE};
use super::watch_stream::{EventDecoder, WatchStream};
use crate::object::DecodeObject;

/// The page size [`Client::list_all`] uses when [`ListParams::limit`] is unset (kubectl's).
pub const DEFAULT_PAGE_SIZE: u32 = 500;

/// How often a token file is re-read.
const TOKEN_FILE_REFRESH: Duration = Duration::from_secs(60);

/// TCP keepalive idle time and HTTP/2 PING interval of the client's connections.
const KEEPALIVE: Duration = Duration::from_secs(30);

/// The `User-Agent` of every request.
const USER_AGENT_VALUE: &str = concat!("listwatch-client/", env!("CARGO_PKG_VERSION"));

type HttpClient = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A connection to one API server. Cheap to clone (clones share the connection pool);
/// `Send + Sync`.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: HttpClient,
    /// `scheme://authority`, no trailing slash.
    origin: String,
    /// The server URL's path prefix, no trailing slash (usually empty).
    base_path: String,
    auth: AuthState,
    default_namespace: String,
    timeout: Option<Duration>,
}

enum AuthState {
    None,
    Header(HeaderValue),
    TokenFile {
        path: PathBuf,
        cached: Mutex<(HeaderValue, Instant)>,
    },
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field(
                "server",
                &format_args!("{}{}", self.inner.origin, self.inner.base_path),
            )
            .field("default_namespace", &self.inner.default_namespace)
            .finish_non_exhaustive()
    }
}

fn bearer(token: &str) -> Result<HeaderValue, ConfigError> {
    let mut v = HeaderValue::from_str(&format!("Bearer {}", token.trim())).map_err(|_| {
        ConfigError::InvalidCredential {
            what: "bearer token",
            detail: "it contains characters not allowed in an HTTP header".into(),
        }
    })?;
    v.set_sensitive(true);
    Ok(v)
}

fn read_token_file(path: &PathBuf) -> Result<HeaderValue, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadField {
        field: "tokenFile",
        origin: "the token file".into(),
        path: path.clone(),
        source,
    })?;
    bearer(&text)
}

/// Accepts any server certificate (`insecure-skip-tls-verify`), while still checking that
/// the handshake signatures are valid for the presented certificate.
#[derive(Debug)]
struct SkipServerVerification(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for SkipServerVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The rustls configuration of `config`: its CA certificates (or no verification when
/// `insecure_skip_tls_verify`), and its client identity.
fn tls_config(config: &Config) -> Result<rustls::ClientConfig, ConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = if config.insecure_skip_tls_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SkipServerVerification(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for cert in &config.root_certs {
            roots.add(cert.clone())?;
        }
        if roots.is_empty() && config.server.scheme_str() == Some("https") {
            tracing::warn!(
                server = %config.server,
                "no certificate authority configured: TLS verification of the server will fail"
            );
        }
        builder.with_root_certificates(roots)
    };
    Ok(match &config.identity {
        Some(id) => builder.with_client_auth_cert(id.certs.clone(), id.key.clone_key())?,
        None => builder.with_no_client_auth(),
    })
}

impl Client {
    /// A client for `config`: builds the TLS configuration (for `https://` servers) and
    /// reads the token file once. No connection is made until the first request.
    ///
    /// # Errors
    /// [`Error::Config`] if the TLS material is refused (e.g. a key that does not match
    /// its certificate), the token file cannot be read, or the server name is invalid.
    pub fn new(config: Config) -> Result<Client, Error> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(config.connect_timeout);
        // Dead peers are noticed even while a watch or a list waits: TCP keepalive for
        // HTTP/1.1, PINGs for HTTP/2 (client-go's figures: 30 s, then 15 s for the answer).
        http.set_keepalive(Some(KEEPALIVE));
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(&config)?)
            .https_or_http();
        let builder = match &config.tls_server_name {
            Some(name) => {
                let trimmed = name
                    .strip_prefix('[')
                    .and_then(|s| s.strip_suffix(']'))
                    .unwrap_or(name);
                let server_name = rustls_pki_types::ServerName::try_from(trimmed.to_string())
                    .map_err(|e| ConfigError::InvalidServer {
                        server: name.clone(),
                        origin: "tls-server-name".into(),
                        detail: e.to_string(),
                    })?;
                builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(
                    server_name,
                ))
            }
            None => builder,
        };
        let connector = builder.enable_http1().enable_http2().wrap_connector(http);
        let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .timer(hyper_util::rt::TokioTimer::new())
            .http2_keep_alive_interval(KEEPALIVE)
            .http2_keep_alive_timeout(Duration::from_secs(15))
            .http2_keep_alive_while_idle(true)
            .build(connector);

        let auth = match &config.auth {
            Auth::None => AuthState::None,
            Auth::Bearer(t) => AuthState::Header(bearer(t)?),
            Auth::Basic { username, password } => {
                let enc = base64::engine::general_purpose::STANDARD
                    .encode(format!("{username}:{password}"));
                let mut v = HeaderValue::from_str(&format!("Basic {enc}")).map_err(|_| {
                    ConfigError::InvalidCredential {
                        what: "basic authentication",
                        detail: "not representable in an HTTP header".into(),
                    }
                })?;
                v.set_sensitive(true);
                AuthState::Header(v)
            }
            Auth::TokenFile(path) => AuthState::TokenFile {
                cached: Mutex::new((read_token_file(path)?, Instant::now())),
                path: path.clone(),
            },
        };
        let scheme = config.server.scheme_str().unwrap_or("http");
        let authority = config
            .server
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                origin: format!("{scheme}://{authority}"),
                base_path: config.server.path().trim_end_matches('/').to_string(),
                auth,
                default_namespace: config.default_namespace.clone(),
                timeout: config.timeout,
            }),
        })
    }

    /// A client from [`Config::infer`].
    ///
    /// # Errors
    /// As [`Config::infer`] and [`Client::new`].
    pub fn try_default() -> Result<Client, Error> {
        Client::new(Config::infer()?)
    }

    /// The namespace of the configuration's context (or service account).
    pub fn default_namespace(&self) -> &str {
        &self.inner.default_namespace
    }

    /// The `Authorization` header to send, re-reading a token file when due (keeping the
    /// last good token if a re-read fails).
    fn authorization(&self) -> Option<HeaderValue> {
        match &self.inner.auth {
            AuthState::None => None,
            AuthState::Header(v) => Some(v.clone()),
            AuthState::TokenFile { path, cached } => {
                let mut guard = cached.lock();
                if guard.1.elapsed() >= TOKEN_FILE_REFRESH {
                    match read_token_file(path) {
                        Ok(v) => guard.0 = v,
                        Err(e) => tracing::warn!(error = %e, "keeping the previous token"),
                    }
                    guard.1 = Instant::now();
                }
                Some(guard.0.clone())
            }
        }
    }

    /// Sends one request and returns the response head and streaming body.
    /// `path_and_query` starts with `/` and is appended to the server's base path.
    async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<(Bytes, &'static str)>,
        accept: &'static str,
    ) -> Result<http::Response<hyper::body::Incoming>, Error> {
        let uri = format!(
            "{}{}{}",
            self.inner.origin, self.inner.base_path, path_and_query
        );
        let context = format!("{method} {uri}");
        let mut req = Request::builder()
            .method(method)
            .uri(&uri)
            .header(ACCEPT, accept)
            .header(USER_AGENT, USER_AGENT_VALUE);
        if let Some(auth) = self.authorization() {
            req = req.header(AUTHORIZATION, auth);
        }
        let req = match body {
            Some((bytes, content_type)) => req
                .header(CONTENT_TYPE, content_type)
                .body(Full::new(bytes)),
            None => req.body(Full::new(Bytes::new())),
        }
        .map_err(|e| Error::InvalidRequest(format!("{context}: {e}")))?;
        self.inner
            .http
            .request(req)
            .await
            .map_err(|e| Error::transport(context, e))
    }

    /// Sends a request and reads the whole response body. Non-2xx answers become errors
    /// ([`Error::Api`] for Status bodies). Bounded by the configured timeout.
    ///
    /// `path_and_query` is the absolute API path with its query, e.g. `/version` or
    /// `/api/v1/namespaces/default/pods?limit=5`; `body` is the request body and its
    /// content type.
    ///
    /// # Errors
    /// [`Error::Transport`], [`Error::Timeout`], or the server's error.
    pub async fn request_bytes(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<(Bytes, &'static str)>,
    ) -> Result<(StatusCode, Bytes), Error> {
        self.request_accepting(method, path_and_query, body, "application/json")
            .await
    }

    /// [`request_bytes`](Self::request_bytes) with the given `Accept` header.
    async fn request_accepting(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<(Bytes, &'static str)>,
        accept: &'static str,
    ) -> Result<(StatusCode, Bytes), Error> {
        let fut = async {
            let context = format!("{method} {path_and_query}");
            let resp = self.send(method, path_and_query, body, accept).await?;
            let status = resp.status();
            if !status.is_success() {
                return Err(error_of(resp, &context).await);
            }
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| Error::transport(format!("reading the response of {context}"), e))?
                .to_bytes();
            Ok((status, bytes))
        };
        match self.inner.timeout {
            Some(d) => tokio::time::timeout(d, fut)
                .await
                .map_err(|_| Error::Timeout(d))?,
            None => fut.await,
        }
    }

    /// One page of a list (see [`ListParams`]), decoding each item as `K`.
    ///
    /// # Errors
    /// The server's error (e.g. 410 for an expired continue token), transport or decode
    /// errors.
    pub async fn list<K: DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<K>, Error> {
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let (_, body) = self.request_bytes(Method::GET, &path, None).await?;
        decode_list(&body, &path)
    }

    /// One page of a list with each item as the raw JSON bytes of the object: zero-copy
    /// slices of the response body, no JSON tree is built.
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn list_raw(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<Bytes>, Error> {
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let (_, body) = self.request_bytes(Method::GET, &path, None).await?;
        decode_raw_list(&body, &path)
    }

    /// One page of a list in Kubernetes' protobuf encoding, each item the raw protobuf
    /// message of the object (a zero-copy slice of the response body; decode it with
    /// [`crate::protobuf_object::ProtobufObject`] or a generated type). Only built-in kinds
    /// have a protobuf encoding: for any other the server answers JSON, which is an error
    /// here.
    ///
    /// # Errors
    /// As [`list`](Self::list); a decode error if the answer is not a protobuf list.
    pub async fn list_protobuf(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<Bytes>, Error> {
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let (_, body) = self
            .request_accepting(Method::GET, &path, None, ACCEPT_PROTOBUF)
            .await?;
        if !body.starts_with(crate::protobuf_wire::MAGIC) {
            return Err(not_protobuf(&format!("GET {path}")));
        }
        decode_protobuf_list(&body, &path)
    }

    /// One page of a list, cut into items while the response arrives: `on_item` gets each
    /// item's raw JSON text (borrowed for the call) in order, as soon as it is complete, so
    /// neither the whole body nor all raw items are ever held at once. The result carries
    /// the list's metadata and no items. Items are not validated here: decode them with a
    /// validating decoder. An error from `on_item` ends the request with that error.
    ///
    /// # Errors
    /// As [`list`](Self::list), plus a decode error for a body that is not a list object.
    pub async fn list_raw_streaming(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
        mut on_item: impl FnMut(&[u8]) -> Result<(), Error> + Send,
    ) -> Result<ObjectList<Bytes>, Error> {
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let split_error = |e: super::list_splitter::SplitError| {
            Error::decode(
                format!("the list from {path}"),
                <serde_json::Error as serde::de::Error>::custom(e),
            )
        };
        let mut splitter = super::list_splitter::ListSplitter::new(DEFAULT_MAX_LINE);
        self.get_chunks(&path, "application/json", |data| {
            split_chunk(|emit| splitter.push(data, emit), &mut on_item, split_error)
        })
        .await?;
        let skeleton = Bytes::from(splitter.finish().map_err(split_error)?);
        decode_raw_list(&skeleton, &path)
    }

    /// Sends `GET path` accepting `accept`, and hands each chunk of a successful response's
    /// body to `on_chunk` in order, all within the client's timeout. An error from
    /// `on_chunk` ends the request with that error.
    async fn get_chunks(
        &self,
        path: &str,
        accept: &'static str,
        mut on_chunk: impl FnMut(&[u8]) -> Result<(), Error> + Send,
    ) -> Result<(), Error> {
        let fut = async {
            let resp = self.send(Method::GET, path, None, accept).await?;
            if !resp.status().is_success() {
                return Err(error_of(resp, &format!("GET {path}")).await);
            }
            let mut body = resp.into_body();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| {
                    Error::transport(format!("reading the response of GET {path}"), e)
                })?;
                if let Ok(data) = frame.into_data() {
                    on_chunk(&data)?;
                }
            }
            Ok(())
        };
        match self.inner.timeout {
            Some(d) => tokio::time::timeout(d, fut)
                .await
                .map_err(|_| Error::Timeout(d))?,
            None => fut.await,
        }
    }

    /// [`list_raw_streaming`](Self::list_raw_streaming) in Kubernetes' protobuf encoding:
    /// `on_item` gets each item's own protobuf message (borrowed for the call) in order, as
    /// soon as its last byte has arrived, so the whole body is never held at once. The result
    /// carries the list's metadata and no items. Only built-in kinds have a protobuf
    /// encoding: for any other the server answers JSON, which is an error here.
    ///
    /// # Errors
    /// As [`list_protobuf`](Self::list_protobuf); an error from `on_item` ends the request
    /// with that error.
    pub async fn list_protobuf_streaming(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
        mut on_item: impl FnMut(&[u8]) -> Result<(), Error> + Send,
    ) -> Result<ObjectList<Bytes>, Error> {
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let context = format!("the protobuf list from {path}");
        let wire = |e| super::protobuf_decoder::wire(&context, e);
        let mut splitter =
            super::protobuf_list_splitter::ProtobufListSplitter::new(DEFAULT_MAX_LINE);
        self.get_chunks(&path, ACCEPT_PROTOBUF, |data| {
            // A kind without a protobuf encoding is answered in JSON.
            let magic = crate::protobuf_wire::MAGIC.first();
            if splitter.at_start() && data.first().is_some_and(|b| Some(b) != magic) {
                return Err(not_protobuf(&format!("GET {path}")));
            }
            split_chunk(|emit| splitter.push(data, emit), &mut on_item, wire)
        })
        .await?;
        splitter.finish().map_err(wire)
    }

    /// The whole list, following continue tokens with pages of `params.limit` items
    /// ([`DEFAULT_PAGE_SIZE`] when unset). All pages are served at the resourceVersion of
    /// the first, which the result carries. If a continue token expires mid-way (410), the
    /// list is retried once in full without paging, as client-go's pager does.
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn list_all<K: DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<K>, Error> {
        self.paginate(params, |p| async move {
            self.list(resource, namespace, &p).await
        })
        .await
    }

    /// [`list_all`](Self::list_all) with raw items, as [`list_raw`](Self::list_raw).
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn list_all_raw(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<Bytes>, Error> {
        self.paginate(params, |p| async move {
            self.list_raw(resource, namespace, &p).await
        })
        .await
    }

    async fn paginate<T, F, Fut>(
        &self,
        params: &ListParams,
        page: F,
    ) -> Result<ObjectList<T>, Error>
    where
        F: Fn(ListParams) -> Fut,
        Fut: std::future::Future<Output = Result<ObjectList<T>, Error>>,
    {
        let mut p = params.clone();
        if p.limit.is_none() {
            p.limit = Some(DEFAULT_PAGE_SIZE);
        }
        let mut all = page(p.clone()).await?;
        let mut tokens = std::collections::HashSet::new();
        while let Some(token) = all.continue_token.take() {
            // A server that hands out a token it already gave would page forever.
            if !tokens.insert(token.clone()) {
                return Err(Error::UnexpectedResponse {
                    code: 200,
                    body: format!("the server repeated continue token {token:?} within one list"),
                });
            }
            let mut next = p.clone();
            next.continue_token = Some(token);
            // The continue token pins the version; the server refuses both together.
            next.resource_version = None;
            next.resource_version_match = None;
            match page(next).await {
                Ok(more) => {
                    all.items.extend(more.items);
                    all.continue_token = more.continue_token;
                    all.remaining_item_count = more.remaining_item_count;
                }
                Err(e) if e.is_gone() => {
                    let mut full = params.clone();
                    full.limit = None;
                    full.continue_token = None;
                    return page(full).await;
                }
                Err(e) => return Err(e),
            }
        }
        all.remaining_item_count = None;
        Ok(all)
    }

    /// Starts a watch, decoding each object as `K`. Fails fast if the server refuses the
    /// watch with an HTTP error; a too-old resourceVersion arrives instead as an
    /// [`WatchEvent::Error`](super::WatchEvent::Error) with code 410 on the stream.
    ///
    /// # Errors
    /// The server's error for the watch request, or a transport error.
    pub async fn watch<K: DeserializeOwned + Send + 'static>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
    ) -> Result<WatchStream<K>, Error> {
        self.start_watch(
            resource,
            namespace,
            params,
            EventDecoder::Json(typed_object::<K>),
        )
        .await
    }

    /// Starts a watch whose objects are the raw JSON bytes of each event's object, sliced
    /// from the received chunk without copying when the event lies within one chunk.
    ///
    /// # Errors
    /// As [`watch`](Self::watch).
    pub async fn watch_raw(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
    ) -> Result<WatchStream<Bytes>, Error> {
        self.start_watch(resource, namespace, params, EventDecoder::Json(raw_object))
            .await
    }

    /// Starts a watch whose objects are decoded with [`DecodeObject::decode_at`] while the
    /// event line is validated — for a [`crate::object::DynamicObject`], the object is read
    /// in the same single pass over the line. What [`crate::cache::RestListerWatcher`] uses.
    ///
    /// Each object comes already shared (an `Arc`, as the caches keep it): for a run of
    /// events decoded on a decode thread, the `Arc` is made there too, off the task that
    /// reads the stream.
    ///
    /// # Errors
    /// As [`watch`](Self::watch).
    ///
    /// For a type read from protobuf ([`DecodeObject::PROTOBUF`]) the watch is asked for in
    /// protobuf and each object is decoded with [`DecodeObject::decode_protobuf`]; a server
    /// that answers in JSON (a kind without a protobuf encoding) is an error.
    pub async fn watch_objects<K: DecodeObject>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
    ) -> Result<WatchStream<Arc<K>>, Error> {
        self.watch_objects_trimmed(resource, namespace, params, false)
            .await
    }

    /// [`Client::watch_objects`]; with `strip_managed_fields`, JSON objects are decoded
    /// without `metadata.managedFields` ([`crate::managed_fields_trim`]).
    ///
    /// # Errors
    /// As [`watch`](Self::watch).
    pub async fn watch_objects_trimmed<K: DecodeObject>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
        strip_managed_fields: bool,
    ) -> Result<WatchStream<Arc<K>>, Error> {
        if K::PROTOBUF {
            return self
                .start_watch(
                    resource,
                    namespace,
                    params,
                    EventDecoder::Protobuf(shared_protobuf_object::<K>),
                )
                .await;
        }
        let decode = if strip_managed_fields {
            shared_trimmed_object::<K>
        } else {
            shared_cache_object::<K>
        };
        self.start_watch(resource, namespace, params, EventDecoder::Json(decode))
            .await
    }

    async fn start_watch<T: Send + 'static>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
        decode: EventDecoder<T>,
    ) -> Result<WatchStream<T>, Error> {
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let accept = match decode {
            EventDecoder::Json(_) => "application/json",
            EventDecoder::Protobuf(_) => ACCEPT_PROTOBUF,
        };
        let send = self.send(Method::GET, &path, None, accept);
        // The timeout bounds the wait for the response head only: the stream is long-lived.
        let resp = match self.inner.timeout {
            Some(d) => tokio::time::timeout(d, send)
                .await
                .map_err(|_| Error::Timeout(d))??,
            None => send.await?,
        };
        let status = resp.status();
        if !status.is_success() {
            return Err(error_of(resp, &format!("GET {path}")).await);
        }
        let answered_protobuf = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with(PROTOBUF_MEDIA_TYPE));
        let body = resp
            .into_body()
            .map_err(|e| -> BoxError { Box::new(e) })
            .boxed_unsync();
        if matches!(decode, EventDecoder::Protobuf(_)) && !answered_protobuf {
            return Err(not_protobuf(&format!("GET {path}")));
        }
        Ok(WatchStream::with_decoder(
            body,
            decode,
            params.idle_timeout,
            params.max_line.unwrap_or(DEFAULT_MAX_LINE),
            format!("GET {path}"),
        ))
    }

    /// Reads one object.
    ///
    /// # Errors
    /// 404 NotFound as [`Error::Api`], transport or decode errors.
    pub async fn get<K: DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<K, Error> {
        let path = item_path(resource, namespace, name)?;
        let (_, body) = self.request_bytes(Method::GET, &path, None).await?;
        decode_object(&body, &path)
    }

    /// Creates an object (POST to the collection) and returns it as stored.
    ///
    /// # Errors
    /// 409 AlreadyExists, 422 Invalid, ... as [`Error::Api`]; transport or decode errors.
    pub async fn create<K: Serialize + DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        params: &PostParams,
        object: &K,
    ) -> Result<K, Error> {
        if resource.namespaced && namespace.is_none_or(str::is_empty) {
            return Err(Error::InvalidRequest(format!(
                "creating {} needs a namespace",
                resource.plural
            )));
        }
        let path = with_query(resource.collection_path(namespace), &params.to_query());
        let body = encode(object)?;
        let (_, body) = self
            .request_bytes(Method::POST, &path, Some((body, "application/json")))
            .await?;
        decode_object(&body, &path)
    }

    /// Replaces an object (PUT). A `metadata.resourceVersion` in `object` makes the update
    /// conditional: 409 Conflict if it is stale.
    ///
    /// # Errors
    /// 409 Conflict, 404 NotFound, 422 Invalid, ... as [`Error::Api`]; transport or decode
    /// errors.
    pub async fn replace<K: Serialize + DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &PostParams,
        object: &K,
    ) -> Result<K, Error> {
        let path = with_query(item_path(resource, namespace, name)?, &params.to_query());
        let body = encode(object)?;
        let (_, body) = self
            .request_bytes(Method::PUT, &path, Some((body, "application/json")))
            .await?;
        decode_object(&body, &path)
    }

    /// Patches an object with `patch` in the format `patch_type` names, and returns the
    /// result.
    ///
    /// # Errors
    /// 404 NotFound, 409 Conflict, 422 Invalid, 415, ... as [`Error::Api`]; transport or
    /// decode errors.
    pub async fn patch<K: DeserializeOwned, P: Serialize + ?Sized>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &PatchParams,
        patch_type: PatchType,
        patch: &P,
    ) -> Result<K, Error> {
        let path = with_query(item_path(resource, namespace, name)?, &params.to_query());
        let body = encode(patch)?;
        let (_, body) = self
            .request_bytes(
                Method::PATCH,
                &path,
                Some((body, patch_type.content_type())),
            )
            .await?;
        decode_object(&body, &path)
    }

    /// Deletes an object. The server answers with the object (possibly still present with
    /// a `deletionTimestamp`, when finalizers or a grace period apply) or with a success
    /// Status; both are returned as [`DeleteOutcome`].
    ///
    /// # Errors
    /// 404 NotFound, 409 Conflict (failed precondition), ... as [`Error::Api`]; transport or
    /// decode errors.
    pub async fn delete<K: DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<DeleteOutcome<K>, Error> {
        let path = with_query(
            item_path(resource, namespace, name)?,
            &params.dry_run_query(),
        );
        let body = params.body()?;
        let (_, body) = self
            .request_bytes(Method::DELETE, &path, Some((body, "application/json")))
            .await?;
        #[derive(Deserialize)]
        struct KindProbe {
            #[serde(default)]
            kind: Option<String>,
        }
        let probe: KindProbe = serde_json::from_slice(&body)
            .map_err(|e| Error::decode(format!("the response of DELETE {path}"), e))?;
        if probe.kind.as_deref() == Some("Status") {
            let s: SuccessStatus = serde_json::from_slice(&body)
                .map_err(|e| Error::decode(format!("the Status of DELETE {path}"), e))?;
            return Ok(DeleteOutcome::Status(s));
        }
        decode_object(&body, &path).map(DeleteOutcome::Object)
    }
}

/// How much of an error response's body is read: a `Status` is far smaller, and the rest of a
/// non-`Status` body is not used beyond an excerpt.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How long reading an error response's body may take.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The error an unsuccessful response stands for: its `Status`, or its code and an excerpt.
/// At most [`MAX_ERROR_BODY`] bytes are read, for at most [`ERROR_BODY_TIMEOUT`], so a
/// server that answers an error with an endless or stalled body cannot hold the caller.
async fn error_of(resp: http::Response<hyper::body::Incoming>, context: &str) -> Error {
    let code = resp.status().as_u16();
    let retry_after = retry_after_header(resp.headers());
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    let read = tokio::time::timeout(ERROR_BODY_TIMEOUT, async {
        while bytes.len() < MAX_ERROR_BODY {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        let room = MAX_ERROR_BODY - bytes.len();
                        bytes.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        Ok(())
    })
    .await;
    match read {
        Ok(Err(e)) => Error::transport(format!("reading the response of {context}"), e),
        // A partial body still yields the code (and a Status if it fit).
        Ok(Ok(())) | Err(_) => error_from_response(code, retry_after, &bytes),
    }
}

/// The error for a JSON answer to a request that needs protobuf.
fn not_protobuf(context: &str) -> Error {
    Error::decode(
        format!("the response of {context}"),
        <serde_json::Error as serde::de::Error>::custom(
            "the server answered in JSON: this kind has no protobuf encoding \
             (read it as a DynamicObject instead)",
        ),
    )
}

/// The `Retry-After` header in whole seconds, if present and numeric.
fn retry_after_header(headers: &http::HeaderMap) -> Option<u32> {
    headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse().ok())
}

fn with_query(mut path: String, query: &str) -> String {
    if !query.is_empty() {
        path.push('?');
        path.push_str(query);
    }
    path
}

fn item_path(resource: &ApiResource, namespace: Option<&str>, name: &str) -> Result<String, Error> {
    if name.is_empty() {
        return Err(Error::InvalidRequest(format!(
            "an object of {} needs a name",
            resource.plural
        )));
    }
    if resource.namespaced && namespace.is_none_or(str::is_empty) {
        return Err(Error::InvalidRequest(format!(
            "{} {name:?} needs a namespace",
            resource.plural
        )));
    }
    Ok(resource.item_path(namespace, name))
}

fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Bytes, Error> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| Error::decode("the request body (encoding)", e))
}

fn decode_object<K: DeserializeOwned>(body: &[u8], path: &str) -> Result<K, Error> {
    serde_json::from_slice(body).map_err(|e| Error::decode(format!("the response of {path}"), e))
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireListMeta {
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default, rename = "continue")]
    continue_: Option<String>,
    #[serde(default)]
    remaining_item_count: Option<i64>,
}

#[derive(Deserialize)]
struct WireList<K> {
    #[serde(default)]
    metadata: Option<WireListMeta>,
    #[serde(default = "Option::default")]
    items: Option<Vec<K>>,
}

#[derive(Deserialize)]
struct WireRawList<'a> {
    #[serde(default)]
    metadata: Option<WireListMeta>,
    #[serde(default, borrow)]
    items: Option<Vec<&'a RawValue>>,
}

fn list_from<T>(meta: Option<WireListMeta>, items: Vec<T>) -> ObjectList<T> {
    let meta = meta.unwrap_or_default();
    ObjectList {
        items,
        resource_version: meta.resource_version.unwrap_or_default(),
        continue_token: meta.continue_.filter(|c| !c.is_empty()),
        remaining_item_count: meta.remaining_item_count,
    }
}

/// Decodes a list body with typed items.
fn decode_list<K: DeserializeOwned>(body: &[u8], path: &str) -> Result<ObjectList<K>, Error> {
    let l: WireList<K> = serde_json::from_slice(body)
        .map_err(|e| Error::decode(format!("the list from {path}"), e))?;
    Ok(list_from(l.metadata, l.items.unwrap_or_default()))
}

/// Decodes a list body with each item as a zero-copy slice of `body`.
pub(crate) fn decode_raw_list(body: &Bytes, path: &str) -> Result<ObjectList<Bytes>, Error> {
    let l: WireRawList<'_> = serde_json::from_slice(body)
        .map_err(|e| Error::decode(format!("the list from {path}"), e))?;
    let items = l
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|raw| subslice(body, raw.get().as_bytes()))
        .collect();
    Ok(list_from(l.metadata, items))
}

/// One page of a list (or a whole list from `list_all`).
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectList<T> {
    /// The items, in the server's order (by namespace and name).
    pub items: Vec<T>,
    /// `metadata.resourceVersion`: the version the list was served at. Watch from here to
    /// see every later change.
    pub resource_version: String,
    /// `metadata.continue`: pass to [`ListParams::continue_token`] for the next page;
    /// `None` on the last page.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount`: how many items follow this page, when the server
    /// knows.
    pub remaining_item_count: Option<i64>,
}

/// The body of a successful `Status` (e.g. from a delete).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SuccessStatus {
    /// `status`, normally `Success`.
    #[serde(default)]
    pub status: Option<String>,
    /// `message`.
    #[serde(default)]
    pub message: Option<String>,
    /// `details`.
    #[serde(default)]
    pub details: Option<SuccessDetails>,
}

/// `details` of a [`SuccessStatus`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SuccessDetails {
    /// `details.name`.
    #[serde(default)]
    pub name: Option<String>,
    /// `details.kind` (the resource name).
    #[serde(default)]
    pub kind: Option<String>,
    /// `details.uid`.
    #[serde(default)]
    pub uid: Option<String>,
}

/// What a delete returned.
#[derive(Debug, Clone, PartialEq)]
pub enum DeleteOutcome<K> {
    /// The object: gone, or still present with `metadata.deletionTimestamp` set when
    /// finalizers or a grace period delay its removal.
    Object(K),
    /// A success Status.
    Status(SuccessStatus),
}

/// The parameters of a list request. `Default` lists everything at the most recent version
/// in one page (or pages of [`DEFAULT_PAGE_SIZE`] with `list_all`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct ListParams {
    /// `labelSelector`, e.g. `app=web,tier!=db`.
    pub label_selector: Option<String>,
    /// `fieldSelector`, e.g. `spec.nodeName=n1`.
    pub field_selector: Option<String>,
    /// `limit`: the maximum number of items per page.
    pub limit: Option<u32>,
    /// `continue`: the opaque token of the previous page.
    pub continue_token: Option<String>,
    /// `resourceVersion`: unset = most recent; `"0"` = any (cached); `"N"` = not older
    /// than N.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<u32>,
}

impl ListParams {
    /// Sets the label selector.
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// Sets the field selector.
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }

    /// Sets the page size.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Sets the continue token.
    pub fn continue_token(mut self, token: impl Into<String>) -> Self {
        self.continue_token = Some(token.into());
        self
    }

    /// Sets `resourceVersion`.
    pub fn resource_version(mut self, rv: impl Into<String>) -> Self {
        self.resource_version = Some(rv.into());
        self
    }

    /// `resourceVersion=0`: any version, possibly stale, served from the watch cache.
    pub fn any_version(self) -> Self {
        self.resource_version("0")
    }

    /// Sets `resourceVersionMatch`.
    pub fn resource_version_match(mut self, m: ResourceVersionMatch) -> Self {
        self.resource_version_match = Some(m);
        self
    }

    /// The query string (without `?`).
    pub fn to_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        selectors(&mut q, &self.label_selector, &self.field_selector);
        if let Some(l) = self.limit.filter(|&l| l > 0) {
            q.append_pair("limit", &l.to_string());
        }
        if let Some(c) = self.continue_token.as_deref().filter(|c| !c.is_empty()) {
            q.append_pair("continue", c);
        }
        if let Some(rv) = &self.resource_version {
            q.append_pair("resourceVersion", rv);
        }
        if let Some(m) = self.resource_version_match {
            q.append_pair("resourceVersionMatch", m.as_str());
        }
        if let Some(t) = self.timeout_seconds {
            q.append_pair("timeoutSeconds", &t.to_string());
        }
        q.finish()
    }
}

fn selectors(
    q: &mut form_urlencoded::Serializer<'_, String>,
    labels: &Option<String>,
    fields: &Option<String>,
) {
    if let Some(l) = labels.as_deref().filter(|s| !s.is_empty()) {
        q.append_pair("labelSelector", l);
    }
    if let Some(f) = fields.as_deref().filter(|s| !s.is_empty()) {
        q.append_pair("fieldSelector", f);
    }
}

/// The parameters of a watch request. `Default` watches from "now" (current state as ADDED
/// events first), with bookmarks, no server timeout requested, no idle timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct WatchParams {
    /// `labelSelector`.
    pub label_selector: Option<String>,
    /// `fieldSelector`.
    pub field_selector: Option<String>,
    /// `resourceVersion`: unset/`"0"` = current state first; `"N"` = changes after N.
    pub resource_version: Option<String>,
    /// `allowWatchBookmarks` (default true).
    pub allow_bookmarks: bool,
    /// `timeoutSeconds`: the server ends the watch cleanly after this long.
    pub timeout_seconds: Option<u32>,
    /// `sendInitialEvents=true` with `resourceVersionMatch=NotOlderThan`: a streaming list,
    /// ending its initial ADDED events with a bookmark annotated
    /// `k8s.io/initial-events-end`.
    pub send_initial_events: bool,
    /// Client side: end the stream with [`Error::IdleTimeout`] if no bytes arrive for this
    /// long. With bookmarks (about one a minute) a healthy watch is never idle long.
    pub idle_timeout: Option<Duration>,
    /// Client side: the longest event line (or protobuf frame) accepted (default 64 MiB).
    pub max_line: Option<usize>,
}

impl Default for WatchParams {
    fn default() -> Self {
        WatchParams {
            label_selector: None,
            field_selector: None,
            resource_version: None,
            allow_bookmarks: true,
            timeout_seconds: None,
            send_initial_events: false,
            idle_timeout: None,
            max_line: None,
        }
    }
}

impl WatchParams {
    /// Sets the label selector.
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// Sets the field selector.
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }

    /// Watches changes after `rv`.
    pub fn resource_version(mut self, rv: impl Into<String>) -> Self {
        self.resource_version = Some(rv.into());
        self
    }

    /// Sets `timeoutSeconds`.
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.timeout_seconds = Some(seconds);
        self
    }

    /// Turns bookmarks off.
    pub fn disable_bookmarks(mut self) -> Self {
        self.allow_bookmarks = false;
        self
    }

    /// Asks for a streaming list (see [`send_initial_events`](Self::send_initial_events)).
    pub fn streaming_list(mut self) -> Self {
        self.send_initial_events = true;
        self
    }

    /// Sets the client-side idle timeout.
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.idle_timeout = Some(d);
        self
    }

    /// The query string (without `?`), starting with `watch=true`.
    pub fn to_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("watch", "true");
        selectors(&mut q, &self.label_selector, &self.field_selector);
        if self.allow_bookmarks {
            q.append_pair("allowWatchBookmarks", "true");
        }
        if let Some(rv) = &self.resource_version {
            q.append_pair("resourceVersion", rv);
        }
        if self.send_initial_events {
            q.append_pair("sendInitialEvents", "true");
            q.append_pair(
                "resourceVersionMatch",
                ResourceVersionMatch::NotOlderThan.as_str(),
            );
        }
        if let Some(t) = self.timeout_seconds {
            q.append_pair("timeoutSeconds", &t.to_string());
        }
        q.finish()
    }
}

/// Query parameters of create and replace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct PostParams {
    /// `dryRun=All`: validate without persisting.
    pub dry_run: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
}

impl PostParams {
    /// The query string (without `?`).
    pub fn to_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if self.dry_run {
            q.append_pair("dryRun", "All");
        }
        if let Some(m) = &self.field_manager {
            q.append_pair("fieldManager", m);
        }
        q.finish()
    }
}

/// The format of a patch body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// JSON merge patch (RFC 7386): `application/merge-patch+json`.
    Merge,
    /// JSON patch (RFC 6902), an array of operations: `application/json-patch+json`.
    Json,
    /// Kubernetes strategic merge patch: `application/strategic-merge-patch+json`.
    Strategic,
    /// Server-side apply (needs a field manager): `application/apply-patch+yaml`.
    Apply,
}

impl PatchType {
    /// The `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Json => "application/json-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

/// Query parameters of a patch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct PatchParams {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldManager` (required by server-side apply).
    pub field_manager: Option<String>,
    /// `force=true` (server-side apply: take over conflicting fields).
    pub force: bool,
}

impl PatchParams {
    /// Parameters for server-side apply as `manager`.
    pub fn apply(manager: impl Into<String>) -> Self {
        PatchParams {
            field_manager: Some(manager.into()),
            ..PatchParams::default()
        }
    }

    /// The query string (without `?`).
    pub fn to_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if self.dry_run {
            q.append_pair("dryRun", "All");
        }
        if let Some(m) = &self.field_manager {
            q.append_pair("fieldManager", m);
        }
        if self.force {
            q.append_pair("force", "true");
        }
        q.finish()
    }
}

/// `propagationPolicy` of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum PropagationPolicy {
    /// Dependents are orphaned.
    Orphan,
    /// Dependents are deleted in the background.
    Background,
    /// The owner waits for its dependents (foreground deletion).
    Foreground,
}

/// Conditions a delete must meet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    /// The object's uid must be this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The object's resourceVersion must be this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

/// The `DeleteOptions` of a delete, sent as the request body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct DeleteParams {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<u32>,
    /// `propagationPolicy`.
    pub propagation_policy: Option<PropagationPolicy>,
    /// `preconditions`.
    pub preconditions: Option<Preconditions>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireDeleteOptions<'a> {
    kind: &'static str,
    api_version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    grace_period_seconds: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    propagation_policy: Option<PropagationPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preconditions: Option<&'a Preconditions>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    dry_run: Vec<&'static str>,
}

impl DeleteParams {
    fn body(&self) -> Result<Bytes, Error> {
        encode(&WireDeleteOptions {
            kind: "DeleteOptions",
            api_version: "v1",
            grace_period_seconds: self.grace_period_seconds,
            propagation_policy: self.propagation_policy,
            preconditions: self.preconditions.as_ref(),
            dry_run: if self.dry_run {
                vec!["All"]
            } else {
                Vec::new()
            },
        })
    }

    fn dry_run_query(&self) -> String {
        if self.dry_run {
            "dryRun=All".to_string()
        } else {
            String::new()
        }
    }
}

/// A typed handle on one resource in one namespace (or across all namespaces / for a
/// cluster-scoped resource): [`Client`]'s verbs without repeating the resource and
/// namespace.
pub struct Api<K> {
    client: Client,
    resource: ApiResource,
    namespace: Option<String>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Api<K> {
    fn clone(&self) -> Self {
        Api {
            client: self.client.clone(),
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Api<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("resource", &self.resource)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl<K> Api<K> {
    /// A handle on `resource` in namespace `ns` (ignored for cluster-scoped resources).
    pub fn namespaced(client: Client, resource: ApiResource, ns: &str) -> Api<K> {
        let namespace = resource.namespaced.then(|| ns.to_string());
        Api {
            client,
            resource,
            namespace,
            _kind: PhantomData,
        }
    }

    /// A handle on `resource` in the client's default namespace.
    pub fn default_namespaced(client: Client, resource: ApiResource) -> Api<K> {
        let ns = client.default_namespace().to_string();
        Api::namespaced(client, resource, &ns)
    }

    /// A handle on `resource` across all namespaces (or on a cluster-scoped resource).
    /// Single-object verbs on a namespaced resource fail with [`Error::InvalidRequest`].
    pub fn all(client: Client, resource: ApiResource) -> Api<K> {
        Api {
            client,
            resource,
            namespace: None,
            _kind: PhantomData,
        }
    }

    /// The resource.
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The namespace, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// [`Client::list_raw`] on this handle.
    ///
    /// # Errors
    /// As [`Client::list_raw`].
    pub async fn list_raw(&self, params: &ListParams) -> Result<ObjectList<Bytes>, Error> {
        self.client
            .list_raw(&self.resource, self.namespace(), params)
            .await
    }

    /// [`Client::list_all_raw`] on this handle.
    ///
    /// # Errors
    /// As [`Client::list_all_raw`].
    pub async fn list_all_raw(&self, params: &ListParams) -> Result<ObjectList<Bytes>, Error> {
        self.client
            .list_all_raw(&self.resource, self.namespace(), params)
            .await
    }

    /// [`Client::watch_raw`] on this handle.
    ///
    /// # Errors
    /// As [`Client::watch_raw`].
    pub async fn watch_raw(&self, params: &WatchParams) -> Result<WatchStream<Bytes>, Error> {
        self.client
            .watch_raw(&self.resource, self.namespace(), params)
            .await
    }
}

impl<K> Api<K>
where
    K: k8s_openapi::Resource,
    K::Scope: 'static,
{
    /// A handle on the resource of the typed object `K` in namespace `ns` (ignored for
    /// cluster-scoped kinds), e.g. `Api::<Pod>::for_type(client, "default")`.
    pub fn for_type(client: Client, ns: &str) -> Api<K> {
        Api::namespaced(client, ApiResource::of::<K>(), ns)
    }
}

impl<K: DeserializeOwned> Api<K> {
    /// [`Client::list`] on this handle.
    ///
    /// # Errors
    /// As [`Client::list`].
    pub async fn list(&self, params: &ListParams) -> Result<ObjectList<K>, Error> {
        self.client
            .list(&self.resource, self.namespace(), params)
            .await
    }

    /// [`Client::list_all`] on this handle.
    ///
    /// # Errors
    /// As [`Client::list_all`].
    pub async fn list_all(&self, params: &ListParams) -> Result<ObjectList<K>, Error> {
        self.client
            .list_all(&self.resource, self.namespace(), params)
            .await
    }

    /// [`Client::watch`] on this handle.
    ///
    /// # Errors
    /// As [`Client::watch`].
    pub async fn watch(&self, params: &WatchParams) -> Result<WatchStream<K>, Error>
    where
        K: Send + 'static,
    {
        self.client
            .watch(&self.resource, self.namespace(), params)
            .await
    }

    /// [`Client::get`] on this handle.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn get(&self, name: &str) -> Result<K, Error> {
        self.client
            .get(&self.resource, self.namespace(), name)
            .await
    }

    /// [`Client::patch`] on this handle.
    ///
    /// # Errors
    /// As [`Client::patch`].
    pub async fn patch<P: Serialize + ?Sized>(
        &self,
        name: &str,
        params: &PatchParams,
        patch_type: PatchType,
        patch: &P,
    ) -> Result<K, Error> {
        self.client
            .patch(
                &self.resource,
                self.namespace(),
                name,
                params,
                patch_type,
                patch,
            )
            .await
    }

    /// [`Client::delete`] on this handle.
    ///
    /// # Errors
    /// As [`Client::delete`].
    pub async fn delete(
        &self,
        name: &str,
        params: &DeleteParams,
    ) -> Result<DeleteOutcome<K>, Error> {
        self.client
            .delete(&self.resource, self.namespace(), name, params)
            .await
    }
}

impl<K: Serialize + DeserializeOwned> Api<K> {
    /// [`Client::create`] on this handle.
    ///
    /// # Errors
    /// As [`Client::create`].
    pub async fn create(&self, params: &PostParams, object: &K) -> Result<K, Error> {
        self.client
            .create(&self.resource, self.namespace(), params, object)
            .await
    }

    /// [`Client::replace`] on this handle.
    ///
    /// # Errors
    /// As [`Client::replace`].
    pub async fn replace(&self, name: &str, params: &PostParams, object: &K) -> Result<K, Error> {
        self.client
            .replace(&self.resource, self.namespace(), name, params, object)
            .await
    }
}

/// Feeds one received chunk to a list splitter (`push`, given the item callback) and hands
/// each whole item to `on_item`, in order, until `on_item` fails; items after that are
/// passed over. The splitter's error (mapped by `split_error`) comes first, then the first
/// error of `on_item`.
fn split_chunk<E>(
    push: impl FnOnce(&mut dyn FnMut(&[u8])) -> Result<(), E>,
    on_item: &mut impl FnMut(&[u8]) -> Result<(), Error>,
    split_error: impl FnOnce(E) -> Error,
) -> Result<(), Error> {
    let mut failed = None;
    push(&mut |item| {
        if failed.is_none() {
            failed = on_item(item).err();
        }
    })
    .map_err(split_error)?;
    failed.map_or(Ok(()), Err)
}

/// [`DecodeObject::decode_protobuf`], shared: the decode function of
/// [`Client::watch_objects`] for protobuf.
fn shared_protobuf_object<K: DecodeObject>(
    message: &[u8],
) -> Result<Arc<K>, crate::object::ObjectError> {
    K::decode_protobuf(message).map(Arc::new)
}

/// [`cache_object`], shared: the decode function of [`Client::watch_objects`] for JSON.
fn shared_cache_object<K: DecodeObject>(
    line: &Bytes,
    v: &mut crate::json_validate::Validator<'_>,
) -> Result<Arc<K>, serde_json::Error> {
    cache_object::<K>(line, v).map(Arc::new)
}

/// [`shared_cache_object`] without `metadata.managedFields`: the object's text is
/// validated in the line pass, then decoded with the member cut out.
fn shared_trimmed_object<K: DecodeObject>(
    _line: &Bytes,
    v: &mut crate::json_validate::Validator<'_>,
) -> Result<Arc<K>, serde_json::Error> {
    let (start, end) = v
        .value()
        .map_err(<serde_json::Error as serde::de::Error>::custom)?;
    let text = v.text().get(start..end).unwrap_or_default();
    crate::managed_fields_trim::decode_well_formed_trimmed::<K>(text)
        .map(Arc::new)
        .map_err(<serde_json::Error as serde::de::Error>::custom)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::config::tests::{TEST_CERT, TEST_KEY};
    use crate::rest::resource::PODS;
    use rustls_pki_types::pem::PemObject as _;

    /// A chunk's items go to `on_item` in order until it fails; its first error is
    /// returned, and the splitter's own error comes before it.
    #[test]
    fn split_chunk_stops_handing_out_items_at_the_first_error() {
        fn secs(n: u64) -> Error {
            Error::Timeout(std::time::Duration::from_secs(n))
        }
        let push = |fail: bool| {
            move |emit: &mut dyn FnMut(&[u8])| {
                for item in [&b"a"[..], b"b", b"c", b"d"] {
                    emit(item);
                }
                if fail {
                    Err(9)
                } else {
                    Ok(())
                }
            }
        };
        let mut seen = Vec::new();
        let mut on_item = |item: &[u8]| {
            seen.push(item.to_vec());
            match item {
                b"b" => Err(secs(1)),
                b"c" => Err(secs(2)),
                _ => Ok(()),
            }
        };
        let got = split_chunk(push(false), &mut on_item, secs);
        assert!(
            matches!(got, Err(Error::Timeout(d)) if d.as_secs() == 1),
            "{got:?}"
        );
        assert_eq!(seen, [b"a".to_vec(), b"b".to_vec()]);
        let got = split_chunk(push(true), &mut |_: &[u8]| Err(secs(1)), secs);
        assert!(
            matches!(got, Err(Error::Timeout(d)) if d.as_secs() == 9),
            "{got:?}"
        );
        assert!(split_chunk(push(false), &mut |_: &[u8]| Ok(()), secs).is_ok());
    }

    #[test]
    fn list_query_strings() {
        assert_eq!(ListParams::default().to_query(), "");
        let q = ListParams::default()
            .labels("app in (a,b),tier!=db")
            .fields("spec.nodeName=n1")
            .limit(2)
            .continue_token("abc=")
            .to_query();
        assert_eq!(
            q,
            "labelSelector=app+in+%28a%2Cb%29%2Ctier%21%3Ddb&fieldSelector=spec.nodeName%3Dn1&limit=2&continue=abc%3D"
        );
        // What the server's parser makes of it.
        let o =
            api::list_options::ListOptions::from_query(&q.replace("continue=abc%3D", "")).unwrap();
        assert_eq!(o.limit, Some(2));
        assert_eq!(o.field_selector.requires_exact("spec.nodeName"), Some("n1"));
        let q = ListParams::default()
            .resource_version("7")
            .resource_version_match(ResourceVersionMatch::Exact)
            .to_query();
        assert_eq!(q, "resourceVersion=7&resourceVersionMatch=Exact");
    }

    #[test]
    fn watch_query_strings() {
        assert_eq!(
            WatchParams::default().to_query(),
            "watch=true&allowWatchBookmarks=true"
        );
        let w = WatchParams::default()
            .resource_version("12")
            .timeout(30)
            .labels("a=b")
            .disable_bookmarks();
        assert_eq!(
            w.to_query(),
            "watch=true&labelSelector=a%3Db&resourceVersion=12&timeoutSeconds=30"
        );
        let w = WatchParams::default().streaming_list();
        let o = api::list_options::ListOptions::from_query(&w.to_query()).unwrap();
        assert!(o.watch && o.allow_watch_bookmarks);
        assert_eq!(o.send_initial_events, Some(true));
        assert_eq!(
            o.resource_version_match,
            Some(ResourceVersionMatch::NotOlderThan)
        );
    }

    #[test]
    fn write_params() {
        assert_eq!(PostParams::default().to_query(), "");
        let p = PostParams {
            dry_run: true,
            field_manager: Some("me".into()),
        };
        assert_eq!(p.to_query(), "dryRun=All&fieldManager=me");
        let mut a = PatchParams::apply("ctl");
        a.force = true;
        assert_eq!(a.to_query(), "fieldManager=ctl&force=true");
        let d = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: None,
                resource_version: Some("5".into()),
            }),
            ..DeleteParams::default()
        };
        let v: serde_json::Value = serde_json::from_slice(&d.body().unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground","preconditions":{"resourceVersion":"5"}})
        );
        assert_eq!(
            PatchType::Strategic.content_type(),
            "application/strategic-merge-patch+json"
        );
    }

    #[test]
    fn raw_lists_are_slices_of_the_body() {
        let body = Bytes::from_static(
            br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9","continue":"tok","remainingItemCount":3},"items":[{"metadata":{"name":"a"}}, {"metadata":{"name":"b\"q"}}]}"#,
        );
        let l = decode_raw_list(&body, "/x").unwrap();
        assert_eq!(l.resource_version, "9");
        assert_eq!(l.continue_token.as_deref(), Some("tok"));
        assert_eq!(l.remaining_item_count, Some(3));
        assert_eq!(l.items.len(), 2);
        assert_eq!(&l.items[1][..], br#"{"metadata":{"name":"b\"q"}}"#);
        let base = body.as_ptr() as usize;
        let p = l.items[0].as_ptr() as usize;
        assert!(p > base && p < base + body.len());

        let empty = decode_raw_list(
            &Bytes::from_static(br#"{"metadata":{"continue":""},"items":null}"#),
            "/x",
        )
        .unwrap();
        assert!(empty.items.is_empty() && empty.continue_token.is_none());
        assert!(matches!(
            decode_raw_list(&Bytes::from_static(b"[1]"), "/x"),
            Err(Error::Decode { .. })
        ));
    }

    #[test]
    fn typed_lists() {
        let body = br#"{"metadata":{"resourceVersion":"3"},"items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}]}"#;
        let l: ObjectList<k8s_openapi::api::core::v1::Pod> = decode_list(body, "/x").unwrap();
        assert_eq!(l.items[0].metadata.name.as_deref(), Some("p"));
        assert_eq!(l.resource_version, "3");
    }

    #[tokio::test]
    async fn clients_build_from_configs() {
        let mut c = Config::new("https://127.0.0.1:1/prefix/").unwrap();
        c.root_certs = rustls_pki_types::CertificateDer::pem_slice_iter(TEST_CERT.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        c.identity = Some(crate::rest::config::ClientIdentity {
            certs: c.root_certs.clone(),
            key: rustls_pki_types::PrivateKeyDer::from_pem_slice(TEST_KEY.as_bytes()).unwrap(),
        });
        c.auth = Auth::Bearer("t".into());
        c.tls_server_name = Some("kubernetes".into());
        let client = Client::new(c.clone()).unwrap();
        assert_eq!(client.inner.base_path, "/prefix");
        assert_eq!(client.inner.origin, "https://127.0.0.1:1");
        assert!(format!("{client:?}").contains("/prefix"));

        c.insecure_skip_tls_verify = true;
        Client::new(c.clone()).unwrap();

        c.auth = Auth::TokenFile("/definitely/not/a/token".into());
        assert!(matches!(Client::new(c), Err(Error::Config(_))));
    }

    #[tokio::test]
    async fn connection_refused_is_a_transport_error() {
        // Bind and drop a listener to find a port nobody listens on.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let client =
            Client::new(Config::new(&format!("http://127.0.0.1:{port}")).unwrap()).unwrap();
        let e = client
            .get::<serde_json::Value>(&PODS, Some("default"), "x")
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Transport { .. }), "{e}");
        assert!(
            e.to_string().contains("/api/v1/namespaces/default/pods/x"),
            "{e}"
        );
        let e = client
            .get::<serde_json::Value>(&PODS, None, "x")
            .await
            .unwrap_err();
        assert!(matches!(e, Error::InvalidRequest(_)), "{e}");
    }

    /// A self-signed server (and client) certificate for `localhost` / `127.0.0.1`.
    const TLS_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIByzCCAXGgAwIBAgIUKEEwjNhnQ7qd2+5SDyII/h8wt9MwCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSbGlzdHdhdGNoLXRscy10ZXN0MCAXDTI2MTEyMjA1NDk0MVoY
DzIxMjYxMDI5MDU0OTQxWjAdMRswGQYDVQQDDBJsaXN0d2F0Y2gtdGxzLXRlc3Qw
WTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAARm4il2jmZDB0qNfKeKglzkGwRUSJG3
77n/4p+o8MnayPSOKN1y1HdD7QTbO3elNrz+xWXYY/4IffrtfzdbE90ao4GMMIGJ
MB0GA1UdDgQWBBSuMKZdbKoJIW8LDmDqLvPhXrjSlTAfBgNVHSMEGDAWgBSuMKZd
bKoJIW8LDmDqLvPhXrjSlTAaBgNVHREEEzARgglsb2NhbGhvc3SHBH8AAAEwDAYD
VR0TAQH/BAIwADAdBgNVHSUEFjAUBggrBgEFBQcDAQYIKwYBBQUHAwIwCgYIKoZI
zj0EAwIDSAAwRQIhAIfrEyNKwwzQcMqyeheNmbghTZxrvAqSt/U8OwZRDtcFAiBU
nM38V1j0zbt9bmjGt2fSHph4iGyKgN92G2xI1w9oZw==
-----END CERTIFICATE-----
";
    /// The key of [`TLS_CERT`].
    const TLS_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgv4tFNV4ddGmh+I5K
1eBC9ksFErUDMMlKGyJDkMJX16WhRANCAARm4il2jmZDB0qNfKeKglzkGwRUSJG3
77n/4p+o8MnayPSOKN1y1HdD7QTbO3elNrz+xWXYY/4IffrtfzdbE90a
-----END PRIVATE KEY-----
";

    /// What the TLS test server saw of one connection.
    #[derive(Debug, Default, Clone)]
    struct Seen {
        offered_alpn: Vec<String>,
        client_cert: bool,
        authorization: Option<String>,
    }

    #[derive(Debug)]
    struct RecordingResolver {
        key: Arc<rustls::sign::CertifiedKey>,
        alpn: Arc<Mutex<Vec<String>>>,
    }

    impl rustls::server::ResolvesServerCert for RecordingResolver {
        fn resolve(
            &self,
            hello: rustls::server::ClientHello<'_>,
        ) -> Option<Arc<rustls::sign::CertifiedKey>> {
            *self.alpn.lock() = hello
                .alpn()
                .map(|it| {
                    it.map(|p| String::from_utf8_lossy(p).into_owned())
                        .collect()
                })
                .unwrap_or_default();
            Some(self.key.clone())
        }
    }

    /// A blocking HTTPS/1.1 server on a thread: answers every request with `{"ok":true}`
    /// and records what it saw; asks for (but does not require) a client certificate.
    fn tls_server() -> (String, Arc<Mutex<Vec<Seen>>>) {
        use std::io::{Read as _, Write as _};
        let certs: Vec<_> = rustls_pki_types::CertificateDer::pem_slice_iter(TLS_CERT.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(TLS_KEY.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let signing = rustls::crypto::ring::sign::any_supported_type(&key).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(certs[0].clone()).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .unwrap();
        let alpn = Arc::new(Mutex::new(Vec::new()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(Arc::new(RecordingResolver {
                key: Arc::new(rustls::sign::CertifiedKey::new(certs, signing)),
                alpn: alpn.clone(),
            }));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for sock in listener.incoming() {
                let Ok(sock) = sock else { return };
                let Ok(conn) = rustls::ServerConnection::new(config.clone()) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(conn, sock);
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                if req.is_empty() {
                    continue; // the handshake failed
                }
                let text = String::from_utf8_lossy(&req).to_string();
                record.lock().push(Seen {
                    offered_alpn: alpn.lock().clone(),
                    client_cert: tls.conn.peer_certificates().is_some_and(|c| !c.is_empty()),
                    authorization: text
                        .lines()
                        .find_map(|l| l.strip_prefix("authorization: "))
                        .map(str::to_string),
                });
                let body = br#"{"ok":true}"#;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(head.as_bytes());
                let _ = tls.write_all(body);
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        (url, seen)
    }

    fn tls_config_for(url: &str) -> Config {
        let mut c = Config::new(url).unwrap();
        c.timeout = Some(Duration::from_secs(10));
        c
    }

    #[tokio::test]
    async fn https_with_ca_token_and_client_certificate() {
        let (url, seen) = tls_server();
        let mut c = tls_config_for(&url);
        c.root_certs = rustls_pki_types::CertificateDer::pem_slice_iter(TLS_CERT.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        c.identity = Some(crate::rest::config::ClientIdentity {
            certs: c.root_certs.clone(),
            key: rustls_pki_types::PrivateKeyDer::from_pem_slice(TLS_KEY.as_bytes()).unwrap(),
        });
        c.auth = Auth::Bearer("tok-1".into());
        let client = Client::new(c).unwrap();
        let (code, body) = client
            .request_bytes(Method::GET, "/version", None)
            .await
            .unwrap();
        assert_eq!(code, 200);
        assert_eq!(&body[..], br#"{"ok":true}"#);
        let s = seen.lock()[0].clone();
        assert_eq!(s.offered_alpn, ["h2", "http/1.1"]);
        assert!(s.client_cert);
        assert_eq!(s.authorization.as_deref(), Some("Bearer tok-1"));
    }

    #[tokio::test]
    async fn https_without_a_ca_fails_verification_unless_insecure() {
        let (url, seen) = tls_server();
        let client = Client::new(tls_config_for(&url)).unwrap();
        let e = client
            .request_bytes(Method::GET, "/version", None)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Transport { .. }), "{e}");
        assert!(e.to_string().contains("certificate"), "{e}");
        assert!(seen.lock().is_empty());

        let mut c = tls_config_for(&url);
        c.insecure_skip_tls_verify = true;
        let client = Client::new(c).unwrap();
        let (code, _) = client
            .request_bytes(Method::GET, "/version", None)
            .await
            .unwrap();
        assert_eq!(code, 200);
        assert!(!seen.lock()[0].client_cert);
    }

    #[tokio::test]
    async fn tls_server_name_overrides_the_host() {
        let (url, _) = tls_server();
        let url = url.replace("127.0.0.1", "localhost");
        let mut c = tls_config_for(&url);
        c.root_certs = rustls_pki_types::CertificateDer::pem_slice_iter(TLS_CERT.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        c.tls_server_name = Some("kubernetes.default".into());
        let e = Client::new(c.clone())
            .unwrap()
            .request_bytes(Method::GET, "/version", None)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("certificate"), "{e}");
        c.tls_server_name = Some("127.0.0.1".into());
        let (code, _) = Client::new(c)
            .unwrap()
            .request_bytes(Method::GET, "/version", None)
            .await
            .unwrap();
        assert_eq!(code, 200);
    }
}
