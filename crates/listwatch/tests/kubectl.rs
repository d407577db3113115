//! End-to-end tests: the real kubectl 1.32 against a `listwatch serve` child process.
//! Every test runs its own server so the tests can run in parallel.

mod common;

use common::{http_json, item_names, TestServer};
use serde_json::Value;
use std::io::Read;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn pod_yaml(name: &str, ns: &str, labels: &[(&str, &str)]) -> String {
    let mut l = String::new();
    for (k, v) in labels {
        l.push_str(&format!("    {k}: \"{v}\"\n"));
    }
    let labels = if l.is_empty() {
        String::new()
    } else {
        format!("  labels:\n{l}")
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: \"{name}\"\n  namespace: \"{ns}\"\n{labels}spec:\n  containers:\n  - name: main\n    image: nginx:1.27\n  - name: side\n    image: busybox:1.36\n    command: [\"sleep\", \"3600\"]\n"
    )
}

fn deployment_yaml(web_image: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: {web_image}
        ports:
        - containerPort: 80
      - name: logger
        image: busybox:1.36
        command: ["sh", "-c", "tail -f /dev/null"]
"#
    )
}

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn labels(obj: &Value) -> &serde_json::Map<String, Value> {
    obj["metadata"]["labels"]
        .as_object()
        .unwrap_or_else(|| panic!("no labels in {obj}"))
}

fn container<'a>(spec: &'a Value, name: &str) -> &'a Value {
    spec["containers"]
        .as_array()
        .unwrap_or_else(|| panic!("no containers in {spec}"))
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name} in {spec}"))
}

