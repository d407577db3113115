//! One simulated kubelet's dealings with the API about its node: registration, the lease,
//! and status reports. The process's heartbeat loop ([`super::run`]) decides when; this
//! file does the requests.

use super::config::NodeAgentConfig;
use super::ipam::IpAllocator;
use super::lease::{lease_object, renew_patch, NODE_LEASE_NAMESPACE};
use super::node::{node_object, status, status_patch, NodeIdentity};
use super::{object_reference, EventRecorder, EventType};
use bytes::Bytes;
use client::cache::SharedIndexInformer;
use client::rest::resource::{LEASES, NODES};
use client::rest::{Client, Error, PostParams};
use http::Method;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::SystemTime;

const MERGE_PATCH: &str = "application/merge-patch+json";
const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";

/// One node of the process.
pub(crate) struct Agent {
    pub id: NodeIdentity,
    pub client: Client,
    /// `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/NAME`.
    lease_path: String,
    /// `/api/v1/nodes/NAME/status`.
    status_path: String,
    /// The Node's uid, once registered.
    uid: Mutex<Option<String>>,
    registered: AtomicBool,
    /// The node's pod addresses.
    pub ips: Mutex<IpAllocator>,
    recorder: OnceLock<EventRecorder>,
    /// The informer of the node's own pods (`spec.nodeName=NAME`), once started.
    pub pods: OnceLock<SharedIndexInformer<Pod>>,
}

impl Agent {
    pub(crate) fn new(id: NodeIdentity, client: Client) -> Agent {
        Agent {
            lease_path: LEASES.item_path(Some(NODE_LEASE_NAMESPACE), &id.name),
            status_path: format!("{}/status", NODES.item_path(None, &id.name)),
            ips: Mutex::new(IpAllocator::new(id.pod_network)),
            id,
            client,
            uid: Mutex::new(None),
            registered: AtomicBool::new(false),
            recorder: OnceLock::new(),
            pods: OnceLock::new(),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.id.name
    }

    pub(crate) fn is_registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }

    /// The node's event recorder (`kubelet` on the node), made on first use.
    pub(crate) fn recorder(&self) -> &EventRecorder {
        self.recorder.get_or_init(|| {
            EventRecorder::new(self.client.clone(), "kubelet", Some(self.id.name.clone()))
        })
    }

    /// Records an event about the node itself (the kubelet names it by its name).
    pub(crate) fn node_event(&self, reason: &str, message: String) {
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(self.id.name.clone()),
            uid: Some(self.id.name.clone()),
            ..Default::default()
        };
        self.recorder()
            .event(&reference, EventType::Normal, reason, message);
    }

    /// Registers the node: creates it, or — if it exists (an earlier run) — takes it over
    /// by reporting its labels and status.
    pub(crate) async fn register(
        &self,
        config: &NodeAgentConfig,
        now: SystemTime,
    ) -> Result<(), Error> {
        let node = node_object(config, &self.id, now);
        let uid = match self
            .client
            .create::<Node>(&NODES, None, &PostParams::default(), &node)
            .await
        {
            Ok(created) => created.metadata.uid,
            Err(e) if e.is_already_exists() => {
                let labels = serde_json::json!({"metadata": {"labels": node.metadata.labels}});
                let path = NODES.item_path(None, &self.id.name);
                self.send(Method::PATCH, &path, &labels, MERGE_PATCH)
                    .await?;
                self.report_status(config, None, now).await?.metadata.uid
            }
            Err(e) => return Err(e),
        };
        *self.uid.lock() = uid;
        self.registered.store(true, Ordering::Release);
        Ok(())
    }

    /// Reports the node's status (transition times taken from `current`, the node as last
    /// seen). Returns the node as the server has it.
    pub(crate) async fn report_status(
        &self,
        config: &NodeAgentConfig,
        current: Option<&Node>,
        now: SystemTime,
    ) -> Result<Node, Error> {
        let status = status(
            config,
            &self.id,
            current.and_then(|n| n.status.as_ref()),
            now,
        );
        let body = self
            .send(
                Method::PATCH,
                &self.status_path,
                &status_patch(&status),
                STRATEGIC_MERGE_PATCH,
            )
            .await?;
        serde_json::from_slice(&body).map_err(|source| Error::Decode {
            context: format!("the response of PATCH {}", self.status_path),
            source,
        })
    }

    /// Creates the node's Lease, or takes over an existing one (holder, duration, owner).
    pub(crate) async fn ensure_lease(
        &self,
        config: &NodeAgentConfig,
        now: SystemTime,
    ) -> Result<(), Error> {
        let uid = self.uid.lock().clone();
        let lease = lease_object(&self.id.name, uid.as_deref(), config.lease_duration, now);
        match self
            .client
            .create(
                &LEASES,
                Some(NODE_LEASE_NAMESPACE),
                &PostParams::default(),
                &lease,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_already_exists() => {
                let patch = serde_json::json!({
                    "metadata": {"ownerReferences": lease.metadata.owner_references},
                    "spec": lease.spec,
                });
                self.send(Method::PATCH, &self.lease_path, &patch, MERGE_PATCH)
                    .await
                    .map(drop)
            }
            Err(e) => Err(e),
        }
    }

    /// Renews the node's Lease (creating it if it is gone).
    pub(crate) async fn renew_lease(
        &self,
        config: &NodeAgentConfig,
        now: SystemTime,
    ) -> Result<(), Error> {
        let body = Bytes::from(renew_patch(&self.id.name, config.lease_duration, now));
        match self
            .client
            .request_bytes(Method::PATCH, &self.lease_path, Some((body, MERGE_PATCH)))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => self.ensure_lease(config, now).await,
            Err(e) => Err(e),
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: &serde_json::Value,
        content_type: &'static str,
    ) -> Result<Bytes, Error> {
        let body = serde_json::to_vec(body).map_err(|source| Error::Decode {
            context: "the request body (encoding)".into(),
            source,
        })?;
        let (_, bytes) = self
            .client
            .request_bytes(method, path, Some((Bytes::from(body), content_type)))
            .await?;
        Ok(bytes)
    }
}

/// A reference to `pod` for its events, about the container at `field_path` if given.
pub(crate) fn pod_reference(pod: &Pod, field_path: Option<String>) -> ObjectReference {
    let mut reference = object_reference(pod);
    reference.field_path = field_path;
    reference
}
