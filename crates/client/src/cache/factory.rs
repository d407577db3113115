//! `SharedInformerFactory`: one shared informer per resource type, started, synced and shut
//! down together.
//!
//! Components that need the same resource ask the factory and get the same
//! [`SharedIndexInformer`] (one list + watch, one cache), no matter how many handlers they
//! register. Informers are keyed by the Rust object type and a resource name.

use crate::cache::list_watch::ListerWatcher;
use crate::cache::shared_informer::SharedIndexInformer;
use crate::clock::{RealClock, SharedClock};
use crate::object::KubeObject;
use parking_lot::Mutex;
use std::any::{Any, TypeId};
use std::collections::HashMap;
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

/// Waits until every item has synced (true) or `timeout` of real (Tokio) time has passed
/// (false).
pub async fn wait_for_cache_sync(items: &[&dyn HasSynced], timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
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

/// The selection every informer of a factory applies, handed to the closure that builds
/// each informer's [`ListerWatcher`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListWatchOptions {
    /// Only this namespace (`None` = all namespaces).
    pub namespace: Option<String>,
    /// A label selector, in the wire syntax.
    pub label_selector: Option<String>,
    /// A field selector, in the wire syntax.
    pub field_selector: Option<String>,
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

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    type_id: TypeId,
    resource: String,
}

struct State {
    informers: HashMap<Key, Arc<dyn Control>>,
    started: Vec<Key>,
    shutting_down: bool,
}

/// Hands out one shared informer per (object type, resource name). Cheap to clone.
#[derive(Clone)]
pub struct SharedInformerFactory {
    state: Arc<Mutex<State>>,
    namespace: Option<String>,
    tweak: Option<Tweak>,
    resync: Duration,
    clock: SharedClock,
}

/// Configures a [`SharedInformerFactory`].
#[must_use]
pub struct FactoryBuilder {
    namespace: Option<String>,
    tweak: Option<Tweak>,
    resync: Duration,
    clock: SharedClock,
}

impl FactoryBuilder {
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
            state: Arc::new(Mutex::new(State {
                informers: HashMap::new(),
                started: Vec::new(),
                shutting_down: false,
            })),
            namespace: self.namespace,
            tweak: self.tweak,
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
            namespace: None,
            tweak: None,
            resync: Duration::ZERO,
            clock: RealClock::shared(),
        }
    }

    /// The selection informers of this factory apply.
    pub fn list_watch_options(&self) -> ListWatchOptions {
        let mut opts = ListWatchOptions {
            namespace: self.namespace.clone(),
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
    /// [`SharedInformerFactory::start`] is started by the next `start`.
    pub fn informer_for<K, F>(&self, resource: &str, make: F) -> SharedIndexInformer<K>
    where
        K: KubeObject,
        F: FnOnce(&ListWatchOptions) -> Arc<dyn ListerWatcher<K>>,
    {
        let key = Key {
            type_id: TypeId::of::<K>(),
            resource: resource.to_string(),
        };
        let mut st = self.state.lock();
        if let Some(existing) = st.informers.get(&key) {
            if let Some(inf) = existing.as_any().downcast_ref::<SharedIndexInformer<K>>() {
                return inf.clone();
            }
        }
        let lw = make(&self.list_watch_options());
        let informer = SharedIndexInformer::builder(lw)
            .name(resource)
            .clock(self.clock.clone())
            .resync_period(self.resync)
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
        let deadline = Instant::now() + timeout;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::fake_lister_watcher::FakeListerWatcher;
    use crate::object::DynamicObject;

    #[tokio::test]
    async fn one_informer_per_type_and_sync() {
        let factory = SharedInformerFactory::builder()
            .namespace("prod")
            .tweak_list_options(|o| o.label_selector = Some("app=web".into()))
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
        assert_eq!(opts.label_selector.as_deref(), Some("app=web"));
        // A different resource name is a different informer.
        let nodes_fake = Arc::new(FakeListerWatcher::<DynamicObject>::new());
        let c = factory.informer_for::<DynamicObject, _>("nodes", |_| nodes_fake.clone() as _);
        assert!(!Arc::ptr_eq(a.indexer(), c.indexer()));

        factory.start();
        let synced = factory.wait_for_cache_sync(Duration::from_secs(5)).await;
        assert_eq!(synced.len(), 2);
        assert!(synced.values().all(|s| *s));
        assert!(wait_for_cache_sync(&[&a, &c], Duration::from_secs(1)).await);
        assert_eq!(a.indexer().len(), 1);
        assert_eq!(fake.list_calls().len(), 1, "one list for both users");

        factory.shutdown().await;
        assert!(a.is_stopped() && c.is_stopped());
        assert_eq!(fake.open_watches(), 0, "watch dropped on shutdown");
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
