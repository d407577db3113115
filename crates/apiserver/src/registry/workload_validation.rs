//! The checks kube-apiserver makes of a workload's spec (apps/v1 Deployment, ReplicaSet,
//! DaemonSet, StatefulSet, and the core ReplicationController), beyond its pod template
//! (`registry::pod_validation`). These are the mistakes that would otherwise reach a
//! controller and stay there: a selector that is empty (it would adopt every pod of the
//! namespace) or does not select the template's own pods, a rollout that can make no
//! progress (`maxSurge` and `maxUnavailable` both 0), a strategy the controller does not
//! know.
//!
//! Checked, as `pkg/apis/apps/validation` checks them: `replicas`, `minReadySeconds`,
//! `revisionHistoryLimit` and `progressDeadlineSeconds` (greater than `minReadySeconds`) not
//! negative; the selector present, valid, not empty and matching the template's labels, and
//! (apps/v1) unchanged by an update ([`validate_update`]); the template without `activeDeadlineSeconds` (except a
//! StatefulSet's); a Deployment's strategy (`Recreate` without `rollingUpdate`; integers or
//! percentages, `maxUnavailable` at most 100 %, not both 0), a DaemonSet's (exactly one of
//! `maxSurge` and `maxUnavailable` non-zero) and a StatefulSet's (`partition` not negative,
//! `maxUnavailable` not 0) and its `podManagementPolicy`. Every value is read after
//! defaulting, so an absent field is its default.

use api::labels::LabelSelector;
use api::status::FieldError;
use api::{Object, Status};
use serde_json::{json, Map, Value};

/// The name Kubernetes uses for a kind in "empty selector is invalid for …" (the
/// ReplicaSet shares the Deployment's words, as there).
fn selector_noun(kind: &str) -> &'static str {
    match kind {
        "DaemonSet" => "daemonset",
        "StatefulSet" => "statefulset",
        _ => "deployment",
    }
}

/// Checks the spec of a workload about to be stored; other kinds pass untouched.
///
/// # Errors
/// 422 Invalid listing every broken rule.
pub fn validate(group: &str, kind: &str, obj: &Object) -> Result<(), Status> {
    let apps = group == "apps"
        && matches!(
            kind,
            "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet"
        );
    let rc = group.is_empty() && kind == "ReplicationController";
    if !apps && !rc {
        return Ok(());
    }
    let empty = Map::new();
    let spec = obj.get("spec").and_then(Value::as_object).unwrap_or(&empty);
    let mut errs = Vec::new();
    let non_negative = |errs: &mut Vec<FieldError>, field: &str| {
        if let Some(n) = spec.get(field).and_then(Value::as_i64) {
            if n < 0 {
                errs.push(FieldError::invalid(
                    format!("spec.{field}"),
                    &Value::from(n),
                    "must be greater than or equal to 0",
                ));
            }
        }
    };
    for field in ["replicas", "minReadySeconds"] {
        non_negative(&mut errs, field);
    }
    // (A StatefulSet's is not checked by Kubernetes.)
    if kind != "StatefulSet" {
        non_negative(&mut errs, "revisionHistoryLimit");
    }
    let labels = spec
        .get("template")
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if apps {
        selector(kind, spec.get("selector"), labels, &mut errs);
    } else {
        // A ReplicationController's selector is a plain map (defaulted from the template).
        let sel = spec.get("selector").and_then(Value::as_object);
        match sel {
            None => errs.push(FieldError::required("spec.selector", "")),
            Some(m) if m.is_empty() => errs.push(FieldError::required("spec.selector", "")),
            Some(m) => {
                let wanted = json!({"matchLabels": m});
                selector(kind, Some(&wanted), labels, &mut errs);
            }
        }
    }
    let template_spec = spec
        .get("template")
        .and_then(|t| t.get("spec"))
        .and_then(Value::as_object);
    if kind != "StatefulSet"
        && template_spec
            .is_some_and(|t| t.get("activeDeadlineSeconds").is_some_and(|v| !v.is_null()))
    {
        // Kubernetes names the kind, a Deployment's template as its ReplicaSets'.
        let noun = match kind {
            "DaemonSet" | "ReplicationController" => kind,
            _ => "ReplicaSet",
        };
        errs.push(FieldError::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            &format!("activeDeadlineSeconds in {noun} is not Supported"),
        ));
    }
    match kind {
        "Deployment" => deployment(spec, &mut errs),
        "DaemonSet" => daemon_set(spec, &mut errs),
        "StatefulSet" => stateful_set(spec, &mut errs),
        _ => {}
    }
    Status::invalid_if_any(kind, group, obj.name(), &errs)
}

