//! Clients that act as one controller each (kube-controller-manager's
//! `--use-service-account-credentials`): a controller writes as the ServiceAccount
//! `kube-system/NAME`, which the default policy binds to the ClusterRole
//! `system:controller:NAME`, and can do nothing that role does not allow.
//!
//! Data flow: the controller-manager's own client (user `system:kube-controller-manager`,
//! whose role may create ServiceAccounts and their tokens) makes sure the account exists,
//! asks the TokenRequest API for a token of [`TOKEN_LIFETIME`], and hands out a client that
//! sends it as a [`SharedToken`]. A task renews the token when 80 % of its lifetime has
//! passed (every [`RETRY`] after a failure, keeping the old token meanwhile) and stops once
//! no client holds it any more.
//!
//! A controller-manager in the API server's own process (`listwatch up`) needs no token:
//! [`ServiceAccountClientBuilder::in_process`] hands out in-process clients that name the
//! account in the front-proxy headers
//! ([`Client::as_front_proxied`](client::rest::Client::as_front_proxied)), with the groups a
//! ServiceAccount token would give. Such an identity is only a name, as behind an
//! authenticating proxy: it carries no uid and stays valid if the account is deleted.

use client::rest::{Auth, Client, Config, InProcessServer, SharedToken};
use http::Method;
use serde_json::{json, Value};
use std::time::Duration;

/// The namespace of the controllers' ServiceAccounts.
pub const NAMESPACE: &str = "kube-system";

/// How long a requested token lives (kube-controller-manager asks for an hour).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// The pause before asking again after a failed renewal.
pub const RETRY: Duration = Duration::from_secs(10);

/// Why a controller's client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientBuilderError {
    /// The API server refused or failed a request.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// What the client said.
        #[source]
        source: client::rest::Error,
    },
    /// The TokenRequest's answer held no token.
    #[error("the TokenRequest for {0} answered without a token")]
    NoToken(String),
    /// The client could not be built from the configuration.
    #[error("building the client of {name}: {source}")]
    Config {
        /// The ServiceAccount.
        name: String,
        /// Why.
        #[source]
        source: client::rest::Error,
    },
}

/// Builds a client per controller from the controller-manager's client and the
/// configuration it was made from (server, CA; its credentials are replaced).
#[derive(Clone, Debug)]
pub struct ServiceAccountClientBuilder {
    root: Client,
    base: Base,
}

/// How the clients a builder hands out connect.
#[derive(Clone, Debug)]
enum Base {
    /// Over the network with this configuration, each with a requested token.
    Tokens(Box<Config>),
    /// Each a client of this in-process server, named in front-proxy headers.
    InProcess(InProcessServer),
}

impl ServiceAccountClientBuilder {
    /// A builder that creates accounts and tokens with `root` and connects as `base` does.
    pub fn new(root: Client, mut base: Config) -> ServiceAccountClientBuilder {
        base.auth = Auth::None;
        base.identity = None;
        ServiceAccountClientBuilder {
            root,
            base: Base::Tokens(Box::new(base)),
        }
    }

    /// A builder that creates accounts with `root` and hands out in-process clients
    /// ([`Client::in_process`]) of `server`, each running as its ServiceAccount with the
    /// groups `system:serviceaccounts` and `system:serviceaccounts:kube-system`.
    pub fn in_process(root: Client, server: InProcessServer) -> ServiceAccountClientBuilder {
        ServiceAccountClientBuilder {
            root,
            base: Base::InProcess(server),
        }
    }

    /// A client authenticated as ServiceAccount `kube-system/name` (created if missing):
    /// with a token renewed in the background for as long as the client (or a clone) lives,
    /// or in-process by name.
    ///
    /// # Errors
    /// The account could not be read or created, or no token was issued.
    pub async fn client_for(&self, name: &str) -> Result<Client, ClientBuilderError> {
        self.ensure_account(name).await?;
        let base = match &self.base {
            Base::Tokens(config) => config,
            Base::InProcess(server) => {
                let user = format!("system:serviceaccount:{NAMESPACE}:{name}");
                let groups = [
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{NAMESPACE}"),
                ];
                let client = Client::in_process(server.clone());
                return client.as_front_proxied(&user, &groups).map_err(|source| {
                    ClientBuilderError::Config {
                        name: name.to_string(),
                        source,
                    }
                });
            }
        };
        let token = SharedToken::new(request_token(&self.root, name).await?);
        let mut config = Config::clone(base);
        config.auth = Auth::Shared(token.clone());
        let client = Client::new(config).map_err(|source| ClientBuilderError::Config {
            name: name.to_string(),
            source,
        })?;
        tokio::spawn(renew(self.root.clone(), name.to_string(), token));
        Ok(client)
    }

    async fn ensure_account(&self, name: &str) -> Result<(), ClientBuilderError> {
        let path = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts");
        match self
            .root
            .request_bytes(Method::GET, &format!("{path}/{name}"), None)
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.is_not_found() => {}
            Err(source) => {
                return Err(ClientBuilderError::Api {
                    what: format!("reading ServiceAccount {NAMESPACE}/{name}"),
                    source,
                })
            }
        }
        let body = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": NAMESPACE}});
        match self
            .root
            .request_bytes(
                Method::POST,
                &path,
                Some((body.to_string().into(), "application/json")),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_already_exists() => Ok(()),
            Err(source) => Err(ClientBuilderError::Api {
                what: format!("creating ServiceAccount {NAMESPACE}/{name}"),
                source,
            }),
        }
    }
}

/// A token of `kube-system/name` for [`TOKEN_LIFETIME`].
async fn request_token(root: &Client, name: &str) -> Result<String, ClientBuilderError> {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": TOKEN_LIFETIME.as_secs()}});
    let (_, bytes) = root
        .request_bytes(
            Method::POST,
            &format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}/token"),
            Some((body.to_string().into(), "application/json")),
        )
        .await
        .map_err(|source| ClientBuilderError::Api {
            what: format!("requesting a token for {NAMESPACE}/{name}"),
            source,
        })?;
    let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    answer
        .pointer("/status/token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .ok_or_else(|| ClientBuilderError::NoToken(name.to_string()))
}

/// Renews `token` at 80 % of its lifetime until no client holds it.
async fn renew(root: Client, name: String, token: SharedToken) {
    let mut wait = TOKEN_LIFETIME.mul_f64(0.8);
    loop {
        tokio::time::sleep(wait).await;
        if !token.is_shared() {
            return;
        }
        match request_token(&root, &name).await {
            Ok(t) => {
                token.set(t);
                wait = TOKEN_LIFETIME.mul_f64(0.8);
            }
            Err(e) => {
                tracing::warn!(account = %name, "renewing the controller's token: {e}");
                wait = RETRY;
            }
        }
    }
}
