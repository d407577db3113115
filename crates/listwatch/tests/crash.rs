//! The crash test: concurrent writers, SIGKILL while writes are in flight, restart on the
//! same data directory, and every acknowledged write must still be there.

mod common;

use common::{http_client, http_request, TestServer};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WRITERS: usize = 16;
const WRITE_FOR: Duration = Duration::from_secs(2);

fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no numeric resourceVersion in {obj}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_sigkill() {
    let srv = TestServer::start();
    let url = format!("{}/api/v1/namespaces/default/configmaps", srv.url);

    // name -> resourceVersion of every create answered with 2xx.
    let acked: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let failures = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // Requests sent and not yet answered.
    let in_flight = Arc::new(AtomicU64::new(0));
    let client = http_client();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (client, url, acked, failures, stop, in_flight) = (
            client.clone(),
            url.clone(),
            acked.clone(),
            failures.clone(),
            stop.clone(),
            in_flight.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("crash-{w}-{i}");
                i += 1;
                let body = json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "labels": {"writer": w.to_string()}},
                    "data": {"seq": i.to_string()},
                });
                in_flight.fetch_add(1, Ordering::SeqCst);
                let result = http_request(&client, "POST", &url, Some(&body)).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                match result {
                    Ok((code, bytes)) if (200..300).contains(&code) => {
                        let obj: Value = serde_json::from_slice(&bytes)
                            .expect("a 2xx create answers with the object");
                        assert_eq!(obj["metadata"]["name"], name);
                        acked.lock().unwrap().insert(name, rv_of(&obj));
                    }
                    Ok((code, bytes)) => panic!(
                        "create {name} answered {code} before the crash: {}",
                        String::from_utf8_lossy(&bytes)
                    ),
                    // The server is gone (the crash): this write may or may not have landed.
                    Err(_) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        }));
    }

    tokio::time::sleep(WRITE_FOR).await;
    let before_kill = acked.lock().unwrap().len();
    let pending_at_kill = in_flight.load(Ordering::SeqCst);
    // SIGKILL while the writers are still going.
    let dir = srv.kill9();
    // Let the in-flight requests fail, then stop the writers.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("a writer task panicked");
    }
    let acked = Arc::try_unwrap(acked).unwrap().into_inner().unwrap();
    eprintln!(
        "crash test: {} writes acknowledged ({before_kill} before the kill was sent, \
         {pending_at_kill} in flight when it was), {} failed after it",
        acked.len(),
        failures.load(Ordering::Relaxed)
    );
    assert!(
        acked.len() > 100,
        "only {} writes were acknowledged in {WRITE_FOR:?}; the test needs > 100",
        acked.len()
    );
    assert!(
        pending_at_kill > 0,
        "no write was in flight when the server was killed"
    );
    assert!(
        failures.load(Ordering::Relaxed) > 0,
        "no write failed: the kill did not happen while writes were in flight"
    );
    let max_acked = acked.values().copied().max().unwrap();

    // Restart on the same data and check every acknowledged write.
    let srv = TestServer::start_in(dir, &[]);
    let url = format!("{}/api/v1/namespaces/default/configmaps", srv.url);
    let client = http_client();
    let (code, bytes) = http_request(&client, "GET", &url, None)
        .await
        .expect("listing after the restart");
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&bytes));
    let list: Value = serde_json::from_slice(&bytes).expect("a JSON list");
    let list_rv: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("a list resourceVersion");
    let stored: HashMap<String, u64> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["metadata"]["name"].as_str().unwrap().to_string(),
                rv_of(i),
            )
        })
        .collect();
    let mut missing: Vec<&String> = acked.keys().filter(|n| !stored.contains_key(*n)).collect();
    missing.sort();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged writes are missing after the restart, e.g. {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(10)]
    );
    for (name, rv) in &acked {
        assert_eq!(
            stored[name], *rv,
            "{name} came back with a different resourceVersion"
        );
    }
    assert!(
        list_rv >= max_acked,
        "list resourceVersion {list_rv} is older than an acknowledged write ({max_acked})"
    );

    // New writes continue the revision sequence.
    let body = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "after-restart"},
        "data": {"k": "v"},
    });
    let (code, bytes) = http_request(&client, "POST", &url, Some(&body))
        .await
        .expect("creating after the restart");
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&bytes));
    let created: Value = serde_json::from_slice(&bytes).unwrap();
    let new_rv = rv_of(&created);
    assert!(
        new_rv > max_acked && new_rv > list_rv,
        "a create after the restart got resourceVersion {new_rv}, not above {max_acked} / {list_rv}"
    );

    // A create of an acknowledged name still conflicts.
    let some = acked.keys().next().unwrap().clone();
    let dup = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": some}});
    let (code, bytes) = http_request(&client, "POST", &url, Some(&dup))
        .await
        .expect("re-creating an acknowledged name");
    assert_eq!(code, 409, "{}", String::from_utf8_lossy(&bytes));
}
