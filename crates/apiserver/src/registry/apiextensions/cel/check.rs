//! What a rule is checked for when its CRD is written, beyond parsing: every name it uses
//! is declared (`self`, `oldSelf`, the variables of its macros) and every field it selects
//! from a declared object exists in the schema, as Kubernetes' type checker requires; the
//! result is a `bool` (a `string` for a `messageExpression`) when that can be told; and its
//! worst-case cost is estimated ([`Est::cost`]) from the schema's `maxItems`, `maxLength`
//! and `maxProperties` (unbounded ones from the largest request the server takes).
//!
//! Costs follow Kubernetes' units in spirit: one per select, call, index or comparison; a
//! tenth per character or element traversed by a string or list function or a deep
//! comparison; a macro's body once per element of what it ranges over; functions that build
//! strings or lists are priced by the size of what they build. The estimate aims to bound
//! the work an evaluation does (there is no meter at run time: cel-rust has no hook for one),
//! and refuses what Kubernetes refuses: loops in loops over lists without `maxItems`.

use super::super::structural::Node;
use super::value::escape;
use cel::common::ast::{operators as op, Expr, IdedExpr, LiteralValue, SourceInfo};

/// The largest request body the server takes: what bounds a list, map or string whose
/// schema does not.
pub const MAX_REQUEST_BYTES: u64 = 3 * 1024 * 1024;

/// A value's type as far as the checker can tell, with the size bound the cost estimate
/// uses.
#[derive(Clone, Debug)]
pub enum Ty<'a> {
    /// Anything (int-or-string, free-form, or not inferred).
    Dyn,
    /// `bool`.
    Bool,
    /// `int`.
    Int,
    /// `uint`.
    Uint,
    /// `double`.
    Double,
    /// `null`.
    Null,
    /// `bytes`.
    Bytes,
    /// A type value (`int`, `string`, ... used as values).
    Type,
    /// `string`, at most this many characters.
    String(u64),
    /// `list`, of this element type and at most this many elements.
    List(Box<Ty<'a>>, u64),
    /// `map` with string keys, of this value type and at most this many entries.
    Map(Box<Ty<'a>>, u64),
    /// A declared object; `true` at a resource's root (with `apiVersion`, `kind` and
    /// `metadata`).
    Object(&'a Node, bool),
    /// A resource's `metadata`: `name` and `generateName` only.
    Metadata,
}

impl Ty<'_> {
    fn name(&self) -> String {
        match self {
            Ty::Dyn => "dyn".into(),
            Ty::Bool => "bool".into(),
            Ty::Int => "int".into(),
            Ty::Uint => "uint".into(),
            Ty::Double => "double".into(),
            Ty::Null => "null_type".into(),
            Ty::Bytes => "bytes".into(),
            Ty::Type => "type".into(),
            Ty::String(_) => "string".into(),
            Ty::List(e, _) => format!("list({})", e.name()),
            Ty::Map(v, _) => format!("map(string, {})", v.name()),
            Ty::Object(..) | Ty::Metadata => "object".into(),
        }
    }

    /// The most elements (or characters) a value of this type can have.
    fn size(&self) -> u64 {
        match self {
            Ty::String(n) | Ty::List(_, n) | Ty::Map(_, n) => *n,
            Ty::Object(n, _) => n.properties.len() as u64 + 3,
            Ty::Dyn | Ty::Bytes => MAX_REQUEST_BYTES,
            _ => 1,
        }
    }

    fn is_bool(&self) -> bool {
        matches!(self, Ty::Bool | Ty::Dyn)
    }
}

/// The type a value at `n` has; `root` at a resource's root or an embedded resource.
pub fn node_ty(n: &Node, root: bool) -> Ty<'_> {
    if n.int_or_string {
        return Ty::Dyn;
    }
    match n.type_.as_deref() {
        Some("object") => {
            if !n.properties.is_empty() || root {
                Ty::Object(n, root)
            } else if let Some(v) = n.additional_properties.as_deref() {
                Ty::Map(Box::new(node_ty(v, v.embedded_resource)), max_properties(n))
            } else if n.preserve_unknown_fields {
                Ty::Dyn
            } else {
                Ty::Object(n, false)
            }
        }
        Some("array") => match n.items.as_deref() {
            Some(i) => Ty::List(Box::new(node_ty(i, i.embedded_resource)), max_items(n)),
            None => Ty::List(Box::new(Ty::Dyn), max_items(n)),
        },
        Some("string") => Ty::String(n.max_length.unwrap_or(MAX_REQUEST_BYTES - 2)),
        Some("integer") => Ty::Int,
        Some("number") => Ty::Double,
        Some("boolean") => Ty::Bool,
        _ => Ty::Dyn,
    }
}

