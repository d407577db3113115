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
    /// Every served custom resource version, ordered by group, then version as Kubernetes
    /// ranks them (the first is the group's preferred one: see [`version_rank`]), then
    /// plural.
    pub infos: Vec<&'static ResourceInfo>,
}

impl Served {
    /// A set serving `infos`.
    pub fn new(mut infos: Vec<&'static ResourceInfo>) -> Served {
        infos.sort_by(|a, b| {
            (a.group, version_rank(a.version), a.resource).cmp(&(
                b.group,
                version_rank(b.version),
                b.resource,
            ))
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

/// How Kubernetes ranks API versions, best first: GA (`v2` before `v1`), then beta, then
/// alpha (each by major, then minor, descending), then any other name alphabetically.
pub fn version_rank(version: &str) -> (u8, std::cmp::Reverse<u64>, std::cmp::Reverse<u64>, String) {
    use std::cmp::Reverse;
    let other = (3, Reverse(0), Reverse(0), version.to_string());
    let Some(rest) = version.strip_prefix('v') else {
        return other;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let Ok(major) = rest[..digits].parse::<u64>() else {
        return other;
    };
    let tail = &rest[digits..];
    let (stage, minor) = if tail.is_empty() {
        (0, "0")
    } else if let Some(m) = tail.strip_prefix("beta") {
        (1, m)
    } else if let Some(m) = tail.strip_prefix("alpha") {
        (2, m)
    } else {
        return other;
    };
    match minor.parse::<u64>() {
        Ok(minor) => (stage, Reverse(major), Reverse(minor), String::new()),
        _ => other,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_rank_as_in_kubernetes() {
        let mut v = vec![
            "v1alpha1",
            "v1",
            "v11alpha2",
            "foo1",
            "v10beta3",
            "v2",
            "v1beta1",
            "v12alpha1",
            "v10",
            "foo10",
            "v3beta1",
            "v1beta2",
        ];
        v.sort_by_key(|x| version_rank(x));
        assert_eq!(
            v,
            [
                "v10",
                "v2",
                "v1",
                "v10beta3",
                "v3beta1",
                "v1beta2",
                "v1beta1",
                "v12alpha1",
                "v11alpha2",
                "v1alpha1",
                "foo1",
                "foo10"
            ]
        );
    }
}
