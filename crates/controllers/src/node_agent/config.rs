//! What a process of node agents simulates: how many nodes, their names, their resources,
//! their addresses, and the kubelet's timing.

use client::clock::{RealClock, SharedClock};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

/// The kubelet's lease duration (`leaseDurationSeconds` of the node's Lease).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(40);
/// How often the kubelet renews its Lease: a quarter of the lease duration.
pub const DEFAULT_LEASE_RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// How often the kubelet reports its node status when nothing changed
/// (`nodeStatusReportFrequency`).
pub const DEFAULT_STATUS_REPORT_INTERVAL: Duration = Duration::from_secs(300);

/// The resources one node offers; `capacity` and `allocatable` are both set from them.
/// Quantities are in Kubernetes' notation (`32`, `256Gi`, `500m`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeResources {
    /// `cpu` (default 32 cores).
    pub cpu: String,
    /// `memory` (default 256 GiB).
    pub memory: String,
    /// `ephemeral-storage` (default 100 GiB).
    pub ephemeral_storage: String,
    /// `pods` (default 110, the kubelet's `maxPods`).
    pub pods: u32,
}

impl Default for NodeResources {
    fn default() -> Self {
        NodeResources {
            cpu: "32".into(),
            memory: "256Gi".into(),
            ephemeral_storage: "100Gi".into(),
            pods: 110,
        }
    }
}

/// Configuration of a [`NodeAgents`](super::NodeAgents) process.
///
/// Node `i` (`0 ≤ i < nodes`) is named `{name_prefix}-{first_index + i}`; with `n =
/// first_index + i` it has the InternalIP `node_ip_base + n + 1` and the pod CIDR
/// `pod_cidr_base + n·256` with prefix length 24 (253 pod addresses: `.2` to `.254`).
/// Processes that share a cluster should use distinct prefixes or index ranges.
#[derive(Debug, Clone)]
pub struct NodeAgentConfig {
    /// How many nodes this process runs.
    pub nodes: usize,
    /// The node names' prefix.
    pub name_prefix: String,
    /// The index of the first node (for several processes sharing one prefix).
    pub first_index: usize,
    /// Each node's capacity (= allocatable).
    pub resources: NodeResources,
    /// Extra labels on every node, next to `kubernetes.io/hostname`, `kubernetes.io/os` and
    /// `kubernetes.io/arch` (the kubelet's `--node-labels`).
    pub labels: BTreeMap<String, String>,
    /// The first node's InternalIP minus one.
    pub node_ip_base: Ipv4Addr,
    /// The first node's pod CIDR (a `/24`); later nodes take the following ones.
    pub pod_cidr_base: Ipv4Addr,
    /// The Lease's `leaseDurationSeconds`.
    pub lease_duration: Duration,
    /// How often each Lease is renewed.
    pub lease_renew_interval: Duration,
    /// The longest time between two node status reports; a change is reported at once.
    pub status_report_interval: Duration,
    /// Tasks that sync pods, shared by all nodes of the process.
    pub pod_workers: usize,
    /// Requests (registrations, lease renewals, status reports) in flight at once.
    pub max_in_flight: usize,
    /// The clock every timer runs on.
    pub clock: SharedClock,
}

impl Default for NodeAgentConfig {
    fn default() -> Self {
        NodeAgentConfig {
            nodes: 1,
            name_prefix: "node".into(),
            first_index: 0,
            resources: NodeResources::default(),
            labels: BTreeMap::new(),
            node_ip_base: Ipv4Addr::new(10, 200, 0, 0),
            pod_cidr_base: Ipv4Addr::new(10, 244, 0, 0),
            lease_duration: DEFAULT_LEASE_DURATION,
            lease_renew_interval: DEFAULT_LEASE_RENEW_INTERVAL,
            status_report_interval: DEFAULT_STATUS_REPORT_INTERVAL,
            pod_workers: 8,
            max_in_flight: 64,
            clock: RealClock::shared(),
        }
    }
}

