//! `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicies and their bindings: what
//! makes one valid to store, and a policy compiled for evaluation.
//!
//! A policy needs `matchConstraints.resourceRules`, at least one validation, a
//! `failurePolicy` of `Fail` or `Ignore`, and CEL expressions (validations, their
//! `messageExpression`s, `matchConditions`, `variables`) that parse; a binding needs a
//! `policyName` and `validationActions` drawn from `Deny`, `Warn` and `Audit` (never `Deny`
//! with `Warn`). The expressions are parsed on a thread with a stack large enough for the
//! parser (see [`super::apiextensions::cel::compile`]).

use super::apiextensions::cel::compile::parse;
use api::status::FieldError;
use api::{Object, Status};
use cel::IdedExpr;
use serde_json::Value;

/// The stack the parser runs on (as for CRD rules).
const PARSE_STACK_BYTES: usize = 256 * 1024 * 1024;

/// What a policy does when an expression cannot be evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The request is refused.
    Fail,
    /// The policy is skipped.
    Ignore,
}

/// A CEL expression, parsed, with its source.
#[derive(Debug)]
pub struct Expression {
    /// As written.
    pub source: String,
    /// Parsed; `Err` with the parser's message if it does not parse.
    pub program: Result<IdedExpr, String>,
}

/// One `validations` entry.
#[derive(Debug)]
pub struct Validation {
    /// The expression that must be true.
    pub expression: Expression,
    /// `message` (empty when not set).
    pub message: String,
    /// `messageExpression`, when set.
    pub message_expression: Option<Expression>,
    /// `reason` (`Invalid` when not set).
    pub reason: String,
}

/// A policy ready to evaluate.
#[derive(Debug)]
pub struct CompiledPolicy {
    /// `metadata.name`.
    pub name: String,
    /// `spec.matchConstraints`.
    pub match_constraints: Value,
    /// `spec.paramKind` (`apiVersion`, `kind`), when the policy takes parameters.
    pub param_kind: Option<(String, String)>,
    /// `spec.failurePolicy` (`Fail` when not set).
    pub failure_policy: FailurePolicy,
    /// `spec.matchConditions`, by name; all must hold for the policy to apply.
    pub match_conditions: Vec<(String, Expression)>,
    /// `spec.variables`, by name, in order.
    pub variables: Vec<(String, Expression)>,
    /// `spec.validations`.
    pub validations: Vec<Validation>,
}

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn items<'a>(v: Option<&'a Value>, k: &str) -> &'a [Value] {
    v.and_then(|v| v.get(k))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn expression(src: &str) -> Expression {
    Expression {
        source: src.to_string(),
        program: parse(src).map(|(e, _)| e),
    }
}

/// Compiles `policy` (a stored ValidatingAdmissionPolicy). Must run on a large stack: see
/// [`compile_all`].
fn compile(policy: &Value) -> CompiledPolicy {
    let spec = policy.get("spec");
    let named = |key: &str, field: &str| -> Vec<(String, Expression)> {
        items(spec, key)
            .iter()
            .map(|c| (text(c, "name").to_string(), expression(text(c, field))))
            .collect()
    };
    CompiledPolicy {
        name: policy
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        match_constraints: spec
            .and_then(|s| s.get("matchConstraints"))
            .cloned()
            .unwrap_or(Value::Null),
        param_kind: spec.and_then(|s| s.get("paramKind")).map(|p| {
            (
                text(p, "apiVersion").to_string(),
                text(p, "kind").to_string(),
            )
        }),
        failure_policy: match spec.map(|s| text(s, "failurePolicy")) {
            Some("Ignore") => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        },
        match_conditions: named("matchConditions", "expression"),
        variables: named("variables", "expression"),
        validations: items(spec, "validations")
            .iter()
            .map(|v| Validation {
                expression: expression(text(v, "expression")),
                message: text(v, "message").trim().to_string(),
                message_expression: v
                    .get("messageExpression")
                    .and_then(Value::as_str)
                    .map(expression),
                reason: match text(v, "reason") {
                    "" => "Invalid".to_string(),
                    r => r.to_string(),
                },
            })
            .collect(),
    }
}

/// Compiles `policies` on a thread with a stack large enough for the parser.
pub fn compile_all(policies: &[Value]) -> Vec<CompiledPolicy> {
    let spawned = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("cel-compile".into())
            .stack_size(PARSE_STACK_BYTES)
            .spawn_scoped(s, || policies.iter().map(compile).collect::<Vec<_>>())
            .map(|h| h.join())
    });
    match spawned {
        Ok(Ok(compiled)) => compiled,
        _ => {
            tracing::error!("the admission policy compiler failed");
            Vec::new()
        }
    }
}

