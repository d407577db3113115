//! The EndpointSlice controller (kube-controller-manager's `endpointslice` controller): for
//! each Service with a selector, `discovery.k8s.io/v1` EndpointSlices listing the pods it
//! selects, which is what kube-proxy and `kubectl describe service` read.
//!
//! Data flow: the shared Service, Pod and EndpointSlice informers feed a rate-limited work
//! queue of Service keys (a Service changed; a pod changed — every Service of its namespace
//! selecting it before or after; a managed slice changed or deleted — its Service), and
//! workers reconcile each key from the listers:
//! - the slices of a Service are those labelled `kubernetes.io/service-name: NAME` and
//!   `endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io`; a Service
//!   that is gone, or has no selector, keeps none;
//! - every selected pod with an IP that is not terminal is an endpoint, terminating ones
//!   included: `ready` when the pod is Ready and not terminating (or the Service publishes
//!   not-ready addresses), `serving` when it is Ready, `terminating` when it is being deleted;
//! - endpoints are grouped by their resolved ports (as the Endpoints controller resolves
//!   them, [`crate::endpoints`]), sorted by address, and cut into slices of at most
//!   [`MAX_ENDPOINTS_PER_SLICE`];
//! - existing slices are reused in name order for the wanted ones and updated only when
//!   their content differs, missing ones are created (`generateName: SERVICE-`, owned by
//!   the Service), and left-over ones deleted.

use crate::controller_utils::{
    finish_sync, is_namespace_terminating, is_pod_ready, ControllerError,
};
use crate::endpoints::{resolved_ports, selects, services_of_pod, HEADLESS_LABEL};
use client::cache::{
    object_key, split_key, wait_for_cache_sync, DeleteEvent, Lister, Registration,
    ResourceEventHandlerFuncs, SharedIndexInformer, SharedInformerFactory,
};
use client::rest::resource::ApiResource;
use client::rest::{Api, Client, DeleteParams, PostParams};
use client::workqueue::WorkQueue as _;
use client::workqueue::{QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming who manages a slice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller's value of [`MANAGED_BY_LABEL`] (kube-controller-manager's).
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// The most endpoints one slice holds (kube-controller-manager's
/// `--max-endpoints-per-slice` default).
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// The EndpointSlice controller. Build it before the informer factory starts, then await
/// [`EndpointSliceController::run`]; dropping the controller unregisters its handlers and
/// shuts its queue down.
pub struct EndpointSliceController {
    shared: Arc<Shared>,
    factory: SharedInformerFactory,
    services: SharedIndexInformer<Service>,
    pods: SharedIndexInformer<Pod>,
    slices: SharedIndexInformer<EndpointSlice>,
    registrations: [Registration; 3],
    workers: usize,
}

impl std::fmt::Debug for EndpointSliceController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointSliceController")
            .field("workers", &self.workers)
            .field("queue", &self.shared.queue.len())
            .finish_non_exhaustive()
    }
}

struct Shared {
    client: Client,
    services: Lister<Service>,
    pods: Lister<Pod>,
    slices: Lister<EndpointSlice>,
    queue: RateLimitingQueue<String>,
    /// Slices this controller created that its informer may not have shown yet, by Service
    /// key: counted as existing so that a quick second sync does not create them again.
    created: parking_lot::Mutex<BTreeMap<String, Vec<EndpointSlice>>>,
}

/// The Service key of a slice this controller manages.
fn owning_service(slice: &EndpointSlice) -> Option<String> {
    let labels = slice.metadata.labels.as_ref()?;
    if labels.get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY) {
        return None;
    }
    let service = labels.get(SERVICE_NAME_LABEL)?;
    Some(format!(
        "{}/{service}",
        slice.metadata.namespace.as_deref().unwrap_or("")
    ))
}

