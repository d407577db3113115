//! The HTTP transport of a [`Client`]: over the network, one connection pool per client,
//! TLS (rustls with ALPN offering `h2` and `http/1.1`, so a real kube-apiserver negotiates
//! HTTP/2 and many watches share one connection; plain HTTP/1.1 for `http://` servers),
//! authentication headers (re-reading a token file when due), and the plumbing every verb
//! uses: send a request, read a bounded error body, read a whole body or hand it out chunk
//! by chunk. A client of a server in its own process calls it instead
//! ([`super::in_process`]).
//!
//! The verbs of the Kubernetes API live in [`super::verbs`].

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

use super::config::{Auth, Config, ConfigError};
use super::error::{error_from_response, Error};
use super::in_process::{InProcessServer, ResponseBody, IN_PROCESS_ORIGIN};

/// How often a token file is re-read.
const TOKEN_FILE_REFRESH: Duration = Duration::from_secs(60);

/// TCP keepalive idle time and HTTP/2 PING interval of the client's connections.
const KEEPALIVE: Duration = Duration::from_secs(30);

/// The `User-Agent` of every request.
const USER_AGENT_VALUE: &str = concat!("listwatch-client/", env!("CARGO_PKG_VERSION"));

/// How many times a request shed with 429 and `Retry-After` is sent again (client-go's
/// default).
pub const MAX_RETRIES: u32 = 10;

/// The longest a server's `Retry-After` is honoured for, per retry.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

type HttpClient = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Where a client's requests go.
#[derive(Clone)]
enum Transport {
    /// Over the network, through a connection pool (boxed: a pool's handle is ten times
    /// the size of the other variant).
    Network(Box<HttpClient>),
    /// Into an API server in this process.
    InProcess(InProcessServer),
}

/// The front-proxy headers naming the user and groups of a request to an in-process
/// server (kube-apiserver's `--requestheader-username-headers` and
/// `--requestheader-group-headers` defaults).
pub const REMOTE_USER_HEADER: &str = "x-remote-user";
/// See [`REMOTE_USER_HEADER`].
pub const REMOTE_GROUP_HEADER: &str = "x-remote-group";

/// A connection to one API server. Cheap to clone (clones share the connection pool);
/// `Send + Sync`.
///
/// Every verb takes the resource ([`ApiResource`](super::ApiResource)) and namespace; for a
/// typed handle that fixes both, see [`Api`](super::Api).
///
/// ```no_run
/// # async fn demo() -> Result<(), client::rest::Error> {
/// use client::rest::{resource::CONFIGMAPS, Client, Config, ListParams};
///
/// // The kubeconfig's current context (or the in-cluster service account).
/// let client = Client::new(Config::infer()?)?;
/// let page = client
///     .list::<serde_json::Value>(&CONFIGMAPS, Some("default"), &ListParams::default().limit(10))
///     .await?;
/// println!("{} config maps at version {}", page.items.len(), page.resource_version);
/// if let Some(token) = page.continue_token {
///     let _next = ListParams::default().limit(10).continue_token(token);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    transport: Transport,
    /// `scheme://authority`, no trailing slash.
    origin: String,
    /// The server URL's path prefix, no trailing slash (usually empty).
    base_path: String,
    auth: AuthState,
    default_namespace: String,
    pub(super) timeout: Option<Duration>,
    /// For an in-process client, its server's number: watches share what they decode with
    /// the other clients of that server ([`crate::object_interner`]).
    pub(super) shared_objects: Option<u64>,
}

