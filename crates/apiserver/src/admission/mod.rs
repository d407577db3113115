//! Admission: the built-in plugins that read other objects to change or refuse a create.
//!
//! Data flow, as kube-apiserver orders its plugins: after the create strategy has defaulted
//! an object, [`mutate_create`] runs the mutating plugins — [`limit_ranger`] fills in the
//! default requests and limits of the namespace's LimitRanges and [`service_account`] gives
//! a pod its ServiceAccount and the projected volume of its token — and then
//! [`limit_ranger::validate_create`] refuses what breaks a LimitRange's minimum, maximum or
//! ratio. Once the object has passed validation, authorization's write checks and the
//! namespace lifecycle, [`resource_quota::charge`] runs last: it refuses a create that
//! would exceed a ResourceQuota, and otherwise records the new usage in the quotas'
//! `status.used` (compare-and-swap on storage) before the object is written, so that two
//! creates racing for the last unit of a quota cannot both pass. Just before it (and
//! before every update and delete), [`check_policies`] runs the ValidatingAdmissionPolicies
//! that select the write ([`validating_admission_policy`]).
//!
//! The plugins read the watch caches (a namespace without LimitRanges or ResourceQuotas
//! costs one empty range lookup each) and storage where the cache may lag.

pub mod limit_ranger;
pub mod resource_quota;
pub mod service_account;
pub mod validating_admission_policy;

use crate::handlers::state::{ApiServer, WriteOptions};
use crate::handlers::RequestInfo;
use crate::registry::ResourceInfo;
use api::{Object, Status};
use std::collections::BTreeSet;
use validating_admission_policy::Operation;

/// The plugins that may be turned off (kube-apiserver's `--disable-admission-plugins`), by
/// kube-apiserver's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Plugin {
    /// [`limit_ranger`].
    LimitRanger,
    /// [`service_account`].
    ServiceAccount,
    /// [`resource_quota`].
    ResourceQuota,
}

impl Plugin {
    /// Every plugin, in the order they run.
    pub const ALL: [Plugin; 3] = [
        Plugin::LimitRanger,
        Plugin::ServiceAccount,
        Plugin::ResourceQuota,
    ];

    /// kube-apiserver's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Plugin::LimitRanger => "LimitRanger",
            Plugin::ServiceAccount => "ServiceAccount",
            Plugin::ResourceQuota => "ResourceQuota",
        }
    }
}

/// The plugins turned off; the default turns none off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Disabled(BTreeSet<Plugin>);

impl Disabled {
    /// Reads a comma-separated list of plugin names (`"ServiceAccount,ResourceQuota"`).
    ///
    /// # Errors
    /// A name that is not one of [`Plugin::ALL`], with the names that are.
    pub fn parse(list: &str) -> Result<Disabled, String> {
        let mut out = BTreeSet::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some(p) = Plugin::ALL.into_iter().find(|p| p.name() == name) else {
                let known: Vec<&str> = Plugin::ALL.iter().map(|p| p.name()).collect();
                return Err(format!(
                    "admission plugin {name:?} cannot be disabled (these can: {})",
                    known.join(", ")
                ));
            };
            out.insert(p);
        }
        Ok(Disabled(out))
    }

    /// Whether `plugin` runs.
    pub fn enabled(&self, plugin: Plugin) -> bool {
        !self.0.contains(&plugin)
    }
}

