//! The server's state: the storage, one cacher per resource and the metrics, what starts
//! them (the initial namespaces, the event TTL sweep, the service allocation repair), and the
//! options of writes. It assumes it is built once per server and shared as an
//! `Arc<ApiServer>` by every connection. It lives with the handlers, which all work on it,
//! so that they need nothing from the transport above them (`server`).

use crate::auth::rbac::escalation;
use crate::auth::service_account_token::ServiceAccountTokens;
use crate::auth::user_info::UserInfo;
use crate::auth::Authorizer;
use crate::cacher::cacher::CacherOptions;
use crate::cacher::Cacher;
use crate::handlers;
use crate::metrics::Metrics;
use crate::registry::apiextensions::CustomResources;
use crate::registry::field_validation::FieldValidation;
use crate::registry::{ResourceInfo, RESOURCES};
use api::Status;
use parking_lot::RwLock;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;
use storage::Storage;

/// Server settings.
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    /// Watch cache tunables, shared by every resource.
    pub cacher: CacherOptions,
    /// How long events live after their last activity (`--event-ttl`); `None`: one hour,
    /// kube-apiserver's default. See [`handlers::event_ttl`].
    pub event_ttl: Option<Duration>,
    /// The P-256 key (PKCS#8 DER) ServiceAccount tokens are signed with; `None`: a new one
    /// for this run (tokens then die with the process).
    pub service_account_key: Option<Vec<u8>>,
    /// Requests in flight (kube-apiserver's `--max-requests-inflight` and
    /// `--max-mutating-requests-inflight`), shared fairly between users; see
    /// [`crate::flow_control`].
    pub max_in_flight: crate::flow_control::Limits,
    /// Where audit events go and which (`--audit-log-path`, `--audit-policy-file`);
    /// `None`: no audit log.
    pub audit: Option<Arc<crate::audit::Auditor>>,
    /// Admission plugins turned off (`--disable-admission-plugins`).
    pub admission_disabled: crate::admission::Disabled,
    /// Leave the `default` ServiceAccounts to a controller-manager, as kube-apiserver does
    /// (see [`handlers::default_service_account`]).
    pub no_default_service_accounts: bool,
}

/// Options common to writes, from the query string.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// `fieldValidation`: what to do about fields the kind does not have.
    pub field_validation: FieldValidation,
    /// Warnings a handler found (sent as `Warning: 299 - "…"` headers).
    pub warnings: Arc<parking_lot::Mutex<Vec<String>>>,
    /// `fieldManager`, as given.
    pub field_manager: Option<String>,
    /// The manager named by the `User-Agent`, for writes without `fieldManager`.
    pub user_agent_manager: String,
    /// `force`: whether a server-side apply takes conflicting fields (`None`: not given).
    pub force: Option<bool>,
    /// The user the write runs as; `None` for the server's own writes and requests from a
    /// listener that does not authenticate, which are not checked.
    pub user: Option<Arc<UserInfo>>,
}

impl WriteOptions {
    pub(crate) fn from_query(q: &str, user_agent: Option<&str>) -> Result<WriteOptions, Status> {
        let mut o = WriteOptions {
            user_agent_manager: api::managed_fields::manager_from_user_agent(user_agent),
            ..WriteOptions::default()
        };
        for (k, v) in form_urlencoded::parse(q.as_bytes()) {
            match &*k {
                "dryRun" if v == "All" => o.dry_run = true,
                // Anything else would otherwise be a real write the client meant as a trial.
                "dryRun" => {
                    return Err(Status::new(
                        api::Reason::Invalid,
                        format!("dryRun: Unsupported value: {v:?}: supported values: \"All\""),
                    )
                    .with_cause(
                        "FieldValueNotSupported",
                        "dryRun",
                        "unsupported value",
                    ))
                }
                "fieldValidation" => o.field_validation = FieldValidation::parse(&v)?,
                "fieldManager" => {
                    if v.chars().count() > api::managed_fields::MAX_MANAGER_LEN
                        || v.chars().any(char::is_control)
                    {
                        return Err(Status::new(
                            api::Reason::Invalid,
                            format!(
                                "fieldManager: Invalid value: {v:?}: must be at most {} printable characters",
                                api::managed_fields::MAX_MANAGER_LEN
                            ),
                        )
                        .with_cause("FieldValueInvalid", "fieldManager", "invalid field manager"));
                    }
                    o.field_manager = Some(v.into_owned());
                }
                "force" => {
                    o.force = Some(match &*v {
                        "true" | "1" => true,
                        "false" | "0" | "" => false,
                        _ => {
                            return Err(Status::bad_request(format!(
                                "force: invalid value {v:?}: must be true or false"
                            )))
                        }
                    })
                }
                _ => {}
            }
        }
        Ok(o)
    }

