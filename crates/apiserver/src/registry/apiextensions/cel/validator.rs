//! Evaluating the compiled rules of a schema against a custom object being written: every
//! node of the object whose schema node has rules is validated, with `oldSelf` the value
//! at the same place in the stored object (paired by name in objects and maps, by key in
//! `x-kubernetes-list-type: map` lists) on an update.
//!
//! Transition rules (those using `oldSelf`) run only where an old value exists, unless
//! they set `optionalOldSelf`. A rule that does not use `oldSelf` is not re-run on a value
//! the update left unchanged (Kubernetes' validation ratcheting), so an object written under
//! an older, looser rule can still be updated elsewhere.

use super::super::structural::{child, Node};
use super::compile::CompiledRule;
use super::library::{self, with_scope};
use super::value::{object_to_cel, to_cel, Val};
use api::status::FieldError;
use cel::common::types::CelOptional as Optional;
use cel::{ExecutionError, Value as Cel};
use serde_json::{Map, Value};

/// The longest message a `messageExpression` may produce.
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

/// Every rule under `root` violated by `new` (a whole custom object), given the stored
/// `old` one on an update; in the order of the object's fields.
pub fn validate(
    root: &Node,
    new: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if root.rules_below {
        library::start_object();
        walk(
            root,
            Json::Object(new),
            old.map(Json::Object),
            "",
            true,
            &mut errs,
        );
    }
    errs
}

/// A value of the object being validated, borrowed: the root is a map, not a `Value`.
#[derive(Clone, Copy)]
enum Json<'a> {
    Value(&'a Value),
    Object(&'a Map<String, Value>),
}

impl<'a> Json<'a> {
    fn object(self) -> Option<&'a Map<String, Value>> {
        match self {
            Json::Object(m) | Json::Value(Value::Object(m)) => Some(m),
            Json::Value(_) => None,
        }
    }

    fn is_null(self) -> bool {
        matches!(self, Json::Value(Value::Null))
    }

    fn get(self, k: &str) -> Option<Json<'a>> {
        self.object().and_then(|m| m.get(k)).map(Json::Value)
    }

    fn same(self, other: Json<'_>) -> bool {
        match (self.object(), other.object(), self, other) {
            (Some(a), Some(b), _, _) => a == b,
            (_, _, Json::Value(a), Json::Value(b)) => a == b,
            _ => false,
        }
    }

    fn to_cel(self, n: &Node, root: bool) -> Val {
        match self {
            Json::Value(v) => to_cel(v, Some(n), root),
            Json::Object(m) => object_to_cel(m, Some(n), root),
        }
    }

    /// The value as an error shows it (objects are named by type instead).
    fn shown(self) -> Value {
        match self {
            Json::Value(v) => v.clone(),
            Json::Object(_) => Value::String("object".into()),
        }
    }
}

fn walk(
    n: &Node,
    new: Json<'_>,
    old: Option<Json<'_>>,
    path: &str,
    root: bool,
    errs: &mut Vec<FieldError>,
) {
    if !n.rules_below || new.is_null() || library::object_budget_spent() {
        return;
    }
    let old = old.filter(|o| !o.is_null());
    for e in &n.rule_errors {
        errs.push(invalid(n, path, &format!("rule compile error: {e}")));
    }
    if !n.rules.is_empty() {
        evaluate(n, new, old, path, root, errs);
    }
    if let Some(m) = new.object() {
        if !n.properties.is_empty() {
            for (k, v) in m {
                if let Some(p) = n.properties.get(k).filter(|p| p.rules_below) {
                    let was = old.and_then(|o| o.get(k));
                    walk(
                        p,
                        Json::Value(v),
                        was,
                        &child(path, k),
                        p.embedded_resource,
                        errs,
                    );
                }
            }
        } else if let Some(p) = n.additional_properties.as_deref().filter(|p| p.rules_below) {
            for (k, v) in m {
                let was = old.and_then(|o| o.get(k));
                walk(
                    p,
                    Json::Value(v),
                    was,
                    &format!("{path}[{k}]"),
                    p.embedded_resource,
                    errs,
                );
            }
        }
    } else if let Json::Value(Value::Array(a)) = new {
        if let Some(items) = n.items.as_deref().filter(|i| i.rules_below) {
            // Items of a map-list pair with the old item of the same keys, found through
            // one index of the old list (not a search per item).
            let olds: std::collections::HashMap<String, &Value> =
                match (n.list_type.as_deref(), old) {
                    (Some("map"), Some(Json::Value(Value::Array(olds)))) => olds
                        .iter()
                        .map(|o| (key_of(&n.list_map_keys, o), o))
                        .collect(),
                    _ => Default::default(),
                };
            for (i, v) in a.iter().enumerate() {
                let was = if olds.is_empty() {
                    None
                } else {
                    olds.get(&key_of(&n.list_map_keys, v))
                        .copied()
                        .map(Json::Value)
                };
                walk(
                    items,
                    Json::Value(v),
                    was,
                    &format!("{path}[{i}]"),
                    items.embedded_resource,
                    errs,
                );
            }
        }
    }
}

/// The values of a map-list item's keys, as one string.
fn key_of(keys: &[String], item: &Value) -> String {
    let values: Vec<&Value> = keys
        .iter()
        .map(|k| item.get(k).unwrap_or(&Value::Null))
        .collect();
    serde_json::to_string(&values).unwrap_or_default()
}

