//! Defaulting: the values a Kubernetes API server fills in for fields a client left out,
//! applied to every object written through the main resource (create, update, patch,
//! apply) before it is tracked and stored — so, as in Kubernetes, the writer of a create
//! owns the defaulted fields, and defaults never look like a spec change.
//!
//! Covered, with Kubernetes' values: pod specs (pods and the templates of every workload),
//! deployments, replica sets, replication controllers, stateful sets, daemon sets, jobs, cron
//! jobs, services, volumes and claims (their spec), storage and priority classes, network
//! policies, CSI drivers. A field already present, even with an unusual value, is never
//! touched (except the empty selectors and lists Kubernetes treats as unset); a value of the
//! wrong JSON type is left for validation to judge.

use serde_json::{json, Map, Value};

/// Fills in the defaults of `obj`, a `kind` object.
pub fn apply(kind: &str, obj: &mut Map<String, Value>) {
    match kind {
        // Kinds whose defaulted fields are at the top level.
        "StorageClass" => {
            put(obj, "reclaimPolicy", json!("Delete"));
            put(obj, "volumeBindingMode", json!("Immediate"));
            return;
        }
        "PriorityClass" => {
            put(obj, "preemptionPolicy", json!("PreemptLowerPriority"));
            return;
        }
        // Also defaults metadata from the template, so handled whole.
        "ReplicationController" => {
            replication_controller(obj);
            return;
        }
        _ => {}
    }
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    match kind {
        "Pod" => {
            pod_spec(spec);
            requests_from_limits(spec);
        }
        "LimitRange" => limit_range_spec(spec),
        "ValidatingAdmissionPolicy" => {
            put(spec, "failurePolicy", json!("Fail"));
            if let Some(m) = spec
                .get_mut("matchConstraints")
                .and_then(Value::as_object_mut)
            {
                match_resources(m);
            }
        }
        "ValidatingAdmissionPolicyBinding" => {
            if let Some(m) = spec
                .get_mut("matchResources")
                .and_then(Value::as_object_mut)
            {
                match_resources(m);
            }
        }
        "Deployment" => {
            put(spec, "replicas", json!(1));
            put(spec, "revisionHistoryLimit", json!(10));
            put(spec, "progressDeadlineSeconds", json!(600));
            rolling_update(spec, "strategy", json!("25%"), json!("25%"));
            template(spec);
        }
        "ReplicaSet" => {
            put(spec, "replicas", json!(1));
            template(spec);
        }
        "Service" => service_spec(spec),
        "StatefulSet" => stateful_set_spec(spec),
        "DaemonSet" => {
            put(spec, "revisionHistoryLimit", json!(10));
            rolling_update(spec, "updateStrategy", json!(1), json!(0));
            template(spec);
        }
        "Job" => job_spec(spec),
        "CronJob" => {
            put(spec, "concurrencyPolicy", json!("Allow"));
            put(spec, "suspend", json!(false));
            put(spec, "successfulJobsHistoryLimit", json!(3));
            put(spec, "failedJobsHistoryLimit", json!(1));
            // The job template gets pod defaults, not a Job's own (as in Kubernetes).
            if let Some(job) = spec
                .get_mut("jobTemplate")
                .and_then(|t| t.get_mut("spec"))
                .and_then(Value::as_object_mut)
            {
                template(job);
            }
        }
        "PersistentVolumeClaim" => put(spec, "volumeMode", json!("Filesystem")),
        "PersistentVolume" => {
            put(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
            put(spec, "volumeMode", json!("Filesystem"));
        }
        "NetworkPolicy" => network_policy_spec(spec),
        "CSIDriver" => csi_driver_spec(spec),
        _ => {}
    }
}

/// A replication controller: without a selector it selects its template's labels, and
/// without labels of its own it carries them too; one replica unless told.
fn replication_controller(obj: &mut Map<String, Value>) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    put(spec, "replicas", json!(1));
    template(spec);
    let Some(labels) = spec
        .get("template")
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"))
        .filter(|l| l.is_object())
        .cloned()
    else {
        return;
    };
    let unset = |v: Option<&Value>| v.is_none_or(|v| v.is_null() || v == &json!({}));
    if unset(spec.get("selector")) {
        spec.insert("selector".into(), labels.clone());
    }
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if unset(meta.get("labels")) {
            meta.insert("labels".into(), labels);
        }
    }
}

