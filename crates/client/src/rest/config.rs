//! What a client needs to reach an API server, loaded from a kubeconfig or from the
//! in-cluster service account.
//!
//! * [`Config::from_kubeconfig_file`] reads one kubeconfig; [`Config::from_env`] reads the
//!   files listed in `KUBECONFIG` (merged as kubectl merges them: the first file that
//!   defines a cluster, user or context name wins, and the first non-empty
//!   `current-context` wins), or `~/.kube/config`.
//! * [`Config::in_cluster`] reads `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` and the
//!   service account files under `/var/run/secrets/kubernetes.io/serviceaccount`.
//! * [`Config::infer`] picks in-cluster when those variables are set, else the kubeconfig.
//!
//! Certificates and keys are read and parsed while loading, so a bad file or field is
//! reported by [`ConfigError`] naming it, not later at connect time. Relative file paths in
//! a kubeconfig are resolved against the directory of the kubeconfig that names them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

/// The directory of the in-cluster service account files.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How long a connection attempt may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a request other than a watch may take by default, from sending it to the end of
/// its body: kube-apiserver's own limit on such requests (`--request-timeout`, 60 s), so a
/// request the server would still answer is never given up, and one caught in a connection
/// that stalled without breaking (a partition TCP does not notice) fails instead of hanging.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a configuration could not be loaded. Every variant names the file or field at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A kubeconfig (or service account file) could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A kubeconfig is not valid YAML of the expected shape.
    #[error("cannot parse kubeconfig {}: {source}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The YAML error.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// No kubeconfig file was found.
    #[error("no kubeconfig found (tried {tried})")]
    NoKubeconfig {
        /// The paths tried, joined for display.
        tried: String,
    },
    /// Neither a context was requested nor does any kubeconfig set `current-context`.
    #[error("no context requested and current-context is not set")]
    NoCurrentContext,
    /// The requested (or current) context is not defined.
    #[error("context {0:?} is not defined in the kubeconfig")]
    ContextNotFound(String),
    /// The context names a cluster that is not defined.
    #[error("cluster {cluster:?} (named by context {context:?}) is not defined")]
    ClusterNotFound {
        /// The cluster name.
        cluster: String,
        /// The context naming it.
        context: String,
    },
    /// The context names a user that is not defined.
    #[error("user {user:?} (named by context {context:?}) is not defined")]
    UserNotFound {
        /// The user name.
        user: String,
        /// The context naming it.
        context: String,
    },
    /// A required field is missing or empty.
    #[error("{origin}: field {field:?} is missing")]
    MissingField {
        /// The field, e.g. `server`.
        field: &'static str,
        /// Where it was expected, e.g. `cluster "dev" in /home/u/.kube/config`.
        origin: String,
    },
    /// A `*-data` field is not valid base64.
    #[error("{origin}: field {field:?} is not valid base64: {source}")]
    InvalidBase64 {
        /// The field.
        field: &'static str,
        /// Where it was found.
        origin: String,
        /// The decoding error.
        #[source]
        source: base64::DecodeError,
    },
    /// A file named by a field could not be read.
    #[error("{origin}: cannot read {field:?} file {}: {source}", .path.display())]
    ReadField {
        /// The field, e.g. `certificate-authority`.
        field: &'static str,
        /// Where the field was found.
        origin: String,
        /// The (resolved) file path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A certificate or key field holds no usable PEM item.
    #[error("{origin}: field {field:?} holds no valid PEM {what}: {detail}")]
    InvalidPem {
        /// The field.
        field: &'static str,
        /// Where it was found.
        origin: String,
        /// What was expected: `certificate` or `private key`.
        what: &'static str,
        /// Why it was refused.
        detail: String,
    },
    /// The server URL is not an absolute `http://` or `https://` URL.
    #[error("{origin}: invalid server URL {server:?}: {detail}")]
    InvalidServer {
        /// The URL as written.
        server: String,
        /// Where it was found.
        origin: String,
        /// Why it was refused.
        detail: String,
    },
    /// The user authenticates in a way this client does not implement (`exec`,
    /// `auth-provider`).
    #[error("user {user:?} uses {what}, which this client does not support")]
    UnsupportedAuth {
        /// The user name.
        user: String,
        /// The mechanism.
        what: &'static str,
    },
    /// A credential cannot be sent (e.g. a token with characters not allowed in an HTTP
    /// header).
    #[error("invalid {what}: {detail}")]
    InvalidCredential {
        /// Which credential: `bearer token`, `token file`, `basic authentication`.
        what: &'static str,
        /// Why it was refused.
        detail: String,
    },
    /// An environment variable needed for in-cluster configuration is not set.
    #[error("environment variable {0} is not set")]
    MissingEnv(&'static str),
    /// Neither in-cluster nor kubeconfig configuration could be loaded.
    #[error("no configuration found: in-cluster: {in_cluster}; kubeconfig: {kubeconfig}")]
    NotFound {
        /// Why in-cluster configuration failed.
        in_cluster: Box<ConfigError>,
        /// Why kubeconfig configuration failed.
        kubeconfig: Box<ConfigError>,
    },
    /// The TLS configuration was refused (e.g. a key that does not match its certificate,
    /// or a key type the crypto provider does not support).
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// How requests authenticate.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Auth {
    /// No `Authorization` header (client certificates may still apply).
    #[default]
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// A bearer token read from a file and re-read periodically (tokens of service
    /// accounts rotate).
    TokenFile(PathBuf),
    /// A bearer token its owner replaces while clients use it (a token requested from the
    /// TokenRequest API and renewed before it expires): every request sends the current one.
    Shared(SharedToken),
    /// `Authorization: Basic` with a user name and password.
    Basic {
        /// The user name.
        username: String,
        /// The password.
        password: String,
    },
}

impl fmt::Debug for Auth {
    /// Never prints secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::TokenFile(p) => f.debug_tuple("TokenFile").field(p).finish(),
            Auth::Shared(_) => f.write_str("Shared(<redacted>)"),
            Auth::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .finish_non_exhaustive(),
        }
    }
}

