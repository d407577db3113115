//! The node's `Lease` in `kube-node-lease`, the kubelet's cheap heartbeat: created once
//! (owned by the Node, so it goes with it) and then renewed with a small JSON merge patch
//! of `spec` — no read, no full object, no decoding of the answer.

use super::wall_clock::micro_time;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::time::{Duration, SystemTime};

/// The namespace of node leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The Lease of node `name` (with uid `node_uid`), renewed at `now`.
pub(crate) fn lease_object(
    name: &str,
    node_uid: Option<&str>,
    duration: Duration,
    now: SystemTime,
) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(NODE_LEASE_NAMESPACE.to_string()),
            owner_references: node_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: name.to_string(),
                    uid: uid.to_string(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.to_string()),
            lease_duration_seconds: Some(i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)),
            renew_time: Some(micro_time(now)),
            ..Default::default()
        }),
    }
}

/// The JSON merge patch that renews node `name`'s lease at `now` (also restoring the
/// holder and duration, should someone have changed them).
pub(crate) fn renew_patch(name: &str, duration: Duration, now: SystemTime) -> Vec<u8> {
    // Node names are DNS subdomains: nothing in them needs escaping in a JSON string.
    let renew = serde_json::to_string(&micro_time(now)).unwrap_or_default();
    format!(
        r#"{{"spec":{{"holderIdentity":"{name}","leaseDurationSeconds":{},"renewTime":{renew}}}}}"#,
        duration.as_secs()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn lease_and_renewal() {
        let now = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        let lease = lease_object("node-1", Some("u-1"), Duration::from_secs(40), now);
        let v = serde_json::to_value(&lease).unwrap();
        assert_eq!(v["metadata"]["namespace"], "kube-node-lease");
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(v["spec"]["holderIdentity"], "node-1");
        assert_eq!(v["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(v["spec"]["renewTime"], "2023-11-14T22:13:20.123456Z");
        let patch: serde_json::Value =
            serde_json::from_slice(&renew_patch("node-1", Duration::from_secs(40), now)).unwrap();
        assert_eq!(
            patch,
            serde_json::json!({"spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40,
                "renewTime": "2023-11-14T22:13:20.123456Z"}})
        );
    }
}
