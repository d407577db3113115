//! Cluster IPs and node ports for services, as kube-apiserver hands them out.
//!
//! - A service of type ClusterIP, NodePort or LoadBalancer gets a cluster IP from
//!   [`CLUSTER_IP_RANGE`] (10.96.0.0/12, kubeadm's default) unless it asks for one (`"None"`
//!   makes it headless); NodePort and LoadBalancer services get a node port from
//!   [`NODE_PORT_RANGE`] for every port that has none. An ExternalName service gets neither.
//! - Each address or port handed out is a key in storage (`/registry/ranges/serviceips/IP`,
//!   `/registry/ranges/servicenodeports/PORT`) created only if absent, so two services never
//!   get the same one, even through different API servers on one etcd. The key's value names
//!   the owning service, so re-reserving what a service already holds succeeds.
//! - A reservation is released when its service is deleted, and [`repair`] (run
//!   periodically) releases any that no service references — left behind by namespace
//!   deletion, finalizers, a changed service type, a failed create or a crash. It releases a
//!   key only when it found it unreferenced in two passes in a row, so a reservation made
//!   for a create in flight is never taken back.

use crate::registry::ResourceInfo;
use api::Status;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use storage::{RangeRequest, Storage, StorageError};

/// The service cluster IP range: base address and prefix length.
pub const CLUSTER_IP_RANGE: (u32, u32) = (0x0A60_0000, 12);
/// The node port range, inclusive.
pub const NODE_PORT_RANGE: (u16, u16) = (30000, 32767);

const IP_PREFIX: &str = "/registry/ranges/serviceips/";
const PORT_PREFIX: &str = "/registry/ranges/servicenodeports/";

fn ip_key(ip: u32) -> String {
    format!("{IP_PREFIX}{}", std::net::Ipv4Addr::from(ip))
}

fn port_key(port: u16) -> String {
    format!("{PORT_PREFIX}{port}")
}

fn in_ip_range(ip: u32) -> bool {
    let (base, bits) = CLUSTER_IP_RANGE;
    let size = 1u32 << (32 - bits);
    // Neither the network nor the broadcast address.
    ip > base && ip < base + size - 1
}

fn random_u32() -> u32 {
    uuid::Uuid::new_v4().as_u128() as u32
}

fn invalid(name: &str, field: &str, msg: &str) -> Status {
    Status::invalid("Service", name, field, msg)
}

/// Reserves `key` for `owner`: true if it was free or already `owner`'s.
async fn reserve(storage: &dyn Storage, key: String, owner: &str) -> Result<bool, Status> {
    match storage
        .create(key.clone().into(), owner.to_string().into())
        .await
    {
        Ok(_) => Ok(true),
        Err(StorageError::AlreadyExists) => match storage.get(key.as_bytes()).await {
            Ok(Some(kv)) => Ok(kv.value.as_ref() == owner.as_bytes()),
            // Released in between: try once more.
            Ok(None) => Ok(storage
                .create(key.into(), owner.to_string().into())
                .await
                .is_ok()),
            Err(e) => Err(Status::internal(e)),
        },
        Err(e) => Err(Status::internal(e)),
    }
}

/// The first of `candidates` whose key could be reserved for `owner`, if any.
async fn first_free<T: Copy>(
    storage: &dyn Storage,
    candidates: impl Iterator<Item = T>,
    key: fn(T) -> String,
    owner: &str,
) -> Result<Option<T>, Status> {
    for c in candidates {
        if reserve(storage, key(c), owner).await? {
            return Ok(Some(c));
        }
    }
    Ok(None)
}