/// A bearer token shared between its owner, who replaces it, and the clients that send it.
/// Clones share the token; two `SharedToken`s are equal when they are the same one.
#[derive(Clone)]
pub struct SharedToken(std::sync::Arc<parking_lot::RwLock<String>>);

impl SharedToken {
    /// A shared token holding `token`.
    pub fn new(token: impl Into<String>) -> SharedToken {
        SharedToken(std::sync::Arc::new(parking_lot::RwLock::new(token.into())))
    }

    /// Replaces the token; requests sent from now on carry the new one.
    pub fn set(&self, token: impl Into<String>) {
        *self.0.write() = token.into();
    }

    /// The current token.
    pub fn get(&self) -> String {
        self.0.read().clone()
    }

    /// Whether some client (or owner) other than this handle still holds the token.
    pub fn is_shared(&self) -> bool {
        std::sync::Arc::strong_count(&self.0) > 1
    }
}

impl PartialEq for SharedToken {
    fn eq(&self, other: &SharedToken) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedToken {}

/// A client certificate chain and its private key.
pub struct ClientIdentity {
    /// The certificate chain, leaf first.
    pub certs: Vec<CertificateDer<'static>>,
    /// The private key of the leaf.
    pub key: PrivateKeyDer<'static>,
}

impl Clone for ClientIdentity {
    fn clone(&self) -> Self {
        ClientIdentity {
            certs: self.certs.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl fmt::Debug for ClientIdentity {
    /// Never prints the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("certs", &self.certs.len())
            .finish_non_exhaustive()
    }
}

/// Everything a [`Client`](super::Client) needs to reach one API server.
#[derive(Clone, Debug)]
pub struct Config {
    /// The server's base URL, e.g. `https://10.0.0.1:6443` or `http://127.0.0.1:8080`. A path
    /// prefix (for servers behind a proxy) is kept and prepended to every request path.
    pub server: http::Uri,
    /// Trusted CA certificates for `https://` servers. With none given and
    /// `insecure_skip_tls_verify` false, every TLS handshake fails verification: this client
    /// does not read the system's roots.
    pub root_certs: Vec<CertificateDer<'static>>,
    /// A client certificate to present, if any.
    pub identity: Option<ClientIdentity>,
    /// How requests authenticate.
    pub auth: Auth,
    /// Accept any server certificate (testing only).
    pub insecure_skip_tls_verify: bool,
    /// The name to verify the server certificate against, when it differs from the URL's
    /// host (`tls-server-name`).
    pub tls_server_name: Option<String>,
    /// The namespace of the selected context (or the service account), `default` if unset.
    pub default_namespace: String,
    /// Upper bound on establishing a TCP connection; `None` waits as long as the OS does.
    pub connect_timeout: Option<Duration>,
    /// Upper bound on a whole request other than a watch (send, headers, body: a streamed
    /// list included); a watch is bounded only while it waits for its response headers.
    /// [`DEFAULT_REQUEST_TIMEOUT`] unless set; `None` means no limit.
    pub timeout: Option<Duration>,
}

impl Config {
    /// A configuration for `server` with no TLS material and no credentials, namespace
    /// `default`, the default connect and request timeouts.
    ///
    /// # Errors
    /// [`ConfigError::InvalidServer`] unless `server` is an absolute `http(s)://` URL.
    pub fn new(server: &str) -> Result<Config, ConfigError> {
        Ok(Config {
            server: parse_server(server, "the given server")?,
            root_certs: Vec::new(),
            identity: None,
            auth: Auth::None,
            insecure_skip_tls_verify: false,
            tls_server_name: None,
            default_namespace: "default".to_string(),
            connect_timeout: Some(DEFAULT_CONNECT_TIMEOUT),
            timeout: Some(DEFAULT_REQUEST_TIMEOUT),
        })
    }

    /// Loads the given `context` (or the `current-context`) of one kubeconfig file.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file or field that is missing or wrong.
    pub fn from_kubeconfig_file(
        path: impl AsRef<Path>,
        context: Option<&str>,
    ) -> Result<Config, ConfigError> {
        Kubeconfig::read(path.as_ref())?.to_config(context)
    }

    /// Loads the current context of the kubeconfig named by the environment: the files
    /// listed in `KUBECONFIG` (separated by `:`, or `;` on Windows; missing files are
    /// skipped, at least one must exist), else `$HOME/.kube/config`.
    ///
    /// # Errors
    /// [`ConfigError::NoKubeconfig`] if no file exists, else as
    /// [`from_kubeconfig_file`](Self::from_kubeconfig_file).
    pub fn from_env() -> Result<Config, ConfigError> {
        let home = std::env::var_os("HOME")
            .or_else(|| std::env::var_os("USERPROFILE"))
            .map(PathBuf::from);
        Kubeconfig::from_env_values(std::env::var_os("KUBECONFIG").as_deref(), home.as_deref())?
            .to_config(None)
    }

    /// The in-cluster configuration: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`,
    /// the service account's CA, token (re-read as it rotates) and namespace.
    ///
    /// # Errors
    /// [`ConfigError::MissingEnv`] if a variable is unset, else as
    /// [`in_cluster_from`](Self::in_cluster_from).
    pub fn in_cluster() -> Result<Config, ConfigError> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST")
            .map_err(|_| ConfigError::MissingEnv("KUBERNETES_SERVICE_HOST"))?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT")
            .map_err(|_| ConfigError::MissingEnv("KUBERNETES_SERVICE_PORT"))?;
        Config::in_cluster_from(&host, &port, Path::new(SERVICE_ACCOUNT_DIR))
    }

    /// The in-cluster configuration with explicit host, port and service account directory
    /// (which must hold `token` and `ca.crt`, and may hold `namespace`).
    ///
    /// # Errors
    /// [`ConfigError::ReadField`] if `token` or `ca.crt` cannot be read,
    /// [`ConfigError::InvalidPem`] if `ca.crt` holds no certificate,
    /// [`ConfigError::InvalidServer`] for a bad host or port.
    pub fn in_cluster_from(host: &str, port: &str, dir: &Path) -> Result<Config, ConfigError> {
        let origin = format!("service account in {}", dir.display());
        let host = host.trim();
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let server = parse_server(&format!("https://{host}:{}", port.trim()), &origin)?;
        let token_path = dir.join("token");
        std::fs::read(&token_path).map_err(|source| ConfigError::ReadField {
            field: "token",
            origin: origin.clone(),
            path: token_path.clone(),
            source,
        })?;
        let ca_path = dir.join("ca.crt");
        let ca = std::fs::read(&ca_path).map_err(|source| ConfigError::ReadField {
            field: "ca.crt",
            origin: origin.clone(),
            path: ca_path,
            source,
        })?;
        let root_certs = parse_certs(&ca, "ca.crt", &origin)?;
        let namespace = std::fs::read_to_string(dir.join("namespace"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".to_string());
        Ok(Config {
            server,
            root_certs,
            identity: None,
            auth: Auth::TokenFile(token_path),
            insecure_skip_tls_verify: false,
            tls_server_name: None,
            default_namespace: namespace,
            connect_timeout: Some(DEFAULT_CONNECT_TIMEOUT),
            timeout: Some(DEFAULT_REQUEST_TIMEOUT),
        })
    }

    /// In-cluster when `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` are set (and
    /// the service account files load), else the kubeconfig of [`from_env`](Self::from_env).
    ///
    /// # Errors
    /// [`ConfigError::NotFound`] with both reasons when neither loads; when the variables
    /// are unset, the kubeconfig's error alone.
    pub fn infer() -> Result<Config, ConfigError> {
        let in_env = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
            && std::env::var_os("KUBERNETES_SERVICE_PORT").is_some();
        if !in_env {
            return Config::from_env();
        }
        match Config::in_cluster() {
            Ok(c) => Ok(c),
            Err(in_cluster) => match Config::from_env() {
                Ok(c) => Ok(c),
                Err(kubeconfig) => Err(ConfigError::NotFound {
                    in_cluster: Box::new(in_cluster),
                    kubeconfig: Box::new(kubeconfig),
                }),
            },
        }
    }
}

/// Parses and checks a server URL.
fn parse_server(server: &str, origin: &str) -> Result<http::Uri, ConfigError> {
    let bad = |detail: String| ConfigError::InvalidServer {
        server: server.to_string(),
        origin: origin.to_string(),
        detail,
    };
    let uri: http::Uri = server.trim().parse().map_err(|e| bad(format!("{e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => return Err(bad(format!("unsupported scheme {other:?}"))),
        None => return Err(bad("the URL has no scheme (http:// or https://)".into())),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("the URL has no host".into()));
    }
    if uri.query().is_some() {
        return Err(bad("the URL must not have a query".into()));
    }
    Ok(uri)
}

/// All certificates of a PEM bundle; at least one.
fn parse_certs(
    pem: &[u8],
    field: &'static str,
    origin: &str,
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let bad = |detail: String| ConfigError::InvalidPem {
        field,
        origin: origin.to_string(),
        what: "certificate",
        detail,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no CERTIFICATE section found".into()));
    }
    Ok(certs)
}

/// The first private key (PKCS#1, PKCS#8 or SEC1) of a PEM document.
fn parse_key(
    pem: &[u8],
    field: &'static str,
    origin: &str,
) -> Result<PrivateKeyDer<'static>, ConfigError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| ConfigError::InvalidPem {
        field,
        origin: origin.to_string(),
        what: "private key",
        detail: e.to_string(),
    })
}

/// A kubeconfig document (or several merged), with every file path already resolved
/// against the directory of the file that named it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Kubeconfig {
    /// Clusters by name.
    pub clusters: BTreeMap<String, NamedEntry<Cluster>>,
    /// Users (`AuthInfo`s) by name.
    pub users: BTreeMap<String, NamedEntry<User>>,
    /// Contexts by name.
    pub contexts: BTreeMap<String, NamedEntry<Context>>,
    /// The `current-context`, if any file set one.
    pub current_context: Option<String>,
}

/// One cluster, user or context together with the file that defined it.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedEntry<T> {
    /// The entry.
    pub value: T,
    /// The kubeconfig file it came from (for error messages).
    pub file: PathBuf,
}