fn evaluate(
    n: &Node,
    new: Json<'_>,
    old: Option<Json<'_>>,
    path: &str,
    root: bool,
    errs: &mut Vec<FieldError>,
) {
    let unchanged = old.is_some_and(|o| o.same(new));
    let runs = |r: &CompiledRule| {
        if r.uses_old_self {
            old.is_some() || r.optional_old_self
        } else {
            !unchanged
        }
    };
    let runs = |r: &CompiledRule| r.unsupported.is_empty() && runs(r);
    // Rules of one node share `self` (and `oldSelf`): bound once per scope, one scope for
    // the rules that see `oldSelf` as a plain value, one for those that see an optional.
    for optional in [false, true] {
        let rules: Vec<&CompiledRule> = n
            .rules
            .iter()
            .filter(|r| runs(r) && (r.uses_old_self && r.optional_old_self) == optional)
            .collect();
        if rules.is_empty() {
            continue;
        }
        let failures: Vec<(&CompiledRule, Result<String, String>)> = with_scope(|scope| {
            scope.add_variable_as_val("self", new.to_cel(n, root));
            let old_val = old
                .filter(|_| rules.iter().any(|r| r.uses_old_self))
                .map(|o| o.to_cel(n, root));
            match (old_val, optional) {
                (Some(o), false) => scope.add_variable_as_val("oldSelf", o),
                (Some(o), true) => scope.add_variable_as_val("oldSelf", Box::new(Optional::of(o))),
                (None, true) => scope.add_variable_as_val("oldSelf", Box::new(Optional::none())),
                (None, false) => {}
            }
            rules
                .iter()
                .filter_map(|rule| {
                    if library::object_budget_spent() {
                        return None;
                    }
                    library::start_rule();
                    let failed = match Cel::resolve(&rule.program, scope) {
                        Ok(Cel::Bool(true)) => return None,
                        Ok(Cel::Bool(false)) => Ok(rule
                            .message_expression
                            .as_ref()
                            .and_then(|m| message(Cel::resolve(m, scope)))
                            .unwrap_or_else(|| rule.message_or_default())),
                        Ok(other) => Err(format!(
                            "rule evaluated to a {} instead of a bool: {}",
                            other.type_of(),
                            rule.error_string()
                        )),
                        // Only a function can be undeclared here (names are checked when
                        // the rule compiles): one this server lacks does not refuse objects.
                        Err(ExecutionError::UndeclaredReference(name)) => {
                            tracing::debug!(rule = %rule.rule, %name, "a CEL rule calls a function this server does not have");
                            return None;
                        }
                        Err(e) => Err(runtime_error(&e, rule)),
                    };
                    Some((*rule, failed))
                })
                .collect()
        });
        for (rule, failure) in failures {
            match failure {
                Ok(detail) => {
                    let at = match &rule.field_path {
                        Some(p) if p.starts_with('[') => format!("{path}{p}"),
                        Some(p) => child(path, p),
                        None => path.to_string(),
                    };
                    errs.push(field_error(n, new, &at, &detail, rule.reason.as_deref()));
                }
                Err(detail) => errs.push(invalid(n, path, &detail)),
            }
        }
    }
}

/// A `messageExpression`'s result, if it is a usable message.
fn message(result: Result<Cel, ExecutionError>) -> Option<String> {
    match result {
        Ok(Cel::String(s)) => {
            let m = s.trim();
            (!m.is_empty() && m.len() <= MAX_MESSAGE_BYTES && !m.contains('\n'))
                .then(|| m.to_string())
        }
        _ => None,
    }
}

/// An evaluation error as Kubernetes reports it.
fn runtime_error(e: &ExecutionError, rule: &CompiledRule) -> String {
    let text = match e {
        ExecutionError::FunctionError { message, .. }
            if message == library::OBJECT_BUDGET_EXCEEDED =>
        {
            return format!("{message}, no further validation rules will be run");
        }
        ExecutionError::FunctionError { message, .. }
            if message == library::RULE_LIMIT_EXCEEDED =>
        {
            return format!(
                "'{message}': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                rule.error_string()
            );
        }
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::NoSuchOverload(_) => {
            return format!(
                "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {}",
                rule.error_string()
            )
        }
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        ExecutionError::Overflow(..) => "integer overflow".into(),
        ExecutionError::IndexOutOfBounds(i) => format!("index out of bounds: {i:?}"),
        other => other.to_string(),
    };
    format!("{text} evaluating rule: {}", rule.error_string())
}

fn display(path: &str) -> &str {
    if path.is_empty() {
        "<nil>"
    } else {
        path
    }
}

/// `Invalid value` naming the node's schema type as the value, as Kubernetes reports a rule
/// that could not be evaluated (`Invalid value: "integer": no such key …`).
fn invalid(n: &Node, path: &str, detail: &str) -> FieldError {
    let t = n.type_.as_deref().unwrap_or("");
    FieldError {
        reason: "FieldValueInvalid",
        field: display(path).to_string(),
        body: format!("Invalid value: {t:?}: {detail}"),
    }
}

/// A rule that does not hold: `Invalid value` shows the value (objects and lists by their
/// type), as Kubernetes shows it.
fn failed(n: &Node, v: Json<'_>, path: &str, detail: &str) -> FieldError {
    match (n.type_.as_deref(), v) {
        (Some("object" | "array"), _) | (_, Json::Object(_)) => invalid(n, path, detail),
        _ => FieldError::invalid(display(path), &v.shown(), detail),
    }
}

fn field_error(
    n: &Node,
    v: Json<'_>,
    path: &str,
    detail: &str,
    reason: Option<&str>,
) -> FieldError {
    match reason {
        Some("FieldValueForbidden") => FieldError::forbidden(display(path), detail),
        Some("FieldValueRequired") => FieldError::required(display(path), detail),
        Some("FieldValueDuplicate") => FieldError {
            reason: "FieldValueDuplicate",
            field: display(path).to_string(),
            body: format!("Duplicate value: {}", v.shown()),
        },
        _ => failed(n, v, path, detail),
    }
}
