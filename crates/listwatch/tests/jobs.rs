//! Jobs and CronJobs with kubectl 1.32 against `listwatch up`: the node agents run the
//! pods (the `listwatch.dev/exit-after` and `exit-code` annotations make their containers
//! exit), the Job controller counts them, and `kubectl wait` sees the Job complete or fail.

mod common;

use common::TestServer;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Polls `probe` (≤ `limit`) until it returns `Some`.
fn eventually<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// What `kubectl create job|cronjob ... --dry-run=client -o json` makes, with the pod
/// template annotated to exit after `after` with `code`, created from a file.
fn create_exiting(srv: &TestServer, file: &str, args: &[&str], after: &str, code: &str) {
    // The flags go before the command after `--`.
    let mut full = vec!["create", "--dry-run=client", "-o", "json"];
    full.extend_from_slice(args);
    let mut obj = srv.kubectl_json(&full);
    let template = if obj["kind"] == "CronJob" {
        &mut obj["spec"]["jobTemplate"]["spec"]["template"]
    } else {
        &mut obj["spec"]["template"]
    };
    template["metadata"]["annotations"] = serde_json::json!({
        "listwatch.dev/exit-after": after,
        "listwatch.dev/exit-code": code,
    });
    let path = srv.write_file(file, &obj.to_string());
    srv.kubectl_ok(&["create", "-f", path.to_str().unwrap()]);
}

#[test]
fn jobs_complete_or_fail_as_their_pods_exit() {
    let srv = TestServer::start_up(2, &[]);
    eventually(
        "the default ServiceAccount",
        Duration::from_secs(30),
        || {
            srv.kubectl(&["get", "serviceaccount", "default"])
                .status
                .success()
                .then_some(())
        },
    );

    // A Job whose pod exits 0 completes; kubectl wait sees it.
    create_exiting(
        &srv,
        "ok.json",
        &["job", "ok", "--image=busybox", "--", "true"],
        "1s",
        "0",
    );
    let job = srv.kubectl_json(&["get", "job", "ok", "-o", "json"]);
    let uid = job["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"], uid,
        "{job}"
    );
    assert_eq!(
        job["spec"]["template"]["metadata"]["labels"]["job-name"],
        "ok"
    );
    srv.kubectl_ok(&[
        "wait",
        "--for=condition=complete",
        "job/ok",
        "--timeout=60s",
    ]);
    let job = srv.kubectl_json(&["get", "job", "ok", "-o", "json"]);
    assert_eq!(job["status"]["succeeded"], 1, "{job}");
    assert!(job["status"]["failed"].as_i64().unwrap_or(0) == 0, "{job}");
    assert!(job["status"]["completionTime"].is_string(), "{job}");
    assert_eq!(
        condition(&job, "SuccessCriteriaMet").unwrap()["status"],
        "True"
    );
    let pods = srv.kubectl_json(&["get", "pods", "-l", "job-name=ok", "-o", "json"]);
    let items = pods["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{pods}");
    assert_eq!(items[0]["status"]["phase"], "Succeeded");
    assert!(
        items[0]["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty()),
        "the tracking finalizer is removed once counted: {pods}"
    );
    let listed = srv.kubectl_ok(&["get", "job", "ok"]);
    assert!(listed.contains("1/1"), "{listed}");

    // A Job whose pods exit 1 fails after backoffLimit + 1 pods.
    create_exiting(
        &srv,
        "bad.json",
        &["job", "bad", "--image=busybox", "--", "false"],
        "1s",
        "1",
    );
    srv.kubectl_ok(&[
        "patch",
        "job",
        "bad",
        "--type=merge",
        "-p",
        r#"{"spec":{"backoffLimit":1}}"#,
    ]);
    srv.kubectl_ok(&["wait", "--for=condition=failed", "job/bad", "--timeout=90s"]);
    let job = srv.kubectl_json(&["get", "job", "bad", "-o", "json"]);
    let failed = condition(&job, "Failed").unwrap();
    assert_eq!(failed["reason"], "BackoffLimitExceeded", "{job}");
    assert_eq!(job["status"]["failed"], 2, "{job}");
    assert!(condition(&job, "Complete").is_none(), "{job}");

    // The server refuses a Job whose pods would restart forever.
    let mut always = srv.kubectl_json(&[
        "create",
        "job",
        "loop",
        "--image=busybox",
        "--dry-run=client",
        "-o",
        "json",
    ]);
    always["spec"]["template"]["spec"]["restartPolicy"] = "Always".into();
    let path = srv.write_file("always.json", &always.to_string());
    let err = srv.kubectl_err(&["create", "-f", path.to_str().unwrap()]);
    assert!(
        err.contains(r#"spec.template.spec.restartPolicy: Unsupported value: "Always""#),
        "{err}"
    );

    // kubectl create job --from=cronjob: the Job carries the CronJob's template and runs.
    create_exiting(
        &srv,
        "tick.json",
        &[
            "cronjob",
            "tick",
            "--image=busybox",
            "--schedule=0 0 1 1 *",
            "--",
            "true",
        ],
        "1s",
        "0",
    );
    srv.kubectl_ok(&["create", "job", "manual", "--from=cronjob/tick"]);
    let job = srv.kubectl_json(&["get", "job", "manual", "-o", "json"]);
    assert_eq!(
        job["metadata"]["ownerReferences"][0]["kind"], "CronJob",
        "{job}"
    );
    assert!(
        job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"].is_string()
    );
    srv.kubectl_ok(&[
        "wait",
        "--for=condition=complete",
        "job/manual",
        "--timeout=60s",
    ]);
    // The CronJob saw the success of its Job.
    eventually("lastSuccessfulTime", Duration::from_secs(30), || {
        let cj = srv.kubectl_json(&["get", "cronjob", "tick", "-o", "json"]);
        cj["status"]["lastSuccessfulTime"].is_string().then_some(())
    });
}
