//! A StatefulSet pod's identity: its ordinal, its stable name `<set>-<ordinal>`, the labels
//! that carry name and index, its hostname and subdomain, and the PersistentVolumeClaims
//! `<claim>-<set>-<ordinal>` its volumes name; and the pod predicates the ordering rules
//! are stated in. Pure functions, unit-tested here.

use crate::controller_utils::{is_pod_available, is_pod_ready, pod_from_template};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// The label naming the pod itself, so that a Service can select one member.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";

/// The label carrying the pod's ordinal (Kubernetes' `PodIndexLabel`, on by default in 1.32).
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// The label naming the ControllerRevision a pod was made from.
pub use crate::controller_history::POD_REVISION_LABEL as REVISION_LABEL;

/// The parent name and ordinal a pod name encodes: `<parent>-<digits>`. The ordinal is
/// `None` when the digits do not fit an `i32` (Kubernetes then treats the pod as having no
/// ordinal); the whole is `None` when the name has no such suffix.
pub fn parent_and_ordinal(pod_name: &str) -> Option<(&str, Option<i32>)> {
    let (parent, digits) = pod_name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((parent, digits.parse::<i32>().ok()))
}

/// The ordinal of a pod from its name, if it has one.
pub fn ordinal_of(pod: &Pod) -> Option<i32> {
    parent_and_ordinal(pod.metadata.name.as_deref().unwrap_or("")).and_then(|(_, o)| o)
}

/// Whether the pod's name makes it a member of `set` (`<set>-<digits>`).
pub fn is_member_of(set_name: &str, pod: &Pod) -> bool {
    parent_and_ordinal(pod.metadata.name.as_deref().unwrap_or(""))
        .is_some_and(|(parent, _)| parent == set_name)
}

/// The name of the pod of `set_name` with `ordinal`.
pub fn pod_name(set_name: &str, ordinal: i32) -> String {
    format!("{set_name}-{ordinal}")
}

/// The name of the claim made from template `claim` for the pod of `set_name` with
/// `ordinal`.
pub fn claim_name(claim: &str, set_name: &str, ordinal: i32) -> String {
    format!("{claim}-{set_name}-{ordinal}")
}

/// The first ordinal of the set (`spec.ordinals.start`, else 0).
pub fn start_ordinal(set: &StatefulSet) -> i32 {
    set.spec
        .ordinals
        .as_ref()
        .and_then(|o| o.start)
        .unwrap_or(0)
        .max(0)
}

/// `spec.replicas` (1 when unset, as the API server defaults it; never negative).
pub fn set_replicas(set: &StatefulSet) -> i32 {
    set.spec.replicas.unwrap_or(1).max(0)
}

/// Whether ordinal `ord` lies in `[start, start + replicas)`.
pub fn in_ordinal_range(set: &StatefulSet, ord: i32) -> bool {
    let start = start_ordinal(set);
    ord >= start && i64::from(ord) < i64::from(start) + i64::from(set_replicas(set))
}

fn set_name(set: &StatefulSet) -> &str {
    set.metadata.name.as_deref().unwrap_or("")
}

/// Whether the pod has the name, namespace and labels of a member of `set`.
pub fn identity_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let Some((parent, Some(ord))) = parent_and_ordinal(name) else {
        return false;
    };
    let labels = pod.metadata.labels.as_ref();
    parent == set_name(set)
        && name == pod_name(set_name(set), ord)
        && pod.metadata.namespace == set.metadata.namespace
        && labels
            .and_then(|l| l.get(POD_NAME_LABEL))
            .map(String::as_str)
            == Some(name)
}

/// The labels a member's identity requires and the pod lacks (or has otherwise).
pub fn missing_identity_labels(set: &StatefulSet, pod: &Pod) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let Some(ord) = ordinal_of(pod) else {
        return out;
    };
    if !is_member_of(set_name(set), pod) {
        return out;
    }
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    if labels.get(POD_NAME_LABEL) != Some(&name) {
        out.insert(POD_NAME_LABEL.to_string(), name);
    }
    let index = ord.to_string();
    if labels.get(POD_INDEX_LABEL) != Some(&index) {
        out.insert(POD_INDEX_LABEL.to_string(), index);
    }
    out
}