/// The fewest bytes a value at `n` takes in a request.
fn min_serialized(n: Option<&Node>) -> u64 {
    match n.and_then(|n| n.type_.as_deref()) {
        Some("string") => 2 + n.and_then(|n| n.min_length).unwrap_or(0),
        Some("boolean") => 4,
        Some("object") | Some("array") => 2,
        _ => 1,
    }
}

/// The most elements a list at `n` can have.
pub fn max_items(n: &Node) -> u64 {
    n.max_items
        .unwrap_or((MAX_REQUEST_BYTES - 2) / (min_serialized(n.items.as_deref()) + 1))
}

/// The most entries a map at `n` can have (a key takes at least `"":` and a comma).
pub fn max_properties(n: &Node) -> u64 {
    n.max_properties.unwrap_or(
        (MAX_REQUEST_BYTES - 2) / (min_serialized(n.additional_properties.as_deref()) + 4),
    )
}

/// A checked expression: its type and worst-case cost.
#[derive(Clone, Debug)]
pub struct Est<'a> {
    /// What it evaluates to.
    pub ty: Ty<'a>,
    /// Its worst-case cost.
    pub cost: u64,
}

fn est(ty: Ty<'_>, cost: u64) -> Est<'_> {
    Est { ty, cost }
}

/// A tenth of `n`, rounded up: the cost of traversing `n` characters or elements.
fn tenth(n: u64) -> u64 {
    n.div_ceil(10)
}

/// The cost of comparing two values of type `t` element by element.
fn traversal(t: &Ty<'_>, depth: u32) -> u64 {
    if depth > 32 {
        return MAX_REQUEST_BYTES;
    }
    match t {
        Ty::String(n) => tenth(*n),
        Ty::List(e, n) | Ty::Map(e, n) => n.saturating_mul(1 + traversal(e, depth + 1)),
        Ty::Object(n, _) => n
            .properties
            .values()
            .map(|p| 1 + traversal(&node_ty(p, p.embedded_resource), depth + 1))
            .fold(1u64, u64::saturating_add),
        Ty::Dyn | Ty::Bytes => tenth(MAX_REQUEST_BYTES),
        _ => 1,
    }
}

/// Names a rule may use without declaring: types, and the namespaces of functions.
const GLOBALS: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
    "optional",
    "strings",
    "math",
    "lists",
    "base64",
    "sets",
    "format",
];

/// The functions this server's environment has ([`super::library`]): CEL's standard
/// library, the strings, lists and math extensions, optionals, and the Kubernetes functions
/// implemented here. A rule calling anything else (Kubernetes' `quantity`, `url`, `ip`,
/// `format` libraries, timestamps and durations) compiles, but cannot run here.
const FUNCTIONS: &[&str] = &[
    // Standard library.
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "dyn",
    "type",
    // Strings extension.
    "charAt",
    "indexOf",
    "lastIndexOf",
    "join",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "format",
    "strings.quote",
    "reverse",
    // Lists extension.
    "slice",
    "flatten",
    "distinct",
    "sort",
    "sortBy",
    "lists.range",
    // Math extension.
    "math.greatest",
    "math.least",
    "math.ceil",
    "math.floor",
    "math.round",
    "math.trunc",
    "math.abs",
    "math.sign",
    "math.isInf",
    "math.isNaN",
    "math.isFinite",
    "math.bitAnd",
    "math.bitOr",
    "math.bitXor",
    "math.bitNot",
    "math.bitShiftLeft",
    "math.bitShiftRight",
    // Optionals.
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "hasValue",
    "value",
    "or",
    "orValue",
    // Kubernetes' list and regex libraries.
    "isSorted",
    "sum",
    "min",
    "max",
    "find",
    "findAll",
];