/// Checks a ValidatingAdmissionPolicy about to be stored.
///
/// # Errors
/// 422 naming every field in error.
pub fn validate_policy(obj: &Object) -> Result<(), Status> {
    let v = Value::Object(obj.0.clone());
    let spec = v.get("spec");
    let mut errs = Vec::new();
    let rules = items(
        spec.and_then(|s| s.get("matchConstraints")),
        "resourceRules",
    );
    if rules.is_empty() {
        errs.push(FieldError::required(
            "spec.matchConstraints.resourceRules",
            "",
        ));
    }
    let validations = items(spec, "validations");
    if validations.is_empty() && items(spec, "auditAnnotations").is_empty() {
        errs.push(FieldError::required(
            "spec.validations",
            "validations or auditAnnotations must contain at least one item",
        ));
    }
    if let Some(p) = spec
        .and_then(|s| s.get("failurePolicy"))
        .and_then(Value::as_str)
    {
        if p != "Fail" && p != "Ignore" {
            errs.push(FieldError::not_supported(
                "spec.failurePolicy",
                p,
                &["Fail", "Ignore"],
            ));
        }
    }
    let reasons = [
        "Unauthorized",
        "Forbidden",
        "Invalid",
        "RequestEntityTooLarge",
    ];
    for (i, val) in validations.iter().enumerate() {
        if let Some(r) = val.get("reason").and_then(Value::as_str) {
            if !reasons.contains(&r) {
                errs.push(FieldError::not_supported(
                    format!("spec.validations[{i}].reason"),
                    r,
                    &reasons,
                ));
            }
        }
    }
    let compiled = compile_all(std::slice::from_ref(&v));
    if let Some(p) = compiled.first() {
        let mut check = |path: String, e: &Expression| {
            if e.source.trim().is_empty() {
                errs.push(FieldError::required(path, ""));
            } else if let Err(msg) = &e.program {
                errs.push(FieldError::invalid(
                    path,
                    &Value::String(e.source.clone()),
                    &format!("compilation failed: {msg}"),
                ));
            }
        };
        for (i, val) in p.validations.iter().enumerate() {
            check(format!("spec.validations[{i}].expression"), &val.expression);
            if let Some(m) = &val.message_expression {
                check(format!("spec.validations[{i}].messageExpression"), m);
            }
        }
        for (i, (_, c)) in p.match_conditions.iter().enumerate() {
            check(format!("spec.matchConditions[{i}].expression"), c);
        }
        for (i, (_, var)) in p.variables.iter().enumerate() {
            check(format!("spec.variables[{i}].expression"), var);
        }
        for (i, (name, _)) in p.variables.iter().enumerate() {
            if name.is_empty() {
                errs.push(FieldError::required(
                    format!("spec.variables[{i}].name"),
                    "",
                ));
            }
        }
    }
    finish("ValidatingAdmissionPolicy", obj, &errs)
}

/// Checks a ValidatingAdmissionPolicyBinding about to be stored.
///
/// # Errors
/// 422 naming every field in error.
pub fn validate_binding(obj: &Object) -> Result<(), Status> {
    let v = Value::Object(obj.0.clone());
    let spec = v.get("spec");
    let mut errs = Vec::new();
    if spec.map(|s| text(s, "policyName")).unwrap_or("").is_empty() {
        errs.push(FieldError::required("spec.policyName", ""));
    }
    let actions: Vec<&str> = items(spec, "validationActions")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if actions.is_empty() {
        errs.push(FieldError::required("spec.validationActions", ""));
    }
    for (i, a) in actions.iter().enumerate() {
        if !["Deny", "Warn", "Audit"].contains(a) {
            errs.push(FieldError::not_supported(
                format!("spec.validationActions[{i}]"),
                a,
                &["Audit", "Deny", "Warn"],
            ));
        } else if actions[..i].contains(a) {
            errs.push(FieldError {
                reason: "FieldValueDuplicate",
                field: format!("spec.validationActions[{i}]"),
                body: format!("Duplicate value: {:?}", a),
            });
        }
    }
    if actions.contains(&"Deny") && actions.contains(&"Warn") {
        errs.push(FieldError::invalid(
            "spec.validationActions",
            &serde_json::json!(actions),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    finish("ValidatingAdmissionPolicyBinding", obj, &errs)
}

fn finish(kind: &str, obj: &Object, errs: &[FieldError]) -> Result<(), Status> {
    if errs.is_empty() {
        Ok(())
    } else {
        Err(Status::invalid_fields(
            kind,
            "admissionregistration.k8s.io",
            obj.name(),
            errs,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn policies_need_rules_validations_and_expressions_that_parse() {
        let good = json!({"metadata": {"name": "p"}, "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <= 5"}]}});
        assert!(validate_policy(&obj(good.clone())).is_ok());
        let mut bad = good.clone();
        bad["spec"]["validations"][0]["expression"] = json!("object.spec.replicas <=");
        let err = validate_policy(&obj(bad)).unwrap_err();
        assert_eq!(err.reason, api::Reason::Invalid);
        assert!(
            err.message.contains("spec.validations[0].expression"),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("compilation failed"),
            "{}",
            err.message
        );
        let empty = json!({"metadata": {"name": "p"}, "spec": {}});
        let err = validate_policy(&obj(empty)).unwrap_err();
        assert!(
            err.message.contains("spec.matchConstraints.resourceRules"),
            "{}",
            err.message
        );
        let compiled = compile_all(&[good]);
        assert_eq!(compiled[0].validations[0].reason, "Invalid");
        assert_eq!(compiled[0].failure_policy, FailurePolicy::Fail);
    }

    #[test]
    fn bindings_need_a_policy_and_consistent_actions() {
        let good = json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny", "Audit"]}});
        assert!(validate_binding(&obj(good)).is_ok());
        let both = json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny", "Warn"]}});
        assert!(validate_binding(&obj(both)).is_err());
        let none = json!({"metadata": {"name": "b"}, "spec": {"validationActions": ["Block"]}});
        let err = validate_binding(&obj(none)).unwrap_err();
        assert!(err.message.contains("spec.policyName"), "{}", err.message);
        assert!(
            err.message.contains("Unsupported value: \"Block\""),
            "{}",
            err.message
        );
    }
}
