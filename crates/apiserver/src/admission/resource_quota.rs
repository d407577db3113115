//! The ResourceQuota admission plugin: a create that would take a namespace past one of its
//! quotas is refused, and one that fits is charged to the quotas before it is written.
//!
//! For every quota of the namespace whose scopes select the object and whose `spec.hard`
//! names something the object uses (see [`api::quota::usage`]):
//! - a quota whose `status.used` does not count what the object uses yet (the
//!   ResourceQuota controller has not seen the quota) refuses the create: its usage is
//!   unknown;
//! - a pod must state every compute resource the quota limits (`requests.cpu`, …);
//! - `status.used` plus the object's usage must stay within `spec.hard`.
//!
//! The new `status.used` of every such quota is then written with a compare-and-swap on
//! the stored quota, re-read and re-decided on a conflict, one namespace's charges at a
//! time, so two creates cannot both take a quota's last unit. Usage is only ever added
//! here: the controller recomputes it (and so gives back what deleted objects and creates
//! that failed after their charge held). A dry-run create is decided but not charged.

use super::any_in_namespace;
use crate::handlers::state::ApiServer;
use crate::handlers::{decode_stored, encode_for_storage, storage_error};
use crate::registry::namespace_lifecycle::forbidden;
use crate::registry::ResourceInfo;
use api::quota::{self, ResourceList};
use api::{Object, Status};
use serde_json::Value;
use storage::StorageError;

/// How many times a charge is re-decided after losing a compare-and-swap.
const MAX_CONFLICTS: usize = 16;

/// Charges `obj`, about to be created in `ns`, to the namespace's quotas.
///
/// # Errors
/// 403 Forbidden (`exceeded quota`, `must specify`, `status unknown`); 409 after repeated
/// conflicts; 500 when storage fails.
pub async fn charge(
    srv: &ApiServer,
    info: &ResourceInfo,
    ns: &str,
    obj: &Object,
    dry_run: bool,
) -> Result<(), Status> {
    if ns.is_empty() {
        return Ok(());
    }
    if !any_in_namespace(srv, "resourcequotas", ns) {
        return Ok(());
    }
    let Some(quotas_info) = crate::registry::resources::find("", "v1", "resourcequotas") else {
        return Ok(());
    };
    let object = Value::Object(obj.0.clone());
    let usage = quota::usage(info.group, info.resource, &object);
    let _one_at_a_time = srv.quota_lock(ns).lock().await;
    for _ in 0..MAX_CONFLICTS {
        // Fresh from storage: the cache may not hold the last charge yet.
        let quotas = stored_quotas(srv, quotas_info, ns).await?;
        let mut writes = Vec::new();
        for (kv, q) in quotas {
            let Some(new_used) = decide(info, obj.name(), &q, &object, &usage)? else {
                continue;
            };
            writes.push((kv, q, new_used));
        }
        if dry_run || writes.is_empty() {
            return Ok(());
        }
        let mut lost = false;
        for (kv, q, new_used) in writes {
            let mut q = q;
            set_used(&mut q, &new_used);
            let qname = q.name().to_string();
            let value = encode_for_storage(&mut q)?;
            match srv
                .storage()
                .update(kv.key.clone(), value, kv.mod_revision)
                .await
            {
                Ok(_) => {}
                Err(StorageError::Conflict { .. }) | Err(StorageError::NotFound) => {
                    lost = true;
                    break;
                }
                Err(e) => return Err(storage_error(quotas_info, &qname, e)),
            }
        }
        if !lost {
            return Ok(());
        }
    }
    Err(Status::conflict(
        info.resource,
        obj.name(),
        "the namespace's resource quotas kept changing; please retry",
    ))
}

/// The namespace's quotas as stored now.
async fn stored_quotas(
    srv: &ApiServer,
    info: &'static ResourceInfo,
    ns: &str,
) -> Result<Vec<(storage::KeyValue, Object)>, Status> {
    let prefix = format!("{}{ns}/", info.key_prefix());
    let resp = srv
        .storage()
        .range(storage::RangeRequest::prefix(prefix.into_bytes()))
        .await
        .map_err(|e| storage_error(info, "", e))?;
    let mut out = Vec::with_capacity(resp.kvs.len());
    for kv in resp.kvs {
        let obj = decode_stored(info, &kv)?;
        out.push((kv, obj));
    }
    Ok(out)
}