/// Waits for a background kubectl to exit within `limit`; kills it and panics otherwise.
fn wait_child(mut child: Child, limit: Duration, what: &str) -> std::process::Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("polling kubectl").is_some() {
            return child.wait_with_output().expect("collecting kubectl output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collecting kubectl output");
            panic!(
                "{what} did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                stdout_of(&out),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn create_and_apply_with_validation() {
    let srv = TestServer::start();
    let pod = srv.write_file("pod.yaml", &pod_yaml("p1", "default", &[("app", "web")]));
    let out = srv.kubectl_ok(&["create", "-f", pod.to_str().unwrap()]);
    assert!(out.contains("pod/p1 created"), "create said: {out}");
    let p = srv.kubectl_json(&["get", "pod", "p1", "-o", "json"]);
    assert_eq!(p["kind"], "Pod");
    assert_eq!(p["metadata"]["name"], "p1");
    assert_eq!(p["status"]["phase"], "Pending");
    assert!(p["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()));

    let v1 = srv.write_file("deploy-v1.yaml", &deployment_yaml("nginx:1.26"));
    let out = srv.kubectl_ok(&["apply", "-f", v1.to_str().unwrap()]);
    assert!(
        out.contains("deployment.apps/web created"),
        "apply said: {out}"
    );
    let d = srv.kubectl_json(&["get", "deployment", "web", "-o", "json"]);
    assert_eq!(d["metadata"]["generation"], 1);
    let spec = &d["spec"]["template"]["spec"];
    assert_eq!(container(spec, "web")["image"], "nginx:1.26");
    assert_eq!(container(spec, "logger")["image"], "busybox:1.36");
    assert!(
        d["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .is_some(),
        "apply must record last-applied-configuration: {d}"
    );

    let v2 = srv.write_file("deploy-v2.yaml", &deployment_yaml("nginx:1.27"));
    let out = srv.kubectl_ok(&["apply", "-f", v2.to_str().unwrap()]);
    assert!(
        out.contains("deployment.apps/web configured"),
        "apply said: {out}"
    );
    let d = srv.kubectl_json(&["get", "deployment", "web", "-o", "json"]);
    let spec = &d["spec"]["template"]["spec"];
    assert_eq!(spec["containers"].as_array().unwrap().len(), 2, "{spec}");
    assert_eq!(container(spec, "web")["image"], "nginx:1.27");
    assert_eq!(container(spec, "logger")["image"], "busybox:1.36");
    assert_eq!(
        container(spec, "logger")["command"],
        serde_json::json!(["sh", "-c", "tail -f /dev/null"])
    );
    assert_eq!(d["metadata"]["generation"], 2, "{d}");

    let rv_before = d["metadata"]["resourceVersion"].clone();
    let out = srv.kubectl_ok(&["apply", "-f", v2.to_str().unwrap()]);
    assert!(
        out.contains("deployment.apps/web unchanged"),
        "apply said: {out}"
    );
    let d = srv.kubectl_json(&["get", "deployment", "web", "-o", "json"]);
    assert_eq!(d["metadata"]["resourceVersion"], rv_before);
    assert_eq!(d["metadata"]["generation"], 2);
}

#[test]
fn get_lists_and_selectors() {
    let srv = TestServer::start();
    let ns = srv.write_file(
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: other\n",
    );
    srv.kubectl_ok(&["create", "-f", ns.to_str().unwrap()]);
    let mut manifests = String::new();
    for (name, ns, app) in [
        ("web-1", "default", "web"),
        ("web-2", "default", "web"),
        ("db-1", "default", "db"),
        ("web-3", "other", "web"),
    ] {
        manifests.push_str("---\n");
        manifests.push_str(&pod_yaml(name, ns, &[("app", app)]));
    }
    let f = srv.write_file("pods.yaml", &manifests);
    srv.kubectl_ok(&["create", "-f", f.to_str().unwrap()]);

    // Plain list in the kubeconfig's namespace.
    let list = srv.kubectl_json(&["get", "pods", "-o", "json"]);
    // kubectl wraps what it printed in a v1 List, as it does against kube-apiserver.
    assert_eq!(list["kind"], "List", "{list}");
    let mut names = item_names(&list);
    names.sort();
    assert_eq!(names, ["db-1", "web-1", "web-2"]);
    for item in list["items"].as_array().unwrap() {
        assert_eq!(item["kind"], "Pod", "{item}");
        assert_eq!(item["metadata"]["namespace"], "default");
    }

    // All namespaces.
    let list = srv.kubectl_json(&["get", "pods", "-A", "-o", "json"]);
    let mut got: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["metadata"]["namespace"].as_str().unwrap().to_string(),
                i["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    let want: Vec<(String, String)> = [
        ("default", "db-1"),
        ("default", "web-1"),
        ("default", "web-2"),
        ("other", "web-3"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(got, want);

    // Label selector.
    let list = srv.kubectl_json(&["get", "pods", "-l", "app=web", "-o", "json"]);
    let mut names = item_names(&list);
    names.sort();
    assert_eq!(names, ["web-1", "web-2"]);
    let list = srv.kubectl_json(&["get", "pods", "-A", "-l", "app in (db)", "-o", "json"]);
    assert_eq!(item_names(&list), ["db-1"]);

    // Field selectors: make one pod Running through the status subresource first.
    srv.kubectl_ok(&[
        "patch",
        "pod",
        "web-2",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Running"}}"#,
    ]);
    let list = srv.kubectl_json(&[
        "get",
        "pods",
        "--field-selector",
        "status.phase=Pending",
        "-o",
        "json",
    ]);
    let mut names = item_names(&list);
    names.sort();
    assert_eq!(names, ["db-1", "web-1"]);
    let list = srv.kubectl_json(&[
        "get",
        "pods",
        "--field-selector",
        "status.phase=Running",
        "-o",
        "json",
    ]);
    assert_eq!(item_names(&list), ["web-2"]);
    let list = srv.kubectl_json(&[
        "get",
        "pods",
        "-A",
        "--field-selector",
        "metadata.name=web-3",
        "-o",
        "json",
    ]);
    assert_eq!(item_names(&list), ["web-3"]);
    assert_eq!(list["items"][0]["metadata"]["namespace"], "other");
    let list = srv.kubectl_json(&[
        "get",
        "pods",
        "--field-selector",
        "metadata.name!=web-1,status.phase=Pending",
        "-o",
        "json",
    ]);
    assert_eq!(item_names(&list), ["db-1"]);

    // An unknown field is rejected by the server.
    let err = srv.kubectl_err(&["get", "pods", "--field-selector", "spec.bogus=x"]);
    assert!(
        err.contains("BadRequest") || err.contains("spec.bogus"),
        "stderr: {err}"
    );
    assert!(err.contains("spec.bogus"), "stderr: {err}");
}

#[test]
fn get_chunked_and_raw_pagination() {
    let srv = TestServer::start();
    // Chunked lists: 5 configmaps, pages of 2.
    let mut cms = String::new();
    for i in 0..5 {
        cms.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n  labels:\n    set: chunk\ndata:\n  \"n\": \"{i}\"\n"
        ));
    }
    let f = srv.write_file("cms.yaml", &cms);
    srv.kubectl_ok(&["create", "-f", f.to_str().unwrap()]);
    let out = srv.kubectl(&["get", "configmaps", "--chunk-size=2", "-o", "json", "-v=6"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    let pages = log
        .lines()
        .filter(|l| l.contains("GET ") && l.contains("/configmaps?") && l.contains("limit=2"))
        .count();
    assert_eq!(pages, 3, "kubectl should fetch 3 pages of 2:\n{log}");
    let list: Value = serde_json::from_slice(&out.stdout).expect("kubectl printed JSON");
    let mut names: Vec<String> = item_names(&list)
        .into_iter()
        .filter(|n| n.starts_with("cm-"))
        .collect();
    names.sort();
    assert_eq!(names, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);

    // The same through raw HTTP: every page carries continue + remainingItemCount until the
    // last, and following the tokens yields every item exactly once.
    // Unfiltered, so the server can count what remains (kube-apiserver leaves
    // remainingItemCount out of filtered lists).
    let base = format!("{}/api/v1/namespaces/default/configmaps?limit=2", srv.url);
    let (code, page) = http_json("GET", &base, None);
    assert_eq!(code, 200, "{page}");
    assert_eq!(page["kind"], "ConfigMapList");
    assert_eq!(page["items"].as_array().unwrap().len(), 2, "{page}");
    assert_eq!(page["metadata"]["remainingItemCount"], 3, "{page}");
    let first_rv = page["metadata"]["resourceVersion"].clone();
    let mut seen = item_names(&page);
    let mut token = page["metadata"]["continue"]
        .as_str()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| panic!("first page has no continue token: {page}"))
        .to_string();
    let mut pages = 1;
    loop {
        let url = format!("{base}&continue={}", urlencode(&token));
        let (code, page) = http_json("GET", &url, None);
        assert_eq!(code, 200, "{page}");
        pages += 1;
        assert_eq!(
            page["metadata"]["resourceVersion"], first_rv,
            "every page is served at one resourceVersion"
        );
        seen.extend(item_names(&page));
        match page["metadata"]["continue"]
            .as_str()
            .filter(|t| !t.is_empty())
        {
            Some(t) => {
                assert!(
                    page["metadata"]["remainingItemCount"].as_u64().is_some(),
                    "a page with a continue token must carry remainingItemCount: {page}"
                );
                token = t.to_string();
            }
            None => break,
        }
        assert!(pages < 10, "pagination does not terminate");
    }
    assert_eq!(pages, 3);
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"], "{seen:?}");
}

fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reads a child's stdout on a thread into a shared buffer.
fn collect_stdout(child: &mut Child) -> Arc<Mutex<Vec<u8>>> {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let mut pipe = child.stdout.take().expect("stdout is piped");
    let sink = buf.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => sink.lock().unwrap().extend_from_slice(&chunk[..n]),
            }
        }
    });
    buf
}

/// Every complete JSON value in `bytes` (a trailing partial value is ignored).
fn json_values(bytes: &[u8]) -> Vec<Value> {
    serde_json::Deserializer::from_slice(bytes)
        .into_iter::<Value>()
        .map_while(Result::ok)
        .collect()
}

/// Event type and pod name of every watch event printed so far.
fn events(buf: &Mutex<Vec<u8>>) -> Vec<(String, String, Value)> {
    json_values(&buf.lock().unwrap())
        .into_iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("").to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                e["object"].clone(),
            )
        })
        .collect()
}

