//! The Endpoints controller (kube-controller-manager's `endpoint` controller): for each
//! Service with a selector, an `Endpoints` object of the same name listing the addresses and
//! ports of the pods it selects.
//!
//! Data flow: the shared Service, Pod and Endpoints informers feed a rate-limited work queue
//! of Service keys — a Service added, updated or deleted; a pod added, updated or deleted
//! (the key of every Service in its namespace whose selector matches its old or new labels);
//! an Endpoints object deleted — and workers sync each key from the listers:
//! - a Service that is gone loses its Endpoints; one without a selector is left alone (its
//!   Endpoints are the user's);
//! - every selected pod with an IP that is not terminal and not being deleted contributes an
//!   address (with its node and a reference to it), among the ready addresses if the pod is
//!   Ready (or the Service publishes not-ready addresses), else among the not-ready ones;
//! - each Service port resolves to the pod's port: a number as it is, a name through the
//!   pod's container ports of that name and protocol (a pod without it is left out of that
//!   port); an unset target port is the Service port;
//! - addresses with the same resolved ports share a subset; addresses are sorted by IP,
//!   ports by name, subsets by their ports, so that the object does not change when nothing
//!   did, and nothing is written then;
//! - a headless Service (`clusterIP: None`) with no ports gets its addresses without ports,
//!   and its Endpoints the `service.kubernetes.io/headless` label.

use crate::controller_utils::{finish_sync, is_pod_ready, ControllerError};
use client::cache::{
    object_key, split_key, wait_for_cache_sync, DeleteEvent, Lister, Registration,
    ResourceEventHandlerFuncs, SharedIndexInformer, SharedInformerFactory,
};
use client::rest::resource::ApiResource;
use client::rest::{Api, Client, DeleteParams, PostParams};
use client::workqueue::WorkQueue as _;
use client::workqueue::{QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
    ServicePort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The label an Endpoints object of a headless Service carries.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// The Endpoints controller. Build it before the informer factory starts, then await
/// [`EndpointsController::run`]; dropping the controller unregisters its handlers and shuts
/// its queue down.
pub struct EndpointsController {
    shared: Arc<Shared>,
    factory: SharedInformerFactory,
    services: SharedIndexInformer<Service>,
    pods: SharedIndexInformer<Pod>,
    endpoints: SharedIndexInformer<Endpoints>,
    registrations: [Registration; 3],
    workers: usize,
}

impl std::fmt::Debug for EndpointsController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointsController")
            .field("workers", &self.workers)
            .field("queue", &self.shared.queue.len())
            .finish_non_exhaustive()
    }
}

struct Shared {
    client: Client,
    services: Lister<Service>,
    pods: Lister<Pod>,
    endpoints: Lister<Endpoints>,
    queue: RateLimitingQueue<String>,
}

impl EndpointsController {
    /// A controller syncing Services with `workers` workers (kube-controller-manager's
    /// `--concurrent-endpoint-syncs` is 5).
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
    ) -> Result<EndpointsController, ControllerError> {
        let services = factory.informer::<Service>()?;
        let pods = factory.informer::<Pod>()?;
        let endpoints = factory.informer::<Endpoints>()?;
        let shared = Arc::new(Shared {
            client,
            services: services.lister(),
            pods: pods.lister(),
            endpoints: endpoints.lister(),
            queue: RateLimitingQueue::with_default_limiter(QueueConfig::new()),
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
        // Endpoints deleted behind the controller's back are made again.
        let e = shared.clone();
        let ep_reg =
            endpoints.add_event_handler(ResourceEventHandlerFuncs::new().on_delete(
                move |d: &DeleteEvent<Endpoints>| e.queue.add(object_key(&**d.object())),
            ));
        Ok(EndpointsController {
            shared,
            factory: factory.clone(),
            services,
            pods,
            endpoints,
            registrations: [svc_reg, pod_reg, ep_reg],
            workers: workers.max(1),
        })
    }

    /// Starts the factory's informers (if not yet), waits for the Service, Pod and Endpoints
    /// caches, then syncs Services until the controller is dropped.
    pub async fn run(&self) {
        self.factory.start();
        wait_for_cache_sync(
            &[&self.services, &self.pods, &self.endpoints],
            Duration::MAX,
        )
        .await;
        tracing::info!(workers = self.workers, "starting the endpoint controller");
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(Arc::clone(&self.shared).worker());
        }
        while workers.join_next().await.is_some() {}
    }
}