/// Checks one expression against the variables in scope.
pub struct Checker<'a, 's> {
    src: &'s str,
    info: &'s SourceInfo,
    scope: Vec<(String, Ty<'a>)>,
    /// Functions called that this server does not have, in order of first use.
    pub unsupported: Vec<String>,
}

impl<'a, 's> Checker<'a, 's> {
    /// A checker of `src` (parsed with `info`) with `vars` in scope.
    pub fn new(src: &'s str, info: &'s SourceInfo, vars: Vec<(String, Ty<'a>)>) -> Self {
        Checker {
            src,
            info,
            scope: vars,
            unsupported: Vec::new(),
        }
    }

    /// `msg` located at node `id`, worded as cel-go words compile errors.
    pub fn error(&self, id: u64, msg: &str) -> String {
        located(self.src, self.info, id, msg)
    }

    fn lookup(&self, name: &str) -> Option<&Ty<'a>> {
        self.scope
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
    }

    /// The type and cost of `e`, or the first error in it.
    pub fn check(&mut self, e: &IdedExpr) -> Result<Est<'a>, String> {
        match &e.expr {
            Expr::Unspecified => Ok(est(Ty::Dyn, 0)),
            Expr::Literal(l) => Ok(est(
                match l {
                    LiteralValue::Boolean(_) => Ty::Bool,
                    LiteralValue::Int(_) => Ty::Int,
                    LiteralValue::UInt(_) => Ty::Uint,
                    LiteralValue::Double(_) => Ty::Double,
                    LiteralValue::Null => Ty::Null,
                    LiteralValue::Bytes(_) => Ty::Bytes,
                    LiteralValue::String(s) => Ty::String(s.inner().chars().count() as u64),
                },
                0,
            )),
            Expr::Ident(name) => match self.lookup(name) {
                Some(t) => Ok(est(t.clone(), 1)),
                None if GLOBALS.contains(&name.as_str()) => Ok(est(Ty::Type, 1)),
                None => Err(self.error(
                    e.id,
                    &format!("undeclared reference to '{name}' (in container '')"),
                )),
            },
            Expr::Select(s) => {
                let operand = self.check(&s.operand)?;
                let ty = self.select(e.id, &operand.ty, &s.field)?;
                let ty = if s.test { Ty::Bool } else { ty };
                Ok(est(ty, operand.cost.saturating_add(1)))
            }
            Expr::List(l) => {
                let mut cost = 1u64;
                let mut elem = None;
                for x in &l.elements {
                    let x = self.check(x)?;
                    cost = cost.saturating_add(x.cost);
                    elem.get_or_insert(x.ty);
                }
                let n = l.elements.len() as u64;
                Ok(est(Ty::List(Box::new(elem.unwrap_or(Ty::Dyn)), n), cost))
            }
            Expr::Map(m) => {
                let mut cost = 1u64;
                for entry in &m.entries {
                    match &entry.expr {
                        cel::common::ast::EntryExpr::MapEntry(me) => {
                            cost = cost
                                .saturating_add(self.check(&me.key)?.cost)
                                .saturating_add(self.check(&me.value)?.cost);
                        }
                        cel::common::ast::EntryExpr::StructField(f) => {
                            cost = cost.saturating_add(self.check(&f.value)?.cost);
                        }
                    }
                }
                Ok(est(
                    Ty::Map(Box::new(Ty::Dyn), m.entries.len() as u64),
                    cost,
                ))
            }
            Expr::Struct(s) => {
                let mut cost = 1u64;
                for entry in &s.entries {
                    if let cel::common::ast::EntryExpr::StructField(f) = &entry.expr {
                        cost = cost.saturating_add(self.check(&f.value)?.cost);
                    }
                }
                Ok(est(Ty::Dyn, cost))
            }
            Expr::Comprehension(c) => {
                let range = self.check(&c.iter_range)?;
                let (elem, iterations) = match &range.ty {
                    Ty::List(e, n) => ((**e).clone(), *n),
                    // Kubernetes gives a map's keys no size for costs.
                    Ty::Map(_, n) => (Ty::String(0), *n),
                    Ty::Object(n, _) => (Ty::String(253), n.properties.len() as u64),
                    other => (Ty::Dyn, other.size()),
                };
                let init = self.check(&c.accu_init)?;
                let accu_ty = match &init.ty {
                    Ty::List(_, _) => Ty::List(Box::new(Ty::Dyn), iterations),
                    t => t.clone(),
                };
                let mark = self.scope.len();
                self.scope.push((c.iter_var.clone(), elem.clone()));
                if let Some(v2) = &c.iter_var2 {
                    self.scope.push((v2.clone(), Ty::Dyn));
                }
                self.scope.push((c.accu_var.clone(), accu_ty.clone()));
                let body = self
                    .check(&c.loop_cond)
                    .and_then(|cond| Ok((cond, self.check(&c.loop_step)?)));
                let result = body.and_then(|b| Ok((b, self.check(&c.result)?)));
                self.scope.truncate(mark);
                let ((cond, step), result) = result?;
                let per_element = cond.cost.saturating_add(step.cost).saturating_add(1);
                let cost = range
                    .cost
                    .saturating_add(init.cost)
                    .saturating_add(iterations.saturating_mul(per_element))
                    .saturating_add(result.cost);
                // `map` and `filter` append to their accumulator: its element type is what
                // the step's list holds (see the `_+_` rule below), once per element.
                let ty = match (&result.ty, &c.result.expr, &step.ty) {
                    (Ty::List(_, _), Expr::Ident(n), Ty::List(e, _)) if *n == c.accu_var => {
                        Ty::List(e.clone(), iterations)
                    }
                    (Ty::List(_, _), Expr::Ident(n), _) if *n == c.accu_var => {
                        Ty::List(Box::new(Ty::Dyn), iterations)
                    }
                    (t, _, _) => t.clone(),
                };
                Ok(est(ty, cost))
            }
            Expr::Call(call) => self.call(call),
        }
    }