impl EndpointSliceController {
    /// A controller syncing Services with `workers` workers (kube-controller-manager's
    /// `--concurrent-service-endpoint-syncs` is 5).
    ///
    /// # Errors
    /// [`ControllerError::Factory`] if the factory has no client.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the queue spawns a task).
    pub fn new(
        factory: &SharedInformerFactory,
        client: Client,
        workers: usize,
    ) -> Result<EndpointSliceController, ControllerError> {
        let services = factory.informer::<Service>()?;
        let pods = factory.informer::<Pod>()?;
        let slices = factory.informer::<EndpointSlice>()?;
        let shared = Arc::new(Shared {
            client,
            services: services.lister(),
            pods: pods.lister(),
            slices: slices.lister(),
            queue: RateLimitingQueue::with_default_limiter(QueueConfig::new()),
            created: Default::default(),
        });
        let (s1, s2, s3) = (shared.clone(), shared.clone(), shared.clone());
        let svc_reg = services.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |s: &Arc<Service>, _| s1.queue.add(object_key(&**s)))
                .on_update(move |_: &Arc<Service>, s: &Arc<Service>| s2.queue.add(object_key(&**s)))
                .on_delete(move |d: &DeleteEvent<Service>| s3.queue.add(object_key(&**d.object()))),
        );
        let (p1, p2, p3) = (shared.clone(), shared.clone(), shared.clone());
        let pod_reg = pods.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_add(move |p: &Arc<Pod>, _| p1.pod_changed(None, p))
                .on_update(move |old: &Arc<Pod>, cur: &Arc<Pod>| p2.pod_changed(Some(old), cur))
                .on_delete(move |d: &DeleteEvent<Pod>| p3.pod_changed(None, d.object())),
        );
        let (e1, e2) = (shared.clone(), shared.clone());
        let slice_reg = slices.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .on_update(move |_: &Arc<EndpointSlice>, s: &Arc<EndpointSlice>| {
                    if let Some(key) = owning_service(s) {
                        e1.queue.add(key);
                    }
                })
                .on_delete(move |d: &DeleteEvent<EndpointSlice>| {
                    if let Some(key) = owning_service(d.object()) {
                        e2.queue.add(key);
                    }
                }),
        );
        Ok(EndpointSliceController {
            shared,
            factory: factory.clone(),
            services,
            pods,
            slices,
            registrations: [svc_reg, pod_reg, slice_reg],
            workers: workers.max(1),
        })
    }

    /// Starts the factory's informers (if not yet), waits for the Service, Pod and
    /// EndpointSlice caches, then syncs Services until the controller is dropped.
    pub async fn run(&self) {
        self.factory.start();
        wait_for_cache_sync(&[&self.services, &self.pods, &self.slices], Duration::MAX).await;
        tracing::info!(
            workers = self.workers,
            "starting the endpointslice controller"
        );
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(Arc::clone(&self.shared).worker());
        }
        while workers.join_next().await.is_some() {}
    }
}

impl Drop for EndpointSliceController {
    fn drop(&mut self) {
        let [svc_reg, pod_reg, slice_reg] = &self.registrations;
        self.services.remove_event_handler(svc_reg);
        self.pods.remove_event_handler(pod_reg);
        self.slices.remove_event_handler(slice_reg);
        self.shared.queue.shut_down();
    }
}

/// The content of one wanted slice: its ports and endpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceContent {
    /// The resolved ports (none for a headless Service without ports).
    pub ports: Option<Vec<EndpointPort>>,
    /// The endpoints, sorted by address.
    pub endpoints: Vec<Endpoint>,
}

