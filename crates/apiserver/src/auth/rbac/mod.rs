//! RBAC: the authorizer that reads Roles, ClusterRoles and their bindings
//! (`rbac.authorization.k8s.io/v1`), the default policy the server creates at start, the
//! aggregation of ClusterRoles, and the escalation check on writes of roles and bindings.
//!
//! Data flow: the four watch caches → [`snapshot::Snapshot`] (rebuilt, at most once per
//! change, by the first request that finds the caches moved on) → a decision per request.

pub mod bootstrap_policy;
pub mod escalation;
pub mod policy_rule;
pub mod snapshot;

use crate::auth::attributes::Attributes;
use crate::auth::user_info::UserInfo;
use crate::cacher::Cacher;
use parking_lot::{Mutex, RwLock};
use policy_rule::PolicyRule;
use snapshot::{Snapshot, Stored};
use std::sync::Arc;

/// The four RBAC resources, in the order [`Rbac::new`] takes their caches.
pub const RESOURCES: [&str; 4] = [
    "clusterroles",
    "roles",
    "clusterrolebindings",
    "rolebindings",
];

/// How long after a role or binding was written a refusal waits for the caches to hold it.
const CATCH_UP_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// The RBAC authorizer over the RBAC watch caches.
pub struct Rbac {
    caches: [Arc<Cacher>; 4],
    /// The newest index and the cache generations it was built at.
    current: RwLock<(Option<[u64; 4]>, Arc<Snapshot>)>,
    /// Held while an index is built, so that it is built once.
    building: Mutex<()>,
    /// When this server last admitted a write of a role or binding.
    last_write: Mutex<Option<std::time::Instant>>,
}

impl std::fmt::Debug for Rbac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rbac").finish_non_exhaustive()
    }
}

/// Why a request was allowed (the binding and role that allowed it) or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// True if allowed.
    pub allowed: bool,
    /// Kubernetes' wording of the reason (empty when nothing allowed the request).
    pub reason: String,
}

impl Rbac {
    /// An authorizer over the caches of [`RESOURCES`], in that order.
    pub fn new(caches: [Arc<Cacher>; 4]) -> Rbac {
        Rbac {
            caches,
            current: RwLock::new((None, Arc::new(Snapshot::default()))),
            building: Mutex::new(()),
            last_write: Mutex::new(None),
        }
    }

    /// The index as of the caches' newest state (rebuilt if any of them changed).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        let versions = self.caches.each_ref().map(|c| c.generation());
        {
            let cur = self.current.read();
            if cur.0 == Some(versions) {
                return cur.1.clone();
            }
        }
        // Built outside the read path: requests meanwhile use the previous index.
        let _building = self.building.lock();
        let versions = self.caches.each_ref().map(|c| c.generation());
        {
            let cur = self.current.read();
            if cur.0 == Some(versions) {
                return cur.1.clone();
            }
        }
        let objects = self.caches.each_ref().map(|c| c.objects());
        let stored = |i: usize| -> Vec<Stored<'_>> {
            objects[i]
                .iter()
                .filter_map(|o| {
                    Some(Stored {
                        namespace: &o.namespace,
                        name: &o.name,
                        labels: &o.labels,
                        json: serde_json::from_slice(&o.json).ok()?,
                    })
                })
                .collect()
        };
        let snap = Arc::new(Snapshot::build(stored(0), stored(1), stored(2), stored(3)));
        *self.current.write() = (Some(versions), snap.clone());
        snap
    }

    /// Notes that a role or binding is being written through this server: for a while,
    /// refusals wait for the caches to hold it ([`Rbac::catch_up`]).
    pub fn note_write(&self) {
        *self.last_write.lock() = Some(std::time::Instant::now());
    }

    /// Waits (bounded) until the RBAC caches hold every change storage has committed, so
    /// that a decision made next sees a role or binding written a moment ago.
    ///
    /// Only within a short window after this server admitted a write of a role or binding:
    /// otherwise a refusal costs nothing more (and refused requests cannot make the server
    /// read storage).
    pub async fn catch_up(&self) {
        let recent = self
            .last_write
            .lock()
            .is_some_and(|t| t.elapsed() < CATCH_UP_WINDOW);
        if !recent {
            return;
        }
        for c in &self.caches {
            if let Err(e) = c.wait_consistent().await {
                tracing::debug!("RBAC cache behind storage: {}", e.message);
            }
        }
    }

    /// Decides `attrs` for `user`.
    pub fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        let snap = self.snapshot();
        match snap.find_rule(user, &attrs.namespace, |r| r.allows(attrs)) {
            Some((binding, role, cluster)) => {
                let (kind, name) = match role {
                    snapshot::RoleRef::Cluster(n) => ("ClusterRole", n),
                    snapshot::RoleRef::Namespaced(n) => ("Role", n),
                };
                let reason = if cluster {
                    format!("RBAC: allowed by ClusterRoleBinding \"{binding}\" of {kind} \"{name}\" to {}", user.name)
                } else {
                    format!(
                        "RBAC: allowed by RoleBinding \"{binding}/{}\" of {kind} \"{name}\" to {}",
                        attrs.namespace, user.name
                    )
                };
                Decision {
                    allowed: true,
                    reason,
                }
            }
            None => Decision {
                allowed: false,
                reason: String::new(),
            },
        }
    }

    /// Every rule that applies to `user` in `namespace` (cluster-wide ones included).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Vec<PolicyRule> {
        self.snapshot().rules_for(user, namespace)
    }
}
