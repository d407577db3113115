//! `PodControl`: how workload controllers create, delete and patch pods through the API,
//! reporting each create and delete as an event on the controlling object, as
//! kube-controller-manager's `RealPodControl` does (`SuccessfulCreate`/`FailedCreate`,
//! `SuccessfulDelete`/`FailedDelete`).
//!
//! Creates of one template share one serialized body. At most
//! [`DEFAULT_MAX_IN_FLIGHT`] requests of one `PodControl` are in flight at once, so a
//! burst of slow-start batches across many objects stays within what one connection pool
//! should open.

use crate::controller_utils::{error_message, pod_from_template};
use crate::event_recorder::{EventRecorder, EventType};
use bytes::Bytes;
use client::cache::backoff::SplitMix64;
use client::rest::{
    resource::PODS, Client, DeleteParams, PatchParams, PatchType, PostParams, Preconditions,
};
use k8s_openapi::api::core::v1::{ObjectReference, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Pod requests one [`PodControl`] has in flight at most.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 128;

/// Why a pod could not be created.
#[derive(Debug, thiserror::Error)]
pub enum PodControlError {
    /// The template has no labels: the pod could never be matched to its controller.
    #[error("unable to create pods, no labels")]
    NoLabels,
    /// The template could not be serialized.
    #[error("unable to encode the pod: {0}")]
    Encode(String),
    /// The API server refused the request, or it could not be made.
    #[error("{}", error_message(.0))]
    Api(#[from] client::rest::Error),
}

impl PodControlError {
    /// The API error, if the server was reached.
    pub fn api(&self) -> Option<&client::rest::Error> {
        match self {
            PodControlError::Api(e) => Some(e),
            _ => None,
        }
    }
}

/// One pod body, serialized once, that [`PodControl::create`] posts as often as asked
/// (with `generateName`), or [`PodControl::create_named`] under a name of the caller's.
#[derive(Debug, Clone)]
pub struct PodBody {
    namespace: String,
    json: Bytes,
    /// The `generateName` prefix.
    prefix: String,
    /// Where in `json` a `"name":…,` member goes: just inside the top-level `metadata`.
    name_at: usize,
}

/// The opening of the top-level `metadata` object in a serialized pod. The first match is
/// the top-level one: `apiVersion` and `kind` come before it, and inside a JSON string the
/// quotes would be escaped.
const METADATA_OPENING: &[u8] = b"\"metadata\":{";

impl PodBody {
    /// The namespace the pods go to.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The body with `metadata.name` set to `name` (`generateName` stays, as on a pod the
    /// server named).
    fn named(&self, name: &str) -> Bytes {
        // A name is a plain string: serializing it cannot fail.
        let quoted = serde_json::to_string(name).unwrap_or_default();
        let mut out = Vec::with_capacity(self.json.len() + quoted.len() + 8);
        out.extend_from_slice(&self.json[..self.name_at]);
        out.extend_from_slice(b"\"name\":");
        out.extend_from_slice(quoted.as_bytes());
        out.push(b',');
        out.extend_from_slice(&self.json[self.name_at..]);
        Bytes::from(out)
    }
}

/// Creates, deletes and patches pods for controllers. Cheap to clone (clones share the
/// in-flight limit).
#[derive(Clone)]
pub struct PodControl {
    client: Client,
    recorder: EventRecorder,
    permits: Arc<Semaphore>,
    rng: Arc<parking_lot::Mutex<SplitMix64>>,
}

impl std::fmt::Debug for PodControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodControl")
            .field("available_permits", &self.permits.available_permits())
            .finish_non_exhaustive()
    }
}

#[derive(serde::Deserialize)]
struct NameOnly {
    #[serde(default)]
    metadata: MetaName,
}

#[derive(serde::Deserialize, Default)]
struct MetaName {
    #[serde(default)]
    name: Option<String>,
}

impl PodControl {
    /// Writes through `client`, records events with `recorder`, and keeps at most
    /// `max_in_flight` requests in flight.
    pub fn new(client: Client, recorder: EventRecorder, max_in_flight: usize) -> PodControl {
        PodControl {
            client,
            recorder,
            permits: Arc::new(Semaphore::new(max_in_flight.max(1))),
            rng: Arc::new(parking_lot::Mutex::new(SplitMix64::from_entropy())),
        }
    }

    /// A new name for a pod of `body`, drawn at random as the API server draws one for its
    /// `generateName` ([`api::object::generated_name`]).
    pub fn fresh_name(&self, body: &PodBody) -> String {
        api::object::generated_name(&body.prefix, self.rng.lock().next_u64())
    }

