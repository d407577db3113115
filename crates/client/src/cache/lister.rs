//! `Lister`: read-only queries over an informer's local cache.
//!
//! Listers never call the server: they read the [`Indexer`] the informer keeps up to date,
//! so answers are as fresh as the cache (check `has_synced` before trusting them to be
//! complete). Objects are shared `Arc`s and read-only; results come in no particular order.

use crate::cache::index::NAMESPACE_INDEX;
use crate::cache::key::key_for;
use crate::cache::store::{IndexError, Indexer};
use crate::object::KubeObject;
use api::labels::LabelSelector;
use std::collections::BTreeMap;
use std::sync::Arc;

fn selected<K: KubeObject>(obj: &K, selector: &LabelSelector) -> bool {
    if selector.is_empty() {
        return true;
    }
    match obj.labels() {
        Some(labels) => selector.matches(&labels),
        None => selector.matches(&BTreeMap::<String, String>::new()),
    }
}

/// Queries over a whole cache. Cheap to clone.
///
/// ```
/// use std::sync::Arc;
/// use client::cache::{Indexer, Lister};
/// use client::object::DynamicObject;
/// use client::LabelSelector;
///
/// let indexer = Arc::new(Indexer::<DynamicObject>::default());
/// for (name, app) in [("a", "web"), ("b", "db"), ("c", "web")] {
///     let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"prod","labels":{{"app":"{app}"}}}}}}"#);
///     indexer.add(Arc::new(DynamicObject::from_slice(json.as_bytes()).expect("valid JSON")));
/// }
/// let lister = Lister::new(indexer);
/// let web = LabelSelector::parse("app=web").expect("valid selector");
/// assert_eq!(lister.list(&web).len(), 2);
/// assert_eq!(lister.namespaced("prod").list(&LabelSelector::everything()).len(), 3);
/// assert!(lister.namespaced("dev").list(&web).is_empty());
/// ```
pub struct Lister<K> {
    indexer: Arc<Indexer<K>>,
}

impl<K> Clone for Lister<K> {
    fn clone(&self) -> Self {
        Lister {
            indexer: Arc::clone(&self.indexer),
        }
    }
}

impl<K: KubeObject> Lister<K> {
    /// A lister over `indexer`.
    pub fn new(indexer: Arc<Indexer<K>>) -> Lister<K> {
        Lister { indexer }
    }

    /// Every cached object whose labels match `selector` (an empty selector matches all).
    pub fn list(&self, selector: &LabelSelector) -> Vec<Arc<K>> {
        let mut all = self.indexer.list();
        all.retain(|o| selected(&**o, selector));
        all
    }

    /// The object `name` in `namespace` (`None` for cluster-scoped objects).
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        self.indexer.get_by_key(&key_for(namespace, name))
    }

    /// A view of one namespace.
    pub fn namespaced(&self, namespace: impl Into<String>) -> NamespaceLister<K> {
        NamespaceLister {
            indexer: Arc::clone(&self.indexer),
            namespace: namespace.into(),
        }
    }

    /// The objects whose index `index_name` produced `value`.
    pub fn by_index(&self, index_name: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        self.indexer.by_index(index_name, value)
    }
}

/// Queries within one namespace. Cheap to clone.
pub struct NamespaceLister<K> {
    indexer: Arc<Indexer<K>>,
    namespace: String,
}

impl<K> Clone for NamespaceLister<K> {
    fn clone(&self) -> Self {
        NamespaceLister {
            indexer: Arc::clone(&self.indexer),
            namespace: self.namespace.clone(),
        }
    }
}

impl<K: KubeObject> NamespaceLister<K> {
    /// The namespace of this view.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The objects of this namespace whose labels match `selector`. Uses the namespace
    /// index when the cache has one, a full scan otherwise.
    pub fn list(&self, selector: &LabelSelector) -> Vec<Arc<K>> {
        let mut items = match self.indexer.by_index(NAMESPACE_INDEX, &self.namespace) {
            Ok(items) => items,
            Err(_) => {
                let mut all = self.indexer.list();
                all.retain(|o| o.namespace().unwrap_or("") == self.namespace);
                all
            }
        };
        items.retain(|o| selected(&**o, selector));
        items
    }

    /// The object `name` in this namespace.
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.indexer
            .get_by_key(&key_for(Some(&self.namespace), name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::index::{label_index_func, namespace_indexers};
    use crate::object::DynamicObject;
    use serde_json::json;

    fn obj(ns: Option<&str>, name: &str, app: Option<&str>) -> Arc<DynamicObject> {
        let mut meta = json!({"name": name});
        if let Some(ns) = ns {
            meta["namespace"] = json!(ns);
        }
        if let Some(app) = app {
            meta["labels"] = json!({"app": app});
        }
        let v = json!({ "metadata": meta });
        Arc::new(DynamicObject::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap())
    }

    fn names(mut v: Vec<Arc<DynamicObject>>) -> Vec<String> {
        v.sort_by(|a, b| a.name().cmp(b.name()));
        v.iter().map(|o| o.name().to_string()).collect()
    }

    #[test]
    fn queries() {
        let mut indexers = namespace_indexers();
        indexers.insert("app".into(), label_index_func("app"));
        let idx = Arc::new(Indexer::new(indexers));
        idx.add(obj(Some("a"), "web-1", Some("web")));
        idx.add(obj(Some("a"), "db-1", Some("db")));
        idx.add(obj(Some("b"), "web-2", Some("web")));
        idx.add(obj(None, "node-1", None));
        let l = Lister::new(idx);
        let web = LabelSelector::parse("app=web").unwrap();
        let not_web = LabelSelector::parse("app!=web").unwrap();
        assert_eq!(names(l.list(&LabelSelector::everything())).len(), 4);
        assert_eq!(names(l.list(&web)), vec!["web-1", "web-2"]);
        // `!=` matches objects without the label too.
        assert_eq!(names(l.list(&not_web)), vec!["db-1", "node-1"]);
        assert_eq!(l.get(Some("a"), "db-1").unwrap().name(), "db-1");
        assert!(l.get(Some("b"), "db-1").is_none());
        assert_eq!(l.get(None, "node-1").unwrap().name(), "node-1");
        let a = l.namespaced("a");
        assert_eq!(a.namespace(), "a");
        assert_eq!(
            names(a.list(&LabelSelector::everything())),
            vec!["db-1", "web-1"]
        );
        assert_eq!(names(a.list(&web)), vec!["web-1"]);
        assert_eq!(a.get("web-1").unwrap().name(), "web-1");
        assert!(a.get("web-2").is_none());
        assert_eq!(
            names(l.by_index("app", "web").unwrap()),
            vec!["web-1", "web-2"]
        );
        assert!(l.by_index("nope", "x").is_err());
    }

    #[test]
    fn namespaced_list_without_namespace_index_scans() {
        let idx = Arc::new(Indexer::default());
        idx.add(obj(Some("a"), "x", None));
        idx.add(obj(Some("b"), "y", None));
        let l = Lister::new(idx);
        assert_eq!(
            names(l.namespaced("b").list(&LabelSelector::everything())),
            vec!["y"]
        );
    }
}
