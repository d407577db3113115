//! The watch-semantics suite: list/watch behaviour over the HTTP handler, written once and
//! run against every storage backend.
//!
//! Each check is an `async fn` taking a [`Factory`] that builds a fresh server over fresh
//! storage. [`watch_suite!`] turns the whole list of checks into `#[tokio::test]`s for one
//! backend; adding a backend (e.g. etcd) is one more `watch_suite!(name, Factory)` line.

mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(5);
const CM: &str = "/api/v1/namespaces/default/configmaps";

/// The checks, each generic over the backend factory.
mod checks {
    use super::*;
    use apiserver::ServerConfig;

    /// One expected watch event, derived from the write responses.
    #[derive(Debug, Clone)]
    struct Expected {
        event_type: &'static str,
        name: String,
        rv: u64,
        data: Value,
    }

    fn assert_event(ctx: &str, got: &Value, want: &Expected) {
        assert_eq!(ev_type(got), want.event_type, "{ctx}: type of {got}");
        let obj = &got["object"];
        assert_eq!(name_of(obj), want.name, "{ctx}: name of {got}");
        assert_eq!(rv_of(obj), want.rv, "{ctx}: resourceVersion of {got}");
        assert_eq!(obj["data"], want.data, "{ctx}: data of {got}");
        assert_eq!(obj["kind"], "ConfigMap", "{ctx}: kind of {got}");
    }

    /// Runs a scripted mix of creates, updates (merge patch and PUT) and deletes in
    /// `default`, and returns the events a watcher of every configmap must see.
    async fn scripted_writes(srv: &Arc<apiserver::ApiServer>) -> Vec<Expected> {
        let mut out = Vec::new();
        let mut state: HashMap<String, Value> = HashMap::new();
        let script: &[(&str, &str)] = &[
            ("create", "a"),
            ("create", "b"),
            ("create", "c"),
            ("create", "d"),
            ("patch", "a"),
            ("patch", "b"),
            ("delete", "c"),
            ("patch", "a"),
            ("create", "c"),
            ("put", "d"),
            ("delete", "a"),
            ("patch", "b"),
            ("put", "d"),
            ("delete", "b"),
            ("create", "e"),
            ("create", "f"),
            ("patch", "e"),
            ("patch", "e"),
            ("delete", "d"),
            ("patch", "f"),
            ("create", "a"),
        ];
        for (i, (op, name)) in script.iter().enumerate() {
            let item = format!("{CM}/{name}");
            let data = json!({"step": i.to_string()});
            let (event_type, obj) = match *op {
                "create" => (
                    "ADDED",
                    ok(
                        "create",
                        post(srv, CM, &configmap(name, json!({}), data.clone())).await,
                    ),
                ),
                "patch" => (
                    "MODIFIED",
                    ok(
                        "patch",
                        merge_patch(srv, &item, &json!({"data": data.clone()})).await,
                    ),
                ),
                "put" => {
                    let mut cur = state[*name].clone();
                    cur["data"] = data.clone();
                    ("MODIFIED", ok("put", put(srv, &item, &cur).await))
                }
                "delete" => {
                    let last = ok("delete", delete(srv, &item).await);
                    // The deletion's own revision: nothing else writes meanwhile.
                    let rv = storage_rev(srv).await;
                    assert!(rv > rv_of(&last));
                    let prev = state.remove(*name).unwrap();
                    assert_eq!(last["data"], prev["data"]);
                    out.push(Expected {
                        event_type: "DELETED",
                        name: name.to_string(),
                        rv,
                        data: prev["data"].clone(),
                    });
                    continue;
                }
                _ => unreachable!(),
            };
            assert_eq!(obj["data"], data);
            out.push(Expected {
                event_type,
                name: name.to_string(),
                rv: rv_of(&obj),
                data,
            });
            state.insert(name.to_string(), obj);
        }
        for w in out.windows(2) {
            assert!(w[0].rv < w[1].rv, "write RVs increase: {w:?}");
        }
        out
    }