    /// The body of the pods `template` stands for, created by `parent_name` in `namespace`
    /// under `controller_ref` (see [`pod_from_template`]).
    ///
    /// # Errors
    /// [`PodControlError::NoLabels`] when the template has no labels.
    pub fn pod_body(
        namespace: &str,
        template: &PodTemplateSpec,
        parent_name: &str,
        controller_ref: OwnerReference,
    ) -> Result<PodBody, PodControlError> {
        let pod = pod_from_template(template, parent_name, Some(controller_ref));
        if pod.metadata.labels.as_ref().is_none_or(|l| l.is_empty()) {
            return Err(PodControlError::NoLabels);
        }
        let json = serde_json::to_vec(&pod).map_err(|e| PodControlError::Encode(e.to_string()))?;
        let name_at = json
            .windows(METADATA_OPENING.len())
            .position(|w| w == METADATA_OPENING)
            .map(|at| at + METADATA_OPENING.len())
            .ok_or_else(|| PodControlError::Encode("the pod has no metadata".to_string()))?;
        Ok(PodBody {
            namespace: namespace.to_string(),
            json: Bytes::from(json),
            prefix: pod.metadata.generate_name.clone().unwrap_or_default(),
            name_at,
        })
    }

    /// The recorder the events of this `PodControl` go through.
    pub fn recorder(&self) -> &EventRecorder {
        &self.recorder
    }

    /// Creates `pod` as it is (a pod with its own name, as a StatefulSet's are), recording
    /// no event: the caller words its own. Returns the pod as stored.
    ///
    /// # Errors
    /// The API server's refusal (409 AlreadyExists when the name is taken), or a transport
    /// error.
    pub async fn create_unrecorded(&self, pod: &Pod) -> Result<Pod, client::rest::Error> {
        let _permit = self.permits.acquire().await;
        self.client
            .create(
                &PODS,
                pod.metadata.namespace.as_deref(),
                &PostParams::default(),
                pod,
            )
            .await
    }

