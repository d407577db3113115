//! Server-side printing: the `meta.k8s.io` Table and PartialObjectMetadata renderings of
//! objects, as `kubectl get` and metadata-only clients ask for them.
//!
//! A row's cells are computed from the object's JSON once and kept on the cached object
//! ([`RowParts`]), split around the AGE cell, which depends on the time of the response: each
//! response only splices in the current age.

use super::watch_json::ObjectEncoder;
use crate::cacher::CachedObject;
use crate::registry::ResourceInfo;
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{json, Value};

/// What a Table row carries in its `object` field (the `includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No object.
    None,
    /// The object's metadata as a PartialObjectMetadata (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses `includeObject` (`None`, `Metadata`, `Object`; empty = default); `None` if the
    /// value is not one of these.
    pub fn parse(v: &str) -> Option<IncludeObject> {
        match v {
            "" | "Metadata" => Some(IncludeObject::Metadata),
            "None" => Some(IncludeObject::None),
            "Object" => Some(IncludeObject::Object),
            _ => None,
        }
    }
}

/// A Table row of one object, without its AGE cell: `prefix` is `{"cells":[` and the cells
/// before AGE (each followed by a comma), `suffix` the cells after AGE (each preceded by a
/// comma) and `]`. For the few kinds without an AGE column (`aged` false) `prefix` holds
/// every cell and `suffix` only the `]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowParts {
    /// Everything up to the AGE cell.
    pub prefix: Bytes,
    /// Everything after the AGE cell, up to and including the closing `]` of the cells.
    pub suffix: Bytes,
    /// `metadata.creationTimestamp` in Unix seconds, if the object has one.
    pub created: Option<i64>,
    /// Whether the row has an AGE cell between `prefix` and `suffix`.
    pub aged: bool,
}

/// One column of a resource's Table.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// The header kubectl prints (upper-cased by kubectl).
    pub name: &'static str,
    /// OpenAPI type: `string` or `integer`.
    pub kind: &'static str,
    /// `name` for the NAME column, else empty.
    pub format: &'static str,
    /// A description of the column.
    pub description: &'static str,
    /// 0 = always shown; 1 = shown with `-o wide`.
    pub priority: u8,
}

const fn col(name: &'static str, kind: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind,
        format: "",
        description,
        priority: 0,
    }
}

const fn wide(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind: "string",
        format: "",
        description,
        priority: 1,
    }
}

const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    description: "The object's name, unique within its namespace (or cluster, if cluster-scoped).",
    priority: 0,
};
const AGE: Column = col(
    "Age",
    "string",
    "How long ago the object was created (from metadata.creationTimestamp).",
);

const POD_COLUMNS: &[Column] = &[
    NAME,
    col("Ready", "string", "Ready containers out of all containers."),
    col(
        "Status",
        "string",
        "A summary of the pod's phase and its containers' states.",
    ),
    col(
        "Restarts",
        "string",
        "Total restarts of the pod's containers.",
    ),
    AGE,
    wide("IP", "The pod's IP address, once one is allocated."),
    wide("Node", "The node the pod is bound to."),
    wide(
        "Nominated Node",
        "The node the scheduler nominated for preemption, if any.",
    ),
    wide(
        "Readiness Gates",
        "Readiness gates that are satisfied, out of all gates.",
    ),
];
const NODE_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Status",
        "string",
        "The node's Ready condition and whether it is schedulable.",
    ),
    col(
        "Roles",
        "string",
        "Roles from the node's node-role.kubernetes.io labels.",
    ),
    AGE,
    col("Version", "string", "The kubelet version the node reports."),
    wide("Internal-IP", "The node's InternalIP address."),
    wide("External-IP", "The node's ExternalIP address."),
    wide("OS-Image", "The operating system image the node reports."),
    wide("Kernel-Version", "The kernel version the node reports."),
    wide(
        "Container-Runtime",
        "The container runtime and version the node reports.",
    ),
];
/// The `-o wide` columns of workloads with a pod template.
const CONTAINERS: Column = wide("Containers", "Names of the template's containers.");
const IMAGES: Column = wide("Images", "Images of the template's containers.");
const POD_SELECTOR: Column = wide("Selector", "The label selector of the pods.");
const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    col("Ready", "string", "Ready replicas out of desired replicas."),
    col(
        "Up-to-date",
        "integer",
        "Replicas running the current template.",
    ),
    col("Available", "integer", "Replicas available to serve."),
    AGE,
    CONTAINERS,
    IMAGES,
    POD_SELECTOR,
];
const REPLICASET_COLUMNS: &[Column] = &[
    NAME,
    col("Desired", "integer", "Replicas asked for."),
    col("Current", "integer", "Replicas that exist."),
    col("Ready", "integer", "Replicas that are ready."),
    AGE,
    CONTAINERS,
    IMAGES,
    POD_SELECTOR,
];
const NAMESPACE_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Status",
        "string",
        "The namespace's phase (Active or Terminating).",
    ),
    AGE,
];
const CONFIGMAP_COLUMNS: &[Column] = &[
    NAME,
    col("Data", "integer", "Keys in data and binaryData."),
    AGE,
];
const SECRET_COLUMNS: &[Column] = &[
    NAME,
    col("Type", "string", "The secret's type."),
    col("Data", "integer", "Keys in data."),
    AGE,
];
const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    col("Type", "string", "How the service is exposed."),
    col("Cluster-IP", "string", "The service's cluster IP."),
    col(
        "External-IP",
        "string",
        "External IPs, load-balancer ingress or the external name.",
    ),
    col(
        "Port(s)",
        "string",
        "Ports, with their node ports, and protocols.",
    ),
    AGE,
    wide("Selector", "The label selector of the service's pods."),
];
const LEASE_COLUMNS: &[Column] = &[
    NAME,
    col("Holder", "string", "The identity holding the lease."),
    AGE,
];
const EVENT_COLUMNS: &[Column] = &[
    col(
        "Last Seen",
        "string",
        "How long ago the event last happened.",
    ),
    col("Type", "string", "Normal or Warning."),
    col("Reason", "string", "Why the event happened, in CamelCase."),
    col(
        "Object",
        "string",
        "The object the event is about (kind/name).",
    ),
    col("Message", "string", "What happened."),
];
const SERVICEACCOUNT_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Secrets",
        "string",
        "Secrets listed for the service account.",
    ),
    AGE,
];
const STATEFULSET_COLUMNS: &[Column] = &[
    NAME,
    col("Ready", "string", "Ready replicas out of desired replicas."),
    AGE,
    CONTAINERS,
    IMAGES,
];
const DAEMONSET_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Desired",
        "integer",
        "Nodes that should run the daemon pod.",
    ),
    col("Current", "integer", "Nodes running the daemon pod."),
    col("Ready", "integer", "Nodes whose daemon pod is ready."),
    col(
        "Up-to-date",
        "integer",
        "Nodes running the current template.",
    ),
    col(
        "Available",
        "integer",
        "Nodes whose daemon pod is available.",
    ),
    col("Node Selector", "string", "The template's node selector."),
    AGE,
    CONTAINERS,
    IMAGES,
    POD_SELECTOR,
];
const BINDING_COLUMNS: &[Column] = &[
    NAME,
    col("Role", "string", "The role bound (kind/name)."),
    AGE,
    wide("Users", "Users bound."),
    wide("Groups", "Groups bound."),
    wide(
        "ServiceAccounts",
        "Service accounts bound (namespace/name).",
    ),
];
const JOB_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Status",
        "string",
        "The job's state: Running, Complete, Failed, Suspended, ...",
    ),
    col(
        "Completions",
        "string",
        "Succeeded pods out of the completions wanted.",
    ),
    col(
        "Duration",
        "string",
        "How long the job ran until it completed.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    POD_SELECTOR,
];
const CRONJOB_COLUMNS: &[Column] = &[
    NAME,
    col("Schedule", "string", "The cron schedule."),
    col("Timezone", "string", "The schedule's time zone."),
    col("Suspend", "boolean", "Whether new runs are suspended."),
    col("Active", "integer", "Jobs running now."),
    col("Last Schedule", "string", "When a job was last scheduled."),
    AGE,
    wide("Containers", "Names of the job template's containers."),
    wide("Images", "Images of the job template's containers."),
    wide("Selector", "The job template's label selector."),
];
const PVC_COLUMNS: &[Column] = &[
    NAME,
    col("Status", "string", "The claim's phase."),
    col("Volume", "string", "The bound persistent volume."),
    col("Capacity", "string", "The bound volume's capacity."),
    col("Access Modes", "string", "The bound volume's access modes."),
    col("StorageClass", "string", "The claim's storage class."),
    col(
        "VolumeAttributesClass",
        "string",
        "The claim's volume attributes class.",
    ),
    AGE,
    wide("VolumeMode", "Filesystem or Block."),
];
const INGRESS_COLUMNS: &[Column] = &[
    NAME,
    col("Class", "string", "The ingress class."),
    col("Hosts", "string", "The hosts of the rules."),
    col("Address", "string", "Load-balancer addresses."),
    col("Ports", "string", "80, and 443 with TLS."),
    AGE,
];
const PV_COLUMNS: &[Column] = &[
    NAME,
    col("Capacity", "string", "The volume's size."),
    col("Access Modes", "string", "How the volume can be mounted."),
    col(
        "Reclaim Policy",
        "string",
        "What happens to it when released.",
    ),
    col("Status", "string", "The volume's phase."),
    col("Claim", "string", "The bound claim (namespace/name)."),
    col("StorageClass", "string", "The volume's storage class."),
    col(
        "VolumeAttributesClass",
        "string",
        "The volume's attributes class.",
    ),
    col("Reason", "string", "Why the volume is in its phase."),
    AGE,
    wide("VolumeMode", "Filesystem or Block."),
];
const STORAGECLASS_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Provisioner",
        "string",
        "The volume plugin that provisions.",
    ),
    col(
        "ReclaimPolicy",
        "string",
        "The reclaim policy of its volumes.",
    ),
    col("VolumeBindingMode", "string", "When volumes are bound."),
    col("AllowVolumeExpansion", "string", "Whether claims may grow."),
    AGE,
];
const PRIORITYCLASS_COLUMNS: &[Column] = &[
    NAME,
    col("Value", "integer", "The priority."),
    col(
        "Global-Default",
        "boolean",
        "Whether pods without a class get it.",
    ),
    AGE,
    col(
        "PreemptionPolicy",
        "string",
        "Whether it preempts lower priorities.",
    ),
];
const ENDPOINTS_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Endpoints",
        "string",
        "The addresses and ports (the first few).",
    ),
    AGE,
];
const INGRESSCLASS_COLUMNS: &[Column] = &[
    NAME,
    col("Controller", "string", "The controller that implements it."),
    col("Parameters", "string", "Its parameters object."),
    AGE,
];
const CSINODE_COLUMNS: &[Column] = &[
    NAME,
    col("Drivers", "integer", "CSI drivers registered on the node."),
    AGE,
];
const CSIDRIVER_COLUMNS: &[Column] = &[
    NAME,
    col(
        "AttachRequired",
        "boolean",
        "Whether volumes are attached before they are mounted.",
    ),
    col(
        "PodInfoOnMount",
        "boolean",
        "Whether the driver is told about the pod at mount.",
    ),
    col(
        "StorageCapacity",
        "boolean",
        "Whether scheduling considers the capacity it reports.",
    ),
    col(
        "TokenRequests",
        "string",
        "Audiences of the service-account tokens it is given.",
    ),
    col(
        "RequiresRepublish",
        "boolean",
        "Whether volumes are mounted again periodically.",
    ),
    col("Modes", "string", "The volume lifecycle modes it supports."),
    AGE,
];
/// Kubernetes prints no AGE for these.
const CSISTORAGECAPACITY_COLUMNS: &[Column] = &[
    NAME,
    col("StorageClassName", "string", "The storage class it is for."),
    col("Capacity", "string", "The capacity reported."),
];
const CONTROLLERREVISION_COLUMNS: &[Column] = &[
    NAME,
    col("Controller", "string", "The controller of the revision."),
    col("Revision", "string", "The revision's number."),
    AGE,
];
const DEFAULT_COLUMNS: &[Column] = &[NAME, AGE];