/// What quota `q` says of object `object` (named `name`, using `usage`): `None` when it
/// does not constrain it, else its new `status.used`.
fn decide(
    info: &ResourceInfo,
    name: &str,
    q: &Object,
    object: &Value,
    usage: &ResourceList,
) -> Result<Option<ResourceList>, Status> {
    let spec = q.0.get("spec");
    let hard = quota::parse_list(spec.and_then(|s| s.get("hard")));
    if !quota::scopes_match(spec, info.group, info.resource, object) {
        return Ok(None);
    }
    let touched: Vec<&String> = hard
        .keys()
        .filter(|k| usage.contains_key(*k) || compute_name(info, k))
        .collect();
    if touched.is_empty() {
        return Ok(None);
    }
    let qname = q.name();
    let status = q.0.get("status");
    let used = quota::parse_list(status.and_then(|s| s.get("used")));
    if touched.iter().any(|k| !used.contains_key(*k)) {
        let names: Vec<&str> = touched.iter().map(|k| k.as_str()).collect();
        return Err(forbidden(
            info,
            name,
            &format!(
                "status unknown for quota: {qname}, resources: {}",
                names.join(",")
            ),
        ));
    }
    if info.group.is_empty() && info.resource == "pods" {
        let missing = quota::missing_compute(&hard, object);
        if !missing.is_empty() {
            return Err(forbidden(
                info,
                name,
                &format!("failed quota: {qname}: must specify {}", missing.join("; ")),
            ));
        }
    }
    let mut new_used = used.clone();
    let mut exceeded = Vec::new();
    for k in &touched {
        let want = usage.get(*k).copied().unwrap_or(0);
        let now = used.get(*k).copied().unwrap_or(0);
        let after = now.saturating_add(want);
        new_used.insert((*k).clone(), after);
        if want > 0 && after > hard[*k] {
            exceeded.push(*k);
        }
    }
    if !exceeded.is_empty() {
        let show = |l: &ResourceList| {
            exceeded
                .iter()
                .map(|k| {
                    let v = l.get(*k).copied().unwrap_or(0);
                    format!("{k}={}", api::quantity::format(v, quota::is_milli(k)))
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        return Err(forbidden(
            info,
            name,
            &format!(
                "exceeded quota: {qname}, requested: {}, used: {}, limited: {}",
                show(usage),
                show(&used),
                show(&hard)
            ),
        ));
    }
    Ok(Some(new_used))
}

/// Whether quota name `k` is a pod compute resource (a pod that does not state it is
/// refused rather than let through uncounted).
fn compute_name(info: &ResourceInfo, k: &str) -> bool {
    info.group.is_empty()
        && info.resource == "pods"
        && ["cpu", "memory", "ephemeral-storage"]
            .iter()
            .any(|r| k == *r || k == format!("requests.{r}") || k == format!("limits.{r}"))
}

/// Writes `used` as `q`'s `status.used`.
fn set_used(q: &mut Object, used: &ResourceList) {
    let status =
        q.0.entry("status")
            .or_insert_with(|| Value::Object(Default::default()));
    if let Some(status) = status.as_object_mut() {
        status.insert("used".into(), quota::format_list(used));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> &'static ResourceInfo {
        crate::registry::resources::find("", "v1", "pods").unwrap()
    }

    fn quota_obj(hard: Value, used: Value) -> Object {
        Object::from_value(json!({"metadata": {"name": "q", "namespace": "ns"},
            "spec": {"hard": hard}, "status": {"hard": hard, "used": used}}))
        .unwrap()
    }

    #[test]
    fn a_pod_that_fits_is_charged_and_one_that_does_not_is_refused() {
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "500m"}}}]}});
        let usage = quota::usage("", "pods", &pod);
        let q = quota_obj(
            json!({"pods": "2", "requests.cpu": "1"}),
            json!({"pods": "1", "requests.cpu": "500m"}),
        );
        let used = decide(pods(), "p", &q, &pod, &usage).unwrap().unwrap();
        assert_eq!((used["pods"], used["requests.cpu"]), (2, 1000));
        let full = quota_obj(
            json!({"pods": "2", "requests.cpu": "1"}),
            json!({"pods": "1", "requests.cpu": "800m"}),
        );
        let err = decide(pods(), "p", &full, &pod, &usage).unwrap_err();
        assert_eq!(err.reason, api::Reason::Forbidden);
        assert_eq!(
            err.message,
            "pods \"p\" is forbidden: exceeded quota: q, requested: requests.cpu=500m, used: requests.cpu=800m, limited: requests.cpu=1"
        );
    }

    #[test]
    fn unknown_status_missing_requests_and_unrelated_quotas() {
        let pod = json!({"spec": {"containers": [{"name": "a"}]}});
        let usage = quota::usage("", "pods", &pod);
        let fresh =
            Object::from_value(json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "1"}}}))
                .unwrap();
        let err = decide(pods(), "p", &fresh, &pod, &usage).unwrap_err();
        assert!(
            err.message
                .ends_with("status unknown for quota: q, resources: pods"),
            "{}",
            err.message
        );
        let cpu = quota_obj(json!({"limits.cpu": "1"}), json!({"limits.cpu": "0"}));
        let err = decide(pods(), "p", &cpu, &pod, &usage).unwrap_err();
        assert!(
            err.message
                .ends_with("failed quota: q: must specify limits.cpu for: a"),
            "{}",
            err.message
        );
        let secrets = quota_obj(json!({"secrets": "1"}), json!({"secrets": "1"}));
        assert!(decide(pods(), "p", &secrets, &pod, &usage)
            .unwrap()
            .is_none());
    }
}