impl Drop for EndpointsController {
    fn drop(&mut self) {
        let [svc_reg, pod_reg, ep_reg] = &self.registrations;
        self.services.remove_event_handler(svc_reg);
        self.pods.remove_event_handler(pod_reg);
        self.endpoints.remove_event_handler(ep_reg);
        self.shared.queue.shut_down();
    }
}

/// Whether a Service's selector (all of its pairs) matches `labels`.
pub(crate) fn selects(
    selector: &BTreeMap<String, String>,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// The keys of the Services of the pod's namespace that select it now or selected it
/// before (`old`).
pub(crate) fn services_of_pod(
    services: &Lister<Service>,
    old: Option<&Pod>,
    pod: &Pod,
) -> Vec<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    services
        .namespaced(ns)
        .list(&Default::default())
        .into_iter()
        .filter(|svc| {
            svc.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .is_some_and(|selector| {
                    selects(selector, pod.metadata.labels.as_ref())
                        || old.is_some_and(|o| selects(selector, o.metadata.labels.as_ref()))
                })
        })
        .map(|svc| object_key(&*svc))
        .collect()
}

/// A selected pod's ports for the Service `spec` — (name, port, protocol), sorted — or
/// `None` if the pod is left out: the Service has ports and the pod has none of them, or
/// it has no ports and is not headless.
pub(crate) fn resolved_ports(
    spec: &k8s_openapi::api::core::v1::ServiceSpec,
    pod: &Pod,
) -> Option<Vec<(String, i32, String)>> {
    let mut ports: Vec<(String, i32, String)> = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            pod_port(pod, p).map(|n| {
                (
                    p.name.clone().unwrap_or_default(),
                    n,
                    p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                )
            })
        })
        .collect();
    let wants_ports = spec.ports.as_ref().is_some_and(|p| !p.is_empty());
    let headless = spec.cluster_ip.as_deref() == Some("None");
    if (wants_ports && ports.is_empty()) || (!wants_ports && !headless) {
        return None;
    }
    ports.sort();
    Some(ports)
}

impl Shared {
    /// Enqueues every Service of the pod's namespace that selects it now or selected it.
    fn pod_changed(&self, old: Option<&Arc<Pod>>, pod: &Arc<Pod>) {
        for key in services_of_pod(&self.services, old.map(|o| &**o), pod) {
            self.queue.add(key);
        }
    }

    async fn worker(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            let result = self.sync(&key).await;
            finish_sync(&self.queue, key, result, "endpoints");
        }
    }

    fn api(&self, ns: &str) -> Api<Endpoints> {
        Api::namespaced(self.client.clone(), ApiResource::of::<Endpoints>(), ns)
    }

    async fn sync(&self, key: &str) -> Result<(), client::rest::Error> {
        let Ok((Some(ns), name)) = split_key(key) else {
            tracing::warn!(key, "ignoring a malformed key");
            return Ok(());
        };
        let Some(svc) = self.services.get(Some(ns), name) else {
            // The Service is gone: so are its Endpoints.
            return match self.api(ns).delete(name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(e),
            };
        };
        let Some(desired) =
            desired_endpoints(&svc, &self.pods.namespaced(ns).list(&Default::default()))
        else {
            return Ok(());
        };
        match self.endpoints.get(Some(ns), name) {
            Some(current)
                if current.subsets == desired.subsets
                    && current.metadata.labels == desired.metadata.labels =>
            {
                Ok(())
            }
            Some(current) => {
                let mut next = (*current).clone();
                next.subsets = desired.subsets;
                next.metadata.labels = desired.metadata.labels;
                self.api(ns)
                    .replace(name, &PostParams::default(), &next)
                    .await
                    .map(|_| ())
            }
            None => match self.api(ns).create(&PostParams::default(), &desired).await {
                Ok(_) => Ok(()),
                // Created meanwhile (or left by a previous run): the next sync updates it.
                Err(e) if e.is_already_exists() => Err(e),
                Err(e) if crate::controller_utils::is_namespace_terminating(&e) => Ok(()),
                Err(e) => Err(e),
            },
        }
    }
}

