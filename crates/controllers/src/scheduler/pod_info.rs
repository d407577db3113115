//! `PodInfo`: what the scheduler needs of a pod, computed once when the pod is seen (its
//! requests, host ports, tolerations, node selector and required node affinity, owner), so
//! that no decision parses quantities or walks containers again.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, NodeSelectorRequirement, Pod, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use api::quantity;

/// CPU a container without a CPU request counts for when scoring (not when filtering):
/// 100 millicores, kube-scheduler's `DefaultMilliCPURequest`.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;

/// Memory a container without a memory request counts for when scoring: 200 MiB,
/// kube-scheduler's `DefaultMemoryRequest`.
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Amounts of the resources the scheduler accounts for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    /// CPU, in millicores.
    pub milli_cpu: i64,
    /// Memory, in bytes.
    pub memory: i64,
    /// Local ephemeral storage, in bytes.
    pub ephemeral_storage: i64,
}

impl Resources {
    /// The sum, saturating.
    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
    }

    /// The difference, saturating.
    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
    }

    /// The per-resource maximum.
    fn max_with(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
    }

    /// Reads `cpu`, `memory` and `ephemeral-storage` from a resource list (quantities that
    /// do not parse, or are negative, count as zero).
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
        let Some(list) = list else {
            return Resources::default();
        };
        let read = |name: &str, milli: bool| {
            list.get(name)
                .and_then(|q| {
                    if milli {
                        quantity::milli_value(&q.0)
                    } else {
                        quantity::value(&q.0)
                    }
                })
                .unwrap_or(0)
                .max(0)
        };
        Resources {
            milli_cpu: read("cpu", true),
            memory: read("memory", false),
            ephemeral_storage: read("ephemeral-storage", false),
        }
    }
}

/// A container's requests: its `requests`, and for a resource it only limits, the limit (the
/// API server defaults a missing request to the limit; reading it here keeps the scheduler
/// right against a server that did not).
fn container_requests(c: &Container) -> Resources {
    let resources = c.resources.as_ref();
    let requests = Resources::from_list(resources.and_then(|r| r.requests.as_ref()));
    let limits = Resources::from_list(resources.and_then(|r| r.limits.as_ref()));
    let has = |name: &str| {
        resources
            .and_then(|r| r.requests.as_ref())
            .is_some_and(|m| m.contains_key(name))
    };
    Resources {
        milli_cpu: if has("cpu") {
            requests.milli_cpu
        } else {
            limits.milli_cpu
        },
        memory: if has("memory") {
            requests.memory
        } else {
            limits.memory
        },
        ephemeral_storage: if has("ephemeral-storage") {
            requests.ephemeral_storage
        } else {
            limits.ephemeral_storage
        },
    }
}

/// The same with kube-scheduler's scoring defaults for a container that requests no CPU or
/// no memory (so that many request-less pods still spread).
fn non_zero(mut r: Resources) -> Resources {
    if r.milli_cpu == 0 {
        r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
    }
    if r.memory == 0 {
        r.memory = DEFAULT_MEMORY_REQUEST;
    }
    r
}

/// A pod's effective requests as Kubernetes counts them (`resourcehelper.PodRequests`): the
/// regular containers and the sidecars (init containers with `restartPolicy: Always`) add
/// up, since they run together; each other init container runs alone, next to the sidecars
/// started before it, so it counts only through the per-resource maximum over those
/// stages; the pod overhead comes on top. `per_container` maps each container's requests
/// (e.g. to apply the scoring defaults).
fn pod_requests(pod: &Pod, per_container: impl Fn(&Container) -> Resources) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::default();
    };
    let mut total = Resources::default();
    for c in &spec.containers {
        total.add(&per_container(c));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let r = per_container(c);
        if c.restart_policy.as_deref() == Some("Always") {
            total.add(&r);
            sidecars.add(&r);
            init_peak.max_with(&sidecars);
        } else {
            let mut stage = r;
            stage.add(&sidecars);
            init_peak.max_with(&stage);
        }
    }
    total.max_with(&init_peak);
    total.add(&Resources::from_list(spec.overhead.as_ref()));
    total
}

/// One host port a pod's container asks for: `hostIP` (`0.0.0.0` when unset), protocol
/// (`TCP` when unset) and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// The host address, `0.0.0.0` meaning every address.
    pub ip: Arc<str>,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: Arc<str>,
    /// The port, above zero.
    pub port: i32,
}

/// The wildcard host address.
pub const ANY_IP: &str = "0.0.0.0";