    /// Deletes pod `name` in `namespace` — only if its uid is `uid`, when given — recording
    /// no event: the caller words its own.
    ///
    /// # Errors
    /// The API server's refusal (404 when the pod is already gone, 409 when it has another
    /// uid), or a transport error.
    pub async fn delete_unrecorded(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<(), client::rest::Error> {
        let params = DeleteParams {
            preconditions: uid.map(|u| Preconditions {
                uid: Some(u.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let _permit = self.permits.acquire().await;
        self.client
            .delete::<serde::de::IgnoredAny>(&PODS, Some(namespace), name, &params)
            .await
            .map(|_| ())
    }

    /// Creates one pod from `body`, recording `SuccessfulCreate` (or `FailedCreate`) on
    /// `parent`. Returns the new pod's name.
    ///
    /// # Errors
    /// The API server's refusal, or a transport error.
    pub async fn create(
        &self,
        body: &PodBody,
        parent: &ObjectReference,
    ) -> Result<String, PodControlError> {
        self.post(body, body.json.clone(), parent, false).await
    }

    /// Creates the pod of `body` named `name` (see [`PodControl::fresh_name`]), recording
    /// `SuccessfulCreate` (or `FailedCreate`) on `parent`. Posting one name twice never
    /// makes two pods: the second is refused with 409 AlreadyExists, which is returned
    /// without an event — for a retry it means the first request landed, which the caller
    /// confirms and records ([`PodControl::record_created`]).
    ///
    /// # Errors
    /// The API server's refusal, or a transport error.
    pub async fn create_named(
        &self,
        body: &PodBody,
        name: &str,
        parent: &ObjectReference,
    ) -> Result<(), PodControlError> {
        self.post(body, body.named(name), parent, true)
            .await
            .map(|_| ())
    }

    /// Records `SuccessfulCreate` for pod `name` on `parent`: a create whose answer was lost
    /// but that landed.
    pub fn record_created(&self, parent: &ObjectReference, name: &str) {
        self.recorder.event(
            parent,
            EventType::Normal,
            "SuccessfulCreate",
            format!("Created pod: {name}"),
        );
    }

    async fn post(
        &self,
        body: &PodBody,
        json: Bytes,
        parent: &ObjectReference,
        quiet_conflict: bool,
    ) -> Result<String, PodControlError> {
        let path = PODS.collection_path(Some(&body.namespace));
        let result = {
            let _permit = self.permits.acquire().await;
            self.client
                .request_bytes(http::Method::POST, &path, Some((json, "application/json")))
                .await
        };
        match result {
            Ok((_, resp)) => {
                let name = serde_json::from_slice::<NameOnly>(&resp)
                    .ok()
                    .and_then(|n| n.metadata.name)
                    .unwrap_or_default();
                self.record_created(parent, &name);
                Ok(name)
            }
            Err(e) if quiet_conflict && e.is_already_exists() => Err(PodControlError::Api(e)),
            Err(e) => {
                self.recorder.event(
                    parent,
                    EventType::Warning,
                    "FailedCreate",
                    format!("Error creating: {}", error_message(&e)),
                );
                Err(PodControlError::Api(e))
            }
        }
    }

    /// Deletes pod `name` in `namespace`, recording `SuccessfulDelete` (or `FailedDelete`)
    /// on `parent`.
    ///
    /// # Errors
    /// The API server's refusal (404 when the pod is already gone), or a transport error.
    pub async fn delete(
        &self,
        namespace: &str,
        name: &str,
        parent: &ObjectReference,
    ) -> Result<(), client::rest::Error> {
        match self.delete_unrecorded(namespace, name, None).await {
            Ok(()) => {
                self.recorder.event(
                    parent,
                    EventType::Normal,
                    "SuccessfulDelete",
                    format!("Deleted pod: {name}"),
                );
                Ok(())
            }
            Err(e) => {
                if !e.is_not_found() {
                    self.recorder.event(
                        parent,
                        EventType::Warning,
                        "FailedDelete",
                        format!("Error deleting: {}", error_message(&e)),
                    );
                }
                Err(e)
            }
        }
    }

    /// Applies the strategic merge patch `patch` to pod `name` in `namespace`.
    ///
    /// # Errors
    /// The API server's refusal, or a transport error.
    pub async fn patch(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), client::rest::Error> {
        let _permit = self.permits.acquire().await;
        self.client
            .patch::<serde::de::IgnoredAny, _>(
                &PODS,
                Some(namespace),
                name,
                &PatchParams::default(),
                PatchType::Strategic,
                patch,
            )
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_without_labels_makes_no_pods() {
        let t: PodTemplateSpec =
            serde_json::from_str(r#"{"spec":{"containers":[{"name":"c","image":"i"}]}}"#).unwrap();
        let r = OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "rs".into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        assert!(matches!(
            PodControl::pod_body("ns", &t, "rs", r.clone()),
            Err(PodControlError::NoLabels)
        ));
        let t: PodTemplateSpec = serde_json::from_str(
            r#"{"metadata":{"labels":{"app":"x"}},"spec":{"containers":[{"name":"c","image":"i"}]}}"#,
        )
        .unwrap();
        let body = PodControl::pod_body("ns", &t, "rs", r).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body.json).unwrap();
        assert_eq!(v["metadata"]["generateName"], "rs-");
        assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "u");
        assert_eq!(body.namespace, "ns");
    }

    #[tokio::test]
    async fn a_named_body_keeps_everything_else() {
        // An annotation that spells the metadata opening must not be taken for it.
        let t: PodTemplateSpec = serde_json::from_str(
            r#"{"metadata":{"labels":{"app":"x"},
                "annotations":{"a":"\"metadata\":{\"name\":\"evil\","}},
                "spec":{"containers":[{"name":"c","image":"i"}]}}"#,
        )
        .unwrap();
        let r = OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-5d8".into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let body_owner = r.clone();
        let body = PodControl::pod_body("ns", &t, "web-5d8", r).unwrap();
        let client = Client::new(client::rest::Config::new("http://127.0.0.1:1").unwrap()).unwrap();
        let control = PodControl::new(client.clone(), EventRecorder::new(client, "test", None), 1);
        let name = control.fresh_name(&body);
        assert_eq!(name.len(), "web-5d8-".len() + 5);
        assert!(name.starts_with("web-5d8-"));
        assert!(name["web-5d8-".len()..]
            .bytes()
            .all(|b| api::object::NAME_ALPHABET.contains(&b)));
        assert_ne!(control.fresh_name(&body), name, "names are drawn at random");
        // A long prefix is cut, as the server cuts it, so that the name fits in 63.
        let long = "r".repeat(70);
        let long_body = PodControl::pod_body("ns", &t, &long, body_owner.clone()).unwrap();
        let long_name = control.fresh_name(&long_body);
        assert_eq!(long_name.len(), 63);
        assert!(long_name.starts_with(&"r".repeat(58)));
        let named: serde_json::Value = serde_json::from_slice(&body.named(&name)).unwrap();
        let plain: serde_json::Value = serde_json::from_slice(&body.json).unwrap();
        assert_eq!(named["metadata"]["name"], name.as_str());
        assert_eq!(named["metadata"]["generateName"], "web-5d8-");
        let mut without = named.clone();
        without["metadata"].as_object_mut().unwrap().remove("name");
        assert_eq!(without, plain, "nothing else changed");
    }
}