/// A `clusters[].cluster` entry.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Cluster {
    /// `server`.
    #[serde(default)]
    pub server: Option<String>,
    /// `certificate-authority`: a PEM file.
    #[serde(default)]
    pub certificate_authority: Option<PathBuf>,
    /// `certificate-authority-data`: base64 of PEM; wins over the file.
    #[serde(default)]
    pub certificate_authority_data: Option<String>,
    /// `insecure-skip-tls-verify`.
    #[serde(default)]
    pub insecure_skip_tls_verify: Option<bool>,
    /// `tls-server-name`.
    #[serde(default)]
    pub tls_server_name: Option<String>,
}

/// A `users[].user` entry (client-go's `AuthInfo`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct User {
    /// `client-certificate`: a PEM file.
    #[serde(default)]
    pub client_certificate: Option<PathBuf>,
    /// `client-certificate-data`: base64 of PEM; wins over the file.
    #[serde(default)]
    pub client_certificate_data: Option<String>,
    /// `client-key`: a PEM file.
    #[serde(default)]
    pub client_key: Option<PathBuf>,
    /// `client-key-data`: base64 of PEM; wins over the file.
    #[serde(default)]
    pub client_key_data: Option<String>,
    /// `token`: a bearer token.
    #[serde(default)]
    pub token: Option<String>,
    /// `tokenFile`: a file holding a bearer token; wins over `token`.
    #[serde(default, rename = "tokenFile")]
    pub token_file: Option<PathBuf>,
    /// `username` for basic authentication.
    #[serde(default)]
    pub username: Option<String>,
    /// `password` for basic authentication.
    #[serde(default)]
    pub password: Option<String>,
    /// Whether an `exec` plugin is configured (unsupported).
    #[serde(default, deserialize_with = "present")]
    pub exec: bool,
    /// Whether an `auth-provider` is configured (unsupported).
    #[serde(default, deserialize_with = "present")]
    pub auth_provider: bool,
}

