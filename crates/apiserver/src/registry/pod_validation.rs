//! The checks kube-apiserver makes of a pod's spec, on a Pod and on every pod template a
//! workload carries (Deployment, ReplicaSet, DaemonSet, StatefulSet, ReplicationController,
//! PodTemplate, Job, CronJob), so that a mistake is refused where it is made — a 422 naming
//! each broken field — instead of surfacing later as pods that fail to start or a controller
//! that retries forever.
//!
//! Checked, as `ValidatePodSpec` checks them: containers present; container names (DNS
//! labels, unique across containers and init containers) and images; `imagePullPolicy`,
//! `terminationMessagePolicy`, `restartPolicy` and `dnsPolicy` among their values; ports
//! (numbers in range, known protocols, unique IANA service names); environment variable
//! names; volume names (DNS labels, unique) and the volume each mount names; resource
//! quantities (not negative, a request not above its limit, an extended resource's request
//! equal to its limit); `nodeSelector` as labels; `activeDeadlineSeconds`, `hostname`,
//! `subdomain`, `serviceAccountName` and `nodeName`. A workload other than a Job takes only
//! `restartPolicy: Always`; a StatefulSet's claim templates count as volumes of its
//! template, whose hostname and subdomain the controller sets. A quantity that is not a quantity at all is a 400, as Kubernetes'
//! decoder refuses it before validation. Absent fields are taken as their defaults.
//!
//! Not checked (accepted as sent): probes, lifecycle hooks, security contexts, affinity,
//! topology spread constraints, volume sources' own fields, DNS config and host aliases.

use api::status::FieldError;
use api::{Object, Status};
use serde_json::{Map, Value};
use std::collections::HashSet;

/// Where a kind keeps its pod spec, and which restart policies its pods may have (`None`:
/// any of the three; a Job's rule is checked by `registry::job`).
fn pod_spec_path(
    group: &str,
    kind: &str,
) -> Option<(&'static [&'static str], Option<&'static [&'static str]>)> {
    const ALWAYS: &[&str] = &["Always"];
    Some(match (group, kind) {
        ("", "Pod") => (&["spec"], None),
        ("", "PodTemplate") => (&["template", "spec"], None),
        ("", "ReplicationController") => (&["spec", "template", "spec"], Some(ALWAYS)),
        ("apps", "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet") => {
            (&["spec", "template", "spec"], Some(ALWAYS))
        }
        ("batch", "Job") => (&["spec", "template", "spec"], None),
        ("batch", "CronJob") => (&["spec", "jobTemplate", "spec", "template", "spec"], None),
        _ => return None,
    })
}

/// Checks the pod spec of `obj` (a Pod, or the template of a workload of `group`/`kind`);
/// other kinds pass untouched. A ReplicationController without a template passes (its
/// template is optional).
///
/// # Errors
/// 400 BadRequest for a resource quantity that does not parse; otherwise 422 Invalid listing
/// every broken rule.
pub fn validate(group: &str, kind: &str, obj: &Object) -> Result<(), Status> {
    let Some((path, restart_policies)) = pod_spec_path(group, kind) else {
        return Ok(());
    };
    let at = spec_at(obj, path);
    if kind == "ReplicationController" && at.is_none() {
        return Ok(());
    }
    let empty = Map::new();
    let spec = at.and_then(Value::as_object).unwrap_or(&empty);
    let prefix = path.join(".");
    let mut errs = Vec::new();
    // A StatefulSet's pods get a volume per claim template and their hostname and
    // subdomain from the controller, so its template is checked as the pods will be.
    let stateful = kind == "StatefulSet";
    let claims: Vec<&str> = if stateful {
        obj.get("spec")
            .and_then(|s| s.get("volumeClaimTemplates"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| t.get("metadata")?.get("name")?.as_str())
            .collect()
    } else {
        Vec::new()
    };
    pod_spec(spec, &prefix, &claims, stateful, &mut errs);
    if let Some(allowed) = restart_policies {
        let policy = text(spec, "restartPolicy");
        if !policy.is_empty() && !allowed.contains(&policy) {
            errs.push(FieldError::not_supported(
                format!("{prefix}.restartPolicy"),
                policy,
                allowed,
            ));
        }
    }
    Status::invalid_if_any(kind, group, obj.name(), &errs)
}

/// The value at `path` in `obj`.
fn spec_at<'a>(obj: &'a Object, path: &[&str]) -> Option<&'a Value> {
    let mut at = obj.get(path[0]);
    for step in &path[1..] {
        at = at.and_then(|v| v.get(*step));
    }
    at
}

