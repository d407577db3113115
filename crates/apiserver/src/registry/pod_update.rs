//! What an update of a pod (through the pods resource: PUT, PATCH, apply) may change, as
//! kube-apiserver 1.32's `ValidatePodUpdate` rules it. A pod's spec is fixed once created,
//! except for:
//!
//! - `spec.containers[*].image` and `spec.initContainers[*].image` (containers may not be
//!   added or removed, and an image may not be empty or padded with spaces);
//! - `spec.activeDeadlineSeconds`: set when unset, or lowered (never raised, never unset);
//! - `spec.tolerations`: new ones added (an existing one may change only its
//!   `tolerationSeconds`), every one well-formed;
//! - `spec.schedulingGates`: removed, never added;
//! - `spec.terminationGracePeriodSeconds`: to 1 when it was negative.
//!
//! Anything else — `spec.nodeName` (bind with `pods/binding` instead), ports, commands, … —
//! is a 422 Invalid on `spec` that lists the changed fields. Values compare as Kubernetes'
//! typed objects would: an absent field, `null`, `""`, `0`, `false`, `[]` and `{}` are alike.
//! Not covered: the additions to `nodeSelector` and node affinity a scheduling-gated pod may
//! take, and in-place resizing of resources (alpha in 1.32).

use api::status::FieldError;
use api::{Object, Status};
use serde_json::{Map, Value};

/// kube-apiserver's words for the fields an update may change.
const UPDATABLE: &str = "pod updates may not change fields other than \
    `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,\
    `spec.tolerations` (only additions to existing tolerations),\
    `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

fn list<'a>(spec: &'a Map<String, Value>, field: &str) -> &'a [Value] {
    spec.get(field)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

/// Checks the update of pod `old` (as stored) to `new` (as it would be stored).
///
/// # Errors
/// 422 Invalid naming each broken rule (see the module docs).
pub fn validate(old: &Object, new: &Object) -> Result<(), Status> {
    let empty = Map::new();
    let spec_of = |o: &'_ Object| -> Map<String, Value> {
        o.get("spec")
            .and_then(Value::as_object)
            .unwrap_or(&empty)
            .clone()
    };
    let (old_spec, new_spec) = (spec_of(old), spec_of(new));
    let mut errs = Vec::new();
    let done = |errs: Vec<FieldError>| {
        if errs.is_empty() {
            Ok(())
        } else {
            Err(Status::invalid_fields("Pod", "", new.name(), &errs))
        }
    };

    for field in ["containers", "initContainers"] {
        let (before, after) = (list(&old_spec, field), list(&new_spec, field));
        if before.len() != after.len() {
            errs.push(FieldError::forbidden(
                format!("spec.{field}"),
                "pod updates may not add or remove containers",
            ));
            return done(errs);
        }
        for (i, c) in after.iter().enumerate() {
            let image = text(c, "image");
            let path = format!("spec.{field}[{i}].image");
            if image.is_empty() {
                errs.push(FieldError::required(path, ""));
            } else if image.trim() != image {
                errs.push(FieldError::invalid(
                    path,
                    &Value::String(image.into()),
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }

    let deadline = |s: &Map<String, Value>| {
        s.get("activeDeadlineSeconds")
            .filter(|v| !v.is_null())
            .cloned()
    };
    let path = "spec.activeDeadlineSeconds";
    match (deadline(&old_spec), deadline(&new_spec)) {
        (_, Some(n))
            if !n
                .as_i64()
                .is_some_and(|n| (0..=i64::from(i32::MAX)).contains(&n)) =>
        {
            errs.push(FieldError::invalid(
                path,
                &n,
                "must be between 0 and 2147483647, inclusive",
            ));
            return done(errs);
        }
        (Some(o), Some(n)) if o.as_i64() < n.as_i64() => {
            errs.push(FieldError::invalid(
                path,
                &n,
                "must be less than or equal to previous value",
            ));
            return done(errs);
        }
        (Some(_), None) => errs.push(FieldError::invalid(
            path,
            &Value::Null,
            "must not update from a positive integer to nil value",
        )),
        _ => {}
    }

    let (old_tolerations, new_tolerations) = (
        list(&old_spec, "tolerations"),
        list(&new_spec, "tolerations"),
    );
    let kept = old_tolerations.iter().all(|o| {
        new_tolerations.iter().any(|n| {
            let mut o = normalized(o);
            let n = normalized(n);
            if let (Value::Object(om), Value::Object(nm)) = (&mut o, &n) {
                match nm.get("tolerationSeconds") {
                    Some(s) => om.insert("tolerationSeconds".into(), s.clone()),
                    None => om.remove("tolerationSeconds"),
                };
            }
            o == n
        })
    });
    if !kept {
        errs.push(FieldError::forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        ));
    }
    validate_tolerations(new_tolerations, &mut errs);

    let old_gates: Vec<&str> = list(&old_spec, "schedulingGates")
        .iter()
        .map(|g| text(g, "name"))
        .collect();
    for (i, g) in list(&new_spec, "schedulingGates").iter().enumerate() {
        let name = text(g, "name");
        if !old_gates.contains(&name) {
            errs.push(FieldError::forbidden(
                format!("spec.schedulingGates[{i}].name"),
                &format!("only deletion is allowed, but found new scheduling gate '{name}'"),
            ));
        }
    }

    let (before, after) = (munged(&old_spec, &old_spec), munged(&new_spec, &old_spec));
    if before != after {
        let mut changes = Vec::new();
        diff("spec", Some(&before), Some(&after), &mut changes);
        errs.push(FieldError::forbidden(
            "spec",
            &format!("{UPDATABLE}\n{}", changes.join("\n")),
        ));
    }
    done(errs)
}

/// `spec` without what an update may change, normalized for comparison.
fn munged(spec: &Map<String, Value>, old: &Map<String, Value>) -> Value {
    let mut s = spec.clone();
    for field in ["containers", "initContainers"] {
        if let Some(cs) = s.get_mut(field).and_then(Value::as_array_mut) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                c.remove("image");
            }
        }
    }
    for field in ["activeDeadlineSeconds", "tolerations", "schedulingGates"] {
        s.remove(field);
    }
    let grace = |m: &Map<String, Value>| {
        m.get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
    };
    if grace(old).is_some_and(|g| g < 0) && grace(&s) == Some(1) {
        if let Some(g) = old.get("terminationGracePeriodSeconds") {
            s.insert("terminationGracePeriodSeconds".into(), g.clone());
        }
    }
    normalized(&Value::Object(s))
}