/// A CSI driver's spec: attached, no pod info on mount, no capacity tracking, persistent
/// volumes only, fsGroup applied for read-write-once volumes with a filesystem type.
fn csi_driver_spec(spec: &mut Map<String, Value>) {
    put(spec, "attachRequired", json!(true));
    put(spec, "podInfoOnMount", json!(false));
    put(spec, "storageCapacity", json!(false));
    put(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
    put(spec, "requiresRepublish", json!(false));
    put(spec, "seLinuxMount", json!(false));
    if spec
        .get("volumeLifecycleModes")
        .is_none_or(|m| m.is_null() || m.as_array().is_some_and(Vec::is_empty))
    {
        spec.insert("volumeLifecycleModes".into(), json!(["Persistent"]));
    }
}

/// A deployment's `strategy` or a daemon set's `updateStrategy`: `RollingUpdate` unless
/// another type is given, and then its two limits.
fn rolling_update(
    spec: &mut Map<String, Value>,
    field: &str,
    max_unavailable: Value,
    max_surge: Value,
) {
    let strategy = spec.entry(field).or_insert_with(|| json!({}));
    let Some(s) = strategy.as_object_mut() else {
        return;
    };
    put_text(s, "type", "RollingUpdate");
    if s.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
        let ru = s.entry("rollingUpdate").or_insert_with(|| json!({}));
        if let Some(ru) = ru.as_object_mut() {
            put(ru, "maxUnavailable", max_unavailable);
            put(ru, "maxSurge", max_surge);
        }
    }
}

/// apps/v1 StatefulSet (Kubernetes 1.32: `maxUnavailable` is behind an alpha gate, so it
/// is not defaulted).
fn stateful_set_spec(spec: &mut Map<String, Value>) {
    put(spec, "replicas", json!(1));
    put(spec, "revisionHistoryLimit", json!(10));
    put_text(spec, "podManagementPolicy", "OrderedReady");
    let strategy = spec.entry("updateStrategy").or_insert_with(|| json!({}));
    if let Some(s) = strategy.as_object_mut() {
        if s.get("type").is_none_or(|t| t.is_null() || t == "") {
            s.insert("type".into(), json!("RollingUpdate"));
            put(s, "rollingUpdate", json!({}));
        }
        if s.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
            if let Some(ru) = s.get_mut("rollingUpdate").and_then(Value::as_object_mut) {
                put(ru, "partition", json!(0));
            }
        }
    }
    let retention = spec
        .entry("persistentVolumeClaimRetentionPolicy")
        .or_insert_with(|| json!({}));
    if let Some(r) = retention.as_object_mut() {
        put(r, "whenDeleted", json!("Retain"));
        put(r, "whenScaled", json!("Retain"));
    }
    if let Some(claims) = spec
        .get_mut("volumeClaimTemplates")
        .and_then(Value::as_array_mut)
    {
        for claim in claims.iter_mut() {
            if let Some(cs) = claim.get_mut("spec").and_then(Value::as_object_mut) {
                put(cs, "volumeMode", json!("Filesystem"));
            }
        }
    }
    template(spec);
}

