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
//! one is invisible to its readers. Each stream still validates its text as JSON, and takes
//! an object only for the text it was decoded from.
//!
//! A stream may take another's object only for the same object version *as received*: the
//! same uid and resourceVersion, and the same text. The text matters because a server
//! tailors some events to the watcher: one whose selector an object stops matching gets
//! DELETED with the object's previous state stamped with the new resourceVersion, while
//! the others get the new state at that version. The text is compared by its length and a
//! 64-bit hash seeded at random per process (the texts of one uid and resourceVersion are
//! at most two, so an accidental match is out of reach, and the seed keeps one from being
//! crafted). Besides, the server (one in-process server's), the resource path and the
//! decoding (type, trimming) must be the same: [`Scope`] carries them but the type, which
//! the table adds itself. Only in-process clients use the table: nothing else in the
//! process can reach their server.
//!
//! The table holds an entry per object (the last version decoded) with a weak reference
//! only: an object lives as long as some cache holds it, a newer version replaces the
//! entry, and entries of deleted objects are swept out as the table grows.

use parking_lot::Mutex;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock, Weak};

/// What must be equal, besides the type and the object version, for two decoded objects to
/// be interchangeable: the server (one in-process server's), the resource path (group,
/// version and resource), and how the text was decoded. Equal inputs give equal scopes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Scope(u64);

impl Scope {
    /// The scope of objects of the collection at `path` (namespace left out, so that a
    /// namespaced watch and a cluster-wide one share), served by the server `server`
    /// (an in-process server's number), decoded with `trimmed` (without
    /// `metadata.managedFields`) or not.
    pub(crate) fn new(server: u64, path: &str, trimmed: bool) -> Scope {
        let mut h = foldhash::quality::FixedState::with_seed(0x6c69_7374_7761_7463).build_hasher();
        server.hash(&mut h);
        path.hash(&mut h);
        trimmed.hash(&mut h);
        Scope(h.finish())
    }
}

/// One object version as a stream received it: uid, resourceVersion, and a fingerprint
/// of the object's whole text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Version<'a> {
    uid: &'a [u8],
    resource_version: u64,
    text: (usize, u64),
}

impl<'a> Version<'a> {
    /// The version of the object whose JSON text is `text`, with the raw `metadata.uid` and
    /// `metadata.resourceVersion` strings found in it. `None` where either is missing or the
    /// resourceVersion is not a decimal number: such an object is decoded by each stream on
    /// its own.
    pub(crate) fn of(
        text: &[u8],
        uid: Option<&'a [u8]>,
        resource_version: Option<&[u8]>,
    ) -> Option<Version<'a>> {
        let (uid, resource_version) = identity(uid, resource_version)?;
        static SEED: LazyLock<foldhash::quality::RandomState> = LazyLock::new(Default::default);
        Some(Version {
            uid,
            resource_version,
            text: (text.len(), SEED.hash_one(text)),
        })
    }
}

/// The uid and the resourceVersion as a number, from their raw strings; `None` where
/// either is missing or empty, or the resourceVersion is not a plain decimal.
pub(crate) fn identity<'a>(
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

/// Entries per shard at which a shard sweeps out the entries of objects no cache holds
/// (then again at twice what the sweep left).
const SWEEP_AT_LEAST: usize = 1024;
const SHARDS: usize = 16;

#[derive(PartialEq, Eq, Hash)]
struct Key {
    scope: Scope,
    type_id: TypeId,
    /// A hash of the uid (the entry holds the uid itself).
    uid: u64,
}

impl Key {
    fn new<K: 'static>(scope: Scope, uid: &[u8]) -> Key {
        static UIDS: LazyLock<foldhash::fast::RandomState> = LazyLock::new(Default::default);
        Key {
            scope,
            type_id: TypeId::of::<K>(),
            uid: UIDS.hash_one(uid),
        }
    }
}

struct Entry {
    uid: Box<[u8]>,
    resource_version: u64,
    text: (usize, u64),
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
    &TABLE[(key.uid % SHARDS as u64) as usize]
}