/// A `contexts[].context` entry.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Context {
    /// `cluster`.
    #[serde(default)]
    pub cluster: String,
    /// `user`.
    #[serde(default)]
    pub user: String,
    /// `namespace`.
    #[serde(default)]
    pub namespace: Option<String>,
}

/// True when the field is present and not null.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let v = serde_yaml_ng::Value::deserialize(d)?;
    Ok(!v.is_null())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct RawKubeconfig {
    #[serde(default)]
    clusters: Option<Vec<NamedCluster>>,
    #[serde(default)]
    users: Option<Vec<NamedUser>>,
    #[serde(default)]
    contexts: Option<Vec<NamedContext>>,
    #[serde(default)]
    current_context: Option<String>,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: String,
    #[serde(default)]
    cluster: Option<Cluster>,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: Option<User>,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    #[serde(default)]
    context: Option<Context>,
}

/// Resolves a possibly relative path against the kubeconfig's directory.
fn resolve(base: &Path, p: PathBuf) -> PathBuf {
    if p.as_os_str().is_empty() || p.is_absolute() {
        p
    } else {
        base.join(p)
    }
}

impl Kubeconfig {
    /// Parses one kubeconfig document; relative paths are resolved against `base_dir`, and
    /// `file` is remembered for error messages.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] if the YAML does not have the kubeconfig shape.
    pub fn from_yaml(yaml: &str, file: &Path, base_dir: &Path) -> Result<Kubeconfig, ConfigError> {
        let raw: Option<RawKubeconfig> =
            serde_yaml_ng::from_str(yaml).map_err(|source| ConfigError::Parse {
                path: file.to_path_buf(),
                source,
            })?;
        let raw = raw.unwrap_or_default();
        let mut kc = Kubeconfig {
            current_context: raw.current_context.filter(|c| !c.is_empty()),
            ..Kubeconfig::default()
        };
        for c in raw.clusters.unwrap_or_default() {
            let mut v = c.cluster.unwrap_or_default();
            v.certificate_authority = v.certificate_authority.map(|p| resolve(base_dir, p));
            kc.clusters.entry(c.name).or_insert(NamedEntry {
                value: v,
                file: file.to_path_buf(),
            });
        }
        for u in raw.users.unwrap_or_default() {
            let mut v = u.user.unwrap_or_default();
            v.client_certificate = v.client_certificate.map(|p| resolve(base_dir, p));
            v.client_key = v.client_key.map(|p| resolve(base_dir, p));
            v.token_file = v.token_file.map(|p| resolve(base_dir, p));
            kc.users.entry(u.name).or_insert(NamedEntry {
                value: v,
                file: file.to_path_buf(),
            });
        }
        for c in raw.contexts.unwrap_or_default() {
            kc.contexts.entry(c.name).or_insert(NamedEntry {
                value: c.context.unwrap_or_default(),
                file: file.to_path_buf(),
            });
        }
        Ok(kc)
    }

