//! Compatibility with the official Python (`kubernetes` 37.x) and JavaScript
//! (`@kubernetes/client-node` 1.x) Kubernetes clients: each test starts `listwatch serve`,
//! writes the generated TLS + token kubeconfig, runs a client script from `tests/clients/`
//! against it and asserts on the one JSON line that script prints.
//!
//! The clients are installed by `scripts/test.sh`, which passes their locations in
//! `LISTWATCH_TEST_PYTHON` (a Python interpreter that can import `kubernetes`) and
//! `LISTWATCH_TEST_NODE_MODULES` (a `node_modules` directory holding
//! `@kubernetes/client-node`). Without them these tests fail; they never skip.

mod common;

use common::{tail, TestServer};
use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one client script may run before it is killed and the test fails.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// The value of the environment variable `name`, or a panic explaining how to get it.
fn required_env(name: &str, what: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: it must point at {what}. Run the tests with scripts/test.sh, \
             which installs the Python and JavaScript Kubernetes clients and exports {name}"
        ),
    }
}

/// The directory holding the client scripts.
fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("clients")
}

/// Runs `cmd` (stdout and stderr captured) for at most [`SCRIPT_TIMEOUT`]; panics unless it
/// exits successfully with one JSON object as the last line of stdout, which it returns.
fn run_json(srv: &TestServer, mut cmd: Command, what: &str) -> Value {
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting the {what} ({cmd:?}): {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > SCRIPT_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out.join().unwrap();
    let stderr = err.join().unwrap();
    let ok = matches!(status, Some(s) if s.success());
    assert!(
        ok,
        "the {what} {} ({status:?}):\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver stderr (tail):\n{}",
        if status.is_none() {
            "timed out"
        } else {
            "failed"
        },
        tail(&srv.stderr(), 3000)
    );
    eprintln!("{what} ran in {:?}", started.elapsed());
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "the {what} printed no JSON result line ({e}):\nstdout:\n{stdout}\nstderr:\n{stderr}"
        )
    })
}

/// `[type, name]` pairs as JSON, for comparing event sequences.
fn pairs(events: &[(&str, &str)]) -> Value {
    Value::Array(events.iter().map(|(t, n)| json!([t, n])).collect())
}

#[test]
fn python_client_lists_and_watches_a_custom_resource_in_order() {
    let python = required_env(
        "LISTWATCH_TEST_PYTHON",
        "a Python interpreter with the `kubernetes` 37.x package (PyPI)",
    );
    let srv = TestServer::start();
    let kubeconfig = srv.tls_kubeconfig();
    let mut cmd = Command::new(&python);
    cmd.arg(scripts_dir().join("python_custom_objects.py"))
        .arg(&kubeconfig);
    let r = run_json(&srv, cmd, "Python custom objects script");
    assert_eq!(r["established"], true);
    assert_eq!(r["listed"], json!(["a", "b", "c"]));
    assert_eq!(
        r["defaults"],
        json!([1, 1, 1]),
        "the schema default is applied"
    );
    let events = r["events"].as_array().expect("events");
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e[0].as_str().unwrap_or(""), e[1].as_str().unwrap_or("")))
        .collect();
    assert_eq!(kinds, [("MODIFIED", "b"), ("DELETED", "a")], "{events:?}");
    assert_eq!(events[0][3], 5);
    let rvs: Vec<u64> = events.iter().map(|e| e[2].as_u64().unwrap_or(0)).collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "in order: {rvs:?}");
    assert_eq!(
        r["invalid"],
        json!([422, "Invalid", ["spec.replicas"]]),
        "a schema violation is a 422 naming the field"
    );
}

