//! The functions validation rules may call: CEL's standard library and its strings, lists
//! and math extensions (from the `cel` crate), plus the parts of Kubernetes' own CEL
//! library this server has: the list functions `isSorted`, `sum`, `min` and `max`, and
//! the regex functions `find` and `findAll` (and `matches`, whose patterns are cached).
//!
//! Evaluation happens in a child scope of one root context per thread (which holds the
//! Kubernetes functions), so a rule evaluated costs no function registration.

use cel::extractors::This;
use cel::{Context, Env, ExecutionError, Value};
use std::cmp::Ordering;
use std::sync::{Arc, LazyLock};

/// The environment every rule is compiled and evaluated in.
pub static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Each extension registers distinct names; a failure would be a bug in the crate.
    for ext in [
        cel::extensions::strings as fn(&mut Env) -> Result<(), cel::DeclarationError>,
        cel::extensions::lists,
        cel::extensions::math,
    ] {
        if let Err(e) = env.add_extension(ext) {
            tracing::error!(error = %e, "a CEL extension could not be registered");
        }
    }
    Arc::new(env)
});

thread_local! {
    static ROOT: Context<'static, 'static> = root();
}

fn root() -> Context<'static, 'static> {
    let mut ctx = Context::with_env(Arc::clone(&ENV));
    let added = [
        ctx.add_function("isSorted", is_sorted),
        ctx.add_function("sum", sum),
        ctx.add_function("min", min),
        ctx.add_function("max", max),
        ctx.add_function("find", find),
        ctx.add_function(MATCHES, matches),
        ctx.add_function(METER, meter),
        ctx.add_function("findAll", find_all),
    ];
    for r in added {
        if let Err(e) = r {
            tracing::error!(error = %e, "a Kubernetes CEL function could not be registered");
        }
    }
    ctx
}

/// Runs `f` with a fresh scope over this thread's root context: variables bound in it
/// are dropped when `f` returns.
pub fn with_scope<R>(f: impl FnOnce(&mut Context<'_, 'static>) -> R) -> R {
    ROOT.with(|root| {
        let mut scope = root.new_inner_scope();
        f(&mut scope)
    })
}

fn list(v: &Value, function: &str) -> Result<Arc<Vec<Value>>, ExecutionError> {
    match v {
        Value::List(l) => Ok(Arc::clone(l)),
        other => Err(ExecutionError::no_such_member_overload(
            function,
            vec![other.type_of().to_string()],
        )),
    }
}

fn compare(a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
    a.partial_cmp(b)
        .ok_or_else(|| ExecutionError::ValuesNotComparable(a.clone(), b.clone()))
}

fn is_sorted(This(this): This<Value>) -> Result<Value, ExecutionError> {
    let l = list(&this, "isSorted")?;
    for w in l.windows(2) {
        if compare(&w[0], &w[1])? == Ordering::Greater {
            return Ok(Value::Bool(false));
        }
    }
    Ok(Value::Bool(true))
}

fn sum(This(this): This<Value>) -> Result<Value, ExecutionError> {
    let l = list(&this, "sum")?;
    let Some(first) = l.first() else {
        return Ok(Value::Int(0));
    };
    let mut acc = first.clone();
    for x in &l[1..] {
        acc = match (&acc, x) {
            (Value::Int(a), Value::Int(b)) => a
                .checked_add(*b)
                .map(Value::Int)
                .ok_or_else(|| ExecutionError::Overflow("sum", acc.clone(), x.clone()))?,
            (Value::UInt(a), Value::UInt(b)) => a
                .checked_add(*b)
                .map(Value::UInt)
                .ok_or_else(|| ExecutionError::Overflow("sum", acc.clone(), x.clone()))?,
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            _ => {
                return Err(ExecutionError::no_such_overload(
                    "sum",
                    vec![acc.type_of().to_string(), x.type_of().to_string()],
                ))
            }
        };
    }
    Ok(acc)
}

fn extreme(this: &Value, function: &str, keep: Ordering) -> Result<Value, ExecutionError> {
    let l = list(this, function)?;
    let Some(mut best) = l.first() else {
        return Err(ExecutionError::function_error(
            function,
            "list must not be empty",
        ));
    };
    for x in &l[1..] {
        if compare(x, best)? == keep {
            best = x;
        }
    }
    Ok(best.clone())
}

fn min(This(this): This<Value>) -> Result<Value, ExecutionError> {
    extreme(&this, "min", Ordering::Less)
}

fn max(This(this): This<Value>) -> Result<Value, ExecutionError> {
    extreme(&this, "max", Ordering::Greater)
}

