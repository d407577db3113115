//! Compiling a schema's validation rules when its CRD is written (and again when a server
//! starts serving it): each rule and `messageExpression` parsed and checked
//! ([`super::check`]), its cost estimated over every place it can run, and every reason to
//! refuse one reported as a field error of the CRD in Kubernetes' words.

use super::super::structural::Node;
use super::check::{self, max_items, max_properties, node_ty, Checker, Ty};
use super::library::ENV;
use api::status::FieldError;
use cel::common::ast::{Expr, IdedExpr, SourceInfo};
use serde_json::Value;

/// The most a rule's estimated cost, over every place it can run, may be.
pub const PER_EXPRESSION_COST_LIMIT: u64 = 10_000_000;
/// The most the estimated costs of all the rules of one schema may add up to.
pub const CRD_COST_LIMIT: u64 = 100_000_000;
/// The longest expression taken, in code points (cel-go's default limit).
const MAX_EXPRESSION_CHARS: usize = 100_000;
/// How deeply expressions may nest in parentheses, calls, lists and maps (the parser's own
/// limit).
pub const MAX_NESTING: u16 = 32;
/// How deep a parsed expression may be, operator chains included (`a + b + c` nests one
/// level per operator): the checker and the evaluator recurse once per level, and the
/// evaluator runs on the server's worker threads. Deeper rules are refused.
pub const MAX_DEPTH: usize = 100;
/// The most operators and punctuation an expression may have: the parser builds (and
/// recurses over) one level per operator of a chain before any depth can be measured.
const MAX_OPERATORS: usize = 4_000;
/// The stack compilation runs on: the generated parser's frames are large, in debug
/// builds most of all, and it recurses over operator chains up to [`MAX_OPERATORS`] long.
/// Only what is used is ever touched.
const COMPILE_STACK_BYTES: usize = 256 * 1024 * 1024;

