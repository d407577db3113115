//! The writes of the StatefulSet controller: a member pod and its claims created, deleted
//! or relabelled, each reported as an event on the set in Kubernetes' words
//! (`create Pod web-0 in StatefulSet web successful`, `create Claim www-web-0 Pod web-0 in
//! StatefulSet web success`, and `FailedCreate`/`FailedDelete`/`FailedUpdate` warnings).

use super::identity::{claim_owner_update, claims_for, ordinal_of, wanted_claim_owners};
use super::plan::ClaimView;
use crate::controller_utils::error_message;
use crate::event_recorder::EventType;
use crate::pod_control::PodControl;
use client::cache::Lister;
use client::rest::{Api, Client, PatchParams, PatchType, PostParams};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::collections::BTreeMap;

/// Creates, deletes and relabels the pods of StatefulSets and creates their claims.
#[derive(Clone)]
pub struct StatefulPodControl {
    client: Client,
    pods: PodControl,
    claims: Lister<PersistentVolumeClaim>,
}

impl std::fmt::Debug for StatefulPodControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatefulPodControl").finish_non_exhaustive()
    }
}

fn name_of(set: &StatefulSet) -> &str {
    set.metadata.name.as_deref().unwrap_or("")
}

impl StatefulPodControl {
    /// Writes through `client` and `pods` (whose recorder reports the events), reading
    /// existing claims from `claims`.
    pub fn new(
        client: Client,
        pods: PodControl,
        claims: Lister<PersistentVolumeClaim>,
    ) -> StatefulPodControl {
        StatefulPodControl {
            client,
            pods,
            claims,
        }
    }

    fn event(&self, parent: &ObjectReference, ok: bool, reason: &str, message: String) {
        let t = if ok {
            EventType::Normal
        } else {
            EventType::Warning
        };
        self.pods.recorder().event(parent, t, reason, message);
    }

    /// Whether some claim of the pod of `ordinal` is not in the cache.
    pub fn lacks_claims(&self, set: &StatefulSet, ordinal: i32) -> bool {
        let ns = set.metadata.namespace.as_deref();
        claims_for(set, ordinal).iter().any(|(_, c)| {
            self.claims
                .get(ns, c.metadata.name.as_deref().unwrap_or(""))
                .is_none()
        })
    }

    /// Creates the claims of the pod of `ordinal` that do not exist yet.
    ///
    /// # Errors
    /// A claim is being deleted (the pod must wait for it to go), or a create failed.
    pub async fn create_missing_claims(
        &self,
        set: &StatefulSet,
        ordinal: i32,
        parent: &ObjectReference,
    ) -> Result<(), String> {
        let ns = set.metadata.namespace.clone().unwrap_or_default();
        let pod = super::identity::pod_name(name_of(set), ordinal);
        let api: Api<PersistentVolumeClaim> = Api::for_type(self.client.clone(), &ns);
        let owned_by_set = wanted_claim_owners(set, false).0;
        for (_, mut claim) in claims_for(set, ordinal) {
            if owned_by_set {
                claim.metadata.owner_references = crate::controller_utils::new_controller_ref(
                    &set.metadata,
                    "apps/v1",
                    "StatefulSet",
                )
                .map(|r| vec![r]);
            }
            let claim_name = claim.metadata.name.clone().unwrap_or_default();
            if let Some(existing) = self.claims.get(Some(&ns), &claim_name) {
                if existing.metadata.deletion_timestamp.is_some() {
                    return Err(format!(
                        "pvc {claim_name} is being deleted; pod {pod} waits for it"
                    ));
                }
                continue;
            }
            match api.create(&PostParams::default(), &claim).await {
                Ok(_) => self.event(
                    parent,
                    true,
                    "SuccessfulCreate",
                    format!(
                        "create Claim {claim_name} Pod {pod} in StatefulSet {} success",
                        name_of(set)
                    ),
                ),
                // Created since the cache was read: as good.
                Err(e) if e.is_already_exists() => {}
                Err(e) => {
                    self.event(
                        parent,
                        false,
                        "FailedCreate",
                        format!(
                            "create Claim {claim_name} for Pod {pod} in StatefulSet {} failed error: {}",
                            name_of(set),
                            error_message(&e)
                        ),
                    );
                    return Err(format!("creating claim {claim_name}: {e}"));
                }
            }
        }
        Ok(())
    }

    /// The claims of `set` as [`super::plan::plan`] sees them.
    pub fn view<'a>(&'a self, set: &'a StatefulSet) -> ClaimsOf<'a> {
        ClaimsOf { control: self, set }
    }

    /// Gives claim `claim` of `set` the owner references `owners`.
    ///
    /// # Errors
    /// The server refused the update.
    pub async fn set_claim_owners(
        &self,
        set: &StatefulSet,
        claim: &str,
        owners: &[OwnerReference],
        parent: &ObjectReference,
    ) -> Result<(), String> {
        let ns = set.metadata.namespace.clone().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::for_type(self.client.clone(), &ns);
        // Read and replace, as kube-controller-manager does (its role may update claims, not
        // patch them); a lost race is read again.
        let mut result = Ok(());
        for _ in 0..3 {
            result = match api.get(claim).await {
                Ok(mut current) => {
                    current.metadata.owner_references = Some(owners.to_vec());
                    api.replace(claim, &PostParams::default(), &current)
                        .await
                        .map(|_| ())
                }
                Err(e) => Err(e),
            };
            match &result {
                Err(e) if e.is_conflict() => continue,
                _ => break,
            }
        }
        match result {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => {
                self.event(
                    parent,
                    false,
                    "FailedUpdate",
                    format!(
                        "update Claim {claim} in StatefulSet {} failed error: {}",
                        name_of(set),
                        error_message(&e)
                    ),
                );
                Err(format!("updating the owners of claim {claim}: {e}"))
            }
        }
    }