/// `v` with every member that a typed Kubernetes object could not tell from an absent one
/// (`null`, `""`, `0`, `false`, and empty lists and maps) left out, at every depth.
fn normalized(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| !is_zero(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

/// One line per field that differs between `a` and `b` (normalized), under `path`.
fn diff(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<String>) {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                diff(&format!("{path}.{k}"), x.get(k), y.get(k), out);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), Some(p), Some(q), out);
            }
        }
        (a, b) if a != b => {
            let show =
                |v: Option<&Value>| v.map_or_else(|| "<unset>".to_string(), Value::to_string);
            out.push(format!("  {path}: {} -> {}", show(a), show(b)));
        }
        _ => {}
    }
}

/// Kubernetes' `ValidateTolerations`: keys are qualified names, an empty key needs `Exists`,
/// `tolerationSeconds` needs the `NoExecute` effect, `Equal` takes a label value and `Exists`
/// none, and the effect is one of the three (or empty).
fn validate_tolerations(tolerations: &[Value], errs: &mut Vec<FieldError>) {
    for (i, t) in tolerations.iter().enumerate() {
        let path = |f: &str| format!("spec.tolerations[{i}].{f}");
        let (key, op, value, effect) = (
            text(t, "key"),
            text(t, "operator"),
            text(t, "value"),
            text(t, "effect"),
        );
        if !key.is_empty() {
            if let Err(e) = api::labels::validate_label_key(key) {
                errs.push(FieldError::invalid(
                    path("key"),
                    &Value::String(key.into()),
                    &e.to_string(),
                ));
            }
        } else if op != "Exists" {
            errs.push(FieldError::invalid(
                path("operator"),
                &Value::String(op.into()),
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if t.get("tolerationSeconds").is_some_and(|s| !s.is_null()) && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                path("effect"),
                &Value::String(effect.into()),
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match op {
            "" | "Equal" => {
                if let Err(e) = api::labels::validate_label_value(key, value) {
                    errs.push(FieldError::invalid(
                        path("operator"),
                        &Value::String(value.into()),
                        &e.to_string(),
                    ));
                }
            }
            "Exists" if !value.is_empty() => errs.push(FieldError::invalid(
                path("operator"),
                t,
                "value must be empty when `operator` is 'Exists'",
            )),
            "Exists" => {}
            other => errs.push(FieldError::not_supported(
                path("operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        if !matches!(effect, "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            errs.push(FieldError::not_supported(
                path("effect"),
                effect,
                &["NoExecute", "NoSchedule", "PreferNoSchedule"],
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: Value) -> Object {
        Object::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p"}, "spec": spec}))
        .unwrap()
    }

    fn base() -> Value {
        json!({
            "containers": [{"name": "c", "image": "nginx:1", "ports": [{"containerPort": 80}]}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}],
        })
    }

    fn with(mut v: Value, f: impl FnOnce(&mut Value)) -> Value {
        f(&mut v);
        v
    }

    fn refused(spec: Value) -> Status {
        validate(&pod(base()), &pod(spec)).unwrap_err()
    }

    #[test]
    fn allowed_changes_pass() {
        let old = pod(base());
        for spec in [
            base(),
            with(base(), |s| s["containers"][0]["image"] = json!("nginx:2")),
            with(base(), |s| s["activeDeadlineSeconds"] = json!(100)),
            with(base(), |s| {
                s["tolerations"][0]["tolerationSeconds"] = json!(99);
                s["tolerations"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"key": "b", "operator": "Equal", "value": "x"}));
            }),
            // What a typed object cannot tell apart is no change.
            with(base(), |s| {
                s["nodeName"] = json!("");
                s["hostNetwork"] = json!(false);
                s["volumes"] = json!([]);
            }),
        ] {
            validate(&old, &pod(spec.clone())).unwrap_or_else(|e| panic!("{spec}: {e}"));
        }
        let negative = with(base(), |s| s["terminationGracePeriodSeconds"] = json!(-1));
        let one = with(base(), |s| s["terminationGracePeriodSeconds"] = json!(1));
        validate(&pod(negative), &pod(one)).unwrap();
        let gated = with(base(), |s| {
            s["schedulingGates"] = json!([{"name": "g1"}, {"name": "g2"}])
        });
        let fewer = with(base(), |s| s["schedulingGates"] = json!([{"name": "g2"}]));
        validate(&pod(gated), &pod(fewer)).unwrap();
    }

    #[test]
    fn node_name_and_other_fields_are_immutable_and_named() {
        let s = refused(with(base(), |s| s["nodeName"] = json!("n1")));
        assert_eq!(s.code(), 422);
        assert_eq!(s.causes.len(), 1);
        assert_eq!(s.causes[0].field, "spec");
        assert_eq!(s.causes[0].reason, "FieldValueForbidden");
        assert!(s.message.starts_with("Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"), "{}", s.message);
        assert!(
            s.message.contains("spec.nodeName: <unset> -> \"n1\""),
            "{}",
            s.message
        );
        let s = refused(with(base(), |s| {
            s["containers"][0]["ports"][0]["containerPort"] = json!(81)
        }));
        assert!(
            s.message
                .contains("spec.containers[0].ports[0].containerPort: 80 -> 81"),
            "{}",
            s.message
        );
    }

    #[test]
    fn each_rule_names_its_field() {
        let cases = [
            (
                with(base(), |s| {
                    s["containers"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "d", "image": "x"}))
                }),
                "spec.containers",
            ),
            (
                with(base(), |s| s["containers"][0]["image"] = json!("")),
                "spec.containers[0].image",
            ),
            (
                with(base(), |s| s["containers"][0]["image"] = json!(" x")),
                "spec.containers[0].image",
            ),
            (
                with(base(), |s| s["activeDeadlineSeconds"] = json!(-1)),
                "spec.activeDeadlineSeconds",
            ),
            (
                with(base(), |s| s["tolerations"] = json!([])),
                "spec.tolerations",
            ),
            (
                with(base(), |s| {
                    s["tolerations"][0]["effect"] = json!("NoSchedule")
                }),
                "spec.tolerations",
            ),
            (
                with(base(), |s| {
                    s["tolerations"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"operator": "Equal"}))
                }),
                "spec.tolerations[1].operator",
            ),
            (
                with(base(), |s| s["schedulingGates"] = json!([{"name": "new"}])),
                "spec.schedulingGates[0].name",
            ),
        ];
        for (spec, field) in cases {
            let s = refused(spec.clone());
            assert_eq!(s.causes[0].field, field, "{spec}: {}", s.message);
        }
        // A deadline may be lowered, not raised or removed.
        let set = with(base(), |s| s["activeDeadlineSeconds"] = json!(100));
        let raised = with(base(), |s| s["activeDeadlineSeconds"] = json!(200));
        let e = validate(&pod(set.clone()), &pod(raised)).unwrap_err();
        assert!(
            e.message
                .contains("must be less than or equal to previous value"),
            "{}",
            e.message
        );
        let e = validate(&pod(set), &pod(base())).unwrap_err();
        assert!(
            e.message
                .contains("must not update from a positive integer to nil value"),
            "{}",
            e.message
        );
    }
}
