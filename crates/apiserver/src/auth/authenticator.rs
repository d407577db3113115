//! Authentication: who a request comes from. In kube-apiserver's order, the first that
//! answers wins: a client certificate our CA issued (read once per connection, see
//! [`super::client_cert`]), then the bearer token — the admin token, a token of the token
//! file, or a ServiceAccount token — and, without any credentials, the anonymous user
//! (whom RBAC lets read only `/healthz`, `/version` and the like). A credential that is
//! given but not valid is a 401, never anonymous.

use super::token_file::TokenFile;
use super::user_info::{UserInfo, GROUP_MASTERS};
use api::Status;
use base64::Engine as _;
use std::sync::Arc;

/// The user of the admin token, as `kubectl auth whoami` shows it.
pub const ADMIN_USER: &str = "admin";

/// Checks ServiceAccount tokens (the server, which holds the signing key and the caches the
/// token's objects are looked up in).
pub trait ServiceAccountAuthenticator: Send + Sync {
    /// The ServiceAccount `token` authenticates, or `None` if it is not one of ours or not
    /// valid now.
    fn authenticate_token(&self, token: &str) -> Option<UserInfo>;
}

/// How a listener authenticates requests.
pub struct Authenticator {
    admin: Option<(String, Arc<UserInfo>)>,
    tokens: TokenFile,
    anonymous: Arc<UserInfo>,
    allow_anonymous: bool,
    /// Only the front-proxy headers authenticate ([`super::request_header`]).
    front_proxy: bool,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("admin_token", &self.admin.is_some())
            .field("token_file", &self.tokens.len())
            .field("allow_anonymous", &self.allow_anonymous)
            .field("front_proxy", &self.front_proxy)
            .finish()
    }
}

impl Authenticator {
    /// An authenticator accepting `admin_token` (user `admin` in `system:masters`), the
    /// tokens of `tokens`, client certificates and ServiceAccount tokens, with anonymous
    /// requests allowed (kube-apiserver's `--anonymous-auth=true`).
    pub fn new(admin_token: Option<String>, tokens: TokenFile) -> Authenticator {
        Authenticator {
            admin: admin_token.filter(|t| !t.is_empty()).map(|t| {
                (
                    t,
                    Arc::new(UserInfo::authenticated(
                        ADMIN_USER,
                        vec![GROUP_MASTERS.to_string()],
                    )),
                )
            }),
            tokens,
            anonymous: Arc::new(UserInfo::anonymous()),
            allow_anonymous: true,
            front_proxy: false,
        }
    }

    /// An authenticator for connections from a trusted front proxy: each request runs as
    /// the user its `X-Remote-User` and `X-Remote-Group` headers name
    /// ([`super::request_header::user_of`]), and nothing else authenticates (no token, no
    /// anonymous). Only for connections nothing untrusted can open, hence not public: the
    /// in-process requests of [`crate::server::in_process`] are its one use.
    pub(crate) fn front_proxy() -> Authenticator {
        Authenticator {
            admin: None,
            tokens: TokenFile::default(),
            anonymous: Arc::new(UserInfo::anonymous()),
            allow_anonymous: false,
            front_proxy: true,
        }
    }

    /// Refuses requests without credentials (401) instead of running them as anonymous.
    pub fn without_anonymous(mut self) -> Authenticator {
        self.allow_anonymous = false;
        self
    }

    /// The user of a request with `headers`, on a connection whose client certificate named
    /// `conn_user`.
    ///
    /// # Errors
    /// 401 for a bearer token that is not valid, or for no credentials when anonymous
    /// requests are refused.
    pub fn authenticate(
        &self,
        headers: &http::HeaderMap,
        conn_user: Option<&Arc<UserInfo>>,
        service_accounts: &dyn ServiceAccountAuthenticator,
    ) -> Result<Arc<UserInfo>, Status> {
        if self.front_proxy {
            return super::request_header::user_of(headers);
        }
        if let Some(u) = conn_user {
            return Ok(u.clone());
        }
        let Some(token) = bearer_token(headers)? else {
            return if self.allow_anonymous {
                Ok(self.anonymous.clone())
            } else {
                Err(Status::unauthorized())
            };
        };
        if let Some((admin, user)) = &self.admin {
            if constant_time_eq(token.as_bytes(), admin.as_bytes()) {
                return Ok(user.clone());
            }
        }
        if let Some(u) = self.tokens.user(&token) {
            return Ok(Arc::new(u.clone()));
        }
        if token.matches('.').count() == 2 {
            if let Some(u) = service_accounts.authenticate_token(&token) {
                return Ok(Arc::new(u));
            }
        }
        Err(Status::unauthorized())
    }
}