/// On an update of an apps/v1 workload: its selector may not change.
///
/// # Errors
/// 422 Invalid on `spec.selector`.
pub fn validate_update(group: &str, kind: &str, new: &Object, old: &Object) -> Result<(), Status> {
    if group != "apps"
        || !matches!(
            kind,
            "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet"
        )
    {
        return Ok(());
    }
    let selector_of = |o: &Object| {
        o.get("spec")
            .and_then(|s| s.get("selector"))
            .filter(|v| !v.is_null())
            .map(semantic_selector)
    };
    let (before, after) = (selector_of(old), selector_of(new));
    if before.is_none() || before == after {
        return Ok(());
    }
    Err(Status::invalid_fields(
        kind,
        group,
        new.name(),
        &[FieldError::invalid(
            "spec.selector",
            after.as_ref().unwrap_or(&Value::Null),
            "field is immutable",
        )],
    ))
}

/// A label selector as Kubernetes compares it (`Semantic.DeepEqual`): empty or null
/// `matchLabels`, `matchExpressions` and `values` are as good as absent.
fn semantic_selector(sel: &Value) -> Value {
    let Some(m) = sel.as_object() else {
        return sel.clone();
    };
    let present = |v: &&Value| match v {
        Value::Null => false,
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    };
    let mut out = Map::new();
    if let Some(l) = m.get("matchLabels").filter(present) {
        out.insert("matchLabels".into(), l.clone());
    }
    if let Some(Value::Array(es)) = m.get("matchExpressions").filter(present) {
        let es: Vec<Value> = es
            .iter()
            .map(|e| match e.as_object() {
                Some(e) => Value::Object(
                    e.iter()
                        .filter(|(_, v)| present(v))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ),
                None => e.clone(),
            })
            .collect();
        out.insert("matchExpressions".into(), Value::Array(es));
    }
    Value::Object(out)
}

fn selector(
    kind: &str,
    sel: Option<&Value>,
    labels: &Map<String, Value>,
    errs: &mut Vec<FieldError>,
) {
    let Some(sel) = sel.filter(|s| !s.is_null()) else {
        errs.push(FieldError::required("spec.selector", ""));
        return;
    };
    let parsed = match LabelSelector::from_object(sel) {
        Ok(Some(p)) => p,
        Ok(None) => return,
        Err(e) => {
            errs.push(FieldError::invalid("spec.selector", sel, &e.to_string()));
            return;
        }
    };
    if parsed.is_empty() {
        errs.push(FieldError::invalid(
            "spec.selector",
            sel,
            &format!("empty selector is invalid for {}", selector_noun(kind)),
        ));
    } else if !parsed.matches(labels) {
        errs.push(FieldError::invalid(
            "spec.template.metadata.labels",
            &Value::Object(labels.clone()),
            "`selector` does not match template `labels`",
        ));
    }
}

/// An int-or-string that must be a non-negative integer or a percentage: its number (the
/// percentage's, for a string) and whether it is a percentage, or the error.
fn int_or_percent(v: &Value) -> Result<(i64, bool), &'static str> {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) if i >= 0 => Ok((i, false)),
            Some(_) => Err("must be greater than or equal to 0"),
            None => Err("must be an integer or percentage (e.g '5%')"),
        },
        Value::String(s) => s
            .strip_suffix('%')
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .map(|d| (d.parse::<i64>().unwrap_or(i64::MAX), true))
            .ok_or("a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"),
        _ => Err("must be an integer or percentage (e.g '5%')"),
    }
}

/// Checks `field` of `ru` as an int-or-percent (at most 100 % when `max_100`); its number,
/// or `None` when absent or broken (broken ones are reported).
fn checked(
    ru: &Map<String, Value>,
    path: &str,
    field: &str,
    max_100: bool,
    errs: &mut Vec<FieldError>,
) -> Option<i64> {
    let v = ru.get(field)?;
    match int_or_percent(v) {
        Ok((n, percent)) => {
            if percent && max_100 && n > 100 {
                errs.push(FieldError::invalid(
                    format!("{path}.{field}"),
                    v,
                    "must not be greater than 100%",
                ));
            }
            Some(n)
        }
        Err(e) => {
            errs.push(FieldError::invalid(format!("{path}.{field}"), v, e));
            None
        }
    }
}