#[test]
fn python_client_crud_list_paging_watch_resume_and_errors() {
    let python = required_env(
        "LISTWATCH_TEST_PYTHON",
        "a Python interpreter with the `kubernetes` 37.x package (PyPI)",
    );
    let srv = TestServer::start();
    let kubeconfig = srv.tls_kubeconfig();
    let mut cmd = Command::new(&python);
    cmd.arg(scripts_dir().join("python_client.py"))
        .arg(&kubeconfig)
        .arg("py-client");
    let r = run_json(&srv, cmd, "Python client script");

    assert_eq!(r["namespace"], "py-client");
    assert_eq!(r["namespace_phase"], "Active");
    assert_eq!(r["initial_items"], json!([]));
    assert_eq!(
        r["created_a"],
        json!({"uid_set": true, "rv_set": true, "created_ts_set": true})
    );

    // Label selectors (equality and set-based).
    assert_eq!(r["selector_app_x"], json!(["a", "c"]));
    assert_eq!(r["selector_app_notin"], json!(["b"]));

    // limit/_continue paging: two consistent pages, the last without a continue token.
    assert_eq!(r["pages"], json!([["a", "b"], ["c"]]));
    assert_eq!(r["page1_continue_set"], true);
    assert_eq!(r["page1_remaining"], 1);
    assert_eq!(r["page2_continue"], Value::Null);
    assert_eq!(r["pages_same_rv"], true);

    // Strategic merge patch (the client's content type for a dict body) merges maps.
    assert_eq!(r["patched_data"], json!({"k1": "v1", "k2": "v2"}));
    assert_eq!(r["patched_labels"], json!({"app": "x", "tier": "web"}));

    // Server-side apply through the client's own patch call: created, owned by the applier;
    // a conflict with another manager's change is a 409 until forced.
    assert_eq!(r["ssa_created_managers"], json!([["py-apply", "Apply"]]));
    assert_eq!(r["ssa_conflict"], json!([409, "Conflict"]));
    assert_eq!(r["ssa_forced_data"], json!({"k": "1"}));

    // Replace, and optimistic concurrency on a stale resourceVersion.
    assert_eq!(r["replaced_data"], json!({"k": "b1"}));
    assert_eq!(r["replaced_rv_changed"], true);
    assert_eq!(r["stale_replace"], json!([409, "Conflict"]));

    // Errors surface as ApiException with the right status and reason.
    assert_eq!(r["missing_read"], json!([404, "NotFound"]));
    assert_eq!(r["duplicate_create"], json!([409, "AlreadyExists"]));
    assert_eq!(r["missing_delete"], json!([404, "NotFound"]));
    assert_eq!(r["final_items"], json!(["a", "b"]));

    // The live watch saw exactly the script's own writes, in order.
    assert_eq!(r["live_error"], json!([]));
    assert_eq!(r["live_thread_done"], true);
    assert_eq!(
        r["live"],
        pairs(&[
            ("ADDED", "a"),
            ("ADDED", "b"),
            ("ADDED", "c"),
            ("MODIFIED", "a"),
            ("MODIFIED", "b"),
            ("DELETED", "c"),
        ])
    );
    assert_eq!(r["live_rvs_increasing"], true);
    assert_eq!(r["live_rvs_after_list"], true);
    assert_eq!(r["live_modified_a_data"], json!({"k1": "v1", "k2": "v2"}));

    // Resumed from the MODIFIED event of "a": exactly the later events, same versions.
    assert_eq!(r["resumed"], pairs(&[("MODIFIED", "b"), ("DELETED", "c")]));
    assert_eq!(r["resumed_rvs"], r["live_rvs_tail"]);
}

#[test]
fn javascript_client_crud_watch_and_informer() {
    let node_modules = required_env(
        "LISTWATCH_TEST_NODE_MODULES",
        "a node_modules directory holding @kubernetes/client-node 1.x (npm)",
    );
    assert!(
        Path::new(&node_modules)
            .join("@kubernetes/client-node/package.json")
            .exists(),
        "LISTWATCH_TEST_NODE_MODULES={node_modules} holds no @kubernetes/client-node; \
         run scripts/test.sh to install it"
    );
    let srv = TestServer::start();
    let kubeconfig = srv.tls_kubeconfig();
    let mut cmd = Command::new("node");
    cmd.arg(scripts_dir().join("js_client.mjs"))
        .arg(&node_modules)
        .arg(&kubeconfig)
        .arg("js-client");
    let r = run_json(&srv, cmd, "JavaScript client script");

    assert_eq!(r["namespace"], "js-client");
    assert_eq!(r["initialItems"], json!([]));
    assert_eq!(r["createdOne"], json!({"uidSet": true, "rvSet": true}));
    assert_eq!(r["selectorAppJs"], json!(["one"]));
    assert_eq!(r["pages"], json!([["one", "two"], ["zero"]]));
    assert_eq!(r["page2ContinueEmpty"], true);

    // JSON patch (the generated client's default) and strategic merge patch.
    assert_eq!(r["jsonPatchedData"], json!({"k1": "v1", "k2": "v2"}));
    assert_eq!(r["smPatchedData"], json!({"x": "0", "y": "1"}));
    assert_eq!(r["smPatchedLabels"], json!({"app": "other", "tier": "web"}));

    assert_eq!(r["missingRead"], json!([404, "NotFound"]));
    assert_eq!(r["duplicateCreate"], json!([409, "AlreadyExists"]));

    // The raw Watch saw every write in order, and stayed open.
    assert_eq!(
        r["watched"],
        pairs(&[
            ("ADDED", "zero"),
            ("ADDED", "one"),
            ("ADDED", "two"),
            ("MODIFIED", "one"),
            ("MODIFIED", "two"),
            ("DELETED", "one"),
        ])
    );
    assert_eq!(r["watchRvsIncreasing"], true);
    assert_eq!(r["watchDoneEarly"], Value::Null);

    // The informer: "zero" from its initial list, the rest from its watch.
    assert_eq!(r["informerErrors"], json!([]));
    assert_eq!(
        r["informed"],
        json!([
            ["add", "zero"],
            ["add", "one"],
            ["add", "two"],
            ["update", "one", {"k1": "v1", "k2": "v2"}],
            ["update", "two", {"x": "0", "y": "1"}],
            ["delete", "one"],
        ])
    );
    assert_eq!(r["listAfterSync"], json!(["two", "zero"]));
    assert_eq!(r["informerList"], r["listAfterSync"]);
    assert_eq!(r["informerTwoData"], json!({"x": "0", "y": "1"}));
    assert_eq!(r["informerTwoRvMatchesList"], true);
}
