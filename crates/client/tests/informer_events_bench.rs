//! A measurement, not a check (ignored by default): steady events per second through
//! reflector → DeltaFIFO → indexer → one handler, in process, fed by the
//! `FakeListerWatcher`.
//!
//! ```text
//! cargo test -p client --release --test informer_events_bench -- --ignored --nocapture
//! LW_EVENTS=1000000 cargo test -p client --release --test informer_events_bench -- --ignored --nocapture
//! ```

use client::cache::{
    FakeListerWatcher, ListerWatcher, ResourceEventHandlerFuncs, SharedIndexInformer,
};
use client::object::DynamicObject;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run with --ignored --nocapture, preferably with --release"]
async fn in_process_events_per_second() {
    let events: u64 = std::env::var("LW_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300_000);
    const KEYS: u64 = 1_000;
    // Every event carries a new resourceVersion (equal versions would count as a resync and
    // not reach a handler without a resync period), so the objects are built up front.
    let objects: Vec<Arc<DynamicObject>> = (0..events)
        .map(|i| {
            let json = format!(
                r#"{{"metadata":{{"name":"o{}","namespace":"bench","resourceVersion":"{}","labels":{{"app":"web"}}}}}}"#,
                i % KEYS,
                i + 1
            );
            Arc::new(DynamicObject::from_slice(json.as_bytes()).unwrap())
        })
        .collect();
    let fake = Arc::new(FakeListerWatcher::<DynamicObject>::new());
    let informer =
        SharedIndexInformer::builder(fake.clone() as Arc<dyn ListerWatcher<DynamicObject>>).build();
    let handled = Arc::new(AtomicU64::new(0));
    let (a, u) = (handled.clone(), handled.clone());
    informer.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .on_add(move |_, _| {
                a.fetch_add(1, Ordering::Relaxed);
            })
            .on_update(move |_, _| {
                u.fetch_add(1, Ordering::Relaxed);
            }),
    );
    informer.start();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !informer.has_synced() {
        assert!(Instant::now() < deadline, "informer did not sync");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let start = Instant::now();
    for (i, o) in objects.iter().enumerate() {
        if (i as u64) < KEYS {
            fake.add(Arc::clone(o));
        } else {
            fake.modify(Arc::clone(o));
        }
        if i % 1024 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let fed = start.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    while handled.load(Ordering::Relaxed) < events {
        assert!(
            Instant::now() < deadline,
            "only {} of {events} events handled",
            handled.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let total = start.elapsed();
    println!(
        "in-process: {events} events through reflector → fifo → indexer → 1 handler in {:.3} s \
         ({:.0} events/s; feeding took {:.3} s)",
        total.as_secs_f64(),
        events as f64 / total.as_secs_f64(),
        fed.as_secs_f64()
    );
    assert_eq!(informer.indexer().len() as u64, KEYS.min(events));
    informer.shutdown().await;
}