const REASONS: &[&str] = &[
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// One compiled `x-kubernetes-validations` rule.
#[derive(Debug)]
pub struct CompiledRule {
    /// The rule, trimmed.
    pub rule: String,
    /// `message`, trimmed (empty when not set).
    pub message: String,
    /// `reason` (`FieldValueInvalid` when not set).
    pub reason: Option<String>,
    /// `fieldPath`, normalized to a field path relative to the rule's node (`spec.x`,
    /// `[key]`), when set.
    pub field_path: Option<String>,
    /// The rule uses `oldSelf`: it is a transition rule.
    pub uses_old_self: bool,
    /// `optionalOldSelf`: the rule also runs on create, `oldSelf` then being `none`.
    pub optional_old_self: bool,
    /// The parsed rule.
    pub program: IdedExpr,
    /// The parsed `messageExpression`.
    pub message_expression: Option<IdedExpr>,
    /// Functions the rule calls that this server does not have: the rule is kept (the CRD
    /// is valid in Kubernetes) but not enforced, and the CRD's writer is warned.
    pub unsupported: Vec<String>,
    /// Where the rule is in its CRD (`…x-kubernetes-validations[i]`).
    pub at: String,
}

impl CompiledRule {
    /// What a failure says when no `messageExpression` does: the message, or the rule.
    pub fn message_or_default(&self) -> String {
        if self.message.is_empty() {
            format!("failed rule: {}", self.rule)
        } else {
            self.message.clone()
        }
    }

    /// How an error names the rule: its message, or the rule itself.
    pub fn error_string(&self) -> &str {
        if self.message.is_empty() {
            &self.rule
        } else {
            &self.message
        }
    }
}

/// Where in the schema a node sits, for what its rules may do.
#[derive(Clone)]
struct Place {
    resource_root: bool,
    /// The nearest list above that is not a map-list, whose items old and new cannot be
    /// paired across: `oldSelf` is refused below it.
    uncorrelatable: Option<String>,
    /// How many times a rule here can run for one object.
    cardinality: u64,
    /// Compiling a definition already stored: a rule that does not compile is kept as an
    /// error each object written reports, rather than refusing the definition.
    lenient: bool,
}

#[derive(Default)]
struct Total {
    cost: u64,
    /// The dearest expressions, dearest first (at most four).
    dearest: Vec<(u64, String)>,
}

impl Total {
    fn observe(&mut self, path: String, cost: u64) {
        self.cost = self.cost.saturating_add(cost);
        self.dearest.push((cost, path));
        self.dearest.sort_by_key(|d| std::cmp::Reverse(d.0));
        self.dearest.truncate(4);
    }
}

/// Compiles every rule under `root` (the schema at `path` in its CRD) into the nodes
/// ([`Node::rules`], [`Node::rules_below`]), on a stack large enough for the parser; every
/// reason to refuse one is added to `errs`.
///
/// `lenient` for a definition already stored (served as it is): rules that do not compile
/// here, and the whole schema's cost limit, do not refuse it; each such rule is kept as an
/// error ([`Node::rule_errors`]) that every object written is refused with, as Kubernetes
/// does with a stored rule it cannot compile.
pub fn compile_rules(root: &mut Node, path: &str, errs: &mut Vec<FieldError>, lenient: bool) {
    if !any_rules(root) {
        return;
    }
    let found = std::thread::scope(|s| {
        let spawned = std::thread::Builder::new()
            .name("cel-compile".into())
            .stack_size(COMPILE_STACK_BYTES)
            .spawn_scoped(s, || {
                let mut errs = Vec::new();
                let mut total = Total::default();
                let place = Place {
                    resource_root: true,
                    uncorrelatable: None,
                    cardinality: 1,
                    lenient,
                };
                walk(root, path, &place, &mut errs, &mut total);
                if total.cost > CRD_COST_LIMIT && !lenient {
                    for (_, p) in &total.dearest {
                        errs.push(FieldError::forbidden(
                            p.clone(),
                            "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
                        ));
                    }
                    errs.push(FieldError::forbidden(
                        path,
                        &cost_message(
                            "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                            total.cost,
                            CRD_COST_LIMIT,
                        ),
                    ));
                }
                errs
            });
        match spawned {
            Ok(h) => h.join().map_err(|_| "the rule compiler failed".to_string()),
            Err(e) => Err(format!("the rule compiler could not start: {e}")),
        }
    });
    match found {
        Ok(found) => errs.extend(found),
        Err(e) => errs.push(FieldError {
            reason: "InternalError",
            field: path.to_string(),
            body: format!("Internal error: {e}"),
        }),
    }
}

fn any_rules(n: &Node) -> bool {
    !n.validations.is_empty()
        || n.properties.values().any(any_rules)
        || n.additional_properties.as_deref().is_some_and(any_rules)
        || n.items.as_deref().is_some_and(any_rules)
}

fn walk(
    n: &mut Node,
    path: &str,
    place: &Place,
    errs: &mut Vec<FieldError>,
    total: &mut Total,
) -> bool {
    let mut found = Vec::new();
    n.rules = compile_node(n, path, place, &mut found, total);
    if place.lenient {
        n.rule_errors = found
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.body))
            .collect();
    } else {
        errs.extend(found);
    }
    let mut below = !n.rules.is_empty() || !n.rule_errors.is_empty();
    let map_size = max_properties(n);
    let list_size = max_items(n);
    let map_list = n.list_type.as_deref() == Some("map");
    for (k, p) in n.properties.iter_mut() {
        let child = Place {
            resource_root: p.embedded_resource,
            ..place.clone()
        };
        below |= walk(p, &format!("{path}.properties[{k}]"), &child, errs, total);
    }
    if let Some(v) = n.additional_properties.as_deref_mut() {
        let child = Place {
            resource_root: v.embedded_resource,
            uncorrelatable: place.uncorrelatable.clone(),
            cardinality: place.cardinality.saturating_mul(map_size),
            lenient: place.lenient,
        };
        below |= walk(
            v,
            &format!("{path}.additionalProperties"),
            &child,
            errs,
            total,
        );
    }
    if let Some(items) = n.items.as_deref_mut() {
        let child = Place {
            resource_root: items.embedded_resource,
            uncorrelatable: match (&place.uncorrelatable, map_list) {
                (Some(p), _) => Some(p.clone()),
                (None, true) => None,
                (None, false) => Some(path.to_string()),
            },
            cardinality: place.cardinality.saturating_mul(list_size),
            lenient: place.lenient,
        };
        below |= walk(items, &format!("{path}.items"), &child, errs, total);
    }
    n.rules_below = below;
    below
}

fn has_newlines(s: &str) -> bool {
    s.contains(['\n', '\r'])
}

