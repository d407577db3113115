//! The set of custom resources a server serves right now, published whole by the CRD
//! controller and read by routing, discovery and the handlers without locks held across
//! awaits: a reader takes a snapshot ([`CustomResources::snapshot`]) and keeps using it.

use super::super::resources::{ResourceInfo, RESOURCES};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;

/// One published set of served custom resources.
#[derive(Debug, Default)]
pub struct Served {
    /// By plural name (looked up with a borrowed `&str`, no key built per request).
    by_plural: HashMap<String, Vec<&'static ResourceInfo>>,
    /// Every served custom resource version, ordered by group, then version, then plural.
    pub infos: Vec<&'static ResourceInfo>,
}

impl Served {
    /// A set serving `infos`.
    pub fn new(mut infos: Vec<&'static ResourceInfo>) -> Served {
        infos.sort_by(|a, b| {
            (a.group, a.version, a.resource).cmp(&(b.group, b.version, b.resource))
        });
        let mut by_plural: HashMap<String, Vec<&'static ResourceInfo>> = HashMap::new();
        for i in &infos {
            by_plural
                .entry(i.resource.to_string())
                .or_default()
                .push(*i);
        }
        Served { by_plural, infos }
    }

    /// The custom resource at `group`/`version`/`resource`, if served.
    pub fn find(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Option<&'static ResourceInfo> {
        self.by_plural
            .get(resource)?
            .iter()
            .find(|i| i.group == group && i.version == version)
            .copied()
    }
}

/// The served custom resources of one server.
#[derive(Debug, Default)]
pub struct CustomResources {
    current: RwLock<Arc<Served>>,
}

impl CustomResources {
    /// The set served now. It does not change under the caller.
    pub fn snapshot(&self) -> Arc<Served> {
        self.current.read().clone()
    }

    /// Replaces the served set.
    pub fn publish(&self, served: Served) {
        *self.current.write() = Arc::new(served);
    }

    /// A built-in resource, else a served custom one, at `group`/`version`/`resource`.
    pub fn find(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Option<&'static ResourceInfo> {
        super::super::resources::find(group, version, resource)
            .or_else(|| self.current.read().find(group, version, resource))
    }

    /// Every served resource: the built-in ones in discovery order, then the custom ones.
    pub fn all(&self) -> Vec<&'static ResourceInfo> {
        let custom = self.snapshot();
        RESOURCES
            .iter()
            .chain(custom.infos.iter().copied())
            .collect()
    }

    /// The distinct (group, version) pairs served, built-in first, in order.
    pub fn group_versions(&self) -> Vec<(&'static str, &'static str)> {
        let mut out = super::super::resources::group_versions();
        for i in &self.snapshot().infos {
            if !out.contains(&(i.group, i.version)) {
                out.push((i.group, i.version));
            }
        }
        out
    }
}