/// The most compiled patterns a thread keeps: a rule's patterns are nearly always
/// literals, so a few dozen cover every rule a server runs.
const REGEX_CACHE: usize = 256;
/// Patterns longer than this (taken from objects, not written in rules) are not cached.
const MAX_CACHED_PATTERN: usize = 1024;
/// The most memory one compiled pattern may take.
const REGEX_SIZE_LIMIT: usize = 4 * 1024 * 1024;

thread_local! {
    static REGEXES: std::cell::RefCell<std::collections::HashMap<String, regex::Regex>> =
        Default::default();
}

/// `re` compiled, from this thread's cache when it was compiled before: compiling costs
/// far more than matching a field's value, and a rule over a list matches once per item.
fn regex(function: &str, re: &str) -> Result<regex::Regex, ExecutionError> {
    if let Some(r) = REGEXES.with(|c| c.borrow().get(re).cloned()) {
        return Ok(r);
    }
    let compiled = regex::RegexBuilder::new(re)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            ExecutionError::function_error(function, format!("'{re}' not a valid regex:\n{e}"))
        })?;
    if re.len() > MAX_CACHED_PATTERN {
        return Ok(compiled);
    }
    REGEXES.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= REGEX_CACHE {
            c.clear();
        }
        c.insert(re.to_string(), compiled.clone());
    });
    Ok(compiled)
}

/// The function compiled rules call once per iteration of every macro (`all`, `exists`,
/// `map`, `filter`, …): [`super::compile`] wraps each loop condition in it. It counts the
/// iterations of the rule being evaluated and of the object being validated, and stops an
/// evaluation that goes past Kubernetes-sized budgets: cel-rust has no cost meter of its
/// own, and the static estimate is only an estimate.
pub const METER: &str = "@meter";

/// The most macro iterations one rule may take on one value (Kubernetes' per-call limit is
/// 1,000,000 cost units).
pub const RULE_ITERATIONS: u64 = 1_000_000;
/// The most macro iterations all the rules validating one object may take together
/// (Kubernetes' runtime budget is 10,000,000 cost units).
pub const OBJECT_ITERATIONS: u64 = 10_000_000;

/// What stops an evaluation that ran out of its budget.
pub const RULE_LIMIT_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";
/// What stops an object's validation that ran out of its budget.
pub const OBJECT_BUDGET_EXCEEDED: &str = "validation failed due to running out of cost budget";

thread_local! {
    static RULE_COUNT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static OBJECT_COUNT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static RULE_LIMIT: std::cell::Cell<u64> = const { std::cell::Cell::new(RULE_ITERATIONS) };
}

/// Lowers this thread's per-rule limit (tests: a budget reached in a few iterations).
#[cfg(test)]
pub fn set_rule_limit(n: u64) {
    RULE_LIMIT.set(n);
}

/// Starts counting for a new object's validation.
pub fn start_object() {
    OBJECT_COUNT.set(0);
    RULE_COUNT.set(0);
}

/// Starts counting for a new rule (within the same object).
pub fn start_rule() {
    RULE_COUNT.set(0);
}

/// Whether the object being validated has used up its budget.
pub fn object_budget_spent() -> bool {
    OBJECT_COUNT.get() > OBJECT_ITERATIONS
}

fn meter(v: Value) -> Result<Value, ExecutionError> {
    let rule = RULE_COUNT.get() + 1;
    let object = OBJECT_COUNT.get() + 1;
    RULE_COUNT.set(rule);
    OBJECT_COUNT.set(object);
    if object > OBJECT_ITERATIONS {
        Err(ExecutionError::function_error(
            "cost",
            OBJECT_BUDGET_EXCEEDED,
        ))
    } else if rule > RULE_LIMIT.get() {
        // As in Kubernetes, no further rule runs on this object.
        OBJECT_COUNT.set(OBJECT_ITERATIONS + 1);
        Err(ExecutionError::function_error("cost", RULE_LIMIT_EXCEEDED))
    } else {
        Ok(v)
    }
}

/// The name compiled rules call `matches` by ([`super::compile`] renames the calls), so
/// that it runs [`matches`], which caches its patterns, rather than the standard
/// library's, which compiles its pattern on every call.
pub const MATCHES: &str = "@matches";

fn matches(This(this): This<Arc<String>>, re: Arc<String>) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(regex("matches", &re)?.is_match(&this)))
}

fn find(This(this): This<Arc<String>>, re: Arc<String>) -> Result<Value, ExecutionError> {
    let found = regex("find", &re)?
        .find(&this)
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    Ok(Value::String(Arc::new(found)))
}

fn find_all(This(this): This<Arc<String>>, re: Arc<String>) -> Result<Value, ExecutionError> {
    let all = regex("findAll", &re)?
        .find_iter(&this)
        .map(|m| Value::String(Arc::new(m.as_str().to_string())))
        .collect();
    Ok(Value::List(Arc::new(all)))
}
