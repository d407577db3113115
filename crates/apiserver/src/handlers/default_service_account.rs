//! Every active namespace has a `default` ServiceAccount, kept by the server itself.
//!
//! kube-apiserver leaves this to kube-controller-manager's ServiceAccount controller, and
//! refuses pods in a namespace that has no `default` account yet. `listwatch serve` runs
//! without a controller-manager, so the server keeps the accounts itself: a task woken by
//! changes of the Namespace and ServiceAccount caches (not by progress notifications, which
//! move no generation) creates the `default` account of every `Active` namespace whose cache
//! lacks it. Under `listwatch up` the controller-manager's controller does the same; whoever
//! is second finds the account there. The ServiceAccount admission plugin waits about a
//! second for the account of a namespace created a moment ago.

use super::state::ApiServer;
use crate::admission::service_account::DEFAULT_SERVICE_ACCOUNT;
use crate::registry::ResourceInfo;
use serde_json::json;
use std::sync::Arc;

/// Creates the missing accounts once (so that a server returned by [`ApiServer::new`] has
/// made its own writes), then starts the task; it stops when the server is dropped.
pub async fn start(srv: &Arc<ApiServer>) {
    let (Some(namespaces), Some(accounts)) = (
        crate::registry::resources::find("", "v1", "namespaces"),
        crate::registry::resources::find("", "v1", "serviceaccounts"),
    ) else {
        return;
    };
    let (Ok(ns_cache), Ok(sa_cache)) = (srv.cacher(namespaces), srv.cacher(accounts)) else {
        return;
    };
    ensure(srv, namespaces, accounts).await;
    // The task holds no cache and no server between wake-ups: a dropped server releases its
    // storage, and the dropped caches end the task.
    let mut ns_changes = ns_cache.changes();
    let mut sa_changes = sa_cache.changes();
    drop((ns_cache, sa_cache));
    let weak = Arc::downgrade(srv);
    tokio::spawn(async move {
        let mut seen = (u64::MAX, u64::MAX);
        loop {
            {
                let Some(srv) = weak.upgrade() else { return };
                let (Ok(n), Ok(a)) = (srv.cacher(namespaces), srv.cacher(accounts)) else {
                    return;
                };
                let now = (n.generation(), a.generation());
                if now != seen {
                    seen = now;
                    ensure(&srv, namespaces, accounts).await;
                }
            }
            tokio::select! {
                r = ns_changes.changed() => if r.is_err() { return },
                r = sa_changes.changed() => if r.is_err() { return },
            }
        }
    });
}

/// Creates the missing `default` accounts of active namespaces.
async fn ensure(
    srv: &ApiServer,
    namespaces: &'static ResourceInfo,
    accounts: &'static ResourceInfo,
) {
    let (Ok(ns_cache), Ok(sa_cache)) = (srv.cacher(namespaces), srv.cacher(accounts)) else {
        return;
    };
    for ns in ns_cache.objects() {
        if ns.field(namespaces, "status.phase").unwrap_or("") == "Terminating" {
            continue;
        }
        let key = accounts.object_key(&ns.name, DEFAULT_SERVICE_ACCOUNT);
        if sa_cache.get_cached(&key).is_some() {
            continue;
        }
        let Some(mut obj) = api::Object::from_value(json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DEFAULT_SERVICE_ACCOUNT, "namespace": ns.name},
        })) else {
            continue;
        };
        if let Err(e) = crate::registry::strategy::prepare_for_create(accounts, &mut obj, &ns.name)
        {
            tracing::warn!(namespace = %ns.name, "default ServiceAccount: {}", e.message);
            continue;
        }
        let Ok(value) = super::encode_for_storage(&mut obj) else {
            continue;
        };
        let storage_key = format!("{}{key}", accounts.key_prefix());
        match srv
            .storage()
            .create(storage_key.into_bytes().into(), value)
            .await
        {
            Ok(_) | Err(storage::StorageError::AlreadyExists) => {}
            Err(e) => {
                tracing::warn!(namespace = %ns.name, "creating the default ServiceAccount: {e}")
            }
        }
    }
}