/// Why a [`NodeAgentConfig`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The node names would not be valid DNS subdomain names.
    #[error("invalid node name prefix {0:?}: node names must be lower-case DNS subdomains (a-z, 0-9, '-', '.') of at most 253 characters")]
    InvalidPrefix(String),
    /// The nodes' addresses would not fit into IPv4.
    #[error("{nodes} nodes from index {first_index} do not fit the address ranges (node IPs from {node_ip_base}, pod CIDRs from {pod_cidr_base}/24)")]
    AddressesExhausted {
        /// Nodes asked for.
        nodes: usize,
        /// The first index.
        first_index: usize,
        /// The node IP base.
        node_ip_base: Ipv4Addr,
        /// The pod CIDR base.
        pod_cidr_base: Ipv4Addr,
    },
    /// A timing that must be positive is zero, or the renewal is not shorter than the lease.
    #[error("invalid timing: {0}")]
    Timing(&'static str),
}

impl NodeAgentConfig {
    /// Checks the configuration: valid names, addresses that fit, sane timings.
    ///
    /// # Errors
    /// The first problem found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let longest = format!(
            "{}-{}",
            self.name_prefix,
            self.first_index + self.nodes.saturating_sub(1)
        );
        if !is_dns_subdomain(&longest) {
            return Err(ConfigError::InvalidPrefix(self.name_prefix.clone()));
        }
        let last = self.first_index as u64 + self.nodes as u64;
        let ip_fits = u64::from(u32::from(self.node_ip_base)) + last < u64::from(u32::MAX);
        let cidr_fits =
            u64::from(u32::from(self.pod_cidr_base) & !0xff) + last * 256 <= u64::from(u32::MAX);
        if !ip_fits || !cidr_fits {
            return Err(ConfigError::AddressesExhausted {
                nodes: self.nodes,
                first_index: self.first_index,
                node_ip_base: self.node_ip_base,
                pod_cidr_base: self.pod_cidr_base,
            });
        }
        if self.lease_renew_interval.is_zero() || self.status_report_interval.is_zero() {
            return Err(ConfigError::Timing(
                "the lease renewal and status report intervals must be positive",
            ));
        }
        if self.lease_duration.as_secs() == 0 || self.lease_renew_interval >= self.lease_duration {
            return Err(ConfigError::Timing(
                "the lease must last at least a second and longer than its renewal interval",
            ));
        }
        if self.pod_workers == 0 || self.max_in_flight == 0 {
            return Err(ConfigError::Timing(
                "pod workers and requests in flight must be at least one",
            ));
        }
        Ok(())
    }

    /// The name of node `i` of this process.
    pub fn node_name(&self, i: usize) -> String {
        format!("{}-{}", self.name_prefix, self.first_index + i)
    }

    /// Node `i`'s InternalIP.
    pub fn node_ip(&self, i: usize) -> Ipv4Addr {
        let n = (self.first_index + i) as u32;
        Ipv4Addr::from(u32::from(self.node_ip_base).wrapping_add(n + 1))
    }

    /// The network address of node `i`'s pod CIDR (a `/24`).
    pub fn pod_cidr(&self, i: usize) -> Ipv4Addr {
        let n = (self.first_index + i) as u32;
        Ipv4Addr::from((u32::from(self.pod_cidr_base) & !0xff).wrapping_add(n << 8))
    }
}

/// Whether `s` is a DNS subdomain name as Kubernetes requires of node names.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses() {
        let c = NodeAgentConfig {
            nodes: 1000,
            first_index: 5,
            ..Default::default()
        };
        c.validate().unwrap();
        assert_eq!(c.node_name(0), "node-5");
        assert_eq!(c.node_ip(0), Ipv4Addr::new(10, 200, 0, 6));
        assert_eq!(c.node_ip(300), Ipv4Addr::new(10, 200, 1, 50));
        assert_eq!(c.pod_cidr(0), Ipv4Addr::new(10, 244, 5, 0));
        assert_eq!(c.pod_cidr(999), Ipv4Addr::new(10, 247, 236, 0));
    }

    #[test]
    fn bad_configurations_are_refused() {
        let bad_prefix = NodeAgentConfig {
            name_prefix: "Node_".into(),
            ..Default::default()
        };
        assert!(matches!(
            bad_prefix.validate(),
            Err(ConfigError::InvalidPrefix(_))
        ));
        let too_many = NodeAgentConfig {
            nodes: 70_000,
            pod_cidr_base: Ipv4Addr::new(255, 0, 0, 0),
            ..Default::default()
        };
        assert!(matches!(
            too_many.validate(),
            Err(ConfigError::AddressesExhausted { .. })
        ));
        let bad_lease = NodeAgentConfig {
            lease_renew_interval: Duration::from_secs(40),
            ..Default::default()
        };
        assert!(matches!(bad_lease.validate(), Err(ConfigError::Timing(_))));
    }
}
