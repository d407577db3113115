//! Scenario tests of the informer machinery against the scriptable fake source: lost
//! events, cut watches and compacted history must never leave a cache or a handler out of
//! step with the source.

use client::cache::ConfigureReflector as _;
use client::cache::{
    DeleteEvent, FakeListerWatcher, ListerWatcher, ResourceEventHandler, SharedIndexInformer,
    SharedInformerFactory, WatchError,
};
use client::clock::FakeClock;
use client::object::{DynamicObject, KubeObject};
use parking_lot::Mutex;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn obj(name: &str, rv: u64, gen: u64) -> Arc<DynamicObject> {
    let v = json!({"metadata": {"name": name, "namespace": "ns",
        "resourceVersion": rv.to_string(), "labels": {"gen": gen.to_string()}}});
    Arc::new(DynamicObject::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap())
}

/// The last notification per key: Some(rv) for add/update, None for delete.
#[derive(Clone, Default)]
struct LastSeen(Arc<Mutex<BTreeMap<String, Option<String>>>>);

impl ResourceEventHandler<DynamicObject> for LastSeen {
    fn on_add(&self, o: &Arc<DynamicObject>, _: bool) {
        self.0.lock().insert(
            o.name().to_string(),
            o.resource_version().map(str::to_string),
        );
    }
    fn on_update(&self, _: &Arc<DynamicObject>, o: &Arc<DynamicObject>) {
        self.on_add(o, false);
    }
    fn on_delete(&self, d: &DeleteEvent<DynamicObject>) {
        self.0.lock().insert(d.object().name().to_string(), None);
    }
}

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Random churn with dropped events, cut watches and compactions; at the end the cache and
/// the handler agree with the source exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_through_drops_cuts_and_compactions() {
    let clock = FakeClock::new();
    let fake = Arc::new(FakeListerWatcher::new());
    let informer =
        SharedIndexInformer::builder(fake.clone() as Arc<dyn ListerWatcher<DynamicObject>>)
            .clock(clock.shared())
            .build();
    let seen = LastSeen::default();
    informer.add_event_handler(seen.clone());
    informer.start();

    let mut rng = 0x1234_5678_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut rv = 0u64;
    let mut live: BTreeMap<String, u64> = BTreeMap::new();
    for step in 0..3000u64 {
        rv += 1;
        let name = format!("o{}", next() % 60);
        match (live.contains_key(&name), next() % 3) {
            (false, _) => {
                fake.add(obj(&name, rv, step));
                live.insert(name, rv);
            }
            (true, 0) => {
                fake.delete(obj(&name, rv, step));
                live.remove(&name);
            }
            (true, _) => {
                fake.modify(obj(&name, rv, step));
                live.insert(name, rv);
            }
        }
        match next() % 200 {
            0 => fake.drop_next_events(1 + (next() % 3) as usize),
            1 => fake.close_watches(),
            2 => {
                // Lost events are repaired by a relist forced through a 410.
                fake.compact();
                fake.inject_stream_error(WatchError::Gone);
            }
            _ => {}
        }
        if step % 50 == 0 {
            tokio::task::yield_now().await;
            clock.step(Duration::from_secs(60)); // let any backoff finish
        }
    }
    // Force a final relist so that any dropped event is repaired, then let it settle.
    fake.compact();
    fake.inject_stream_error(WatchError::Gone);
    let final_rv = fake.resource_version().to_string();
    until("caught up", || {
        clock.step(Duration::from_secs(60));
        informer.last_sync_resource_version() == final_rv
            && fake.list_calls().len() >= 2
            && informer.indexer().len() == live.len()
    })
    .await;
    until("handler caught up", || {
        let s = seen.0.lock();
        live.iter()
            .all(|(k, v)| s.get(k) == Some(&Some(v.to_string())))
            && s.iter().all(|(k, v)| v.is_none() != live.contains_key(k))
    })
    .await;
    let cache: BTreeMap<String, u64> = informer
        .indexer()
        .list()
        .iter()
        .map(|o| {
            (
                o.name().to_string(),
                o.resource_version().unwrap().parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(cache, live);
    informer.shutdown().await;
}

/// The factory shares informers, the lister reads the synced cache.
#[tokio::test]
async fn factory_and_lister_end_to_end() {
    let factory = SharedInformerFactory::builder().build();
    let fake = Arc::new(FakeListerWatcher::new());
    for i in 1..=5 {
        fake.add(obj(&format!("p{i}"), i, i % 2));
    }
    let make =
        |_: &client::cache::ListWatchOptions| fake.clone() as Arc<dyn ListerWatcher<DynamicObject>>;
    let informer = factory.informer_for::<DynamicObject, _>("pods", make);
    let again = factory.informer_for::<DynamicObject, _>("pods", make);
    factory.start();
    let synced = factory.wait_for_cache_sync(Duration::from_secs(5)).await;
    assert_eq!(synced.get("pods"), Some(&true));
    let lister = again.lister();
    let odd = api::labels::LabelSelector::parse("gen=1").unwrap();
    assert_eq!(lister.list(&odd).len(), 3);
    assert_eq!(lister.namespaced("ns").get("p2").unwrap().name(), "p2");
    assert!(lister.get(Some("other"), "p2").is_none());
    assert_eq!(informer.indexer().len(), 5);
    factory.shutdown().await;
}
