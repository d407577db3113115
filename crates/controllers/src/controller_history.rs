//! Controller history: the `apps/v1` ControllerRevisions in which DaemonSets and
//! StatefulSets keep the templates they rolled out, handled as kube-controller-manager's
//! `pkg/controller/history` does.
//!
//! - **Naming.** A revision is named `<owner>-<hash>` ([`controller_revision_name`]), the
//!   hash being FNV-32 (FNV-1, not FNV-1a) over the revision's data bytes, then over the
//!   collision count written in decimal when there is one, its decimal value safely encoded
//!   ([`hash_controller_revision`]). The data bytes are the data's JSON as Go's encoder
//!   writes a map: keys sorted, no spaces, `<`, `>` and `&` escaped ([`go_json`]), so the
//!   same data hashes the same here and in Kubernetes.
//! - **Creating.** [`ControllerHistory::create_controller_revision`] creates a revision with
//!   a controller reference to its owner; when the name is taken by a revision with other
//!   data it bumps the collision count and tries the next name; when it is taken by an equal
//!   revision, that one is the answer.
//! - **Finding.** An owner's revisions come from a shared informer's index
//!   ([`ControllerHistory::list_controller_revisions`]): those it controls and the orphans of
//!   its namespace its selector matches. [`ControllerHistory::claim_controller_revisions`]
//!   also adopts the orphans and releases the revisions it no longer selects, as the
//!   controller-reference manager does for pods.
//! - **Ordering and equality.** By revision number, then age, then name
//!   ([`sort_controller_revisions`]); two revisions are equal when their data is
//!   ([`equal_revision`]).
//! - **Truncating.** [`revisions_to_truncate`] picks the oldest revisions beyond an owner's
//!   `revisionHistoryLimit`, never one that is live (still backing pods or the owner's
//!   current or update revision).

use crate::controller_ref_manager::{
    adopt_patch, claim, ensure_controller_uid_index, owned_and_orphans, release_patch,
    AdoptionCheck, ClaimError, Owner,
};
use crate::controller_utils::{controller_of, new_controller_ref, safe_encode_string};
use api::labels::LabelSelector as Selector;
use client::cache::{Indexer, InformerError, SharedIndexInformer};
use client::rest::{Api, Client, DeleteParams, PatchParams, PatchType, PostParams};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::Value;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The label the history puts on every revision it creates: the hash in its name.
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// The label DaemonSet and StatefulSet pods carry naming the revision they were made from
/// (`apps/v1`'s `ControllerRevisionHashLabelKey`).
pub const POD_REVISION_LABEL: &str = "controller-revision-hash";

/// The longest owner-name prefix of a revision name: with the dash and a hash of at most ten
/// characters, the name stays within the 253 characters of a DNS subdomain.
const MAX_PREFIX: usize = 223;

/// FNV-1, 32 bits: the hash Kubernetes names controller revisions with.
#[derive(Debug, Clone, Copy)]
pub struct Fnv32(u32);

impl Default for Fnv32 {
    fn default() -> Self {
        Fnv32(0x811c_9dc5)
    }
}

impl Fnv32 {
    /// Feeds `bytes` into the hash.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.wrapping_mul(0x0100_0193);
            self.0 ^= u32::from(*b);
        }
    }

    /// The hash of everything written so far.
    pub fn finish(&self) -> u32 {
        self.0
    }
}

/// `v` serialized as Go's `encoding/json` writes a decoded map: object keys sorted, no
/// whitespace, and `<`, `>`, `&`, U+2028 and U+2029 escaped as `\u....` (they can only
/// occur inside strings, so the replacement cannot touch the structure).
pub fn go_json(v: &Value) -> Vec<u8> {
    // serde_json's maps are sorted (no `preserve_order`), and writing a value cannot fail.
    let text = serde_json::to_string(v).unwrap_or_default();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.into_bytes()
}

/// The data of `revision` (`null` when it has none).
pub fn revision_data(revision: &ControllerRevision) -> &Value {
    &revision.data.0
}

/// The revision number of `revision` (0 when unset, as Kubernetes reads it).
pub fn revision_number(revision: &ControllerRevision) -> i64 {
    revision.revision.unwrap_or(0)
}

/// The hash of `revision`'s data and `collision_count` (see the [module docs](self)).
pub fn hash_controller_revision(
    revision: &ControllerRevision,
    collision_count: Option<i32>,
) -> String {
    let mut h = Fnv32::default();
    if !revision_data(revision).is_null() {
        h.write(&go_json(revision_data(revision)));
    }
    if let Some(c) = collision_count {
        h.write(c.to_string().as_bytes());
    }
    safe_encode_string(&h.finish().to_string())
}