/// The subprotocol prefix a WebSocket client (which cannot set headers) sends its bearer
/// token in, base64url-encoded, as Kubernetes defines it.
const WS_TOKEN_PREFIX: &str = "base64url.bearer.authorization.k8s.io.";

/// The bearer token of a request: `Authorization: Bearer T`, or a WebSocket subprotocol.
///
/// # Errors
/// 401 for an `Authorization` header that is not a bearer token, or an undecodable one.
pub fn bearer_token(headers: &http::HeaderMap) -> Result<Option<String>, Status> {
    if let Some(v) = headers.get(http::header::AUTHORIZATION) {
        let v = v.to_str().map_err(|_| Status::unauthorized())?.trim();
        let (scheme, rest) = v.split_once(' ').ok_or_else(Status::unauthorized)?;
        let token = rest.trim();
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return Err(Status::unauthorized());
        }
        return Ok(Some(token.to_string()));
    }
    for v in headers.get_all(http::header::SEC_WEBSOCKET_PROTOCOL) {
        let Ok(v) = v.to_str() else { continue };
        for proto in v.split(',').map(str::trim) {
            if let Some(enc) = proto.strip_prefix(WS_TOKEN_PREFIX) {
                let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(enc.trim_end_matches('='))
                    .map_err(|_| Status::unauthorized())?;
                let token = String::from_utf8(raw).map_err(|_| Status::unauthorized())?;
                return Ok(Some(token));
            }
        }
    }
    Ok(None)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoAccounts;
    impl ServiceAccountAuthenticator for NoAccounts {
        fn authenticate_token(&self, token: &str) -> Option<UserInfo> {
            (token == "a.b.c").then(|| UserInfo::service_account("ns", "sa", "u"))
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(v.as_bytes()).unwrap(),
            );
        }
        h
    }

    #[test]
    fn each_credential_finds_its_user() {
        let tokens = TokenFile::parse("t1,alice,1,devs\n").unwrap();
        let a = Authenticator::new(Some("admintoken".into()), tokens);
        let who = |h: &[(&str, &str)]| {
            a.authenticate(&headers(h), None, &NoAccounts)
                .map(|u| u.name.clone())
                .map_err(|s| s.code())
        };
        assert_eq!(
            who(&[("authorization", "Bearer admintoken")]),
            Ok("admin".into())
        );
        assert_eq!(who(&[("authorization", "bearer t1")]), Ok("alice".into()));
        assert_eq!(
            who(&[("authorization", "Bearer a.b.c")]),
            Ok("system:serviceaccount:ns:sa".into())
        );
        assert_eq!(who(&[]), Ok("system:anonymous".into()));
        for bad in [
            "Bearer nope",
            "Basic YTpi",
            "Bearer",
            "Bearer x.y.z",
            "admintoken",
        ] {
            assert_eq!(who(&[("authorization", bad)]), Err(401), "{bad}");
        }
        assert_eq!(who(&[("authorization", "Bearer admintoke")]), Err(401));
        let ws = format!("{WS_TOKEN_PREFIX}dDE, base64.binary.k8s.io");
        assert_eq!(who(&[("sec-websocket-protocol", &ws)]), Ok("alice".into()));
        let cert = Arc::new(UserInfo::authenticated("carol", vec![]));
        let u = a
            .authenticate(
                &headers(&[("authorization", "Bearer t1")]),
                Some(&cert),
                &NoAccounts,
            )
            .unwrap();
        assert_eq!(u.name, "carol");
        let strict = Authenticator::new(None, TokenFile::default()).without_anonymous();
        assert_eq!(
            strict
                .authenticate(&headers(&[]), None, &NoAccounts)
                .unwrap_err()
                .code(),
            401
        );
    }
}