/// The columns of `info`'s Table.
pub fn columns(info: &ResourceInfo) -> &'static [Column] {
    match (info.group, info.resource) {
        ("", "pods") => POD_COLUMNS,
        ("", "nodes") => NODE_COLUMNS,
        ("", "namespaces") => NAMESPACE_COLUMNS,
        ("apps", "deployments") => DEPLOYMENT_COLUMNS,
        ("apps", "replicasets") | ("", "replicationcontrollers") => REPLICASET_COLUMNS,
        ("", "configmaps") => CONFIGMAP_COLUMNS,
        ("", "secrets") => SECRET_COLUMNS,
        ("", "services") => SERVICE_COLUMNS,
        ("" | "events.k8s.io", "events") => EVENT_COLUMNS,
        ("coordination.k8s.io", "leases") => LEASE_COLUMNS,
        ("", "serviceaccounts") => SERVICEACCOUNT_COLUMNS,
        ("", "persistentvolumeclaims") => PVC_COLUMNS,
        ("apps", "statefulsets") => STATEFULSET_COLUMNS,
        ("apps", "daemonsets") => DAEMONSET_COLUMNS,
        ("apps", "controllerrevisions") => CONTROLLERREVISION_COLUMNS,
        ("batch", "cronjobs") => CRONJOB_COLUMNS,
        ("batch", "jobs") => JOB_COLUMNS,
        ("networking.k8s.io", "ingresses") => INGRESS_COLUMNS,
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => BINDING_COLUMNS,
        ("", "persistentvolumes") => PV_COLUMNS,
        ("", "endpoints") => ENDPOINTS_COLUMNS,
        ("storage.k8s.io", "storageclasses") => STORAGECLASS_COLUMNS,
        ("scheduling.k8s.io", "priorityclasses") => PRIORITYCLASS_COLUMNS,
        ("networking.k8s.io", "ingressclasses") => INGRESSCLASS_COLUMNS,
        ("storage.k8s.io", "csinodes") => CSINODE_COLUMNS,
        ("storage.k8s.io", "csidrivers") => CSIDRIVER_COLUMNS,
        ("storage.k8s.io", "csistoragecapacities") => CSISTORAGECAPACITY_COLUMNS,
        _ => DEFAULT_COLUMNS,
    }
}

/// The `columnDefinitions` array of `info`'s Table, as JSON.
pub fn column_definitions(info: &ResourceInfo) -> String {
    if let Some(printer) = custom_columns(info) {
        let mut defs = vec![json!({"name": "Name", "type": "string", "format": "name",
            "description": NAME.description, "priority": 0})];
        defs.extend(printer.iter().map(|c| {
            json!({"name": c.name, "type": c.type_, "format": c.format,
                   "description": c.description, "priority": c.priority})
        }));
        return Value::Array(defs).to_string();
    }
    let defs: Vec<Value> = columns(info)
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.kind, "format": c.format,
                   "description": c.description, "priority": c.priority})
        })
        .collect();
    Value::Array(defs).to_string()
}

/// Formats a duration the way kubectl prints ages: `45s`, `3m20s`, `15m`, `4h5m`, `20h`,
/// `3d4h`, `30d`, `2y100d`, `9y`. Negative durations are `0s` (a second of clock skew) or
/// `<invalid>`.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let (d, h) = (hours / 24, hours % 24);
        return if h == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{h}h")
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    let years = hours / 24 / 365;
    if hours < 24 * 365 * 8 {
        let d = (hours / 24) % 365;
        return if d == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{d}d")
        };
    }
    format!("{years}y")
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    get(v, path).and_then(Value::as_str).unwrap_or("")
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