/// `<prefix>-<hash>`, the prefix cut to 223 bytes (at a character boundary).
pub fn controller_revision_name(prefix: &str, hash: &str) -> String {
    let mut end = prefix.len().min(MAX_PREFIX);
    while !prefix.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-{hash}", &prefix[..end])
}

/// A revision of `parent` (of `kind` in `api_version`) holding `data` as revision number
/// `revision`: the template's labels plus [`CONTROLLER_REVISION_HASH_LABEL`], a controller
/// reference to the parent, in the parent's namespace, named by the hash of `data` and
/// `collision_count`. `None` when the parent has no uid (it was never stored).
pub fn new_controller_revision(
    parent: &ObjectMeta,
    api_version: &str,
    kind: &str,
    template_labels: Option<&BTreeMap<String, String>>,
    data: Value,
    revision: i64,
    collision_count: Option<i32>,
) -> Option<ControllerRevision> {
    let mut cr = ControllerRevision {
        metadata: ObjectMeta {
            namespace: parent.namespace.clone(),
            labels: Some(template_labels.cloned().unwrap_or_default()),
            owner_references: Some(vec![new_controller_ref(parent, api_version, kind)?]),
            ..Default::default()
        },
        data: RawExtension(data),
        revision: Some(revision),
    };
    name_revision(&mut cr, parent, collision_count);
    Some(cr)
}

/// Names `cr` for `parent` by its hash with `collision_count`, and labels it with the hash.
fn name_revision(cr: &mut ControllerRevision, parent: &ObjectMeta, collision_count: Option<i32>) {
    let hash = hash_controller_revision(cr, collision_count);
    cr.metadata.name = Some(controller_revision_name(
        parent.name.as_deref().unwrap_or(""),
        &hash,
    ));
    cr.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(CONTROLLER_REVISION_HASH_LABEL.to_string(), hash);
}

/// Kubernetes' order of revisions: by revision number; equal numbers older first, then by
/// name.
pub fn cmp_by_revision(a: &ControllerRevision, b: &ControllerRevision) -> Ordering {
    let created = |r: &ControllerRevision| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
    revision_number(a)
        .cmp(&revision_number(b))
        .then_with(|| created(a).cmp(&created(b)))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Sorts `revisions` oldest revision number first ([`cmp_by_revision`]).
pub fn sort_controller_revisions(revisions: &mut [Arc<ControllerRevision>]) {
    revisions.sort_by(|a, b| cmp_by_revision(a, b));
}

/// Whether two revisions hold the same data (Kubernetes compares the data, not names or
/// numbers: the same template rolled out again is the same revision).
pub fn equal_revision(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    revision_data(a) == revision_data(b)
}

/// The revisions of `revisions` equal to `needle` ([`equal_revision`]), in their order.
pub fn find_equal_revisions(
    revisions: &[Arc<ControllerRevision>],
    needle: &ControllerRevision,
) -> Vec<Arc<ControllerRevision>> {
    revisions
        .iter()
        .filter(|r| equal_revision(r, needle))
        .cloned()
        .collect()
}

/// The highest revision number of `revisions` (0 for none).
pub fn max_revision(revisions: &[Arc<ControllerRevision>]) -> i64 {
    revisions
        .iter()
        .map(|r| revision_number(r))
        .max()
        .unwrap_or(0)
}

/// How an owner counts its history against its `revisionHistoryLimit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryLimit {
    /// Only revisions that are not live count (the StatefulSet controller: it keeps `n`
    /// non-live revisions besides the live ones).
    NonLive(usize),
    /// Every old revision counts, live or not, and only the non-live ones are deleted (the
    /// DaemonSet controller: of its old revisions it deletes `len - n`, skipping live ones).
    AllOld(usize),
}

/// The revisions to delete of `revisions` (sorted with [`sort_controller_revisions`]), oldest
/// first, to keep within `limit`; never one for which `is_live` holds.
pub fn revisions_to_truncate(
    revisions: &[Arc<ControllerRevision>],
    limit: HistoryLimit,
    is_live: impl Fn(&ControllerRevision) -> bool,
) -> Vec<Arc<ControllerRevision>> {
    let candidates = revisions.iter().filter(|r| !is_live(r));
    let excess = match limit {
        HistoryLimit::NonLive(n) => candidates.clone().count().saturating_sub(n),
        HistoryLimit::AllOld(n) => revisions.len().saturating_sub(n),
    };
    candidates.take(excess).cloned().collect()
}