/// batch/v1 Job. (The selector and the pods' controller-uid labels are generated on create,
/// once the uid is known: [`super::job::generate_selector`].)
fn job_spec(spec: &mut Map<String, Value>) {
    let absent = |spec: &Map<String, Value>, k: &str| spec.get(k).is_none_or(Value::is_null);
    if absent(spec, "completions") && absent(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    put(spec, "parallelism", json!(1));
    let backoff = if absent(spec, "backoffLimitPerIndex") {
        json!(6)
    } else {
        json!(i32::MAX)
    };
    put(spec, "backoffLimit", backoff);
    put(spec, "completionMode", json!("NonIndexed"));
    put(spec, "suspend", json!(false));
    let replacement = if absent(spec, "podFailurePolicy") {
        "TerminatingOrFailed"
    } else {
        "Failed"
    };
    put(spec, "podReplacementPolicy", json!(replacement));
    template(spec);
}

/// networking.k8s.io/v1 NetworkPolicy: the policy types follow the rules given, and ports
/// are TCP unless said otherwise.
fn network_policy_spec(spec: &mut Map<String, Value>) {
    if spec.get("policyTypes").is_none_or(Value::is_null) {
        let mut types = vec![json!("Ingress")];
        if spec
            .get("egress")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty())
        {
            types.push(json!("Egress"));
        }
        spec.insert("policyTypes".into(), Value::Array(types));
    }
    for dir in ["ingress", "egress"] {
        for rule in spec
            .get_mut(dir)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            for port in rule
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object_mut)
            {
                put(port, "protocol", json!("TCP"));
            }
        }
    }
}

/// Whether [`apply`] may change objects of `kind`.
pub fn has_defaults(kind: &str) -> bool {
    matches!(
        kind,
        "Pod"
            | "Deployment"
            | "ReplicaSet"
            | "Service"
            | "StatefulSet"
            | "DaemonSet"
            | "Job"
            | "CronJob"
            | "PersistentVolumeClaim"
            | "PersistentVolume"
            | "StorageClass"
            | "PriorityClass"
            | "NetworkPolicy"
            | "ReplicationController"
            | "CSIDriver"
            | "LimitRange"
            | "ValidatingAdmissionPolicy"
            | "ValidatingAdmissionPolicyBinding"
    )
}

/// Sets `key` to `value` when it is absent (or `null`).
fn put(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), value);
    }
}

/// [`put`] for a string enum, which Kubernetes defaults when it is `""` too (Go's zero
/// value: `if strategy.Type == ""`).
fn put_text(m: &mut Map<String, Value>, key: &str, value: &str) {
    if m.get(key).is_none_or(|v| v.is_null() || v == "") {
        m.insert(key.to_string(), json!(value));
    }
}

fn template(spec: &mut Map<String, Value>) {
    if let Some(pod) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        pod_spec(pod);
    }
}

fn pod_spec(spec: &mut Map<String, Value>) {
    put(spec, "restartPolicy", json!("Always"));
    put(spec, "terminationGracePeriodSeconds", json!(30));
    put(spec, "dnsPolicy", json!("ClusterFirst"));
    put(spec, "securityContext", json!({}));
    put(spec, "schedulerName", json!("default-scheduler"));
    put(spec, "enableServiceLinks", json!(true));
    for list in ["initContainers", "containers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                container(c);
            }
        }
    }
}

/// A Pod's container that limits a resource without requesting it requests its limit (a
/// Pod's, not a template's: a template's containers are defaulted when its pods are).
fn requests_from_limits(spec: &mut Map<String, Value>) {
    for list in ["initContainers", "containers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs.iter_mut() {
            let Some(resources) = c.get_mut("resources").and_then(Value::as_object_mut) else {
                continue;
            };
            let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() else {
                continue;
            };
            let requests = resources.entry("requests").or_insert_with(|| json!({}));
            if let Some(requests) = requests.as_object_mut() {
                for (k, v) in limits {
                    requests.entry(k).or_insert(v);
                }
            }
        }
    }
}

/// A policy's or binding's `MatchResources`: equivalent versions match, absent selectors
/// select everything, rules apply at every scope.
fn match_resources(m: &mut Map<String, Value>) {
    put(m, "matchPolicy", json!("Equivalent"));
    put(m, "namespaceSelector", json!({}));
    put(m, "objectSelector", json!({}));
    for key in ["resourceRules", "excludeResourceRules"] {
        if let Some(rules) = m.get_mut(key).and_then(Value::as_array_mut) {
            for r in rules.iter_mut().filter_map(Value::as_object_mut) {
                put(r, "scope", json!("*"));
            }
        }
    }
}