fn deployment(spec: &Map<String, Value>, errs: &mut Vec<FieldError>) {
    let min_ready = spec
        .get("minReadySeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if let Some(d) = spec.get("progressDeadlineSeconds").and_then(Value::as_i64) {
        if d < 0 {
            errs.push(FieldError::invalid(
                "spec.progressDeadlineSeconds",
                &Value::from(d),
                "must be greater than or equal to 0",
            ));
        }
        if d <= min_ready {
            errs.push(FieldError::invalid(
                "spec.progressDeadlineSeconds",
                &Value::from(d),
                "must be greater than minReadySeconds",
            ));
        }
    }
    let empty = Map::new();
    let strategy = spec
        .get("strategy")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let rolling = strategy.get("rollingUpdate").filter(|v| !v.is_null());
    match strategy
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .unwrap_or("RollingUpdate")
    {
        "Recreate" => {
            if rolling.is_some() {
                errs.push(FieldError::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => {
            let ru = rolling.and_then(Value::as_object).unwrap_or(&empty);
            let path = "spec.strategy.rollingUpdate";
            let unavailable = checked(ru, path, "maxUnavailable", true, errs);
            let surge = checked(ru, path, "maxSurge", false, errs);
            if unavailable == Some(0) && surge == Some(0) {
                errs.push(FieldError::invalid(
                    format!("{path}.maxUnavailable"),
                    &ru["maxUnavailable"],
                    "may not be 0 when `maxSurge` is 0",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            "spec.strategy",
            other,
            &["Recreate", "RollingUpdate"],
        )),
    }
}

fn daemon_set(spec: &Map<String, Value>, errs: &mut Vec<FieldError>) {
    let empty = Map::new();
    let strategy = spec
        .get("updateStrategy")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    match strategy
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .unwrap_or("RollingUpdate")
    {
        "OnDelete" => {}
        "RollingUpdate" => {
            let ru = strategy
                .get("rollingUpdate")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            let path = "spec.updateStrategy.rollingUpdate";
            let unavailable = checked(ru, path, "maxUnavailable", true, errs);
            let surge = checked(ru, path, "maxSurge", true, errs);
            // Only judged when both are present (defaulting sets both).
            if let (Some(u), Some(s)) = (unavailable, surge) {
                if u != 0 && s != 0 {
                    errs.push(FieldError::invalid(
                        format!("{path}.maxSurge"),
                        &ru["maxSurge"],
                        "may not be set when maxUnavailable is non-zero",
                    ));
                } else if u == 0 && s == 0 {
                    errs.push(FieldError::required(
                        format!("{path}.maxUnavailable"),
                        "cannot be 0 when maxSurge is 0",
                    ));
                }
            }
        }
        other => errs.push(FieldError::not_supported(
            "spec.updateStrategy",
            other,
            &["OnDelete", "RollingUpdate"],
        )),
    }
}

fn stateful_set(spec: &Map<String, Value>, errs: &mut Vec<FieldError>) {
    let policy = spec
        .get("podManagementPolicy")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .unwrap_or("OrderedReady");
    if !matches!(policy, "OrderedReady" | "Parallel") {
        errs.push(FieldError::invalid(
            "spec.podManagementPolicy",
            &Value::String(policy.into()),
            "must be 'OrderedReady' or 'Parallel'",
        ));
    }
    let empty = Map::new();
    let strategy = spec
        .get("updateStrategy")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    match strategy
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .unwrap_or("RollingUpdate")
    {
        "OnDelete" => {}
        "RollingUpdate" => {
            let ru = strategy
                .get("rollingUpdate")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            let path = "spec.updateStrategy.rollingUpdate";
            if let Some(p) = ru.get("partition").and_then(Value::as_i64) {
                if p < 0 {
                    errs.push(FieldError::invalid(
                        format!("{path}.partition"),
                        &Value::from(p),
                        "must be greater than or equal to 0",
                    ));
                }
            }
            // `maxUnavailable` is behind an alpha gate in 1.32, which drops it unread.
        }
        other => errs.push(FieldError::invalid(
            "spec.updateStrategy",
            &Value::String(other.into()),
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(kind: &str, spec: Value) -> Object {
        let mut base = json!({"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}});
        base.as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        Object::from_value(json!({"kind": kind, "metadata": {"name": "w"}, "spec": base})).unwrap()
    }

    fn fields(kind: &str, spec: Value) -> Vec<String> {
        match validate("apps", kind, &workload(kind, spec)) {
            Ok(()) => vec![],
            Err(s) => s.causes.iter().map(|c| c.field.clone()).collect(),
        }
    }

    #[test]
    fn sound_workloads_pass() {
        for kind in ["Deployment", "ReplicaSet", "DaemonSet", "StatefulSet"] {
            assert!(fields(kind, json!({})).is_empty(), "{kind}");
        }
        assert!(fields(
            "Deployment",
            json!({"replicas": 3, "minReadySeconds": 5,
            "progressDeadlineSeconds": 600, "strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": 0}}})
        )
        .is_empty());
        assert!(fields("Deployment", json!({"strategy": {"type": "Recreate"}})).is_empty());
        assert!(fields("Deployment", json!({"strategy": {"type": ""}})).is_empty());
        assert!(fields(
            "StatefulSet",
            json!({"podManagementPolicy": "", "revisionHistoryLimit": -1,
                "updateStrategy": {"rollingUpdate": {"maxUnavailable": 0}}})
        )
        .is_empty());
        assert!(fields(
            "ReplicaSet",
            json!({"template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"activeDeadlineSeconds": null, "containers": [{"name": "c", "image": "i"}]}}})
        )
        .is_empty());
        assert!(fields(
            "DaemonSet",
            json!({"updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "10%"}}})
        )
        .is_empty());
    }

    #[test]
    fn each_broken_rule_is_named() {
        let cases = [
            ("Deployment", json!({"replicas": -1}), "spec.replicas"),
            ("Deployment", json!({"selector": {}}), "spec.selector"),
            ("ReplicaSet", json!({"selector": null}), "spec.selector"),
            (
                "Deployment",
                json!({"selector": {"matchLabels": {"app": "other"}}}),
                "spec.template.metadata.labels",
            ),
            (
                "Deployment",
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}}),
                "spec.selector",
            ),
            (
                "Deployment",
                json!({"strategy": {"type": "Sideways"}}),
                "spec.strategy",
            ),
            (
                "Deployment",
                json!({"strategy": {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}}),
                "spec.strategy.rollingUpdate",
            ),
            (
                "Deployment",
                json!({"strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}}),
                "spec.strategy.rollingUpdate.maxUnavailable",
            ),
            (
                "Deployment",
                json!({"strategy": {"rollingUpdate": {"maxSurge": "5", "maxUnavailable": 1}}}),
                "spec.strategy.rollingUpdate.maxSurge",
            ),
            (
                "Deployment",
                json!({"strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": "150%"}}}),
                "spec.strategy.rollingUpdate.maxUnavailable",
            ),
            (
                "Deployment",
                json!({"minReadySeconds": 10, "progressDeadlineSeconds": 10}),
                "spec.progressDeadlineSeconds",
            ),
            (
                "Deployment",
                json!({"revisionHistoryLimit": -2}),
                "spec.revisionHistoryLimit",
            ),
            (
                "ReplicaSet",
                json!({"template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "activeDeadlineSeconds": 5, "containers": [{"name": "c", "image": "i"}]}}}),
                "spec.template.spec.activeDeadlineSeconds",
            ),
            (
                "DaemonSet",
                json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}}}),
                "spec.updateStrategy.rollingUpdate.maxSurge",
            ),
            (
                "DaemonSet",
                json!({"updateStrategy": {"type": "Whenever"}}),
                "spec.updateStrategy",
            ),
            (
                "StatefulSet",
                json!({"podManagementPolicy": "Random"}),
                "spec.podManagementPolicy",
            ),
            (
                "StatefulSet",
                json!({"updateStrategy": {"rollingUpdate": {"partition": -1}}}),
                "spec.updateStrategy.rollingUpdate.partition",
            ),
        ];
        for (kind, spec, field) in cases {
            let got = fields(kind, spec.clone());
            assert!(got.iter().any(|f| f == field), "{kind} {spec}: {got:?}");
        }
    }

    #[test]
    fn the_selector_may_not_change_and_an_rc_needs_one() {
        let old = workload("Deployment", json!({}));
        let moved = workload(
            "Deployment",
            json!({
            "selector": {"matchLabels": {"app": "web", "tier": "x"}},
            "template": {"metadata": {"labels": {"app": "web", "tier": "x"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}}),
        );
        let err = validate_update("apps", "Deployment", &moved, &old).unwrap_err();
        assert!(
            err.message.contains("spec.selector: Invalid value"),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("field is immutable"),
            "{}",
            err.message
        );
        validate_update("apps", "Deployment", &old, &old).unwrap();
        // The same selector in another form (as apply or a typed client sends it).
        let same = workload(
            "Deployment",
            json!({"selector": {"matchLabels": {"app": "web"}, "matchExpressions": []}}),
        );
        validate_update("apps", "Deployment", &same, &old).unwrap();
        validate_update("apps", "Deployment", &old, &same).unwrap();
        let rc = |sel: Value| {
            Object::from_value(json!({"metadata": {"name": "r"}, "spec": {"selector": sel,
                "template": {"metadata": {"labels": {"app": "web"}}}}}))
            .unwrap()
        };
        validate("", "ReplicationController", &rc(json!({"app": "web"}))).unwrap();
        assert!(validate("", "ReplicationController", &rc(json!({}))).is_err());
        assert!(validate("", "ReplicationController", &rc(json!({"app": "db"}))).is_err());
    }
}