/// The slices a Service should have given the pods of its namespace; `None` for a Service
/// without a selector (not the controller's to manage).
pub fn desired_slices(svc: &Service, pods: &[Arc<Pod>]) -> Option<Vec<SliceContent>> {
    let spec = svc.spec.as_ref()?;
    let selector = spec.selector.as_ref()?;
    let publish_not_ready = spec.publish_not_ready_addresses == Some(true);
    let mut groups: BTreeMap<Vec<(String, i32, String)>, Vec<Endpoint>> = BTreeMap::new();
    for pod in pods {
        let status = pod.status.as_ref();
        let ip = status.and_then(|s| s.pod_ip.as_deref()).unwrap_or("");
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
        if !selects(selector, pod.metadata.labels.as_ref())
            || ip.is_empty()
            || matches!(phase, "Succeeded" | "Failed")
        {
            continue;
        }
        let Some(ports) = resolved_ports(spec, pod) else {
            continue;
        };
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let serving = publish_not_ready || is_pod_ready(pod);
        groups.entry(ports).or_default().push(Endpoint {
            addresses: vec![ip.to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(serving && (!terminating || publish_not_ready)),
                serving: Some(serving),
                terminating: Some(terminating),
            }),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.metadata.namespace.clone(),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let app_protocols: BTreeMap<String, Option<String>> = spec
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap_or_default(), p.app_protocol.clone()))
        .collect();
    let mut out = Vec::new();
    for (ports, mut endpoints) in groups {
        endpoints.sort_by(|a, b| a.addresses.cmp(&b.addresses));
        let ports = (!ports.is_empty()).then(|| {
            ports
                .into_iter()
                .map(|(name, port, protocol)| EndpointPort {
                    app_protocol: app_protocols.get(&name).cloned().flatten(),
                    name: Some(name),
                    port: Some(port),
                    protocol: Some(protocol),
                })
                .collect::<Vec<_>>()
        });
        for chunk in endpoints.chunks(MAX_ENDPOINTS_PER_SLICE) {
            out.push(SliceContent {
                ports: ports.clone(),
                endpoints: chunk.to_vec(),
            });
        }
    }
    // A Service that selects nothing still has one slice, a placeholder without endpoints or
    // ports, as on a cluster.
    if out.is_empty() {
        out.push(SliceContent {
            ports: None,
            endpoints: Vec::new(),
        });
    }
    Some(out)
}

/// The labels of a Service's slices: the Service's own, its name, the manager, and the
/// headless marker when it has no cluster IP.
fn slice_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    labels.insert(
        SERVICE_NAME_LABEL.into(),
        svc.metadata.name.clone().unwrap_or_default(),
    );
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    let headless = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None");
    if headless {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    } else {
        labels.remove(HEADLESS_LABEL);
    }
    labels
}

impl Shared {
    fn pod_changed(&self, old: Option<&Arc<Pod>>, pod: &Arc<Pod>) {
        for key in services_of_pod(&self.services, old.map(|o| &**o), pod) {
            self.queue.add(key);
        }
    }