    fn select(&self, id: u64, on: &Ty<'a>, field: &str) -> Result<Ty<'a>, String> {
        match on {
            Ty::Object(n, root) => {
                if *root {
                    match field {
                        "apiVersion" | "kind" => return Ok(Ty::String(316)),
                        "metadata" => return Ok(Ty::Metadata),
                        _ => {}
                    }
                }
                let found = n
                    .properties
                    .iter()
                    .find(|(k, _)| escape(k).as_deref() == Some(field));
                match found {
                    Some((_, p)) => Ok(node_ty(p, p.embedded_resource)),
                    None if n.preserve_unknown_fields => Ok(Ty::Dyn),
                    None => Err(self.error(id, &format!("undefined field '{field}'"))),
                }
            }
            Ty::Metadata => match field {
                "name" | "generateName" => Ok(Ty::String(253)),
                _ => Err(self.error(id, &format!("undefined field '{field}'"))),
            },
            Ty::Map(v, _) => Ok((**v).clone()),
            Ty::Dyn | Ty::Type => Ok(Ty::Dyn),
            other => Err(self.error(
                id,
                &format!("type '{}' does not support field selection", other.name()),
            )),
        }
    }

    fn call(&mut self, call: &cel::common::ast::CallExpr) -> Result<Est<'a>, String> {
        // A call on a namespace (`strings.quote(x)`, `optional.of(x)`) has no receiver.
        let mut qualified = None;
        let target = match call.target.as_deref() {
            Some(IdedExpr {
                expr: Expr::Ident(n),
                ..
            }) if self.lookup(n).is_none() && GLOBALS.contains(&n.as_str()) => {
                qualified = Some(format!("{n}.{}", call.func_name));
                None
            }
            Some(t) => Some(self.check(t)?),
            None => None,
        };
        let name = qualified.as_deref().unwrap_or(call.func_name.as_str());
        let operator = name.starts_with('_')
            || name.starts_with('@')
            || matches!(name, op::LOGICAL_NOT | op::NEGATE);
        // Kubernetes' list `indexOf` and `lastIndexOf`: cel-rust has only the strings' ones.
        let list_search = matches!(name, "indexOf" | "lastIndexOf")
            && matches!(target.as_ref().map(|t| &t.ty), Some(Ty::List(..)));
        let known = operator || (FUNCTIONS.contains(&name) && !list_search);
        if !known && !self.unsupported.iter().any(|u| u == name) {
            self.unsupported.push(name.to_string());
        }
        let mut args = Vec::with_capacity(call.args.len());
        for a in &call.args {
            args.push(self.check(a)?);
        }
        let base = args
            .iter()
            .chain(target.iter())
            .map(|a| a.cost)
            .fold(0u64, u64::saturating_add);
        let recv = target.as_ref().or(args.first()).map(|a| &a.ty);
        let recv_size = recv.map(Ty::size).unwrap_or(1);
        let arg_ty = |i: usize| args.get(i).map(|a| a.ty.clone()).unwrap_or(Ty::Dyn);
        let (ty, own): (Ty<'a>, u64) = match call.func_name.as_str() {
            op::LOGICAL_AND | op::LOGICAL_OR | op::LOGICAL_NOT | op::NOT_STRICTLY_FALSE => {
                (Ty::Bool, 0)
            }
            op::CONDITIONAL => {
                // Only one branch runs: the dearer one counts.
                let cond = args.first().map(|a| a.cost).unwrap_or(0);
                let branch = args.iter().skip(1).map(|a| a.cost).max().unwrap_or(0);
                let ty = match (arg_ty(1), arg_ty(2)) {
                    (Ty::Bool, Ty::Bool) => Ty::Bool,
                    (Ty::String(a), Ty::String(b)) => Ty::String(a.max(b)),
                    (a, _) => a,
                };
                return Ok(est(ty, cond.saturating_add(branch)));
            }
            op::EQUALS | op::NOT_EQUALS => {
                let a = traversal(&arg_ty(0), 0);
                let b = traversal(&arg_ty(1), 0);
                (Ty::Bool, 1 + a.min(b))
            }
            op::LESS | op::LESS_EQUALS | op::GREATER | op::GREATER_EQUALS => {
                (Ty::Bool, 1 + tenth(arg_ty(0).size().min(arg_ty(1).size())))
            }
            op::ADD => match (arg_ty(0), arg_ty(1)) {
                (Ty::String(a), Ty::String(b)) => (
                    Ty::String(a.saturating_add(b)),
                    1 + tenth(a.saturating_add(b)),
                ),
                (Ty::List(e, a), Ty::List(f, b)) => {
                    let e = if matches!(*e, Ty::Dyn) { f } else { e };
                    (
                        Ty::List(e, a.saturating_add(b)),
                        1 + tenth(a.saturating_add(b)),
                    )
                }
                (a @ (Ty::Dyn | Ty::Bytes), b) | (b, a @ (Ty::Dyn | Ty::Bytes)) => {
                    // Strings, bytes or lists of unknown size: as long as both together.
                    let n = a.size().saturating_add(b.size());
                    (Ty::Dyn, 1 + tenth(n))
                }
                (t, _) => (t, 1),
            },
            op::SUBSTRACT | op::MULTIPLY | op::DIVIDE | op::MODULO | op::NEGATE => (arg_ty(0), 1),
            op::INDEX | op::OPT_INDEX => (
                match arg_ty(0) {
                    Ty::List(e, _) | Ty::Map(e, _) => *e,
                    Ty::Object(..) | Ty::Metadata => Ty::Dyn,
                    _ => Ty::Dyn,
                },
                1,
            ),
            op::OPT_SELECT => (Ty::Dyn, 1),
            op::IN => match arg_ty(1) {
                Ty::List(_, n) => (Ty::Bool, 1 + n),
                _ => (Ty::Bool, 1),
            },
            "size" => (Ty::Int, 1),
            "matches" | "find" | "findAll" => {
                let re_len = match call.args.last().map(|a| &a.expr) {
                    Some(Expr::Literal(LiteralValue::String(s))) => s.inner().len() as u64,
                    _ => args
                        .last()
                        .map(|a| a.ty.size())
                        .unwrap_or(MAX_REQUEST_BYTES),
                };
                let cost = (1 + tenth(recv_size)).saturating_mul(1 + re_len / 4);
                let ty = match call.func_name.as_str() {
                    "matches" => Ty::Bool,
                    "find" => Ty::String(recv_size),
                    _ => Ty::List(Box::new(Ty::String(recv_size)), recv_size),
                };
                (ty, cost)
            }
            "contains" => (Ty::Bool, 1 + tenth(recv_size)),
            // Only as much of the receiver as the argument is long is compared.
            "startsWith" | "endsWith" => (Ty::Bool, 1 + tenth(arg_ty(0).size())),
            "indexOf" | "lastIndexOf" => (Ty::Int, 1 + tenth(recv_size).max(1)),
            "split" => (
                Ty::List(Box::new(Ty::String(recv_size)), recv_size),
                1 + tenth(recv_size),
            ),
            "join" => {
                let elem = match recv {
                    Some(Ty::List(e, _)) => e.size(),
                    _ => MAX_REQUEST_BYTES,
                };
                let sep = args.first().map(|a| a.ty.size()).unwrap_or(0);
                let n = recv_size.saturating_mul(elem.saturating_add(sep));
                (Ty::String(n), 1 + tenth(n))
            }
            "replace" => {
                // Every position may take the replacement: `''` by `x` grows a string of
                // n characters to (n + 1) x |x| + n.
                let with = args.get(1).map(|a| a.ty.size()).unwrap_or(0);
                let n = recv_size
                    .saturating_add(1)
                    .saturating_mul(with)
                    .saturating_add(recv_size);
                (Ty::String(n), 1 + tenth(n))
            }
            "format" => {
                let n = args
                    .iter()
                    .map(|a| traversal(&a.ty, 0).saturating_mul(10))
                    .fold(recv_size, u64::saturating_add);
                (Ty::String(n), 1 + tenth(n))
            }
            "lists.range" => {
                let n = match call.args.first().map(|a| &a.expr) {
                    Some(Expr::Literal(LiteralValue::Int(i))) => (*i.inner()).max(0) as u64,
                    _ => 1_000_000,
                };
                (Ty::List(Box::new(Ty::Int), n), 1 + n)
            }
            "lowerAscii" | "upperAscii" | "trim" | "substring" | "charAt" | "reverse"
            | "strings.quote" => match recv {
                Some(Ty::List(e, n)) => (Ty::List(e.clone(), *n), 1 + n),
                _ => (Ty::String(recv_size), 1 + tenth(recv_size)),
            },
            "isSorted" => (Ty::Bool, 1 + recv_size),
            "sum" | "min" | "max" => (
                match recv {
                    Some(Ty::List(e, _)) => (**e).clone(),
                    _ => Ty::Dyn,
                },
                1 + recv_size,
            ),
            "sort" => {
                let n = recv_size;
                let log = 64 - n.leading_zeros() as u64;
                (
                    recv.cloned().unwrap_or(Ty::Dyn),
                    1 + n.saturating_mul(log.max(1)),
                )
            }
            // cel-rust compares every pair.
            "distinct" => (
                recv.cloned().unwrap_or(Ty::Dyn),
                1 + recv_size.saturating_mul(recv_size),
            ),
            "flatten" | "slice" => (
                Ty::List(Box::new(Ty::Dyn), MAX_REQUEST_BYTES),
                1 + recv_size,
            ),
            "int" => (Ty::Int, 1 + tenth(recv_size)),
            "uint" => (Ty::Uint, 1 + tenth(recv_size)),
            "double" => (Ty::Double, 1 + tenth(recv_size)),
            "string" => (Ty::String(recv_size.max(24)), 1 + tenth(recv_size)),
            "bool" => (Ty::Bool, 1),
            "bytes" => (Ty::Bytes, 1 + tenth(recv_size)),
            "type" => (Ty::Type, 1),
            "dyn" => (Ty::Dyn, 1),
            _ => (Ty::Dyn, 1 + tenth(recv_size)),
        };
        Ok(est(ty, base.saturating_add(own)))
    }
}

/// Whether `e` evaluates to a `bool`, as far as its type could be told.
pub fn may_be_bool(e: &Est<'_>) -> bool {
    e.ty.is_bool()
}

/// Whether `e` evaluates to a `string`, as far as its type could be told.
pub fn may_be_string(e: &Est<'_>) -> bool {
    matches!(e.ty, Ty::String(_) | Ty::Dyn)
}

/// `msg` located at node `id` of `src`: `ERROR: <input>:LINE:COL: msg`, the line, and a
/// caret under the column.
pub fn located(src: &str, info: &SourceInfo, id: u64, msg: &str) -> String {
    let start = info.offset_for(id).map(|(s, _)| s as usize).unwrap_or(0);
    let before: String = src.chars().take(start).collect();
    let line = before.matches('\n').count() + 1;
    let col = before.chars().rev().take_while(|c| *c != '\n').count() + 1;
    let text = src.lines().nth(line - 1).unwrap_or("");
    format!(
        "ERROR: <input>:{line}:{col}: {msg}\n | {text}\n | {}^",
        ".".repeat(col - 1)
    )
}
