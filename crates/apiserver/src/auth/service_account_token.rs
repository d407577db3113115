//! ServiceAccount tokens: JWTs the server signs (ES256, with a P-256 key kept in the data
//! directory) for the TokenRequest API, and their verification. A token names its
//! ServiceAccount (and the pod or secret it is bound to) by name and uid, its audiences, and
//! when it expires; it is valid only while every object it names still exists with that uid
//! (checked by the caller against the caches, see [`Claims::bound_objects`]).

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine as _;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _};
use serde_json::{json, Value};

/// The issuer (`iss`) of our tokens, and their default audience, as kube-apiserver's
/// `--service-account-issuer` is usually set.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Clock skew tolerated on a token's `nbf` and `iat`, in seconds.
const LEEWAY: i64 = 60;

/// Signature-checked tokens remembered, at most; when full, the memory starts again empty
/// (a controller-manager's dozen tokens fit many times over).
const VERIFIED_CAPACITY: usize = 4096;

/// Why a token was not accepted (answered 401, never shown in detail to the caller).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// Not three base64url parts with JSON header and claims.
    #[error("malformed token")]
    Malformed,
    /// Not signed by our key (or tampered with).
    #[error("invalid signature")]
    Signature,
    /// Another issuer's token.
    #[error("wrong issuer")]
    Issuer,
    /// None of the token's audiences is one the server accepts.
    #[error("token audiences do not match")]
    Audience,
    /// Past its `exp`, or before its `nbf`.
    #[error("token is expired or not yet valid")]
    Expired,
}

/// What a token says, once its signature, issuer, audience and times are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount's name.
    pub name: String,
    /// The ServiceAccount's uid.
    pub uid: String,
    /// The object the token is bound to: (`pods` or `secrets`, name, uid).
    pub bound: Option<(String, String, String)>,
    /// The token's id (`jti`).
    pub id: String,
}

impl Claims {
    /// Every object that must still exist, with its uid, for the token to be valid:
    /// (resource, namespace, name, uid), the ServiceAccount first.
    pub fn bound_objects(&self) -> Vec<(&str, &str, &str, &str)> {
        let mut v = vec![(
            "serviceaccounts",
            self.namespace.as_str(),
            self.name.as_str(),
            self.uid.as_str(),
        )];
        if let Some((res, name, uid)) = &self.bound {
            v.push((
                res.as_str(),
                self.namespace.as_str(),
                name.as_str(),
                uid.as_str(),
            ));
        }
        v
    }
}

