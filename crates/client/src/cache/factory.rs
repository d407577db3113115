//! `SharedInformerFactory`: one shared informer per resource type, started, synced and shut
//! down together.
//!
//! Components that need the same resource ask the factory and get the same
//! [`SharedIndexInformer`] (one list + watch, one cache), no matter how many handlers they
//! register. Informers are keyed by the Rust object type and a resource name, and for
//! informers asked for with their own [`InformerOptions`] also by those options.

use crate::cache::list_watch::ListerWatcher;
use crate::cache::reflector::Transform;
use crate::cache::reflector_options::{ConfigureReflector, ReflectorOptions};
use crate::cache::rest_lister_watcher::RestListerWatcher;
use crate::cache::shared_informer::SharedIndexInformer;
use crate::clock::{RealClock, SharedClock};
use crate::object::{DecodeObject, DynamicObject, KubeObject};
use crate::protobuf_object::ProtobufObject;
use crate::rest::{ApiResource, Client, Selection};
use parking_lot::Mutex;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Something that can say whether its cache is synced.
pub trait HasSynced: Send + Sync {
    /// Whether the initial state has been fully received (see the implementor's contract).
    fn has_synced(&self) -> bool;
}

impl<K: KubeObject> HasSynced for SharedIndexInformer<K> {
    fn has_synced(&self) -> bool {
        SharedIndexInformer::has_synced(self)
    }
}

impl HasSynced for crate::cache::processor::Registration {
    fn has_synced(&self) -> bool {
        crate::cache::processor::Registration::has_synced(self)
    }
}

impl<F: Fn() -> bool + Send + Sync> HasSynced for F {
    fn has_synced(&self) -> bool {
        self()
    }
}

/// How often the wait functions check.
const POLL: Duration = Duration::from_millis(10);

/// A wait longer than any process lives, standing in for timeouts the clock cannot hold.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Waits until every item has synced (true) or `timeout` of real (Tokio) time has passed
/// (false).
pub async fn wait_for_cache_sync(items: &[&dyn HasSynced], timeout: Duration) -> bool {
    // `Duration::MAX` ("wait as long as it takes") must not overflow the clock.
    let now = tokio::time::Instant::now();
    let deadline = now.checked_add(timeout).unwrap_or(now + FOREVER);
    loop {
        if items.iter().all(|i| i.has_synced()) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What every informer of a factory lists and watches — a namespace and a [`Selection`] —
/// and how its objects are decoded; handed to the closure that builds each informer's
/// [`ListerWatcher`]. `Default` is every object of every namespace, managed fields kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ListWatchOptions {
    /// Only this namespace (`None` = all namespaces).
    pub namespace: Option<String>,
    /// The label and field selectors both the list and the watch send.
    pub selection: Selection,
    /// Objects are decoded without `metadata.managedFields`, as kube-scheduler's and
    /// kube-controller-manager's informers trim them (see [`crate::managed_fields_trim`]).
    /// Not a wire parameter: the server sends them, the decoder skips them.
    pub strip_managed_fields: bool,
}

/// What one factory informer lists and watches, and how: its own selection plus the
/// informer-side settings a factory otherwise leaves at their defaults. Asked for with
/// [`SharedInformerFactory::informer_with`] or
/// [`SharedInformerFactory::dynamic_informer_with`].
///
/// Start from [`SharedInformerFactory::informer_options`], which carries the factory's own
/// selection (namespace, [`tweak_list_options`](FactoryBuilder::tweak_list_options),
/// managed-field stripping), and narrow it; [`InformerOptions::default`] starts from nothing
/// instead (all namespaces, no selectors), ignoring the factory's selection.
///
/// # Sharing
/// Two requests get the same informer when they name the same object type and resource and
/// their options are equal: the same [`list_watch`](Self::list_watch), page size and idle
/// timeout, and transforms of the same *name* (a closure cannot be compared, so its name
/// stands for it: give different transforms different names). Options equal to
/// `factory.informer_options()` give the very informer [`SharedInformerFactory::informer`]
/// (or `dynamic_informer`) gives.
#[must_use]
pub struct InformerOptions<K> {
    /// The namespace and selectors this informer's lists and watches send, and whether its
    /// objects are decoded without `managedFields`. Replaces the factory's selection.
    pub list_watch: ListWatchOptions,
    /// The reflector's list page size (`None` = the reflector's default).
    pub page_size: Option<u32>,
    /// The client-side idle timeout of each watch (`None` = the
    /// [`RestListerWatcher`] default).
    pub idle_timeout: Option<Duration>,
    /// A name and a pure function applied to every object from the server before it is
    /// queued and cached (see [`ReflectorOptions::transform`]). The name keys the informer.
    pub transform: Option<(String, Transform<K>)>,
}

impl<K> Default for InformerOptions<K> {
    /// No selection (all namespaces, no selectors, managed fields kept), default page size
    /// and idle timeout, no transform.
    fn default() -> Self {
        InformerOptions {
            list_watch: ListWatchOptions::default(),
            page_size: None,
            idle_timeout: None,
            transform: None,
        }
    }
}

impl<K> Clone for InformerOptions<K> {
    fn clone(&self) -> Self {
        InformerOptions {
            list_watch: self.list_watch.clone(),
            page_size: self.page_size,
            idle_timeout: self.idle_timeout,
            transform: self.transform.clone(),
        }
    }
}

impl<K> fmt::Debug for InformerOptions<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformerOptions")
            .field("list_watch", &self.list_watch)
            .field("page_size", &self.page_size)
            .field("idle_timeout", &self.idle_timeout)
            .field("transform", &self.transform.as_ref().map(|(name, _)| name))
            .finish()
    }
}