    /// The manager a non-apply write is recorded under: `fieldManager`, else the
    /// `User-Agent`'s name.
    pub fn manager(&self) -> &str {
        self.field_manager
            .as_deref()
            .unwrap_or(&self.user_agent_manager)
    }

    /// Records `new` (over `old`, `None` for a create) in `metadata.managedFields`.
    pub fn track_update(
        &self,
        info: &ResourceInfo,
        status_only: bool,
        old: Option<&api::Object>,
        new: &mut api::Object,
    ) -> Result<(), Status> {
        let api_version = info.api_version();
        let now = api::time::now_rfc3339();
        let writer = api::managed_fields::Writer {
            manager: self.manager(),
            api_version: &api_version,
            kind: api::patch::PatchKindHint::new(info.group, info.kind),
            lists: crate::registry::apiextensions::list_strategies(info),
            status_only,
            has_status: info.has_status,
            now: &now,
        };
        api::managed_fields::track_update(old.map(|o| &o.0), &mut new.0, &writer)
            .map_err(Status::bad_request)
    }

    /// Checks `obj` for unknown fields as asked (400 under Strict; under Warn they are
    /// dropped and the warnings kept for the response).
    pub fn check_fields(&self, info: &ResourceInfo, obj: &mut api::Object) -> Result<(), Status> {
        let mut w =
            crate::registry::field_validation::check(info, &mut obj.0, self.field_validation)?;
        if info.group == "apiextensions.k8s.io" && info.resource == "customresourcedefinitions" {
            w.extend(crate::registry::apiextensions::crd_validation::warnings(
                &obj.0,
            ));
        }
        *self.warnings.lock() = w;
        Ok(())
    }
}

/// The API server: storage, one cacher per resource, and metrics.
pub struct ApiServer {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) cachers: HashMap<(&'static str, &'static str), Arc<Cacher>>,
    /// The custom resources served now (published by the CRD controller).
    pub(crate) custom: CustomResources,
    /// One cacher per served custom resource version, keyed by the interned
    /// [`ResourceInfo`] it serves (a changed definition gets a new one).
    pub(crate) custom_cachers: RwLock<HashMap<CustomKey, Arc<Cacher>>>,
    pub(crate) cacher_options: CacherOptions,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) self_ref: Weak<ApiServer>,
    /// Who may do what (system:masters, the Node authorizer, RBAC).
    pub(crate) authorizer: Authorizer,
    /// The signer of ServiceAccount tokens.
    pub(crate) service_account_tokens: ServiceAccountTokens,
    /// Seats for requests in flight, by priority level and user.
    pub(crate) flow_control: crate::flow_control::FlowControl,
    /// The audit log, if any.
    pub(crate) auditor: Option<Arc<crate::audit::Auditor>>,
    /// Serializes quota charges, striped by namespace (see [`ApiServer::quota_lock`]).
    pub(crate) quota_locks: Vec<tokio::sync::Mutex<()>>,
    /// Admission plugins turned off.
    pub(crate) admission_disabled: crate::admission::Disabled,
    /// The ValidatingAdmissionPolicies, compiled.
    pub(crate) admission_policies: crate::admission::validating_admission_policy::Policies,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("resources", &self.cachers.len())
            .finish()
    }
}

