//! The REST client against a real `listwatch serve` child process.
//!
//! The server binary is expected in the directory of the build profile these tests run
//! under (see the `test-server` crate); build it with the same profile first, e.g.
//! `cargo build -p listwatch`.

use std::collections::BTreeMap;
use std::time::Duration;

use client::rest::resource::{CONFIGMAPS, NAMESPACES, PODS};
use client::rest::{
    Api, Client, Config, DeleteParams, Error, ListParams, PatchParams, PatchType, PostParams,
    WatchEvent, WatchParams,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

mod common;

use common::{labels, pod, Server};

fn configmap(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), value.to_string())])),
        ..ConfigMap::default()
    }
}

#[tokio::test]
async fn typed_pod_crud_and_typed_errors() {
    let server = Server::start(&[]);
    common::typed_pod_crud(&Api::for_type(server.client(), "default")).await;
}

#[tokio::test]
async fn list_pages_and_list_all() {
    let server = Server::start(&[]);
    let namespaces: Api<Namespace> = Api::all(server.client(), NAMESPACES);
    for ns in ["ns1", "ns2"] {
        let obj = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        namespaces
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), CONFIGMAPS, "ns1");
    for i in 0..5 {
        cms.create(&PostParams::default(), &configmap(&format!("cm-{i}"), "v"))
            .await
            .unwrap();
    }
    // Another namespace, to check scoping.
    Api::<ConfigMap>::namespaced(server.client(), CONFIGMAPS, "ns2")
        .create(&PostParams::default(), &configmap("other", "v"))
        .await
        .unwrap();

    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.remaining_item_count, Some(3));
    let token = first.continue_token.clone().expect("a continue token");
    let second = cms
        .list(&ListParams::default().limit(2).continue_token(token))
        .await
        .unwrap();
    assert_eq!(second.items.len(), 2);
    assert_eq!(second.resource_version, first.resource_version);

    let all = cms.list_all(&ListParams::default().limit(2)).await.unwrap();
    let names: Vec<_> = all
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    assert!(all.continue_token.is_none());
    assert_eq!(all.resource_version, first.resource_version);

    // Raw items are the objects' JSON.
    let raw = cms
        .list_all_raw(&ListParams::default().limit(2))
        .await
        .unwrap();
    assert_eq!(raw.items.len(), 5);
    let v: serde_json::Value = serde_json::from_slice(&raw.items[4]).unwrap();
    assert_eq!(v["metadata"]["name"], "cm-4");

    // Across namespaces, and with a field selector.
    let everywhere = Api::<ConfigMap>::all(server.client(), CONFIGMAPS)
        .list_all(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(everywhere.items.len(), 6);
    let one = cms
        .list(&ListParams::default().fields("metadata.name=cm-3"))
        .await
        .unwrap();
    assert_eq!(one.items.len(), 1);

    // A bad selector is a typed 400.
    let e = cms
        .list(&ListParams::default().labels("a in ("))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(400), "{e}");
}

#[tokio::test]
async fn watch_sees_added_modified_deleted() {
    let server = Server::start(&[]);
    let client = server.client();
    let pods: Api<Pod> = Api::for_type(client.clone(), "default");
    let list = pods.list(&ListParams::default()).await.unwrap();
    let mut w = pods
        .watch(
            &WatchParams::default()
                .resource_version(list.resource_version.clone())
                .idle_timeout(Duration::from_secs(20)),
        )
        .await
        .unwrap();
    let mut raw = Api::<()>::namespaced(client, PODS, "default")
        .watch_raw(&WatchParams::default().resource_version(list.resource_version))
        .await
        .unwrap();

    let created = pods
        .create(&PostParams::default(), &pod("w", "web"))
        .await
        .unwrap();
    pods.patch(
        "w",
        &PatchParams::default(),
        PatchType::Merge,
        &json!({"metadata": {"labels": {"x": "y"}}}),
    )
    .await
    .unwrap();
    pods.delete("w", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    while seen.len() < 3 {
        match w.next().await.expect("stream ended early").unwrap() {
            WatchEvent::Bookmark { .. } => {}
            ev => seen.push(ev),
        }
    }
    assert!(matches!(&seen[0], WatchEvent::Added(p) if p.metadata.uid == created.metadata.uid));
    assert!(matches!(&seen[1], WatchEvent::Modified(p) if labels(p)["x"] == "y"));
    assert!(matches!(&seen[2], WatchEvent::Deleted(p) if p.metadata.name.as_deref() == Some("w")));

    let mut types = Vec::new();
    while types.len() < 3 {
        let ev = raw.next().await.unwrap().unwrap();
        if let Some(obj) = ev.object() {
            let v: serde_json::Value = serde_json::from_slice(obj).unwrap();
            assert_eq!(v["metadata"]["name"], "w");
            types.push(ev.type_name());
        }
    }
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"]);
}

#[tokio::test]
async fn streaming_list_ends_initial_events_with_a_bookmark() {
    let server = Server::start(&[]);
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), CONFIGMAPS, "default");
    for i in 0..3 {
        cms.create(&PostParams::default(), &configmap(&format!("c{i}"), "v"))
            .await
            .unwrap();
    }
    let mut w = cms
        .watch(&WatchParams::default().streaming_list())
        .await
        .unwrap();
    let mut added = 0;
    loop {
        let ev = w.next().await.unwrap().unwrap();
        if ev.is_initial_events_end() {
            break;
        }
        if let WatchEvent::Added(_) = ev {
            added += 1;
        }
    }
    assert_eq!(added, 3);
}