impl<K> InformerOptions<K> {
    /// Only objects in `namespace` (`""` = all namespaces).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.list_watch.namespace = Some(namespace.into());
        self
    }
    /// Only objects matching the label selector `selector` (wire syntax), replacing any
    /// label selector the options had (`""` = none): [`Selection::labels`].
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        let selection = std::mem::take(&mut self.list_watch.selection);
        self.list_watch.selection = selection.labels(selector);
        self
    }
    /// Only objects matching the field selector `selector` (wire syntax), replacing any
    /// field selector the options had (`""` = none): [`Selection::fields`].
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        let selection = std::mem::take(&mut self.list_watch.selection);
        self.list_watch.selection = selection.fields(selector);
        self
    }
    /// Only objects matching both selectors of `selection`, replacing the selectors the
    /// options had (the namespace stays). To narrow the factory's selectors rather than
    /// replace them, start from them: `options.list_watch.selection.clone().and_labels(..)`.
    pub fn selection(mut self, selection: Selection) -> Self {
        self.list_watch.selection = selection;
        self
    }
    /// The reflector's list page size.
    pub fn page_size(mut self, page_size: u32) -> Self {
        self.page_size = Some(page_size);
        self
    }
    /// The client-side idle timeout of each watch.
    pub fn idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = Some(idle_timeout);
        self
    }
    /// Applies `transform` to every object before it is queued and cached; `name` stands
    /// for the function when informers are keyed (see [Sharing](Self#sharing)).
    pub fn transform(
        mut self,
        name: impl Into<String>,
        transform: impl Fn(Arc<K>) -> Arc<K> + Send + Sync + 'static,
    ) -> Self {
        self.transform = Some((name.into(), Arc::new(transform)));
        self
    }

    /// What keys the informer (everything but the transform closure itself).
    fn key(&self) -> OptionsKey {
        OptionsKey {
            list_watch: self.list_watch.clone(),
            page_size: self.page_size,
            idle_timeout: self.idle_timeout,
            transform: self.transform.as_ref().map(|(name, _)| name.clone()),
        }
    }

    /// Applies the informer-side settings to the informer's reflector options (those left
    /// unset keep what the factory gave them).
    fn configure(&self, options: &mut ReflectorOptions<K>) {
        if let Some(page_size) = self.page_size {
            options.page_size = page_size;
        }
        if let Some((_, transform)) = &self.transform {
            options.transform = Some(Arc::clone(transform));
        }
    }
}

/// The comparable part of [`InformerOptions`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct OptionsKey {
    list_watch: ListWatchOptions,
    page_size: Option<u32>,
    idle_timeout: Option<Duration>,
    transform: Option<String>,
}