/// Carries the allocated fields of `old` into `new` where `new` leaves them out (an update
/// that does not mention them keeps them); refuses a changed cluster IP (422).
pub fn carry_over(
    name: &str,
    old: &Map<String, Value>,
    new: &mut Map<String, Value>,
) -> Result<(), Status> {
    let (Some(old_spec), Some(new_spec)) = (
        old.get("spec").and_then(Value::as_object),
        new.get_mut("spec").and_then(Value::as_object_mut),
    ) else {
        return Ok(());
    };
    let old_ip = old_spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("");
    let new_ip = new_spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("");
    let external = new_spec.get("type").and_then(Value::as_str) == Some("ExternalName");
    if !old_ip.is_empty() && !external {
        if new_ip.is_empty() {
            // Absent, null, "" and [] all mean "keep what was allocated" (as `helm upgrade
            // --force` sends a Service back with `clusterIP: ""`).
            for k in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                if let Some(v) = old_spec.get(k) {
                    let unset = match new_spec.get(k) {
                        None | Some(Value::Null) => true,
                        Some(Value::String(s)) => s.is_empty(),
                        Some(Value::Array(a)) => a.is_empty(),
                        Some(_) => false,
                    };
                    if unset {
                        new_spec.insert(k.into(), v.clone());
                    }
                }
            }
        } else if new_ip != old_ip {
            return Err(invalid(
                name,
                "spec.clusterIPs[0]",
                &format!("Invalid value: {new_ip:?}: may not change once set"),
            ));
        }
    }
    // Node ports, matched by port number and protocol, while the type still uses them.
    let ty = new_spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    if ty != "NodePort" && ty != "LoadBalancer" {
        // The type no longer uses node ports: the ones carried from the stored service (an
        // apply that changed only the type keeps them) go, as Kubernetes drops them; one
        // the client chose anew stays, for validation to refuse.
        let held: Vec<i64> = old_spec
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
            .collect();
        for p in new_spec
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            if p.get("nodePort")
                .and_then(Value::as_i64)
                .is_some_and(|n| held.contains(&n))
            {
                p.remove("nodePort");
            }
        }
        return Ok(());
    }
    let old_ports: HashMap<(i64, String), i64> = old_spec
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let node = p
                .get("nodePort")
                .and_then(Value::as_i64)
                .filter(|n| *n > 0)?;
            Some(((p.get("port")?.as_i64()?, protocol(p)), node))
        })
        .collect();
    if let Some(ports) = new_spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut() {
            let (Some(port), proto) = (p.get("port").and_then(Value::as_i64), protocol(p)) else {
                continue;
            };
            let has = p
                .get("nodePort")
                .and_then(Value::as_i64)
                .is_some_and(|n| n > 0);
            if let (false, Some(node), Some(m)) =
                (has, old_ports.get(&(port, proto)), p.as_object_mut())
            {
                m.insert("nodePort".into(), json!(node));
            }
        }
    }
    Ok(())
}

fn protocol(p: &Value) -> String {
    p.get("protocol")
        .and_then(Value::as_str)
        .unwrap_or("TCP")
        .to_string()
}

/// Gives the service `ns/name` (JSON object `obj`) its cluster IP and node ports, reserving
/// each in storage. 422 for an address or port outside its range or held by another service.
pub async fn allocate(
    storage: &dyn Storage,
    ns: &str,
    obj: &mut Map<String, Value>,
) -> Result<(), Status> {
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let owner = format!("{ns}/{name}");
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    if ty == "ExternalName" {
        return Ok(());
    }
    let asked = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    match asked.as_str() {
        "None" => {
            spec.entry("clusterIPs").or_insert_with(|| json!(["None"]));
        }
        "" => {
            let (base, bits) = CLUSTER_IP_RANGE;
            let size = 1u32 << (32 - bits);
            // The range is large: random tries find a free address at once.
            let candidates = (0..64).map(|_| base + 1 + random_u32() % (size - 2));
            let ip = first_free(storage, candidates, ip_key, &owner)
                .await?
                .ok_or_else(|| {
                    Status::internal("failed to allocate a cluster IP: the range looks full")
                })?;
            let text = std::net::Ipv4Addr::from(ip).to_string();
            spec.insert("clusterIP".into(), json!(text));
            spec.insert("clusterIPs".into(), json!([text]));
        }
        text => {
            let ip = text
                .parse::<std::net::Ipv4Addr>()
                .ok()
                .map(u32::from)
                .filter(|ip| in_ip_range(*ip))
                .ok_or_else(|| {
                    invalid(&name, "spec.clusterIPs[0]", &format!(
                        "Invalid value: {text:?}: provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/12"
                    ))
                })?;
            if !reserve(storage, ip_key(ip), &owner).await? {
                return Err(invalid(&name, "spec.clusterIPs[0]", &format!(
                    "Invalid value: {text:?}: failed to allocate IP {text}: provided IP is already allocated"
                )));
            }
            spec.entry("clusterIPs").or_insert_with(|| json!([text]));
        }
    }
    if asked != "None" {
        spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
        spec.entry("ipFamilyPolicy")
            .or_insert_with(|| json!("SingleStack"));
    }
    if ty != "NodePort" && ty != "LoadBalancer" {
        return Ok(());
    }
    let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) else {
        return Ok(());
    };
    let (lo, hi) = NODE_PORT_RANGE;
    let span = u32::from(hi - lo) + 1;
    for (i, p) in ports.iter_mut().enumerate() {
        let Some(m) = p.as_object_mut() else { continue };
        match m
            .get("nodePort")
            .and_then(Value::as_i64)
            .filter(|n| *n != 0)
        {
            Some(n) => {
                let field = format!("spec.ports[{i}].nodePort");
                let port = u16::try_from(n)
                    .ok()
                    .filter(|n| (lo..=hi).contains(n))
                    .ok_or_else(|| {
                        invalid(&name, &field, &format!(
                            "Invalid value: {n}: provided port is not in the valid range. The range of valid ports is {lo}-{hi}"
                        ))
                    })?;
                if !reserve(storage, port_key(port), &owner).await? {
                    return Err(invalid(
                        &name,
                        &field,
                        &format!("Invalid value: {n}: provided port is already allocated"),
                    ));
                }
            }
            None => {
                // A random start, then every port in turn: the range is small.
                let start = random_u32() % span;
                let candidates = (0..span).map(|k| lo + ((start + k) % span) as u16);
                let port = first_free(storage, candidates, port_key, &owner)
                    .await?
                    .ok_or_else(|| {
                        Status::internal("failed to allocate a node port: the range is full")
                    })?;
                m.insert("nodePort".into(), json!(port));
            }
        }
    }
    Ok(())
}