/// A LimitRange's `Container` items: the default limit is the maximum when not given, the
/// default request the default limit, else the minimum.
fn limit_range_spec(spec: &mut Map<String, Value>) {
    let Some(items) = spec.get_mut("limits").and_then(Value::as_array_mut) else {
        return;
    };
    for item in items.iter_mut().filter_map(Value::as_object_mut) {
        if item.get("type").and_then(Value::as_str) != Some("Container") {
            continue;
        }
        let map = |item: &Map<String, Value>, key: &str| {
            item.get(key)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let (max, min) = (map(item, "max"), map(item, "min"));
        let mut default = map(item, "default");
        for (k, v) in max {
            default.entry(k).or_insert(v);
        }
        let mut default_request = map(item, "defaultRequest");
        for (k, v) in default.iter().chain(min.iter()) {
            default_request
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
        if !default.is_empty() {
            item.insert("default".into(), Value::Object(default));
        }
        if !default_request.is_empty() {
            item.insert("defaultRequest".into(), Value::Object(default_request));
        }
    }
}

fn container(c: &mut Map<String, Value>) {
    put(c, "terminationMessagePath", json!("/dev/termination-log"));
    put(c, "terminationMessagePolicy", json!("File"));
    put(c, "resources", json!({}));
    if let Some(image) = c.get("image").and_then(Value::as_str) {
        let policy = image_pull_policy(image);
        put(c, "imagePullPolicy", json!(policy));
    }
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            put(p, "protocol", json!("TCP"));
        }
    }
}