fn i(v: &Value, path: &[&str]) -> i64 {
    get(v, path).and_then(Value::as_i64).unwrap_or(0)
}

fn arr<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    get(v, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// A volume's or claim's VOLUMEATTRIBUTESCLASS cell.
fn volume_attributes_class(obj: &Value) -> &str {
    match s(obj, &["spec", "volumeAttributesClassName"]) {
        "" => "<unset>",
        class => class,
    }
}

/// kubectl's short form of a volume access mode.
fn access_mode_short(mode: &str) -> String {
    match mode {
        "ReadWriteOnce" => "RWO".into(),
        "ReadOnlyMany" => "ROX".into(),
        "ReadWriteMany" => "RWX".into(),
        "ReadWriteOncePod" => "RWOP".into(),
        other => other.into(),
    }
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.to_string()
    }
}

fn pod_status(pod: &Value) -> (String, i64, usize) {
    let mut reason = s(pod, &["status", "phase"]).to_string();
    if reason.is_empty() {
        reason = "Pending".into();
    }
    let status_reason = s(pod, &["status", "reason"]);
    if !status_reason.is_empty() {
        reason = status_reason.to_string();
    }
    let mut restarts: i64 = 0;
    let mut ready = 0;
    let init_total = arr(pod, &["spec", "initContainers"]).len();
    let mut initializing = false;
    for (idx, c) in arr(pod, &["status", "initContainerStatuses"])
        .iter()
        .enumerate()
    {
        restarts = restarts.saturating_add(i(c, &["restartCount"]));
        let term = get(c, &["state", "terminated"]);
        if let Some(t) = term {
            if i(t, &["exitCode"]) == 0 {
                continue;
            }
            let r = s(t, &["reason"]);
            reason = if !r.is_empty() {
                format!("Init:{r}")
            } else if i(t, &["signal"]) != 0 {
                format!("Init:Signal:{}", i(t, &["signal"]))
            } else {
                format!("Init:ExitCode:{}", i(t, &["exitCode"]))
            };
        } else {
            let waiting = s(c, &["state", "waiting", "reason"]);
            reason = if !waiting.is_empty() && waiting != "PodInitializing" {
                format!("Init:{waiting}")
            } else {
                format!("Init:{idx}/{init_total}")
            };
        }
        initializing = true;
        break;
    }
    if !initializing {
        restarts = 0;
        let mut running = false;
        for c in arr(pod, &["status", "containerStatuses"]).iter().rev() {
            restarts = restarts.saturating_add(i(c, &["restartCount"]));
            let waiting = s(c, &["state", "waiting", "reason"]);
            let term = get(c, &["state", "terminated"]);
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if let Some(t) = term {
                let r = s(t, &["reason"]);
                reason = if !r.is_empty() {
                    r.to_string()
                } else if i(t, &["signal"]) != 0 {
                    format!("Signal:{}", i(t, &["signal"]))
                } else {
                    format!("ExitCode:{}", i(t, &["exitCode"]))
                };
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && get(c, &["state", "running"]).is_some()
            {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            let pod_ready = arr(pod, &["status", "conditions"])
                .iter()
                .any(|c| s(c, &["type"]) == "Ready" && s(c, &["status"]) == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }
    if get(pod, &["metadata", "deletionTimestamp"]).is_some_and(|d| !d.is_null()) {
        reason = if status_reason == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    (reason, restarts, ready)
}

fn node_status(node: &Value) -> String {
    let ready = arr(node, &["status", "conditions"])
        .iter()
        .find(|c| s(c, &["type"]) == "Ready")
        .map(|c| s(c, &["status"]));
    let mut parts = vec![match ready {
        Some("True") => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if get(node, &["spec", "unschedulable"]).and_then(Value::as_bool) == Some(true) {
        parts.push("SchedulingDisabled");
    }
    parts.join(",")
}

fn node_roles(node: &Value) -> String {
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = get(node, &["metadata", "labels"]).and_then(Value::as_object) {
        for (k, v) in labels {
            if let Some(r) = k.strip_prefix("node-role.kubernetes.io/") {
                if !r.is_empty() {
                    roles.push(r.to_string());
                }
            } else if k == "kubernetes.io/role" {
                if let Some(v) = v.as_str().filter(|v| !v.is_empty()) {
                    roles.push(v.to_string());
                }
            }
        }
    }
    roles.sort();
    roles.dedup();
    or_none(&roles.join(","))
}

fn node_address(node: &Value, kind: &str) -> String {
    or_none(
        arr(node, &["status", "addresses"])
            .iter()
            .find(|a| s(a, &["type"]) == kind)
            .map(|a| s(a, &["address"]))
            .unwrap_or(""),
    )
}

fn template_containers(obj: &Value, field: &str) -> String {
    let names: Vec<&str> = arr(obj, &["spec", "template", "spec", "containers"])
        .iter()
        .map(|c| s(c, &[field]))
        .collect();
    or_none(&names.join(","))
}

fn selector(obj: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(m) = get(obj, &["spec", "selector", "matchLabels"]).and_then(Value::as_object) {
        for (k, v) in m {
            parts.push(format!("{k}={}", v.as_str().unwrap_or("")));
        }
    }
    for e in arr(obj, &["spec", "selector", "matchExpressions"]) {
        let key = s(e, &["key"]);
        let values: Vec<&str> = arr(e, &["values"])
            .iter()
            .filter_map(Value::as_str)
            .collect();
        parts.push(match s(e, &["operator"]) {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({})", values.join(",")),
        });
    }
    or_none(&parts.join(","))
}

/// The object's controller as kubectl names it, `kind.group/name` in lower case (`kind/name`
/// for the core group), or `<none>`.
fn controller_of(obj: &Value) -> String {
    let owner = arr(obj, &["metadata", "ownerReferences"])
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true));
    let Some(owner) = owner else {
        return "<none>".into();
    };
    let api_version = s(owner, &["apiVersion"]);
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = s(owner, &["kind"]);
    let name = s(owner, &["name"]);
    match (group, kind) {
        ("", "") => name.to_string(),
        ("", k) => format!("{}/{name}", k.to_lowercase()),
        (g, k) => format!("{}.{}/{name}", k.to_lowercase(), g.to_lowercase()),
    }
}

/// The cells of `obj`'s row, with `Value::Null` at the AGE position, and that position
/// (past the last cell for a kind without an AGE column).
/// The printer columns of a custom resource that has some (without them it has the default
/// NAME and AGE).
fn custom_columns(
    info: &ResourceInfo,
) -> Option<&'static [crate::registry::apiextensions::PrinterColumn]> {
    info.custom
        .map(|c| c.printer_columns.as_slice())
        .filter(|c| !c.is_empty())
}

/// The first value a printer column's path selects in `obj`.
fn column_value(column: &crate::registry::apiextensions::PrinterColumn, obj: &Value) -> Value {
    super::json_path::JsonPath::parse(&column.json_path)
        .and_then(|p| p.select(obj).first().map(|v| (*v).clone()))
        .unwrap_or(Value::Null)
}

/// A custom object's cells: its name, then each printer column's value. The first `date`
/// column is the live AGE cell; other dates are rendered as ages when the row is built.
fn custom_cells(
    printer: &[crate::registry::apiextensions::PrinterColumn],
    obj: &Value,
) -> (Vec<Value>, usize) {
    let mut cells = vec![json!(s(obj, &["metadata", "name"]))];
    let mut age = None;
    for c in printer {
        let v = column_value(c, obj);
        if c.type_ == "date" {
            if age.is_none() {
                age = Some(cells.len());
                cells.push(Value::Null);
                continue;
            }
            let when = v.as_str().and_then(api::time::parse_rfc3339);
            cells.push(match when {
                Some(t) => json!(human_duration(api::time::unix_now() - t)),
                None => Value::Null,
            });
            continue;
        }
        cells.push(v);
    }
    let age = age.unwrap_or(cells.len());
    (cells, age)
}

fn cells(info: &ResourceInfo, obj: &Value) -> (Vec<Value>, usize) {
    if let Some(printer) = custom_columns(info) {
        return custom_cells(printer, obj);
    }
    let name = json!(s(obj, &["metadata", "name"]));
    match (info.group, info.resource) {
        ("", "pods") => {
            let (status, restarts, ready) = pod_status(obj);
            let total = arr(obj, &["spec", "containers"]).len();
            let gates = arr(obj, &["spec", "readinessGates"]);
            let gates = if gates.is_empty() {
                "<none>".to_string()
            } else {
                let conds = arr(obj, &["status", "conditions"]);
                let ok = gates
                    .iter()
                    .filter(|g| {
                        let t = s(g, &["conditionType"]);
                        conds
                            .iter()
                            .any(|c| s(c, &["type"]) == t && s(c, &["status"]) == "True")
                    })
                    .count();
                format!("{ok}/{}", gates.len())
            };
            (
                vec![
                    name,
                    json!(format!("{ready}/{total}")),
                    json!(status),
                    json!(restarts.to_string()),
                    Value::Null,
                    json!(or_none(s(obj, &["status", "podIP"]))),
                    json!(or_none(s(obj, &["spec", "nodeName"]))),
                    json!(or_none(s(obj, &["status", "nominatedNodeName"]))),
                    json!(gates),
                ],
                4,
            )
        }
        ("", "nodes") => {
            let runtime = s(obj, &["status", "nodeInfo", "containerRuntimeVersion"]);
            (
                vec![
                    name,
                    json!(node_status(obj)),
                    json!(node_roles(obj)),
                    Value::Null,
                    json!(s(obj, &["status", "nodeInfo", "kubeletVersion"])),
                    json!(node_address(obj, "InternalIP")),
                    json!(node_address(obj, "ExternalIP")),
                    json!(or_none(s(obj, &["status", "nodeInfo", "osImage"]))),
                    json!(or_none(s(obj, &["status", "nodeInfo", "kernelVersion"]))),
                    json!(or_none(runtime)),
                ],
                3,
            )
        }
        ("", "namespaces") => {
            let phase = s(obj, &["status", "phase"]);
            let phase = if phase.is_empty() { "Active" } else { phase };
            (vec![name, json!(phase), Value::Null], 2)
        }
        ("apps", "deployments") => {
            let desired = get(obj, &["spec", "replicas"])
                .and_then(Value::as_i64)
                .unwrap_or(1);
            (
                vec![
                    name,
                    json!(format!(
                        "{}/{desired}",
                        i(obj, &["status", "readyReplicas"])
                    )),
                    json!(i(obj, &["status", "updatedReplicas"])),
                    json!(i(obj, &["status", "availableReplicas"])),
                    Value::Null,
                    json!(template_containers(obj, "name")),
                    json!(template_containers(obj, "image")),
                    json!(selector(obj)),
                ],
                4,
            )
        }
        ("apps", "replicasets") | ("", "replicationcontrollers") => {
            let desired = get(obj, &["spec", "replicas"])
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let selector = if info.resource == "replicationcontrollers" {
                service_selector(obj)
            } else {
                selector(obj)
            };
            (
                vec![
                    name,
                    json!(desired),
                    json!(i(obj, &["status", "replicas"])),
                    json!(i(obj, &["status", "readyReplicas"])),
                    Value::Null,
                    json!(template_containers(obj, "name")),
                    json!(template_containers(obj, "image")),
                    json!(selector),
                ],
                4,
            )
        }
        ("storage.k8s.io", "csinodes") => (
            vec![
                name,
                json!(arr(obj, &["spec", "drivers"]).len()),
                Value::Null,
            ],
            2,
        ),
        ("storage.k8s.io", "csidrivers") => {
            let flag = |field: &str, unset: bool| {
                get(obj, &["spec", field])
                    .and_then(Value::as_bool)
                    .unwrap_or(unset)
            };
            let tokens = match get(obj, &["spec", "tokenRequests"]).and_then(Value::as_array) {
                Some(reqs) => reqs
                    .iter()
                    .map(|r| s(r, &["audience"]))
                    .collect::<Vec<_>>()
                    .join(","),
                None => "<unset>".into(),
            };
            let modes: Vec<&str> = arr(obj, &["spec", "volumeLifecycleModes"])
                .iter()
                .filter_map(Value::as_str)
                .collect();
            (
                vec![
                    name,
                    json!(flag("attachRequired", true)),
                    json!(flag("podInfoOnMount", false)),
                    json!(flag("storageCapacity", false)),
                    json!(tokens),
                    json!(flag("requiresRepublish", false)),
                    json!(or_none(&modes.join(","))),
                    Value::Null,
                ],
                7,
            )
        }
        ("storage.k8s.io", "csistoragecapacities") => {
            let capacity = match get(obj, &["capacity"]) {
                Some(Value::String(q)) => q.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => "<unset>".into(),
            };
            (
                vec![name, json!(s(obj, &["storageClassName"])), json!(capacity)],
                3,
            )
        }
        ("", "configmaps") => {
            let keys = |f: &str| {
                get(obj, &[f])
                    .and_then(Value::as_object)
                    .map_or(0, |m| m.len())
            };
            (
                vec![name, json!(keys("data") + keys("binaryData")), Value::Null],
                2,
            )
        }
        ("", "secrets") => {
            let keys = get(obj, &["data"])
                .and_then(Value::as_object)
                .map_or(0, |m| m.len());
            (
                vec![name, json!(s(obj, &["type"])), json!(keys), Value::Null],
                3,
            )
        }
        ("", "services") => {
            let ty = s(obj, &["spec", "type"]);
            let ty = if ty.is_empty() { "ClusterIP" } else { ty };
            (
                vec![
                    name,
                    json!(ty),
                    json!(or_none(s(obj, &["spec", "clusterIP"]))),
                    json!(service_external_ip(obj, ty)),
                    json!(service_ports(obj)),
                    Value::Null,
                    json!(service_selector(obj)),
                ],
                5,
            )
        }
        (group @ ("" | "events.k8s.io"), "events") => {
            // One printer for both Event APIs, as in Kubernetes; the fields differ in name.
            let (subject, message) = if group.is_empty() {
                ("involvedObject", "message")
            } else {
                ("regarding", "note")
            };
            let involved = |f: &str| s(obj, &[subject, f]);
            let object = format!("{}/{}", involved("kind").to_lowercase(), involved("name"));
            (
                vec![
                    Value::Null,
                    json!(s(obj, &["type"])),
                    json!(s(obj, &["reason"])),
                    json!(object),
                    json!(s(obj, &[message]).trim()),
                ],
                0,
            )
        }
        ("coordination.k8s.io", "leases") => (
            vec![
                name,
                json!(s(obj, &["spec", "holderIdentity"])),
                Value::Null,
            ],
            2,
        ),
        ("", "serviceaccounts") => (
            vec![name, json!(arr(obj, &["secrets"]).len()), Value::Null],
            2,
        ),
        ("", "persistentvolumeclaims") => (
            vec![
                name,
                json!(s(obj, &["status", "phase"])),
                json!(s(obj, &["spec", "volumeName"])),
                json!(s(obj, &["status", "capacity", "storage"])),
                json!(access_modes(obj, &["status", "accessModes"])),
                json!(s(obj, &["spec", "storageClassName"])),
                json!(volume_attributes_class(obj)),
                Value::Null,
                json!(s(obj, &["spec", "volumeMode"])),
            ],
            7,
        ),
        ("apps", "statefulsets") => {
            let desired = get(obj, &["spec", "replicas"])
                .and_then(Value::as_i64)
                .unwrap_or(1);
            (
                vec![
                    name,
                    json!(format!(
                        "{}/{desired}",
                        i(obj, &["status", "readyReplicas"])
                    )),
                    Value::Null,
                    json!(template_containers(obj, "name")),
                    json!(template_containers(obj, "image")),
                ],
                2,
            )
        }
        ("apps", "daemonsets") => {
            let node_selector = get(obj, &["spec", "template", "spec", "nodeSelector"])
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            (
                vec![
                    name,
                    json!(i(obj, &["status", "desiredNumberScheduled"])),
                    json!(i(obj, &["status", "currentNumberScheduled"])),
                    json!(i(obj, &["status", "numberReady"])),
                    json!(i(obj, &["status", "updatedNumberScheduled"])),
                    json!(i(obj, &["status", "numberAvailable"])),
                    json!(or_none(&node_selector)),
                    Value::Null,
                    json!(template_containers(obj, "name")),
                    json!(template_containers(obj, "image")),
                    json!(selector(obj)),
                ],
                7,
            )
        }
        ("apps", "controllerrevisions") => (
            vec![
                name,
                json!(controller_of(obj)),
                json!(get(obj, &["revision"]).and_then(Value::as_i64).unwrap_or(0)),
                Value::Null,
            ],
            3,
        ),
        ("batch", "jobs") => {
            let has = |t: &str| {
                arr(obj, &["status", "conditions"])
                    .iter()
                    .any(|c| s(c, &["type"]) == t && s(c, &["status"]) == "True")
            };
            let status = if has("Complete") {
                "Complete"
            } else if has("Failed") {
                "Failed"
            } else if get(obj, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_null()) {
                "Terminating"
            } else if has("Suspended") {
                "Suspended"
            } else if has("FailureTarget") {
                "FailureTarget"
            } else if has("SuccessCriteriaMet") {
                "SuccessCriteriaMet"
            } else {
                "Running"
            };
            let succeeded = i(obj, &["status", "succeeded"]);
            let completions = match (
                get(obj, &["spec", "completions"]).and_then(Value::as_i64),
                get(obj, &["spec", "parallelism"]).and_then(Value::as_i64),
            ) {
                (Some(c), _) => format!("{succeeded}/{c}"),
                (None, Some(p)) if p > 1 => format!("{succeeded}/1 of {p}"),
                _ => format!("{succeeded}/1"),
            };
            // Only a finished duration: rows are computed once per object version.
            let duration = match (
                api::time::parse_rfc3339(s(obj, &["status", "startTime"])),
                api::time::parse_rfc3339(s(obj, &["status", "completionTime"])),
            ) {
                (Some(start), Some(end)) => human_duration(end - start),
                _ => String::new(),
            };
            (
                vec![
                    name,
                    json!(status),
                    json!(completions),
                    json!(duration),
                    Value::Null,
                    json!(template_containers(obj, "name")),
                    json!(template_containers(obj, "image")),
                    json!(selector(obj)),
                ],
                4,
            )
        }
        ("batch", "cronjobs") => {
            let job = get(obj, &["spec", "jobTemplate"]).unwrap_or(&Value::Null);
            // The time itself, not kubectl's "5m ago": rows are computed once per object
            // version and served for as long as it lasts.
            let last = or_none(s(obj, &["status", "lastScheduleTime"]));
            (
                vec![
                    name,
                    json!(s(obj, &["spec", "schedule"])),
                    json!(or_none(s(obj, &["spec", "timeZone"]))),
                    json!(get(obj, &["spec", "suspend"])
                        .and_then(Value::as_bool)
                        .unwrap_or(false)),
                    json!(arr(obj, &["status", "active"]).len()),
                    json!(last),
                    Value::Null,
                    json!(template_containers(job, "name")),
                    json!(template_containers(job, "image")),
                    json!(or_none(&selector(job))),
                ],
                6,
            )
        }
        ("networking.k8s.io", "ingresses") => {
            let hosts: Vec<&str> = arr(obj, &["spec", "rules"])
                .iter()
                .map(|r| s(r, &["host"]))
                .map(|h| if h.is_empty() { "*" } else { h })
                .collect();
            let address: Vec<&str> = arr(obj, &["status", "loadBalancer", "ingress"])
                .iter()
                .map(|a| match s(a, &["ip"]) {
                    "" => s(a, &["hostname"]),
                    ip => ip,
                })
                .collect();
            let ports = if arr(obj, &["spec", "tls"]).is_empty() {
                "80"
            } else {
                "80, 443"
            };
            (
                vec![
                    name,
                    json!(or_none(s(obj, &["spec", "ingressClassName"]))),
                    json!(or_none(&hosts.join(","))),
                    json!(address.join(",")),
                    json!(ports),
                    Value::Null,
                ],
                5,
            )
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            let subjects = |kind: &str| {
                arr(obj, &["subjects"])
                    .iter()
                    .filter(|x| s(x, &["kind"]) == kind)
                    .map(|x| match (kind, s(x, &["namespace"])) {
                        ("ServiceAccount", ns) => format!("{ns}/{}", s(x, &["name"])),
                        _ => s(x, &["name"]).to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            (
                vec![
                    name,
                    json!(format!(
                        "{}/{}",
                        s(obj, &["roleRef", "kind"]),
                        s(obj, &["roleRef", "name"])
                    )),
                    Value::Null,
                    json!(subjects("User")),
                    json!(subjects("Group")),
                    json!(subjects("ServiceAccount")),
                ],
                2,
            )
        }
        ("", "persistentvolumes") => {
            let claim = match get(obj, &["spec", "claimRef"]) {
                Some(c) => format!("{}/{}", s(c, &["namespace"]), s(c, &["name"])),
                None => String::new(),
            };
            (
                vec![
                    name,
                    json!(s(obj, &["spec", "capacity", "storage"])),
                    json!(access_modes(obj, &["spec", "accessModes"])),
                    json!(s(obj, &["spec", "persistentVolumeReclaimPolicy"])),
                    json!(s(obj, &["status", "phase"])),
                    json!(claim),
                    json!(s(obj, &["spec", "storageClassName"])),
                    json!(volume_attributes_class(obj)),
                    json!(s(obj, &["status", "reason"])),
                    Value::Null,
                    json!(s(obj, &["spec", "volumeMode"])),
                ],
                9,
            )
        }
        ("", "endpoints") => {
            let mut eps = Vec::new();
            for subset in arr(obj, &["subsets"]) {
                for a in arr(subset, &["addresses"]) {
                    let ports = arr(subset, &["ports"]);
                    if ports.is_empty() {
                        eps.push(s(a, &["ip"]).to_string());
                    }
                    for p in ports {
                        eps.push(format!("{}:{}", s(a, &["ip"]), i(p, &["port"])));
                    }
                }
            }
            // kubectl shows the first three and counts the rest.
            let shown = match eps.len() {
                0 => "<none>".to_string(),
                n if n > 3 => format!("{} + {} more...", eps[..3].join(","), n - 3),
                _ => eps.join(","),
            };
            (vec![name, json!(shown), Value::Null], 2)
        }
        ("storage.k8s.io", "storageclasses") => {
            let default = get(obj, &["metadata", "annotations"])
                .and_then(|a| {
                    a.get("storageclass.kubernetes.io/is-default-class")
                        .or_else(|| a.get("storageclass.beta.kubernetes.io/is-default-class"))
                })
                .and_then(Value::as_str)
                == Some("true");
            let shown = if default {
                json!(format!("{} (default)", s(obj, &["metadata", "name"])))
            } else {
                name
            };
            let reclaim = match s(obj, &["reclaimPolicy"]) {
                "" => "Delete",
                p => p,
            };
            let binding = match s(obj, &["volumeBindingMode"]) {
                "" => "Immediate",
                m => m,
            };
            let expansion = get(obj, &["allowVolumeExpansion"])
                .and_then(Value::as_bool)
                .unwrap_or(false);
            (
                vec![
                    shown,
                    json!(s(obj, &["provisioner"])),
                    json!(reclaim),
                    json!(binding),
                    json!(expansion.to_string()),
                    Value::Null,
                ],
                5,
            )
        }
        ("scheduling.k8s.io", "priorityclasses") => (
            vec![
                name,
                json!(i(obj, &["value"])),
                json!(get(obj, &["globalDefault"])
                    .and_then(Value::as_bool)
                    .unwrap_or(false)),
                Value::Null,
                json!(or_none(s(obj, &["preemptionPolicy"]))),
            ],
            3,
        ),
        ("networking.k8s.io", "ingressclasses") => {
            let params = match get(obj, &["spec", "parameters"]) {
                Some(p) => {
                    let group = match s(p, &["apiGroup"]) {
                        "" => String::new(),
                        g => format!(".{g}"),
                    };
                    format!("{}{group}/{}", s(p, &["kind"]), s(p, &["name"]))
                }
                None => "<none>".to_string(),
            };
            (
                vec![
                    name,
                    json!(s(obj, &["spec", "controller"])),
                    json!(params),
                    Value::Null,
                ],
                3,
            )
        }
        _ => (vec![name, Value::Null], 1),
    }
}

/// The access modes at `path`, in kubectl's short form, comma-separated.
fn access_modes(obj: &Value, path: &[&str]) -> String {
    arr(obj, path)
        .iter()
        .filter_map(Value::as_str)
        .map(access_mode_short)
        .collect::<Vec<_>>()
        .join(",")
}

/// A service's EXTERNAL-IP cell, as kubectl prints it.
fn service_external_ip(obj: &Value, ty: &str) -> String {
    let external: Vec<&str> = arr(obj, &["spec", "externalIPs"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    match ty {
        "ExternalName" => s(obj, &["spec", "externalName"]).to_string(),
        "LoadBalancer" => {
            let mut ips = external.clone();
            for ing in arr(obj, &["status", "loadBalancer", "ingress"]) {
                let ip = s(ing, &["ip"]);
                ips.push(if ip.is_empty() {
                    s(ing, &["hostname"])
                } else {
                    ip
                });
            }
            if ips.is_empty() {
                "<pending>".into()
            } else {
                ips.join(",")
            }
        }
        _ if !external.is_empty() => external.join(","),
        _ => "<none>".into(),
    }
}

/// A service's PORT(S) cell: `port[:nodePort]/protocol`, comma-separated.
fn service_ports(obj: &Value) -> String {
    let ports: Vec<String> = arr(obj, &["spec", "ports"])
        .iter()
        .map(|p| {
            let proto = s(p, &["protocol"]);
            let proto = if proto.is_empty() { "TCP" } else { proto };
            match i(p, &["nodePort"]) {
                0 => format!("{}/{proto}", i(p, &["port"])),
                node => format!("{}:{node}/{proto}", i(p, &["port"])),
            }
        })
        .collect();
    if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    }
}

/// A service's SELECTOR cell: `k=v` pairs in key order.
fn service_selector(obj: &Value) -> String {
    match get(obj, &["spec", "selector"]).and_then(Value::as_object) {
        Some(m) if !m.is_empty() => {
            let mut pairs: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect();
            pairs.sort();
            pairs.join(",")
        }
        _ => "<none>".into(),
    }
}

/// The time the AGE cell counts from: creation, or for an event when it was last seen.
fn age_from(info: &ResourceInfo, obj: &Value) -> Option<i64> {
    if let Some(printer) = custom_columns(info) {
        let first_date = printer.iter().find(|c| c.type_ == "date")?;
        return column_value(first_date, obj)
            .as_str()
            .and_then(api::time::parse_rfc3339);
    }
    let paths: &[&[&str]] = match (info.group, info.resource) {
        ("", "events") => &[
            &["lastTimestamp"],
            &["series", "lastObservedTime"],
            &["eventTime"],
            &["metadata", "creationTimestamp"],
        ],
        ("events.k8s.io", "events") => &[
            &["deprecatedLastTimestamp"],
            &["series", "lastObservedTime"],
            &["eventTime"],
            &["metadata", "creationTimestamp"],
        ],
        _ => &[&["metadata", "creationTimestamp"]],
    };
    paths
        .iter()
        .find_map(|p| api::time::parse_rfc3339(s(obj, p)))
}

/// Computes the row parts of an object given as JSON.
pub fn row_parts_of(info: &ResourceInfo, obj: &Value) -> RowParts {
    let (cells, age) = cells(info, obj);
    let mut prefix = String::from("{\"cells\":[");
    if age >= cells.len() {
        let all: Vec<String> = cells.iter().map(Value::to_string).collect();
        prefix.push_str(&all.join(","));
        return RowParts {
            prefix: prefix.into(),
            suffix: Bytes::from_static(b"]"),
            created: age_from(info, obj),
            aged: false,
        };
    }
    for c in &cells[..age] {
        prefix.push_str(&c.to_string());
        prefix.push(',');
    }
    let mut suffix = String::new();
    for c in cells.get(age + 1..).unwrap_or(&[]) {
        suffix.push(',');
        suffix.push_str(&c.to_string());
    }
    suffix.push(']');
    RowParts {
        prefix: prefix.into(),
        suffix: suffix.into(),
        created: age_from(info, obj),
        aged: true,
    }
}

fn parsed(obj: &CachedObject) -> Value {
    serde_json::from_slice(&obj.json).unwrap_or(Value::Null)
}

/// The cached row parts of `obj` (computed on first use).
pub fn row_parts<'a>(info: &ResourceInfo, obj: &'a CachedObject) -> &'a RowParts {
    obj.derived
        .table_row
        .get_or_init(|| std::sync::Arc::new(row_parts_of(info, &parsed(obj))))
        .downcast_ref::<RowParts>()
        // Only this module fills the slot, always with a `RowParts`.
        .unwrap_or(&NO_ROW)
}

/// A row without cells, never used in practice (see [`row_parts`]).
static NO_ROW: RowParts = RowParts {
    prefix: Bytes::from_static(b"{\"cells\":["),
    suffix: Bytes::from_static(b"]"),
    created: None,
    aged: false,
};

/// The cached `metadata` JSON of `obj` (computed on first use).
pub fn metadata_json(obj: &CachedObject) -> &Bytes {
    obj.derived.metadata.get_or_init(|| {
        let v = parsed(obj);
        let meta = v.get("metadata").cloned().unwrap_or_else(|| json!({}));
        Bytes::from(meta.to_string())
    })
}

/// Appends `obj` as a PartialObjectMetadata of `meta.k8s.io/{meta_version}`.
pub fn write_partial(obj: &CachedObject, meta_version: &str, out: &mut BytesMut) {
    let meta = metadata_json(obj);
    out.reserve(meta.len() + 80);
    out.put_slice(b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/");
    out.put_slice(meta_version.as_bytes());
    out.put_slice(b"\",\"metadata\":");
    out.put_slice(meta);
    out.put_u8(b'}');
}

/// Appends `obj`'s Table row (`{"cells":[…],"object":…}`) with its age as of `now` (Unix
/// seconds).
pub fn write_row(
    info: &ResourceInfo,
    obj: &CachedObject,
    include: IncludeObject,
    meta_version: &str,
    now: i64,
    out: &mut BytesMut,
) {
    let parts = row_parts(info, obj);
    out.put_slice(&parts.prefix);
    if parts.aged {
        let age = match parts.created {
            Some(c) => human_duration(now - c),
            None => "<unknown>".into(),
        };
        out.put_u8(b'"');
        out.put_slice(age.as_bytes());
        out.put_u8(b'"');
    }
    out.put_slice(&parts.suffix);
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            out.put_slice(b",\"object\":");
            write_partial(obj, meta_version, out);
        }
        IncludeObject::Object => {
            out.put_slice(b",\"object\":");
            out.put_slice(&obj.json);
        }
    }
    out.put_u8(b'}');
}

/// Appends a Table holding one row for `obj`, as a watch event carries it. Column
/// definitions are included only when `with_columns` (the stream's first event).
pub fn write_event_table(
    info: &ResourceInfo,
    obj: &CachedObject,
    include: IncludeObject,
    meta_version: &str,
    with_columns: bool,
    now: i64,
    out: &mut BytesMut,
) {
    out.put_slice(b"{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/");
    out.put_slice(meta_version.as_bytes());
    out.put_slice(b"\",\"metadata\":{\"resourceVersion\":\"");
    out.put_slice(obj.resource_version.to_string().as_bytes());
    out.put_slice(b"\"},\"columnDefinitions\":");
    if with_columns {
        out.put_slice(column_definitions(info).as_bytes());
    } else {
        out.put_slice(b"null");
    }
    out.put_slice(b",\"rows\":[");
    write_row(info, obj, include, meta_version, now, out);
    out.put_slice(b"]}");
}

/// Renders watch events as one-row Tables (column definitions in the first only).
#[derive(Debug, Clone, Copy)]
pub struct TableEncoder {
    /// The watched resource.
    pub info: &'static ResourceInfo,
    /// What rows carry in `object`.
    pub include: IncludeObject,
    /// `v1` or `v1beta1` of `meta.k8s.io`.
    pub meta_version: &'static str,
}

impl ObjectEncoder for TableEncoder {
    fn object(&self, obj: &CachedObject, first: bool, out: &mut BytesMut) {
        write_event_table(
            self.info,
            obj,
            self.include,
            self.meta_version,
            first,
            api::time::unix_now(),
            out,
        );
    }

    fn bookmark(&self, resource_version: u64, _initial_events_end: bool, out: &mut BytesMut) {
        let t = format!(
            "{{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/{}\",\"metadata\":{{\"resourceVersion\":\"{resource_version}\"}},\"columnDefinitions\":null,\"rows\":[]}}",
            self.meta_version
        );
        out.put_slice(t.as_bytes());
    }
}

/// Renders watch events as PartialObjectMetadata.
#[derive(Debug, Clone, Copy)]
pub struct MetadataEncoder {
    /// `v1` or `v1beta1` of `meta.k8s.io`.
    pub meta_version: &'static str,
}

impl ObjectEncoder for MetadataEncoder {
    fn object(&self, obj: &CachedObject, _first: bool, out: &mut BytesMut) {
        write_partial(obj, self.meta_version, out);
    }

    fn bookmark(&self, resource_version: u64, initial_events_end: bool, out: &mut BytesMut) {
        let ann = if initial_events_end {
            ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}"
        } else {
            ""
        };
        let t = format!(
            "{{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/{}\",\"metadata\":{{\"resourceVersion\":\"{resource_version}\",\"creationTimestamp\":null{ann}}}}}",
            self.meta_version
        );
        out.put_slice(t.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::find;

    #[test]
    fn human_durations_match_kubectl() {
        for (secs, want) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (200, "3m20s"),
            (599, "9m59s"),
            (600, "10m"),
            (179 * 60 + 59, "179m"),
            (3 * 3600, "3h"),
            (4 * 3600 + 5 * 60, "4h5m"),
            (20 * 3600, "20h"),
            (47 * 3600, "47h"),
            (2 * 86_400, "2d"),
            (3 * 86_400 + 4 * 3600, "3d4h"),
            (30 * 86_400, "30d"),
            (729 * 86_400, "729d"),
            (2 * 365 * 86_400, "2y"),
            (2 * 365 * 86_400 + 100 * 86_400, "2y100d"),
            (9 * 365 * 86_400, "9y"),
        ] {
            assert_eq!(human_duration(secs), want, "{secs}");
        }
    }

    /// The row's JSON with `"AGE"` as its age cell, if it has one.
    fn row_text(p: &RowParts) -> String {
        format!(
            "{}{}{}}}",
            String::from_utf8_lossy(&p.prefix),
            if p.aged { "\"AGE\"" } else { "" },
            String::from_utf8_lossy(&p.suffix)
        )
    }

    fn row(resource: &str, group: &str, v: Value) -> Vec<Value> {
        let info = find(group, "v1", resource).unwrap();
        let p = row_parts_of(info, &v);
        let text = row_text(&p);
        let parsed: Value = serde_json::from_str(&text).unwrap();
        let cells = parsed["cells"].as_array().unwrap().clone();
        assert_eq!(cells.len(), columns(info).len(), "{resource}");
        cells
    }

    #[test]
    fn every_served_kind_has_one_cell_per_column() {
        let obj = json!({"metadata": {"name": "x", "creationTimestamp": "2024-01-01T00:00:00Z"}});
        for info in crate::registry::resources::RESOURCES {
            let p = row_parts_of(info, &obj);
            let parsed: Value = serde_json::from_str(&row_text(&p)).unwrap();
            let cells = parsed["cells"].as_array().unwrap();
            assert_eq!(cells.len(), columns(info).len(), "{}", info.resource);
            // Kubernetes prints no age for storage capacities alone.
            assert_eq!(
                p.aged,
                info.resource != "csistoragecapacities",
                "{}",
                info.resource
            );
        }
    }

    #[test]
    fn controller_revision_cells_name_the_controller_as_kubectl_does() {
        let rev = json!({"metadata": {"name": "agent-5d4f8b7c9", "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "1"},
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "2",
                    "controller": true}]},
            "data": {}, "revision": 3});
        assert_eq!(
            row("controllerrevisions", "apps", rev),
            vec![
                json!("agent-5d4f8b7c9"),
                json!("daemonset.apps/agent"),
                json!(3),
                json!("AGE")
            ]
        );
        let core = json!({"metadata": {"name": "r", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ReplicationController", "name": "old", "controller": true}]}});
        assert_eq!(
            row("controllerrevisions", "apps", core)[1..3],
            [json!("replicationcontroller/old"), json!(0)]
        );
        let orphan = json!({"metadata": {"name": "r"}, "revision": 1});
        assert_eq!(row("controllerrevisions", "apps", orphan)[1], "<none>");
    }

    #[test]
    fn job_cells_show_its_state_and_completions() {
        let job = json!({"metadata": {"name": "pi"},
            "spec": {"completions": 3, "parallelism": 2, "selector": {"matchLabels": {"u": "1"}},
                "template": {"spec": {"containers": [{"name": "c", "image": "perl"}]}}},
            "status": {"succeeded": 3, "startTime": "2024-01-01T00:00:00Z",
                "completionTime": "2024-01-01T00:01:05Z",
                "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                    {"type": "Complete", "status": "True"}]}});
        assert_eq!(
            row("jobs", "batch", job),
            vec![
                json!("pi"),
                json!("Complete"),
                json!("3/3"),
                json!("65s"),
                json!("AGE"),
                json!("c"),
                json!("perl"),
                json!("u=1")
            ]
        );
        let work_queue = json!({"metadata": {"name": "q"}, "spec": {"parallelism": 4},
            "status": {"succeeded": 1, "conditions": [{"type": "FailureTarget", "status": "True"}]}});
        assert_eq!(
            row("jobs", "batch", work_queue)[1..4],
            [json!("FailureTarget"), json!("1/1 of 4"), json!("")]
        );
        let suspended = json!({"metadata": {"name": "s"}, "spec": {"parallelism": 1},
            "status": {"conditions": [{"type": "Suspended", "status": "True"}]}});
        assert_eq!(
            row("jobs", "batch", suspended)[1..3],
            [json!("Suspended"), json!("0/1")]
        );
    }

    #[test]
    fn replication_controller_and_csi_cells() {
        let rc = json!({"metadata": {"name": "old"},
            "spec": {"replicas": 3, "selector": {"app": "web"},
                "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
            "status": {"replicas": 2, "readyReplicas": 1}});
        assert_eq!(
            row("replicationcontrollers", "", rc),
            vec![
                json!("old"),
                json!(3),
                json!(2),
                json!(1),
                json!("AGE"),
                json!("c"),
                json!("nginx"),
                json!("app=web")
            ]
        );
        let node = json!({"metadata": {"name": "n1"},
            "spec": {"drivers": [{"name": "a", "nodeID": "n1"}, {"name": "b", "nodeID": "n1"}]}});
        assert_eq!(
            row("csinodes", "storage.k8s.io", node),
            vec![json!("n1"), json!(2), json!("AGE")]
        );
        let driver = json!({"metadata": {"name": "d.example.com"},
            "spec": {"podInfoOnMount": true, "tokenRequests": [{"audience": "a"}, {"audience": "b"}],
                "volumeLifecycleModes": ["Persistent", "Ephemeral"]}});
        assert_eq!(
            row("csidrivers", "storage.k8s.io", driver),
            vec![
                json!("d.example.com"),
                json!(true),
                json!(true),
                json!(false),
                json!("a,b"),
                json!(false),
                json!("Persistent,Ephemeral"),
                json!("AGE")
            ]
        );
        let bare = json!({"metadata": {"name": "e.example.com"}, "spec": {}});
        assert_eq!(
            row("csidrivers", "storage.k8s.io", bare)[4..7],
            [json!("<unset>"), json!(false), json!("<none>")]
        );
        let capacity = json!({"metadata": {"name": "cap"}, "storageClassName": "fast",
            "capacity": "10Gi"});
        assert_eq!(
            row("csistoragecapacities", "storage.k8s.io", capacity),
            vec![json!("cap"), json!("fast"), json!("10Gi")]
        );
        let unknown = json!({"metadata": {"name": "cap"}, "storageClassName": "fast"});
        assert_eq!(
            row("csistoragecapacities", "storage.k8s.io", unknown)[2],
            "<unset>"
        );
    }

    #[test]
    fn pod_cells() {
        let pod = json!({"metadata": {"name": "web", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.5", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 1,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        let c = row("pods", "", pod);
        assert_eq!(
            c,
            vec![
                json!("web"),
                json!("1/2"),
                json!("CrashLoopBackOff"),
                json!("3"),
                json!("AGE"),
                json!("10.0.0.5"),
                json!("n1"),
                json!("<none>"),
                json!("<none>")
            ]
        );
        let pending = json!({"metadata": {"name": "p", "deletionTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}]}});
        let c = row("pods", "", pending);
        assert_eq!(c[1], "0/1");
        assert_eq!(c[2], "Terminating");
        assert_eq!(c[6], "<none>");
        let init = json!({"metadata": {"name": "i"},
            "spec": {"initContainers": [{"name": "x"}, {"name": "y"}], "containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": "x", "restartCount": 0, "state": {"terminated": {"exitCode": 0}}},
                {"name": "y", "restartCount": 0, "state": {"running": {}}}]}});
        assert_eq!(row("pods", "", init)[2], "Init:1/2");
    }

    #[test]
    fn node_deployment_namespace_cells() {
        let node = json!({"metadata": {"name": "n1", "labels": {
                "node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/worker": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.0"},
                       "addresses": [{"type": "InternalIP", "address": "192.168.1.2"}]}});
        let c = row("nodes", "", node);
        assert_eq!(c[1], "Ready,SchedulingDisabled");
        assert_eq!(c[2], "control-plane,worker");
        assert_eq!(c[4], "v1.32.0");
        assert_eq!(c[5], "192.168.1.2");
        assert_eq!(c[6], "<none>");
        let dep = json!({"metadata": {"name": "d"}, "spec": {"replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
        let c = row("deployments", "apps", dep);
        assert_eq!(
            &c[1..4],
            &[json!("2/3"), json!(3), json!(2)],
            "READY UP-TO-DATE AVAILABLE"
        );
        assert_eq!(&c[5..], &[json!("c"), json!("nginx"), json!("app=web")]);
        let rs = json!({"metadata": {"name": "r"}, "spec": {"replicas": 2},
            "status": {"replicas": 2, "readyReplicas": 1}});
        assert_eq!(
            &row("replicasets", "apps", rs)[1..4],
            &[json!(2), json!(2), json!(1)]
        );
        let ns = json!({"metadata": {"name": "x"}, "status": {"phase": "Terminating"}});
        assert_eq!(row("namespaces", "", ns)[1], "Terminating");
        let cm = json!({"metadata": {"name": "cm"}});
        assert_eq!(
            row("configmaps", "", cm),
            vec![json!("cm"), json!(0), json!("AGE")]
        );
    }

    #[test]
    fn configmap_secret_service_lease_and_event_cells() {
        assert_eq!(
            row(
                "configmaps",
                "",
                json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}, "binaryData": {"z": ""}})
            ),
            vec![json!("c"), json!(3), json!("AGE")]
        );
        assert_eq!(
            row(
                "secrets",
                "",
                json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"a": "eA=="}})
            ),
            vec![json!("s"), json!("Opaque"), json!(1), json!("AGE")]
        );
        let svc = json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "clusterIP": "10.0.0.7",
            "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
            "selector": {"tier": "a", "app": "web"}}});
        assert_eq!(
            row("services", "", svc),
            vec![
                json!("web"),
                json!("NodePort"),
                json!("10.0.0.7"),
                json!("<none>"),
                json!("80:30080/TCP,53/UDP"),
                json!("AGE"),
                json!("app=web,tier=a")
            ]
        );
        let lb = json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer"}});
        assert_eq!(row("services", "", lb)[3], json!("<pending>"));
        let ext = json!({"metadata": {"name": "e"}, "spec": {"type": "ExternalName", "externalName": "x.example.com"}});
        let cells = row("services", "", ext);
        assert_eq!(
            (&cells[2], &cells[3], &cells[4]),
            (&json!("<none>"), &json!("x.example.com"), &json!("<none>"))
        );
        assert_eq!(
            row(
                "leases",
                "coordination.k8s.io",
                json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}})
            ),
            vec![json!("l"), json!("me"), json!("AGE")]
        );
        let ev = json!({"metadata": {"name": "e.1", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "lastTimestamp": "2021-01-01T00:00:00Z", "type": "Warning", "reason": "BackOff",
            "involvedObject": {"kind": "Pod", "name": "web-1"}, "message": "restarting\n"});
        assert_eq!(
            row("events", "", ev.clone()),
            vec![
                json!("AGE"),
                json!("Warning"),
                json!("BackOff"),
                json!("pod/web-1"),
                json!("restarting")
            ]
        );
        let info = find("", "v1", "events").unwrap();
        assert_eq!(
            row_parts_of(info, &ev).created,
            api::time::parse_rfc3339("2021-01-01T00:00:00Z")
        );
        // The same event read through events.k8s.io prints the same row.
        let mut ev2 = ev.clone();
        crate::registry::event_conversion::core_to_events_v1(ev2.as_object_mut().unwrap());
        assert_eq!(
            row("events", "events.k8s.io", ev2.clone()),
            row("events", "", ev)
        );
        let info = find("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(
            row_parts_of(info, &ev2).created,
            api::time::parse_rfc3339("2021-01-01T00:00:00Z")
        );
    }

    #[test]
    fn event_table_has_one_row_and_columns_only_when_asked() {
        let info = find("", "v1", "configmaps").unwrap();
        let obj = CachedObject::from_object(
            info,
            "default/cm",
            api::Object::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": "default",
                             "creationTimestamp": "2024-01-01T00:00:00Z"}}))
            .unwrap(),
            7,
        );
        let created = api::time::parse_rfc3339("2024-01-01T00:00:00Z").unwrap();
        let mut out = BytesMut::new();
        write_event_table(
            info,
            &obj,
            IncludeObject::Metadata,
            "v1",
            true,
            created + 200,
            &mut out,
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["kind"], "Table");
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        assert_eq!(v["columnDefinitions"][0]["name"], "Name");
        assert_eq!(v["columnDefinitions"][0]["format"], "name");
        assert_eq!(v["rows"][0]["cells"], json!(["cm", 0, "3m20s"]));
        assert_eq!(v["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(v["rows"][0]["object"]["metadata"]["resourceVersion"], "7");
        let mut out = BytesMut::new();
        write_event_table(
            info,
            &obj,
            IncludeObject::None,
            "v1",
            false,
            created,
            &mut out,
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert!(v["columnDefinitions"].is_null());
        assert!(v["rows"][0].get("object").is_none());
        assert_eq!(v["rows"][0]["cells"][2], "0s");
    }
}
