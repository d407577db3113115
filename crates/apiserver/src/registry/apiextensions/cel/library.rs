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