/// Checks that every container resource amount in the pod spec of `obj` (as
/// [`validate`] finds it) is a quantity at all; other kinds pass.
///
/// # Errors
/// 400 BadRequest naming the first amount that does not parse, as Kubernetes' decoder
/// refuses such a body before any validation.
pub fn validate_quantities(group: &str, kind: &str, obj: &Object) -> Result<(), Status> {
    let Some((path, _)) = pod_spec_path(group, kind) else {
        return Ok(());
    };
    match spec_at(obj, path).and_then(Value::as_object) {
        Some(spec) => check_quantities(spec, &path.join(".")),
        None => Ok(()),
    }
}

fn text<'a>(m: &'a Map<String, Value>, field: &str) -> &'a str {
    m.get(field).and_then(Value::as_str).unwrap_or("")
}

fn objects<'a>(m: &'a Map<String, Value>, field: &str) -> Vec<&'a Map<String, Value>> {
    m.get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .collect()
}

fn one_of(
    errs: &mut Vec<FieldError>,
    m: &Map<String, Value>,
    field: &str,
    path: &str,
    allowed: &[&str],
) {
    let v = text(m, field);
    if !v.is_empty() && !allowed.contains(&v) {
        errs.push(FieldError::not_supported(
            format!("{path}.{field}"),
            v,
            allowed,
        ));
    }
}

fn dns_label(errs: &mut Vec<FieldError>, path: String, value: &str) {
    if let Err(e) = api::object::validate_dns1123_label(value) {
        errs.push(FieldError::invalid(path, &Value::String(value.into()), &e));
    }
}

fn pod_spec(
    spec: &Map<String, Value>,
    p: &str,
    claim_volumes: &[&str],
    identity_from_controller: bool,
    errs: &mut Vec<FieldError>,
) {
    let mut volumes = HashSet::new();
    for (i, v) in objects(spec, "volumes").into_iter().enumerate() {
        let name = text(v, "name");
        let path = format!("{p}.volumes[{i}].name");
        if name.is_empty() {
            errs.push(FieldError::required(path, ""));
        } else if !volumes.insert(name) {
            errs.push(FieldError::duplicate(path, name));
        } else {
            dns_label(errs, path, name);
        }
    }
    volumes.extend(claim_volumes.iter().copied());
    if objects(spec, "containers").is_empty() {
        errs.push(FieldError::required(format!("{p}.containers"), ""));
    }
    let mut names = HashSet::new();
    for field in ["containers", "initContainers"] {
        for (i, c) in objects(spec, field).into_iter().enumerate() {
            container(c, &format!("{p}.{field}[{i}]"), &volumes, &mut names, errs);
        }
    }
    one_of(
        errs,
        spec,
        "restartPolicy",
        p,
        &["Always", "OnFailure", "Never"],
    );
    one_of(
        errs,
        spec,
        "dnsPolicy",
        p,
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
    );
    if let Some(selector) = spec.get("nodeSelector").and_then(Value::as_object) {
        label_map(errs, &format!("{p}.nodeSelector"), selector);
    }
    if let Some(d) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64) {
        if !(1..=i64::from(i32::MAX)).contains(&d) {
            errs.push(FieldError::invalid(
                format!("{p}.activeDeadlineSeconds"),
                &Value::from(d),
                &format!("must be between 1 and {}, inclusive", i32::MAX),
            ));
        }
    }
    for field in ["hostname", "subdomain"] {
        let v = text(spec, field);
        if !v.is_empty() && !identity_from_controller {
            dns_label(errs, format!("{p}.{field}"), v);
        }
    }
    for field in ["serviceAccountName", "nodeName"] {
        let v = text(spec, field);
        if !v.is_empty() {
            if let Err(e) = api::object::validate_dns1123_subdomain(v) {
                errs.push(FieldError::invalid(
                    format!("{p}.{field}"),
                    &Value::String(v.into()),
                    &e,
                ));
            }
        }
    }
}