    /// Resume from any kept resourceVersion: exactly the events after it, in order, no gap,
    /// no duplicate.
    pub async fn resume_from_any_kept_rv<F: Factory>(f: &F) {
        let h = f.start(ServerConfig::default()).await;
        let srv = &h.srv;
        let base = rv_of(&ok("list", get(srv, CM).await));
        let expected = scripted_writes(srv).await;
        let mut starts = vec![base];
        starts.extend(expected.iter().map(|e| e.rv));
        let mut watches = Vec::new();
        for &r in &starts {
            let w = watch(srv, &format!("{CM}?watch=true&resourceVersion={r}")).await;
            watches.push((r, w));
        }
        for (r, w) in &mut watches {
            for want in expected.iter().filter(|e| e.rv > *r) {
                let got = w.expect(WAIT).await;
                assert_event(&format!("{} resume from {r}", f.name()), &got, want);
            }
        }
        // A sentinel write: the very next event of every watch must be it (no extras).
        let sentinel = ok(
            "sentinel",
            post(srv, CM, &configmap("zz-sentinel", json!({}), json!({}))).await,
        );
        for (r, w) in &mut watches {
            let got = w.expect(WAIT).await;
            assert_eq!(ev_type(&got), "ADDED", "from {r}: {got}");
            assert_eq!(name_of(&got["object"]), "zz-sentinel", "from {r}: {got}");
            assert_eq!(rv_of(&got["object"]), rv_of(&sentinel));
        }
        // The same through the legacy watch path.
        let mut legacy = watch(
            srv,
            &format!("/api/v1/watch/namespaces/default/configmaps?resourceVersion={base}"),
        )
        .await;
        for want in &expected {
            assert_event("legacy watch", &legacy.expect(WAIT).await, want);
        }
    }

