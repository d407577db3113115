//! The scheduler's writes to the API server: bindings (`POST pods/{name}/binding`, a
//! core/v1 `Binding` naming the node) and the `PodScheduled` condition of pods that fit
//! nowhere (`PATCH pods/{name}/status`, strategic merge on the condition's `type`).
//!
//! [`PodWriter`] is the seam: [`RestPodWriter`] talks to the server, tests use a fake.
//! The scheduling loop never awaits a write: each binding runs on a task of its own (many
//! at once, see `SchedulerConfig::max_in_flight_bindings`), so bindings leave as fast as
//! decisions are made.

use std::future::Future;
use std::pin::Pin;

use client::rest::resource::PODS;
use client::rest::Client;
use http::Method;

/// A boxed future, as the [`PodWriter`] methods return.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Why a write failed, as far as the scheduler cares.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// 409: the pod is bound already, or is another pod than the one decided on (its UID
    /// changed). Nothing to retry: the watch will show what happened.
    #[error("conflict: {0}")]
    Conflict(String),
    /// 404: the pod is gone.
    #[error("not found: {0}")]
    NotFound(String),
    /// Anything else (unreachable server, timeout, 5xx, 422, ...): worth a retry later.
    #[error("{0}")]
    Other(String),
}

impl WriteError {
    /// Classifies a REST error.
    pub fn from_rest(e: &client::rest::Error) -> WriteError {
        match e.code() {
            Some(409) => WriteError::Conflict(e.to_string()),
            Some(404) => WriteError::NotFound(e.to_string()),
            _ => WriteError::Other(e.to_string()),
        }
    }
}

/// Identifies the pod a write is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTarget {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid` (the binding carries it, so that a pod recreated under the same name
    /// is not bound by a decision about its predecessor); empty if unknown.
    pub uid: String,
}

/// The API writes the scheduler makes. Implementations must be cheap to call from many
/// tasks at once.
pub trait PodWriter: Send + Sync + 'static {
    /// Binds the pod to `node`.
    fn bind(&self, pod: &PodTarget, node: &str) -> BoxFuture<Result<(), WriteError>>;

    /// Applies a strategic merge patch to the pod's status subresource.
    fn patch_status(
        &self,
        pod: &PodTarget,
        patch: serde_json::Value,
    ) -> BoxFuture<Result<(), WriteError>>;
}

/// The [`PodWriter`] over the REST client.
#[derive(Debug, Clone)]
pub struct RestPodWriter {
    client: Client,
}

impl RestPodWriter {
    /// Writes through `client`.
    pub fn new(client: Client) -> RestPodWriter {
        RestPodWriter { client }
    }
}

/// The core/v1 `Binding` kube-scheduler posts: the pod's name, namespace and UID, and the
/// node as target.
pub fn binding_body(pod: &PodTarget, node: &str) -> serde_json::Value {
    let mut metadata = serde_json::json!({"name": pod.name, "namespace": pod.namespace});
    if !pod.uid.is_empty() {
        metadata["uid"] = serde_json::Value::from(pod.uid.as_str());
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    })
}

impl PodWriter for RestPodWriter {
    fn bind(&self, pod: &PodTarget, node: &str) -> BoxFuture<Result<(), WriteError>> {
        let client = self.client.clone();
        let path = format!(
            "{}/binding",
            PODS.item_path(Some(&pod.namespace), &pod.name)
        );
        let body = serde_json::to_vec(&binding_body(pod, node));
        Box::pin(async move {
            let body = body.map_err(|e| WriteError::Other(e.to_string()))?;
            client
                .request_bytes(Method::POST, &path, Some((body.into(), "application/json")))
                .await
                .map(drop)
                .map_err(|e| WriteError::from_rest(&e))
        })
    }

    fn patch_status(
        &self,
        pod: &PodTarget,
        patch: serde_json::Value,
    ) -> BoxFuture<Result<(), WriteError>> {
        let client = self.client.clone();
        let path = format!("{}/status", PODS.item_path(Some(&pod.namespace), &pod.name));
        Box::pin(async move {
            let body = serde_json::to_vec(&patch).map_err(|e| WriteError::Other(e.to_string()))?;
            client
                .request_bytes(
                    Method::PATCH,
                    &path,
                    Some((body.into(), "application/strategic-merge-patch+json")),
                )
                .await
                .map(drop)
                .map_err(|e| WriteError::from_rest(&e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_as_kube_scheduler_sends_it() {
        let pod = PodTarget {
            namespace: "ns".into(),
            name: "web-1".into(),
            uid: "u-1".into(),
        };
        assert_eq!(
            binding_body(&pod, "node-7"),
            serde_json::json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": "web-1", "namespace": "ns", "uid": "u-1"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "node-7"}})
        );
        let no_uid = PodTarget {
            uid: String::new(),
            ..pod
        };
        assert!(binding_body(&no_uid, "n")["metadata"].get("uid").is_none());
    }

    #[test]
    fn rest_errors_are_classified() {
        use api::status::{Reason, Status};
        let api = |reason| client::rest::Error::Api(Box::new(Status::new(reason, "m")));
        assert!(matches!(
            WriteError::from_rest(&api(Reason::Conflict)),
            WriteError::Conflict(_)
        ));
        assert!(matches!(
            WriteError::from_rest(&api(Reason::NotFound)),
            WriteError::NotFound(_)
        ));
        assert!(matches!(
            WriteError::from_rest(&api(Reason::InternalError)),
            WriteError::Other(_)
        ));
        assert!(matches!(
            WriteError::from_rest(&client::rest::Error::Timeout(
                std::time::Duration::from_secs(1)
            )),
            WriteError::Other(_)
        ));
    }
}