fn container(
    c: &Map<String, Value>,
    p: &str,
    volumes: &HashSet<&str>,
    names: &mut HashSet<String>,
    errs: &mut Vec<FieldError>,
) {
    let name = text(c, "name");
    if name.is_empty() {
        errs.push(FieldError::required(format!("{p}.name"), ""));
    } else if !names.insert(name.to_string()) {
        errs.push(FieldError::duplicate(format!("{p}.name"), name));
    } else {
        dns_label(errs, format!("{p}.name"), name);
    }
    if text(c, "image").is_empty() {
        errs.push(FieldError::required(format!("{p}.image"), ""));
    }
    one_of(
        errs,
        c,
        "imagePullPolicy",
        p,
        &["Always", "IfNotPresent", "Never"],
    );
    one_of(
        errs,
        c,
        "terminationMessagePolicy",
        p,
        &["File", "FallbackToLogsOnError"],
    );
    let mut port_names = HashSet::new();
    for (i, port) in objects(c, "ports").into_iter().enumerate() {
        let pp = format!("{p}.ports[{i}]");
        let pname = text(port, "name");
        if !pname.is_empty() {
            if let Err(e) = port_name(pname) {
                errs.push(FieldError::invalid(
                    format!("{pp}.name"),
                    &Value::String(pname.into()),
                    e,
                ));
            } else if !port_names.insert(pname) {
                errs.push(FieldError::duplicate(format!("{pp}.name"), pname));
            }
        }
        match port
            .get("containerPort")
            .and_then(Value::as_i64)
            .unwrap_or(0)
        {
            0 => errs.push(FieldError::required(format!("{pp}.containerPort"), "")),
            n if !(1..=65535).contains(&n) => errs.push(FieldError::invalid(
                format!("{pp}.containerPort"),
                &Value::from(n),
                "must be between 1 and 65535, inclusive",
            )),
            _ => {}
        }
        let host = port.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
        if host != 0 && !(1..=65535).contains(&host) {
            errs.push(FieldError::invalid(
                format!("{pp}.hostPort"),
                &Value::from(host),
                "must be between 1 and 65535, inclusive",
            ));
        }
        one_of(errs, port, "protocol", &pp, &["SCTP", "TCP", "UDP"]);
    }
    for (i, env) in objects(c, "env").into_iter().enumerate() {
        let ename = text(env, "name");
        let path = format!("{p}.env[{i}].name");
        if ename.is_empty() {
            errs.push(FieldError::required(path, ""));
        } else if ename.contains('=') || !ename.bytes().all(|b| (b' '..=b'~').contains(&b)) {
            errs.push(FieldError::invalid(
                path,
                &Value::String(ename.into()),
                "a valid environment variable name must consist only of printable ASCII characters other than '='",
            ));
        }
    }
    for (i, m) in objects(c, "volumeMounts").into_iter().enumerate() {
        let mp = format!("{p}.volumeMounts[{i}]");
        let vname = text(m, "name");
        if vname.is_empty() {
            errs.push(FieldError::required(format!("{mp}.name"), ""));
        } else if !volumes.contains(vname) {
            errs.push(FieldError::not_found(format!("{mp}.name"), vname));
        }
        if text(m, "mountPath").is_empty() {
            errs.push(FieldError::required(format!("{mp}.mountPath"), ""));
        }
    }
    resources(c, p, errs);
}

/// Checks a map that must hold labels (keys and values as label keys and values), as
/// `nodeSelector` and a Service's `selector` must; one error per bad entry, at `path`.
pub(crate) fn label_map(errs: &mut Vec<FieldError>, path: &str, m: &Map<String, Value>) {
    for (k, v) in m {
        let v = v.as_str().unwrap_or("");
        if let Err(e) = api::labels::validate_label_key(k) {
            errs.push(FieldError::invalid(
                path,
                &Value::String(k.clone()),
                &e.to_string(),
            ));
        } else if let Err(e) = api::labels::validate_label_value(k, v) {
            errs.push(FieldError::invalid(
                path,
                &Value::String(v.into()),
                &e.to_string(),
            ));
        }
    }
}

/// Kubernetes' `IsValidPortName`: an IANA service name.
pub(crate) fn port_name(name: &str) -> Result<(), &'static str> {
    if name.len() > 15 {
        return Err("must be no more than 15 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if name.contains("--") {
        return Err("must not contain consecutive hyphens");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err("must contain at least one letter (a-z)");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err("must not begin or end with a hyphen");
    }
    Ok(())
}

/// A resource's amount for comparison: millis for every resource (exact enough to compare).
fn amount(q: &Value) -> Option<i64> {
    match q {
        Value::String(s) => api::quantity::milli_value(s),
        // The number's own text, read exactly as a quantity (as Kubernetes reads it).
        Value::Number(n) => api::quantity::milli_value(&n.to_string()),
        _ => None,
    }
}