/// Whether every claim template of `set` is mounted in the pod as the claim of its ordinal.
pub fn storage_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let Some(ord) = ordinal_of(pod) else {
        return false;
    };
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    claim_templates(set).iter().all(|t| {
        let template_name = t.metadata.name.as_deref().unwrap_or("");
        volumes
            .into_iter()
            .flatten()
            .find(|v| v.name == template_name)
            .and_then(|v| v.persistent_volume_claim.as_ref())
            .is_some_and(|c| c.claim_name == claim_name(template_name, set_name(set), ord))
    })
}

fn claim_templates(set: &StatefulSet) -> &[PersistentVolumeClaim] {
    set.spec
        .volume_claim_templates
        .as_deref()
        .unwrap_or_default()
}

/// The claims the pod of `set` with `ordinal` uses, by template name: each template with
/// its name made `<claim>-<set>-<ordinal>`, the set's namespace, and the set's
/// `matchLabels` added to its labels.
pub fn claims_for(set: &StatefulSet, ordinal: i32) -> Vec<(String, PersistentVolumeClaim)> {
    let match_labels = set.spec.selector.match_labels.clone().unwrap_or_default();
    claim_templates(set)
        .iter()
        .map(|t| {
            let template_name = t.metadata.name.clone().unwrap_or_default();
            let mut claim = PersistentVolumeClaim {
                metadata: t.metadata.clone(),
                spec: t.spec.clone(),
                status: None,
            };
            claim.metadata.name = Some(claim_name(&template_name, set_name(set), ordinal));
            claim.metadata.namespace = set.metadata.namespace.clone();
            claim.metadata.resource_version = None;
            claim.metadata.uid = None;
            claim
                .metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .extend(match_labels.clone());
            (template_name, claim)
        })
        .collect()
}

/// The pod of `set` with `ordinal` made from `template` (the template of the revision it
/// is created at) and labelled with `revision`: its stable name, the name and index
/// labels, hostname `<pod>` and subdomain `spec.serviceName`, the claims' volumes in place
/// of any template volume of the same name, and the controller reference.
pub fn new_pod(
    set: &StatefulSet,
    template: &PodTemplateSpec,
    revision: &str,
    ordinal: i32,
    controller_ref: OwnerReference,
) -> Pod {
    let name = pod_name(set_name(set), ordinal);
    let mut pod = pod_from_template(template, set_name(set), Some(controller_ref));
    pod.metadata.name = Some(name.clone());
    pod.metadata.namespace = set.metadata.namespace.clone();
    let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(POD_NAME_LABEL.to_string(), name.clone());
    labels.insert(POD_INDEX_LABEL.to_string(), ordinal.to_string());
    labels.insert(REVISION_LABEL.to_string(), revision.to_string());
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.hostname = Some(name);
    spec.subdomain =
        Some(set.spec.service_name.clone().unwrap_or_default()).filter(|s| !s.is_empty());
    let claims = claims_for(set, ordinal);
    let mut volumes: Vec<Volume> = claims
        .iter()
        .map(|(template_name, claim)| Volume {
            name: template_name.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.metadata.name.clone().unwrap_or_default(),
                read_only: None,
            }),
            ..Default::default()
        })
        .collect();
    for v in spec.volumes.take().into_iter().flatten() {
        if !claims.iter().any(|(n, _)| *n == v.name) {
            volumes.push(v);
        }
    }
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
    pod
}

/// The revision a pod was made from (its `controller-revision-hash` label; `""` if none).
pub fn pod_revision(pod: &Pod) -> &str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_LABEL))
        .map_or("", String::as_str)
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Whether the pod exists on the server (a pod the controller merely plans has no phase).
pub fn is_created(pod: &Pod) -> bool {
    !phase(pod).is_empty()
}

/// Whether the pod is `Pending`.
pub fn is_pending(pod: &Pod) -> bool {
    phase(pod) == "Pending"
}

/// Whether the pod has ended (`Failed` or `Succeeded`): it is replaced under its name.
pub fn has_ended(pod: &Pod) -> bool {
    matches!(phase(pod), "Failed" | "Succeeded")
}

