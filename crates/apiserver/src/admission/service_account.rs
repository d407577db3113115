//! The ServiceAccount admission plugin: a pod runs as a ServiceAccount that exists, and
//! (unless it or its account opts out) every container mounts the account's token.
//!
//! A pod without `spec.serviceAccountName` gets `default`. The account is looked up in the
//! watch cache, then in storage — for `default`, which a controller creates with its
//! namespace, a few times over about a second, as kube-apiserver does. A pod whose account
//! does not exist is refused (403). Mirror pods (static pods a node agent reports) may not
//! name an account and get no token.
//!
//! The token arrives as kube-apiserver 1.22+ projects it: a `kube-api-access-XXXXX`
//! projected volume of a bound ServiceAccount token (`token`, expiring after 3607 s), the
//! `kube-root-ca.crt` ConfigMap's `ca.crt` and the pod's namespace, mounted read-only at
//! [`TOKEN_MOUNT_PATH`] in every container and init container that does not already mount
//! something there. No volume is added when `automountServiceAccountToken` is false on the
//! pod, or on the account and not set on the pod.

use crate::handlers::state::ApiServer;
use crate::registry::namespace_lifecycle::forbidden;
use crate::registry::ResourceInfo;
use api::{Object, Status};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// The account a pod without one runs as.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// Where containers find the token, the CA bundle and the namespace.
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The prefix of the projected token volume's name.
pub const TOKEN_VOLUME_PREFIX: &str = "kube-api-access-";

/// The lifetime kube-apiserver asks for the projected token (an hour and seven seconds, so
/// that a token is recognisably one of these).
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3607;

/// The annotation of a mirror pod.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// How often the `default` account is looked for before the pod is refused, and the pause
/// between tries.
const DEFAULT_ACCOUNT_TRIES: usize = 10;
const RETRY_PAUSE: Duration = Duration::from_millis(150);

/// Admits pod `obj` about to be created in `ns`: sets its ServiceAccount and adds the
/// token volume.
///
/// # Errors
/// 403 when the account does not exist or a mirror pod names one; 500 when storage fails.
pub async fn admit_pod(
    srv: &ApiServer,
    info: &ResourceInfo,
    ns: &str,
    obj: &mut Object,
) -> Result<(), Status> {
    let name = obj.name().to_string();
    let mirror = obj
        .0
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(MIRROR_POD_ANNOTATION))
        .is_some();
    let Some(spec) = obj.0.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let named = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| {
            spec.get("serviceAccount")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        })
        .map(str::to_string);
    if mirror {
        if named.is_some() {
            return Err(forbidden(
                info,
                &name,
                "a mirror pod may not reference service accounts",
            ));
        }
        return Ok(());
    }
    let account_name = named.unwrap_or_else(|| DEFAULT_SERVICE_ACCOUNT.to_string());
    spec.insert("serviceAccountName".into(), json!(account_name));
    // The field's deprecated twin, which the v1 API keeps equal to it.
    spec.insert("serviceAccount".into(), json!(account_name));
    let Some(account) = lookup(srv, ns, &account_name).await? else {
        return Err(forbidden(
            info,
            &name,
            &format!(
                "error looking up service account {ns}/{account_name}: serviceaccount \"{account_name}\" not found"
            ),
        ));
    };
    let automount = match spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
    {
        Some(pod_says) => pod_says,
        None => account
            .get("automountServiceAccountToken")
            .and_then(Value::as_bool)
            .unwrap_or(true),
    };
    if automount {
        mount_token(spec);
    }
    Ok(())
}

/// The account `name` in `ns` from the cache, else storage (retried for `default`).
async fn lookup(srv: &ApiServer, ns: &str, name: &str) -> Result<Option<Value>, Status> {
    let Some(info) = crate::registry::resources::find("", "v1", "serviceaccounts") else {
        return Ok(None);
    };
    let key = info.object_key(ns, name);
    if let Some(cached) = srv.cacher(info)?.get_cached(&key) {
        return Ok(serde_json::from_slice(&cached.json).ok());
    }
    let tries = if name == DEFAULT_SERVICE_ACCOUNT {
        DEFAULT_ACCOUNT_TRIES
    } else {
        1
    };
    let storage_key = format!("{}{key}", info.key_prefix());
    for attempt in 0..tries {
        if attempt > 0 {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        let stored = srv
            .storage()
            .get(storage_key.as_bytes())
            .await
            .map_err(|e| crate::handlers::storage_error(info, name, e))?;
        if let Some(kv) = stored {
            let obj = crate::handlers::decode_stored(info, &kv)?;
            return Ok(Some(Value::Object(obj.0)));
        }
    }
    Ok(None)
}

/// Adds the token volume (unless the pod has one) and its mount to every container that
/// has nothing mounted at [`TOKEN_MOUNT_PATH`].
fn mount_token(spec: &mut Map<String, Value>) {
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .filter_map(|v| v.get("name").and_then(Value::as_str))
                .find(|n| n.starts_with(TOKEN_VOLUME_PREFIX))
                .map(str::to_string)
        });
    let volume_name = existing
        .clone()
        .unwrap_or_else(|| crate::registry::strategy::generate_name(TOKEN_VOLUME_PREFIX));
    let mut mounted = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
            let Some(mounts) = mounts.as_array_mut() else {
                continue;
            };
            let taken = mounts
                .iter()
                .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(TOKEN_MOUNT_PATH));
            if !taken {
                mounts.push(json!({
                    "name": volume_name,
                    "readOnly": true,
                    "mountPath": TOKEN_MOUNT_PATH,
                }));
                mounted = true;
            }
        }
    }
    if existing.is_some() || !mounted {
        return;
    }
    let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
    if let Some(volumes) = volumes.as_array_mut() {
        volumes.push(token_volume(&volume_name));
    }
}

/// The projected volume of a pod's token, CA bundle and namespace.
pub fn token_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ],
            "defaultMode": 420
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn every_container_mounts_one_projected_volume() {
        let mut s = spec(json!({
            "initContainers": [{"name": "i"}],
            "containers": [{"name": "a"}, {"name": "b", "volumeMounts": [{"name": "mine", "mountPath": TOKEN_MOUNT_PATH}]}]
        }));
        mount_token(&mut s);
        let volumes = s["volumes"].as_array().cloned().unwrap_or_default();
        assert_eq!(volumes.len(), 1);
        let name = volumes[0]["name"].as_str().unwrap_or("");
        assert!(
            name.starts_with(TOKEN_VOLUME_PREFIX) && name.len() == TOKEN_VOLUME_PREFIX.len() + 5
        );
        assert_eq!(
            volumes[0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3607
        );
        assert_eq!(s["initContainers"][0]["volumeMounts"][0]["name"], name);
        assert_eq!(s["containers"][0]["volumeMounts"][0]["readOnly"], true);
        // A container with its own mount at the path keeps it alone.
        assert_eq!(
            s["containers"][1]["volumeMounts"].as_array().map(Vec::len),
            Some(1)
        );
        // Admitting again (an existing volume) adds nothing.
        let before = s.clone();
        mount_token(&mut s);
        assert_eq!(s, before);
    }

    #[test]
    fn no_volume_when_every_container_has_its_own_mount() {
        let mut s = spec(json!({
            "containers": [{"name": "a", "volumeMounts": [{"name": "mine", "mountPath": TOKEN_MOUNT_PATH}]}]
        }));
        mount_token(&mut s);
        assert!(s.get("volumes").is_none());
    }
}