/// Quantities that are not quantities: a 400, as Kubernetes' decoder answers.
fn check_quantities(spec: &Map<String, Value>, p: &str) -> Result<(), Status> {
    for field in ["containers", "initContainers"] {
        for (i, c) in objects(spec, field).into_iter().enumerate() {
            let Some(r) = c.get("resources").and_then(Value::as_object) else {
                continue;
            };
            for kind in ["limits", "requests"] {
                for (name, q) in r.get(kind).and_then(Value::as_object).into_iter().flatten() {
                    if amount(q).is_none() {
                        return Err(Status::bad_request(format!(
                            "{p}.{field}[{i}].resources.{kind}[{name}]: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}

fn resources(c: &Map<String, Value>, p: &str, errs: &mut Vec<FieldError>) {
    let Some(r) = c.get("resources").and_then(Value::as_object) else {
        return;
    };
    let empty = Map::new();
    let limits = r.get("limits").and_then(Value::as_object).unwrap_or(&empty);
    let requests = r
        .get("requests")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (kind, m) in [("limits", limits), ("requests", requests)] {
        for (name, q) in m {
            if amount(q).is_some_and(|a| a < 0) {
                errs.push(FieldError::invalid(
                    format!("{p}.resources.{kind}[{name}]"),
                    q,
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
    for (name, q) in requests {
        // Extended resources (a domain-prefixed name outside kubernetes.io) cannot be
        // overcommitted: the request must equal the limit.
        let extended = name.contains('/') && !name.contains("kubernetes.io/");
        let (Some(req), Some(lim)) = (amount(q), limits.get(name).and_then(amount)) else {
            if extended {
                errs.push(FieldError::required(
                    format!("{p}.resources.limits"),
                    "Limit must be set for non overcommitable resources",
                ));
            }
            continue;
        };
        let shown = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
        let limit_text = shown(&limits[name]);
        if extended && req != lim {
            errs.push(FieldError::invalid(
                format!("{p}.resources.requests"),
                &Value::String(shown(q)),
                &format!("must be equal to {name} limit of {limit_text}"),
            ));
        } else if req > lim {
            errs.push(FieldError::invalid(
                format!("{p}.resources.requests"),
                &Value::String(shown(q)),
                &format!("must be less than or equal to {name} limit of {limit_text}"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: Value) -> Object {
        Object::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn fields(r: Result<(), Status>) -> Vec<String> {
        match r {
            Ok(()) => vec![],
            Err(s) => s.causes.iter().map(|c| c.field.clone()).collect(),
        }
    }

    #[test]
    fn a_sound_pod_passes() {
        let p = pod(json!({
            "restartPolicy": "OnFailure", "dnsPolicy": "ClusterFirst",
            "nodeSelector": {"disk": "ssd"}, "serviceAccountName": "builder",
            "volumes": [{"name": "data", "emptyDir": {}}],
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "app", "image": "nginx", "imagePullPolicy": "IfNotPresent",
                "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                "env": [{"name": "MY.VAR-1", "value": "x"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi", "example.com/gpu": 1},
                              "requests": {"cpu": "500m", "memory": "512Mi", "example.com/gpu": "1"}}}]}));
        validate("", "Pod", &p).unwrap();
    }

    #[test]
    fn each_broken_rule_is_named() {
        let cases = [
            (json!({"containers": []}), "spec.containers"),
            (
                json!({"containers": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]}),
                "spec.containers[1].name",
            ),
            (
                json!({"initContainers": [{"name": "a", "image": "x"}],
                    "containers": [{"name": "a", "image": "y"}]}),
                "spec.initContainers[0].name",
            ),
            (
                json!({"restartPolicy": "Sometimes", "containers": [{"name": "a", "image": "x"}]}),
                "spec.restartPolicy",
            ),
            (
                json!({"dnsPolicy": "Maybe", "containers": [{"name": "a", "image": "x"}]}),
                "spec.dnsPolicy",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "imagePullPolicy": "Often"}]}),
                "spec.containers[0].imagePullPolicy",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 70000}]}]}),
                "spec.containers[0].ports[0].containerPort",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80, "protocol": "HTTP"}]}]}),
                "spec.containers[0].ports[0].protocol",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "ports": [
                    {"name": "web", "containerPort": 80}, {"name": "web", "containerPort": 81}]}]}),
                "spec.containers[0].ports[1].name",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "ports": [{"name": "Web_Port", "containerPort": 80}]}]}),
                "spec.containers[0].ports[0].name",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "env": [{"name": "", "value": "1"}]}]}),
                "spec.containers[0].env[0].name",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "env": [{"name": "A=B"}]}]}),
                "spec.containers[0].env[0].name",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "/x"}]}]}),
                "spec.containers[0].volumeMounts[0].name",
            ),
            (
                json!({"volumes": [{"name": "v"}, {"name": "v"}], "containers": [{"name": "a", "image": "x"}]}),
                "spec.volumes[1].name",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x",
                    "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}}]}),
                "spec.containers[0].resources.requests",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x",
                    "resources": {"limits": {"memory": "-1"}}}]}),
                "spec.containers[0].resources.limits[memory]",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x",
                    "resources": {"requests": {"example.com/gpu": "1"}}}]}),
                "spec.containers[0].resources.limits",
            ),
            (
                json!({"nodeSelector": {"bad key!": "x"}, "containers": [{"name": "a", "image": "x"}]}),
                "spec.nodeSelector",
            ),
            (
                json!({"activeDeadlineSeconds": 0, "containers": [{"name": "a", "image": "x"}]}),
                "spec.activeDeadlineSeconds",
            ),
            (
                json!({"hostname": "Not_A_Label", "containers": [{"name": "a", "image": "x"}]}),
                "spec.hostname",
            ),
        ];
        for (spec, field) in cases {
            let got = fields(validate("", "Pod", &pod(spec.clone())));
            assert!(got.iter().any(|f| f == field), "{spec}: {got:?}");
        }
    }

    #[test]
    fn a_quantity_that_does_not_parse_is_a_bad_request() {
        let p = pod(json!({"containers": [{"name": "a", "image": "x",
            "resources": {"limits": {"cpu": "lots"}}}]}));
        assert_eq!(validate_quantities("", "Pod", &p).unwrap_err().code(), 400);
        // Numbers are read exactly: 2.002 CPUs is 2002m, not a hair less.
        let exact = pod(json!({"containers": [{"name": "a", "image": "x",
            "resources": {"limits": {"cpu": 2.002}, "requests": {"cpu": "2002m"}}}]}));
        validate_quantities("", "Pod", &exact).unwrap();
        validate("", "Pod", &exact).unwrap();
    }

    #[test]
    fn workload_templates_are_checked_with_their_restart_rule() {
        let deploy = |policy: &str, image: &str| {
            Object::from_value(
                json!({"metadata": {"name": "d"}, "spec": {"template": {"spec": {
                "restartPolicy": policy, "containers": [{"name": "c", "image": image}]}}}}),
            )
            .unwrap()
        };
        validate("apps", "Deployment", &deploy("Always", "nginx")).unwrap();
        let err = validate("apps", "Deployment", &deploy("Never", "nginx")).unwrap_err();
        assert!(
            err.message.starts_with("Deployment.apps \"d\" is invalid: spec.template.spec.restartPolicy: Unsupported value: \"Never\""),
            "{}",
            err.message
        );
        let err = validate("apps", "Deployment", &deploy("Always", "")).unwrap_err();
        assert_eq!(
            err.causes[0].field,
            "spec.template.spec.containers[0].image"
        );
        // A Job's pods may not restart Always, but that is the job registry's rule; here
        // Never passes.
        let job = Object::from_value(
            json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}),
        )
        .unwrap();
        validate("batch", "Job", &job).unwrap();
        let cron = Object::from_value(json!({"metadata": {"name": "c"}, "spec": {"jobTemplate": {
            "spec": {"template": {"spec": {"containers": []}}}}}}))
        .unwrap();
        assert_eq!(
            fields(validate("batch", "CronJob", &cron)),
            ["spec.jobTemplate.spec.template.spec.containers"]
        );
        // A StatefulSet's containers may mount its claim templates.
        let sts = Object::from_value(json!({"metadata": {"name": "web"}, "spec": {
            "volumeClaimTemplates": [{"metadata": {"name": "www"}}],
            "template": {"spec": {"containers": [{"name": "c", "image": "x",
                "volumeMounts": [{"name": "www", "mountPath": "/w"}]}]}}}}))
        .unwrap();
        validate("apps", "StatefulSet", &sts).unwrap();
        let mut ds = sts.clone();
        ds.0["spec"]
            .as_object_mut()
            .unwrap()
            .remove("volumeClaimTemplates");
        assert_eq!(
            fields(validate("apps", "StatefulSet", &ds)),
            ["spec.template.spec.containers[0].volumeMounts[0].name"]
        );
        // A ReplicationController may leave its template out; other kinds pass untouched.
        let rc = Object::from_value(json!({"metadata": {"name": "r"}, "spec": {}})).unwrap();
        validate("", "ReplicationController", &rc).unwrap();
        validate("", "ConfigMap", &rc).unwrap();
    }
}
