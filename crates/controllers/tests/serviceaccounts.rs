//! The ServiceAccounts controller against a real `listwatch serve`: every active namespace,
//! old or new, gets its `default` ServiceAccount, and gets it back when it is deleted.

mod common;

use client::cache::SharedInformerFactory;
use client::rest::resource::ApiResource;
use client::rest::{Api, Client, DeleteParams, PostParams};
use common::{eventually, Server};
use controllers::serviceaccounts::ServiceAccountsController;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::sync::Arc;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

fn accounts(client: &Client, ns: &str) -> Api<ServiceAccount> {
    Api::namespaced(client.clone(), ApiResource::of::<ServiceAccount>(), ns)
}

async fn default_uid(client: &Client, ns: &str) -> Option<String> {
    accounts(client, ns)
        .get("default")
        .await
        .ok()
        .and_then(|sa| sa.metadata.uid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_namespace_gets_its_default_service_account_and_keeps_it() {
    // Without the server's own keeper of default accounts, so that the controller is the
    // one that creates them.
    let server = Server::start(&["--default-service-accounts=false"]);
    let client = server.client();
    server.namespaces(&["before"]).await;
    // Nothing makes one but the controller.
    assert_eq!(default_uid(&client, "before").await, None);

    let factory = SharedInformerFactory::new(client.clone());
    let controller = Arc::new(ServiceAccountsController::new(&factory, client.clone(), 1).unwrap());
    let running = {
        let c = controller.clone();
        tokio::spawn(async move { c.run().await })
    };

    // Namespaces that were there before it started, the server's own included.
    for ns in ["before", "default", "kube-system"] {
        eventually(&format!("default account in {ns}"), LIMIT, || async {
            default_uid(&client, ns).await.is_some()
        })
        .await;
    }
    // A namespace created while it runs.
    let namespaces: Api<Namespace> = Api::all(client.clone(), ApiResource::of::<Namespace>());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some("after".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    eventually("default account in a new namespace", LIMIT, || async {
        default_uid(&client, "after").await.is_some()
    })
    .await;
    let sa = accounts(&client, "after").get("default").await.unwrap();
    assert!(sa.secrets.is_none() && sa.automount_service_account_token.is_none());

    // Deleted, it comes back as a new object; other accounts are not touched.
    let first = default_uid(&client, "after").await.unwrap();
    accounts(&client, "after")
        .delete("default", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the default account recreated", LIMIT, || async {
        default_uid(&client, "after")
            .await
            .is_some_and(|uid| uid != first)
    })
    .await;
    let all = accounts(&client, "after")
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(all.items.len(), 1, "{:?}", all.items);

    running.abort();
}
