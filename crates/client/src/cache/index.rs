//! Secondary indexes over a cache: index functions, the indexers that name them, and the
//! indices they build.
//!
//! An [`IndexFunc`] maps an object to zero or more *indexed values* (its namespace, its node,
//! each of its label values, ...). An [`Indexers`] map names index functions; for each name
//! the store keeps an [`Index`]: indexed value → the set of keys of the objects that produced
//! that value. [`Indices`] holds one `Index` per indexer name. The store keeps all of them up
//! to date on every add, update and delete (see [`crate::cache::store`]).

use crate::object::KubeObject;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Computes the indexed values of an object. It must be a pure function of the object: the
/// store calls it again on the old object when that object is updated or deleted, and relies
/// on getting the same values back. Duplicate values are harmless; an empty vector means the
/// object is not in this index.
pub type IndexFunc<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// Index functions by index name.
pub type Indexers<K> = HashMap<String, IndexFunc<K>>;

/// One index: indexed value → keys of the objects with that value. Values whose set became
/// empty are removed, so every set present is non-empty.
pub type Index = HashMap<String, HashSet<Arc<str>>>;

/// Every index of a store, by index name.
pub type Indices = HashMap<String, Index>;

/// The name of the namespace index that [`namespace_indexers`] installs.
///
/// The function registered under this name must index by the object's namespace alone, as
/// [`namespace_index_func`] does: listers look namespaces up in it, and the store does not
/// call it again when an object is replaced by one in the same namespace.
pub const NAMESPACE_INDEX: &str = "namespace";

/// Indexes an object by its namespace; cluster-scoped objects are indexed under `""`.
pub fn namespace_index_func<K: KubeObject>() -> IndexFunc<K> {
    Arc::new(|obj: &K| vec![obj.namespace().unwrap_or("").to_string()])
}

/// The indexers most informers start with: just [`NAMESPACE_INDEX`].
pub fn namespace_indexers<K: KubeObject>() -> Indexers<K> {
    let mut indexers: Indexers<K> = HashMap::new();
    indexers.insert(NAMESPACE_INDEX.to_string(), namespace_index_func::<K>());
    indexers
}

/// Indexes an object by the value of its label `label` (objects without the label are not
/// indexed). Handy for "all pods with `app=X`" lookups.
pub fn label_index_func<K: KubeObject>(label: impl Into<String>) -> IndexFunc<K> {
    let label = label.into();
    Arc::new(move |obj: &K| {
        obj.labels()
            .and_then(|l| l.get(&label))
            .map(|v| vec![v.to_string()])
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::DynamicObject;

    #[test]
    fn namespace_and_label_funcs() {
        let pod = DynamicObject::from_slice(
            br#"{"metadata":{"name":"p","namespace":"ns","labels":{"app":"web"}}}"#,
        )
        .unwrap();
        let node = DynamicObject::from_slice(br#"{"metadata":{"name":"n"}}"#).unwrap();
        let ns = namespace_index_func::<DynamicObject>();
        assert_eq!(ns(&pod), vec!["ns".to_string()]);
        assert_eq!(ns(&node), vec![String::new()]);
        let app = label_index_func::<DynamicObject>("app");
        assert_eq!(app(&pod), vec!["web".to_string()]);
        assert!(app(&node).is_empty());
        assert!(namespace_indexers::<DynamicObject>().contains_key(NAMESPACE_INDEX));
    }
}