/// `Always` for an image without a tag or tagged `latest` (and without a digest), else
/// `IfNotPresent`.
fn image_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    // The tag follows the last ':' after the last '/' (a registry host may carry a port).
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// The QoS class of a pod spec (`status.qosClass`): `BestEffort` without any CPU or memory
/// request or limit, `Guaranteed` when every container limits both and requests (if given)
/// equal the limits, else `Burstable`.
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .filter_map(|l| spec.get(*l).and_then(Value::as_array))
        .flatten()
        .collect();
    let amount = |c: &Value, kind: &str, res: &str| {
        c.get("resources")
            .and_then(|r| r.get(kind))
            .and_then(|m| m.get(res))
            .cloned()
    };
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        for res in ["cpu", "memory"] {
            let (req, lim) = (amount(c, "requests", res), amount(c, "limits", res));
            any |= req.is_some() || lim.is_some();
            guaranteed &= lim.is_some() && (req.is_none() || req == lim);
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

fn service_spec(spec: &mut Map<String, Value>) {
    put(spec, "type", json!("ClusterIP"));
    put(spec, "sessionAffinity", json!("None"));
    let external_name = spec.get("type").and_then(Value::as_str) == Some("ExternalName");
    if !external_name {
        put(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            put(p, "protocol", json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                put(p, "targetPort", port);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaulted(kind: &str, v: Value) -> Value {
        let Value::Object(mut m) = v else {
            unreachable!("tests pass objects")
        };
        apply(kind, &mut m);
        Value::Object(m)
    }

    #[test]
    fn pods_get_kubernetes_defaults_and_keep_what_was_set() {
        let pod = defaulted(
            "Pod",
            json!({"spec": {"restartPolicy": "Never", "containers": [
                {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}]},
                {"name": "b", "image": "nginx:1.27", "imagePullPolicy": "Never"},
                {"name": "c", "image": "reg:5000/app"},
                {"name": "d", "image": "reg:5000/app:latest"},
                {"name": "e", "image": "app@sha256:00"}
            ]}}),
        );
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["enableServiceLinks"], true);
        assert_eq!(spec["securityContext"], json!({}));
        let policies: Vec<&str> = spec["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["imagePullPolicy"].as_str().unwrap())
            .collect();
        assert_eq!(
            policies,
            ["Always", "Never", "Always", "Always", "IfNotPresent"]
        );
        let a = &spec["containers"][0];
        assert_eq!(a["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(a["terminationMessagePolicy"], "File");
        assert_eq!(a["ports"][0]["protocol"], "TCP");
        assert_eq!(a["resources"], json!({}));
        // Applying twice changes nothing more.
        assert_eq!(defaulted("Pod", pod.clone()), pod);
    }

    #[test]
    fn a_pod_requests_what_it_limits_and_limit_ranges_default_from_max_and_min() {
        let pod = defaulted(
            "Pod",
            json!({"spec": {"containers": [{"name": "a", "image": "x",
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "100m"}}}]}}),
        );
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"],
            json!({"cpu": "100m", "memory": "1Gi"})
        );
        let template = defaulted(
            "ReplicaSet",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x",
                "resources": {"limits": {"cpu": "1"}}}]}}}}),
        );
        assert!(
            template["spec"]["template"]["spec"]["containers"][0]["resources"]
                .get("requests")
                .is_none()
        );
        let range = defaulted(
            "LimitRange",
            json!({"spec": {"limits": [
                {"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "1Mi"}, "default": {"memory": "1Gi"}},
                {"type": "Pod", "max": {"cpu": "4"}}
            ]}}),
        );
        assert_eq!(
            range["spec"]["limits"][0]["default"],
            json!({"cpu": "2", "memory": "1Gi"})
        );
        assert_eq!(
            range["spec"]["limits"][0]["defaultRequest"],
            json!({"cpu": "2", "memory": "1Gi"})
        );
        assert!(range["spec"]["limits"][1].get("default").is_none());
    }

    #[test]
    fn qos_classes() {
        let spec = |res: Value| json!({"containers": [{"name": "a", "resources": res}]});
        assert_eq!(
            qos_class(&json!({"containers": [{"name": "a"}]})),
            "BestEffort"
        );
        assert_eq!(
            qos_class(&spec(json!({"requests": {"cpu": "1"}}))),
            "Burstable"
        );
        let both = json!({"cpu": "1", "memory": "1Gi"});
        assert_eq!(qos_class(&spec(json!({"limits": both}))), "Guaranteed");
        assert_eq!(
            qos_class(&spec(json!({"limits": both, "requests": both}))),
            "Guaranteed"
        );
        let less = json!({"cpu": "500m", "memory": "1Gi"});
        assert_eq!(
            qos_class(&spec(json!({"limits": both, "requests": less}))),
            "Burstable"
        );
    }

    #[test]
    fn has_defaults_names_every_kind_apply_changes() {
        for info in crate::registry::resources::RESOURCES {
            let empty = json!({"spec": {}});
            if defaulted(info.kind, empty.clone()) != empty {
                assert!(has_defaults(info.kind), "{}", info.kind);
            }
        }
    }

    #[test]
    fn workloads_and_services() {
        let d = defaulted(
            "Deployment",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x:1"}]}}}}),
        );
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        let recreate = defaulted(
            "Deployment",
            json!({"spec": {"replicas": 0, "strategy": {"type": "Recreate"}}}),
        );
        assert_eq!(recreate["spec"]["replicas"], 0);
        assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));
        // An empty enum is Go's zero value: defaulted too.
        let blank = defaulted("Deployment", json!({"spec": {"strategy": {"type": ""}}}));
        assert_eq!(blank["spec"]["strategy"]["type"], "RollingUpdate");
        assert_eq!(
            blank["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
            "25%"
        );
        let sts = defaulted(
            "StatefulSet",
            json!({"spec": {"podManagementPolicy": "", "updateStrategy": {"type": ""}}}),
        );
        assert_eq!(sts["spec"]["podManagementPolicy"], "OrderedReady");
        assert_eq!(sts["spec"]["updateStrategy"]["type"], "RollingUpdate");
        let rs = defaulted("ReplicaSet", json!({"spec": {}}));
        assert_eq!(rs["spec"]["replicas"], 1);
        let svc = defaulted(
            "Service",
            json!({"spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}}),
        );
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        assert_eq!(svc["spec"]["sessionAffinity"], "None");
        assert_eq!(svc["spec"]["internalTrafficPolicy"], "Cluster");
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"port": 80, "protocol": "TCP", "targetPort": 80},
                   {"port": 53, "protocol": "UDP", "targetPort": "dns"}])
        );
        let sts = defaulted(
            "StatefulSet",
            json!({"spec": {"volumeClaimTemplates": [{"spec": {}}],
                   "template": {"spec": {"containers": [{"name": "a", "image": "db"}]}}}}),
        );
        assert_eq!(sts["spec"]["replicas"], 1);
        assert_eq!(sts["spec"]["podManagementPolicy"], "OrderedReady");
        assert_eq!(
            sts["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        assert_eq!(
            sts["spec"]["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
        );
        assert_eq!(
            sts["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"],
            "Filesystem"
        );
        assert_eq!(
            sts["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "Always"
        );
        let on_delete = defaulted(
            "StatefulSet",
            json!({"spec": {"updateStrategy": {"type": "OnDelete"}}}),
        );
        assert_eq!(
            on_delete["spec"]["updateStrategy"],
            json!({"type": "OnDelete"})
        );
        let ds = defaulted("DaemonSet", json!({"spec": {}}));
        assert_eq!(
            ds["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        let job = defaulted("Job", json!({"spec": {}}));
        assert_eq!(
            (
                &job["spec"]["completions"],
                &job["spec"]["parallelism"],
                &job["spec"]["backoffLimit"]
            ),
            (&json!(1), &json!(1), &json!(6))
        );
        assert_eq!(job["spec"]["podReplacementPolicy"], "TerminatingOrFailed");
        let parallel = defaulted("Job", json!({"spec": {"parallelism": 3}}));
        assert!(
            parallel["spec"].get("completions").is_none(),
            "a work queue job"
        );
        let cj = defaulted(
            "CronJob",
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}}),
        );
        assert_eq!(cj["spec"]["concurrencyPolicy"], "Allow");
        assert_eq!(cj["spec"]["successfulJobsHistoryLimit"], 3);
        assert_eq!(
            cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"],
            "Always"
        );
        assert!(cj["spec"]["jobTemplate"]["spec"]
            .get("backoffLimit")
            .is_none());
        let np = defaulted(
            "NetworkPolicy",
            json!({"spec": {"egress": [{"ports": [{"port": 53}]}]}}),
        );
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(np["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
        let sc = defaulted("StorageClass", json!({"provisioner": "x"}));
        assert_eq!(
            (&sc["reclaimPolicy"], &sc["volumeBindingMode"]),
            (&json!("Delete"), &json!("Immediate"))
        );
        let rc = defaulted(
            "ReplicationController",
            json!({"metadata": {"name": "rc"}, "spec": {"template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "a", "image": "x"}]}}}}),
        );
        assert_eq!(rc["spec"]["replicas"], 1);
        assert_eq!(rc["spec"]["selector"], json!({"app": "web"}));
        assert_eq!(rc["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(
            rc["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "Always"
        );
        let own = defaulted(
            "ReplicationController",
            json!({"metadata": {"labels": {"mine": "1"}}, "spec": {"replicas": 0,
                "selector": {"app": "web", "v": "2"},
                "template": {"metadata": {"labels": {"app": "web", "v": "2"}}}}}),
        );
        assert_eq!(own["spec"]["replicas"], 0);
        assert_eq!(own["spec"]["selector"], json!({"app": "web", "v": "2"}));
        assert_eq!(own["metadata"]["labels"], json!({"mine": "1"}));
        let driver = defaulted(
            "CSIDriver",
            json!({"spec": {"podInfoOnMount": true, "volumeLifecycleModes": []}}),
        );
        assert_eq!(
            driver["spec"],
            json!({"attachRequired": true, "podInfoOnMount": true, "storageCapacity": false,
                "fsGroupPolicy": "ReadWriteOnceWithFSType", "requiresRepublish": false,
                "seLinuxMount": false, "volumeLifecycleModes": ["Persistent"]})
        );
        let ext = defaulted("Service", json!({"spec": {"type": "ExternalName"}}));
        assert!(ext["spec"].get("internalTrafficPolicy").is_none());
        // Other kinds and odd shapes are left alone.
        let cm = json!({"data": {"a": "b"}});
        assert_eq!(defaulted("ConfigMap", cm.clone()), cm);
        let odd = json!({"spec": "not an object"});
        assert_eq!(defaulted("Pod", odd.clone()), odd);
    }
}
