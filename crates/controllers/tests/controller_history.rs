//! The controller history against a real `listwatch serve`: revisions created with their
//! owner's controller reference, an equal revision found instead of created twice, a name
//! taken by other data resolved with the collision count, an owner's revisions listed and
//! claimed from an informer (orphans adopted, unselected ones released), renumbered and
//! deleted.

mod common;
mod workloads;

use client::cache::{wait_for_cache_sync, SharedInformerFactory};
use client::rest::{Api, PostParams};
use common::Server;
use controllers::controller_history::{
    hash_controller_revision, new_controller_revision, ControllerHistory,
    CONTROLLER_REVISION_HASH_LABEL,
};
use controllers::controller_ref_manager::{AdoptionCheck, Owner};
use controllers::controller_utils::label_selector_as_selector;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::json;
use std::time::Duration;
use workloads::*;

const LIMIT: Duration = Duration::from_secs(30);

fn daemon_set(name: &str, app: &str) -> DaemonSet {
    DaemonSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(labels(&[("app", app)])),
                ..Default::default()
            },
            template: template(app, "busybox"),
            ..Default::default()
        },
        status: None,
    }
}

fn revision_names(revs: &[std::sync::Arc<ControllerRevision>]) -> Vec<String> {
    let mut v: Vec<String> = revs
        .iter()
        .map(|r| r.metadata.name.clone().unwrap_or_default())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_are_created_found_claimed_renumbered_and_deleted() {
    let server = Server::start(&[]);
    server.namespaces(&["h1"]).await;
    let client = server.client();
    let ds: DaemonSet = create(&client, "h1", &daemon_set("agent", "agent")).await;
    let factory = SharedInformerFactory::new(client.clone());
    let informer = factory.informer::<ControllerRevision>().unwrap();
    let history = ControllerHistory::new(client.clone(), &informer).unwrap();
    factory.start();
    wait_for_cache_sync(&[&informer], LIMIT).await;

    let app = labels(&[("app", "agent")]);
    let first = new_controller_revision(
        &ds.metadata,
        "apps/v1",
        "DaemonSet",
        Some(&app),
        json!({"spec": {"template": {"$patch": "replace", "image": "a"}}}),
        1,
        None,
    )
    .unwrap();
    let mut collisions = 0;
    let created = history
        .create_controller_revision(&ds.metadata, &first, &mut collisions)
        .await
        .unwrap();
    let hash = hash_controller_revision(&first, Some(0));
    assert_eq!(created.metadata.name, Some(format!("agent-{hash}")));
    assert_eq!(
        created.metadata.labels.as_ref().unwrap()[CONTROLLER_REVISION_HASH_LABEL],
        hash
    );
    let owner = &created.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("DaemonSet", ds.metadata.uid.as_deref().unwrap(), Some(true))
    );
    // The same data again: the stored revision, no collision.
    let again = history
        .create_controller_revision(&ds.metadata, &first, &mut collisions)
        .await
        .unwrap();
    assert_eq!(
        (again.metadata.uid.clone(), collisions),
        (created.metadata.uid.clone(), 0)
    );

    // Another revision's name squatted by other data: the collision count moves it on.
    let second = new_controller_revision(
        &ds.metadata,
        "apps/v1",
        "DaemonSet",
        Some(&app),
        json!({"spec": {"template": {"$patch": "replace", "image": "b"}}}),
        2,
        None,
    )
    .unwrap();
    let squatted = format!("agent-{}", hash_controller_revision(&second, Some(0)));
    let squatter = ControllerRevision {
        metadata: ObjectMeta {
            name: Some(squatted.clone()),
            labels: Some(labels(&[("app", "other")])),
            ..Default::default()
        },
        data: RawExtension(json!({"unrelated": true})),
        revision: Some(1),
    };
    let api = Api::<ControllerRevision>::for_type(client.clone(), "h1");
    api.create(&PostParams::default(), &squatter).await.unwrap();
    let moved = history
        .create_controller_revision(&ds.metadata, &second, &mut collisions)
        .await
        .unwrap();
    assert_eq!(collisions, 1);
    assert_eq!(
        moved.metadata.name,
        Some(format!(
            "agent-{}",
            hash_controller_revision(&second, Some(1))
        ))
    );
    assert_ne!(moved.metadata.name.as_deref(), Some(squatted.as_str()));

    // An orphan the selector matches, and one of ours relabelled out of it.
    let orphan = ControllerRevision {
        metadata: ObjectMeta {
            name: Some("agent-orphan".into()),
            labels: Some(app.clone()),
            ..Default::default()
        },
        data: RawExtension(json!({"old": 1})),
        revision: Some(0),
    };
    api.create(&PostParams::default(), &orphan).await.unwrap();
    merge_patch::<ControllerRevision>(
        &client,
        "h1",
        moved.metadata.name.as_deref().unwrap(),
        json!({"metadata": {"labels": {"app": "gone"}}}),
    )
    .await;
    let selector = label_selector_as_selector(&ds.spec.selector).unwrap();
    let want_listed = {
        let mut v = vec![
            "agent-orphan".to_string(),
            created.metadata.name.clone().unwrap(),
        ];
        v.sort();
        v
    };
    eventually(
        "the cache shows the orphan and the relabelled one",
        LIMIT,
        || {
            let listed = history.list_controller_revisions(&ds.metadata, &selector);
            let want = want_listed.clone();
            async move { revision_names(&listed) == want }
        },
    )
    .await;
    let owner = Owner {
        meta: &ds.metadata,
        api_version: "apps/v1",
        kind: "DaemonSet",
    };
    let mut adoption = AdoptionCheck::new(|| Box::pin(async { Ok(()) }));
    let claimed = history
        .claim_controller_revisions(owner, &selector, &mut adoption)
        .await
        .unwrap();
    assert_eq!(revision_names(&claimed), want_listed);
    let adopted: ControllerRevision = get(&client, "h1", "agent-orphan").await;
    assert_eq!(controller_uid(&adopted.metadata), ds.metadata.uid.clone());
    let released: ControllerRevision =
        get(&client, "h1", moved.metadata.name.as_deref().unwrap()).await;
    assert_eq!(controller_uid(&released.metadata), None);
    // The squatter is nobody's and not selected: untouched.
    let untouched: ControllerRevision = get(&client, "h1", &squatted).await;
    assert_eq!(controller_uid(&untouched.metadata), None);

    // Renumbered, then deleted (twice: the second finds it gone and is content).
    let renumbered = history
        .update_controller_revision(&created, 5)
        .await
        .unwrap();
    assert_eq!(renumbered.revision, Some(5));
    history.delete_controller_revision(&created).await.unwrap();
    history.delete_controller_revision(&created).await.unwrap();
    let gone = api
        .get(created.metadata.name.as_deref().unwrap())
        .await
        .unwrap_err();
    assert!(gone.is_not_found(), "{gone}");
}