/// The reservation keys a stored service holds.
fn held_keys(obj: &Value) -> Vec<String> {
    let mut keys = Vec::new();
    let spec = obj.get("spec");
    if let Some(ip) = spec
        .and_then(|s| s.get("clusterIP"))
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<std::net::Ipv4Addr>().ok())
    {
        keys.push(ip_key(u32::from(ip)));
    }
    for p in spec
        .and_then(|s| s.get("ports"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(n) = p
            .get("nodePort")
            .and_then(Value::as_i64)
            .and_then(|n| u16::try_from(n).ok())
        {
            if n > 0 {
                keys.push(port_key(n));
            }
        }
    }
    keys
}

/// Releases what the deleted service `obj` (`ns/name`) held.
pub async fn release(storage: &dyn Storage, ns: &str, obj: &Value) {
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let owner = format!("{ns}/{name}");
    for key in held_keys(obj) {
        if let Ok(Some(kv)) = storage.get(key.as_bytes()).await {
            if kv.value.as_ref() == owner.as_bytes() {
                let _ = storage.delete(key.into(), Some(kv.mod_revision)).await;
            }
        }
    }
}

/// One pass of the repair: releases reservations no service references that were already
/// unreferenced (at the same revision) in the previous pass, whose keys and revisions
/// `suspects` carries from pass to pass. Returns how many were released.
pub async fn repair(
    storage: &dyn Storage,
    services: &ResourceInfo,
    suspects: &mut HashMap<bytes::Bytes, u64>,
) -> Result<usize, StorageError> {
    let held: std::collections::HashSet<String> = storage
        .range(RangeRequest::prefix(services.key_prefix().into_bytes()))
        .await?
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
        .flat_map(|v| held_keys(&v))
        .collect();
    let mut next = HashMap::new();
    let mut released = 0;
    for prefix in [IP_PREFIX, PORT_PREFIX] {
        for kv in storage
            .range(RangeRequest::prefix(prefix.as_bytes().to_vec()))
            .await?
            .kvs
        {
            let key_text = String::from_utf8_lossy(&kv.key).into_owned();
            if held.contains(&key_text) {
                continue;
            }
            if suspects.get(&kv.key) == Some(&kv.mod_revision) {
                if storage
                    .delete(kv.key.clone(), Some(kv.mod_revision))
                    .await
                    .is_ok()
                {
                    released += 1;
                }
            } else {
                next.insert(kv.key.clone(), kv.mod_revision);
            }
        }
    }
    *suspects = next;
    Ok(released)
}

#[cfg(test)]
mod tests {
    use super::*;
    use storage::memory::MemoryStorage;

    fn svc(name: &str, spec: Value) -> Map<String, Value> {
        let Value::Object(m) = json!({"metadata": {"name": name}, "spec": spec}) else {
            unreachable!("a literal object")
        };
        m
    }