/// Whether the pod is being deleted.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Whether the pod is `Running` with its `Ready` condition `True`.
pub fn is_running_and_ready(pod: &Pod) -> bool {
    phase(pod) == "Running" && is_pod_ready(pod)
}

/// Whether the pod is `Running` and has been ready for `min_ready_seconds` at `now`.
pub fn is_running_and_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    phase(pod) == "Running" && is_pod_available(pod, min_ready_seconds, now)
}

/// Whether the pod does not count as available: not running and available, or being
/// deleted.
pub fn is_unavailable(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    !is_running_and_available(pod, min_ready_seconds, now) || is_terminating(pod)
}

/// Which of its owners a claim should have under the set's
/// `persistentVolumeClaimRetentionPolicy` (`Retain` unless `Delete` is asked):
/// `whenDeleted: Delete` makes the set a claim's owner, so that the claim goes with the
/// set; `whenScaled: Delete` makes the pod of a condemned ordinal the owner instead, so that
/// the claim goes with that pod.
pub fn wanted_claim_owners(set: &StatefulSet, scaled_down: bool) -> (bool, bool) {
    let policy = set.spec.persistent_volume_claim_retention_policy.as_ref();
    let delete = |v: Option<&String>| v.is_some_and(|v| v == "Delete");
    let when_deleted = delete(policy.and_then(|p| p.when_deleted.as_ref()));
    let when_scaled = delete(policy.and_then(|p| p.when_scaled.as_ref()));
    let pod = when_scaled && scaled_down;
    (when_deleted && !pod, pod)
}

fn refers_to(r: &OwnerReference, api_version: &str, kind: &str, name: &str) -> bool {
    let group = |v: &str| v.rsplit_once('/').map_or("", |(g, _)| g).to_string();
    group(&r.api_version) == group(api_version) && r.kind == kind && r.name == name
}

