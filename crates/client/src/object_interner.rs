//! Decoded watch objects shared between the informers of one process.
//!
//! A binary that runs several components against a server in the same process
//! (`listwatch up`: the controller-manager, the scheduler and the node agents) has each
//! component watch pods through its own informer, as separate processes would. Every pod
//! change then arrives as the same JSON on three streams and was decoded three times into
//! three equal objects. A shared informer factory avoids that within one component;
//! this table does it across components: the first stream to decode a version of an
//! object records it, and the others, receiving the same version, take that object
//! instead of decoding their own. Objects in the caches are immutable `Arc`s, so sharing
//! one is invisible to its readers; each stream still validates every byte it receives.
//!
//! An object version is identified by its `metadata.uid` and `metadata.resourceVersion`:
//! a server gives every write a new resourceVersion, and a uid names one object for good.
//! Two texts with the same identity are therefore the same object version — but only from
//! the same server, for the same resource path and API version, decoded into the same
//! type with the same trimming. [`Scope`] carries everything but the type, which the
//! table adds itself. Only in-process clients use it: their server is known to be one
//! server, which issues the uids, so no other party can present a colliding identity.
//!
//! The table holds weak references only: an object lives as long as some cache holds it,
//! and entries whose object is gone are swept out as the table grows.

use parking_lot::Mutex;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock, Weak};

/// What must be equal, besides the type and the object's identity, for two decoded
/// objects to be interchangeable: the server (one in-process dialer's), the resource path
/// (group, version and resource), and how the text was decoded. Build one with
/// [`Scope::new`]; equal inputs give equal scopes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scope(u64);

impl Scope {
    /// The scope of objects of the collection at `path` (namespace left out, so that a
    /// namespaced watch and a cluster-wide one share), served by the server `server`
    /// (an in-process dialer's number), decoded with `trimmed` (without
    /// `metadata.managedFields`) or not.
    pub fn new(server: u64, path: &str, trimmed: bool) -> Scope {
        let mut h = foldhash::quality::FixedState::with_seed(0x6c69_7374_7761_7463).build_hasher();
        server.hash(&mut h);
        path.hash(&mut h);
        trimmed.hash(&mut h);
        Scope(h.finish())
    }
}

/// Entries per shard after which the shard sweeps out entries whose object is gone (and
/// at least twice as many as the sweep before left).
const SWEEP_AT_LEAST: usize = 4096;
const SHARDS: usize = 16;

#[derive(PartialEq, Eq, Hash)]
struct Key {
    scope: Scope,
    type_id: TypeId,
    resource_version: u64,
}

struct Entry {
    /// Checked on every hit: a resourceVersion is unique per write, but the uid makes a
    /// mistaken scope (or a server that reuses versions) a miss instead of a wrong object.
    uid: Box<[u8]>,
    object: Weak<dyn Any + Send + Sync>,
}

#[derive(Default)]
struct Shard {
    entries: HashMap<Key, Entry, foldhash::fast::RandomState>,
    sweep_at: usize,
}

static TABLE: LazyLock<[Mutex<Shard>; SHARDS]> =
    LazyLock::new(|| std::array::from_fn(|_| Mutex::new(Shard::default())));

fn shard_of(key: &Key) -> &'static Mutex<Shard> {
    // The resourceVersion alone spreads keys well: consecutive writes go to consecutive
    // shards.
    &TABLE[(key.resource_version % SHARDS as u64) as usize]
}

/// The identity of an object version as its text spells it: the raw bytes of
/// `metadata.uid` and of `metadata.resourceVersion` (strings without escapes). `None`
/// where either is missing, escaped, or the resourceVersion is not a decimal number: such
/// an object is decoded by each stream on its own.
pub fn identity<'a>(
    uid: Option<&'a [u8]>,
    resource_version: Option<&[u8]>,
) -> Option<(&'a [u8], u64)> {
    let uid = uid.filter(|u| !u.is_empty())?;
    let rv = resource_version?;
    if rv.is_empty() || rv.len() > 19 || !rv.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let rv = std::str::from_utf8(rv).ok()?.parse().ok()?;
    Some((uid, rv))
}

