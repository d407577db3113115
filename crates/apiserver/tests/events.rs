//! Events over the HTTP handler: `events.k8s.io/v1` and core `v1` Events are one stored
//! object read and written through either API (fields renamed, one resourceVersion, one
//! watch stream each), and events expire after the server's event TTL.

mod common;

use apiserver::ServerConfig;
use common::*;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::time::Duration;

const CORE: &str = "/api/v1/namespaces/default/events";
const NEW: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
const WAIT: Duration = Duration::from_secs(10);

fn core_event(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-1"},
        "reason": "Pulled", "message": "image pulled", "type": "Normal",
        "source": {"component": "kubelet", "host": "n1"}, "count": 3,
        "firstTimestamp": "2024-05-01T10:00:00Z", "lastTimestamp": "2024-05-01T10:05:00Z"})
}

fn new_event(name: &str) -> Value {
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name},
        "eventTime": "2024-05-01T10:00:00.123456Z", "type": "Normal",
        "reportingController": "example.com/scheduler", "reportingInstance": "scheduler-1",
        "action": "Binding", "reason": "Scheduled", "note": "assigned web-2 to n2",
        "regarding": {"kind": "Pod", "namespace": "default", "name": "web-2"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_written_through_one_api_read_through_the_other() {
    let h = Memory.start(config(1000, 1000)).await;
    let srv = &h.srv;
    let mut new_watch = watch(srv, &format!("{NEW}?watch=1")).await;
    let mut core_watch = watch(srv, &format!("{CORE}?watch=1")).await;

    // Core in, events.k8s.io out.
    let c = ok("create core", post(srv, CORE, &core_event("a")).await);
    let seen = ok("read as events.k8s.io", get(srv, &format!("{NEW}/a")).await);
    assert_eq!(seen["apiVersion"], "events.k8s.io/v1");
    assert_eq!(seen["note"], "image pulled");
    assert_eq!(seen["regarding"]["name"], "web-1");
    assert_eq!(seen["deprecatedSource"]["component"], "kubelet");
    assert_eq!(seen["deprecatedCount"], 3);
    assert_eq!(seen["deprecatedLastTimestamp"], "2024-05-01T10:05:00Z");
    assert!(seen.get("message").is_none() && seen.get("involvedObject").is_none());
    assert_eq!(rv_of(&seen), rv_of(&c));
    assert_eq!(seen["metadata"]["uid"], c["metadata"]["uid"]);

    // events.k8s.io in, core out.
    let n = ok(
        "create events.k8s.io",
        post(srv, NEW, &new_event("b")).await,
    );
    assert_eq!(n["apiVersion"], "events.k8s.io/v1");
    assert_eq!(n["note"], "assigned web-2 to n2");
    let seen = ok("read as core", get(srv, &format!("{CORE}/b")).await);
    assert_eq!(seen["apiVersion"], "v1");
    assert_eq!(seen["message"], "assigned web-2 to n2");
    assert_eq!(seen["involvedObject"]["name"], "web-2");
    assert_eq!(seen["reportingComponent"], "example.com/scheduler");
    assert_eq!(seen["reportingInstance"], "scheduler-1");
    assert_eq!(seen["eventTime"], "2024-05-01T10:00:00.123456Z");
    assert_eq!(rv_of(&seen), rv_of(&n));

    // Both watches see both, each in its own form.
    for (name, rv) in [("a", rv_of(&c)), ("b", rv_of(&n))] {
        let ev = new_watch.expect(WAIT).await;
        assert_eq!((ev_type(&ev), name_of(&ev["object"])), ("ADDED", name));
        assert_eq!(ev["object"]["apiVersion"], "events.k8s.io/v1");
        assert!(ev["object"]["note"].is_string(), "{ev}");
        assert_eq!(rv_of(&ev["object"]), rv);
        let ev = core_watch.expect(WAIT).await;
        assert_eq!((ev_type(&ev), name_of(&ev["object"])), ("ADDED", name));
        assert!(ev["object"]["message"].is_string(), "{ev}");
    }

    // Lists and field selectors in each API's own terms.
    let list = ok("list new", get(srv, NEW).await);
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    let list = ok(
        "select by regarding",
        get(
            srv,
            &format!("{NEW}?fieldSelector={}", enc("regarding.name=web-2")),
        )
        .await,
    );
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(name_of)
        .collect();
    assert_eq!(names, ["b"]);
    let list = ok(
        "select by involvedObject",
        get(
            srv,
            &format!("{CORE}?fieldSelector={}", enc("involvedObject.name=web-2")),
        )
        .await,
    );
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    // A series update through the new API shows through the old one; the rest is fixed.
    let series = ok(
        "series",
        merge_patch(
            srv,
            &format!("{NEW}/b"),
            &json!({"series": {"count": 2, "lastObservedTime": "2024-05-01T10:01:00.000000Z"}}),
        )
        .await,
    );
    assert_eq!(series["series"]["count"], 2);
    assert_eq!(
        ok("core series", get(srv, &format!("{CORE}/b")).await)["series"]["count"],
        2
    );
    let (code, v) = merge_patch(srv, &format!("{NEW}/b"), &json!({"note": "rewritten"})).await;
    assert_status("note is immutable", code, &v, 422, "Invalid");

    // Deleted through one API, gone from both.
    ok("delete through new", delete(srv, &format!("{NEW}/a")).await);
    assert_eq!(get(srv, &format!("{CORE}/a")).await.0, 404);
    for w in [&mut new_watch, &mut core_watch] {
        let ev = w.expect(WAIT).await;
        assert_eq!(ev_type(&ev), "MODIFIED", "the series update: {ev}");
        let ev = w.expect(WAIT).await;
        assert_eq!((ev_type(&ev), name_of(&ev["object"])), ("DELETED", "a"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_outliving_the_ttl_are_deleted() {
    let cfg = ServerConfig {
        event_ttl: Some(Duration::from_secs(1)),
        ..ServerConfig::default()
    };
    let h = Memory.start(cfg).await;
    let srv = &h.srv;
    let cm = "/api/v1/namespaces/default/configmaps";
    ok(
        "configmap",
        post(srv, cm, &configmap("c", json!({}), json!({}))).await,
    );
    let mut w = watch(srv, &format!("{NEW}?watch=1")).await;
    ok("create core", post(srv, CORE, &core_event("old")).await);
    ok("create new", post(srv, NEW, &new_event("older")).await);
    let mut deleted = Vec::new();
    while deleted.len() < 2 {
        let ev = w.expect(Duration::from_secs(30)).await;
        if ev_type(&ev) == "DELETED" {
            deleted.push(name_of(&ev["object"]).to_string());
        }
    }
    deleted.sort();
    assert_eq!(deleted, ["old", "older"]);
    let list = ok("list", get(srv, CORE).await);
    assert!(list["items"].as_array().unwrap().is_empty(), "{list}");
    // Other kinds are not touched by the sweep.
    ok("configmap kept", get(srv, &format!("{cm}/c")).await);
}

/// Events applied by the watch caches of both event resources (0 while neither is loaded).
async fn events_cached(srv: &std::sync::Arc<apiserver::ApiServer>) -> f64 {
    let resp = send(
        srv,
        http::Method::GET,
        "/metrics",
        None,
        bytes::Bytes::new(),
    )
    .await;
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(text.to_vec())
        .unwrap()
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_watch_cache_events_received_total{")
                && l.contains("resource=\"events\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_cached_only_once_read_and_a_first_read_misses_none() {
    let h = Memory.start(ServerConfig::default()).await;
    let srv = &h.srv;
    for n in ["a", "b", "c"] {
        ok("create core", post(srv, CORE, &core_event(n)).await);
    }
    ok("create new", post(srv, NEW, &new_event("d")).await);
    // Written, not read: no cache work, and the server is ready.
    assert_eq!(events_cached(srv).await, 0.0);
    let ready = send(srv, http::Method::GET, "/readyz", None, bytes::Bytes::new()).await;
    assert_eq!(ready.status(), 200);

    // The first reads load the caches and see every event written before them.
    let core = ok("list core", get(srv, CORE).await);
    assert_eq!(core["items"].as_array().unwrap().len(), 4);
    let new = ok("list events.k8s.io", get(srv, NEW).await);
    assert_eq!(new["items"].as_array().unwrap().len(), 4);
    assert!(events_cached(srv).await > 0.0);

    // Loaded, they follow later writes.
    ok("create core", post(srv, CORE, &core_event("e")).await);
    let core = ok("list core", get(srv, CORE).await);
    assert_eq!(core["items"].as_array().unwrap().len(), 5);
    let ready = send(srv, http::Method::GET, "/readyz", None, bytes::Bytes::new()).await;
    assert_eq!(ready.status(), 200);
}