fn wait_for_events(
    buf: &Mutex<Vec<u8>>,
    deadline: Instant,
    what: &str,
    pred: impl Fn(&[(String, String, Value)]) -> bool,
) {
    loop {
        let evs = events(buf);
        if pred(&evs) {
            return;
        }
        if Instant::now() > deadline {
            let seen: Vec<(String, String)> = evs.into_iter().map(|(t, n, _)| (t, n)).collect();
            panic!(
                "watch: timed out waiting for {what}; events so far: {seen:?}\nraw:\n{}",
                String::from_utf8_lossy(&buf.lock().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn get_watch_sees_added_modified_deleted() {
    let srv = TestServer::start();
    // w0 exists before the watch starts: its ADDED (from the initial list) tells us the
    // watch is established, so later changes cannot be folded into the list.
    let f = srv.write_file("w0.yaml", &pod_yaml("w0", "default", &[]));
    srv.kubectl_ok(&["create", "-f", f.to_str().unwrap()]);

    let mut child = srv
        .kubectl_cmd(&["get", "pods", "-w", "--output-watch-events", "-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning kubectl get -w");
    let buf = collect_stdout(&mut child);
    let deadline = Instant::now() + Duration::from_secs(30);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for_events(&buf, deadline, "ADDED w0 (initial list)", |evs| {
            evs.iter().any(|(t, n, _)| t == "ADDED" && n == "w0")
        });

        let f = srv.write_file("w1.yaml", &pod_yaml("w1", "default", &[]));
        srv.kubectl_ok(&["create", "-f", f.to_str().unwrap()]);
        wait_for_events(&buf, deadline, "ADDED w1", |evs| {
            evs.iter().any(|(t, n, _)| t == "ADDED" && n == "w1")
        });
        srv.kubectl_ok(&["label", "pod", "w1", "stage=two"]);
        wait_for_events(&buf, deadline, "MODIFIED w1 with the label", |evs| {
            evs.iter().any(|(t, n, o)| {
                t == "MODIFIED" && n == "w1" && o["metadata"]["labels"]["stage"] == "two"
            })
        });
        srv.kubectl_ok(&["delete", "pod", "w1", "--wait=false"]);
        wait_for_events(&buf, deadline, "DELETED w1", |evs| {
            evs.iter().any(|(t, n, _)| t == "DELETED" && n == "w1")
        });

        // Order and resourceVersions of w1's events.
        let evs = events(&buf);
        let w1: Vec<(String, u64)> = evs
            .iter()
            .filter(|(_, n, _)| n == "w1")
            .map(|(t, _, o)| {
                (
                    t.clone(),
                    o["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0),
                )
            })
            .collect();
        let types: Vec<&str> = w1.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"], "{w1:?}");
        assert!(
            w1.windows(2).all(|p| p[0].1 < p[1].1),
            "resourceVersions must increase: {w1:?}"
        );
        // The DELETED event carries the last state (with the label).
        let deleted = &evs
            .iter()
            .find(|(t, n, _)| t == "DELETED" && n == "w1")
            .unwrap()
            .2;
        assert_eq!(deleted["metadata"]["labels"]["stage"], "two");
    }));
    let _ = child.kill();
    let _ = child.wait();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

#[test]
fn label_annotate_and_patch() {
    let srv = TestServer::start();
    let f = srv.write_file("p.yaml", &pod_yaml("p", "default", &[("app", "web")]));
    srv.kubectl_ok(&["create", "-f", f.to_str().unwrap()]);
    let get = |srv: &TestServer| srv.kubectl_json(&["get", "pod", "p", "-o", "json"]);

    // Labels: add, overwrite, remove.
    let out = srv.kubectl_ok(&["label", "pod", "p", "tier=front"]);
    assert!(out.contains("pod/p labeled"), "{out}");
    let p = get(&srv);
    assert_eq!(labels(&p)["tier"], "front");
    assert_eq!(labels(&p)["app"], "web");
    let err = srv.kubectl_err(&["label", "pod", "p", "tier=back"]);
    assert!(err.contains("--overwrite"), "{err}");
    srv.kubectl_ok(&["label", "pod", "p", "tier=back", "--overwrite"]);
    assert_eq!(labels(&get(&srv))["tier"], "back");
    srv.kubectl_ok(&["label", "pod", "p", "tier-"]);
    let p = get(&srv);
    assert!(!labels(&p).contains_key("tier"), "{p}");
    assert_eq!(labels(&p)["app"], "web");

    // Annotations: add two, remove one.
    let out = srv.kubectl_ok(&["annotate", "pod", "p", "note=hello", "owner=team-a"]);
    assert!(out.contains("pod/p annotated"), "{out}");
    let p = get(&srv);
    assert_eq!(p["metadata"]["annotations"]["note"], "hello");
    assert_eq!(p["metadata"]["annotations"]["owner"], "team-a");
    srv.kubectl_ok(&["annotate", "pod", "p", "note-"]);
    let p = get(&srv);
    assert!(p["metadata"]["annotations"].get("note").is_none(), "{p}");
    assert_eq!(p["metadata"]["annotations"]["owner"], "team-a");

    // Strategic merge (the default): containers merge by name.
    let out = srv.kubectl_ok(&[
        "patch",
        "pod",
        "p",
        "-p",
        r#"{"spec":{"containers":[{"name":"side","image":"busybox:1.37"}]}}"#,
    ]);
    assert!(out.contains("pod/p patched"), "{out}");
    let p = get(&srv);
    assert_eq!(p["spec"]["containers"].as_array().unwrap().len(), 2, "{p}");
    assert_eq!(container(&p["spec"], "side")["image"], "busybox:1.37");
    assert_eq!(container(&p["spec"], "main")["image"], "nginx:1.27");
    assert_eq!(
        container(&p["spec"], "side")["command"],
        serde_json::json!(["sleep", "3600"])
    );

    // Merge patch: null deletes a key, other keys are set.
    let cm = srv.write_file(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: conf\ndata:\n  a: \"1\"\n  b: \"2\"\n",
    );
    srv.kubectl_ok(&["create", "-f", cm.to_str().unwrap()]);
    srv.kubectl_ok(&[
        "patch",
        "configmap",
        "conf",
        "--type=merge",
        "-p",
        r#"{"data":{"a":null,"c":"3"},"metadata":{"labels":{"m":"yes"}}}"#,
    ]);
    let c = srv.kubectl_json(&["get", "configmap", "conf", "-o", "json"]);
    assert_eq!(
        c["data"],
        serde_json::json!({"b": "2", "c": "3"}),
        "merge patch result: {c}"
    );
    assert_eq!(c["metadata"]["labels"]["m"], "yes");

    // JSON patch: add a label, replace the second container's image, test-op guard.
    srv.kubectl_ok(&[
        "patch",
        "pod",
        "p",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels/j","value":"v"},{"op":"replace","path":"/spec/containers/1/image","value":"busybox:1.38"}]"#,
    ]);
    let p = get(&srv);
    assert_eq!(labels(&p)["j"], "v");
    assert_eq!(p["spec"]["containers"][1]["name"], "side");
    assert_eq!(p["spec"]["containers"][1]["image"], "busybox:1.38");
    assert_eq!(p["spec"]["containers"][0]["image"], "nginx:1.27");
    let err = srv.kubectl_err(&[
        "patch",
        "pod",
        "p",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/metadata/labels/j","value":"other"},{"op":"add","path":"/metadata/labels/k","value":"x"}]"#,
    ]);
    assert!(
        err.contains("invalid") && err.contains("/metadata/labels/j"),
        "{err}"
    );
    assert!(
        !labels(&get(&srv)).contains_key("k"),
        "a failed test op must not apply"
    );
}

#[test]
fn delete_and_wait() {
    let srv = TestServer::start();
    let f = srv.write_file(
        "pods.yaml",
        &format!(
            "{}---\n{}",
            pod_yaml("x", "default", &[]),
            pod_yaml("y", "default", &[])
        ),
    );
    srv.kubectl_ok(&["create", "-f", f.to_str().unwrap()]);

    // wait --for=delete, started before the delete.
    let waiter = srv
        .kubectl_cmd(&["wait", "--for=delete", "pod/x", "--timeout=20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning kubectl wait");
    std::thread::sleep(Duration::from_millis(1500));
    let out = srv.kubectl_ok(&["delete", "pod", "x"]);
    assert!(out.contains("pod \"x\" deleted"), "{out}");
    let out = wait_child(waiter, Duration::from_secs(25), "kubectl wait --for=delete");
    assert!(
        out.status.success(),
        "wait --for=delete failed:\nstdout:\n{}\nstderr:\n{}",
        stdout_of(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout_of(&out).contains("condition met"),
        "{}",
        stdout_of(&out)
    );
    let err = srv.kubectl_err(&["get", "pod", "x"]);
    assert!(err.contains("NotFound"), "{err}");

    // wait --for=jsonpath, satisfied by a later label.
    let waiter = srv
        .kubectl_cmd(&[
            "wait",
            "--for=jsonpath={.metadata.labels.ready}=yes",
            "pod/y",
            "--timeout=20s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning kubectl wait");
    std::thread::sleep(Duration::from_millis(1500));
    srv.kubectl_ok(&["label", "pod", "y", "ready=yes"]);
    let out = wait_child(
        waiter,
        Duration::from_secs(25),
        "kubectl wait --for=jsonpath",
    );
    assert!(
        out.status.success(),
        "wait --for=jsonpath failed:\nstdout:\n{}\nstderr:\n{}",
        stdout_of(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout_of(&out).contains("pod/y condition met"),
        "{}",
        stdout_of(&out)
    );

    // A wait that cannot be satisfied times out with a non-zero exit.
    let started = Instant::now();
    let err = srv.kubectl_err(&[
        "wait",
        "--for=jsonpath={.metadata.labels.ready}=no",
        "pod/y",
        "--timeout=2s",
    ]);
    assert!(err.contains("timed out"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn status_errors_through_kubectl() {
    let srv = TestServer::start();
    let err = srv.kubectl_err(&["get", "pod", "nope"]);
    assert!(
        err.contains(r#"Error from server (NotFound): pods "nope" not found"#),
        "stderr: {err}"
    );
    let err = srv.kubectl_err(&["get", "pod", "nope", "-n", "missing-ns"]);
    assert!(err.contains("NotFound"), "stderr: {err}");

    let f = srv.write_file("dup.yaml", &pod_yaml("dup", "default", &[]));
    srv.kubectl_ok(&["create", "-f", f.to_str().unwrap()]);
    let err = srv.kubectl_err(&["create", "-f", f.to_str().unwrap()]);
    assert!(
        err.contains("(AlreadyExists)") && err.contains(r#"pods "dup" already exists"#),
        "stderr: {err}"
    );

    // A server-side dry run checks the name too, and stores nothing.
    let err = srv.kubectl_err(&["create", "--dry-run=server", "-f", f.to_str().unwrap()]);
    assert!(err.contains("(AlreadyExists)"), "stderr: {err}");
    let fresh = srv.write_file("fresh.yaml", &pod_yaml("fresh", "default", &[]));
    let out = srv.kubectl_ok(&["create", "--dry-run=server", "-f", fresh.to_str().unwrap()]);
    assert!(out.contains("pod/fresh created (server dry run)"), "{out}");
    srv.kubectl_err(&["get", "pod", "fresh"]);

    let err = srv.kubectl_err(&["delete", "pod", "nope"]);
    assert!(
        err.contains(r#"Error from server (NotFound): pods "nope" not found"#),
        "stderr: {err}"
    );

    // Default validation (kubectl sends fieldValidation=Strict): a misspelt field is refused
    // and nothing is created; --validate=warn creates it and prints the warning.
    let typo = srv.write_file(
        "typo.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\n  namespace: default\ndta:\n  k: v\n",
    );
    let err = srv.kubectl_err(&["create", "-f", typo.to_str().unwrap()]);
    assert!(
        err.contains("strict decoding error") && err.contains(r#"unknown field "dta""#),
        "stderr: {err}"
    );
    srv.kubectl_err(&["get", "configmap", "typo"]);
    let out = srv.kubectl(&["create", "--validate=warn", "-f", typo.to_str().unwrap()]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success()
            && stderr.contains(r#"unknown field "dta""#)
            && stdout.contains("configmap/typo created"),
        "stdout: {stdout}\nstderr: {stderr}"
    );

    // The same Status through raw HTTP.
    let (code, status) = http_json(
        "GET",
        &format!("{}/api/v1/namespaces/default/pods/nope", srv.url),
        None,
    );
    assert_eq!(code, 404);
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "NotFound");
    assert_eq!(status["code"], 404);
    assert_eq!(status["details"]["name"], "nope");
    assert_eq!(status["details"]["kind"], "pods");
}

fn managers(obj: &Value) -> Vec<String> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    format!(
                        "{}/{}",
                        e["manager"].as_str().unwrap_or(""),
                        e["operation"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn server_side_apply_conflicts_and_scale() {
    let srv = TestServer::start();
    let v1 = srv.write_file("ssa-v1.yaml", &deployment_yaml("nginx:1.26"));
    let v1 = v1.to_str().unwrap();
    let out = srv.kubectl_ok(&["apply", "--server-side", "-f", v1]);
    assert!(
        out.contains("deployment.apps/web serverside-applied"),
        "{out}"
    );
    let d = srv.kubectl_json(&[
        "get",
        "deployment",
        "web",
        "-o",
        "json",
        "--show-managed-fields",
    ]);
    assert_eq!(managers(&d), vec!["kubectl/Apply"], "{d}");
    assert!(
        d["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:replicas"].is_object(),
        "the applier owns spec.replicas: {d}"
    );
    let rv = d["metadata"]["resourceVersion"].clone();
    // Past the next whole second, so that the re-apply's managedFields time differs (the
    // case where a no-op used to be written anyway).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    srv.kubectl_ok(&["apply", "--server-side", "-f", v1]);
    let d = srv.kubectl_json(&["get", "deployment", "web", "-o", "json"]);
    assert_eq!(
        d["metadata"]["resourceVersion"], rv,
        "re-applying the same file writes nothing"
    );

    // kubectl scale goes through the scale subresource and takes ownership of replicas.
    let out = srv.kubectl_ok(&["scale", "deployment", "web", "--replicas=5"]);
    assert!(out.contains("deployment.apps/web scaled"), "{out}");
    let scale = srv.kubectl_json(&[
        "get",
        "--raw",
        "/apis/apps/v1/namespaces/default/deployments/web/scale",
    ]);
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 5);
    assert_eq!(scale["status"]["selector"], "app=web");
    let err = srv.kubectl_err(&[
        "scale",
        "deployment",
        "web",
        "--current-replicas=3",
        "--replicas=4",
    ]);
    assert!(err.contains("Expected replicas to be 3, was 5"), "{err}");

    // Applying replicas: 2 again now conflicts with the scaler, until forced.
    let err = srv.kubectl_err(&["apply", "--server-side", "-f", v1]);
    assert!(
        err.contains("Apply failed with 1 conflict") && err.contains(".spec.replicas"),
        "{err}"
    );
    assert_eq!(
        srv.kubectl_json(&["get", "deployment", "web", "-o", "json"])["spec"]["replicas"],
        5
    );
    srv.kubectl_ok(&["apply", "--server-side", "--force-conflicts", "-f", v1]);
    let d = srv.kubectl_json(&[
        "get",
        "deployment",
        "web",
        "-o",
        "json",
        "--show-managed-fields",
    ]);
    assert_eq!(d["spec"]["replicas"], 2);
    assert!(
        d["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["fieldsV1"]["f:spec"].get("f:replicas").is_none()
                || e["operation"] == "Apply"),
        "forcing took replicas from the scaler: {d}"
    );

    // A second manager applies the logger's image (the same value: shared, no conflict)
    // and args; the first then drops the logger and the port: the logger stays with what
    // the second manager holds, the port and the first manager's command go.
    let sidecar = srv.write_file(
        "ssa-side.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n      - name: logger\n        image: busybox:1.36\n        args: [\"-v\"]\n",
    );
    srv.kubectl_ok(&[
        "apply",
        "--server-side",
        "--field-manager=sidecar-owner",
        "-f",
        sidecar.to_str().unwrap(),
    ]);
    let only_web = deployment_yaml("nginx:1.27")
        .split("      - name: logger")
        .next()
        .unwrap()
        .replace("        ports:\n        - containerPort: 80\n", "");
    let only_web = srv.write_file("ssa-v2.yaml", &only_web);
    srv.kubectl_ok(&["apply", "--server-side", "-f", only_web.to_str().unwrap()]);
    let d = srv.kubectl_json(&["get", "deployment", "web", "-o", "json"]);
    let spec = &d["spec"]["template"]["spec"];
    assert_eq!(container(spec, "web")["image"], "nginx:1.27");
    assert!(container(spec, "web").get("ports").is_none(), "{spec}");
    assert_eq!(container(spec, "logger")["image"], "busybox:1.36");
    assert_eq!(container(spec, "logger")["args"], serde_json::json!(["-v"]));
    assert!(
        container(spec, "logger").get("command").is_none(),
        "the first applier's command is gone with its ownership: {spec}"
    );
    assert_eq!(
        d["metadata"]["generation"], 5,
        "create, scale, forced apply, two applies: {d}"
    );
}

#[test]
fn explain_describes_every_field() {
    let srv = TestServer::start();
    let out = srv.kubectl_ok(&["explain", "pods.spec.containers.image"]);
    assert!(out.contains("FIELD: image <string>"), "{out}");
    assert!(out.contains("Container image name"), "{out}");

    let out = srv.kubectl_ok(&["explain", "deployments.spec.strategy"]);
    assert!(out.contains("GROUP:      apps"), "{out}");
    assert!(
        out.contains("rollingUpdate\t<RollingUpdateDeployment>"),
        "{out}"
    );

    // Top level: metadata is described but, as in Kubernetes, not required.
    let out = srv.kubectl_ok(&["explain", "leases"]);
    assert!(out.contains("GROUP:      coordination.k8s.io"), "{out}");
    assert!(out.contains("metadata\t<ObjectMeta>\n"), "{out}");
    assert!(out.contains("spec\t<LeaseSpec>"), "{out}");

    let out = srv.kubectl_ok(&["explain", "nodes", "--recursive"]);
    assert!(out.contains("podCIDRs\t<[]string>"), "{out}");

    let err = srv.kubectl_err(&["explain", "pods.spec.nosuchfield"]);
    assert!(
        err.contains(r#"field "nosuchfield" does not exist"#),
        "{err}"
    );
}

/// The header of kubectl's table output, as words.
fn header_words(out: &str) -> Vec<String> {
    out.lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The kinds a typical manifest bundle holds beyond pods and deployments: service accounts
/// and RBAC (kubectl's typed `create` sends those in protobuf), stateful sets, daemon sets,
/// jobs, cron jobs, claims, ingresses, network policies, disruption budgets and autoscalers —
/// created, applied twice, listed with kubectl's columns, scaled, and gone with their
/// namespace.
#[test]
fn workload_config_and_rbac_kinds() {
    let srv = TestServer::start();
    srv.kubectl_ok(&["create", "namespace", "apps1"]);
    let n = |args: &[&str]| {
        let mut v = vec!["-n", "apps1"];
        v.extend_from_slice(args);
        srv.kubectl_ok(&v)
    };
    n(&["create", "serviceaccount", "bot"]);
    n(&[
        "create",
        "role",
        "reader",
        "--verb=get,list",
        "--resource=pods",
    ]);
    n(&[
        "create",
        "rolebinding",
        "reader-bot",
        "--role=reader",
        "--serviceaccount=apps1:bot",
        "--user=alice",
    ]);
    srv.kubectl_ok(&[
        "create",
        "clusterrole",
        "node-reader",
        "--verb=get",
        "--resource=nodes",
    ]);
    srv.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "node-readers",
        "--clusterrole=node-reader",
        "--group=devs",
    ]);
    n(&[
        "create",
        "cronjob",
        "tick",
        "--image=busybox",
        "--schedule=*/5 * * * *",
        "--",
        "true",
    ]);
    n(&["create", "job", "once", "--image=busybox", "--", "true"]);
    n(&["create", "ingress", "web", "--rule=foo.example/=web:80"]);
    n(&[
        "create",
        "pdb",
        "web",
        "--selector=app=web",
        "--min-available=1",
    ]);
    let manifest = srv.write_file(
        "workloads.yaml",
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db, namespace: apps1}\nspec:\n  serviceName: db\n  replicas: 2\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n    spec: {containers: [{name: db, image: postgres}]}\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent, namespace: apps1}\nspec:\n  selector: {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n    spec: {nodeSelector: {disk: ssd}, containers: [{name: a, image: busybox}]}\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: apps1}\nspec: {accessModes: [ReadWriteOnce], storageClassName: fast, resources: {requests: {storage: 5Gi}}}\n---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny, namespace: apps1}\nspec: {podSelector: {}, policyTypes: [Ingress]}\n---\napiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: db, namespace: apps1}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: StatefulSet, name: db}\n  maxReplicas: 5\n",
    );
    let manifest = manifest.to_str().unwrap();
    let out = srv.kubectl_ok(&["apply", "-f", manifest]);
    assert_eq!(out.matches(" created").count(), 5, "{out}");
    let out = srv.kubectl_ok(&["apply", "-f", manifest]);
    assert_eq!(out.matches(" unchanged").count(), 5, "{out}");

    let out = n(&["get", "serviceaccounts"]);
    assert_eq!(header_words(&out), ["NAME", "SECRETS", "AGE"], "{out}");
    let out = n(&["get", "rolebinding", "reader-bot", "-o", "wide"]);
    assert_eq!(
        header_words(&out),
        ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"],
        "{out}"
    );
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        (row[1], row[3], row[4]),
        ("Role/reader", "alice", "apps1/bot"),
        "{out}"
    );
    let out = srv.kubectl_ok(&["get", "clusterrolebinding", "node-readers"]);
    assert!(out.contains("ClusterRole/node-reader"), "{out}");
    // RBAC names are path segments, colons and all, as in Kubernetes' own roles.
    srv.kubectl_ok(&[
        "create",
        "clusterrole",
        "system:metrics-reader",
        "--verb=get",
        "--resource=pods",
    ]);
    let out = srv.kubectl_ok(&["get", "clusterrole", "system:metrics-reader", "-o", "name"]);
    assert_eq!(
        out.trim(),
        "clusterrole.rbac.authorization.k8s.io/system:metrics-reader"
    );
    srv.kubectl_ok(&["delete", "clusterrole", "system:metrics-reader"]);
    let err = srv.kubectl_err(&[
        "create",
        "clusterrole",
        "a/b",
        "--verb=get",
        "--resource=pods",
    ]);
    assert!(
        err.contains("may not contain '/'") || err.contains("invalid"),
        "{err}"
    );
    let err = srv.kubectl_err(&["create", "configmap", "a:b"]);
    assert!(
        err.contains("RFC 1123 subdomain"),
        "other kinds keep DNS names: {err}"
    );
    let rules = n(&["get", "role", "reader", "-o", "jsonpath={.rules[0].verbs}"]);
    assert_eq!(rules, r#"["get","list"]"#);
    let out = n(&["get", "statefulset", "db"]);
    assert_eq!(header_words(&out), ["NAME", "READY", "AGE"], "{out}");
    assert!(out.lines().nth(1).unwrap().contains("0/2"), "{out}");
    let out = n(&["get", "daemonset", "agent"]);
    assert_eq!(
        header_words(&out),
        [
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "NODE",
            "SELECTOR",
            "AGE"
        ],
        "{out}"
    );
    assert!(out.contains("disk=ssd"), "{out}");
    let out = n(&["get", "cronjob", "tick"]);
    assert_eq!(
        header_words(&out),
        ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"],
        "{out}"
    );
    assert!(out.contains("*/5 * * * *"), "{out}");
    let out = n(&["get", "ingress", "web"]);
    assert_eq!(
        header_words(&out),
        ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"],
        "{out}"
    );
    assert!(out.contains("foo.example"), "{out}");
    let out = n(&["get", "pvc", "data"]);
    assert!(
        out.lines().next().unwrap().contains("ACCESS MODES"),
        "{out}"
    );
    assert!(out.contains("fast"), "{out}");
    n(&["get", "job/once", "pdb/web", "netpol/deny", "hpa/db"]);

    // Kubernetes' defaults, as `get -o yaml` shows them on a cluster.
    let policy = n(&["get", "statefulset", "db", "-o", "jsonpath={.spec.podManagementPolicy} {.spec.updateStrategy.rollingUpdate.partition} {.spec.template.spec.containers[0].imagePullPolicy}"]);
    assert_eq!(policy, "OrderedReady 0 Always");
    let job = n(&[
        "get",
        "job",
        "once",
        "-o",
        "jsonpath={.spec.backoffLimit} {.spec.completionMode}",
    ]);
    assert_eq!(job, "6 NonIndexed");
    // The scale subresource of a stateful set, as for deployments.
    n(&["scale", "statefulset", "db", "--replicas=4"]);
    let replicas = n(&[
        "get",
        "statefulset",
        "db",
        "-o",
        "jsonpath={.spec.replicas}",
    ]);
    assert_eq!(replicas, "4");
    let all = n(&["get", "all"]);
    for kind in [
        "statefulset.apps/db",
        "daemonset.apps/agent",
        "cronjob.batch/tick",
        "job.batch/once",
        "horizontalpodautoscaler.autoscaling/db",
    ] {
        assert!(all.contains(kind), "{kind} in `get all`:\n{all}");
    }

    // Storage, scheduling and networking classes, quotas, limits and endpoints.
    let infra = srv.write_file(
        "infra.yaml",
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: fast\n  annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}\nprovisioner: example.com/ssd\nallowVolumeExpansion: true\n---\napiVersion: v1\nkind: PersistentVolume\nmetadata: {name: pv1}\nspec: {capacity: {storage: 5Gi}, accessModes: [ReadWriteOnce], persistentVolumeReclaimPolicy: Retain, storageClassName: fast, hostPath: {path: /tmp/pv1}}\n---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n---\napiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: nginx}\nspec: {controller: k8s.io/ingress-nginx}\n---\napiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: apps1}\nspec: {hard: {pods: \"10\"}}\n---\napiVersion: v1\nkind: LimitRange\nmetadata: {name: l, namespace: apps1}\nspec: {limits: [{type: Container, default: {cpu: 500m}}]}\n---\napiVersion: v1\nkind: Endpoints\nmetadata: {name: web, namespace: apps1}\nsubsets: [{addresses: [{ip: 10.0.0.1}, {ip: 10.0.0.2}], ports: [{port: 80}]}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: apps1}\naddressType: IPv4\nendpoints: [{addresses: [10.0.0.1]}]\nports: [{port: 80}]\n",
    );
    let out = srv.kubectl_ok(&["apply", "-f", infra.to_str().unwrap()]);
    assert_eq!(out.matches(" created").count(), 8, "{out}");
    let out = srv.kubectl_ok(&["get", "storageclass"]);
    assert_eq!(
        header_words(&out),
        [
            "NAME",
            "PROVISIONER",
            "RECLAIMPOLICY",
            "VOLUMEBINDINGMODE",
            "ALLOWVOLUMEEXPANSION",
            "AGE"
        ],
        "{out}"
    );
    assert!(out.contains("fast (default)"), "{out}");
    let out = srv.kubectl_ok(&["get", "pv", "pv1"]);
    assert!(
        out.lines().next().unwrap().contains("RECLAIM POLICY"),
        "{out}"
    );
    assert!(out.lines().nth(1).unwrap().contains("Retain"), "{out}");
    let out = srv.kubectl_ok(&["get", "priorityclass", "high"]);
    assert_eq!(
        header_words(&out),
        ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"],
        "{out}"
    );
    let out = n(&["get", "endpoints", "web"]);
    assert!(out.contains("10.0.0.1:80,10.0.0.2:80"), "{out}");
    n(&["get", "quota/q", "limits/l", "endpointslice/web-1"]);
    srv.kubectl_ok(&["get", "ingressclass", "nginx"]);

    // kubectl waits until the namespace is gone: its content removed by the namespace
    // controller, as on a cluster.
    let _namespaces = srv.namespace_controller();
    srv.kubectl_ok(&["delete", "namespace", "apps1"]);
    // (The default RBAC policy's roles in kube-system and kube-public stay.)
    let left = srv.kubectl_ok(&[
        "get",
        "sa,role,rolebinding,sts,ds,pvc,jobs,cronjobs,ing,netpol,pdb,hpa,quota,limits,ep,endpointslices",
        "-A",
        "-l",
        "kubernetes.io/bootstrapping!=rbac-defaults",
        "-o",
        "name",
    ]);
    // What is left is the `default` ServiceAccount the server keeps in each of the four
    // namespaces that exist from the start.
    let left: Vec<&str> = left.lines().collect();
    assert_eq!(
        left, ["serviceaccount/default"; 4],
        "the namespace took its objects"
    );
    let out = srv.kubectl_ok(&["get", "clusterroles,clusterrolebindings", "-o", "name"]);
    assert!(
        out.contains("clusterrole.rbac.authorization.k8s.io/node-reader"),
        "{out}"
    );
    let out = srv.kubectl_ok(&["get", "pv,sc,pc,ingressclass", "-o", "name"]);
    assert_eq!(
        out.lines().count(),
        4,
        "cluster-scoped objects stay:\n{out}"
    );
}

#[test]
fn graceful_pod_deletion_shows_terminating() {
    let srv = TestServer::start();
    // A pod on a node, as a scheduler's binding leaves it.
    let f = srv.write_file(
        "bound.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bound\nspec:\n  nodeName: n1\n  containers:\n  - name: main\n    image: nginx:1.27\n",
    );
    srv.kubectl_ok(&["create", "-f", f.to_str().unwrap()]);
    // kubectl delete waits for the pod to go, and nothing (no node agent here) finishes its
    // deletion: do not wait.
    let out = srv.kubectl_ok(&["delete", "pod", "bound", "--wait=false"]);
    assert!(out.contains("pod \"bound\" deleted"), "{out}");
    let p = srv.kubectl_json(&["get", "pod", "bound", "-o", "json"]);
    assert!(p["metadata"]["deletionTimestamp"].is_string(), "{p}");
    assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 30, "{p}");
    let out = srv.kubectl_ok(&["get", "pods"]);
    assert_eq!(
        header_words(&out)[..3],
        ["NAME", "READY", "STATUS"],
        "{out}"
    );
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("bound "))
        .unwrap_or_else(|| panic!("no row for the pod: {out}"))
        .split_whitespace()
        .collect();
    assert_eq!(row[2], "Terminating", "{out}");
    // --grace-period=0 --force removes it at once.
    let out = srv.kubectl_ok(&["delete", "pod", "bound", "--grace-period=0", "--force"]);
    assert!(out.contains("pod \"bound\" force deleted"), "{out}");
    let err = srv.kubectl_err(&["get", "pod", "bound"]);
    assert!(err.contains("NotFound"), "{err}");
    // An unbound pod is deleted at once, so a plain (waiting) delete returns.
    let f = srv.write_file("free.yaml", &pod_yaml("free", "default", &[]));
    srv.kubectl_ok(&["create", "-f", f.to_str().unwrap()]);
    let out = srv.kubectl_ok(&["delete", "pod", "free", "--timeout=20s"]);
    assert!(out.contains("pod \"free\" deleted"), "{out}");
}

#[test]
fn events_of_both_apis_and_the_binding_kinds() {
    let srv = TestServer::start();
    let f = srv.write_file(
        "event.yaml",
        "apiVersion: v1\nkind: Event\nmetadata:\n  name: pulled\ninvolvedObject:\n  kind: Pod\n  name: web-1\n  namespace: default\nreason: Pulled\nmessage: image pulled\ntype: Normal\n",
    );
    srv.kubectl_ok(&["create", "-f", f.to_str().unwrap()]);
    let e = srv.kubectl_json(&["get", "events.v1.events.k8s.io", "pulled", "-o", "json"]);
    assert_eq!(e["apiVersion"], "events.k8s.io/v1", "{e}");
    assert_eq!(e["note"], "image pulled", "{e}");
    assert_eq!(e["regarding"]["name"], "web-1", "{e}");
    let out = srv.kubectl_ok(&["get", "events.events.k8s.io"]);
    assert!(out.contains("pod/web-1") && out.contains("Pulled"), "{out}");
    let out = srv.kubectl_ok(&["explain", "bindings.target"]);
    assert!(out.contains("KIND:       Binding"), "{out}");
    let out = srv.kubectl_ok(&[
        "explain",
        "events.regarding",
        "--api-version=events.k8s.io/v1",
    ]);
    assert!(out.contains("GROUP:      events.k8s.io"), "{out}");
}

#[test]
fn replication_controllers_and_the_csi_kinds() {
    let srv = TestServer::start();
    let f = srv.write_file(
        "csi.yaml",
        "apiVersion: storage.k8s.io/v1\nkind: CSINode\nmetadata: {name: node-0}\nspec:\n  drivers:\n  - {name: a.csi.example.com, nodeID: node-0, topologyKeys: [zone]}\n---\napiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata: {name: a.csi.example.com}\nspec: {storageCapacity: true, tokenRequests: [{audience: vault}]}\n---\napiVersion: storage.k8s.io/v1\nkind: CSIStorageCapacity\nmetadata: {name: cap-1, namespace: default}\nstorageClassName: fast\ncapacity: 10Gi\n---\napiVersion: v1\nkind: ReplicationController\nmetadata: {name: old}\nspec:\n  replicas: 2\n  template:\n    metadata: {labels: {app: old}}\n    spec: {containers: [{name: c, image: nginx}]}\n",
    );
    let out = srv.kubectl_ok(&["apply", "-f", f.to_str().unwrap()]);
    assert_eq!(out.matches(" created").count(), 4, "{out}");

    let out = srv.kubectl_ok(&["get", "csinodes"]);
    assert_eq!(header_words(&out), ["NAME", "DRIVERS", "AGE"], "{out}");
    assert!(
        out.lines().nth(1).unwrap().starts_with("node-0   1 "),
        "{out}"
    );
    // A strategic merge patch merges a node's drivers by name.
    srv.kubectl_ok(&[
        "patch",
        "csinode",
        "node-0",
        "-p",
        r#"{"spec":{"drivers":[{"name":"b.csi.example.com","nodeID":"n0"}]}}"#,
    ]);
    let node = srv.kubectl_json(&["get", "csinode", "node-0", "-o", "json"]);
    assert_eq!(
        node["spec"]["drivers"].as_array().unwrap().len(),
        2,
        "{node}"
    );

    let out = srv.kubectl_ok(&["get", "csidrivers"]);
    assert_eq!(
        header_words(&out),
        [
            "NAME",
            "ATTACHREQUIRED",
            "PODINFOONMOUNT",
            "STORAGECAPACITY",
            "TOKENREQUESTS",
            "REQUIRESREPUBLISH",
            "MODES",
            "AGE"
        ],
        "{out}"
    );
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        row[..7],
        [
            "a.csi.example.com",
            "true",
            "false",
            "true",
            "vault",
            "false",
            "Persistent"
        ],
        "{out}"
    );

    // Storage capacities have no AGE column in Kubernetes.
    let out = srv.kubectl_ok(&["get", "csistoragecapacities"]);
    assert_eq!(
        header_words(&out),
        ["NAME", "STORAGECLASSNAME", "CAPACITY"],
        "{out}"
    );
    assert_eq!(
        out.lines()
            .nth(1)
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["cap-1", "fast", "10Gi"],
        "{out}"
    );

    // A replication controller: its selector and labels from the template, the columns of
    // a replica set, `get all` and `scale`.
    let rc = srv.kubectl_json(&["get", "rc", "old", "-o", "json"]);
    assert_eq!(rc["spec"]["selector"], serde_json::json!({"app": "old"}));
    assert_eq!(rc["metadata"]["labels"], serde_json::json!({"app": "old"}));
    assert_eq!(rc["metadata"]["generation"], 1);
    let out = srv.kubectl_ok(&["get", "rc", "-o", "wide"]);
    assert_eq!(
        header_words(&out),
        [
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ],
        "{out}"
    );
    assert!(out.contains("app=old"), "{out}");
    assert!(
        srv.kubectl_ok(&["get", "all"])
            .contains("replicationcontroller/old"),
        "rc in `get all`"
    );
    srv.kubectl_ok(&["scale", "rc", "old", "--replicas=4"]);
    let rc = srv.kubectl_json(&["get", "rc", "old", "-o", "json"]);
    assert_eq!(rc["spec"]["replicas"], 4);
    assert_eq!(rc["metadata"]["generation"], 2);
    let scale = srv.kubectl_json(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/replicationcontrollers/old/scale",
    ]);
    assert_eq!(scale["status"]["selector"], "app=old", "{scale}");

    // Bad input changes nothing: a capacity named against the rules is refused.
    let bad = srv.write_file(
        "bad.yaml",
        "apiVersion: storage.k8s.io/v1\nkind: CSIStorageCapacity\nmetadata: {name: Not_Valid, namespace: default}\nstorageClassName: fast\n",
    );
    let err = srv.kubectl_err(&["create", "-f", bad.to_str().unwrap()]);
    assert!(err.contains("is invalid"), "{err}");
    let names = srv.kubectl_ok(&["get", "csistoragecapacities", "-o", "name"]);
    assert_eq!(names.trim(), "csistoragecapacity.storage.k8s.io/cap-1");
}

#[test]
fn controller_revisions() {
    let srv = TestServer::start();
    let f = srv.write_file(
        "revs.yaml",
        "apiVersion: apps/v1\nkind: ControllerRevision\nmetadata:\n  name: agent-7c9d5f\n  ownerReferences:\n  - {apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: u-1, controller: true}\ndata: {spec: {template: {spec: {containers: [{name: a, image: busybox}]}}}}\nrevision: 2\n---\napiVersion: apps/v1\nkind: ControllerRevision\nmetadata: {name: loose}\ndata: {}\nrevision: 1\n",
    );
    let out = srv.kubectl_ok(&["apply", "-f", f.to_str().unwrap()]);
    assert_eq!(out.matches(" created").count(), 2, "{out}");
    let out = srv.kubectl_ok(&["get", "controllerrevisions"]);
    assert_eq!(
        header_words(&out),
        ["NAME", "CONTROLLER", "REVISION", "AGE"],
        "{out}"
    );
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().take(3).collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["agent-7c9d5f", "daemonset.apps/agent", "2"],
            vec!["loose", "<none>", "1"]
        ],
        "{out}"
    );
    // The data is immutable, the revision number is not.
    let err = srv.kubectl_err(&[
        "patch",
        "controllerrevision",
        "loose",
        "--type=merge",
        "-p",
        r#"{"data":{"x":1}}"#,
    ]);
    assert!(err.contains("field is immutable"), "{err}");
    srv.kubectl_ok(&[
        "patch",
        "controllerrevision",
        "loose",
        "--type=merge",
        "-p",
        r#"{"revision":4}"#,
    ]);
    let rev = srv.kubectl_json(&["get", "controllerrevision", "loose", "-o", "json"]);
    assert_eq!(
        (&rev["revision"], &rev["data"]),
        (&serde_json::json!(4), &serde_json::json!({}))
    );
}

#[test]
fn without_a_namespace_controller_a_deleted_namespace_stays_terminating() {
    let srv = TestServer::start();
    srv.kubectl_ok(&["create", "namespace", "left"]);
    srv.kubectl_ok(&[
        "create",
        "configmap",
        "c",
        "-n",
        "left",
        "--from-literal=k=v",
    ]);
    let out = srv.kubectl_ok(&["delete", "namespace", "left", "--wait=false"]);
    assert!(out.contains("namespace \"left\" deleted"), "{out}");
    // The server only marks it: the content and the namespace stay, as on a cluster whose
    // controller-manager is not running.
    let table = srv.kubectl_ok(&["get", "namespace", "left"]);
    assert!(table.contains("Terminating"), "{table}");
    let ns = srv.kubectl_json(&["get", "namespace", "left", "-o", "json"]);
    assert!(ns["metadata"]["deletionTimestamp"].is_string(), "{ns}");
    assert_eq!(ns["spec"]["finalizers"], serde_json::json!(["kubernetes"]));
    let left = srv.kubectl_ok(&["get", "configmaps", "-n", "left", "-o", "name"]);
    assert_eq!(left.trim(), "configmap/c");
    let refused = srv.kubectl_err(&["create", "configmap", "d", "-n", "left"]);
    assert!(
        refused.contains(
            "configmaps \"d\" is forbidden: unable to create new content in namespace left because it is being terminated"
        ),
        "{refused}"
    );
    // The system namespaces cannot be deleted at all.
    let refused = srv.kubectl_err(&["delete", "namespace", "kube-system"]);
    assert!(
        refused.contains("Error from server (Forbidden): namespaces \"kube-system\" is forbidden: this namespace may not be deleted"),
        "{refused}"
    );
}