    async fn worker(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            let result = self.sync(&key).await;
            finish_sync(&self.queue, key, result, "endpoint slices");
        }
    }

    async fn sync(&self, key: &str) -> Result<(), client::rest::Error> {
        let Ok((Some(ns), name)) = split_key(key) else {
            tracing::warn!(key, "ignoring a malformed key");
            return Ok(());
        };
        let api: Api<EndpointSlice> =
            Api::namespaced(self.client.clone(), ApiResource::of::<EndpointSlice>(), ns);
        let mut existing: Vec<Arc<EndpointSlice>> = self
            .slices
            .namespaced(ns)
            .list(&Default::default())
            .into_iter()
            .filter(|s| owning_service(s).as_deref() == Some(key))
            .collect();
        {
            let mut created = self.created.lock();
            if let Some(unseen) = created.get_mut(key) {
                unseen.retain(|c| !existing.iter().any(|e| e.metadata.name == c.metadata.name));
                existing.extend(unseen.iter().cloned().map(Arc::new));
                if unseen.is_empty() {
                    created.remove(key);
                }
            }
        }
        existing.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let svc = self.services.get(Some(ns), name);
        let wanted = svc
            .as_ref()
            .and_then(|svc| {
                desired_slices(svc, &self.pods.namespaced(ns).list(&Default::default()))
            })
            .unwrap_or_default();
        let mut existing = existing.into_iter();
        if let Some(svc) = &svc {
            let labels = slice_labels(svc);
            for content in wanted {
                match existing.next() {
                    Some(current) => {
                        let same = current.ports == content.ports
                            && current.endpoints.clone().unwrap_or_default() == content.endpoints
                            && current.metadata.labels.as_ref() == Some(&labels)
                            && current.address_type == "IPv4";
                        if same {
                            continue;
                        }
                        let mut next = (*current).clone();
                        next.ports = content.ports;
                        next.endpoints = Some(content.endpoints);
                        next.metadata.labels = Some(labels.clone());
                        next.address_type = "IPv4".into();
                        let slice_name = next.metadata.name.clone().unwrap_or_default();
                        api.replace(&slice_name, &PostParams::default(), &next)
                            .await?;
                    }
                    None => {
                        let slice = EndpointSlice {
                            metadata: ObjectMeta {
                                generate_name: Some(format!("{name}-")),
                                namespace: Some(ns.to_string()),
                                labels: Some(labels.clone()),
                                owner_references: Some(vec![OwnerReference {
                                    api_version: "v1".into(),
                                    kind: "Service".into(),
                                    name: name.to_string(),
                                    uid: svc.metadata.uid.clone().unwrap_or_default(),
                                    controller: Some(true),
                                    block_owner_deletion: Some(true),
                                }]),
                                ..Default::default()
                            },
                            address_type: "IPv4".into(),
                            endpoints: Some(content.endpoints),
                            ports: content.ports,
                        };
                        match api.create(&PostParams::default(), &slice).await {
                            Ok(made) => self
                                .created
                                .lock()
                                .entry(key.to_string())
                                .or_default()
                                .push(made),
                            Err(e) if is_namespace_terminating(&e) => return Ok(()),
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
        }
        for extra in existing {
            let slice_name = extra.metadata.name.clone().unwrap_or_default();
            if let Some(unseen) = self.created.lock().get_mut(key) {
                unseen.retain(|c| c.metadata.name.as_deref() != Some(slice_name.as_str()));
            }
            match api.delete(&slice_name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, ip: &str, ready: bool, deleting: bool) -> Arc<Pod> {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i",
                "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": [
                {"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        });
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn service() -> Service {
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "ns"},
            "spec": {"selector": {"app": "web"},
                     "ports": [{"name": "main", "port": 80, "targetPort": "http"}]}}))
        .unwrap()
    }

    #[test]
    fn endpoints_carry_ready_serving_and_terminating() {
        let pods = vec![
            pod("b", "10.0.0.2", false, false),
            pod("a", "10.0.0.1", true, false),
            pod("c", "10.0.0.3", true, true),
        ];
        let slices = desired_slices(&service(), &pods).unwrap();
        assert_eq!(slices.len(), 1);
        let s = &slices[0];
        assert_eq!(
            serde_json::to_value(&s.ports).unwrap(),
            json!([{"name": "main", "port": 8080, "protocol": "TCP"}])
        );
        let conds: Vec<(String, bool, bool, bool)> = s
            .endpoints
            .iter()
            .map(|e| {
                let c = e.conditions.clone().unwrap();
                (
                    e.addresses[0].clone(),
                    c.ready.unwrap(),
                    c.serving.unwrap(),
                    c.terminating.unwrap(),
                )
            })
            .collect();
        assert_eq!(
            conds,
            [
                ("10.0.0.1".to_string(), true, true, false),
                ("10.0.0.2".to_string(), false, false, false),
                ("10.0.0.3".to_string(), false, true, true),
            ]
        );
        assert_eq!(
            s.endpoints[0].target_ref.as_ref().unwrap().name.as_deref(),
            Some("a")
        );
    }

    #[test]
    fn many_endpoints_are_cut_into_slices_of_a_hundred() {
        let pods: Vec<Arc<Pod>> = (0..250)
            .map(|i| {
                pod(
                    &format!("p{i}"),
                    &format!("10.1.{}.{}", i / 200, i % 200),
                    true,
                    false,
                )
            })
            .collect();
        let slices = desired_slices(&service(), &pods).unwrap();
        let sizes: Vec<usize> = slices.iter().map(|s| s.endpoints.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
    }

    #[test]
    fn a_service_selecting_nothing_has_one_empty_slice_and_one_without_selector_none() {
        let slices = desired_slices(&service(), &[]).unwrap();
        assert_eq!(slices.len(), 1);
        assert!(slices[0].endpoints.is_empty());
        let manual: Service = serde_json::from_value(
            json!({"metadata": {"name": "m", "namespace": "ns"}, "spec": {"ports": [{"port": 1}]}}),
        )
        .unwrap();
        assert!(desired_slices(&manual, &[]).is_none());
    }
}