impl HostPort {
    /// Whether this port and `other` cannot both be bound on one node: same protocol and
    /// port, and the same address or either of them the wildcard.
    pub fn conflicts_with(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || &*self.ip == ANY_IP || &*other.ip == ANY_IP)
    }
}

/// The operator of one node selector requirement, with its values checked and parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectorOp {
    /// The label is one of these values.
    In(Vec<String>),
    /// The label is absent or none of these values.
    NotIn(Vec<String>),
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label is an integer greater than this one.
    Gt(i64),
    /// The label is an integer less than this one.
    Lt(i64),
}

/// One requirement of a node selector term, on a label or (for `matchFields`) on
/// `metadata.name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The label key (or `metadata.name`).
    pub key: String,
    /// The operator and its values.
    pub op: SelectorOp,
}

impl Requirement {
    /// Parses a requirement as the API defines it; `None` if it is malformed (unknown
    /// operator, values where none belong, a non-integer for `Gt`/`Lt`), which makes its
    /// term match no node, as in Kubernetes.
    fn parse(r: &NodeSelectorRequirement) -> Option<Requirement> {
        let values = r.values.clone().unwrap_or_default();
        let op = match r.operator.as_str() {
            "In" if !values.is_empty() => SelectorOp::In(values),
            "NotIn" if !values.is_empty() => SelectorOp::NotIn(values),
            "Exists" if values.is_empty() => SelectorOp::Exists,
            "DoesNotExist" if values.is_empty() => SelectorOp::DoesNotExist,
            "Gt" if values.len() == 1 => SelectorOp::Gt(values[0].trim().parse().ok()?),
            "Lt" if values.len() == 1 => SelectorOp::Lt(values[0].trim().parse().ok()?),
            _ => return None,
        };
        Some(Requirement {
            key: r.key.clone(),
            op,
        })
    }

    /// Whether a node whose value for the key is `value` (`None`: absent) satisfies it.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (SelectorOp::In(vs), Some(v)) => vs.iter().any(|x| x == v),
            (SelectorOp::In(_), None) => false,
            (SelectorOp::NotIn(vs), Some(v)) => !vs.iter().any(|x| x == v),
            (SelectorOp::NotIn(_), None) => true,
            (SelectorOp::Exists, v) => v.is_some(),
            (SelectorOp::DoesNotExist, v) => v.is_none(),
            (SelectorOp::Gt(n), Some(v)) => v.trim().parse::<i64>().is_ok_and(|x| x > *n),
            (SelectorOp::Lt(n), Some(v)) => v.trim().parse::<i64>().is_ok_and(|x| x < *n),
            (SelectorOp::Gt(_) | SelectorOp::Lt(_), None) => false,
        }
    }
}

/// One parsed `nodeSelectorTerm`: every requirement must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorTerm {
    /// Requirements on node labels.
    pub labels: Vec<Requirement>,
    /// Requirements on node fields (only `metadata.name` exists).
    pub fields: Vec<Requirement>,
}

impl SelectorTerm {
    /// `None` when the term can match no node: it is empty, or one of its requirements is
    /// malformed, or a field requirement names a field other than `metadata.name` or uses
    /// an operator other than `In`/`NotIn`.
    fn parse(term: &k8s_openapi::api::core::v1::NodeSelectorTerm) -> Option<SelectorTerm> {
        let labels: Vec<Requirement> = term
            .match_expressions
            .iter()
            .flatten()
            .map(Requirement::parse)
            .collect::<Option<_>>()?;
        let fields: Vec<Requirement> = term
            .match_fields
            .iter()
            .flatten()
            .map(|r| {
                let parsed = Requirement::parse(r)?;
                let ok = parsed.key == "metadata.name"
                    && matches!(parsed.op, SelectorOp::In(_) | SelectorOp::NotIn(_));
                ok.then_some(parsed)
            })
            .collect::<Option<_>>()?;
        if labels.is_empty() && fields.is_empty() {
            return None;
        }
        Some(SelectorTerm { labels, fields })
    }
}

