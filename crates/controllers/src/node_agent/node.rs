//! The `Node` a simulated kubelet registers and the status it reports: labels, pod CIDR,
//! capacity and allocatable, addresses, system info, and the conditions `MemoryPressure`,
//! `DiskPressure`, `PIDPressure` (all `False`) and `Ready` (`True`), with the kubelet's
//! reasons and messages.

use super::config::NodeAgentConfig;
use super::ids::hex_digest;
use super::wall_clock::time;
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// The kubelet version the simulated nodes report (the API server reports 1.32).
pub const KUBELET_VERSION: &str = "v1.32.0";

/// The conditions a healthy kubelet reports: type, status, reason, message.
const CONDITIONS: [(&str, &str, &str, &str); 4] = [
    (
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    (
        "DiskPressure",
        "False",
        "KubeletHasNoDiskPressure",
        "kubelet has no disk pressure",
    ),
    (
        "PIDPressure",
        "False",
        "KubeletHasSufficientPID",
        "kubelet has sufficient PID available",
    ),
    (
        "Ready",
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    ),
];

/// The fixed facts of one simulated node.
#[derive(Debug, Clone)]
pub(crate) struct NodeIdentity {
    pub name: String,
    pub ip: std::net::Ipv4Addr,
    /// The pod CIDR's network address (a `/24`).
    pub pod_network: std::net::Ipv4Addr,
    /// Changes at every start of the agent, as a machine's boot ID does.
    pub boot_id: String,
}

impl NodeIdentity {
    pub(crate) fn new(config: &NodeAgentConfig, i: usize, boot: &str) -> NodeIdentity {
        let name = config.node_name(i);
        let digest = hex_digest(&[&name, boot], 32);
        NodeIdentity {
            ip: config.node_ip(i),
            pod_network: config.pod_cidr(i),
            boot_id: format!(
                "{}-{}-{}-{}-{}",
                &digest[0..8],
                &digest[8..12],
                &digest[12..16],
                &digest[16..20],
                &digest[20..32]
            ),
            name,
        }
    }

    pub(crate) fn pod_cidr(&self) -> String {
        format!("{}/24", self.pod_network)
    }
}

/// The node's labels: the kubelet's well-known ones and the configured extra ones.
fn labels(config: &NodeAgentConfig, id: &NodeIdentity) -> BTreeMap<String, String> {
    let mut labels = config.labels.clone();
    for (k, v) in [
        ("kubernetes.io/hostname", id.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
    ] {
        labels.insert(k.to_string(), v.to_string());
    }
    labels
}

/// The node's conditions at `now`; a condition keeps the transition time `current` has
/// for it when its status is unchanged, else it transitions now.
pub(crate) fn conditions(current: Option<&NodeStatus>, now: SystemTime) -> Vec<NodeCondition> {
    let current = current
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    CONDITIONS
        .iter()
        .map(|&(type_, status, reason, message)| {
            let transition = current
                .iter()
                .find(|c| c.type_ == type_ && c.status == status)
                .and_then(|c| c.last_transition_time.clone());
            NodeCondition {
                type_: type_.into(),
                status: status.into(),
                reason: Some(reason.into()),
                message: Some(message.into()),
                last_heartbeat_time: Some(time(now)),
                last_transition_time: transition.or_else(|| Some(time(now))),
            }
        })
        .collect()
}

/// Whether `node`'s conditions differ from what the kubelet reports (someone marked them
/// `Unknown`, or removed one): the kubelet then reports at once.
pub(crate) fn conditions_differ(node: &Node) -> bool {
    let current = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    CONDITIONS.iter().any(|&(type_, status, reason, _)| {
        !current
            .iter()
            .any(|c| c.type_ == type_ && c.status == status && c.reason.as_deref() == Some(reason))
    })
}

/// The node's full status at `now`.
pub(crate) fn status(
    config: &NodeAgentConfig,
    id: &NodeIdentity,
    current: Option<&NodeStatus>,
    now: SystemTime,
) -> NodeStatus {
    let r = &config.resources;
    let resources: BTreeMap<String, Quantity> = [
        ("cpu", r.cpu.clone()),
        ("memory", r.memory.clone()),
        ("ephemeral-storage", r.ephemeral_storage.clone()),
        ("pods", r.pods.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v)))
    .collect();
    let machine = hex_digest(&[&id.name], 32);
    NodeStatus {
        capacity: Some(resources.clone()),
        allocatable: Some(resources),
        conditions: Some(conditions(current, now)),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: id.ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: id.name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
        }),
        node_info: Some(NodeSystemInfo {
            machine_id: machine.clone(),
            system_uuid: format!(
                "{}-{}-{}-{}-{}",
                &machine[0..8],
                &machine[8..12],
                &machine[12..16],
                &machine[16..20],
                &machine[20..32]
            ),
            boot_id: id.boot_id.clone(),
            kernel_version: "6.1.0-listwatch".into(),
            os_image: "listwatch simulated node".into(),
            container_runtime_version: "containerd://1.7.24".into(),
            kubelet_version: KUBELET_VERSION.into(),
            kube_proxy_version: String::new(),
            operating_system: "linux".into(),
            architecture: "amd64".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The `Node` the agent registers.
pub(crate) fn node_object(config: &NodeAgentConfig, id: &NodeIdentity, now: SystemTime) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(id.name.clone()),
            labels: Some(labels(config, id)),
            annotations: Some(BTreeMap::from([(
                "node.alpha.kubernetes.io/ttl".to_string(),
                "0".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some(id.pod_cidr()),
            pod_cidrs: Some(vec![id.pod_cidr()]),
            ..Default::default()
        }),
        status: Some(status(config, id, None, now)),
    }
}

/// The strategic merge patch of `nodes/status` reporting `status` (conditions and
/// addresses merge by `type`).
pub(crate) fn status_patch(status: &NodeStatus) -> serde_json::Value {
    serde_json::json!({ "status": status })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn at(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    #[test]
    fn a_registered_node_is_ready_with_its_resources_and_addresses() {
        let config = NodeAgentConfig {
            nodes: 3,
            ..Default::default()
        };
        let id = NodeIdentity::new(&config, 2, "boot");
        let node = node_object(&config, &id, at(0));
        assert_eq!(node.metadata.name.as_deref(), Some("node-2"));
        let labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "node-2");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        assert_eq!(
            node.spec.as_ref().unwrap().pod_cidr.as_deref(),
            Some("10.244.2.0/24")
        );
        let status = node.status.as_ref().unwrap();
        let cap = status.capacity.as_ref().unwrap();
        assert_eq!(cap["cpu"].0, "32");
        assert_eq!(cap["memory"].0, "256Gi");
        assert_eq!(cap["pods"].0, "110");
        assert_eq!(status.allocatable, status.capacity);
        let addrs = status.addresses.as_ref().unwrap();
        assert_eq!(addrs[0].address, "10.200.0.3");
        let ready = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
        assert!(!conditions_differ(&node));
    }

    #[test]
    fn conditions_keep_transitions_and_notice_foreign_changes() {
        let config = NodeAgentConfig::default();
        let id = NodeIdentity::new(&config, 0, "boot");
        let mut node = node_object(&config, &id, at(0));
        let later = conditions(node.status.as_ref(), at(300));
        assert!(later
            .iter()
            .all(|c| c.last_transition_time == Some(time(at(0)))
                && c.last_heartbeat_time == Some(time(at(300)))));
        // The lifecycle controller marked the node Unknown.
        for c in node.status.as_mut().unwrap().conditions.as_mut().unwrap() {
            c.status = "Unknown".into();
            c.reason = Some("NodeStatusUnknown".into());
        }
        assert!(conditions_differ(&node));
        let back = conditions(node.status.as_ref(), at(400));
        assert!(back
            .iter()
            .all(|c| c.last_transition_time == Some(time(at(400)))));
    }
}
