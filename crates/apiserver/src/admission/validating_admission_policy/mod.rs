//! ValidatingAdmissionPolicy: writes checked against the CEL of the policies their bindings
//! select, as kube-apiserver 1.32 does.
//!
//! Data flow: the policies and bindings come from their watch caches, compiled once per
//! change of either ([`Policies::current`], keyed on the caches' generations). For a
//! create, update or delete, every binding whose policy exists and whose policy's
//! `matchConstraints` and own `matchResources` select the request (see [`matching`]) is
//! evaluated: the parameter object (`paramRef`, by name or selector, of the policy's
//! `paramKind`) is looked up, the `matchConditions` must all hold, the `variables` are
//! computed in order, and each validation must be true. The CEL variables are `object`,
//! `oldObject` (null on a create, `object` null on a delete), `request` (kind, resource,
//! subresource, name, namespace, operation, userInfo, dryRun), `params`, `namespaceObject`
//! and `variables`.
//!
//! A failed validation does what the binding's `validationActions` say: `Deny` refuses the
//! request (`ValidatingAdmissionPolicy 'P' with binding 'B' denied request: MESSAGE`, with
//! the validation's `reason`, 422 `Invalid` by default), `Warn` adds a warning to the
//! response, `Audit` is recorded in the server's log. An expression that cannot be evaluated
//! (or a missing parameter) refuses the request under `failurePolicy: Fail` and skips the
//! binding under `Ignore`. Not supported: `auditAnnotations` (kept, not evaluated) and the
//! `authorizer` variable.

pub mod matching;

use crate::auth::user_info::UserInfo;
use crate::handlers::state::ApiServer;
use crate::registry::admission_policy::{compile_all, CompiledPolicy, Expression, FailurePolicy};
use crate::registry::apiextensions::cel::library::with_scope;
use crate::registry::apiextensions::cel::value::to_cel;
use crate::registry::namespace_lifecycle::forbidden;
use crate::registry::ResourceInfo;
use api::{Reason, Status};
use cel::objects::{Key, Map as CelMap};
use cel::{Context, Value as Cel};
use parking_lot::RwLock;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A create.
    Create,
    /// An update or patch (of the object or a subresource).
    Update,
    /// A delete.
    Delete,
}

impl Operation {
    /// The name rules use: `CREATE`, `UPDATE`, `DELETE`.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// A write under admission.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The resource written.
    pub info: &'a ResourceInfo,
    /// The subresource (`""` for the object itself).
    pub subresource: &'a str,
    /// The namespace (`""` for cluster-scoped objects).
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// What the request does.
    pub operation: Operation,
    /// The object as it would be stored (`None` for a delete).
    pub object: Option<&'a Map<String, Value>>,
    /// The stored object (`None` for a create).
    pub old_object: Option<&'a Map<String, Value>>,
    /// Who asks (`None`: the loopback port's unsecured user).
    pub user: Option<&'a UserInfo>,
    /// A dry run.
    pub dry_run: bool,
}

/// A binding ready to apply.
#[derive(Debug)]
struct Binding {
    name: String,
    policy: String,
    match_resources: Option<Value>,
    param_ref: Option<Value>,
    deny: bool,
    warn: bool,
    audit: bool,
}

/// Every policy and binding, compiled.
#[derive(Debug, Default)]
struct Compiled {
    policies: HashMap<String, CompiledPolicy>,
    bindings: Vec<Binding>,
}

/// The compiled policies and bindings, with the generations of the two caches they were
/// compiled from.
type Snapshot = ((u64, u64), Arc<Compiled>);

/// The compiled policies of a server, rebuilt when a policy or binding changes.
#[derive(Debug, Default)]
pub struct Policies {
    current: RwLock<Option<Snapshot>>,
    rebuild: tokio::sync::Mutex<()>,
}