impl OptionsKey {
    /// What the options add to the informer's base name: nothing for the factory's own
    /// selection and defaults, else the settings that differ, e.g. `{labels=app=web}`.
    fn name_suffix(&self, factory_list_watch: &ListWatchOptions) -> String {
        let mut parts = Vec::new();
        if self.list_watch != *factory_list_watch {
            let lw = &self.list_watch;
            if let Some(ns) = &lw.namespace {
                parts.push(format!("namespace={ns}"));
            }
            let non_empty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
            if let Some(labels) = non_empty(&lw.selection.labels) {
                parts.push(format!("labels={labels}"));
            }
            if let Some(fields) = non_empty(&lw.selection.fields) {
                parts.push(format!("fields={fields}"));
            }
            if lw.strip_managed_fields {
                parts.push("strip-managed-fields".to_string());
            }
            if parts.is_empty() {
                parts.push("everything".to_string());
            }
        }
        if let Some(page_size) = self.page_size {
            parts.push(format!("page-size={page_size}"));
        }
        if let Some(idle) = self.idle_timeout {
            parts.push(format!("idle-timeout={idle:?}"));
        }
        if let Some(name) = &self.transform {
            parts.push(format!("transform={name}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" {{{}}}", parts.join(", "))
        }
    }
}

type Tweak = Arc<dyn Fn(&mut ListWatchOptions) + Send + Sync>;
type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Type-erased control of one informer.
trait Control: Send + Sync {
    fn start(&self);
    fn has_synced(&self) -> bool;
    fn shutdown(&self) -> BoxFuture;
    fn as_any(&self) -> &dyn Any;
}

impl<K: KubeObject> Control for SharedIndexInformer<K> {
    fn start(&self) {
        SharedIndexInformer::start(self);
    }
    fn has_synced(&self) -> bool {
        SharedIndexInformer::has_synced(self)
    }
    fn shutdown(&self) -> BoxFuture {
        let me = self.clone();
        Box::pin(async move { me.shutdown().await })
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// What the factory keys informers by: the object type, the resource's name, and for
/// REST-backed informers the options they were built with (`None` for
/// [`SharedInformerFactory::informer_for`], which keys by type and name alone, and for the
/// factory's own options, so that the two meet).
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    type_id: TypeId,
    resource: String,
    options: Option<OptionsKey>,
}

struct State {
    informers: HashMap<Key, Arc<dyn Control>>,
    started: Vec<Key>,
    shutting_down: bool,
}

/// Why a factory could not build an informer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FactoryError {
    /// A REST-backed informer was asked of a factory built without a [`Client`].
    #[error("the informer factory has no REST client (build it with SharedInformerFactory::new or FactoryBuilder::client)")]
    NoClient,
}

/// Hands out one shared informer per (object type, resource name). Cheap to clone.
///
/// With a REST [`Client`] (see [`SharedInformerFactory::new`]) it builds the informers'
/// [`RestListerWatcher`]s itself:
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use client::cache::SharedInformerFactory;
/// use client::rest::{resource::PODS, Client};
/// use k8s_openapi::api::core::v1::Node;
/// use std::time::Duration;
///
/// let factory = SharedInformerFactory::new(Client::try_default()?);
/// let pods = factory.dynamic_informer(&PODS)?; // DynamicObject
/// let nodes = factory.informer::<Node>()?; // typed
/// factory.start();
/// factory.wait_for_cache_sync(Duration::from_secs(30)).await;
/// println!("{} pods, {} nodes", pods.indexer().len(), nodes.indexer().len());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SharedInformerFactory {
    client: Option<Client>,
    state: Arc<Mutex<State>>,
    namespace: Option<String>,
    tweak: Option<Tweak>,
    strip_managed_fields: bool,
    resync: Duration,
    clock: SharedClock,
}

/// Configures a [`SharedInformerFactory`].
#[must_use]
pub struct FactoryBuilder {
    client: Option<Client>,
    namespace: Option<String>,
    tweak: Option<Tweak>,
    strip_managed_fields: bool,
    resync: Duration,
    clock: SharedClock,
}

impl FactoryBuilder {
    /// The REST client the factory's own informers ([`SharedInformerFactory::informer`],
    /// [`SharedInformerFactory::dynamic_informer`]) list and watch through.
    pub fn client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }
    /// Restricts every informer to `namespace`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }
    /// Adjusts every informer's selection (e.g. add a label selector).
    pub fn tweak_list_options(
        mut self,
        tweak: impl Fn(&mut ListWatchOptions) + Send + Sync + 'static,
    ) -> Self {
        self.tweak = Some(Arc::new(tweak));
        self
    }
    /// Every informer decodes its objects without `metadata.managedFields`
    /// ([`ListWatchOptions::strip_managed_fields`]), as kube-scheduler and
    /// kube-controller-manager trim them from theirs. Off unless set.
    pub fn strip_managed_fields(mut self, strip: bool) -> Self {
        self.strip_managed_fields = strip;
        self
    }
    /// The default handler resync period of every informer.
    pub fn resync_period(mut self, period: Duration) -> Self {
        self.resync = period;
        self
    }
    /// The clock the informers use.
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }
    /// Builds the factory.
    pub fn build(self) -> SharedInformerFactory {
        SharedInformerFactory {
            client: self.client,
            state: Arc::new(Mutex::new(State {
                informers: HashMap::new(),
                started: Vec::new(),
                shutting_down: false,
            })),
            namespace: self.namespace,
            tweak: self.tweak,
            strip_managed_fields: self.strip_managed_fields,
            resync: self.resync,
            clock: self.clock,
        }
    }
}

