//! ServiceAccount tokens: the TokenRequest API (`POST .../serviceaccounts/{name}/token`,
//! what `kubectl create token` calls) and the check of a presented token, which holds only
//! while the ServiceAccount (and the pod or secret the token is bound to) still exists with
//! the uid the token names.

use super::state::{ApiServer, WriteOptions};
use super::{decode_typed, json_response, RequestInfo};
use crate::auth::authenticator::ServiceAccountAuthenticator;
use crate::auth::service_account_token::TokenSpec;
use crate::auth::user_info::UserInfo;
use crate::encoding::body::Body;
use crate::registry::resources;
use api::Status;
use bytes::Bytes;
use http::Response;
use serde_json::{json, Value};

/// A token's lifetime when the request names none, in seconds (kube-apiserver's default).
const DEFAULT_EXPIRATION: i64 = 3600;
/// The shortest lifetime a request may ask for.
const MIN_EXPIRATION: i64 = 600;
/// The longest lifetime a request may ask for (2^32 seconds, as kube-apiserver).
const MAX_EXPIRATION: i64 = 1 << 32;

/// The uid of object `name` of `resource` in `namespace`, as the cache has it now.
fn cached_uid(srv: &ApiServer, resource: &str, namespace: &str, name: &str) -> Option<String> {
    let info = resources::find("", "v1", resource)?;
    let cached = srv
        .cacher(info)
        .ok()?
        .get_cached(&info.object_key(namespace, name))?;
    #[derive(serde::Deserialize)]
    struct Meta {
        uid: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Obj {
        metadata: Meta,
    }
    serde_json::from_slice::<Obj>(&cached.json)
        .ok()?
        .metadata
        .uid
}

/// The ServiceAccount pod `namespace/name` runs as (`default` when its spec names none).
fn pod_service_account(srv: &ApiServer, namespace: &str, name: &str) -> Option<String> {
    let info = resources::find("", "v1", "pods")?;
    let cached = srv
        .cacher(info)
        .ok()?
        .get_cached(&info.object_key(namespace, name))?;
    let pod: Value = serde_json::from_slice(&cached.json).ok()?;
    Some(
        pod.pointer("/spec/serviceAccountName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("default")
            .to_string(),
    )
}

impl ServiceAccountAuthenticator for ApiServer {
    fn authenticate_token(&self, token: &str) -> Option<UserInfo> {
        let claims = self
            .service_account_tokens()
            .verify(token, &[], api::time::unix_now())
            .map_err(|e| tracing::debug!("service account token refused: {e}"))
            .ok()?;
        for (resource, ns, name, uid) in claims.bound_objects() {
            if cached_uid(self, resource, ns, name).as_deref() != Some(uid) {
                tracing::debug!(
                    resource,
                    ns,
                    name,
                    "service account token names an object that is gone"
                );
                return None;
            }
        }
        let mut user = UserInfo::service_account(&claims.namespace, &claims.name, &claims.uid);
        if let Some((res, name, uid)) = &claims.bound {
            let kind = if res == "pods" { "pod" } else { "secret" };
            user.extra.insert(
                format!("authentication.kubernetes.io/{kind}-name"),
                vec![name.clone()],
            );
            user.extra.insert(
                format!("authentication.kubernetes.io/{kind}-uid"),
                vec![uid.clone()],
            );
        }
        if !claims.id.is_empty() {
            user.extra.insert(
                "authentication.kubernetes.io/credential-id".into(),
                vec![format!("JTI={}", claims.id)],
            );
        }
        Some(user)
    }
}

/// Handles a TokenRequest `body` for `req`'s ServiceAccount. Answers 201 with the request,
/// its `spec` completed and `status.token` and `status.expirationTimestamp` set.
pub async fn create_token(
    srv: &ApiServer,
    req: &RequestInfo,
    body: Bytes,
    _wopts: &WriteOptions,
) -> Result<Response<Body>, Status> {
    // Typed decoding has checked the shape: spec, boundObjectRef and metadata are objects
    // (or absent), so the indexing below cannot meet a scalar.
    let mut tr = Value::Object(decode_typed::<
        k8s_openapi::api::authentication::v1::TokenRequest,
    >(&body, &["authentication.k8s.io/v1"], "TokenRequest")?);
    tr["apiVersion"] = json!("authentication.k8s.io/v1");
    tr["kind"] = json!("TokenRequest");
    let name = req.require_name("POST")?.to_string();
    let ns = req.namespace.clone().unwrap_or_default();
    let sa_uid = cached_uid(srv, "serviceaccounts", &ns, &name)
        .ok_or_else(|| Status::not_found("serviceaccounts", &name))?;
    let spec = tr.get("spec").cloned().unwrap_or(Value::Null);
    let expiration = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_EXPIRATION);
    if !(MIN_EXPIRATION..=MAX_EXPIRATION).contains(&expiration) {
        return Err(Status::invalid(
            "TokenRequest",
            &name,
            "spec.expirationSeconds",
            &format!("may not specify a duration less than {MIN_EXPIRATION} seconds or greater than {MAX_EXPIRATION} seconds"),
        ));
    }
    let audiences = crate::auth::rbac::policy_rule::strings(&spec, "audiences");
    let bound = match spec.get("boundObjectRef").filter(|b| !b.is_null()) {
        None => None,
        Some(b) => {
            let kind = b.get("kind").and_then(Value::as_str).unwrap_or("");
            let bname = b
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let resource = match kind {
                "Pod" => "pods",
                "Secret" => "secrets",
                _ => {
                    return Err(Status::invalid(
                        "TokenRequest",
                        &name,
                        "spec.boundObjectRef.kind",
                        &format!("supported values: \"Pod\", \"Secret\"; got {kind:?}"),
                    ))
                }
            };
            let uid = cached_uid(srv, resource, &ns, &bname)
                .ok_or_else(|| Status::not_found(resource, &bname))?;
            if kind == "Pod" && pod_service_account(srv, &ns, &bname).as_deref() != Some(&name) {
                return Err(Status::bad_request(format!(
                    "cannot bind token for serviceaccount {name:?} to pod running with different serviceaccount name."
                )));
            }
            if let Some(want) = b
                .get("uid")
                .and_then(Value::as_str)
                .filter(|u| !u.is_empty())
            {
                if want != uid {
                    return Err(Status::conflict(
                        resource,
                        &bname,
                        &format!("the UID in the bound object reference ({want}) does not match the UID in record ({uid})"),
                    ));
                }
            }
            Some((kind.to_string(), bname, uid))
        }
    };
    let now = api::time::unix_now();
    let token = srv
        .service_account_tokens()
        .issue(&TokenSpec {
            service_account: (&ns, &name, &sa_uid),
            bound: bound
                .as_ref()
                .map(|(k, n, u)| (k.as_str(), n.as_str(), u.as_str())),
            audiences: &audiences,
            now,
            expiration_seconds: expiration,
        })
        .map_err(Status::internal)?;
    let shown_audiences = if audiences.is_empty() {
        vec![crate::auth::service_account_token::ISSUER.to_string()]
    } else {
        audiences
    };
    tr["spec"]["audiences"] = json!(shown_audiences);
    tr["spec"]["expirationSeconds"] = json!(expiration);
    if let Some((_, _, uid)) = &bound {
        tr["spec"]["boundObjectRef"]["uid"] = json!(uid);
    }
    tr["metadata"]["name"] = json!(name);
    tr["metadata"]["namespace"] = json!(ns);
    tr["status"] = json!({
        "token": token,
        "expirationTimestamp": api::time::format_rfc3339(now + expiration),
    });
    Ok(json_response(
        201,
        serde_json::to_vec(&tr).unwrap_or_default(),
    ))
}