/// What the scheduler knows of a pod, computed once (see the module docs). Shared as
/// `Arc<PodInfo>` between the queue, the cache and the binder.
#[derive(Debug)]
pub struct PodInfo {
    /// The pod as last seen.
    pub pod: Arc<Pod>,
    /// `namespace/name`.
    pub key: Arc<str>,
    /// `metadata.uid`, or the key for a pod without one (only test objects lack it). The
    /// cache tells a pod from a later one of the same name by it.
    pub uid: Arc<str>,
    /// Effective requests (see [`PodInfo::new`]), for filtering.
    pub requests: Resources,
    /// The same with the scoring defaults for containers that request no CPU or memory.
    pub non_zero_requests: Resources,
    /// Host ports of the regular containers (those with `hostPort > 0`).
    pub host_ports: Vec<HostPort>,
    /// `spec.tolerations`.
    pub tolerations: Vec<Toleration>,
    /// `spec.nodeSelector`, as pairs.
    pub node_selector: Vec<(String, String)>,
    /// The terms of `requiredDuringSchedulingIgnoredDuringExecution` that can match (any
    /// one must); `None` when the pod has no required node affinity.
    pub required_affinity: Option<Vec<SelectorTerm>>,
    /// The UID of the pod's controlling owner (`ownerReferences[controller=true]`), whose
    /// pods the spreading score keeps apart.
    pub owner: Option<Arc<str>>,
    /// `spec.priority` (0 when unset): higher is scheduled first.
    pub priority: i32,
    /// Whether `spec.schedulingGates` holds the pod back.
    pub gated: bool,
}