impl Policies {
    /// The compiled policies and bindings as the caches hold them now.
    async fn current(&self, srv: &ApiServer) -> Arc<Compiled> {
        let (Some(pi), Some(bi)) = (
            crate::registry::resources::find(GROUP, "v1", "validatingadmissionpolicies"),
            crate::registry::resources::find(GROUP, "v1", "validatingadmissionpolicybindings"),
        ) else {
            return Arc::default();
        };
        let (Ok(pc), Ok(bc)) = (srv.cacher(pi), srv.cacher(bi)) else {
            return Arc::default();
        };
        let generation = (pc.generation(), bc.generation());
        if let Some((g, c)) = &*self.current.read() {
            if *g == generation {
                return c.clone();
            }
        }
        let _one = self.rebuild.lock().await;
        let generation = (pc.generation(), bc.generation());
        if let Some((g, c)) = &*self.current.read() {
            if *g == generation {
                return c.clone();
            }
        }
        let bindings: Vec<Binding> = bc
            .objects()
            .iter()
            .filter_map(|o| serde_json::from_slice::<Value>(&o.json).ok())
            .map(|b| {
                let spec = b.get("spec").cloned().unwrap_or(Value::Null);
                let actions: Vec<&str> = spec
                    .get("validationActions")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                Binding {
                    name: b
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    policy: spec
                        .get("policyName")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    match_resources: spec.get("matchResources").cloned(),
                    param_ref: spec.get("paramRef").cloned(),
                    deny: actions.contains(&"Deny"),
                    warn: actions.contains(&"Warn"),
                    audit: actions.contains(&"Audit"),
                }
            })
            .collect();
        let policies: Vec<Value> = if bindings.is_empty() {
            Vec::new()
        } else {
            pc.objects()
                .iter()
                .filter_map(|o| serde_json::from_slice::<Value>(&o.json).ok())
                .collect()
        };
        let compiled = tokio::task::spawn_blocking(move || compile_all(&policies))
            .await
            .unwrap_or_default();
        let c = Arc::new(Compiled {
            policies: compiled.into_iter().map(|p| (p.name.clone(), p)).collect(),
            bindings,
        });
        *self.current.write() = Some((generation, c.clone()));
        c
    }
}

const GROUP: &str = "admissionregistration.k8s.io";

/// Whether any ValidatingAdmissionPolicyBinding exists (cheap: one cache lookup), so that
/// a caller can skip preparing a request no policy could select.
pub fn has_bindings(srv: &ApiServer) -> bool {
    crate::registry::resources::find(GROUP, "v1", "validatingadmissionpolicybindings")
        .and_then(|bi| srv.cacher(bi).ok())
        .is_some_and(|c| {
            let filter = crate::cacher::Filter::everything(c.info(), None);
            !c.list_from_cache(&filter, "", 1).items.is_empty()
        })
}

/// Why one binding's evaluation could not finish.
struct EvalError(String);

/// Checks `req` against every policy binding that selects it; answers the warnings to add
/// to the response.
///
/// # Errors
/// The Status of the first binding that denies the request.
pub async fn admit(srv: &ApiServer, req: &Request<'_>) -> Result<Vec<String>, Status> {
    let compiled = srv.admission_policies().current(srv).await;
    if compiled.bindings.is_empty() {
        return Ok(Vec::new());
    }
    let namespace = namespace_object(srv, req);
    let mut warnings = Vec::new();
    for binding in &compiled.bindings {
        let Some(policy) = compiled.policies.get(&binding.policy) else {
            continue;
        };
        if !matching::matches(Some(&policy.match_constraints), req, namespace.as_ref())
            || !matching::matches(binding.match_resources.as_ref(), req, namespace.as_ref())
        {
            continue;
        }
        let params = match params(srv, policy, binding, req) {
            Ok(p) => p,
            Err(e) => {
                fail(policy, binding, req, e, &mut warnings)?;
                continue;
            }
        };
        for param in params {
            let outcome = evaluate(policy, req, namespace.as_ref(), param.as_ref());
            match outcome {
                Ok(failures) => {
                    for (message, reason) in failures {
                        act(policy, binding, req, &message, &reason, &mut warnings)?;
                    }
                }
                Err(e) => fail(policy, binding, req, e, &mut warnings)?,
            }
        }
    }
    Ok(warnings)
}