/// Why a history write failed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The owner was never stored (it has no uid), so nothing can point at it.
    #[error("the owner has no uid")]
    NoOwnerUid,
    /// The API server refused the request, or it could not be made.
    #[error(transparent)]
    Api(#[from] client::rest::Error),
}

/// Reads an owner's revisions from a shared informer and writes them through the API. Cheap
/// to clone.
#[derive(Clone)]
pub struct ControllerHistory {
    client: Client,
    indexer: Arc<Indexer<ControllerRevision>>,
}

impl std::fmt::Debug for ControllerHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerHistory").finish_non_exhaustive()
    }
}

impl ControllerHistory {
    /// A history over `informer`'s revisions, writing through `client`. Adds the
    /// controller-uid index to the informer (shared with every controller that uses it).
    ///
    /// # Errors
    /// [`InformerError::AlreadyStarted`] when the informer was started without the index.
    pub fn new(
        client: Client,
        informer: &SharedIndexInformer<ControllerRevision>,
    ) -> Result<ControllerHistory, InformerError> {
        ensure_controller_uid_index(informer)?;
        Ok(ControllerHistory {
            client,
            indexer: Arc::clone(informer.indexer()),
        })
    }

    fn api(&self, namespace: &str) -> Api<ControllerRevision> {
        Api::for_type(self.client.clone(), namespace)
    }