/// The object of type `K` recorded in `scope` for exactly this version, if some cache
/// still holds it.
pub(crate) fn get<K: Send + Sync + 'static>(scope: Scope, version: &Version<'_>) -> Option<Arc<K>> {
    let key = Key::new::<K>(scope, version.uid);
    let shard = shard_of(&key).lock();
    let entry = shard.entries.get(&key)?;
    if entry.resource_version != version.resource_version
        || entry.text != version.text
        || *entry.uid != *version.uid
    {
        return None;
    }
    let object = entry.object.upgrade()?;
    drop(shard);
    object.downcast::<K>().ok()
}

/// Records `object`, decoded from `version`, in `scope` for the streams that receive the
/// same version later; it replaces what was recorded for the same object.
pub(crate) fn insert<K: Send + Sync + 'static>(
    scope: Scope,
    version: &Version<'_>,
    object: &Arc<K>,
) {
    let key = Key::new::<K>(scope, version.uid);
    let weak: Weak<dyn Any + Send + Sync> = {
        let any: Arc<dyn Any + Send + Sync> = object.clone();
        Arc::downgrade(&any)
    };
    let entry = Entry {
        uid: version.uid.into(),
        resource_version: version.resource_version,
        text: version.text,
        object: weak,
    };
    let mut shard = shard_of(&key).lock();
    shard.entries.insert(key, entry);
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

    fn version<'a>(uid: &'a [u8], rv: &str, text: &[u8]) -> Version<'a> {
        Version::of(text, Some(uid), Some(rv.as_bytes())).unwrap()
    }

    #[test]
    fn a_recorded_object_is_found_only_for_its_whole_version() {
        let obj = Arc::new(String::from("pod a at 7"));
        let v = version(b"uid-a", "7", b"{new}");
        insert(scope(1001), &v, &obj);
        let got = get::<String>(scope(1001), &v).expect("recorded");
        assert!(Arc::ptr_eq(&got, &obj));
        // Another uid, version, text (a DELETED event's previous state at the same
        // version), type, server, path or trimming: not the same object.
        assert!(get::<String>(scope(1001), &version(b"uid-b", "7", b"{new}")).is_none());
        assert!(get::<String>(scope(1001), &version(b"uid-a", "8", b"{new}")).is_none());
        assert!(get::<String>(scope(1001), &version(b"uid-a", "7", b"{old}")).is_none());
        assert!(get::<String>(scope(1001), &version(b"uid-a", "7", b"{new}  ")).is_none());
        assert!(get::<Vec<u8>>(scope(1001), &v).is_none());
        assert!(get::<String>(scope(1002), &v).is_none());
        assert!(get::<String>(Scope::new(1001, "/api/v1/nodes", true), &v).is_none());
        assert!(get::<String>(Scope::new(1001, "/api/v1/pods", false), &v).is_none());
        // A newer version of the object replaces the entry.
        let newer = Arc::new(String::from("pod a at 9"));
        let v9 = version(b"uid-a", "9", b"{newer}");
        insert(scope(1001), &v9, &newer);
        assert!(Arc::ptr_eq(
            &get::<String>(scope(1001), &v9).unwrap(),
            &newer
        ));
        assert!(get::<String>(scope(1001), &v).is_none());
    }

    #[test]
    fn the_table_keeps_no_object_alive() {
        let obj = Arc::new(String::from("pod c"));
        let v = version(b"uid-c", "9", b"{c}");
        insert(scope(1003), &v, &obj);
        drop(obj);
        assert!(get::<String>(scope(1003), &v).is_none());
    }

    #[test]
    fn entries_of_dropped_objects_are_swept_as_the_table_grows() {
        let live = Arc::new(0u64);
        insert(scope(1004), &version(b"live", "1", b"{}"), &live);
        for i in 0..(SHARDS * 8 * SWEEP_AT_LEAST) as u64 {
            let uid = format!("u{i}");
            insert(
                scope(1004),
                &version(uid.as_bytes(), "1", b"{}"),
                &Arc::new(i),
            );
        }
        for shard in TABLE.iter() {
            let len = shard.lock().entries.len();
            assert!(len <= 4 * SWEEP_AT_LEAST, "{len} entries kept in a shard");
        }
        assert!(get::<u64>(scope(1004), &version(b"live", "1", b"{}")).is_some());
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