    /// Reads and parses one kubeconfig file.
    ///
    /// # Errors
    /// [`ConfigError::Read`] or [`ConfigError::Parse`].
    pub fn read(path: &Path) -> Result<Kubeconfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Kubeconfig::from_yaml(&text, path, base)
    }

    /// Merges `other` into `self` the way kubectl merges the files of `KUBECONFIG`: entries
    /// already present keep their value, and `current-context` is kept if already set.
    pub fn merge(&mut self, other: Kubeconfig) {
        for (k, v) in other.clusters {
            self.clusters.entry(k).or_insert(v);
        }
        for (k, v) in other.users {
            self.users.entry(k).or_insert(v);
        }
        for (k, v) in other.contexts {
            self.contexts.entry(k).or_insert(v);
        }
        if self.current_context.is_none() {
            self.current_context = other.current_context;
        }
    }

    /// Reads the given files in order and merges them ([`merge`](Self::merge)). Files that
    /// do not exist are skipped; other read errors are reported.
    ///
    /// # Errors
    /// [`ConfigError::NoKubeconfig`] if none of the files exists, or the first read or
    /// parse error.
    pub fn read_merged(paths: &[PathBuf]) -> Result<Kubeconfig, ConfigError> {
        let mut merged: Option<Kubeconfig> = None;
        for p in paths {
            match Kubeconfig::read(p) {
                Ok(kc) => match merged.as_mut() {
                    Some(m) => m.merge(kc),
                    None => merged = Some(kc),
                },
                Err(ConfigError::Read { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        merged.ok_or_else(|| ConfigError::NoKubeconfig {
            tried: paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// The kubeconfig named by a `KUBECONFIG` value (a path list; empty entries are
    /// ignored) or, when that is unset or empty, `<home>/.kube/config`.
    ///
    /// # Errors
    /// As [`read_merged`](Self::read_merged); [`ConfigError::NoKubeconfig`] also when
    /// neither a list nor a home directory is given.
    pub fn from_env_values(
        kubeconfig: Option<&std::ffi::OsStr>,
        home: Option<&Path>,
    ) -> Result<Kubeconfig, ConfigError> {
        let listed: Vec<PathBuf> = kubeconfig
            .map(|v| {
                std::env::split_paths(v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if !listed.is_empty() {
            return Kubeconfig::read_merged(&listed);
        }
        match home {
            Some(h) => Kubeconfig::read_merged(&[h.join(".kube").join("config")]),
            None => Err(ConfigError::NoKubeconfig {
                tried: "KUBECONFIG (unset) and ~/.kube/config (no home directory)".into(),
            }),
        }
    }

    /// Builds the client configuration of `context`, or of `current-context` when `None`:
    /// reads and parses the certificates, keys and token files it names.
    ///
    /// # Errors
    /// [`ConfigError`] naming the missing context, cluster or user, the missing `server`,
    /// or the certificate, key or token field that cannot be read or parsed.
    pub fn to_config(&self, context: Option<&str>) -> Result<Config, ConfigError> {
        let ctx_name = match context.or(self.current_context.as_deref()) {
            Some(c) if !c.is_empty() => c,
            _ => return Err(ConfigError::NoCurrentContext),
        };
        let ctx = &self
            .contexts
            .get(ctx_name)
            .ok_or_else(|| ConfigError::ContextNotFound(ctx_name.to_string()))?
            .value;
        let cluster =
            self.clusters
                .get(&ctx.cluster)
                .ok_or_else(|| ConfigError::ClusterNotFound {
                    cluster: ctx.cluster.clone(),
                    context: ctx_name.to_string(),
                })?;
        let cluster_origin = format!("cluster {:?} in {}", ctx.cluster, cluster.file.display());
        let c = &cluster.value;
        let server = c
            .server
            .as_deref()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| ConfigError::MissingField {
                field: "server",
                origin: cluster_origin.clone(),
            })?;
        let server = parse_server(server, &cluster_origin)?;
        let ca = load_pem(
            c.certificate_authority_data.as_deref(),
            "certificate-authority-data",
            c.certificate_authority.as_deref(),
            "certificate-authority",
            &cluster_origin,
        )?;
        let root_certs = match ca {
            Some((pem, field)) => parse_certs(&pem, field, &cluster_origin)?,
            None => Vec::new(),
        };

        let mut config = Config {
            server,
            root_certs,
            identity: None,
            auth: Auth::None,
            insecure_skip_tls_verify: c.insecure_skip_tls_verify.unwrap_or(false),
            tls_server_name: c.tls_server_name.clone().filter(|s| !s.is_empty()),
            default_namespace: ctx
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".to_string()),
            connect_timeout: Some(DEFAULT_CONNECT_TIMEOUT),
            timeout: Some(DEFAULT_REQUEST_TIMEOUT),
        };

        // A context may name no user at all (kubectl then sends no credentials).
        if ctx.user.is_empty() {
            return Ok(config);
        }
        let user = self
            .users
            .get(&ctx.user)
            .ok_or_else(|| ConfigError::UserNotFound {
                user: ctx.user.clone(),
                context: ctx_name.to_string(),
            })?;
        let user_origin = format!("user {:?} in {}", ctx.user, user.file.display());
        let u = &user.value;
        let cert = load_pem(
            u.client_certificate_data.as_deref(),
            "client-certificate-data",
            u.client_certificate.as_deref(),
            "client-certificate",
            &user_origin,
        )?;
        let key = load_pem(
            u.client_key_data.as_deref(),
            "client-key-data",
            u.client_key.as_deref(),
            "client-key",
            &user_origin,
        )?;
        config.identity = match (cert, key) {
            (Some((cert, cert_field)), Some((key, key_field))) => Some(ClientIdentity {
                certs: parse_certs(&cert, cert_field, &user_origin)?,
                key: parse_key(&key, key_field, &user_origin)?,
            }),
            (Some(_), None) => {
                return Err(ConfigError::MissingField {
                    field: "client-key",
                    origin: user_origin,
                })
            }
            (None, Some(_)) => {
                return Err(ConfigError::MissingField {
                    field: "client-certificate",
                    origin: user_origin,
                })
            }
            (None, None) => None,
        };
        config.auth = if let Some(path) = u.token_file.clone().filter(|p| !p.as_os_str().is_empty())
        {
            std::fs::metadata(&path).map_err(|source| ConfigError::ReadField {
                field: "tokenFile",
                origin: user_origin.clone(),
                path: path.clone(),
                source,
            })?;
            Auth::TokenFile(path)
        } else if let Some(t) = u.token.clone().filter(|t| !t.is_empty()) {
            Auth::Bearer(t)
        } else if let Some(username) = u.username.clone().filter(|s| !s.is_empty()) {
            Auth::Basic {
                username,
                password: u.password.clone().unwrap_or_default(),
            }
        } else if u.exec {
            return Err(ConfigError::UnsupportedAuth {
                user: ctx.user.clone(),
                what: "an exec credential plugin",
            });
        } else if u.auth_provider && config.identity.is_none() {
            return Err(ConfigError::UnsupportedAuth {
                user: ctx.user.clone(),
                what: "an auth-provider",
            });
        } else {
            Auth::None
        };
        Ok(config)
    }
}

/// The PEM bytes of a `*-data` field (base64, preferred) or of the file named by its
/// sibling field, with the name of the field used.
fn load_pem(
    data: Option<&str>,
    data_field: &'static str,
    file: Option<&Path>,
    file_field: &'static str,
    origin: &str,
) -> Result<Option<(Vec<u8>, &'static str)>, ConfigError> {
    if let Some(d) = data.map(str::trim).filter(|d| !d.is_empty()) {
        // Tolerate line breaks inside the base64 text.
        let compact: String = d.split_ascii_whitespace().collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .map_err(|source| ConfigError::InvalidBase64 {
                field: data_field,
                origin: origin.to_string(),
                source,
            })?;
        return Ok(Some((bytes, data_field)));
    }
    if let Some(path) = file.filter(|p| !p.as_os_str().is_empty()) {
        let bytes = std::fs::read(path).map_err(|source| ConfigError::ReadField {
            field: file_field,
            origin: origin.to_string(),
            path: path.to_path_buf(),
            source,
        })?;
        return Ok(Some((bytes, file_field)));
    }
    Ok(None)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;

    /// A self-signed test certificate (EC P-256, CN listwatch-test), PEM.
    pub(crate) const TEST_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBiDCCAS+gAwIBAgIUbH0pNjvaWEo76yW9Xn5b3fYfzcAwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwObGlzdHdhdGNoLXRlc3QwIBcNMjYxMTIyMDUzOTE5WhgPMjEy
NjEwMjkwNTM5MTlaMBkxFzAVBgNVBAMMDmxpc3R3YXRjaC10ZXN0MFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAEoqDAMU1aQe159f2hy/skP6xueLm34xlj9jOEd4Hg
fuFGVBihD9zrJq5551ZWy10c6RffPUjLZ9HKvdkB3jhRzqNTMFEwHQYDVR0OBBYE
FC+pQd+H9xqtPSZW5PaurawcWcs+MB8GA1UdIwQYMBaAFC+pQd+H9xqtPSZW5Pau
rawcWcs+MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDRwAwRAIgLvf0WVyq
quSS5EBwRLfvXWxlwHjD3Gdch8/sqkVAeTwCIGhEPNajv07EdoQ5hbynap8965RW
Guu2qdC0vhtG9JHM
-----END CERTIFICATE-----
";

    /// The PKCS#8 private key of [`TEST_CERT`].
    pub(crate) const TEST_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgJQIK6eyQzfK2snmt
1vIpxIqD8AsV0vxpSxTsreTFs4yhRANCAASioMAxTVpB7Xn1/aHL+yQ/rG54ubfj
GWP2M4R3geB+4UZUGKEP3OsmrnnnVlbLXRzpF989SMtn0cq92QHeOFHO
-----END PRIVATE KEY-----
";

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "listwatch-client-config-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn inline_data_and_token() {
        let yaml = format!(
            "apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: prod
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: {ca}
    tls-server-name: kubernetes
contexts:
- name: prod
  context: {{cluster: prod, user: admin, namespace: team-a}}
users:
- name: admin
  user:
    token: s3cret
    client-certificate-data: {ca}
    client-key-data: {key}
",
            ca = STANDARD.encode(TEST_CERT),
            key = STANDARD.encode(TEST_KEY)
        );
        let kc = Kubeconfig::from_yaml(&yaml, Path::new("mem"), Path::new("/")).unwrap();
        let c = kc.to_config(None).unwrap();
        assert_eq!(c.server, "https://10.0.0.1:6443");
        assert_eq!(c.root_certs.len(), 1);
        assert_eq!(c.default_namespace, "team-a");
        assert_eq!(c.auth, Auth::Bearer("s3cret".into()));
        assert_eq!(c.tls_server_name.as_deref(), Some("kubernetes"));
        let id = c.identity.as_ref().unwrap();
        assert_eq!(id.certs.len(), 1);
        assert!(!c.insecure_skip_tls_verify);
        // Secrets never show up in Debug output.
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("s3cret"), "{dbg}");
    }

    #[test]
    fn files_relative_to_the_kubeconfig_directory() {
        let dir = tmpdir("relative");
        write(&dir, "pki/ca.crt", TEST_CERT);
        write(&dir, "pki/client.crt", TEST_CERT);
        write(&dir, "pki/client.key", TEST_KEY);
        write(&dir, "token.txt", "tok\n");
        let kc_path = write(
            &dir,
            "conf/config",
            "current-context: dev
clusters:
- name: dev
  cluster:
    server: https://dev.example:443
    certificate-authority: ../pki/ca.crt
contexts:
- name: dev
  context:
    cluster: dev
    user: dev
users:
- name: dev
  user:
    client-certificate: ../pki/client.crt
    client-key: ../pki/client.key
    tokenFile: ../token.txt
    token: ignored-because-tokenFile-wins
",
        );
        let c = Config::from_kubeconfig_file(&kc_path, None).unwrap();
        assert_eq!(c.root_certs.len(), 1);
        assert!(c.identity.is_some());
        assert_eq!(
            c.auth,
            Auth::TokenFile(dir.join("conf").join("../token.txt"))
        );
        assert_eq!(c.default_namespace, "default");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn contexts_are_selectable() {
        let yaml = "current-context: a
clusters:
- {name: one, cluster: {server: 'http://127.0.0.1:1'}}
- {name: two, cluster: {server: 'https://two.example', insecure-skip-tls-verify: true}}
contexts:
- {name: a, context: {cluster: one, user: u}}
- {name: b, context: {cluster: two, user: u, namespace: kube-system}}
users:
- {name: u, user: {username: alice, password: pw}}
";
        let kc = Kubeconfig::from_yaml(yaml, Path::new("mem"), Path::new("/")).unwrap();
        let a = kc.to_config(None).unwrap();
        assert_eq!(a.server, "http://127.0.0.1:1/");
        assert!(!a.insecure_skip_tls_verify);
        assert_eq!(
            a.auth,
            Auth::Basic {
                username: "alice".into(),
                password: "pw".into()
            }
        );
        let b = kc.to_config(Some("b")).unwrap();
        assert_eq!(b.server.host(), Some("two.example"));
        assert!(b.insecure_skip_tls_verify);
        assert_eq!(b.default_namespace, "kube-system");
        assert!(matches!(
            kc.to_config(Some("nope")),
            Err(ConfigError::ContextNotFound(c)) if c == "nope"
        ));
    }

    #[test]
    fn merge_first_definition_wins() {
        let dir = tmpdir("merge");
        let first = write(
            &dir,
            "first",
            "clusters:
- {name: shared, cluster: {server: 'http://first:1'}}
contexts:
- {name: ctx, context: {cluster: shared, user: ''}}
",
        );
        let second = write(
            &dir,
            "second",
            "current-context: ctx
clusters:
- {name: shared, cluster: {server: 'http://second:2'}}
- {name: other, cluster: {server: 'http://other:3'}}
contexts:
- {name: ctx, context: {cluster: other, user: ''}}
- {name: ctx2, context: {cluster: other, user: ''}}
",
        );
        let third = write(&dir, "third", "current-context: ignored\n");
        let missing = dir.join("does-not-exist");
        let list = std::env::join_paths([&missing, &first, &second, &third]).unwrap();
        let kc = Kubeconfig::from_env_values(Some(&list), None).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("ctx"));
        let c = kc.to_config(None).unwrap();
        // The context and the cluster both come from the first file that defines them.
        assert_eq!(c.server.host(), Some("first"));
        assert_eq!(
            kc.to_config(Some("ctx2")).unwrap().server.host(),
            Some("other")
        );
        assert_eq!(kc.clusters["shared"].file, first);

        // With KUBECONFIG unset, ~/.kube/config is read.
        write(
            &dir,
            "home/.kube/config",
            &std::fs::read_to_string(&second).unwrap(),
        );
        let kc = Kubeconfig::from_env_values(None, Some(&dir.join("home"))).unwrap();
        assert_eq!(kc.to_config(None).unwrap().server.host(), Some("other"));
        // An empty KUBECONFIG counts as unset.
        let kc =
            Kubeconfig::from_env_values(Some(std::ffi::OsStr::new("")), Some(&dir.join("home")))
                .unwrap();
        assert!(kc.clusters.contains_key("other"));

        let none = std::env::join_paths([&missing]).unwrap();
        assert!(matches!(
            Kubeconfig::from_env_values(Some(&none), None),
            Err(ConfigError::NoKubeconfig { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn config_err(yaml: &str) -> ConfigError {
        Kubeconfig::from_yaml(yaml, Path::new("/k/config"), Path::new("/k"))
            .and_then(|kc| kc.to_config(None))
            .unwrap_err()
    }

    #[test]
    fn missing_and_bad_fields_are_named() {
        let e = config_err("clusters: []\n");
        assert!(matches!(e, ConfigError::NoCurrentContext), "{e}");

        let e = config_err(
            "current-context: c\ncontexts: [{name: c, context: {cluster: x, user: u}}]\n",
        );
        assert!(
            matches!(&e, ConfigError::ClusterNotFound { cluster, .. } if cluster == "x"),
            "{e}"
        );

        let e = config_err(
            "current-context: c
contexts: [{name: c, context: {cluster: x, user: u}}]
clusters: [{name: x, cluster: {}}]
",
        );
        assert!(
            matches!(
                &e,
                ConfigError::MissingField {
                    field: "server",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("cluster \"x\" in /k/config"), "{e}");

        let e = config_err(
            "current-context: c
contexts: [{name: c, context: {cluster: x, user: u}}]
clusters: [{name: x, cluster: {server: 'https://h'}}]
",
        );
        assert!(
            matches!(&e, ConfigError::UserNotFound { user, .. } if user == "u"),
            "{e}"
        );

        let e = config_err(
            "current-context: c
contexts: [{name: c, context: {cluster: x, user: ''}}]
clusters: [{name: x, cluster: {server: 'https://h', certificate-authority-data: '%%%'}}]
",
        );
        assert!(
            matches!(
                &e,
                ConfigError::InvalidBase64 {
                    field: "certificate-authority-data",
                    ..
                }
            ),
            "{e}"
        );

        let e = config_err(
            "current-context: c
contexts: [{name: c, context: {cluster: x, user: ''}}]
clusters: [{name: x, cluster: {server: 'https://h', certificate-authority: ca.pem}}]
",
        );
        match &e {
            ConfigError::ReadField { field, path, .. } => {
                assert_eq!(*field, "certificate-authority");
                assert_eq!(path, Path::new("/k/ca.pem"));
            }
            other => panic!("{other}"),
        }

        let e = config_err(&format!(
            "current-context: c
contexts: [{{name: c, context: {{cluster: x, user: ''}}}}]
clusters: [{{name: x, cluster: {{server: 'https://h', certificate-authority-data: {}}}}}]
",
            STANDARD.encode("not pem")
        ));
        assert!(
            matches!(
                &e,
                ConfigError::InvalidPem {
                    field: "certificate-authority-data",
                    ..
                }
            ),
            "{e}"
        );

        let e = config_err(&format!(
            "current-context: c
contexts: [{{name: c, context: {{cluster: x, user: u}}}}]
clusters: [{{name: x, cluster: {{server: 'https://h'}}}}]
users: [{{name: u, user: {{client-certificate-data: {}}}}}]
",
            STANDARD.encode(TEST_CERT)
        ));
        assert!(
            matches!(
                &e,
                ConfigError::MissingField {
                    field: "client-key",
                    ..
                }
            ),
            "{e}"
        );

        let e = config_err(
            "current-context: c
contexts: [{name: c, context: {cluster: x, user: u}}]
clusters: [{name: x, cluster: {server: 'https://h'}}]
users: [{name: u, user: {exec: {command: aws}}}]
",
        );
        assert!(matches!(&e, ConfigError::UnsupportedAuth { .. }), "{e}");

        let e = config_err(
            "current-context: c
contexts: [{name: c, context: {cluster: x, user: ''}}]
clusters: [{name: x, cluster: {server: 'ftp://h'}}]
",
        );
        assert!(matches!(&e, ConfigError::InvalidServer { .. }), "{e}");

        let e = Kubeconfig::from_yaml("clusters: {a: 1}", Path::new("/k/config"), Path::new("/k"))
            .unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }), "{e}");

        let e = Config::from_kubeconfig_file("/definitely/not/here", None).unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }), "{e}");
    }

    #[test]
    fn empty_document_and_null_lists() {
        let kc = Kubeconfig::from_yaml("", Path::new("m"), Path::new("/")).unwrap();
        assert_eq!(kc, Kubeconfig::default());
        let kc = Kubeconfig::from_yaml(
            "clusters: null\nusers: null\ncontexts: null\npreferences: {}\n",
            Path::new("m"),
            Path::new("/"),
        )
        .unwrap();
        assert!(kc.clusters.is_empty());
        // The listwatch binary's own kubeconfig loads.
        let yaml = "apiVersion: v1\nkind: Config\nclusters:\n- name: listwatch\n  cluster:\n    server: http://127.0.0.1:8080\ncontexts:\n- name: listwatch\n  context:\n    cluster: listwatch\n    user: listwatch\n    namespace: default\ncurrent-context: listwatch\nusers:\n- name: listwatch\n  user: {}\npreferences: {}\n";
        let c = Kubeconfig::from_yaml(yaml, Path::new("m"), Path::new("/"))
            .unwrap()
            .to_config(None)
            .unwrap();
        assert_eq!(c.auth, Auth::None);
        assert!(c.identity.is_none());
    }

    #[test]
    fn in_cluster_from_a_directory() {
        let dir = tmpdir("incluster");
        let e = Config::in_cluster_from("10.96.0.1", "443", &dir).unwrap_err();
        assert!(
            matches!(&e, ConfigError::ReadField { field: "token", .. }),
            "{e}"
        );
        write(&dir, "token", "abc");
        let e = Config::in_cluster_from("10.96.0.1", "443", &dir).unwrap_err();
        assert!(
            matches!(
                &e,
                ConfigError::ReadField {
                    field: "ca.crt",
                    ..
                }
            ),
            "{e}"
        );
        write(&dir, "ca.crt", TEST_CERT);
        let c = Config::in_cluster_from("10.96.0.1", "443", &dir).unwrap();
        assert_eq!(c.server, "https://10.96.0.1:443/");
        assert_eq!(c.default_namespace, "default");
        assert_eq!(c.auth, Auth::TokenFile(dir.join("token")));
        assert_eq!(c.root_certs.len(), 1);
        write(&dir, "namespace", "kube-system\n");
        let c = Config::in_cluster_from("fd00::1", "6443", &dir).unwrap();
        assert_eq!(c.server.host(), Some("[fd00::1]"));
        assert_eq!(c.server.port_u16(), Some(6443));
        assert_eq!(c.default_namespace, "kube-system");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