    /// Creates `pod` (a member of `set`), its missing claims first.
    ///
    /// # Errors
    /// A claim could not be created, or the pod could not (409 when a pod of its name
    /// exists, which the cache has not shown yet).
    pub async fn create_pod(
        &self,
        set: &StatefulSet,
        pod: &Pod,
        ordinal: i32,
        parent: &ObjectReference,
    ) -> Result<(), String> {
        self.create_missing_claims(set, ordinal, parent).await?;
        let name = pod.metadata.name.as_deref().unwrap_or("");
        match self.pods.create_unrecorded(pod).await {
            Ok(_) => {
                self.event(
                    parent,
                    true,
                    "SuccessfulCreate",
                    format!(
                        "create Pod {name} in StatefulSet {} successful",
                        name_of(set)
                    ),
                );
                Ok(())
            }
            // The cache is behind; the next sync sees the pod.
            Err(e) if e.is_already_exists() => Err(format!("creating pod {name}: {e}")),
            Err(e) => {
                self.event(
                    parent,
                    false,
                    "FailedCreate",
                    format!(
                        "create Pod {name} in StatefulSet {} failed error: {}",
                        name_of(set),
                        error_message(&e)
                    ),
                );
                Err(format!("creating pod {name}: {e}"))
            }
        }
    }

    /// Deletes pod `name` of `set` if it is still the pod `uid` the decision was made on (a
    /// cache that is behind must not delete the pod that replaced it). A pod already gone
    /// or replaced is not an error.
    ///
    /// # Errors
    /// The server refused the delete.
    pub async fn delete_pod(
        &self,
        set: &StatefulSet,
        name: &str,
        uid: &str,
        parent: &ObjectReference,
    ) -> Result<(), String> {
        let ns = set.metadata.namespace.as_deref().unwrap_or("");
        let uid = (!uid.is_empty()).then_some(uid);
        match self.pods.delete_unrecorded(ns, name, uid).await {
            Ok(()) => {
                self.event(
                    parent,
                    true,
                    "SuccessfulDelete",
                    format!(
                        "delete Pod {name} in StatefulSet {} successful",
                        name_of(set)
                    ),
                );
                Ok(())
            }
            Err(e) if e.is_not_found() || (uid.is_some() && e.is_conflict()) => Ok(()),
            Err(e) => {
                self.event(
                    parent,
                    false,
                    "FailedDelete",
                    format!(
                        "delete Pod {name} in StatefulSet {} failed error: {}",
                        name_of(set),
                        error_message(&e)
                    ),
                );
                Err(format!("deleting pod {name}: {e}"))
            }
        }
    }

    /// Sets `labels` on pod `name` of `set` (its identity labels).
    ///
    /// # Errors
    /// The server refused the patch.
    pub async fn relabel_pod(
        &self,
        set: &StatefulSet,
        name: &str,
        labels: &BTreeMap<String, String>,
        parent: &ObjectReference,
    ) -> Result<(), String> {
        let ns = set.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Pod> = Api::for_type(self.client.clone(), &ns);
        let patch = serde_json::json!({"metadata": {"labels": labels}});
        match api
            .patch(name, &PatchParams::default(), PatchType::Merge, &patch)
            .await
        {
            Ok(_) => {
                self.event(
                    parent,
                    true,
                    "SuccessfulUpdate",
                    format!(
                        "update Pod {name} in StatefulSet {} successful",
                        name_of(set)
                    ),
                );
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => {
                self.event(
                    parent,
                    false,
                    "FailedUpdate",
                    format!(
                        "update Pod {name} in StatefulSet {} failed error: {}",
                        name_of(set),
                        error_message(&e)
                    ),
                );
                Err(format!("updating pod {name}: {e}"))
            }
        }
    }
}

/// The claims of one set, read from the cache.
#[derive(Debug)]
pub struct ClaimsOf<'a> {
    control: &'a StatefulPodControl,
    set: &'a StatefulSet,
}

impl ClaimView for ClaimsOf<'_> {
    fn lacks_claims(&self, ordinal: i32) -> bool {
        self.control.lacks_claims(self.set, ordinal)
    }

    fn owner_updates(&self, pod: &Pod) -> Vec<(String, Vec<OwnerReference>)> {
        let Some(ordinal) = ordinal_of(pod) else {
            return Vec::new();
        };
        let ns = self.set.metadata.namespace.as_deref();
        claims_for(self.set, ordinal)
            .into_iter()
            .filter_map(|(_, c)| {
                let name = c.metadata.name.unwrap_or_default();
                let existing = self.control.claims.get(ns, &name)?;
                claim_owner_update(self.set, pod, &existing).map(|owners| (name, owners))
            })
            .collect()
    }
}