    #[tokio::test]
    async fn allocation_reservation_and_repair() {
        let s = MemoryStorage::new();
        let mut a = svc("a", json!({"ports": [{"port": 80}]}));
        allocate(&s, "default", &mut a).await.unwrap();
        let ip: std::net::Ipv4Addr = a["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
        assert!(in_ip_range(u32::from(ip)), "{ip}");
        assert_eq!(a["spec"]["clusterIPs"], json!([ip.to_string()]));
        assert!(a["spec"]["ports"][0].get("nodePort").is_none());
        // The same address for another service: 422; for the owner again: fine.
        let mut b = svc("b", json!({"clusterIP": ip.to_string()}));
        assert_eq!(
            allocate(&s, "default", &mut b).await.unwrap_err().code(),
            422
        );
        let mut again = svc("a", json!({"clusterIP": ip.to_string()}));
        allocate(&s, "default", &mut again).await.unwrap();
        let mut out = svc("c", json!({"clusterIP": "192.168.0.1"}));
        assert_eq!(
            allocate(&s, "default", &mut out).await.unwrap_err().code(),
            422
        );
        // Node ports.
        let mut np = svc(
            "np",
            json!({"type": "NodePort", "ports": [{"port": 80}, {"port": 81, "nodePort": 30081}]}),
        );
        allocate(&s, "default", &mut np).await.unwrap();
        let port = np["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
        assert!((30000..=32767).contains(&port) && port != 30081);
        let mut clash = svc(
            "x",
            json!({"type": "NodePort", "ports": [{"port": 1, "nodePort": 30081}]}),
        );
        assert_eq!(
            allocate(&s, "default", &mut clash)
                .await
                .unwrap_err()
                .code(),
            422
        );
        let mut wide = svc(
            "y",
            json!({"type": "NodePort", "ports": [{"port": 1, "nodePort": 80}]}),
        );
        assert_eq!(
            allocate(&s, "default", &mut wide).await.unwrap_err().code(),
            422
        );
        // Headless and ExternalName services hold nothing.
        let mut headless = svc("h", json!({"clusterIP": "None"}));
        allocate(&s, "default", &mut headless).await.unwrap();
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        let mut ext = svc(
            "e",
            json!({"type": "ExternalName", "externalName": "x.example.com"}),
        );
        allocate(&s, "default", &mut ext).await.unwrap();
        assert!(ext["spec"].get("clusterIP").is_none());

        // Release on delete.
        release(&s, "default", &Value::Object(np.clone())).await;
        assert!(s.get(port_key(30081).as_bytes()).await.unwrap().is_none());
        assert!(s
            .get(ip_key(u32::from(ip)).as_bytes())
            .await
            .unwrap()
            .is_some());

        // Repair: no service is stored at all, so every remaining reservation is released,
        // but only on the second pass.
        let info = crate::registry::resources::find("", "v1", "services").unwrap();
        let mut suspects = HashMap::new();
        assert_eq!(repair(&s, info, &mut suspects).await.unwrap(), 0);
        assert!(!suspects.is_empty());
        assert!(repair(&s, info, &mut suspects).await.unwrap() >= 1);
        assert!(s
            .get(ip_key(u32::from(ip)).as_bytes())
            .await
            .unwrap()
            .is_none());
    }

    #[test]
    fn updates_keep_allocations_and_refuse_a_new_cluster_ip() {
        let old = svc(
            "a",
            json!({"type": "NodePort", "clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"],
            "ports": [{"port": 80, "nodePort": 30080}]}),
        );
        let mut new = svc(
            "a",
            json!({"type": "NodePort", "ports": [{"port": 80}, {"port": 81}]}),
        );
        carry_over("a", &old, &mut new).unwrap();
        assert_eq!(new["spec"]["clusterIP"], "10.96.0.9");
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30080);
        assert!(new["spec"]["ports"][1].get("nodePort").is_none());
        let mut to_cluster_ip = svc("a", json!({"type": "ClusterIP", "ports": [{"port": 80}]}));
        carry_over("a", &old, &mut to_cluster_ip).unwrap();
        assert!(to_cluster_ip["spec"]["ports"][0].get("nodePort").is_none());
        // An apply that changes only the type sends the allocated node port back: it goes.
        let mut applied = svc(
            "a",
            json!({"type": "ClusterIP", "ports": [{"port": 80, "nodePort": 30080}, {"port": 81, "nodePort": 30099}]}),
        );
        carry_over("a", &old, &mut applied).unwrap();
        assert!(applied["spec"]["ports"][0].get("nodePort").is_none());
        assert_eq!(applied["spec"]["ports"][1]["nodePort"], 30099);
        let mut blank = svc(
            "a",
            json!({"type": "NodePort", "clusterIP": "", "clusterIPs": [],
            "ports": [{"port": 80}]}),
        );
        carry_over("a", &old, &mut blank).unwrap();
        assert_eq!(blank["spec"]["clusterIP"], "10.96.0.9");
        assert_eq!(blank["spec"]["clusterIPs"], json!(["10.96.0.9"]));
        let mut changed = svc("a", json!({"clusterIP": "10.96.0.10"}));
        assert_eq!(carry_over("a", &old, &mut changed).unwrap_err().code(), 422);
    }
}
