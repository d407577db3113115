//! Defaulting: the values a Kubernetes API server fills in for fields a client left out,
//! applied to every object written through the main resource (create, update, patch,
//! apply) before it is tracked and stored — so, as in Kubernetes, the writer of a create
//! owns the defaulted fields, and defaults never look like a spec change.
//!
//! Covered: pod specs (pods and the templates of deployments and replica sets), deployments,
//! replica sets and services, with Kubernetes' values. A field already present, even with
//! an unusual value, is never touched; a value of the wrong JSON type is left for
//! validation to judge.

use serde_json::{json, Map, Value};

/// Fills in the defaults of `obj`, a `kind` object.
pub fn apply(kind: &str, obj: &mut Map<String, Value>) {
    match kind {
        "Pod" => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                pod_spec(spec);
            }
        }
        "Deployment" => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                put(spec, "replicas", json!(1));
                put(spec, "revisionHistoryLimit", json!(10));
                put(spec, "progressDeadlineSeconds", json!(600));
                let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
                if let Some(s) = strategy.as_object_mut() {
                    put(s, "type", json!("RollingUpdate"));
                    if s.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                        let ru = s.entry("rollingUpdate").or_insert_with(|| json!({}));
                        if let Some(ru) = ru.as_object_mut() {
                            put(ru, "maxUnavailable", json!("25%"));
                            put(ru, "maxSurge", json!("25%"));
                        }
                    }
                }
                template(spec);
            }
        }
        "ReplicaSet" => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                put(spec, "replicas", json!(1));
                template(spec);
            }
        }
        "Service" => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                service_spec(spec);
            }
        }
        _ => {}
    }
}

/// Whether [`apply`] may change objects of `kind`.
pub fn has_defaults(kind: &str) -> bool {
    matches!(kind, "Pod" | "Deployment" | "ReplicaSet" | "Service")
}

/// Sets `key` to `value` when it is absent (or `null`).
fn put(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), value);
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
        let ext = defaulted("Service", json!({"spec": {"type": "ExternalName"}}));
        assert!(ext["spec"].get("internalTrafficPolicy").is_none());
        // Other kinds and odd shapes are left alone.
        let cm = json!({"data": {"a": "b"}});
        assert_eq!(defaulted("ConfigMap", cm.clone()), cm);
        let odd = json!({"spec": "not an object"});
        assert_eq!(defaulted("Pod", odd.clone()), odd);
    }
}
