//! Object keys: how the caches name an object.
//!
//! A key is `namespace/name` for a namespaced object and `name` for a cluster-scoped one (an
//! empty namespace counts as cluster-scoped). Keys are unique within one resource, which is
//! all a cache holds. This is the scheme client-go calls the meta-namespace key.

use crate::object::KubeObject;

/// Why a key could not be split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The key has more than one `/`, so it is neither `name` nor `namespace/name`.
    #[error("unexpected key format: {0:?}")]
    Malformed(String),
}

/// The cache key of `obj`: `namespace/name`, or `name` when the namespace is absent or empty.
pub fn object_key<K: KubeObject + ?Sized>(obj: &K) -> String {
    key_for(obj.namespace(), obj.name())
}

/// The key of the object called `name` in `namespace` (`None` or `""` = cluster-scoped).
pub fn key_for(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => {
            let mut key = String::with_capacity(ns.len() + 1 + name.len());
            write_key(&mut key, namespace, name);
            key
        }
        _ => name.to_string(),
    }
}

/// Replaces the contents of `out` with [`key_for`]`(namespace, name)`, reusing its buffer.
pub(crate) fn write_key(out: &mut String, namespace: Option<&str>, name: &str) {
    out.clear();
    if let Some(ns) = namespace.filter(|ns| !ns.is_empty()) {
        out.push_str(ns);
        out.push('/');
    }
    out.push_str(name);
}

/// Whether `key` is [`key_for`]`(namespace, name)`, without building it.
pub(crate) fn is_key_for(key: &str, namespace: Option<&str>, name: &str) -> bool {
    match namespace.filter(|ns| !ns.is_empty()) {
        Some(ns) => key
            .strip_prefix(ns)
            .and_then(|rest| rest.strip_prefix('/'))
            .is_some_and(|rest| rest == name),
        None => key == name,
    }
}

/// Splits a key into `(namespace, name)`; the namespace is `None` for a key without `/`.
///
/// The inverse of [`key_for`] for every name that contains no `/` (Kubernetes names never
/// do). Keys with more than one `/` are rejected.
pub fn split_key(key: &str) -> Result<(Option<&str>, &str), KeyError> {
    let mut parts = key.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, None) => Ok((None, name)),
        (Some(ns), Some(name), None) => Ok((Some(ns), name)),
        _ => Err(KeyError::Malformed(key.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::DynamicObject;

    #[test]
    fn namespaced_and_cluster_scoped_keys() {
        let pod =
            DynamicObject::from_slice(br#"{"metadata":{"name":"p","namespace":"ns"}}"#).unwrap();
        let node = DynamicObject::from_slice(br#"{"metadata":{"name":"n1"}}"#).unwrap();
        let empty_ns =
            DynamicObject::from_slice(br#"{"metadata":{"name":"x","namespace":""}}"#).unwrap();
        assert_eq!(object_key(&pod), "ns/p");
        assert_eq!(object_key(&node), "n1");
        assert_eq!(object_key(&empty_ns), "x");
    }

    #[test]
    fn split_inverts_key_for() {
        for (ns, name) in [(Some("a"), "b"), (None, "c")] {
            let key = key_for(ns, name);
            assert_eq!(split_key(&key).unwrap(), (ns, name));
        }
        assert_eq!(split_key("a/").unwrap(), (Some("a"), ""));
        for (key, ns, name, want) in [
            ("a/b", Some("a"), "b", true),
            ("b", None, "b", true),
            ("b", Some(""), "b", true),
            ("a/b", None, "a/b", true),
            ("a/b", Some("a"), "c", false),
            ("ab", Some("a"), "b", false),
            ("a/b", Some("x"), "b", false),
            ("b", Some("a"), "b", false),
        ] {
            assert_eq!(is_key_for(key, ns, name), want, "{key} {ns:?} {name}");
            assert_eq!(key_for(ns, name) == key, want, "{key} {ns:?} {name}");
        }
        assert_eq!(
            split_key("a/b/c"),
            Err(KeyError::Malformed("a/b/c".to_string()))
        );
    }
}
