//! Server-side rollback, after kube-controller-manager's `rollback.go`: a Deployment
//! annotated `deprecated.deployment.rollback.to: N` (what the extensions/v1beta1
//! `rollback` subresource recorded) gets the template of revision N (0: the previous
//! revision) and loses the annotation. `kubectl rollout undo` does not use this: it patches
//! the template itself, and the new template then rolls out as any other.

use super::sync::refs;
use super::util::*;
use super::Shared;
use client::rest::{Api, PostParams};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};

/// The revision the Deployment asks to be rolled back to (an unparsable value is
/// ignored, as Kubernetes ignores it).
pub(super) fn rollback_to(d: &Deployment) -> Option<i64> {
    d.metadata
        .annotations
        .as_ref()?
        .get(DEPRECATED_ROLLBACK_TO)?
        .parse()
        .ok()
}

/// Copies `rs`'s template (without the hash label) and annotations into `d`; false (and
/// nothing changes) when the templates are equal already.
pub(super) fn rollback_to_template(d: &mut Deployment, rs: &ReplicaSet) -> bool {
    let template = rs_template(rs);
    if equal_ignore_hash(&d.spec.template, &template) {
        return false;
    }
    let mut template = template;
    if let Some(labels) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(POD_TEMPLATE_HASH_LABEL);
    }
    d.spec.template = template;
    set_deployment_annotations_to(d, rs);
    true
}

impl Shared {
    /// Rolls `d` back to the revision its annotation names.
    pub(super) async fn rollback(
        &self,
        d: &mut Deployment,
        rss: &mut Vec<ReplicaSet>,
    ) -> Result<(), String> {
        let split = self
            .get_all_replica_sets_and_sync_revision(d, rss, true)
            .await?;
        let all = split.all();
        let mut target = rollback_to(d).unwrap_or(0);
        if target == 0 {
            target = last_revision(&refs(rss, &all));
            if target == 0 {
                self.warn(
                    d,
                    ROLLBACK_REVISION_NOT_FOUND,
                    "Unable to find last revision.",
                );
                return self.clear_rollback_to(d).await;
            }
        }
        let Some(&i) = all
            .iter()
            .find(|&&i| revision(&rss[i]).ok() == Some(target))
        else {
            self.warn(
                d,
                ROLLBACK_REVISION_NOT_FOUND,
                "Unable to find the revision to rollback to.",
            );
            return self.clear_rollback_to(d).await;
        };
        let rs = rss[i].clone();
        if rollback_to_template(d, &rs) {
            let name = d.metadata.name.clone().unwrap_or_default();
            self.clear_rollback_to(d).await?;
            self.normal(
                d,
                ROLLBACK_DONE,
                format!("Rolled back deployment {name:?} to revision {target}"),
            );
            return Ok(());
        }
        let name = d.metadata.name.clone().unwrap_or_default();
        self.warn(
            d,
            ROLLBACK_TEMPLATE_UNCHANGED,
            format!(
                "The rollback revision contains the same template as current deployment {name:?}"
            ),
        );
        self.clear_rollback_to(d).await
    }

    /// Removes the rollback annotation and writes the Deployment (with whatever template
    /// change the rollback made).
    async fn clear_rollback_to(&self, d: &mut Deployment) -> Result<(), String> {
        if let Some(a) = d.metadata.annotations.as_mut() {
            a.remove(DEPRECATED_ROLLBACK_TO);
        }
        let api: Api<Deployment> = Api::for_type(
            self.client.clone(),
            d.metadata.namespace.as_deref().unwrap_or(""),
        );
        let updated = api
            .replace(
                d.metadata.name.as_deref().unwrap_or(""),
                &PostParams::default(),
                d,
            )
            .await
            .map_err(|e| format!("updating the deployment: {e}"))?;
        *d = updated;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSetSpec;
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn template(image: &str, hash: Option<&str>) -> PodTemplateSpec {
        let mut labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        if let Some(h) = hash {
            labels.insert(POD_TEMPLATE_HASH_LABEL.into(), h.into());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "c", "image": image}]},
        }))
        .unwrap()
    }

    #[test]
    fn rollback_copies_the_template_without_its_hash() {
        let mut d = Deployment::default();
        d.spec.template = template("v2", None);
        d.metadata.annotations = Some(BTreeMap::from([
            (DEPRECATED_ROLLBACK_TO.to_string(), "1".to_string()),
            (REVISION_ANNOTATION.to_string(), "2".to_string()),
        ]));
        assert_eq!(rollback_to(&d), Some(1));
        let old = ReplicaSet {
            metadata: ObjectMeta {
                annotations: Some(BTreeMap::from([
                    (REVISION_ANNOTATION.to_string(), "1".to_string()),
                    (
                        "kubernetes.io/change-cause".to_string(),
                        "first".to_string(),
                    ),
                ])),
                ..Default::default()
            },
            spec: ReplicaSetSpec {
                template: Some(template("v1", Some("abc"))),
                ..Default::default()
            },
            status: None,
        };
        assert!(rollback_to_template(&mut d, &old));
        assert_eq!(d.spec.template, template("v1", None));
        let a = d.metadata.annotations.as_ref().unwrap();
        assert_eq!(a["kubernetes.io/change-cause"], "first");
        assert_eq!(
            a[REVISION_ANNOTATION], "2",
            "the deployment keeps its own revision"
        );
        assert!(!rollback_to_template(&mut d, &old), "already there");
        let mut junk = Deployment::default();
        junk.metadata.annotations = Some(BTreeMap::from([(
            DEPRECATED_ROLLBACK_TO.to_string(),
            "x".to_string(),
        )]));
        assert_eq!(rollback_to(&junk), None);
    }
}