/// The key of a custom resource version's cacher: group, version and plural.
pub(crate) type CustomKey = (&'static str, &'static str, &'static str);

/// How many locks quota charges are spread over: charges in one namespace take turns,
/// charges in most pairs of namespaces do not wait for each other.
const QUOTA_LOCK_STRIPES: usize = 64;

/// Resources whose watch cache loads on its first read and unloads when unread
/// ([`Cacher::on_demand`]): events, most of a cluster's writes and few of its reads, which
/// kube-apiserver does not cache at all. Both groups' events are one stored set.
const CACHED_ON_DEMAND: &[(&str, &str)] = &[("", "events"), ("events.k8s.io", "events")];

/// Namespaces that exist from the start.
const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

impl ApiServer {
    /// Starts a cacher per resource over `storage`, creates the initial namespaces if they
    /// are missing, and waits until every cache has loaded (except those loaded on demand,
    /// [`CACHED_ON_DEMAND`]).
    pub async fn new(
        storage: Arc<dyn Storage>,
        config: ServerConfig,
    ) -> Result<Arc<ApiServer>, Status> {
        let metrics = Metrics::new();
        let storage: Arc<dyn Storage> =
            Arc::new(crate::registry::cohabitation::CohabitingStorage::new(
                storage,
                crate::registry::cohabitation::COHABITANTS,
            ));
        let service_account_tokens = match &config.service_account_key {
            Some(der) => ServiceAccountTokens::from_pkcs8(der),
            None => ServiceAccountTokens::generate(),
        }
        .map_err(Status::internal)?;
        let srv = Arc::new_cyclic(|weak| {
            let cachers: HashMap<(&'static str, &'static str), Arc<Cacher>> = RESOURCES
                .iter()
                .map(|info| {
                    let start = match CACHED_ON_DEMAND.contains(&(info.group, info.resource)) {
                        true => Cacher::on_demand,
                        false => Cacher::start,
                    };
                    (
                        (info.group, info.resource),
                        start(info, storage.clone(), config.cacher.clone(), &metrics),
                    )
                })
                .collect();
            let cache = |g: &'static str, r: &'static str| {
                cachers
                    .get(&(g, r))
                    .cloned()
                    .unwrap_or_else(|| panic!("no built-in resource {g}/{r}"))
            };
            let rbac = crate::auth::rbac::RESOURCES.map(|r| cache("rbac.authorization.k8s.io", r));
            let authorizer = Authorizer::new(rbac, cache("", "pods"));
            ApiServer {
                storage: storage.clone(),
                authorizer,
                service_account_tokens,
                flow_control: crate::flow_control::FlowControl::new(config.max_in_flight),
                auditor: config.audit.clone(),
                cachers,
                custom: CustomResources::default(),
                custom_cachers: RwLock::new(HashMap::new()),
                cacher_options: config.cacher.clone(),
                metrics: metrics.clone(),
                self_ref: weak.clone(),
                admission_disabled: config.admission_disabled.clone(),
                admission_policies: Default::default(),
                quota_locks: (0..QUOTA_LOCK_STRIPES)
                    .map(|_| tokio::sync::Mutex::new(()))
                    .collect(),
            }
        });
        srv.bootstrap_namespaces().await?;
        srv.bootstrap_rbac_policy().await?;
        for c in srv.cachers.values().filter(|c| !c.loads_on_demand()) {
            c.wait_until_fresh(0).await?;
        }
        srv.start_clusterrole_aggregation().await?;
        srv.start_service_allocation_repair();
        if !config.no_default_service_accounts {
            handlers::default_service_account::start(&srv).await;
        }
        handlers::crd_controller::start(&srv).await?;
        srv.start_event_ttl(
            config
                .event_ttl
                .unwrap_or(handlers::event_ttl::DEFAULT_EVENT_TTL),
        );
        Ok(srv)
    }

    /// Deletes events that outlived `ttl`, every [`handlers::event_ttl::sweep_interval`].
    /// Stops when the server is dropped.
    fn start_event_ttl(&self, ttl: Duration) {
        let Some(info) = crate::registry::resources::find("", "v1", "events") else {
            return;
        };
        let weak = self.self_ref.clone();
        tokio::spawn(async move {
            let prefix = info.key_prefix();
            loop {
                tokio::time::sleep(handlers::event_ttl::sweep_interval(ttl)).await;
                let Some(srv) = weak.upgrade() else { return };
                match handlers::event_ttl::sweep(srv.storage.as_ref(), &prefix, ttl).await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(deleted = n, "deleted events past their TTL"),
                    Err(e) => tracing::warn!("event TTL sweep: {e}"),
                }
            }
        });
    }

    /// Every 30 s, releases service IPs and node ports no service holds any more (see
    /// [`handlers::service_allocation::repair`]). Stops when the server is dropped.
    fn start_service_allocation_repair(&self) {
        let Some(info) = crate::registry::resources::find("", "v1", "services") else {
            return;
        };
        let weak = self.self_ref.clone();
        tokio::spawn(async move {
            let mut suspects = std::collections::HashMap::new();
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                let Some(srv) = weak.upgrade() else { return };
                match handlers::service_allocation::repair(
                    srv.storage.as_ref(),
                    info,
                    &mut suspects,
                )
                .await
                {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(
                        released = n,
                        "released service IPs and node ports no service holds"
                    ),
                    Err(e) => tracing::warn!("service allocation repair: {e}"),
                }
            }
        });
    }

    async fn bootstrap_namespaces(&self) -> Result<(), Status> {
        let Some(info) = crate::registry::resources::find("", "v1", "namespaces") else {
            return Ok(());
        };
        for ns in INITIAL_NAMESPACES {
            let key = format!("{}{ns}", info.key_prefix());
            if self
                .storage
                .get(key.as_bytes())
                .await
                .map_err(|e| handlers::storage_error(info, ns, e))?
                .is_some()
            {
                continue;
            }
            let mut obj = api::Object::from_value(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .unwrap_or_default();
            crate::registry::strategy::prepare_for_create(info, &mut obj, "")?;
            let value = handlers::encode_for_storage(&mut obj)?;
            match self.storage.create(key.into_bytes().into(), value).await {
                Ok(_) | Err(storage::StorageError::AlreadyExists) => {}
                Err(e) => return Err(handlers::storage_error(info, ns, e)),
            }
        }
        Ok(())
    }

    /// Creates every object of the default RBAC policy that is missing (see
    /// [`crate::auth::rbac::bootstrap_policy`]).
    async fn bootstrap_rbac_policy(&self) -> Result<(), Status> {
        let objects = crate::auth::rbac::bootstrap_policy::objects().map_err(Status::internal)?;
        for (resource, ns, name, v) in objects {
            let Some(info) =
                crate::registry::resources::find("rbac.authorization.k8s.io", "v1", resource)
            else {
                continue;
            };
            let key = format!("{}{}", info.key_prefix(), info.object_key(&ns, &name));
            if self
                .storage
                .get(key.as_bytes())
                .await
                .map_err(|e| handlers::storage_error(info, &name, e))?
                .is_some()
            {
                continue;
            }
            let mut obj = api::Object::from_value(v).ok_or_else(|| {
                Status::internal(format!("bootstrap policy {name}: not an object"))
            })?;
            crate::registry::strategy::prepare_for_create(info, &mut obj, &ns)?;
            let value = handlers::encode_for_storage(&mut obj)?;
            match self.storage.create(key.into_bytes().into(), value).await {
                Ok(_) | Err(storage::StorageError::AlreadyExists) => {}
                Err(e) => return Err(handlers::storage_error(info, &name, e)),
            }
        }
        Ok(())
    }

    /// Writes the `rules` of every aggregated ClusterRole (one with an `aggregationRule`)
    /// that differ from the union of the rules of the ClusterRoles its selectors pick, as
    /// kube-controller-manager's aggregation controller does. Authorization does not wait
    /// for it: it aggregates from the caches itself.
    async fn aggregate_cluster_roles(&self, info: &'static ResourceInfo, cacher: &Cacher) {
        let snap = self.authorizer.rbac().snapshot();
        for (name, rules) in snap.aggregated() {
            let Some(cur) = cacher.get_cached(name) else {
                continue;
            };
            let stored: serde_json::Value =
                serde_json::from_slice(&cur.json).unwrap_or(serde_json::Value::Null);
            if crate::auth::rbac::policy_rule::PolicyRule::list_from_json(&stored) == *rules {
                continue;
            }
            let want: Vec<serde_json::Value> = rules.iter().map(|r| r.to_json()).collect();
            let req = handlers::RequestInfo {
                info,
                namespace: None,
                name: Some(name.clone()),
                subresource: None,
                legacy_watch: false,
            };
            let wopts = WriteOptions {
                field_manager: Some("clusterrole-aggregation-controller".into()),
                ..WriteOptions::default()
            };
            let result = handlers::update::write_object_with_retry(
                self,
                &req,
                name,
                None,
                false,
                &wopts,
                handlers::update::Tracking::Update,
                |old| {
                    let mut o = old.clone();
                    o.0.insert("rules".into(), json!(want));
                    Ok(o)
                },
            )
            .await;
            if let Err(e) = result {
                tracing::warn!(role = %name, "aggregating ClusterRole rules: {}", e.message);
            }
        }
    }

    /// Aggregates ClusterRoles now (so that a started server shows them aggregated), then
    /// again after every change of a ClusterRole. Stops when the server is dropped.
    async fn start_clusterrole_aggregation(&self) -> Result<(), Status> {
        let Some(info) =
            crate::registry::resources::find("rbac.authorization.k8s.io", "v1", "clusterroles")
        else {
            return Ok(());
        };
        let cacher = self.cacher(info)?;
        cacher.wait_consistent().await?;
        self.aggregate_cluster_roles(info, &cacher).await;
        cacher.wait_consistent().await?;
        let mut changes = cacher.changes();
        changes.mark_unchanged();
        let mut seen = cacher.generation();
        let weak = self.self_ref.clone();
        drop(cacher);
        // Holds no strong reference while it waits: a dropped server ends it. The receiver
        // also wakes for progress (when a request waits for the cache to reach a revision);
        // only a change of the ClusterRoles themselves is worth a pass.
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                let Some(srv) = weak.upgrade() else { return };
                let Ok(cacher) = srv.cacher(info) else { return };
                let generation = cacher.generation();
                if generation == seen {
                    continue;
                }
                seen = generation;
                srv.aggregate_cluster_roles(info, &cacher).await;
            }
        });
        Ok(())
    }

    /// Checks what a write by `wopts.user` of `obj` (of `info`, in namespace `ns`) may not do
    /// whatever RBAC allowed the request itself: grant RBAC permissions its author does not
    /// hold ([`escalation`]).
    ///
    /// # Errors
    /// 403 Forbidden.
    pub async fn admit_write(
        &self,
        info: &ResourceInfo,
        ns: &str,
        obj: &api::Object,
        wopts: &WriteOptions,
    ) -> Result<(), Status> {
        let Some(user) = &wopts.user else {
            return Ok(());
        };
        if let Some(node) = user.node_name() {
            // A node creates only its own Node, CSINode and Lease (the authorizer could not
            // tell by the name: a create's URL has none).
            let own = match (info.group, info.resource) {
                ("", "nodes") | ("storage.k8s.io", "csinodes") => obj.name() == node,
                ("coordination.k8s.io", "leases") => ns == "kube-node-lease" && obj.name() == node,
                _ => true,
            };
            if !own {
                return Err(Status::new(
                    api::Reason::Forbidden,
                    format!(
                        "{} \"{}\" is forbidden: node \"{node}\" may only create its own",
                        info.resource,
                        obj.name()
                    ),
                )
                .with_details(info.resource, obj.name())
                .with_group(info.group));
            }
        }
        if info.group == "rbac.authorization.k8s.io" {
            self.authorizer.rbac().note_write();
            let value = serde_json::Value::Object(obj.0.clone());
            let rbac = self.authorizer.rbac();
            if escalation::check_write(rbac, user, info.resource, ns, &value).is_err() {
                // Decided again on caches that hold every committed role and binding.
                rbac.catch_up().await;
                escalation::check_write(rbac, user, info.resource, ns, &value)?;
            }
        }
        Ok(())
    }

    /// The compiled ValidatingAdmissionPolicies and their bindings.
    pub fn admission_policies(&self) -> &crate::admission::validating_admission_policy::Policies {
        &self.admission_policies
    }

    /// The admission plugins turned off.
    pub fn admission_disabled(&self) -> &crate::admission::Disabled {
        &self.admission_disabled
    }

    /// The lock a quota charge in namespace `ns` holds while it decides and writes.
    pub fn quota_lock(&self, ns: &str) -> &tokio::sync::Mutex<()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        ns.hash(&mut h);
        &self.quota_locks[(h.finish() as usize) % self.quota_locks.len()]
    }

    /// The authorizer chain.
    pub fn authorizer(&self) -> &Authorizer {
        &self.authorizer
    }

    /// The signer of ServiceAccount tokens.
    pub fn service_account_tokens(&self) -> &ServiceAccountTokens {
        &self.service_account_tokens
    }

    /// The storage backend.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The cacher of a resource (404 for a custom resource no longer served).
    pub fn cacher(&self, info: &ResourceInfo) -> Result<Arc<Cacher>, Status> {
        if info.custom.is_some() {
            return self
                .custom_cachers
                .read()
                .get(&(info.group, info.version, info.resource))
                .cloned()
                .ok_or_else(|| Status::not_found(info.resource, "").with_group(info.group));
        }
        self.cachers
            .get(&(info.group, info.resource))
            .cloned()
            .ok_or_else(|| Status::internal(format!("no watch cache for {}", info.resource)))
    }

    /// The custom resources served now.
    pub fn custom_resources(&self) -> &CustomResources {
        &self.custom
    }

    /// Whether object `name` of `target`'s resource may be created in namespace `ns`, as
    /// kube-apiserver's `NamespaceLifecycle` admission decides.
    ///
    /// # Errors
    /// 404 if namespace `ns` does not exist, 403 (with a `NamespaceTerminating` cause) if it
    /// is being deleted.
    pub async fn ensure_namespace_accepts_writes(
        &self,
        target: &ResourceInfo,
        name: &str,
        ns: &str,
    ) -> Result<(), Status> {
        let Some(info) = crate::registry::resources::find("", "v1", "namespaces") else {
            return Ok(());
        };
        let phase = match self.cacher(info)?.get_cached(ns) {
            Some(o) => o.field(info, "status.phase").unwrap_or("").to_string(),
            None => {
                // The cache may lag a namespace created a moment ago: ask storage.
                let key = format!("{}{ns}", info.key_prefix());
                match self
                    .storage
                    .get(key.as_bytes())
                    .await
                    .map_err(|e| handlers::storage_error(info, ns, e))?
                {
                    Some(kv) => handlers::decode_stored(info, &kv)?
                        .field_str("status.phase")
                        .map(|c| c.into_owned())
                        .unwrap_or_default(),
                    None => return Err(Status::not_found("namespaces", ns)),
                }
            }
        };
        if phase == "Terminating" {
            return Err(crate::registry::namespace_lifecycle::terminating(
                target, name, ns,
            ));
        }
        Ok(())
    }
}
