//! The ControllerRevision operations the StatefulSet controller needs.

use super::revision::{revision_data, same_template};
use crate::controller_utils::{new_controller_ref, safe_encode_string, Fnv32a};
use client::rest::{Api, Client, DeleteParams, PostParams};
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;

/// Oldest first: by revision number, then creation time, then name.
pub fn sort_revisions(revisions: &mut [ControllerRevision]) {
    revisions.sort_by(|a, b| {
        a.revision
            .unwrap_or(0)
            .cmp(&b.revision.unwrap_or(0))
            .then_with(|| {
                let t = |r: &ControllerRevision| r.metadata.creation_timestamp.clone().map(|t| t.0);
                t(a).cmp(&t(b))
            })
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
}

fn hash(revision: &ControllerRevision, collision_count: i32) -> String {
    let mut h = Fnv32a::default();
    h.write(&serde_json::to_vec(&revision.data.0).unwrap_or_default());
    h.write(collision_count.to_string().as_bytes());
    safe_encode_string(&h.finish().to_string())
}

/// The revision that records `set`'s template now, numbered `number`, named for
/// `collision_count`.
///
/// # Errors
/// The set has no uid (it was never stored).
pub fn new_revision(
    set: &StatefulSet,
    number: i64,
    collision_count: i32,
) -> Result<ControllerRevision, String> {
    let owner = new_controller_ref(&set.metadata, "apps/v1", "StatefulSet")
        .ok_or("the statefulset has no uid")?;
    let mut r = ControllerRevision {
        data: RawExtension(revision_data(set)),
        revision: Some(number),
        ..Default::default()
    };
    r.metadata.namespace = set.metadata.namespace.clone();
    r.metadata.owner_references = Some(vec![owner]);
    r.metadata.annotations = set.metadata.annotations.clone();
    name(set, &mut r, collision_count);
    Ok(r)
}

fn name(set: &StatefulSet, r: &mut ControllerRevision, collision_count: i32) {
    let h = hash(r, collision_count);
    let prefix = set.metadata.name.clone().unwrap_or_default();
    let prefix: String = prefix.chars().take(223).collect();
    r.metadata.name = Some(format!("{prefix}-{h}"));
    let mut labels = set
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(super::identity::REVISION_LABEL.to_string(), h);
    r.metadata.labels = Some(labels);
}

/// Gives `revision` the number `number`.
///
/// # Errors
/// The server refused the update.
pub async fn renumber(
    client: &Client,
    revision: &ControllerRevision,
    number: i64,
) -> Result<ControllerRevision, String> {
    let ns = revision.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::for_type(client.clone(), &ns);
    let mut r = revision.clone();
    r.revision = Some(number);
    api.replace(
        r.metadata.name.as_deref().unwrap_or(""),
        &PostParams::default(),
        &r,
    )
    .await
    .map_err(|e| format!("renumbering revision: {e}"))
}

/// Creates `revision`; when its name is taken by a revision with another template, raises
/// `collision_count` and tries the next name.
///
/// # Errors
/// The server refused the create.
pub async fn create(
    client: &Client,
    set: &StatefulSet,
    mut revision: ControllerRevision,
    collision_count: &mut i32,
) -> Result<ControllerRevision, String> {
    let ns = revision.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::for_type(client.clone(), &ns);
    loop {
        name(set, &mut revision, *collision_count);
        match api.create(&PostParams::default(), &revision).await {
            Ok(r) => return Ok(r),
            Err(e) if e.is_already_exists() => {
                let existing = api
                    .get(revision.metadata.name.as_deref().unwrap_or(""))
                    .await
                    .map_err(|e| format!("reading a colliding revision: {e}"))?;
                if same_template(&existing, &revision) {
                    return Ok(existing);
                }
                *collision_count = collision_count.saturating_add(1);
            }
            Err(e) => return Err(format!("creating revision: {e}")),
        }
    }
}

/// Deletes `revision` (one already gone is not an error).
///
/// # Errors
/// The server refused the delete.
pub async fn delete(client: &Client, revision: &ControllerRevision) -> Result<(), String> {
    let ns = revision.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::for_type(client.clone(), &ns);
    match api
        .delete(
            revision.metadata.name.as_deref().unwrap_or(""),
            &DeleteParams::default(),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(format!("deleting revision: {e}")),
    }
}