/// What a token is issued for.
#[derive(Debug, Clone)]
pub struct TokenSpec<'a> {
    /// The ServiceAccount's namespace, name and uid.
    pub service_account: (&'a str, &'a str, &'a str),
    /// The object it is bound to: (`Pod` or `Secret`, name, uid).
    pub bound: Option<(&'a str, &'a str, &'a str)>,
    /// The audiences (empty: the issuer).
    pub audiences: &'a [String],
    /// Issued at, seconds since the epoch.
    pub now: i64,
    /// Lifetime in seconds.
    pub expiration_seconds: i64,
}

/// What a token our key signed says, before the checks that depend on the audiences a
/// server accepts and on the time.
#[derive(Debug)]
struct Signed {
    audiences: Vec<String>,
    exp: Option<i64>,
    nbf: i64,
    claims: Result<Claims, TokenError>,
}

/// The signer and verifier of ServiceAccount tokens.
///
/// Verifying a signature (ECDSA P-256) costs more than the rest of a request's
/// authentication, and a client sends the same token with every request, so the tokens
/// whose signature verified are remembered — by their SHA-256, never the token itself —
/// with what they say. Audiences, times and the bound objects are checked on every use, so
/// remembering changes no answer, only its cost (kube-apiserver instead caches a token's
/// whole verdict for ten seconds).
pub struct ServiceAccountTokens {
    key: EcdsaKeyPair,
    key_id: String,
    rng: ring::rand::SystemRandom,
    verified: parking_lot::Mutex<std::collections::HashMap<[u8; 32], std::sync::Arc<Signed>>>,
}

impl std::fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountTokens")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl ServiceAccountTokens {
    /// A signer over a P-256 key in PKCS#8 DER.
    ///
    /// # Errors
    /// The key is not a P-256 PKCS#8 key.
    pub fn from_pkcs8(der: &[u8]) -> Result<ServiceAccountTokens, String> {
        let rng = ring::rand::SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
            .map_err(|e| format!("service account signing key: {e}"))?;
        let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
        Ok(ServiceAccountTokens {
            key_id: B64.encode(digest.as_ref()),
            key,
            rng,
            verified: parking_lot::Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// A signer over a new random key (a server without a data directory).
    ///
    /// # Errors
    /// No randomness available.
    pub fn generate() -> Result<ServiceAccountTokens, String> {
        let rng = ring::rand::SystemRandom::new();
        let der = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|e| format!("generating a service account key: {e}"))?;
        ServiceAccountTokens::from_pkcs8(der.as_ref())
    }

    /// The key's id (`kid` of every token).
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public key as a JWK (for `/openid/v1/jwks`).
    pub fn jwk(&self) -> Value {
        // An uncompressed P-256 point: 0x04, then x and y, 32 bytes each.
        let point = self.key.public_key().as_ref();
        let (x, y) = point[1..].split_at(32);
        json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": self.key_id,
               "x": B64.encode(x), "y": B64.encode(y)})
    }

    /// Signs a token for `spec`.
    ///
    /// # Errors
    /// Signing failed (no randomness).
    pub fn issue(&self, spec: &TokenSpec<'_>) -> Result<String, String> {
        let (ns, name, uid) = spec.service_account;
        let audiences: Vec<&str> = if spec.audiences.is_empty() {
            vec![ISSUER]
        } else {
            spec.audiences.iter().map(String::as_str).collect()
        };
        let mut k8s = json!({"namespace": ns, "serviceaccount": {"name": name, "uid": uid}});
        if let Some((kind, bname, buid)) = spec.bound {
            let field = if kind == "Secret" { "secret" } else { "pod" };
            k8s[field] = json!({"name": bname, "uid": buid});
        }
        let claims = json!({
            "aud": audiences,
            "exp": spec.now + spec.expiration_seconds,
            "iat": spec.now,
            "nbf": spec.now,
            "iss": ISSUER,
            "jti": uuid::Uuid::new_v4().to_string(),
            "kubernetes.io": k8s,
            "sub": format!("system:serviceaccount:{ns}:{name}"),
        });
        let header = json!({"alg": "ES256", "kid": self.key_id});
        let signing_input = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(claims.to_string())
        );
        let sig = self
            .key
            .sign(&self.rng, signing_input.as_bytes())
            .map_err(|_| "signing a token failed".to_string())?;
        Ok(format!("{signing_input}.{}", B64.encode(sig.as_ref())))
    }

    /// Verifies `token` at time `now` for a server accepting `audiences` (empty: the issuer).
    ///
    /// # Errors
    /// Why it is not valid; the objects it names are for the caller to check.
    pub fn verify(
        &self,
        token: &str,
        audiences: &[String],
        now: i64,
    ) -> Result<Claims, TokenError> {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut id = [0u8; 32];
        id.copy_from_slice(digest.as_ref());
        let known = self.verified.lock().get(&id).cloned();
        let signed = match known {
            Some(s) => s,
            None => {
                let s = std::sync::Arc::new(self.check_signature(token)?);
                let mut verified = self.verified.lock();
                if verified.len() >= VERIFIED_CAPACITY {
                    verified.clear();
                }
                verified.insert(id, s.clone());
                s
            }
        };
        let accepted = |a: &String| {
            if audiences.is_empty() {
                a == ISSUER
            } else {
                audiences.contains(a)
            }
        };
        if !signed.audiences.iter().any(accepted) {
            return Err(TokenError::Audience);
        }
        let exp = signed.exp.ok_or(TokenError::Malformed)?;
        if now >= exp || now.saturating_add(LEEWAY) < signed.nbf {
            return Err(TokenError::Expired);
        }
        signed.claims.clone()
    }

    /// Checks that our key signed `token` (as ES256) and for our issuer, and reads what it
    /// says.
    fn check_signature(&self, token: &str) -> Result<Signed, TokenError> {
        let mut parts = token.split('.');
        let (Some(h), Some(c), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let header: Value = B64
            .decode(h)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or(TokenError::Malformed)?;
        if header.get("alg").and_then(Value::as_str) != Some("ES256") {
            return Err(TokenError::Signature);
        }
        let sig = B64.decode(s).map_err(|_| TokenError::Malformed)?;
        let public = signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            self.key.public_key().as_ref(),
        );
        let signed = &token[..h.len() + 1 + c.len()];
        public
            .verify(signed.as_bytes(), &sig)
            .map_err(|_| TokenError::Signature)?;
        let claims: Value = B64
            .decode(c)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or(TokenError::Malformed)?;
        if claims.get("iss").and_then(Value::as_str) != Some(ISSUER) {
            return Err(TokenError::Issuer);
        }
        let audiences = match claims.get("aud") {
            Some(Value::String(a)) => vec![a.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            _ => Vec::new(),
        };
        Ok(Signed {
            audiences,
            exp: claims.get("exp").and_then(Value::as_i64),
            nbf: claims
                .get("nbf")
                .and_then(Value::as_i64)
                .unwrap_or(i64::MIN),
            claims: identity(&claims),
        })
    }
}