/// What a binding does with a validation that failed.
fn act(
    policy: &CompiledPolicy,
    binding: &Binding,
    req: &Request<'_>,
    message: &str,
    reason: &str,
    warnings: &mut Vec<String>,
) -> Result<(), Status> {
    if binding.audit {
        tracing::info!(policy = %policy.name, binding = %binding.name, resource = req.info.resource, name = req.name, "validation failed: {message}");
    }
    if binding.warn {
        warnings.push(format!(
            "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {message}",
            policy.name, binding.name
        ));
    }
    if binding.deny {
        let mut s = forbidden(
            req.info,
            req.name,
            &format!(
                "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {message}",
                policy.name, binding.name
            ),
        );
        s.reason = match reason {
            "Unauthorized" => Reason::Unauthorized,
            "Forbidden" => Reason::Forbidden,
            "RequestEntityTooLarge" => Reason::RequestEntityTooLarge,
            _ => Reason::Invalid,
        };
        return Err(s);
    }
    Ok(())
}

/// What a binding does when its policy could not be evaluated.
fn fail(
    policy: &CompiledPolicy,
    binding: &Binding,
    req: &Request<'_>,
    e: EvalError,
    warnings: &mut Vec<String>,
) -> Result<(), Status> {
    match policy.failure_policy {
        FailurePolicy::Ignore => Ok(()),
        FailurePolicy::Fail => act(policy, binding, req, &e.0, "Invalid", warnings),
    }
}

/// The namespace of a namespaced request, from the cache.
fn namespace_object(srv: &ApiServer, req: &Request<'_>) -> Option<Map<String, Value>> {
    if !req.info.namespaced || req.namespace.is_empty() {
        return None;
    }
    let info = crate::registry::resources::find("", "v1", "namespaces")?;
    let cached = srv.cacher(info).ok()?.get_cached(req.namespace)?;
    serde_json::from_slice(&cached.json).ok()
}

/// The parameter objects a binding gives its policy: `[None]` for a policy without
/// parameters; by `paramRef.name`, or every object `paramRef.selector` picks, in the
/// request's namespace unless `paramRef.namespace` says otherwise.
fn params(
    srv: &ApiServer,
    policy: &CompiledPolicy,
    binding: &Binding,
    req: &Request<'_>,
) -> Result<Vec<Option<Value>>, EvalError> {
    let Some((api_version, kind)) = &policy.param_kind else {
        return Ok(vec![None]);
    };
    let Some(pref) = &binding.param_ref else {
        return Err(EvalError(format!(
            "policy '{}' has paramKind but binding '{}' has no paramRef",
            policy.name, binding.name
        )));
    };
    let info = crate::registry::resources::RESOURCES
        .iter()
        .chain(srv.custom_resources().all())
        .find(|i| i.api_version() == *api_version && i.kind == kind.as_str())
        .ok_or_else(|| EvalError(format!("paramKind {api_version} {kind} is not served")))?;
    let cacher = srv
        .cacher(info)
        .map_err(|_| EvalError(format!("paramKind {api_version} {kind} is not served")))?;
    let ns = match pref.get("namespace").and_then(Value::as_str) {
        Some(n) => n,
        None if info.namespaced => req.namespace,
        None => "",
    };
    let mut found = Vec::new();
    if let Some(name) = pref.get("name").and_then(Value::as_str) {
        if let Some(o) = cacher.get_cached(&info.object_key(ns, name)) {
            found.extend(serde_json::from_slice::<Value>(&o.json).ok());
        }
    } else {
        let selector = pref.get("selector").cloned().unwrap_or(json!({}));
        let sel = api::labels::LabelSelector::from_object(&selector)
            .map_err(|e| EvalError(format!("paramRef.selector: {e}")))?;
        for o in cacher.objects() {
            if info.namespaced && o.namespace != ns {
                continue;
            }
            if sel.as_ref().is_some_and(|s| s.matches(&o.labels)) {
                found.extend(serde_json::from_slice::<Value>(&o.json).ok());
            }
        }
    }
    if found.is_empty() {
        let allow = pref.get("parameterNotFoundAction").and_then(Value::as_str) == Some("Allow");
        if allow {
            return Ok(Vec::new());
        }
        return Err(EvalError(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        ));
    }
    Ok(found.into_iter().map(Some).collect())
}