impl Default for SharedInformerFactory {
    fn default() -> Self {
        SharedInformerFactory::builder().build()
    }
}

impl SharedInformerFactory {
    /// Starts configuring a factory (all namespaces, no resync, real time).
    pub fn builder() -> FactoryBuilder {
        FactoryBuilder {
            client: None,
            namespace: None,
            tweak: None,
            strip_managed_fields: false,
            resync: Duration::ZERO,
            clock: RealClock::shared(),
        }
    }

    /// A factory whose informers list and watch through `client` (all namespaces, no
    /// resync, real time); use [`SharedInformerFactory::builder`] with
    /// [`FactoryBuilder::client`] for more options.
    pub fn new(client: Client) -> SharedInformerFactory {
        SharedInformerFactory::builder().client(client).build()
    }

    /// The factory's REST client, if it has one.
    pub fn client(&self) -> Option<&Client> {
        self.client.as_ref()
    }

    /// The shared informer of [`DynamicObject`]s for `resource`, listing and watching
    /// through the factory's client with the factory's selection. Later calls for the same
    /// resource return the same informer, named `"{plural}[.{group}]/{version}"` (e.g.
    /// `pods/v1`, `deployments.apps/v1`).
    ///
    /// # Errors
    /// [`FactoryError::NoClient`] if the factory was built without a client.
    pub fn dynamic_informer(
        &self,
        resource: &ApiResource,
    ) -> Result<SharedIndexInformer<DynamicObject>, FactoryError> {
        self.dynamic_informer_with(resource, self.informer_options())
    }

    /// The shared informer of [`DynamicObject`]s for `resource` with its own `options`
    /// (selection, page size, idle timeout, transform): as
    /// [`SharedInformerFactory::dynamic_informer`], but keyed by the options too, so that
    /// different options give different informers and equal options one (see
    /// [Sharing](InformerOptions#sharing)). Its name is the resource's name followed by what
    /// differs from the factory's defaults, e.g. `pods/v1 {labels=app=web, page-size=50}`.
    ///
    /// # Errors
    /// [`FactoryError::NoClient`] if the factory was built without a client.
    pub fn dynamic_informer_with(
        &self,
        resource: &ApiResource,
        options: InformerOptions<DynamicObject>,
    ) -> Result<SharedIndexInformer<DynamicObject>, FactoryError> {
        self.rest_informer::<DynamicObject>(resource, resource_name(resource), options)
    }