impl PodInfo {
    /// Reads everything from `pod`. Requests follow Kubernetes: the sum over regular
    /// containers and sidecar init containers, at least the peak of any init container
    /// stage, plus the pod overhead.
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let meta = &pod.metadata;
        let key: Arc<str> = format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or("")
        )
        .into();
        let uid = meta
            .uid
            .as_deref()
            .filter(|u| !u.is_empty())
            .map_or_else(|| Arc::clone(&key), Arc::from);
        let spec = pod.spec.as_ref();
        let requests = pod_requests(&pod, container_requests);
        let non_zero_requests = pod_requests(&pod, |c| non_zero(container_requests(c)));
        let host_ports = spec
            .into_iter()
            .flat_map(|s| s.containers.iter())
            .flat_map(|c| c.ports.iter().flatten())
            .filter(|p| p.host_port.unwrap_or(0) > 0)
            .map(|p| HostPort {
                ip: Arc::from(
                    p.host_ip
                        .as_deref()
                        .filter(|ip| !ip.is_empty())
                        .unwrap_or(ANY_IP),
                ),
                protocol: Arc::from(
                    p.protocol
                        .as_deref()
                        .filter(|p| !p.is_empty())
                        .unwrap_or("TCP"),
                ),
                port: p.host_port.unwrap_or(0),
            })
            .collect();
        let tolerations = spec.and_then(|s| s.tolerations.clone()).unwrap_or_default();
        let node_selector = spec
            .and_then(|s| s.node_selector.as_ref())
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let required_affinity = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|sel| {
                sel.node_selector_terms
                    .iter()
                    .filter_map(SelectorTerm::parse)
                    .collect()
            });
        let owner = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| Arc::from(o.uid.as_str()));
        let priority = spec.and_then(|s| s.priority).unwrap_or(0);
        let gated = spec
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty());
        PodInfo {
            pod,
            key,
            uid,
            requests,
            non_zero_requests,
            host_ports,
            tolerations,
            node_selector,
            required_affinity,
            owner,
            priority,
            gated,
        }
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("")
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn pod(spec: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                "spec": spec,
            }))
            .unwrap(),
        )
    }

    fn container(cpu: &str, mem: &str) -> serde_json::Value {
        json!({"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}})
    }

    #[test]
    fn containers_add_up_and_init_containers_count_by_their_peak() {
        let p = PodInfo::new(pod(json!({
            "containers": [container("100m", "100Mi"), container("200m", "50Mi")],
            "initContainers": [container("500m", "10Mi"), container("50m", "400Mi")],
        })));
        assert_eq!(p.requests.milli_cpu, 500);
        assert_eq!(p.requests.memory, 400 << 20);
        assert_eq!(&*p.key, "ns/p");
        assert_eq!(&*p.uid, "u1");
    }

    #[test]
    fn sidecars_run_beside_everything_after_them() {
        // A sidecar (restartPolicy Always) of 100m, then an init container of 300m that runs
        // beside it (400m peak), then the app container of 200m beside the sidecar (300m).
        let mut sidecar = container("100m", "0");
        sidecar["restartPolicy"] = json!("Always");
        let p = PodInfo::new(pod(json!({
            "containers": [container("200m", "0")],
            "initContainers": [sidecar, container("300m", "0")],
        })));
        assert_eq!(p.requests.milli_cpu, 400);
        let small_init = PodInfo::new(pod(json!({
            "containers": [container("200m", "0")],
            "initContainers": [{"name": "s", "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "100m"}}}, container("50m", "0")],
        })));
        assert_eq!(small_init.requests.milli_cpu, 300);
    }

    #[test]
    fn overhead_limits_as_requests_and_scoring_defaults() {
        let p = PodInfo::new(pod(json!({
            "containers": [
                {"name": "a", "resources": {"limits": {"cpu": "1", "ephemeral-storage": "1Gi"}}},
                {"name": "b"},
            ],
            "overhead": {"cpu": "10m", "memory": "1Mi"},
        })));
        assert_eq!(p.requests.milli_cpu, 1010);
        assert_eq!(p.requests.memory, 1 << 20);
        assert_eq!(p.requests.ephemeral_storage, 1 << 30);
        // Scoring counts container b as 100m and 200Mi, and a's missing memory as 200Mi.
        assert_eq!(p.non_zero_requests.milli_cpu, 1000 + 100 + 10);
        assert_eq!(
            p.non_zero_requests.memory,
            2 * DEFAULT_MEMORY_REQUEST + (1 << 20)
        );
    }

    #[test]
    fn host_ports_tolerations_selectors_owner_priority() {
        let p = Arc::new(
            serde_json::from_value::<Pod>(json!({
                "metadata": {"name": "p", "namespace": "ns",
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "X", "name": "x", "uid": "not-controller"},
                        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                         "uid": "rs-uid", "controller": true}]},
                "spec": {
                    "containers": [{"name": "c", "ports": [
                        {"containerPort": 80, "hostPort": 8080},
                        {"containerPort": 53, "hostPort": 53, "protocol": "UDP",
                         "hostIP": "10.0.0.1"},
                        {"containerPort": 9090}]}],
                    "nodeSelector": {"disk": "ssd"},
                    "tolerations": [{"key": "k", "operator": "Exists"}],
                    "priority": 7,
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                        {"nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["x"]}]},
                            {},
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
                        ]}}},
                    "schedulingGates": [{"name": "wait"}],
                }
            }))
            .unwrap(),
        );
        let p = PodInfo::new(p);
        assert_eq!(&*p.uid, "ns/p", "a pod without a UID is known by its key");
        assert_eq!(p.host_ports.len(), 2);
        assert_eq!(&*p.host_ports[0].ip, ANY_IP);
        assert_eq!(&*p.host_ports[0].protocol, "TCP");
        assert_eq!(p.host_ports[1].port, 53);
        assert_eq!(p.node_selector, vec![("disk".into(), "ssd".into())]);
        assert_eq!(p.tolerations.len(), 1);
        assert_eq!(p.owner.as_deref(), Some("rs-uid"));
        assert_eq!(p.priority, 7);
        assert!(p.gated);
        // The malformed and the empty term can never match; only the third is kept.
        let terms = p.required_affinity.unwrap();
        assert_eq!(terms.len(), 1);
        assert_eq!(terms[0].labels[0].key, "zone");
    }

    #[test]
    fn requirement_operators() {
        let req = |op: &str, values: &[&str]| {
            Requirement::parse(&NodeSelectorRequirement {
                key: "k".into(),
                operator: op.into(),
                values: Some(values.iter().map(|s| s.to_string()).collect()),
            })
        };
        let r#in = req("In", &["a", "b"]).unwrap();
        assert!(r#in.matches(Some("b")) && !r#in.matches(Some("c")) && !r#in.matches(None));
        let not_in = req("NotIn", &["a"]).unwrap();
        assert!(not_in.matches(Some("b")) && !not_in.matches(Some("a")) && not_in.matches(None));
        let exists = req("Exists", &[]).unwrap();
        assert!(exists.matches(Some("")) && !exists.matches(None));
        let dne = req("DoesNotExist", &[]).unwrap();
        assert!(!dne.matches(Some("x")) && dne.matches(None));
        let gt = req("Gt", &["5"]).unwrap();
        assert!(gt.matches(Some("6")) && !gt.matches(Some("5")) && !gt.matches(Some("x")));
        assert!(!gt.matches(None));
        let lt = req("Lt", &["5"]).unwrap();
        assert!(lt.matches(Some("-1")) && !lt.matches(Some("5")) && !lt.matches(None));
        // Malformed requirements.
        assert!(req("In", &[]).is_none());
        assert!(req("Exists", &["a"]).is_none());
        assert!(req("Gt", &["1", "2"]).is_none());
        assert!(req("Lt", &["1.5"]).is_none());
        assert!(req("Near", &["a"]).is_none());
    }
}