/// `request` as CEL sees it.
fn request_value(req: &Request<'_>) -> Value {
    let user = match req.user {
        Some(u) => json!({"username": u.name, "uid": u.uid, "groups": u.groups}),
        None => {
            json!({"username": "system:unsecured", "groups": ["system:masters", "system:authenticated"]})
        }
    };
    json!({
        "kind": {"group": req.info.group, "version": req.info.version, "kind": req.info.kind},
        "resource": {"group": req.info.group, "version": req.info.version, "resource": req.info.resource},
        "subResource": req.subresource,
        "requestKind": {"group": req.info.group, "version": req.info.version, "kind": req.info.kind},
        "requestResource": {"group": req.info.group, "version": req.info.version, "resource": req.info.resource},
        "name": req.name,
        "namespace": req.namespace,
        "operation": req.operation.name(),
        "userInfo": user,
        "dryRun": req.dry_run,
    })
}

fn resolve(e: &Expression, scope: &Context<'_, '_>) -> Result<Cel, String> {
    let program = e
        .program
        .as_ref()
        .map_err(|m| format!("compilation failed: {m}"))?;
    Cel::resolve(program, scope).map_err(|e| e.to_string())
}

/// Evaluates `policy` for `req` with parameter `param`: the failed validations' messages
/// and reasons (empty when the match conditions do not hold or everything passed).
fn evaluate(
    policy: &CompiledPolicy,
    req: &Request<'_>,
    namespace: Option<&Map<String, Value>>,
    param: Option<&Value>,
) -> Result<Vec<(String, String)>, EvalError> {
    let as_cel = |m: Option<&Map<String, Value>>| match m {
        Some(m) => to_cel(&Value::Object(m.clone()), None, false),
        None => to_cel(&Value::Null, None, false),
    };
    with_scope(|scope| {
        scope.add_variable_as_val("object", as_cel(req.object));
        scope.add_variable_as_val("oldObject", as_cel(req.old_object));
        scope.add_variable_as_val("request", to_cel(&request_value(req), None, false));
        scope.add_variable_as_val("namespaceObject", as_cel(namespace));
        scope.add_variable_as_val("params", to_cel(param.unwrap_or(&Value::Null), None, false));
        scope.add_variable_from_value(
            "variables",
            Cel::Map(CelMap {
                map: Arc::default(),
            }),
        );
        for (name, cond) in &policy.match_conditions {
            match resolve(cond, scope) {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => return Ok(Vec::new()),
                Ok(other) => {
                    return Err(EvalError(format!(
                        "matchCondition '{name}' evaluated to {} instead of a bool",
                        other.type_of()
                    )))
                }
                Err(e) => {
                    return Err(EvalError(format!(
                        "failed to evaluate matchCondition '{name}': {e}"
                    )))
                }
            }
        }
        let mut vars: HashMap<Key, Cel> = HashMap::new();
        for (name, var) in &policy.variables {
            // A variable that fails is left out: an expression using it then fails.
            if let Ok(v) = resolve(var, scope) {
                vars.insert(Key::String(Arc::new(name.clone())), v);
                scope.add_variable_from_value(
                    "variables",
                    Cel::Map(CelMap {
                        map: Arc::new(vars.clone()),
                    }),
                );
            }
        }
        let mut failures = Vec::new();
        for v in &policy.validations {
            match resolve(&v.expression, scope) {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => {
                    let from_expression =
                        v.message_expression
                            .as_ref()
                            .and_then(|m| match resolve(m, scope) {
                                Ok(Cel::String(s)) if !s.trim().is_empty() => {
                                    Some(s.trim().to_string())
                                }
                                _ => None,
                            });
                    let message = from_expression.unwrap_or_else(|| {
                        if v.message.is_empty() {
                            format!("failed expression: {}", v.expression.source.trim())
                        } else {
                            v.message.clone()
                        }
                    });
                    failures.push((message, v.reason.clone()));
                }
                Ok(other) => {
                    return Err(EvalError(format!(
                        "expression '{}' resulted in error: evaluated to {} instead of a bool",
                        v.expression.source.trim(),
                        other.type_of()
                    )))
                }
                Err(e) => {
                    return Err(EvalError(format!(
                        "expression '{}' resulted in error: {e}",
                        v.expression.source.trim()
                    )))
                }
            }
        }
        Ok(failures)
    })
}