    /// The shared informer of the typed `k8s-openapi` kind `K` (e.g. `Pod`), as
    /// [`SharedInformerFactory::dynamic_informer`] for `ApiResource::of::<K>()`; it is
    /// named `"{plural}/{version} as {Kind}"` (e.g. `pods/v1 as Pod`).
    ///
    /// # Errors
    /// [`FactoryError::NoClient`] if the factory was built without a client.
    pub fn informer<K>(&self) -> Result<SharedIndexInformer<K>, FactoryError>
    where
        K: DecodeObject + k8s_openapi::Resource,
        K::Scope: 'static,
    {
        self.informer_with(self.informer_options())
    }

    /// The shared informer of the typed kind `K` with its own `options`, as
    /// [`SharedInformerFactory::dynamic_informer_with`] is to `dynamic_informer`: keyed by
    /// `K`, its resource and the options, and named e.g. `pods/v1 as Pod {labels=app=web}`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use client::cache::SharedInformerFactory;
    /// use client::rest::Client;
    /// use k8s_openapi::api::core::v1::Pod;
    /// use std::time::Duration;
    ///
    /// let factory = SharedInformerFactory::new(Client::try_default()?);
    /// let web = factory.informer_with::<Pod>(
    ///     factory.informer_options().labels("app=web").page_size(100),
    /// )?;
    /// let db = factory.informer_with::<Pod>(
    ///     factory
    ///         .informer_options::<Pod>() // names the type for the closure below
    ///         .labels("app=db")
    ///         .transform("drop-annotations", |pod| {
    ///             let mut pod = (*pod).clone();
    ///             pod.metadata.annotations = None;
    ///             std::sync::Arc::new(pod)
    ///         }),
    /// )?;
    /// factory.start();
    /// factory.wait_for_cache_sync(Duration::from_secs(30)).await;
    /// println!("{} web pods, {} db pods", web.indexer().len(), db.indexer().len());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`FactoryError::NoClient`] if the factory was built without a client.
    pub fn informer_with<K>(
        &self,
        options: InformerOptions<K>,
    ) -> Result<SharedIndexInformer<K>, FactoryError>
    where
        K: DecodeObject + k8s_openapi::Resource,
        K::Scope: 'static,
    {
        let resource = ApiResource::of::<K>();
        // Named apart from a dynamic informer of the same resource (the sync report is
        // keyed by name).
        let name = format!("{} as {}", resource_name(&resource), K::KIND);
        self.rest_informer::<K>(&resource, name, options)
    }

    /// The shared informer of [`ProtobufObject`]s for `resource`: as
    /// [`SharedInformerFactory::dynamic_informer`], but listing and watching in Kubernetes'
    /// protobuf encoding, which built-in kinds have (custom resources do not). It is named
    /// `"{plural}/{version} as protobuf"`.
    ///
    /// # Errors
    /// [`FactoryError::NoClient`] if the factory was built without a client.
    pub fn protobuf_informer(
        &self,
        resource: &ApiResource,
    ) -> Result<SharedIndexInformer<ProtobufObject>, FactoryError> {
        let name = format!("{} as protobuf", resource_name(resource));
        self.rest_informer::<ProtobufObject>(resource, name, self.informer_options())
    }

    /// Options carrying this factory's selection
    /// ([`list_watch_options`](Self::list_watch_options)) and no informer-side settings: the
    /// starting point for [`informer_with`](Self::informer_with) and
    /// [`dynamic_informer_with`](Self::dynamic_informer_with). Unchanged, they give the
    /// informer `informer` or `dynamic_informer` gives.
    pub fn informer_options<K>(&self) -> InformerOptions<K> {
        InformerOptions {
            list_watch: self.list_watch_options(),
            ..InformerOptions::default()
        }
    }

