//! `NodePorts`: the host ports a pod's containers ask for must be free on the node: no pod
//! there holds the same protocol and port on the same address, or on `0.0.0.0` (or any
//! address, when the pod asks for `0.0.0.0`).

use crate::scheduler::node_info::NodeInfo;
use crate::scheduler::pod_info::PodInfo;

/// Whether every host port `pod` wants is free on `node`.
pub fn fits(pod: &PodInfo, node: &NodeInfo) -> bool {
    pod.host_ports.iter().all(|want| {
        !node
            .used_ports
            .iter()
            .any(|(used, _)| used.conflicts_with(want))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::filters::test_support::*;
    use serde_json::{json, Value};

    fn with_ports(name: &str, ports: Value) -> std::sync::Arc<PodInfo> {
        pod_info(
            name,
            "0",
            "0",
            json!({"spec": {"containers": [{"name": "c", "ports": ports}]}}),
        )
    }

    #[test]
    fn conflicts_by_protocol_port_and_address() {
        let mut n = node_info(node("n", json!({})));
        n.add_pod(&with_ports(
            "a",
            json!([
            {"containerPort": 1, "hostPort": 8080, "hostIP": "10.0.0.1"},
            {"containerPort": 2, "hostPort": 53, "protocol": "UDP"}]),
        ));
        let cases = [
            (
                json!([{"containerPort": 1, "hostPort": 8080, "hostIP": "10.0.0.1"}]),
                false,
            ),
            (
                json!([{"containerPort": 1, "hostPort": 8080, "hostIP": "10.0.0.2"}]),
                true,
            ),
            (json!([{"containerPort": 1, "hostPort": 8080}]), false),
            (
                json!([{"containerPort": 1, "hostPort": 8080, "protocol": "UDP"}]),
                true,
            ),
            (
                json!([{"containerPort": 1, "hostPort": 53, "protocol": "UDP", "hostIP": "1.2.3.4"}]),
                false,
            ),
            (json!([{"containerPort": 1, "hostPort": 53}]), true),
            (json!([{"containerPort": 8080}]), true),
        ];
        for (ports, free) in cases {
            assert_eq!(fits(&with_ports("b", ports.clone()), &n), free, "{ports}");
        }
    }
}