    /// A watch from a version pushed out of the ring: 200, one ERROR 410 Expired, end.
    /// A list at a compacted version with Exact: HTTP 410.
    pub async fn too_old_is_410<F: Factory>(f: &F) {
        let h = f.start(config(10, 1000)).await;
        let srv = &h.srv;
        let mut rvs = Vec::new();
        for i in 0..25 {
            let name = format!("cm-{}", i % 8);
            let resp = if i < 8 {
                post(srv, CM, &configmap(&name, json!({}), json!({"i": "0"}))).await
            } else {
                merge_patch(
                    srv,
                    &format!("{CM}/{name}"),
                    &json!({"data": {"i": i.to_string()}}),
                )
                .await
            };
            rvs.push(rv_of(&ok("write", resp)));
        }
        // A backend that feeds the cache asynchronously (etcd) may not have delivered every
        // write yet, and then the ring still holds older versions: wait until the cache has
        // the last write, so that it holds exactly the last 10 events.
        let mut w = watch(srv, &format!("{CM}?watch=true&resourceVersion={}", rvs[23])).await;
        assert_eq!(rv_of(&w.expect(WAIT).await["object"]), rvs[24]);
        drop(w);
        let mut w = watch(srv, &format!("{CM}?watch=true&resourceVersion={}", rvs[0])).await;
        let ev = w.expect(WAIT).await;
        assert_eq!(ev_type(&ev), "ERROR", "{ev}");
        let st = &ev["object"];
        assert_eq!(st["kind"], "Status", "{ev}");
        assert_eq!(st["apiVersion"], "v1", "{ev}");
        assert_eq!(st["status"], "Failure", "{ev}");
        assert_eq!(st["code"], 410, "{ev}");
        assert_eq!(st["reason"], "Expired", "{ev}");
        let msg = st["message"].as_str().unwrap();
        assert!(
            msg.starts_with(&format!("too old resource version: {} (", rvs[0])),
            "{msg}"
        );
        w.expect_end(WAIT).await;

        // The ring keeps the last 10 events: resuming from the version just before them works
        // and replays exactly those 10.
        let edge = rvs[rvs.len() - 11];
        let mut w = watch(srv, &format!("{CM}?watch=true&resourceVersion={edge}")).await;
        for want in &rvs[rvs.len() - 10..] {
            let ev = w.expect(WAIT).await;
            assert_eq!(ev_type(&ev), "MODIFIED", "{ev}");
            assert_eq!(rv_of(&ev["object"]), *want);
        }
        w.expect_quiet(Duration::from_millis(100)).await;
        let older = rvs[rvs.len() - 12];
        let mut w = watch(srv, &format!("{CM}?watch=true&resourceVersion={older}")).await;
        let ev = w.expect(WAIT).await;
        assert_eq!(ev_type(&ev), "ERROR", "{ev}");
        assert_eq!(ev["object"]["code"], 410, "{ev}");
        w.expect_end(WAIT).await;

        // Lists: Exact at an old version works until storage compacts it, then 410.
        let uri = format!("{CM}?resourceVersion={}&resourceVersionMatch=Exact", rvs[3]);
        let list = ok("exact list", get(srv, &uri).await);
        assert_eq!(rv_of(&list), rvs[3]);
        assert_eq!(list["items"].as_array().unwrap().len(), 4);
        let cur = storage_rev(srv).await;
        srv.storage().compact(cur).await.unwrap();
        let (code, v) = get(srv, &uri).await;
        assert_status("exact list after compaction", code, &v, 410, "Expired");
        let (code, v) = get(
            srv,
            &format!("{CM}?resourceVersion={cur}&resourceVersionMatch=Exact"),
        )
        .await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["items"].as_array().unwrap().len(), 8);
    }

    /// Without resourceVersion and with "0": the current state as ADDED, then live events.
    pub async fn watch_current_state_then_live<F: Factory>(f: &F) {
        let h = f.start(ServerConfig::default()).await;
        let srv = &h.srv;
        let mut existing = BTreeMap::new();
        for n in ["x1", "x2", "x3"] {
            let o = ok(
                "create",
                post(srv, CM, &configmap(n, json!({}), json!({"n": n}))).await,
            );
            existing.insert(n.to_string(), rv_of(&o));
        }
        for (i, query) in ["watch=true", "watch=true&resourceVersion=0", "watch=1&"]
            .iter()
            .enumerate()
        {
            let mut w = watch(srv, &format!("{CM}?{query}")).await;
            let mut seen = BTreeMap::new();
            for _ in 0..existing.len() {
                let ev = w.expect(WAIT).await;
                assert_eq!(ev_type(&ev), "ADDED", "{query}: {ev}");
                seen.insert(name_of(&ev["object"]).to_string(), rv_of(&ev["object"]));
            }
            assert_eq!(seen, existing, "{query}: initial state");
            let name = format!("live-{i}");
            let created = ok(
                "create",
                post(srv, CM, &configmap(&name, json!({}), json!({}))).await,
            );
            let ev = w.expect(WAIT).await;
            assert_eq!(ev_type(&ev), "ADDED", "{query}: {ev}");
            assert_eq!(name_of(&ev["object"]), name);
            assert_eq!(rv_of(&ev["object"]), rv_of(&created));
            let patched = ok(
                "patch",
                merge_patch(srv, &format!("{CM}/x1"), &json!({"data": {"q": query}})).await,
            );
            let ev = w.expect(WAIT).await;
            assert_eq!(ev_type(&ev), "MODIFIED", "{query}: {ev}");
            assert_eq!(rv_of(&ev["object"]), rv_of(&patched));
            assert_eq!(ev["object"]["data"]["q"], *query);
            existing.insert(name, rv_of(&created));
            existing.insert("x1".into(), rv_of(&patched));
        }
    }

    /// Label selector transitions under the old/new rule.
    pub async fn label_selector_transitions<F: Factory>(f: &F) {
        let h = f.start(ServerConfig::default()).await;
        let srv = &h.srv;
        let mut w = watch(
            srv,
            &format!("{CM}?watch=true&labelSelector={}", enc("app=a")),
        )
        .await;
        let item = format!("{CM}/obj");
        ok(
            "create",
            post(
                srv,
                CM,
                &configmap("obj", json!({"app": "b"}), json!({"v": "1"})),
            )
            .await,
        );
        // Relabelled to match: ADDED.
        let o = ok(
            "relabel",
            merge_patch(srv, &item, &json!({"metadata": {"labels": {"app": "a"}}})).await,
        );
        let ev = w.expect(WAIT).await;
        assert_eq!(ev_type(&ev), "ADDED", "{ev}");
        assert_eq!(rv_of(&ev["object"]), rv_of(&o));
        assert_eq!(ev["object"]["metadata"]["labels"]["app"], "a");
        // Modified while matching: MODIFIED.
        let o = ok(
            "modify",
            merge_patch(srv, &item, &json!({"data": {"v": "2"}})).await,
        );
        let ev = w.expect(WAIT).await;
        assert_eq!(ev_type(&ev), "MODIFIED", "{ev}");
        assert_eq!(rv_of(&ev["object"]), rv_of(&o));
        assert_eq!(ev["object"]["data"]["v"], "2");
        // Relabelled away: DELETED with the OLD object and the NEW resourceVersion.
        let o = ok(
            "relabel away",
            merge_patch(
                srv,
                &item,
                &json!({"metadata": {"labels": {"app": "c"}}, "data": {"v": "3"}}),
            )
            .await,
        );
        let ev = w.expect(WAIT).await;
        assert_eq!(ev_type(&ev), "DELETED", "{ev}");
        assert_eq!(ev["object"]["metadata"]["labels"]["app"], "a", "{ev}");
        assert_eq!(ev["object"]["data"]["v"], "2", "old object: {ev}");
        assert_eq!(rv_of(&ev["object"]), rv_of(&o), "new resourceVersion: {ev}");
        // Modified and deleted while not matching: nothing.
        ok(
            "modify non-matching",
            merge_patch(srv, &item, &json!({"data": {"v": "4"}})).await,
        );
        ok("delete non-matching", delete(srv, &item).await);
        // A matching object created and deleted: ADDED then DELETED.
        let s = ok(
            "sentinel",
            post(
                srv,
                CM,
                &configmap("sentinel", json!({"app": "a"}), json!({})),
            )
            .await,
        );
        let ev = w.expect(WAIT).await;
        assert_eq!(
            (ev_type(&ev), name_of(&ev["object"])),
            ("ADDED", "sentinel"),
            "nothing for non-matching changes: {ev}"
        );
        assert_eq!(rv_of(&ev["object"]), rv_of(&s));
        ok(
            "delete sentinel",
            delete(srv, &format!("{CM}/sentinel")).await,
        );
        let del_rv = storage_rev(srv).await;
        let ev = w.expect(WAIT).await;
        assert_eq!(
            (ev_type(&ev), name_of(&ev["object"])),
            ("DELETED", "sentinel")
        );
        assert_eq!(rv_of(&ev["object"]), del_rv);
        assert_eq!(ev["object"]["metadata"]["labels"]["app"], "a");

        // A set-based selector, resumed from a version: the replay follows the same rule.
        let mut w2 = watch(
            srv,
            &format!(
                "{CM}?watch=true&resourceVersion={}&labelSelector={}",
                rv_of(&s) - 1,
                enc("app in (a,z)")
            ),
        )
        .await;
        let ev = w2.expect(WAIT).await;
        assert_eq!(
            (ev_type(&ev), name_of(&ev["object"])),
            ("ADDED", "sentinel")
        );
        let ev = w2.expect(WAIT).await;
        assert_eq!(
            (ev_type(&ev), name_of(&ev["object"])),
            ("DELETED", "sentinel")
        );
    }

    /// Field selector on pods (`spec.nodeName`, with `status.phase`), same rule. A pod gets
    /// its node once, by a binding, so it enters the selection by being bound and leaves it
    /// through its phase.
    pub async fn field_selector_transitions<F: Factory>(f: &F) {
        let h = f.start(ServerConfig::default()).await;
        let srv = &h.srv;
        let pods = "/api/v1/namespaces/default/pods";
        let mut w = watch(
            srv,
            &format!(
                "/api/v1/pods?watch=true&fieldSelector={}",
                enc("spec.nodeName=n1,status.phase!=Failed")
            ),
        )
        .await;
        let item = format!("{pods}/p1");
        ok("create", post(srv, pods, &pod("p1", "")).await);
        ok("create other", post(srv, pods, &pod("p2", "n2")).await);
        ok(
            "bind to n1",
            post(
                srv,
                &format!("{item}/binding"),
                &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"},
                        "target": {"kind": "Node", "name": "n1"}}),
            )
            .await,
        );
        let o = ok("get bound", get(srv, &item).await);
        let ev = w.expect(WAIT).await;
        assert_eq!(ev_type(&ev), "ADDED", "{ev}");
        assert_eq!(ev["object"]["kind"], "Pod");
        assert_eq!(rv_of(&ev["object"]), rv_of(&o));
        let o = ok(
            "label",
            merge_patch(srv, &item, &json!({"metadata": {"labels": {"x": "y"}}})).await,
        );
        let ev = w.expect(WAIT).await;
        assert_eq!(ev_type(&ev), "MODIFIED", "{ev}");
        assert_eq!(rv_of(&ev["object"]), rv_of(&o));
        let o = ok(
            "fail",
            merge_patch(
                srv,
                &format!("{item}/status"),
                &json!({"status": {"phase": "Failed"}}),
            )
            .await,
        );
        let ev = w.expect(WAIT).await;
        assert_eq!(ev_type(&ev), "DELETED", "{ev}");
        assert_eq!(
            ev["object"]["status"]["phase"], "Pending",
            "old object: {ev}"
        );
        assert_eq!(rv_of(&ev["object"]), rv_of(&o), "new resourceVersion: {ev}");
        ok("delete non-matching", delete(srv, &item).await);
        ok(
            "p2 runs on n2",
            merge_patch(
                srv,
                &format!("{pods}/p2/status"),
                &json!({"status": {"phase": "Running"}}),
            )
            .await,
        );
        let s = ok("sentinel", post(srv, pods, &pod("p3", "n1")).await);
        let ev = w.expect(WAIT).await;
        assert_eq!(
            (ev_type(&ev), name_of(&ev["object"])),
            ("ADDED", "p3"),
            "nothing for non-matching changes: {ev}"
        );
        assert_eq!(rv_of(&ev["object"]), rv_of(&s));
        // `==` and a combined selector narrow the same way.
        let mut w2 = watch(
            srv,
            &format!(
                "/api/v1/namespaces/default/pods?watch=true&fieldSelector={}",
                enc("spec.nodeName==n1,metadata.name!=p3")
            ),
        )
        .await;
        ok("create p4", post(srv, pods, &pod("p4", "n1")).await);
        let ev = w2.expect(WAIT).await;
        assert_eq!((ev_type(&ev), name_of(&ev["object"])), ("ADDED", "p4"));
        let ev = w.expect(WAIT).await;
        assert_eq!((ev_type(&ev), name_of(&ev["object"])), ("ADDED", "p4"));
    }

    /// Namespace-scoped watches never see other namespaces.
    pub async fn namespace_scoped_watch<F: Factory>(f: &F) {
        let h = f.start(ServerConfig::default()).await;
        let srv = &h.srv;
        create_namespace(srv, "ns-a").await;
        create_namespace(srv, "ns-b").await;
        let a = "/api/v1/namespaces/ns-a/configmaps";
        let b = "/api/v1/namespaces/ns-b/configmaps";
        let mut wa = watch(srv, &format!("{a}?watch=true")).await;
        let mut wall = watch(srv, "/api/v1/configmaps?watch=true&resourceVersion=0").await;
        let mut want_a = Vec::new();
        let mut want_all = Vec::new();
        for i in 0..6 {
            let (url, ns) = if i % 2 == 0 { (a, "ns-a") } else { (b, "ns-b") };
            let name = format!("c{i}");
            let o = ok(
                "create",
                post(srv, url, &configmap(&name, json!({}), json!({}))).await,
            );
            assert_eq!(o["metadata"]["namespace"], ns);
            if ns == "ns-a" {
                want_a.push((name.clone(), rv_of(&o)));
            }
            want_all.push((name, rv_of(&o)));
            // Same name in the other namespace too.
            let other = if ns == "ns-a" { b } else { a };
            let o2 = ok(
                "create twin",
                post(
                    srv,
                    other,
                    &configmap(&format!("t{i}"), json!({}), json!({})),
                )
                .await,
            );
            if other == a {
                want_a.push((format!("t{i}"), rv_of(&o2)));
            }
            want_all.push((format!("t{i}"), rv_of(&o2)));
        }
        for (name, rv) in &want_a {
            let ev = wa.expect(WAIT).await;
            assert_eq!(ev_type(&ev), "ADDED", "{ev}");
            assert_eq!(ev["object"]["metadata"]["namespace"], "ns-a", "{ev}");
            assert_eq!(
                (name_of(&ev["object"]), rv_of(&ev["object"])),
                (name.as_str(), *rv)
            );
        }
        wa.expect_quiet(Duration::from_millis(100)).await;
        for (name, rv) in &want_all {
            let ev = wall.expect(WAIT).await;
            assert_eq!(
                (name_of(&ev["object"]), rv_of(&ev["object"])),
                (name.as_str(), *rv)
            );
        }
        // A list scoped to ns-a agrees.
        let list = ok("list ns-a", get(srv, a).await);
        let names: BTreeSet<String> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| name_of(o).to_string())
            .collect();
        let want: BTreeSet<String> = want_a.iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(names, want);
    }

    /// Concurrent writers: every watcher sees strictly increasing versions and ends in the
    /// state a final list shows.
    pub async fn ordering_under_concurrent_writers<F: Factory>(f: &F) {
        let h = f.start(ServerConfig::default()).await;
        let srv = &h.srv;
        let start = rv_of(&ok("list", get(srv, CM).await));
        let mut readers = Vec::new();
        for _ in 0..5 {
            let mut w = watch(srv, &format!("{CM}?watch=true&resourceVersion={start}")).await;
            readers.push(tokio::spawn(async move {
                let mut events = Vec::new();
                loop {
                    let ev = w.expect(Duration::from_secs(20)).await;
                    let done = name_of(&ev["object"]) == "zz-done";
                    events.push(ev);
                    if done {
                        return events;
                    }
                }
            }));
        }
        let mut writers = Vec::new();
        for wi in 0..8 {
            let srv = srv.clone();
            writers.push(tokio::spawn(async move {
                let mut exists = [false; 5];
                for j in 0..50usize {
                    let k = j % 5;
                    let name = format!("w{wi}-{k}");
                    let item = format!("{CM}/{name}");
                    if !exists[k] {
                        let data = json!({"j": j.to_string()});
                        ok(
                            "create",
                            post(&srv, CM, &configmap(&name, json!({}), data)).await,
                        );
                        exists[k] = true;
                    } else if j % 7 == 6 {
                        ok("delete", delete(&srv, &item).await);
                        exists[k] = false;
                    } else {
                        let patch = json!({"data": {"j": j.to_string()}});
                        ok("patch", merge_patch(&srv, &item, &patch).await);
                    }
                }
            }));
        }
        for w in writers {
            w.await.unwrap();
        }
        ok(
            "done marker",
            post(srv, CM, &configmap("zz-done", json!({}), json!({}))).await,
        );
        let list = ok("final list", get(srv, CM).await);
        let final_state: BTreeMap<String, (u64, Value)> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (name_of(o).to_string(), (rv_of(o), o["data"].clone())))
            .collect();
        for (i, r) in readers.into_iter().enumerate() {
            let events = r.await.unwrap();
            assert!(
                events.len() > 400 - 60,
                "watcher {i}: {} events",
                events.len()
            );
            let mut last = start;
            let mut state: BTreeMap<String, (u64, Value)> = BTreeMap::new();
            for ev in &events {
                let o = &ev["object"];
                let rv = rv_of(o);
                assert!(rv > last, "watcher {i}: {rv} after {last}");
                last = rv;
                let name = name_of(o).to_string();
                match ev_type(ev) {
                    "ADDED" => {
                        assert!(!state.contains_key(&name), "watcher {i}: re-ADDED {name}");
                        state.insert(name, (rv, o["data"].clone()));
                    }
                    "MODIFIED" => {
                        assert!(
                            state.contains_key(&name),
                            "watcher {i}: MODIFIED unknown {name}"
                        );
                        state.insert(name, (rv, o["data"].clone()));
                    }
                    "DELETED" => {
                        assert!(
                            state.remove(&name).is_some(),
                            "watcher {i}: DELETED unknown {name}"
                        );
                    }
                    other => panic!("watcher {i}: unexpected {other}: {ev}"),
                }
            }
            assert_eq!(state, final_state, "watcher {i}: final state");
        }
    }

    /// `timeoutSeconds` ends the stream cleanly; a bookmark comes shortly before the end.
    pub async fn timeout_and_bookmarks<F: Factory>(f: &F) {
        let h = f.start(ServerConfig::default()).await;
        let srv = &h.srv;
        let t0 = Instant::now();
        let mut w = watch(srv, &format!("{CM}?watch=true&timeoutSeconds=1")).await;
        w.expect_end(Duration::from_secs(4)).await;
        let took = since(t0);
        assert!(
            (0.9..3.0).contains(&took),
            "timeoutSeconds=1 ended after {took}s"
        );

        let t0 = Instant::now();
        let mut w = watch(
            srv,
            &format!("{CM}?watch=true&allowWatchBookmarks=true&timeoutSeconds=3"),
        )
        .await;
        let mut max_rv = 0;
        for i in 0..3 {
            let o = ok(
                "create",
                post(srv, CM, &configmap(&format!("b{i}"), json!({}), json!({}))).await,
            );
            max_rv = max_rv.max(rv_of(&o));
        }
        let mut bookmarks = Vec::new();
        let mut seen = 0;
        loop {
            match w.next(Duration::from_secs(6)).await {
                Next::Event(ev) => {
                    let o = &ev["object"];
                    if ev_type(&ev) == "BOOKMARK" {
                        assert_eq!(o["kind"], "ConfigMap", "{ev}");
                        assert_eq!(o["apiVersion"], "v1", "{ev}");
                        let keys: BTreeSet<&str> =
                            o.as_object().unwrap().keys().map(String::as_str).collect();
                        assert_eq!(
                            keys,
                            BTreeSet::from(["kind", "apiVersion", "metadata"]),
                            "{ev}"
                        );
                        for (k, v) in o["metadata"].as_object().unwrap() {
                            assert!(
                                k == "resourceVersion" || (k == "creationTimestamp" && v.is_null()),
                                "bookmark metadata carries only the version: {ev}"
                            );
                        }
                        let rv = rv_of(o);
                        assert!(rv >= seen, "bookmark {rv} older than an event {seen}");
                        bookmarks.push((since(t0), rv));
                    } else {
                        assert_eq!(ev_type(&ev), "ADDED", "{ev}");
                        let rv = rv_of(o);
                        if let Some((_, b)) = bookmarks.last() {
                            assert!(rv > *b, "event {rv} after a bookmark at {b}");
                        }
                        seen = seen.max(rv);
                    }
                }
                Next::End => break,
                Next::Timeout => panic!("a 3 s watch still open after {}s", since(t0)),
            }
        }
        let took = since(t0);
        assert!(
            (2.9..5.0).contains(&took),
            "timeoutSeconds=3 ended after {took}s"
        );
        assert_eq!(seen, max_rv, "all three creates were delivered");
        let (at, rv) = *bookmarks
            .last()
            .unwrap_or_else(|| panic!("no BOOKMARK before the end ({took}s)"));
        assert!(at >= 0.5 && at <= took, "bookmark at {at}s of {took}s");
        assert!(
            rv >= max_rv,
            "the last bookmark ({rv}) covers every event ({max_rv})"
        );

        // Without allowWatchBookmarks, no bookmark.
        let mut w = watch(srv, &format!("{CM}?watch=true&timeoutSeconds=2")).await;
        for _ in 0..3 {
            let ev = w.expect(WAIT).await;
            assert_eq!(ev_type(&ev), "ADDED");
        }
        w.expect_end(Duration::from_secs(4)).await;
    }

    /// Streaming list: ADDED for the current state, the initial-events-end bookmark, then
    /// live events.
    pub async fn send_initial_events<F: Factory>(f: &F) {
        let h = f.start(ServerConfig::default()).await;
        let srv = &h.srv;
        let mut names = BTreeSet::new();
        let mut max_rv = 0;
        for i in 0..4 {
            let n = format!("s{i}");
            let o = ok(
                "create",
                post(srv, CM, &configmap(&n, json!({}), json!({}))).await,
            );
            max_rv = max_rv.max(rv_of(&o));
            names.insert(n);
        }
        for extra in ["", "&resourceVersion=0", "&resourceVersion=1"] {
            let mut w = watch(
                srv,
                &format!(
                    "{CM}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true{extra}"
                ),
            )
            .await;
            let mut got = BTreeSet::new();
            for _ in 0..names.len() {
                let ev = w.expect(WAIT).await;
                assert_eq!(ev_type(&ev), "ADDED", "{extra}: {ev}");
                got.insert(name_of(&ev["object"]).to_string());
            }
            assert_eq!(got, names, "{extra}");
            let bm = w.expect(WAIT).await;
            assert_eq!(ev_type(&bm), "BOOKMARK", "{extra}: {bm}");
            assert_eq!(bm["object"]["kind"], "ConfigMap");
            assert_eq!(
                bm["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true",
                "{bm}"
            );
            assert!(rv_of(&bm["object"]) >= max_rv, "{bm}");
            let n = format!("s{}", names.len());
            let o = ok(
                "create",
                post(srv, CM, &configmap(&n, json!({}), json!({}))).await,
            );
            let ev = w.expect(WAIT).await;
            assert_eq!(
                (ev_type(&ev), name_of(&ev["object"])),
                ("ADDED", n.as_str())
            );
            assert_eq!(rv_of(&ev["object"]), rv_of(&o));
            max_rv = rv_of(&o);
            names.insert(n);
        }
    }

    /// A watcher that never reads is closed; a reader is unaffected and prompt.
    pub async fn stalled_watcher_is_closed<F: Factory>(f: &F) {
        let h = f.start(config(10_000, 16)).await;
        let srv = &h.srv;
        const N: usize = 200;
        let mut stalled = watch(srv, &format!("{CM}?watch=true")).await;
        let mut reader = watch(srv, &format!("{CM}?watch=true")).await;
        let reading = Arc::new(AtomicBool::new(true));
        let flag = reading.clone();
        let reader_task = tokio::spawn(async move {
            let mut arrivals: Vec<(u64, Instant, String)> = Vec::new();
            let mut ended = None;
            while arrivals.len() < N {
                match reader.next(Duration::from_secs(10)).await {
                    Next::Event(ev) => {
                        arrivals.push((rv_of(&ev["object"]), Instant::now(), ev_type(&ev).into()))
                    }
                    other => {
                        flag.store(false, Ordering::Relaxed);
                        ended = Some(other);
                        break;
                    }
                }
            }
            (arrivals, ended)
        });
        let mut written = Vec::new();
        for i in 0..N {
            let o = ok(
                "create",
                post(
                    srv,
                    CM,
                    &configmap(&format!("load-{i:03}"), json!({}), json!({"i": "x"})),
                )
                .await,
            );
            written.push((rv_of(&o), Instant::now()));
            if !reading.load(Ordering::Relaxed) {
                break;
            }
        }
        let (arrivals, ended) = reader_task.await.unwrap();
        if let Some(how) = ended {
            // Known server issue (reported): the cacher's dispatch never waits on a full
            // watcher queue, so a burst larger than `watcher_queue` that arrives before the
            // reader's task is scheduled terminates a reader that is draining continuously.
            let terminated = metric_sum(srv, "apiserver_terminated_watchers_total").await;
            panic!(
                "SERVER BUG ({}): the continuously-read watcher ended ({how:?}) after {} of {} \
                 events with watcher_queue=16; apiserver_terminated_watchers_total={terminated}",
                f.name(),
                arrivals.len(),
                written.len()
            );
        }
        assert_eq!(arrivals.len(), N);
        for ((rv, wrote), (got_rv, at, t)) in written.iter().zip(&arrivals) {
            assert_eq!((rv, t.as_str()), (got_rv, "ADDED"), "reader order");
            let lag = at.saturating_duration_since(*wrote);
            assert!(
                lag < Duration::from_secs(1),
                "event {rv} arrived {lag:?} after its write"
            );
        }
        let mut got = 0;
        loop {
            match stalled.next(Duration::from_secs(5)).await {
                Next::Event(_) => got += 1,
                Next::End => break,
                Next::Timeout => panic!("the stalled watcher was not closed ({got} events)"),
            }
        }
        assert!(got < N, "the stalled watcher received all {got} events");
        let terminated = metric_sum(srv, "apiserver_terminated_watchers_total").await;
        assert!(terminated >= 1.0, "terminated watchers: {terminated}");
    }

    /// limit/continue pagination at one resourceVersion, and consistent lists.
    pub async fn list_pagination<F: Factory>(f: &F) {
        let h = f.start(ServerConfig::default()).await;
        let srv = &h.srv;
        create_namespace(srv, "pages").await;
        let url = "/api/v1/namespaces/pages/configmaps";
        let mut originals = BTreeMap::new();
        for i in 0..7 {
            let n = format!("p{i}");
            let o = ok(
                "create",
                post(srv, url, &configmap(&n, json!({}), json!({"orig": "yes"}))).await,
            );
            originals.insert(n, rv_of(&o));
        }
        // An object elsewhere must not show up.
        ok(
            "other ns",
            post(srv, CM, &configmap("p-elsewhere", json!({}), json!({}))).await,
        );
        let mut seen = Vec::new();
        let mut page_rv = None;
        let mut uri = format!("{url}?limit=2");
        let mut pages = 0;
        loop {
            let page = ok("page", get(srv, &uri).await);
            assert_eq!(page["kind"], "ConfigMapList");
            assert_eq!(page["apiVersion"], "v1");
            pages += 1;
            let items = page["items"].as_array().unwrap();
            assert!(items.len() <= 2, "page {pages}: {page}");
            for it in items {
                assert_eq!(it["data"]["orig"], "yes", "a snapshot page: {it}");
                seen.push((name_of(it).to_string(), rv_of(it)));
            }
            let rv = rv_of(&page);
            match page_rv {
                None => {
                    page_rv = Some(rv);
                    assert_eq!(page["metadata"]["remainingItemCount"], 5, "{page}");
                    // Writes between pages must not show up in later pages.
                    ok(
                        "write between pages",
                        merge_patch(srv, &format!("{url}/p5"), &json!({"data": {"orig": "no"}}))
                            .await,
                    );
                    ok(
                        "delete between pages",
                        delete(srv, &format!("{url}/p6")).await,
                    );
                    ok(
                        "create between pages",
                        post(srv, url, &configmap("p9", json!({}), json!({}))).await,
                    );
                }
                Some(first) => assert_eq!(rv, first, "page {pages} resourceVersion"),
            }
            match page["metadata"]["continue"].as_str() {
                Some(c) if !c.is_empty() => uri = format!("{url}?limit=2&continue={}", enc(c)),
                _ => break,
            }
        }
        assert_eq!(pages, 4);
        let seen_map: BTreeMap<String, u64> = seen.iter().cloned().collect();
        assert_eq!(seen.len(), 7, "each object exactly once: {seen:?}");
        assert_eq!(seen_map, originals);

        // A consistent list right after a write includes it.
        for i in 0..5 {
            let n = format!("fresh{i}");
            let o = ok(
                "create",
                post(srv, url, &configmap(&n, json!({}), json!({}))).await,
            );
            let list = ok("list", get(srv, url).await);
            assert!(rv_of(&list) >= rv_of(&o));
            let found = list["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|it| name_of(it) == n && rv_of(it) == rv_of(&o));
            assert!(found, "consistent list misses {n}");
        }
        // A label-selected paginated list also returns everything exactly once.
        let mut count = 0;
        let mut uri = format!("{url}?limit=3&labelSelector={}", enc("!nothing"));
        loop {
            let page = ok("page", get(srv, &uri).await);
            count += page["items"].as_array().unwrap().len();
            match page["metadata"]["continue"].as_str() {
                Some(c) if !c.is_empty() => {
                    uri = format!(
                        "{url}?limit=3&labelSelector={}&continue={}",
                        enc("!nothing"),
                        enc(c)
                    )
                }
                _ => break,
            }
        }
        assert_eq!(count, 7 - 1 + 1 + 5);
    }
}

/// Expands to one `#[tokio::test]` per check for one backend.
macro_rules! watch_suite {
    ($backend:ident, $factory:expr) => {
        mod $backend {
            use super::checks;

            watch_suite!(@tests $factory;
                resume_from_any_kept_rv,
                too_old_is_410,
                watch_current_state_then_live,
                label_selector_transitions,
                field_selector_transitions,
                namespace_scoped_watch,
                ordering_under_concurrent_writers,
                timeout_and_bookmarks,
                send_initial_events,
                stalled_watcher_is_closed,
                list_pagination,
            );
        }
    };
    (@tests $factory:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                checks::$check(&$factory).await;
            }
        )*
    };
}

watch_suite!(memory, super::Memory);
watch_suite!(embedded, super::Embedded);
watch_suite!(etcd, super::Etcd);