    fn rest_informer<K: DecodeObject>(
        &self,
        resource: &ApiResource,
        name: String,
        options: InformerOptions<K>,
    ) -> Result<SharedIndexInformer<K>, FactoryError> {
        let client = self.client.clone().ok_or(FactoryError::NoClient)?;
        let options_key = options.key();
        let name = name + &options_key.name_suffix(&self.list_watch_options());
        // The factory's own options key by type and name alone, as `informer_for` keys, so
        // that `informer::<K>()` and `informer_for::<K>` under the same name share one
        // informer, as they did before options existed.
        let keyed_options = if options_key == self.informer_options::<K>().key() {
            None
        } else {
            Some(options_key)
        };
        let key = Key {
            type_id: TypeId::of::<K>(),
            resource: name,
            options: keyed_options,
        };
        Ok(self.informer_keyed::<K>(
            key,
            || {
                let mut lw = RestListerWatcher::<K>::new(client, resource.clone())
                    .with_options(&options.list_watch);
                if let Some(idle) = options.idle_timeout {
                    lw = lw.idle_timeout(Some(idle));
                }
                Arc::new(lw) as Arc<dyn ListerWatcher<K>>
            },
            |reflector_options| options.configure(reflector_options),
        ))
    }

    /// The selection informers of this factory apply.
    pub fn list_watch_options(&self) -> ListWatchOptions {
        let mut opts = ListWatchOptions {
            namespace: self.namespace.clone(),
            strip_managed_fields: self.strip_managed_fields,
            ..Default::default()
        };
        if let Some(t) = &self.tweak {
            t(&mut opts);
        }
        opts
    }

    /// The shared informer for objects of type `K` from `resource`, created on first use
    /// with a [`ListerWatcher`] built by `make` from the factory's selection. Later calls
    /// return the same informer and do not call `make`. An informer created after
    /// [`SharedInformerFactory::start`] is started by the next `start`. Keyed by `K` and
    /// `resource` only: the informer [`informer`](Self::informer) gives under the same name
    /// (e.g. `nodes/v1 as Node`) is this one, while informers with their own options
    /// ([`informer_with`](Self::informer_with)) are apart.
    pub fn informer_for<K, F>(&self, resource: &str, make: F) -> SharedIndexInformer<K>
    where
        K: KubeObject,
        F: FnOnce(&ListWatchOptions) -> Arc<dyn ListerWatcher<K>>,
    {
        let key = Key {
            type_id: TypeId::of::<K>(),
            resource: resource.to_string(),
            options: None,
        };
        self.informer_keyed::<K>(key, || make(&self.list_watch_options()), |_| {})
    }

    /// The informer under `key`, built if there is none yet from `make` and the factory's
    /// reflector options (named after the key, on the factory's clock and resync period),
    /// which `configure` adjusts.
    fn informer_keyed<K: KubeObject>(
        &self,
        key: Key,
        make: impl FnOnce() -> Arc<dyn ListerWatcher<K>>,
        configure: impl FnOnce(&mut ReflectorOptions<K>),
    ) -> SharedIndexInformer<K> {
        let mut st = self.state.lock();
        if let Some(existing) = st.informers.get(&key) {
            if let Some(inf) = existing.as_any().downcast_ref::<SharedIndexInformer<K>>() {
                return inf.clone();
            }
        }
        let mut options = ReflectorOptions::default()
            .name(key.resource.clone())
            .clock(self.clock.clone())
            .resync_period(self.resync);
        configure(&mut options);
        let informer = SharedIndexInformer::builder(make())
            .reflector_options(options)
            .build();
        st.informers.insert(key, Arc::new(informer.clone()));
        informer
    }

    /// Starts every informer not yet started. Must run inside a Tokio runtime.
    pub fn start(&self) {
        let mut st = self.state.lock();
        if st.shutting_down {
            return;
        }
        let to_start: Vec<(Key, Arc<dyn Control>)> = st
            .informers
            .iter()
            .filter(|(k, _)| !st.started.contains(k))
            .map(|(k, c)| (k.clone(), Arc::clone(c)))
            .collect();
        for (k, c) in to_start {
            c.start();
            st.started.push(k);
        }
    }