#[tokio::test]
async fn watch_from_a_too_old_version_gets_a_410_event() {
    let server = Server::start(&["--watch-cache-size", "5"]);
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), CONFIGMAPS, "default");
    let first = cms
        .create(&PostParams::default(), &configmap("c", "0"))
        .await
        .unwrap();
    let old_rv = first.metadata.resource_version.clone().unwrap();
    for i in 1..20 {
        cms.patch(
            "c",
            &PatchParams::default(),
            PatchType::Merge,
            &json!({"data": {"k": i.to_string()}}),
        )
        .await
        .unwrap();
    }
    let mut w = cms
        .watch(&WatchParams::default().resource_version(old_rv))
        .await
        .unwrap();
    let ev = w.next().await.expect("an ERROR event").unwrap();
    match ev {
        WatchEvent::Error(status) => {
            assert_eq!(status.code(), 410);
            let e = Error::from(status);
            assert!(e.is_gone(), "{e}");
        }
        other => panic!("expected ERROR, got {other:?}"),
    }
    // The server closes the stream after the ERROR event.
    assert!(w.next().await.is_none());
}

#[tokio::test]
async fn idle_watch_times_out() {
    let server = Server::start(&[]);
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), CONFIGMAPS, "default");
    let list = cms.list(&ListParams::default()).await.unwrap();
    let mut w = cms
        .watch(
            &WatchParams::default()
                .resource_version(list.resource_version)
                .disable_bookmarks()
                .idle_timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    let e = w.next().await.unwrap().unwrap_err();
    assert!(matches!(e, Error::IdleTimeout(_)), "{e}");
    assert!(w.next().await.is_none());
}

#[tokio::test]
async fn raw_requests_and_http_errors() {
    let server = Server::start(&[]);
    let client = server.client();
    let (code, body) = client
        .request_bytes(http::Method::GET, "/version", None)
        .await
        .unwrap();
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["major"], "1");
    let e = client
        .request_bytes(http::Method::GET, "/api/v1/nonexistent", None)
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
}

/// A hand-written HTTP/1.1 server that answers one request with `events` watch events in
/// chunked encoding, chunks cut every 64 KiB regardless of event boundaries.
async fn serve_events(events: usize) -> (String, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let mut req = Vec::new();
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = sock.read(&mut buf).await.unwrap();
            assert!(n > 0);
            req.extend_from_slice(&buf[..n]);
        }
        let mut body = Vec::new();
        for i in 0..events {
            body.extend_from_slice(
                format!(
                    r#"{{"type":"MODIFIED","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"pod-{i}","namespace":"default","uid":"6f0c3c2e-8d7b-4a51-9d0e-{i:012}","resourceVersion":"{rv}","creationTimestamp":"2024-01-01T00:00:00Z","labels":{{"app":"web","tier":"front"}}}},"spec":{{"nodeName":"node-{n}","containers":[{{"name":"main","image":"nginx:1.27","resources":{{"requests":{{"cpu":"100m","memory":"64Mi"}}}}}}],"restartPolicy":"Always","schedulerName":"default-scheduler"}},"status":{{"phase":"Running","podIP":"10.0.{n}.{m}","conditions":[{{"type":"Ready","status":"True"}}]}}}}}}"#,
                    rv = 1000 + i,
                    n = i % 100,
                    m = i % 250
                )
                .as_bytes(),
            );
            body.push(b'\n');
        }
        let mut out = Vec::with_capacity(body.len() + body.len() / 1000 + 256);
        out.extend_from_slice(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        for chunk in body.chunks(64 * 1024) {
            out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            out.extend_from_slice(chunk);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        sock.write_all(&out).await.unwrap();
        let _ = sock.shutdown().await;
    });
    (url, handle)
}

/// Raw watch decoding throughput from a socket. Run in release for a meaningful number:
/// `cargo test -p client --release --test rest -- --ignored --nocapture throughput`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark; run explicitly in release"]
async fn raw_watch_throughput() {
    const N: usize = 500_000;
    let (url, server) = serve_events(N).await;
    let client = Client::new(Config::new(&url).unwrap()).unwrap();
    let api: Api<()> = Api::namespaced(client, PODS, "default");
    let mut w = api.watch_raw(&WatchParams::default()).await.unwrap();
    let start = std::time::Instant::now();
    let mut count = 0usize;
    let mut bytes = 0usize;
    while let Some(ev) = w.next().await {
        if let WatchEvent::Modified(obj) = ev.unwrap() {
            bytes += obj.len();
            count += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    server.await.unwrap();
    assert_eq!(count, N);
    println!(
        "raw watch: {count} events ({:.0} MB) in {secs:.2}s = {:.0} events/s",
        bytes as f64 / 1e6,
        count as f64 / secs
    );
}