/// Whether a pod contributes an address: it has an IP, is not terminal, and is not being
/// deleted (unless the Service publishes not-ready addresses).
fn in_endpoints(pod: &Pod, publish_not_ready: bool) -> bool {
    let status = pod.status.as_ref();
    let has_ip = status
        .and_then(|s| s.pod_ip.as_deref())
        .is_some_and(|ip| !ip.is_empty());
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
    let terminal = matches!(phase, "Succeeded" | "Failed");
    let deleting = pod.metadata.deletion_timestamp.is_some();
    has_ip && !terminal && (!deleting || publish_not_ready)
}

/// The pod port a Service port leads to, if the pod has it.
pub(crate) fn pod_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            pod.spec
                .as_ref()?
                .containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                })
                .map(|p| p.container_port)
        }
    }
}

/// The Endpoints a Service should have given the pods of its namespace; `None` for a
/// Service without a selector (not the controller's to manage).
pub fn desired_endpoints(svc: &Service, pods: &[Arc<Pod>]) -> Option<Endpoints> {
    let spec = svc.spec.as_ref()?;
    let selector = spec.selector.as_ref()?;
    let publish_not_ready = spec.publish_not_ready_addresses == Some(true);
    let headless = spec.cluster_ip.as_deref() == Some("None");
    // Resolved ports -> (ready, not ready) addresses.
    type Addresses = (Vec<EndpointAddress>, Vec<EndpointAddress>);
    let mut subsets: BTreeMap<Vec<(String, i32, String)>, Addresses> = BTreeMap::new();
    for pod in pods {
        if !selects(selector, pod.metadata.labels.as_ref()) || !in_endpoints(pod, publish_not_ready)
        {
            continue;
        }
        let Some(ports) = resolved_ports(spec, pod) else {
            continue;
        };
        let address = EndpointAddress {
            ip: pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .unwrap_or_default(),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.metadata.namespace.clone(),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let entry = subsets.entry(ports).or_default();
        if publish_not_ready || is_pod_ready(pod) {
            entry.0.push(address);
        } else {
            entry.1.push(address);
        }
    }
    let app_protocols: BTreeMap<String, Option<String>> = spec
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap_or_default(), p.app_protocol.clone()))
        .collect();
    let subsets: Vec<EndpointSubset> = subsets
        .into_iter()
        .map(|(ports, (mut ready, mut not_ready))| {
            ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            not_ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            EndpointSubset {
                addresses: (!ready.is_empty()).then_some(ready),
                not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
                ports: (!ports.is_empty()).then(|| {
                    ports
                        .into_iter()
                        .map(|(name, port, protocol)| EndpointPort {
                            app_protocol: app_protocols.get(&name).cloned().flatten(),
                            name: (!name.is_empty()).then_some(name),
                            port,
                            protocol: Some(protocol),
                        })
                        .collect()
                }),
            }
        })
        .collect();
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    if headless {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    } else {
        labels.remove(HEADLESS_LABEL);
    }
    Some(Endpoints {
        metadata: ObjectMeta {
            name: svc.metadata.name.clone(),
            namespace: svc.metadata.namespace.clone(),
            labels: (!labels.is_empty()).then_some(labels),
            ..Default::default()
        },
        subsets: (!subsets.is_empty()).then_some(subsets),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn pod(name: &str, ip: &str, ready: bool, labels: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                             "labels": labels},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i",
                    "ports": [{"name": "http", "containerPort": 8080}]}]},
                "status": {"phase": "Running", "podIP": ip, "conditions": [
                    {"type": "Ready", "status": if ready {"True"} else {"False"}}]}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn ready_and_not_ready_pods_with_named_and_numbered_ports() {
        let svc = service(json!({"metadata": {"name": "web", "namespace": "ns",
                                              "labels": {"team": "a"}},
            "spec": {"selector": {"app": "web"}, "ports": [
                {"name": "main", "port": 80, "targetPort": "http", "protocol": "TCP"},
                {"name": "admin", "port": 9000, "targetPort": 9001, "protocol": "TCP"}]}}));
        let pods = vec![
            pod("b", "10.0.0.2", true, json!({"app": "web"})),
            pod("a", "10.0.0.1", true, json!({"app": "web"})),
            pod("c", "10.0.0.3", false, json!({"app": "web"})),
            pod("x", "10.0.0.9", true, json!({"app": "other"})),
        ];
        let ep = desired_endpoints(&svc, &pods).unwrap();
        assert_eq!(
            serde_json::to_value(&ep).unwrap(),
            json!({"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "web", "namespace": "ns", "labels": {"team": "a"}},
                "subsets": [{
                    "addresses": [
                        {"ip": "10.0.0.1", "nodeName": "n1", "targetRef":
                            {"kind": "Pod", "name": "a", "namespace": "ns", "uid": "uid-a"}},
                        {"ip": "10.0.0.2", "nodeName": "n1", "targetRef":
                            {"kind": "Pod", "name": "b", "namespace": "ns", "uid": "uid-b"}}],
                    "notReadyAddresses": [
                        {"ip": "10.0.0.3", "nodeName": "n1", "targetRef":
                            {"kind": "Pod", "name": "c", "namespace": "ns", "uid": "uid-c"}}],
                    "ports": [
                        {"name": "admin", "port": 9001, "protocol": "TCP"},
                        {"name": "main", "port": 8080, "protocol": "TCP"}]}]})
        );
    }

    #[test]
    fn pods_without_the_named_port_ip_or_life_are_left_out() {
        let svc = service(json!({"metadata": {"name": "web", "namespace": "ns"},
            "spec": {"selector": {"app": "web"}, "ports": [
                {"name": "main", "port": 80, "targetPort": "nope"}]}}));
        let pods = vec![pod("a", "10.0.0.1", true, json!({"app": "web"}))];
        assert_eq!(desired_endpoints(&svc, &pods).unwrap().subsets, None);
        let svc = service(json!({"metadata": {"name": "web", "namespace": "ns"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}));
        let mut no_ip = (*pod("a", "", true, json!({"app": "web"}))).clone();
        no_ip.status.as_mut().unwrap().pod_ip = None;
        let mut done = (*pod("b", "10.0.0.2", true, json!({"app": "web"}))).clone();
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let mut going = (*pod("c", "10.0.0.3", true, json!({"app": "web"}))).clone();
        going.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
        let pods: Vec<Arc<Pod>> = [no_ip, done, going].into_iter().map(Arc::new).collect();
        assert_eq!(desired_endpoints(&svc, &pods).unwrap().subsets, None);
        // An unset target port is the Service's port.
        let ep =
            desired_endpoints(&svc, &[pod("d", "10.0.0.4", true, json!({"app": "web"}))]).unwrap();
        assert_eq!(ep.subsets.unwrap()[0].ports.as_ref().unwrap()[0].port, 80);
    }

    #[test]
    fn services_without_a_selector_are_not_managed_and_headless_ones_are_labelled() {
        let manual = service(json!({"metadata": {"name": "m", "namespace": "ns"},
            "spec": {"ports": [{"port": 80}]}}));
        assert!(desired_endpoints(&manual, &[]).is_none());
        let headless = service(json!({"metadata": {"name": "h", "namespace": "ns"},
            "spec": {"clusterIP": "None", "selector": {"app": "web"}}}));
        let ep = desired_endpoints(
            &headless,
            &[pod("a", "10.0.0.1", true, json!({"app": "web"}))],
        )
        .unwrap();
        assert_eq!(
            ep.metadata.labels.unwrap().get(HEADLESS_LABEL),
            Some(&String::new())
        );
        let subsets = ep.subsets.unwrap();
        assert_eq!(subsets.len(), 1);
        assert!(subsets[0].ports.is_none());
        assert_eq!(subsets[0].addresses.as_ref().unwrap()[0].ip, "10.0.0.1");
    }
}