/// The object of type `K` recorded in `scope` under this identity, if one is still held
/// by some cache.
pub fn get<K: Send + Sync + 'static>(
    scope: Scope,
    uid: &[u8],
    resource_version: u64,
) -> Option<Arc<K>> {
    let key = Key {
        scope,
        type_id: TypeId::of::<K>(),
        resource_version,
    };
    let shard = shard_of(&key).lock();
    let entry = shard.entries.get(&key)?;
    if *entry.uid != *uid {
        return None;
    }
    let object = entry.object.upgrade()?;
    drop(shard);
    object.downcast::<K>().ok()
}

/// Records `object` in `scope` under this identity for the streams that receive the same
/// version later. A recorded object of the same identity is replaced.
pub fn insert<K: Send + Sync + 'static>(
    scope: Scope,
    uid: &[u8],
    resource_version: u64,
    object: &Arc<K>,
) {
    let key = Key {
        scope,
        type_id: TypeId::of::<K>(),
        resource_version,
    };
    let weak: Weak<dyn Any + Send + Sync> = {
        let any: Arc<dyn Any + Send + Sync> = object.clone();
        Arc::downgrade(&any)
    };
    let mut shard = shard_of(&key).lock();
    shard.entries.insert(
        key,
        Entry {
            uid: uid.into(),
            object: weak,
        },
    );
    if shard.entries.len() >= shard.sweep_at.max(SWEEP_AT_LEAST) {
        shard.entries.retain(|_, e| e.object.strong_count() > 0);
        shard.sweep_at = shard.entries.len() * 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(n: u64) -> Scope {
        Scope::new(n, "/api/v1/pods", true)
    }

    #[test]
    fn a_recorded_object_is_found_only_under_its_whole_identity() {
        let obj = Arc::new(String::from("pod a at 7"));
        insert(scope(1001), b"uid-a", 7, &obj);
        let got = get::<String>(scope(1001), b"uid-a", 7).expect("recorded");
        assert!(Arc::ptr_eq(&got, &obj));
        // Another uid, version, type, server, path or trimming: not the same object.
        assert!(get::<String>(scope(1001), b"uid-b", 7).is_none());
        assert!(get::<String>(scope(1001), b"uid-a", 8).is_none());
        assert!(get::<Vec<u8>>(scope(1001), b"uid-a", 7).is_none());
        assert!(get::<String>(scope(1002), b"uid-a", 7).is_none());
        assert!(get::<String>(Scope::new(1001, "/api/v1/nodes", true), b"uid-a", 7).is_none());
        assert!(get::<String>(Scope::new(1001, "/api/v1/pods", false), b"uid-a", 7).is_none());
    }

    #[test]
    fn the_table_keeps_no_object_alive() {
        let obj = Arc::new(String::from("pod c"));
        insert(scope(1003), b"uid-c", 9, &obj);
        drop(obj);
        assert!(get::<String>(scope(1003), b"uid-c", 9).is_none());
    }

    #[test]
    fn entries_of_dropped_objects_are_swept_as_the_table_grows() {
        // Keys of one shard (same version modulo the shard count), each object dropped at
        // once: the shard must not keep growing.
        let live = Arc::new(0u32);
        insert(scope(1004), b"live", 16 * 1_000_000, &live);
        for i in 1..(4 * SWEEP_AT_LEAST as u64) {
            let obj = Arc::new(i);
            insert(scope(1004), b"u", 16 * (1_000_000 + i), &obj);
        }
        let len = shard_of(&Key {
            scope: scope(1004),
            type_id: TypeId::of::<u64>(),
            resource_version: 16,
        })
        .lock()
        .entries
        .len();
        assert!(len <= 2 * SWEEP_AT_LEAST, "{len} entries kept");
        assert!(get::<u32>(scope(1004), b"live", 16 * 1_000_000).is_some());
    }

    #[test]
    fn only_plain_identities_are_used() {
        assert_eq!(identity(Some(b"u"), Some(b"42")), Some((&b"u"[..], 42)));
        assert_eq!(identity(None, Some(b"42")), None);
        assert_eq!(identity(Some(b""), Some(b"42")), None);
        assert_eq!(identity(Some(b"u"), None), None);
        assert_eq!(identity(Some(b"u"), Some(b"")), None);
        assert_eq!(identity(Some(b"u"), Some(b"4a")), None);
        assert_eq!(identity(Some(b"u"), Some(b"-1")), None);
        assert_eq!(identity(Some(b"u"), Some(b"99999999999999999999")), None);
    }
}