/// The ServiceAccount, bound object and id a token's claims name.
fn identity(claims: &Value) -> Result<Claims, TokenError> {
    let k8s = claims.get("kubernetes.io").ok_or(TokenError::Malformed)?;
    let s = |v: Option<&Value>| v.and_then(Value::as_str).map(String::from);
    let namespace = s(k8s.get("namespace")).ok_or(TokenError::Malformed)?;
    let sa = k8s.get("serviceaccount").ok_or(TokenError::Malformed)?;
    let name = s(sa.get("name")).ok_or(TokenError::Malformed)?;
    let uid = s(sa.get("uid")).ok_or(TokenError::Malformed)?;
    let bound = [("pod", "pods"), ("secret", "secrets")]
        .iter()
        .find_map(|(field, res)| {
            let b = k8s.get(*field)?;
            Some((res.to_string(), s(b.get("name"))?, s(b.get("uid"))?))
        });
    if namespace.is_empty() || name.is_empty() {
        return Err(TokenError::Malformed);
    }
    Ok(Claims {
        namespace,
        name,
        uid,
        bound,
        id: s(claims.get("jti")).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(now: i64) -> TokenSpec<'static> {
        TokenSpec {
            service_account: ("ns", "bot", "uid-1"),
            bound: Some(("Pod", "p1", "uid-p")),
            audiences: &[],
            now,
            expiration_seconds: 3600,
        }
    }

    #[test]
    fn issued_tokens_verify_until_they_expire() {
        let t = ServiceAccountTokens::generate().unwrap();
        let tok = t.issue(&spec(1_000)).unwrap();
        let c = t.verify(&tok, &[], 1_500).unwrap();
        assert_eq!(
            (c.namespace.as_str(), c.name.as_str(), c.uid.as_str()),
            ("ns", "bot", "uid-1")
        );
        assert_eq!(c.bound, Some(("pods".into(), "p1".into(), "uid-p".into())));
        assert_eq!(c.bound_objects().len(), 2);
        assert_eq!(t.verify(&tok, &[], 4_600), Err(TokenError::Expired));
        assert_eq!(t.verify(&tok, &[], 900), Err(TokenError::Expired));
        assert_eq!(
            t.verify(&tok, &["other".into()], 1_500),
            Err(TokenError::Audience)
        );
    }

    #[test]
    fn tampered_and_foreign_tokens_fail() {
        let t = ServiceAccountTokens::generate().unwrap();
        let other = ServiceAccountTokens::generate().unwrap();
        let tok = t.issue(&spec(1_000)).unwrap();
        assert_eq!(other.verify(&tok, &[], 1_500), Err(TokenError::Signature));
        // The genuine token verified (and so remembered) first: a forgery of it is still
        // checked on its own.
        assert!(t.verify(&tok, &[], 1_500).is_ok());
        // Claims rewritten to another ServiceAccount, signature kept.
        let parts: Vec<&str> = tok.split('.').collect();
        let mut claims: Value = serde_json::from_slice(&B64.decode(parts[1]).unwrap()).unwrap();
        claims["kubernetes.io"]["serviceaccount"]["name"] = "admin".into();
        let forged = format!(
            "{}.{}.{}",
            parts[0],
            B64.encode(claims.to_string()),
            parts[2]
        );
        assert_eq!(t.verify(&forged, &[], 1_500), Err(TokenError::Signature));
        // alg "none" is refused.
        let none = format!("{}.{}.", B64.encode(r#"{"alg":"none"}"#), parts[1]);
        assert_eq!(t.verify(&none, &[], 1_500), Err(TokenError::Signature));
        for junk in ["", "a.b", "a.b.c.d", "!!.??.**", "e30.e30.e30"] {
            assert!(t.verify(junk, &[], 1_500).is_err(), "{junk}");
        }
        assert!(t.jwk()["x"].as_str().is_some_and(|x| x.len() == 43));
    }

    #[test]
    fn remembered_tokens_are_checked_for_time_and_audience_at_every_use() {
        let t = ServiceAccountTokens::generate().unwrap();
        let aud = ["api".to_string()];
        let tok = t
            .issue(&TokenSpec {
                audiences: &aud,
                ..spec(1_000)
            })
            .unwrap();
        assert!(t.verify(&tok, &aud, 1_500).is_ok());
        assert_eq!(t.verify(&tok, &[], 1_500), Err(TokenError::Audience));
        assert_eq!(t.verify(&tok, &aud, 4_600), Err(TokenError::Expired));
        assert!(t.verify(&tok, &aud, 4_599).is_ok());
        // Past the memory's capacity it starts again, and what it forgot verifies anew.
        for _ in 0..VERIFIED_CAPACITY {
            // Each has its own `jti`, so each is another token.
            let other = t.issue(&spec(1_000)).unwrap();
            assert!(t.verify(&other, &[], 1_500).is_ok());
        }
        assert!(t.verified.lock().len() <= VERIFIED_CAPACITY);
        assert!(t.verify(&tok, &aud, 1_500).is_ok());
    }
}