    /// The revisions of `parent`'s namespace that `selector` matches and that `parent`
    /// controls or nobody does, as the cache has them (unsorted).
    pub fn list_controller_revisions(
        &self,
        parent: &ObjectMeta,
        selector: &Selector,
    ) -> Vec<Arc<ControllerRevision>> {
        let uid = parent.uid.as_deref().unwrap_or("");
        let ns = parent.namespace.as_deref().unwrap_or("");
        owned_and_orphans(&self.indexer, uid, ns)
            .into_iter()
            .filter(|r| selector.matches(r.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())))
            .collect()
    }

    /// The revisions `owner` controls and `selector` matches, after adopting the matching
    /// orphans and releasing its revisions the selector no longer matches (see
    /// [`crate::controller_ref_manager::claim`]; `adoption` re-reads the owner once before
    /// the first adoption).
    ///
    /// # Errors
    /// [`ClaimError`] when an adoption or release failed.
    pub async fn claim_controller_revisions(
        &self,
        owner: Owner<'_>,
        selector: &Selector,
        adoption: &mut AdoptionCheck<'_>,
    ) -> Result<Vec<Arc<ControllerRevision>>, ClaimError> {
        let uid = owner.meta.uid.as_deref().unwrap_or("");
        let ns = owner.meta.namespace.as_deref().unwrap_or("");
        let candidates = owned_and_orphans(&self.indexer, uid, ns);
        let empty = BTreeMap::new();
        claim(
            candidates,
            owner,
            |r: &ControllerRevision| selector.matches(r.metadata.labels.as_ref().unwrap_or(&empty)),
            adoption,
            |ns, name, patch| {
                let api = self.api(&ns);
                async move {
                    api.patch(&name, &PatchParams::default(), PatchType::Strategic, &patch)
                        .await
                        .map(drop)
                }
            },
        )
        .await
    }

    /// Makes `owner` the controller of the orphan `revision` (the patch fails if the
    /// revision was replaced by another of its name). Returns the revision as stored.
    ///
    /// # Errors
    /// The API server's refusal, or a transport error.
    pub async fn adopt_controller_revision(
        &self,
        owner: Owner<'_>,
        revision: &ControllerRevision,
    ) -> Result<ControllerRevision, HistoryError> {
        let uid = revision.metadata.uid.as_deref().unwrap_or("");
        let patch = adopt_patch(owner, uid);
        Ok(self.patch(revision, PatchType::Strategic, &patch).await?)
    }

    /// Removes `owner_uid`'s reference from `revision`. Returns the revision as stored.
    ///
    /// # Errors
    /// The API server's refusal, or a transport error.
    pub async fn release_controller_revision(
        &self,
        owner_uid: &str,
        revision: &ControllerRevision,
    ) -> Result<ControllerRevision, HistoryError> {
        let uid = revision.metadata.uid.as_deref().unwrap_or("");
        let patch = release_patch(owner_uid, uid);
        Ok(self.patch(revision, PatchType::Strategic, &patch).await?)
    }

    async fn patch(
        &self,
        revision: &ControllerRevision,
        patch_type: PatchType,
        patch: &Value,
    ) -> Result<ControllerRevision, client::rest::Error> {
        let ns = revision.metadata.namespace.as_deref().unwrap_or("");
        let name = revision.metadata.name.as_deref().unwrap_or("");
        self.api(ns)
            .patch(name, &PatchParams::default(), patch_type, patch)
            .await
    }

    /// Creates `revision` for `parent`, named by the hash of its data and
    /// `*collision_count`: when that name is taken by a revision with the same data, that
    /// revision is returned; when by one with other data, `*collision_count` is bumped and
    /// the next name tried. The caller persists the new collision count in its status.
    ///
    /// # Errors
    /// [`HistoryError::NoOwnerUid`], or the API server's refusal.
    pub async fn create_controller_revision(
        &self,
        parent: &ObjectMeta,
        revision: &ControllerRevision,
        collision_count: &mut i32,
    ) -> Result<ControllerRevision, HistoryError> {
        if parent.uid.as_deref().is_none_or(str::is_empty) {
            return Err(HistoryError::NoOwnerUid);
        }
        let ns = parent.namespace.as_deref().unwrap_or("");
        let api = self.api(ns);
        let mut clone = revision.clone();
        clone.metadata.namespace = parent.namespace.clone();
        loop {
            name_revision(&mut clone, parent, Some(*collision_count));
            match api.create(&PostParams::default(), &clone).await {
                Ok(created) => return Ok(created),
                Err(e) if e.is_already_exists() => {
                    let name = clone.metadata.name.as_deref().unwrap_or("");
                    let existing = api.get(name).await?;
                    if equal_revision(&existing, &clone) {
                        return Ok(existing);
                    }
                    *collision_count = collision_count.saturating_add(1);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Sets `revision`'s number to `new_revision` (nothing to write when it has it already).
    /// Returns the revision as stored.
    ///
    /// # Errors
    /// The API server's refusal (404 when the revision is gone), or a transport error.
    pub async fn update_controller_revision(
        &self,
        revision: &ControllerRevision,
        new_revision: i64,
    ) -> Result<ControllerRevision, HistoryError> {
        if revision_number(revision) == new_revision && revision.revision.is_some() {
            return Ok(revision.clone());
        }
        let patch = serde_json::json!({"revision": new_revision});
        Ok(self.patch(revision, PatchType::Merge, &patch).await?)
    }

    /// Deletes `revision` (one already gone counts as deleted).
    ///
    /// # Errors
    /// The API server's refusal, or a transport error.
    pub async fn delete_controller_revision(
        &self,
        revision: &ControllerRevision,
    ) -> Result<(), HistoryError> {
        let ns = revision.metadata.namespace.as_deref().unwrap_or("");
        let name = revision.metadata.name.as_deref().unwrap_or("");
        match self.api(ns).delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether `parent` (by uid) controls `revision`.
pub fn is_controlled_by(revision: &ControllerRevision, parent: &ObjectMeta) -> bool {
    controller_of(&revision.metadata).is_some_and(|r| Some(r.uid.as_str()) == parent.uid.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn parent() -> ObjectMeta {
        ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            uid: Some("uid-web".into()),
            ..Default::default()
        }
    }

    fn rev(name: &str, number: i64, data: Value) -> Arc<ControllerRevision> {
        Arc::new(ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            data: RawExtension(data),
            revision: Some(number),
        })
    }

    #[test]
    fn fnv32_is_fnv1_not_fnv1a() {
        // Reference values of 32-bit FNV-1 (the FNV authors' test vectors).
        let h = |s: &str| {
            let mut f = Fnv32::default();
            f.write(s.as_bytes());
            f.finish()
        };
        assert_eq!(h(""), 0x811c_9dc5);
        assert_eq!(h("a"), 0x050c_5d7e);
        assert_eq!(h("foobar"), 0x31f0_b262);
    }

    #[test]
    fn go_json_sorts_keys_and_escapes_html() {
        let v = json!({"b": 1, "a": {"z": "<&>", "y": [true, null]}});
        assert_eq!(
            String::from_utf8(go_json(&v)).unwrap(),
            r#"{"a":{"y":[true,null],"z":"\u003c\u0026\u003e"},"b":1}"#
        );
    }

    #[test]
    fn hashes_name_and_label_revisions() {
        let data = json!({"spec": {"template": {"$patch": "replace"}}});
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        let r = new_controller_revision(
            &parent(),
            "apps/v1",
            "StatefulSet",
            Some(&labels),
            data,
            3,
            None,
        )
        .unwrap();
        let hash = r.metadata.labels.as_ref().unwrap()[CONTROLLER_REVISION_HASH_LABEL].clone();
        assert_eq!(
            r.metadata.name.as_deref(),
            Some(format!("web-{hash}").as_str())
        );
        assert_eq!(r.metadata.labels.as_ref().unwrap()["app"], "web");
        assert_eq!(r.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(r.revision, Some(3));
        let owner = &r.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("StatefulSet", "uid-web", Some(true))
        );
        // The hash is FNV-1 of Go's bytes, in safe characters only: the digits of the value.
        let mut f = Fnv32::default();
        f.write(&go_json(revision_data(&r)));
        assert_eq!(hash, safe_encode_string(&f.finish().to_string()));
        assert!(hash.chars().all(|c| "456789bcdf".contains(c)), "{hash}");
        // The collision count changes the hash; the same count gives the same one.
        let h0 = hash_controller_revision(&r, Some(0));
        assert_ne!(h0, hash);
        assert_ne!(h0, hash_controller_revision(&r, Some(1)));
        assert_eq!(h0, hash_controller_revision(&r, Some(0)));
        let mut f = Fnv32::default();
        f.write(&go_json(revision_data(&r)));
        f.write(b"0");
        assert_eq!(h0, safe_encode_string(&f.finish().to_string()));
        assert!(new_controller_revision(
            &ObjectMeta::default(),
            "apps/v1",
            "StatefulSet",
            None,
            json!({}),
            1,
            None
        )
        .is_none());
    }

    #[test]
    fn long_owner_names_are_cut() {
        let name = controller_revision_name(&"x".repeat(300), "abc");
        assert_eq!(name.len(), 223 + 4);
        assert!(name.ends_with("x-abc"));
        assert_eq!(controller_revision_name("web", "5d4"), "web-5d4");
    }

    #[test]
    fn sorting_equality_and_max() {
        let t = |s: i64| Some(Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap()));
        let mut older = (*rev("b", 2, json!(1))).clone();
        older.metadata.creation_timestamp = t(10);
        let mut newer = (*rev("a", 2, json!(2))).clone();
        newer.metadata.creation_timestamp = t(20);
        let mut revs = vec![
            rev("c", 3, json!(3)),
            Arc::new(newer),
            Arc::new(older),
            rev("d", 1, json!(1)),
        ];
        sort_controller_revisions(&mut revs);
        let names: Vec<_> = revs
            .iter()
            .map(|r| r.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["d", "b", "a", "c"]);
        assert_eq!(max_revision(&revs), 3);
        assert_eq!(max_revision(&[]), 0);
        let equal = find_equal_revisions(&revs, &rev("x", 9, json!(1)));
        let names: Vec<_> = equal
            .iter()
            .map(|r| r.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["d", "b"]);
        assert!(!equal_revision(
            &rev("x", 1, json!(1)),
            &rev("y", 1, json!(2))
        ));
    }

    #[test]
    fn truncation_keeps_live_revisions() {
        let revs: Vec<_> = (1..=5)
            .map(|i| rev(&format!("r{i}"), i, json!(i)))
            .collect();
        let names = |v: Vec<Arc<ControllerRevision>>| -> Vec<String> {
            v.iter().map(|r| r.metadata.name.clone().unwrap()).collect()
        };
        let live = |r: &ControllerRevision| matches!(r.revision, Some(1 | 5));
        // Three non-live (r2..r4), keep one: the two oldest go.
        assert_eq!(
            names(revisions_to_truncate(&revs, HistoryLimit::NonLive(1), live)),
            ["r2", "r3"]
        );
        // Five old ones, keep two: three go, live ones skipped.
        assert_eq!(
            names(revisions_to_truncate(&revs, HistoryLimit::AllOld(2), live)),
            ["r2", "r3", "r4"]
        );
        assert!(revisions_to_truncate(&revs, HistoryLimit::NonLive(10), live).is_empty());
        assert!(revisions_to_truncate(&revs, HistoryLimit::AllOld(0), |_| true).is_empty());
    }

    #[test]
    fn control() {
        let r =
            new_controller_revision(&parent(), "apps/v1", "DaemonSet", None, json!({}), 1, None)
                .unwrap();
        assert!(is_controlled_by(&r, &parent()));
        let other = ObjectMeta {
            uid: Some("other".into()),
            ..parent()
        };
        assert!(!is_controlled_by(&r, &other));
    }
}