/// Runs the mutating admission plugins on `obj`, about to be created in `ns`.
///
/// # Errors
/// 403 Forbidden when a plugin refuses the object (a pod's ServiceAccount that does not
/// exist, a container outside a LimitRange).
pub async fn mutate_create(
    srv: &ApiServer,
    info: &ResourceInfo,
    ns: &str,
    obj: &mut Object,
) -> Result<(), Status> {
    if !info.group.is_empty() || info.custom.is_some() || ns.is_empty() {
        return Ok(());
    }
    let on = |p| srv.admission_disabled().enabled(p);
    let ranges = || match on(Plugin::LimitRanger) {
        true => limit_ranger::items(srv, ns),
        false => Vec::new(),
    };
    match info.resource {
        "pods" => {
            let ranges = ranges();
            limit_ranger::default_pod(&ranges, obj);
            if on(Plugin::ServiceAccount) {
                service_account::admit_pod(srv, info, ns, obj).await?;
            }
            limit_ranger::validate_create(&ranges, info, obj)
        }
        "persistentvolumeclaims" => limit_ranger::validate_create(&ranges(), info, obj),
        _ => Ok(()),
    }
}

/// Runs the validating plugins that come last, after validation and authorization:
/// [`check_policies`], then [`resource_quota::charge`].
///
/// # Errors
/// As those two.
pub async fn validate_create(
    srv: &ApiServer,
    req: &RequestInfo,
    ns: &str,
    obj: &Object,
    wopts: &WriteOptions,
) -> Result<(), Status> {
    check_policies(srv, req, Operation::Create, Some(obj), None, wopts).await?;
    if !srv.admission_disabled().enabled(Plugin::ResourceQuota) {
        return Ok(());
    }
    resource_quota::charge(srv, req.info, ns, obj, wopts.dry_run).await
}

/// The cached objects of core resource `resource` in `ns`, at most `limit` (0: all); empty
/// if the resource has no cache.
fn cached_items(
    srv: &ApiServer,
    resource: &str,
    ns: &str,
    limit: usize,
) -> Vec<std::sync::Arc<crate::cacher::CachedObject>> {
    let Some(info) = crate::registry::resources::find("", "v1", resource) else {
        return Vec::new();
    };
    let Ok(cacher) = srv.cacher(info) else {
        return Vec::new();
    };
    let filter = crate::cacher::filter::Filter::everything(info, Some(ns.to_string()));
    cacher.list_from_cache(&filter, "", limit).items
}

/// Lists the cached objects of a core resource in `ns` as JSON (empty if the resource has
/// no cache).
pub(crate) fn cached_in_namespace(
    srv: &ApiServer,
    resource: &str,
    ns: &str,
) -> Vec<serde_json::Value> {
    cached_items(srv, resource, ns, 0)
        .iter()
        .filter_map(|o| serde_json::from_slice(&o.json).ok())
        .collect()
}

/// Whether the cache holds any object of core resource `resource` in `ns` (nothing is
/// decoded).
pub(crate) fn any_in_namespace(srv: &ApiServer, resource: &str, ns: &str) -> bool {
    !cached_items(srv, resource, ns, 1).is_empty()
}

/// Runs the ValidatingAdmissionPolicies selecting a write of `req`'s resource: `op` on
/// `object` (as it would be stored; `None` for a delete) over `old` (as stored; `None` for a
/// create). Their warnings are added to the response's.
///
/// # Errors
/// The Status of a binding that denies the write.
pub async fn check_policies(
    srv: &ApiServer,
    req: &RequestInfo,
    op: Operation,
    object: Option<&Object>,
    old: Option<&Object>,
    wopts: &WriteOptions,
) -> Result<(), Status> {
    let name = object
        .or(old)
        .map(|o| o.name().to_string())
        .or_else(|| req.name.clone())
        .unwrap_or_default();
    let request = validating_admission_policy::Request {
        info: req.info,
        subresource: req.subresource.as_deref().unwrap_or(""),
        namespace: req.namespace.as_deref().unwrap_or(""),
        name: &name,
        operation: op,
        object: object.map(|o| &o.0),
        old_object: old.map(|o| &o.0),
        user: wopts.user.as_deref(),
        dry_run: wopts.dry_run,
    };
    let warnings = validating_admission_policy::admit(srv, &request).await?;
    if !warnings.is_empty() {
        wopts.warnings.lock().extend(warnings);
    }
    Ok(())
}
