//! The checks kube-apiserver makes of a Service's spec, so that a Service no proxy could
//! serve is refused where it is written instead of producing empty endpoints.
//!
//! Checked, as `validateService` checks them: the `type` among the four; ports present
//! (unless the Service is headless or an ExternalName); each port's number in range, its
//! protocol known, its target port a number in range or an IANA service name, its name a DNS
//! label, unique, and required once there are several ports; no two ports with the same
//! number and protocol; no `nodePort` on a ClusterIP Service; an ExternalName Service's
//! `externalName` a DNS subdomain; the selector as labels; `sessionAffinity` among its values.
//! Absent fields are their defaults (type ClusterIP, protocol TCP, target port = port).
//! IP families, load balancer fields and traffic policies are left unchecked.

use api::status::FieldError;
use api::{Object, Status};
use serde_json::{json, Map, Value};
use std::collections::HashSet;

fn text<'a>(m: &'a Map<String, Value>, field: &str) -> &'a str {
    m.get(field).and_then(Value::as_str).unwrap_or("")
}

/// Checks a core/v1 Service about to be stored; other kinds pass untouched.
///
/// # Errors
/// 422 Invalid listing every broken rule.
pub fn validate(group: &str, kind: &str, obj: &Object) -> Result<(), Status> {
    if !(group.is_empty() && kind == "Service") {
        return Ok(());
    }
    let empty = Map::new();
    let spec = obj.get("spec").and_then(Value::as_object).unwrap_or(&empty);
    let mut errs = Vec::new();
    let kind_of = match text(spec, "type") {
        "" => "ClusterIP",
        t => t,
    };
    const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if !TYPES.contains(&kind_of) {
        errs.push(FieldError::not_supported("spec.type", kind_of, TYPES));
    }
    let headless = text(spec, "clusterIP") == "None"
        || spec
            .get("clusterIPs")
            .and_then(|c| c.get(0))
            .and_then(Value::as_str)
            == Some("None");
    let ports: Vec<&Map<String, Value>> = spec
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .collect();
    if ports.is_empty() && !headless && kind_of != "ExternalName" {
        errs.push(FieldError::required("spec.ports", ""));
    }
    if kind_of == "ExternalName" {
        let cname = text(spec, "externalName");
        let cname = cname.strip_suffix('.').unwrap_or(cname);
        if cname.is_empty() {
            errs.push(FieldError::required("spec.externalName", ""));
        } else if let Err(e) = api::object::validate_dns1123_subdomain(cname) {
            errs.push(FieldError::invalid(
                "spec.externalName",
                &Value::String(cname.into()),
                &e,
            ));
        }
    }
    let mut names = HashSet::new();
    let mut seen = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        let name = text(p, "name");
        if name.is_empty() {
            if ports.len() > 1 {
                errs.push(FieldError::required(format!("{path}.name"), ""));
            }
        } else if let Err(e) = api::object::validate_dns1123_label(name) {
            errs.push(FieldError::invalid(
                format!("{path}.name"),
                &Value::String(name.into()),
                &e,
            ));
        } else if !names.insert(name) {
            errs.push(FieldError::duplicate(format!("{path}.name"), name));
        }
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&port) {
            errs.push(FieldError::invalid(
                format!("{path}.port"),
                &Value::from(port),
                "must be between 1 and 65535, inclusive",
            ));
        }
        let protocol = match text(p, "protocol") {
            "" => "TCP",
            pr => pr,
        };
        if !matches!(protocol, "SCTP" | "TCP" | "UDP") {
            errs.push(FieldError::not_supported(
                format!("{path}.protocol"),
                protocol,
                &["SCTP", "TCP", "UDP"],
            ));
        }
        match p.get("targetPort") {
            Some(Value::Number(n)) => {
                let t = n.as_i64().unwrap_or(-1);
                // 0 is "unset": the default makes it the port.
                if t != 0 && !(1..=65535).contains(&t) {
                    errs.push(FieldError::invalid(
                        format!("{path}.targetPort"),
                        &Value::Number(n.clone()),
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
            Some(Value::String(s)) if !s.is_empty() => {
                if let Err(e) = super::pod_validation::port_name(s) {
                    errs.push(FieldError::invalid(
                        format!("{path}.targetPort"),
                        &Value::String(s.clone()),
                        e,
                    ));
                }
            }
            _ => {}
        }
        let node_port = p.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
        if kind_of == "ClusterIP" && node_port != 0 {
            errs.push(FieldError::forbidden(
                format!("{path}.nodePort"),
                "may not be used when `type` is 'ClusterIP'",
            ));
        }
        if !seen.insert((port, protocol)) {
            errs.push(FieldError {
                reason: "FieldValueDuplicate",
                field: path,
                body: format!(
                    "Duplicate value: {}",
                    json!({"port": port, "protocol": protocol})
                ),
            });
        }
    }
    if let Some(selector) = spec.get("selector").and_then(Value::as_object) {
        super::pod_validation::label_map(&mut errs, "spec.selector", selector);
    }
    let affinity = text(spec, "sessionAffinity");
    if !affinity.is_empty() && !matches!(affinity, "ClientIP" | "None") {
        errs.push(FieldError::not_supported(
            "spec.sessionAffinity",
            affinity,
            &["ClientIP", "None"],
        ));
    }
    Status::invalid_if_any(kind, group, obj.name(), &errs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: Value) -> Object {
        Object::from_value(json!({"metadata": {"name": "s"}, "spec": spec})).unwrap()
    }

    fn fields(spec: Value) -> Vec<String> {
        match validate("", "Service", &service(spec)) {
            Ok(()) => vec![],
            Err(s) => s.causes.iter().map(|c| c.field.clone()).collect(),
        }
    }

    #[test]
    fn sound_services_pass() {
        for spec in [
            json!({"selector": {"app": "web"}, "ports": [{"port": 80}]}),
            json!({"type": "NodePort", "ports": [{"name": "http", "port": 80, "targetPort": "http", "nodePort": 30080},
                   {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353}]}),
            json!({"clusterIP": "None", "selector": {"app": "db"}}),
            json!({"type": "ExternalName", "externalName": "example.com."}),
            json!({"ports": [{"name": "a", "port": 53, "protocol": "TCP"}, {"name": "b", "port": 53, "protocol": "UDP"}]}),
        ] {
            assert!(fields(spec.clone()).is_empty(), "{spec}");
        }
    }

    #[test]
    fn each_broken_rule_is_named() {
        let cases = [
            (
                json!({"type": "Weird", "ports": [{"port": 80}]}),
                "spec.type",
            ),
            (json!({"ports": []}), "spec.ports"),
            (json!({"ports": [{"port": 70000}]}), "spec.ports[0].port"),
            (
                json!({"ports": [{"port": 80}, {"port": 81}]}),
                "spec.ports[0].name",
            ),
            (
                json!({"ports": [{"name": "a", "port": 80}, {"name": "a", "port": 81}]}),
                "spec.ports[1].name",
            ),
            (
                json!({"ports": [{"name": "Web", "port": 80}]}),
                "spec.ports[0].name",
            ),
            (
                json!({"ports": [{"port": 80, "protocol": "HTTP"}]}),
                "spec.ports[0].protocol",
            ),
            (
                json!({"ports": [{"port": 80, "targetPort": 0x10000}]}),
                "spec.ports[0].targetPort",
            ),
            (
                json!({"ports": [{"port": 80, "targetPort": "no_such name"}]}),
                "spec.ports[0].targetPort",
            ),
            (
                json!({"ports": [{"port": 80, "nodePort": 30000}]}),
                "spec.ports[0].nodePort",
            ),
            (
                json!({"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 80}]}),
                "spec.ports[1]",
            ),
            (json!({"type": "ExternalName"}), "spec.externalName"),
            (
                json!({"selector": {"bad key!": "x"}, "ports": [{"port": 80}]}),
                "spec.selector",
            ),
            (
                json!({"sessionAffinity": "Sticky", "ports": [{"port": 80}]}),
                "spec.sessionAffinity",
            ),
        ];
        for (spec, field) in cases {
            let got = fields(spec.clone());
            assert!(got.iter().any(|f| f == field), "{spec}: {got:?}");
        }
    }
}
