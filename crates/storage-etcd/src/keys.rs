//! [`Keyspace`]: how storage keys and revisions map onto etcd's.
//!
//! **Keys.** Every storage key gets the configured namespace prepended (empty by default, so a
//! storage key `/registry/pods/default/nginx` is stored under exactly that etcd key); keys
//! read back from etcd have it stripped again.
//!
//! **Revisions.** Storage revisions are etcd revisions, unchanged: an object's
//! resourceVersion is its etcd mod revision, exactly as in Kubernetes, so every process using
//! the same etcd cluster (and any tool reading etcd directly) agrees on them. A fresh etcd is at
//! revision 1, so its first write gets 2; etcd never uses revisions below 1, and storage
//! revision 0 keeps its meaning of "none" (e.g. "read at the current revision").

use bytes::Bytes;
use storage::Revision;

/// etcd's "no upper bound" range end.
const NO_END: &[u8] = b"\0";

/// The etcd revision of a storage revision (the same number; saturates at `i64::MAX`).
pub(crate) fn to_etcd(rev: Revision) -> i64 {
    i64::try_from(rev).unwrap_or(i64::MAX)
}

/// The storage revision of an etcd revision (the same number; negative values, which etcd
/// never sends, become 0).
pub(crate) fn from_etcd(rev: i64) -> Revision {
    u64::try_from(rev).unwrap_or(0)
}

/// The key namespace of one [`crate::EtcdStorage`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Keyspace {
    ns: Bytes,
}

impl Keyspace {
    /// A keyspace that prepends `ns` to every key (empty = keys are used as they are).
    pub(crate) fn new(ns: impl Into<Bytes>) -> Self {
        Keyspace { ns: ns.into() }
    }

    /// The etcd key of a storage key. etcd rejects the empty key, so the empty storage key
    /// (only meaningful as a range start) becomes `\0`, the smallest non-empty key.
    pub(crate) fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.ns.len() + key.len());
        out.extend_from_slice(&self.ns);
        out.extend_from_slice(key);
        if out.is_empty() {
            out.push(0);
        }
        out
    }

    /// The etcd range end for a storage range end, following `storage::RangeRequest`:
    /// empty = single key (returned as empty, as etcd wants); `\0` = no upper bound, which in
    /// a namespace means "to the end of the namespace"; anything else is namespaced.
    pub(crate) fn range_end(&self, end: &[u8]) -> Vec<u8> {
        if end.is_empty() {
            return Vec::new();
        }
        if end == NO_END {
            return self.namespace_end();
        }
        self.key(end)
    }

    /// The etcd range covering every key that starts with storage prefix `prefix`.
    pub(crate) fn prefix_range(&self, prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let start = self.key(prefix);
        let mut full = self.ns.to_vec();
        full.extend_from_slice(prefix);
        let end = storage::prefix_end(&full);
        let end = if end.is_empty() {
            NO_END.to_vec()
        } else {
            end.to_vec()
        };
        (start, end)
    }

    /// The end of the whole namespace (`\0` = unbounded when the namespace is empty).
    fn namespace_end(&self) -> Vec<u8> {
        let end = storage::prefix_end(&self.ns);
        if end.is_empty() {
            NO_END.to_vec()
        } else {
            end.to_vec()
        }
    }

    /// The storage key of an etcd key read from this namespace. Keys outside it (which a
    /// correct range never returns) are passed through unchanged.
    pub(crate) fn strip(&self, key: &[u8]) -> Bytes {
        Bytes::copy_from_slice(key.strip_prefix(&self.ns[..]).unwrap_or(key))
    }

    /// [`Keyspace::strip`] on an owned key, without copying when the namespace is empty.
    pub(crate) fn strip_owned(&self, key: Vec<u8>) -> Bytes {
        if self.ns.is_empty() {
            Bytes::from(key)
        } else {
            let mut key = Bytes::from(key);
            if key.starts_with(&self.ns) {
                let _ = key.split_to(self.ns.len());
            }
            key
        }
    }

    /// A key of this namespace that no storage key can equal (used by probes that need some
    /// key to look at): the namespace followed by a NUL and a marker.
    pub(crate) fn probe_key(&self) -> Vec<u8> {
        self.key(b"\0listwatch-probe")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_pass_through_unchanged() {
        assert_eq!(to_etcd(0), 0);
        assert_eq!(to_etcd(42), 42);
        assert_eq!(from_etcd(1), 1);
        assert_eq!(from_etcd(42), 42);
        assert_eq!(
            from_etcd(-5),
            0,
            "etcd never sends negative revisions; clamp"
        );
        assert_eq!(to_etcd(u64::MAX), i64::MAX);
        for r in [0u64, 1, 7, 1 << 40] {
            assert_eq!(from_etcd(to_etcd(r)), r);
        }
    }

    #[test]
    fn empty_namespace_keeps_keys() {
        let ks = Keyspace::new("");
        assert_eq!(ks.key(b"/registry/pods/a"), b"/registry/pods/a".to_vec());
        assert_eq!(ks.key(b""), b"\0".to_vec(), "etcd has no empty key");
        assert_eq!(ks.range_end(b""), Vec::<u8>::new(), "single key");
        assert_eq!(ks.range_end(b"\0"), b"\0".to_vec(), "unbounded");
        assert_eq!(ks.range_end(b"/q"), b"/q".to_vec());
        assert_eq!(
            ks.prefix_range(b"/registry/pods/"),
            (b"/registry/pods/".to_vec(), b"/registry/pods0".to_vec())
        );
        assert_eq!(ks.prefix_range(b""), (b"\0".to_vec(), b"\0".to_vec()));
        assert_eq!(ks.prefix_range(b"\xff"), (b"\xff".to_vec(), b"\0".to_vec()));
        assert_eq!(ks.strip(b"/a"), Bytes::from_static(b"/a"));
        assert_eq!(ks.strip_owned(b"/a".to_vec()), Bytes::from_static(b"/a"));
    }

    #[test]
    fn namespace_is_prepended_and_stripped() {
        let ks = Keyspace::new("/t1");
        assert_eq!(ks.key(b"/registry/x"), b"/t1/registry/x".to_vec());
        assert_eq!(ks.key(b""), b"/t1".to_vec());
        assert_eq!(ks.range_end(b""), Vec::<u8>::new());
        assert_eq!(ks.range_end(b"\0"), b"/t2".to_vec(), "end of the namespace");
        assert_eq!(ks.range_end(b"/z"), b"/t1/z".to_vec());
        assert_eq!(
            ks.prefix_range(b"/p/"),
            (b"/t1/p/".to_vec(), b"/t1/p0".to_vec())
        );
        assert_eq!(ks.prefix_range(b""), (b"/t1".to_vec(), b"/t2".to_vec()));
        assert_eq!(
            ks.strip(b"/t1/registry/x"),
            Bytes::from_static(b"/registry/x")
        );
        assert_eq!(
            ks.strip_owned(b"/t1/registry/x".to_vec()),
            Bytes::from_static(b"/registry/x")
        );
        assert_eq!(ks.strip(b"/other"), Bytes::from_static(b"/other"));
        assert!(ks.probe_key().starts_with(b"/t1\0"));
    }
}