    /// Waits until every started informer has synced or `timeout` has passed; returns each
    /// started informer's resource name and whether it synced.
    pub async fn wait_for_cache_sync(&self, timeout: Duration) -> HashMap<String, bool> {
        let started: Vec<(String, Arc<dyn Control>)> = {
            let st = self.state.lock();
            st.started
                .iter()
                .filter_map(|k| {
                    st.informers
                        .get(k)
                        .map(|c| (k.resource.clone(), Arc::clone(c)))
                })
                .collect()
        };
        let now = Instant::now();
        let deadline = now.checked_add(timeout).unwrap_or(now + FOREVER);
        loop {
            let done = started.iter().all(|(_, c)| c.has_synced());
            if done || Instant::now() >= deadline {
                return started
                    .iter()
                    .map(|(n, c)| (n.clone(), c.has_synced()))
                    .collect();
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops every informer and waits for their tasks. Later `start` calls do nothing.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<dyn Control>> = {
            let mut st = self.state.lock();
            st.shutting_down = true;
            st.informers.values().cloned().collect()
        };
        for c in all {
            c.shutdown().await;
        }
    }
}

/// The name a REST-backed informer is registered under: `plural.group/version` (the core
/// group reads `pods/v1`).
fn resource_name(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        format!("{}/{}", resource.plural, resource.version)
    } else {
        format!(
            "{}.{}/{}",
            resource.plural, resource.group, resource.version
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::fake_lister_watcher::FakeListerWatcher;
    use crate::object::DynamicObject;

    #[tokio::test]
    async fn one_informer_per_type_and_sync() {
        let factory = SharedInformerFactory::builder()
            .namespace("prod")
            .tweak_list_options(|o| o.selection.labels = Some("app=web".into()))
            .build();
        let fake = Arc::new(FakeListerWatcher::<DynamicObject>::new());
        fake.add(Arc::new(
            DynamicObject::from_slice(
                br#"{"metadata":{"name":"a","namespace":"prod","resourceVersion":"3"}}"#,
            )
            .unwrap(),
        ));
        let seen = Arc::new(Mutex::new(None));
        let s = seen.clone();
        let f2 = fake.clone();
        let a = factory.informer_for::<DynamicObject, _>("pods", move |opts| {
            *s.lock() = Some(opts.clone());
            f2 as Arc<dyn ListerWatcher<DynamicObject>>
        });
        let b = factory.informer_for::<DynamicObject, _>("pods", |_| unreachable!("shared"));
        assert!(Arc::ptr_eq(a.indexer(), b.indexer()));
        let opts = seen.lock().clone().unwrap();
        assert_eq!(opts.namespace.as_deref(), Some("prod"));
        assert_eq!(opts.selection, Selection::default().labels("app=web"));
        // A different resource name is a different informer.
        let nodes_fake = Arc::new(FakeListerWatcher::<DynamicObject>::new());
        let c = factory.informer_for::<DynamicObject, _>("nodes", |_| nodes_fake.clone() as _);
        assert!(!Arc::ptr_eq(a.indexer(), c.indexer()));

        factory.start();
        let synced = factory.wait_for_cache_sync(Duration::from_secs(5)).await;
        assert_eq!(synced.len(), 2);
        assert!(synced.values().all(|s| *s));
        assert!(wait_for_cache_sync(&[&a, &c], Duration::from_secs(1)).await);
        // "As long as it takes" is a timeout too, not a clock overflow.
        assert!(wait_for_cache_sync(&[&a, &c], Duration::MAX).await);
        assert_eq!(factory.wait_for_cache_sync(Duration::MAX).await.len(), 2);
        assert_eq!(a.indexer().len(), 1);
        assert_eq!(fake.list_calls().len(), 1, "one list for both users");

        factory.shutdown().await;
        assert!(a.is_stopped() && c.is_stopped());
        assert_eq!(fake.open_watches(), 0, "watch dropped on shutdown");
    }

    #[test]
    fn rest_informers_need_a_client_and_are_shared() {
        use crate::rest::resource::{DEPLOYMENTS, PODS};
        use k8s_openapi::api::core::v1::Pod;
        let none = SharedInformerFactory::default();
        assert_eq!(
            none.dynamic_informer(&PODS).err(),
            Some(FactoryError::NoClient)
        );
        assert_eq!(none.informer::<Pod>().err(), Some(FactoryError::NoClient));
        let client = Client::new(crate::rest::Config::new("http://127.0.0.1:1").unwrap()).unwrap();
        let f = SharedInformerFactory::new(client);
        assert!(f.client().is_some());
        let a = f.dynamic_informer(&PODS).unwrap();
        let b = f.dynamic_informer(&PODS).unwrap();
        assert!(Arc::ptr_eq(a.indexer(), b.indexer()));
        assert_eq!(a.name(), "pods/v1");
        let typed = f.informer::<Pod>().unwrap();
        assert_eq!(typed.name(), "pods/v1 as Pod");
        assert_eq!(
            f.dynamic_informer(&DEPLOYMENTS).unwrap().name(),
            "deployments.apps/v1"
        );
    }

    #[test]
    fn informers_with_options_are_keyed_by_them() {
        use crate::rest::resource::PODS;
        use k8s_openapi::api::core::v1::Pod;
        let client = Client::new(crate::rest::Config::new("http://127.0.0.1:1").unwrap()).unwrap();
        let f = SharedInformerFactory::builder()
            .client(client)
            .namespace("prod")
            .build();
        let plain = f.informer::<Pod>().unwrap();
        // The factory's own options are the plain informer.
        let same = f.informer_with::<Pod>(f.informer_options()).unwrap();
        assert!(Arc::ptr_eq(plain.indexer(), same.indexer()));

        let web = f
            .informer_with::<Pod>(f.informer_options().labels("app=web"))
            .unwrap();
        let web_again = f
            .informer_with::<Pod>(f.informer_options().labels("app=web"))
            .unwrap();
        let db = f
            .informer_with::<Pod>(f.informer_options().labels("app=db"))
            .unwrap();
        assert!(Arc::ptr_eq(web.indexer(), web_again.indexer()));
        assert!(!Arc::ptr_eq(web.indexer(), db.indexer()));
        assert!(!Arc::ptr_eq(web.indexer(), plain.indexer()));
        assert_eq!(
            web.name(),
            "pods/v1 as Pod {namespace=prod, labels=app=web}"
        );

        // Page size, idle timeout and the transform's name are part of the key.
        let paged = f
            .informer_with::<Pod>(f.informer_options().page_size(10))
            .unwrap();
        assert_eq!(paged.name(), "pods/v1 as Pod {page-size=10}");
        assert!(!Arc::ptr_eq(paged.indexer(), plain.indexer()));
        let idle = f
            .informer_with::<Pod>(f.informer_options().idle_timeout(Duration::from_secs(90)))
            .unwrap();
        assert!(!Arc::ptr_eq(idle.indexer(), plain.indexer()));
        let t1 = f
            .informer_with::<Pod>(f.informer_options().transform("same", |p| p))
            .unwrap();
        let t2 = f
            .informer_with::<Pod>(f.informer_options().transform("same", |p| p))
            .unwrap();
        let t3 = f
            .informer_with::<Pod>(f.informer_options().transform("other", |p| p))
            .unwrap();
        assert!(Arc::ptr_eq(t1.indexer(), t2.indexer()));
        assert!(!Arc::ptr_eq(t1.indexer(), t3.indexer()));
        assert_eq!(t3.name(), "pods/v1 as Pod {transform=other}");

        // Default options start from nothing, not from the factory's namespace.
        let everywhere = f
            .dynamic_informer_with(&PODS, InformerOptions::default())
            .unwrap();
        assert_eq!(everywhere.name(), "pods/v1 {everything}");
        assert_eq!(
            SharedInformerFactory::default()
                .informer_with::<Pod>(InformerOptions::default())
                .err(),
            Some(FactoryError::NoClient)
        );
    }

    #[tokio::test]
    async fn wait_times_out_when_not_synced() {
        let never = || false;
        assert!(!wait_for_cache_sync(&[&never], Duration::from_millis(30)).await);
        let factory = SharedInformerFactory::default();
        let fake = Arc::new(FakeListerWatcher::<DynamicObject>::new());
        fake.fail_next_lists(vec![
            crate::cache::list_watch::WatchError::ConnectionRefused;
            100
        ]);
        let _i = factory.informer_for::<DynamicObject, _>("pods", |_| fake.clone() as _);
        factory.start();
        let r = factory.wait_for_cache_sync(Duration::from_millis(50)).await;
        assert_eq!(r.get("pods"), Some(&false));
        factory.shutdown().await;
    }
}