/// A rule as Go prints the `ValidationRule` it was decoded into (`%#v`), which is how
/// Kubernetes shows the bad value of an invalid rule.
fn go_rule(raw: &Value) -> String {
    let s = |k: &str| raw.get(k).and_then(Value::as_str).unwrap_or_default();
    let reason = match raw.get("reason").and_then(Value::as_str) {
        Some(r) => format!("(*apiextensions.FieldValueErrorReason)({r:?})"),
        None => "(*apiextensions.FieldValueErrorReason)(nil)".into(),
    };
    let optional = match raw.get("optionalOldSelf").and_then(Value::as_bool) {
        Some(b) => format!("(*bool)({b})"),
        None => "(*bool)(nil)".into(),
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{:?}, Message:{:?}, MessageExpression:{:?}, Reason:{reason}, FieldPath:{:?}, OptionalOldSelf:{optional}}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath"),
    )
}

fn invalid_rule(field: String, raw: &Value, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field,
        body: format!("Invalid value: {}: {detail}", go_rule(raw)),
    }
}

/// How Kubernetes says an estimated cost is over its limit.
pub fn cost_message(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// Parses `src` as the server's environment does.
pub fn parse(src: &str) -> Result<(IdedExpr, SourceInfo), String> {
    let n = src.chars().count();
    if n > MAX_EXPRESSION_CHARS {
        return Err(format!(
            "expression code point size exceeds limit: size: {n}, limit {MAX_EXPRESSION_CHARS}"
        ));
    }
    let operators = operators_outside_strings(src);
    if operators > MAX_OPERATORS {
        return Err(format!(
            "expression has {operators} operators and punctuation, more than the {MAX_OPERATORS} this server parses"
        ));
    }
    let (expr, info) = ENV
        .parser()
        .max_recursion_depth(MAX_NESTING)
        .parse_with_source_info(src)
        .map_err(|e| e.to_string())?;
    let depth = depth(&expr);
    if depth > MAX_DEPTH {
        return Err(format!(
            "expression nests {depth} levels deep, more than the {MAX_DEPTH} this server evaluates"
        ));
    }
    Ok((expr, info))
}

/// How many characters of `src` outside string literals are neither letters, digits nor
/// white space: a bound on its operators.
fn operators_outside_strings(src: &str) -> usize {
    let mut n = 0;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in src.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => quote = Some(c),
            None if !c.is_alphanumeric() && !c.is_whitespace() && c != '_' => n += 1,
            None => {}
        }
    }
    n
}

/// The depth of `e`, measured without recursion (it is not yet known to be shallow).
fn depth(e: &IdedExpr) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&IdedExpr, usize)> = vec![(e, 1)];
    while let Some((e, d)) = stack.pop() {
        deepest = deepest.max(d);
        stack.extend(children(e).into_iter().map(|c| (c, d + 1)));
    }
    deepest
}

/// The sub-expressions of `e`.
fn children(e: &IdedExpr) -> Vec<&IdedExpr> {
    match &e.expr {
        Expr::Call(c) => c
            .target
            .as_deref()
            .into_iter()
            .chain(c.args.iter())
            .collect(),
        Expr::Select(s) => vec![&s.operand],
        Expr::List(l) => l.elements.iter().collect(),
        Expr::Map(cel::common::ast::MapExpr { entries })
        | Expr::Struct(cel::common::ast::StructExpr { entries, .. }) => entries
            .iter()
            .flat_map(|en| match &en.expr {
                cel::common::ast::EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
                cel::common::ast::EntryExpr::StructField(f) => vec![&f.value],
            })
            .collect(),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    }
}