enum AuthState {
    None,
    Header(HeaderValue),
    TokenFile {
        path: PathBuf,
        cached: Mutex<(HeaderValue, Instant)>,
    },
    Shared(crate::rest::SharedToken),
    /// The identity an in-process client's requests run as.
    FrontProxied {
        user: HeaderValue,
        groups: Vec<HeaderValue>,
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
        let http = network_client(connector);

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
            Auth::Shared(token) => {
                bearer(&token.get())?;
                AuthState::Shared(token.clone())
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
                transport: Transport::Network(Box::new(http)),
                origin: format!("{scheme}://{authority}"),
                base_path: config.server.path().trim_end_matches('/').to_string(),
                auth,
                default_namespace: config.default_namespace.clone(),
                timeout: config.timeout,
                shared_objects: None,
            }),
        })
    }

    /// A client of `server`, an API server in this process: every request is a call into
    /// it (no connection, no HTTP framing), and no request carries a credential. Its
    /// requests run as nobody (the server refuses them) until an identity is given with
    /// [`as_front_proxied`](Self::as_front_proxied). Namespace `default`, the default
    /// request timeout.
    ///
    /// Its watches of typed objects without managed fields share the objects they decode
    /// with the other clients of `server` and of its clones ([`crate::object_interner`]).
    pub fn in_process(server: InProcessServer) -> Client {
        let number = server.server();
        Client {
            inner: Arc::new(Inner {
                transport: Transport::InProcess(server),
                origin: IN_PROCESS_ORIGIN.to_string(),
                base_path: String::new(),
                auth: AuthState::None,
                default_namespace: "default".to_string(),
                timeout: Some(super::config::DEFAULT_REQUEST_TIMEOUT),
                shared_objects: Some(number),
            }),
        }
    }

    /// A client of this in-process client's server whose requests run as `user` in
    /// `groups`, named in the front-proxy headers ([`REMOTE_USER_HEADER`],
    /// [`REMOTE_GROUP_HEADER`]) that the in-process server trusts (e.g. one per simulated
    /// node).
    ///
    /// # Errors
    /// [`Error::Config`] if this client does not connect in-process (over the network the
    /// headers would prove nothing), or a name is not representable in an HTTP header.
    pub fn as_front_proxied(&self, user: &str, groups: &[String]) -> Result<Client, Error> {
        let invalid = |detail: &str| ConfigError::InvalidCredential {
            what: "front-proxy identity",
            detail: detail.into(),
        };
        if !matches!(self.inner.transport, Transport::InProcess(_)) {
            return Err(invalid("sent only to an in-process server").into());
        }
        let header = |v: &str| {
            HeaderValue::from_str(v)
                .ok()
                .filter(|_| !v.is_empty())
                .ok_or_else(|| {
                    invalid("a user or group name that is empty or not a valid header value")
                })
        };
        let auth = AuthState::FrontProxied {
            user: header(user)?,
            groups: groups.iter().map(|g| header(g)).collect::<Result<_, _>>()?,
        };
        Ok(Client {
            inner: Arc::new(Inner {
                transport: self.inner.transport.clone(),
                origin: self.inner.origin.clone(),
                base_path: self.inner.base_path.clone(),
                auth,
                default_namespace: self.inner.default_namespace.clone(),
                timeout: self.inner.timeout,
                shared_objects: self.inner.shared_objects,
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
            // A token its owner could not have set to an unsendable value was checked at
            // `Client::new`; a later bad one sends no header (and the server answers 401).
            AuthState::Shared(token) => bearer(&token.get()).ok(),
            AuthState::FrontProxied { .. } => None,
        }
    }

    /// Sends one request and returns the response head and streaming body.
    /// `path_and_query` starts with `/` and is appended to the server's base path.
    ///
    /// A 429 carrying `Retry-After` (the server shed the request before running it) is
    /// sent again after that many seconds (at most [`MAX_RETRY_AFTER`] each), up to
    /// [`MAX_RETRIES`] times, as client-go does; the last answer is returned as it is.
    pub(super) async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<(Bytes, &'static str)>,
        accept: &'static str,
    ) -> Result<http::Response<ResponseBody>, Error> {
        let mut tries = 0;
        loop {
            let resp = self
                .send_once(method.clone(), path_and_query, body.clone(), accept)
                .await?;
            let wait = (resp.status() == StatusCode::TOO_MANY_REQUESTS)
                .then(|| {
                    resp.headers()
                        .get(RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                })
                .flatten();
            match wait {
                Some(secs) if tries < MAX_RETRIES => {
                    tries += 1;
                    drop(resp);
                    let d = Duration::from_secs(secs).min(MAX_RETRY_AFTER);
                    tracing::debug!(%method, path_and_query, ?d, "429: retrying after the server's hint");
                    tokio::time::sleep(d).await;
                }
                _ => return Ok(resp),
            }
        }
    }

    async fn send_once(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<(Bytes, &'static str)>,
        accept: &'static str,
    ) -> Result<http::Response<ResponseBody>, Error> {
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
        if let AuthState::FrontProxied { user, groups } = &self.inner.auth {
            req = req.header(REMOTE_USER_HEADER, user.clone());
            for g in groups {
                req = req.header(REMOTE_GROUP_HEADER, g.clone());
            }
        }
        let req = match body {
            Some((bytes, content_type)) => req
                .header(CONTENT_TYPE, content_type)
                .body(Full::new(bytes)),
            None => req.body(Full::new(Bytes::new())),
        }
        .map_err(|e| Error::InvalidRequest(format!("{context}: {e}")))?;
        match &self.inner.transport {
            Transport::Network(http) => http
                .request(req)
                .await
                .map(|resp| resp.map(ResponseBody::Network))
                .map_err(|e| Error::transport(context, e)),
            Transport::InProcess(server) => Ok(server.call(req).await.map(ResponseBody::InProcess)),
        }
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
    pub(super) async fn request_accepting(
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

    /// Sends `GET path` accepting `accept`, and hands each chunk of a successful response's
    /// body to `on_chunk` in order, all within the client's timeout. An error from
    /// `on_chunk` ends the request with that error.
    pub(super) async fn get_chunks(
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
}

/// The connection pool of a client over the network.
fn network_client(connector: HttpsConnector<HttpConnector>) -> HttpClient {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .timer(hyper_util::rt::TokioTimer::new())
        .http2_keep_alive_interval(KEEPALIVE)
        .http2_keep_alive_timeout(Duration::from_secs(15))
        .http2_keep_alive_while_idle(true)
        .build(connector)
}

/// How much of an error response's body is read: a `Status` is far smaller, and the rest of a
/// non-`Status` body is not used beyond an excerpt.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How long reading an error response's body may take.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The error an unsuccessful response stands for: its `Status`, or its code and an excerpt.
/// At most [`MAX_ERROR_BODY`] bytes are read, for at most [`ERROR_BODY_TIMEOUT`], so a
/// server that answers an error with an endless or stalled body cannot hold the caller.
pub(super) async fn error_of(resp: http::Response<ResponseBody>, context: &str) -> Error {
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
pub(super) fn not_protobuf(context: &str) -> Error {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::config::tests::{TEST_CERT, TEST_KEY};
    use crate::rest::resource::PODS;
    use rustls_pki_types::pem::PemObject as _;

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