/// The owner references `claim` should have for the pod `pod` of `set` (see
/// [`wanted_claim_owners`]), or `None` when it has them already, or when it must be left
/// alone: it refers to an earlier set or pod of the same name, or another controller owns
/// it (then only the set's and pod's references are removed, if it has any).
pub fn claim_owner_update(
    set: &StatefulSet,
    pod: &Pod,
    claim: &PersistentVolumeClaim,
) -> Option<Vec<OwnerReference>> {
    let refs = claim.metadata.owner_references.clone().unwrap_or_default();
    let set_uid = set.metadata.uid.as_deref().unwrap_or("");
    let pod_uid = pod.metadata.uid.as_deref().unwrap_or("");
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let is_set = |r: &OwnerReference| refers_to(r, "apps/v1", "StatefulSet", set_name(set));
    let is_pod = |r: &OwnerReference| refers_to(r, "v1", "Pod", pod_name);
    if refs
        .iter()
        .any(|r| (is_set(r) && r.uid != set_uid) || (is_pod(r) && r.uid != pod_uid))
    {
        return None;
    }
    let ours = |r: &OwnerReference| is_set(r) || is_pod(r);
    let mut kept: Vec<OwnerReference> = refs.iter().filter(|r| !ours(r)).cloned().collect();
    let foreign_controller = kept.iter().any(|r| r.controller == Some(true));
    if !foreign_controller {
        let ord = ordinal_of(pod).unwrap_or(-1);
        let (want_set, want_pod) = wanted_claim_owners(set, !in_ordinal_range(set, ord));
        if want_set {
            kept.extend(crate::controller_utils::new_controller_ref(
                &set.metadata,
                "apps/v1",
                "StatefulSet",
            ));
        }
        if want_pod {
            kept.extend(crate::controller_utils::new_controller_ref(
                &pod.metadata,
                "v1",
                "Pod",
            ));
        }
    }
    let same = kept.len() == refs.len() && kept.iter().all(|k| refs.contains(k));
    (!same).then_some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(json: serde_json::Value) -> StatefulSet {
        serde_json::from_value(json).unwrap()
    }

    fn web() -> StatefulSet {
        set(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u"},
            "spec": {
                "serviceName": "nginx",
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [{"name": "c", "image": "nginx"}],
                        "volumes": [
                            {"name": "www", "emptyDir": {}},
                            {"name": "cache", "emptyDir": {}}
                        ]
                    }
                },
                "volumeClaimTemplates": [{
                    "metadata": {"name": "www", "labels": {"tier": "data"}},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": "1Gi"}}}
                }]
            }
        }))
    }

    fn controller_ref() -> OwnerReference {
        crate::controller_utils::new_controller_ref(&web().metadata, "apps/v1", "StatefulSet")
            .unwrap()
    }

    #[test]
    fn names_and_ordinals() {
        assert_eq!(parent_and_ordinal("web-0"), Some(("web", Some(0))));
        assert_eq!(parent_and_ordinal("my-db-12"), Some(("my-db", Some(12))));
        assert_eq!(parent_and_ordinal("web-"), None);
        assert_eq!(parent_and_ordinal("web-1a"), None);
        assert_eq!(parent_and_ordinal("web"), None);
        assert_eq!(
            parent_and_ordinal("web-99999999999"),
            Some(("web", None)),
            "beyond i32: a member without an ordinal"
        );
        assert_eq!(pod_name("web", 4), "web-4");
        assert_eq!(claim_name("www", "web", 4), "www-web-4");
        let mut s = web();
        assert_eq!(start_ordinal(&s), 0);
        assert!(in_ordinal_range(&s, 0) && in_ordinal_range(&s, 2));
        assert!(!in_ordinal_range(&s, 3) && !in_ordinal_range(&s, -1));
        s.spec.ordinals = Some(k8s_openapi::api::apps::v1::StatefulSetOrdinals { start: Some(5) });
        assert!(!in_ordinal_range(&s, 4) && in_ordinal_range(&s, 5) && in_ordinal_range(&s, 7));
        assert!(!in_ordinal_range(&s, 8));
    }

    #[test]
    fn a_new_pod_has_its_identity_and_claims() {
        let s = web();
        let template = s.spec.template.clone();
        let pod = new_pod(&s, &template, "web-abc", 2, controller_ref());
        assert_eq!(pod.metadata.name.as_deref(), Some("web-2"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("ns"));
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels[POD_NAME_LABEL], "web-2");
        assert_eq!(labels[POD_INDEX_LABEL], "2");
        assert_eq!(labels[REVISION_LABEL], "web-abc");
        assert_eq!(labels["app"], "web");
        let spec = pod.spec.clone().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("web-2"));
        assert_eq!(spec.subdomain.as_deref(), Some("nginx"));
        let volumes = spec.volumes.unwrap();
        // The claim replaces the template's volume of its name; other volumes stay.
        assert_eq!(volumes.len(), 2);
        assert_eq!(volumes[0].name, "www");
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "www-web-2"
        );
        assert!(volumes[0].empty_dir.is_none());
        assert_eq!(volumes[1].name, "cache");
        assert_eq!(
            pod.metadata.owner_references.as_ref().unwrap()[0].kind,
            "StatefulSet"
        );
        assert!(identity_matches(&s, &pod));
        assert!(storage_matches(&s, &pod));
        assert!(missing_identity_labels(&s, &pod).is_empty());
        assert_eq!(pod_revision(&pod), "web-abc");

        let mut unlabelled = pod.clone();
        unlabelled.metadata.labels = Some([("app".into(), "web".into())].into());
        assert!(!identity_matches(&s, &unlabelled));
        let missing = missing_identity_labels(&s, &unlabelled);
        assert_eq!(missing[POD_NAME_LABEL], "web-2");
        assert_eq!(missing[POD_INDEX_LABEL], "2");
        let mut elsewhere = pod.clone();
        elsewhere.metadata.namespace = Some("other".into());
        assert!(!identity_matches(&s, &elsewhere));
        let mut no_claim = pod;
        no_claim.spec.as_mut().unwrap().volumes = None;
        assert!(!storage_matches(&s, &no_claim));
    }

    #[test]
    fn claims_are_named_per_ordinal_and_labelled_by_the_selector() {
        let claims = claims_for(&web(), 1);
        assert_eq!(claims.len(), 1);
        let (template, claim) = &claims[0];
        assert_eq!(template, "www");
        assert_eq!(claim.metadata.name.as_deref(), Some("www-web-1"));
        assert_eq!(claim.metadata.namespace.as_deref(), Some("ns"));
        let labels = claim.metadata.labels.clone().unwrap();
        assert_eq!(labels["app"], "web");
        assert_eq!(labels["tier"], "data");
        assert!(claim.spec.is_some());
    }

    #[test]
    fn membership() {
        let pod = |name: &str| Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(is_member_of("web", &pod("web-3")));
        assert!(!is_member_of("web", &pod("web-x-3")));
        assert!(!is_member_of("we", &pod("web-3")));
        assert!(!is_member_of("web", &pod("web")));
        assert_eq!(ordinal_of(&pod("web-3")), Some(3));
        assert!(!is_created(&pod("web-3")));
    }

    #[test]
    fn claim_owners_follow_the_retention_policy() {
        let with_policy = |deleted: &str, scaled: &str| {
            let mut s = web();
            s.spec.persistent_volume_claim_retention_policy = Some(
                k8s_openapi::api::apps::v1::StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some(deleted.into()),
                    when_scaled: Some(scaled.into()),
                },
            );
            s
        };
        assert_eq!(wanted_claim_owners(&web(), true), (false, false));
        let s = with_policy("Delete", "Retain");
        assert_eq!(wanted_claim_owners(&s, false), (true, false));
        assert_eq!(wanted_claim_owners(&s, true), (true, false));
        let s = with_policy("Retain", "Delete");
        assert_eq!(wanted_claim_owners(&s, false), (false, false));
        assert_eq!(wanted_claim_owners(&s, true), (false, true));
        let s = with_policy("Delete", "Delete");
        assert_eq!(wanted_claim_owners(&s, false), (true, false));
        assert_eq!(wanted_claim_owners(&s, true), (false, true));

        // web-5 is beyond the 3 replicas: its claim gets the pod as controller.
        let template = s.spec.template.clone();
        let mut pod = new_pod(&s, &template, "r", 5, controller_ref());
        pod.metadata.uid = Some("pod-uid".into());
        let (_, mut claim) = claims_for(&s, 5).remove(0);
        let refs = claim_owner_update(&s, &pod, &claim).unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(
            (refs[0].kind.as_str(), refs[0].uid.as_str()),
            ("Pod", "pod-uid")
        );
        assert_eq!(refs[0].controller, Some(true));
        claim.metadata.owner_references = Some(refs);
        assert_eq!(claim_owner_update(&s, &pod, &claim), None, "up to date");
        // Back in range (scaled up again): the set owns it, the pod no longer.
        let mut pod1 = pod.clone();
        pod1.metadata.name = Some("web-1".into());
        let (_, mut claim1) = claims_for(&s, 1).remove(0);
        claim1.metadata.owner_references = Some(vec![crate::controller_utils::new_controller_ref(
            &pod1.metadata,
            "v1",
            "Pod",
        )
        .unwrap()]);
        let refs = claim_owner_update(&s, &pod1, &claim1).unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].kind, "StatefulSet");
        // A reference to an earlier pod of that name: left alone.
        let mut stale = claim.clone();
        stale.metadata.owner_references.as_mut().unwrap()[0].uid = "old-pod".into();
        assert_eq!(claim_owner_update(&s, &pod, &stale), None);
        // Another controller owns it: ours are removed, none added.
        let mut foreign = claim.clone();
        foreign
            .metadata
            .owner_references
            .as_mut()
            .unwrap()
            .push(OwnerReference {
                api_version: "example.com/v1".into(),
                kind: "Other".into(),
                name: "x".into(),
                uid: "x".into(),
                controller: Some(true),
                block_owner_deletion: None,
            });
        let refs = claim_owner_update(&s, &pod, &foreign).unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].kind, "Other");
        // Retain/Retain: our references are removed.
        let retain = web();
        assert_eq!(claim_owner_update(&retain, &pod, &claim), Some(vec![]));
    }
}