/// Readies a checked program to run here: `matches` calls renamed to the library's, which
/// caches compiled patterns ([`super::library::MATCHES`]), and every macro's loop condition
/// wrapped in the iteration meter ([`super::library::METER`]).
fn prepare(e: &mut IdedExpr) {
    match &mut e.expr {
        Expr::Call(c) => {
            let arity = c.args.len() + usize::from(c.target.is_some());
            if c.func_name == "matches" && arity == 2 {
                c.func_name = super::library::MATCHES.to_string();
            }
            if let Some(t) = c.target.as_deref_mut() {
                prepare(t);
            }
            c.args.iter_mut().for_each(prepare);
        }
        Expr::Select(s) => prepare(&mut s.operand),
        Expr::List(l) => l.elements.iter_mut().for_each(prepare),
        Expr::Map(cel::common::ast::MapExpr { entries })
        | Expr::Struct(cel::common::ast::StructExpr { entries, .. }) => {
            for en in entries {
                match &mut en.expr {
                    cel::common::ast::EntryExpr::MapEntry(me) => {
                        prepare(&mut me.key);
                        prepare(&mut me.value);
                    }
                    cel::common::ast::EntryExpr::StructField(f) => prepare(&mut f.value),
                }
            }
        }
        Expr::Comprehension(c) => {
            prepare(&mut c.iter_range);
            prepare(&mut c.accu_init);
            prepare(&mut c.loop_cond);
            prepare(&mut c.loop_step);
            prepare(&mut c.result);
            let cond = std::mem::take(&mut c.loop_cond);
            c.loop_cond = IdedExpr {
                // The wrapper has no place in the source: an id no parsed node has.
                id: u64::MAX - cond.id,
                expr: Expr::Call(cel::common::ast::CallExpr {
                    func_name: super::library::METER.to_string(),
                    target: None,
                    args: vec![cond],
                }),
            };
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn uses(e: &IdedExpr, name: &str) -> bool {
    matches!(&e.expr, Expr::Ident(n) if n == name) || children(e).into_iter().any(|c| uses(c, name))
}

/// `fieldPath` as a field path below `n` (`.a.b` to `a.b`, `['k']` to `[k]`), or why it
/// does not name a field the schema declares.
fn normalize_field_path(n: &Node, fp: &str) -> Result<String, ()> {
    let mut out = String::new();
    let mut node = n;
    let mut rest = fp;
    while !rest.is_empty() {
        let (name, after) = if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']").ok_or(())?;
            (&r[..end], &r[end + 2..])
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            (&r[..end], &r[end..])
        } else {
            return Err(());
        };
        if name.is_empty() {
            return Err(());
        }
        if let Some(p) = node.properties.get(name) {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(name);
            node = p;
        } else if let Some(v) = node.additional_properties.as_deref() {
            out.push_str(&format!("[{name}]"));
            node = v;
        } else {
            return Err(());
        }
        rest = after;
    }
    if out.is_empty() {
        Err(())
    } else {
        Ok(out)
    }
}

/// Which expression of a rule is compiled: how its errors name it and what it must give.
#[derive(Clone, Copy)]
enum Expression {
    /// `rule`: a bool.
    Rule,
    /// `messageExpression`: a string.
    Message,
}

/// Parses and checks one expression of the rule at `at` (with `self` and `oldSelf` of
/// `self_ty`), checks its cost over every place it runs and counts it in `total`; the program
/// ready to run and the functions it calls that this server lacks, or `None` with the
/// reasons in `errs`.
#[allow(clippy::too_many_arguments)]
fn compile_expression(
    which: Expression,
    src: &str,
    self_ty: &Ty<'_>,
    place: &Place,
    at: &str,
    raw: &Value,
    errs: &mut Vec<FieldError>,
    total: &mut Total,
) -> Option<(IdedExpr, Vec<String>)> {
    let (field, failed, wrong_type, cost_name) = match which {
        Expression::Rule => (
            "rule",
            "compilation failed",
            "cel expression must evaluate to a bool",
            "estimated rule cost",
        ),
        Expression::Message => (
            "messageExpression",
            "messageExpression compilation failed",
            "messageExpression must evaluate to a string",
            "estimated messageExpression cost",
        ),
    };
    let field = format!("{at}.{field}");
    let checked = parse(src).and_then(|(program, info)| {
        let vars = vec![
            ("self".to_string(), self_ty.clone()),
            ("oldSelf".to_string(), self_ty.clone()),
        ];
        let mut checker = Checker::new(src, &info, vars);
        let est = checker.check(&program)?;
        Ok((program, est, checker.unsupported))
    });
    let (mut program, est, unsupported) = match checked {
        Ok(c) => c,
        Err(detail) => {
            errs.push(invalid_rule(field, raw, &format!("{failed}: {detail}")));
            return None;
        }
    };
    let typed = match which {
        Expression::Rule => check::may_be_bool(&est),
        Expression::Message => check::may_be_string(&est),
    };
    if !typed {
        errs.push(invalid_rule(field, raw, wrong_type));
        return None;
    }
    prepare(&mut program);
    let cost = est.cost.saturating_mul(place.cardinality);
    if cost > PER_EXPRESSION_COST_LIMIT {
        errs.push(FieldError::forbidden(
            field.clone(),
            &cost_message(cost_name, cost, PER_EXPRESSION_COST_LIMIT),
        ));
    }
    total.observe(field, cost);
    Some((program, unsupported))
}

fn compile_node(
    n: &Node,
    path: &str,
    place: &Place,
    errs: &mut Vec<FieldError>,
    total: &mut Total,
) -> Vec<CompiledRule> {
    let mut out = Vec::new();
    for (i, raw) in n.validations.iter().enumerate() {
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        let s = |k: &str| raw.get(k).and_then(Value::as_str).unwrap_or_default();
        let (rule, message, message_expression, field_path) = (
            s("rule"),
            s("message"),
            s("messageExpression"),
            s("fieldPath"),
        );
        let before = errs.len();
        if rule.trim().is_empty() {
            errs.push(FieldError::required(
                format!("{at}.rule"),
                "rule is not specified",
            ));
        } else if !message.is_empty() && message.trim().is_empty() {
            errs.push(FieldError::invalid(
                format!("{at}.message"),
                &Value::from(message),
                "message must be non-empty if specified",
            ));
        } else if has_newlines(message.trim()) {
            errs.push(FieldError::invalid(
                format!("{at}.message"),
                &Value::from(message),
                "message must not contain line breaks",
            ));
        } else if has_newlines(rule.trim()) && message.trim().is_empty() {
            errs.push(FieldError::required(
                format!("{at}.message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        if !message_expression.is_empty() && message_expression.trim().is_empty() {
            errs.push(FieldError::required(
                format!("{at}.messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        let reason = raw.get("reason").and_then(Value::as_str);
        if let Some(r) = reason {
            if !REASONS.contains(&r) {
                errs.push(FieldError::not_supported(
                    format!("{at}.reason"),
                    r,
                    REASONS,
                ));
            }
        }
        let mut normalized = None;
        if !field_path.is_empty() {
            if field_path.trim().is_empty() {
                errs.push(FieldError::invalid(
                    format!("{at}.fieldPath"),
                    &Value::from(field_path),
                    "fieldPath must be non-empty if specified",
                ));
            } else if has_newlines(field_path) {
                errs.push(FieldError::invalid(
                    format!("{at}.fieldPath"),
                    &Value::from(field_path),
                    "fieldPath must not contain line breaks",
                ));
            } else {
                match normalize_field_path(n, field_path.trim()) {
                    Ok(p) => normalized = Some(p),
                    Err(()) => errs.push(FieldError::invalid(
                        format!("{at}.fieldPath"),
                        &Value::from(field_path),
                        "fieldPath must be a valid path",
                    )),
                }
            }
        }
        if errs.len() > before {
            continue;
        }
        let rule = rule.trim();
        let self_ty = node_ty(n, place.resource_root);
        let Some((program, mut unsupported)) = compile_expression(
            Expression::Rule,
            rule,
            &self_ty,
            place,
            &at,
            raw,
            errs,
            total,
        ) else {
            continue;
        };
        let uses_old_self = uses(&program, "oldSelf");
        let optional_old_self = raw.get("optionalOldSelf").and_then(Value::as_bool);
        if uses_old_self {
            if let Some(p) = &place.uncorrelatable {
                errs.push(FieldError::invalid(
                    format!("{at}.rule"),
                    &Value::from(rule),
                    &format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {p}"),
                ));
            }
        } else if let Some(b) = optional_old_self {
            errs.push(FieldError::invalid(
                format!("{at}.optionalOldSelf"),
                &Value::from(b),
                "may not be set if oldSelf is not used in rule",
            ));
        }
        let mut message_program = None;
        if !message_expression.trim().is_empty() {
            if let Some((program, calls)) = compile_expression(
                Expression::Message,
                message_expression.trim(),
                &self_ty,
                place,
                &at,
                raw,
                errs,
                total,
            ) {
                for u in calls {
                    if !unsupported.contains(&u) {
                        unsupported.push(u);
                    }
                }
                message_program = Some(program);
            }
        }
        out.push(CompiledRule {
            rule: rule.to_string(),
            message: message.trim().to_string(),
            reason: reason.map(str::to_string),
            field_path: normalized,
            uses_old_self,
            optional_old_self: optional_old_self == Some(true),
            program,
            message_expression: message_program,
            unsupported,
            at,
        });
    }
    out
}
