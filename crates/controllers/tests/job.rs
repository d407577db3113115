//! The Job and CronJob controllers against a real `listwatch serve`: the server generates
//! each Job's selector, the controller runs its pods (a test "kubelet" ends them through the
//! status subresource), counts each pod once through the tracking finalizer, backs off
//! after failures, fails a Job past its backoff limit or deadline, runs Indexed Jobs and
//! suspends; the CronJob controller, on a fake clock, creates the Job of a scheduled minute
//! and records its success.

mod common;
mod workloads;

use client::cache::SharedInformerFactory;
use client::clock::FakeClock;
use client::rest::{Api, Client, ListParams};
use common::Server;
use controllers::cronjob::{
    CronJobController, CronJobControllerOptions, SCHEDULED_TIMESTAMP_ANNOTATION,
};
use controllers::job::{
    JobController, JobControllerOptions, JOB_COMPLETION_INDEX_ANNOTATION, JOB_TRACKING_FINALIZER,
};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use workloads::*;

const LIMIT: Duration = Duration::from_secs(30);

/// Aborts the task when dropped.
struct Running(tokio::task::JoinHandle<()>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn job_controller(server: &Server, clock: &FakeClock) -> (SharedInformerFactory, Running) {
    let factory = SharedInformerFactory::new(server.client());
    let controller = Arc::new(
        JobController::with_options(
            &factory,
            server.client(),
            JobControllerOptions {
                workers: 2,
                clock: clock.shared(),
                ..Default::default()
            },
        )
        .unwrap(),
    );
    (
        factory,
        Running(tokio::spawn(async move { controller.run().await })),
    )
}

fn job(name: &str, spec: serde_json::Value) -> Job {
    let mut spec = spec;
    spec["template"] = json!({
        "metadata": {"labels": {"app": name}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
    });
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn job_pods(client: &Client, ns: &str, job: &Job) -> Vec<Pod> {
    let uid = job.metadata.uid.clone().unwrap();
    pods(
        client,
        ns,
        &format!("batch.kubernetes.io/controller-uid={uid}"),
    )
    .await
}

/// Ends `pod` with `phase`, as a kubelet would report a container that exited.
async fn end_pod(client: &Client, ns: &str, name: &str, phase: &str) {
    let code = if phase == "Succeeded" { 0 } else { 1 };
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let now = k8s_openapi::jiff::Timestamp::from_second(secs as i64)
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let patch = json!({"status": {"phase": phase, "containerStatuses": [{
        "name": "main", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": code, "startedAt": now, "finishedAt": now}},
    }]}});
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}/status");
    client
        .request_bytes(
            http::Method::PATCH,
            &path,
            Some((
                bytes::Bytes::from(patch.to_string()),
                "application/merge-patch+json",
            )),
        )
        .await
        .unwrap_or_else(|e| panic!("ending pod {name}: {e}"));
}

fn condition(job: &Job, type_: &str) -> Option<(String, String)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn active_pods(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_its_completions_and_counts_every_pod_once() {
    let server = Server::start(&[]);
    server.namespaces(&["j1"]).await;
    let client = server.client();
    let clock = FakeClock::new();
    let (_factory, _running) = job_controller(&server, &clock);

    let created: Job = create(
        &client,
        "j1",
        &job("pi", json!({"completions": 3, "parallelism": 2})),
    )
    .await;
    let uid = created.metadata.uid.clone().unwrap();
    let selector = created.spec.as_ref().unwrap().selector.clone().unwrap();
    assert_eq!(
        selector.match_labels.unwrap()["batch.kubernetes.io/controller-uid"],
        uid,
        "the server generates the selector"
    );

    eventually("two pods, as parallelism says", LIMIT, || async {
        job_pods(&client, "j1", &created).await.len() == 2
    })
    .await;
    let first = job_pods(&client, "j1", &created).await;
    for p in &first {
        let r = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (r.kind.as_str(), r.uid.as_str(), r.controller),
            ("Job", uid.as_str(), Some(true))
        );
        assert_eq!(p.metadata.generate_name.as_deref(), Some("pi-"));
        assert!(p
            .metadata
            .finalizers
            .as_ref()
            .unwrap()
            .iter()
            .any(|f| f == JOB_TRACKING_FINALIZER));
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["job-name"], "pi");
        assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
        assert_eq!(labels["app"], "pi");
    }
    eventually("active 2 and a start time", LIMIT, || async {
        let j: Job = get(&client, "j1", "pi").await;
        let s = j.status.unwrap_or_default();
        s.active == Some(2) && s.start_time.is_some() && s.ready == Some(0)
    })
    .await;

    // One pod succeeds; another one is deleted before it ends (it counts as failed and is
    // replaced at once, the first failure's back-off being on the fake clock).
    let names: Vec<String> = first
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    end_pod(&client, "j1", &names[0], "Succeeded").await;
    Api::<Pod>::for_type(client.clone(), "j1")
        .delete(&names[1], &Default::default())
        .await
        .unwrap();
    eventually(
        "one succeeded and one failed pod counted",
        LIMIT,
        || async {
            let s = get::<Job>(&client, "j1", "pi")
                .await
                .status
                .unwrap_or_default();
            s.succeeded == Some(1) && s.failed == Some(1)
        },
    )
    .await;
    // Both were counted: their finalizers are gone, and the deleted pod with it.
    eventually("finalizers removed", LIMIT, || async {
        let pods = job_pods(&client, "j1", &created).await;
        pods.iter().all(|p| {
            !names.contains(p.metadata.name.as_ref().unwrap())
                || !p
                    .metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == JOB_TRACKING_FINALIZER)
        }) && !pods
            .iter()
            .any(|p| p.metadata.name.as_ref() == Some(&names[1]))
    })
    .await;
    // Replacements wait for the back-off after a failure: step the fake clock past it.
    eventually(
        "two more pods for the two missing completions",
        LIMIT,
        || {
            clock.step(Duration::from_secs(11));
            let client = client.clone();
            let created = created.clone();
            let names = names.clone();
            async move {
                let pods = job_pods(&client, "j1", &created).await;
                let fresh: Vec<String> = pods
                    .iter()
                    .filter_map(|p| p.metadata.name.clone())
                    .filter(|n| !names.contains(n))
                    .collect();
                fresh.len() == 2
            }
        },
    )
    .await;
    for p in job_pods(&client, "j1", &created).await {
        let n = p.metadata.name.clone().unwrap();
        if !names.contains(&n) {
            end_pod(&client, "j1", &n, "Succeeded").await;
        }
    }
    eventually("the job completes", LIMIT, || async {
        let j: Job = get(&client, "j1", "pi").await;
        condition(&j, "Complete").is_some_and(|c| c.0 == "True")
    })
    .await;
    let j: Job = get(&client, "j1", "pi").await;
    let s = j.status.clone().unwrap();
    assert_eq!(
        (s.succeeded, s.failed, s.active.unwrap_or(0)),
        (Some(3), Some(1), 0)
    );
    assert_eq!(
        condition(&j, "SuccessCriteriaMet"),
        Some(("True".into(), "CompletionsReached".into()))
    );
    assert_eq!(
        condition(&j, "Complete"),
        Some(("True".into(), "CompletionsReached".into()))
    );
    assert!(s.completion_time.is_some());
    let u = s.uncounted_terminated_pods.unwrap_or_default();
    assert!(u.succeeded.unwrap_or_default().is_empty() && u.failed.unwrap_or_default().is_empty());
    let pods = job_pods(&client, "j1", &created).await;
    assert_eq!(
        pods.len(),
        3,
        "no pod beyond the completions: {:?}",
        pods.iter().map(|p| &p.metadata.name).collect::<Vec<_>>()
    );
    assert!(pods.iter().all(|p| !p
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == JOB_TRACKING_FINALIZER)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_back_off_and_past_the_backoff_limit_the_job_fails() {
    let server = Server::start(&[]);
    server.namespaces(&["j2"]).await;
    let client = server.client();
    let clock = FakeClock::new();
    let (_factory, _running) = job_controller(&server, &clock);

    let created: Job = create(&client, "j2", &job("flaky", json!({"backoffLimit": 1}))).await;
    eventually("a pod", LIMIT, || async {
        job_pods(&client, "j2", &created).await.len() == 1
    })
    .await;
    let first = job_pods(&client, "j2", &created).await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    end_pod(&client, "j2", &first, "Failed").await;
    eventually("one failure counted", LIMIT, || async {
        get::<Job>(&client, "j2", "flaky")
            .await
            .status
            .unwrap_or_default()
            .failed
            == Some(1)
    })
    .await;
    // The sync that counted the failure would have created the replacement before writing
    // the count, had there been no back-off.
    assert_eq!(
        job_pods(&client, "j2", &created).await.len(),
        1,
        "the replacement waits 10 s"
    );
    let j: Job = get(&client, "j2", "flaky").await;
    assert_eq!(
        condition(&j, "Failed"),
        None,
        "one failure is within backoffLimit 1"
    );

    eventually("the replacement after the back-off", LIMIT, || {
        clock.step(Duration::from_secs(11));
        let (client, created) = (client.clone(), created.clone());
        async move { job_pods(&client, "j2", &created).await.len() == 2 }
    })
    .await;
    let second = job_pods(&client, "j2", &created)
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() != Some(first.as_str()))
        .unwrap();
    end_pod(
        &client,
        "j2",
        second.metadata.name.as_ref().unwrap(),
        "Failed",
    )
    .await;
    eventually("the job fails", LIMIT, || async {
        let j: Job = get(&client, "j2", "flaky").await;
        condition(&j, "Failed").is_some_and(|c| c.0 == "True")
    })
    .await;
    let j: Job = get(&client, "j2", "flaky").await;
    assert_eq!(
        condition(&j, "FailureTarget"),
        Some(("True".into(), "BackoffLimitExceeded".into()))
    );
    assert_eq!(
        condition(&j, "Failed"),
        Some(("True".into(), "BackoffLimitExceeded".into()))
    );
    assert_eq!(condition(&j, "Complete"), None);
    let s = j.status.unwrap();
    assert_eq!(
        (s.failed, s.succeeded.unwrap_or(0), s.active.unwrap_or(0)),
        (Some(2), 0, 0)
    );
    assert!(s.completion_time.is_none());
    // A failed Job makes no more pods, however long one waits.
    clock.step(Duration::from_secs(3600));
    let j: Job = get(&client, "j2", "flaky").await;
    assert_eq!(j.status.unwrap().failed, Some(2));
    assert_eq!(job_pods(&client, "j2", &created).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_deadline_fails_and_its_pods_are_deleted() {
    let server = Server::start(&[]);
    server.namespaces(&["j3"]).await;
    let client = server.client();
    let clock = FakeClock::new();
    let (_factory, _running) = job_controller(&server, &clock);

    let created: Job = create(
        &client,
        "j3",
        &job(
            "slow",
            json!({"parallelism": 2, "completions": 4, "activeDeadlineSeconds": 30}),
        ),
    )
    .await;
    eventually("two pods", LIMIT, || async {
        job_pods(&client, "j3", &created).await.len() == 2
    })
    .await;
    let j: Job = get(&client, "j3", "slow").await;
    assert_eq!(condition(&j, "Failed"), None);
    eventually("the deadline passes", LIMIT, || {
        clock.step(Duration::from_secs(31));
        let client = client.clone();
        async move {
            let j: Job = get(&client, "j3", "slow").await;
            condition(&j, "Failed").is_some_and(|c| c.0 == "True")
        }
    })
    .await;
    let j: Job = get(&client, "j3", "slow").await;
    assert_eq!(
        condition(&j, "Failed"),
        Some(("True".into(), "DeadlineExceeded".into()))
    );
    assert_eq!(
        condition(&j, "FailureTarget"),
        Some(("True".into(), "DeadlineExceeded".into()))
    );
    let s = j.status.unwrap();
    assert_eq!(
        (s.failed, s.active.unwrap_or(0), s.terminating),
        (Some(2), 0, Some(0))
    );
    assert!(active_pods(&job_pods(&client, "j3", &created).await).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pods_of_a_deleted_job_lose_the_tracking_finalizer() {
    let server = Server::start(&[]);
    server.namespaces(&["j5"]).await;
    let client = server.client();
    let clock = FakeClock::new();
    let (_factory, _running) = job_controller(&server, &clock);

    let created: Job = create(
        &client,
        "j5",
        &job("gone", json!({"parallelism": 2, "completions": 2})),
    )
    .await;
    eventually("two pods", LIMIT, || async {
        job_pods(&client, "j5", &created).await.len() == 2
    })
    .await;
    let has_finalizer = |p: &Pod| {
        p.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == JOB_TRACKING_FINALIZER)
    };
    assert!(job_pods(&client, "j5", &created)
        .await
        .iter()
        .all(has_finalizer));
    // No garbage collector runs here: the pods stay, owned by a Job that is gone.
    Api::<Job>::for_type(client.clone(), "j5")
        .delete("gone", &Default::default())
        .await
        .unwrap();
    eventually("the finalizers are removed", LIMIT, || async {
        let pods = job_pods(&client, "j5", &created).await;
        pods.len() == 2 && !pods.iter().any(has_finalizer)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_indexed_job_runs_each_index_and_a_suspended_job_waits() {
    let server = Server::start(&[]);
    server.namespaces(&["j4"]).await;
    let client = server.client();
    let clock = FakeClock::new();
    let (_factory, _running) = job_controller(&server, &clock);

    let created: Job = create(
        &client,
        "j4",
        &job("idx", json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed", "suspend": true})),
    )
    .await;
    eventually("the Suspended condition", LIMIT, || async {
        let j: Job = get(&client, "j4", "idx").await;
        condition(&j, "Suspended") == Some(("True".into(), "JobSuspended".into()))
    })
    .await;
    assert!(
        job_pods(&client, "j4", &created).await.is_empty(),
        "a suspended Job runs nothing"
    );
    assert!(get::<Job>(&client, "j4", "idx")
        .await
        .status
        .unwrap()
        .start_time
        .is_none());

    merge_patch::<Job>(&client, "j4", "idx", json!({"spec": {"suspend": false}})).await;
    eventually("three indexed pods", LIMIT, || async {
        job_pods(&client, "j4", &created).await.len() == 3
    })
    .await;
    // The pods are created before the sync that made them writes the status.
    eventually("the Suspended condition turned False", LIMIT, || async {
        let j: Job = get(&client, "j4", "idx").await;
        condition(&j, "Suspended") == Some(("False".into(), "JobResumed".into()))
    })
    .await;
    let mut indexes = Vec::new();
    for p in job_pods(&client, "j4", &created).await {
        let ix = p.metadata.annotations.as_ref().unwrap()[JOB_COMPLETION_INDEX_ANNOTATION].clone();
        assert_eq!(
            p.metadata.labels.as_ref().unwrap()[JOB_COMPLETION_INDEX_ANNOTATION],
            ix
        );
        assert_eq!(
            p.spec.as_ref().unwrap().hostname.as_deref(),
            Some(format!("idx-{ix}").as_str())
        );
        assert!(p
            .metadata
            .name
            .as_ref()
            .unwrap()
            .starts_with(&format!("idx-{ix}-")));
        indexes.push(ix);
    }
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2"]);
    for p in job_pods(&client, "j4", &created).await {
        end_pod(
            &client,
            "j4",
            p.metadata.name.as_ref().unwrap(),
            "Succeeded",
        )
        .await;
    }
    eventually("the indexed job completes", LIMIT, || async {
        let j: Job = get(&client, "j4", "idx").await;
        condition(&j, "Complete").is_some_and(|c| c.0 == "True")
    })
    .await;
    let s = get::<Job>(&client, "j4", "idx").await.status.unwrap();
    assert_eq!(
        (s.completed_indexes.as_deref(), s.succeeded),
        (Some("0-2"), Some(3))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_job_creates_the_job_of_its_scheduled_minute() {
    let server = Server::start(&[]);
    server.namespaces(&["cj"]).await;
    let client = server.client();
    let clock = FakeClock::new();
    // Both controllers index the shared informers: both are built before either runs.
    let factory = SharedInformerFactory::new(server.client());
    let jobs = Arc::new(
        JobController::with_options(
            &factory,
            server.client(),
            JobControllerOptions {
                workers: 2,
                clock: clock.shared(),
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let cronjobs = Arc::new(
        CronJobController::with_options(
            &factory,
            server.client(),
            CronJobControllerOptions {
                workers: 1,
                clock: clock.shared(),
            },
        )
        .unwrap(),
    );
    let _cron = Running(tokio::spawn({
        let c = cronjobs.clone();
        async move { c.run().await }
    }));
    let _jobs = Running(tokio::spawn(async move { jobs.run().await }));

    let cj: CronJob = serde_json::from_value(json!({
        "metadata": {"name": "tick"},
        "spec": {"schedule": "*/1 * * * *", "jobTemplate": {
            "metadata": {"labels": {"team": "a"}},
            "spec": {"template": {"spec": {"restartPolicy": "OnFailure",
                "containers": [{"name": "main", "image": "busybox"}]}}}}}
    }))
    .unwrap();
    let cj: CronJob = create(&client, "cj", &cj).await;
    let jobs_api = Api::<Job>::for_type(client.clone(), "cj");
    // Nothing is due before the first scheduled minute after the creation.
    assert!(jobs_api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
    let job = until_job(&clock, &jobs_api).await;
    let name = job.metadata.name.clone().unwrap();
    let minute: i64 = name.strip_prefix("tick-").unwrap().parse().unwrap();
    let created_at = cj.metadata.creation_timestamp.unwrap().0.as_second();
    assert!(
        minute * 60 > created_at,
        "the first minute after the creation"
    );
    let r = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((r.kind.as_str(), r.controller), ("CronJob", Some(true)));
    assert_eq!(job.metadata.labels.as_ref().unwrap()["team"], "a");
    let stamp = &job.metadata.annotations.as_ref().unwrap()[SCHEDULED_TIMESTAMP_ANNOTATION];
    assert_eq!(
        stamp
            .parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
            .as_second(),
        minute * 60
    );
    eventually("the job is active and the time recorded", LIMIT, || async {
        let s = get::<CronJob>(&client, "cj", "tick")
            .await
            .status
            .unwrap_or_default();
        s.active
            .unwrap_or_default()
            .iter()
            .any(|a| a.name.as_deref() == Some(name.as_str()))
            && s.last_schedule_time
                .is_some_and(|t| t.0.as_second() == minute * 60)
    })
    .await;

    // Its pod succeeds: the Job completes and the CronJob records the success.
    eventually("the job's pod", LIMIT, || async {
        !job_pods(&client, "cj", &job).await.is_empty()
    })
    .await;
    let pod = job_pods(&client, "cj", &job).await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    end_pod(&client, "cj", &pod, "Succeeded").await;
    eventually("the cron job saw the success", LIMIT, || async {
        let s = get::<CronJob>(&client, "cj", "tick")
            .await
            .status
            .unwrap_or_default();
        s.active.unwrap_or_default().is_empty() && s.last_successful_time.is_some()
    })
    .await;
    let jobs = jobs_api.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(jobs.len(), 1, "one job per scheduled minute");
}

/// Moves the fake clock past the next minute, then waits for the CronJob's Job.
async fn until_job(clock: &FakeClock, api: &Api<Job>) -> Job {
    clock.step(Duration::from_secs(61));
    let start = std::time::Instant::now();
    loop {
        if let Some(j) = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .next()
        {
            return j;
        }
        assert!(
            start.elapsed() < LIMIT,
            "timed out waiting for the cron job's job"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn cron_job(name: &str, extra: serde_json::Value) -> CronJob {
    let mut spec = json!({"schedule": "*/1 * * * *", "jobTemplate": {"spec": {"template": {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn jobs_of(api: &Api<Job>, cron: &str) -> Vec<String> {
    let mut v: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .filter(|n| n.starts_with(&format!("{cron}-")))
        .collect();
    v.sort();
    v
}

/// Marks a Job Complete through its status, started at `start` (no Job controller runs).
async fn complete_job(client: &Client, ns: &str, name: &str, start: &str) {
    let patch = json!({"status": {"startTime": start, "completionTime": start, "succeeded": 1,
        "conditions": [{"type": "Complete", "status": "True"}]}});
    client
        .request_bytes(
            http::Method::PATCH,
            &format!("/apis/batch/v1/namespaces/{ns}/jobs/{name}/status"),
            Some((
                bytes::Bytes::from(patch.to_string()),
                "application/merge-patch+json",
            )),
        )
        .await
        .unwrap_or_else(|e| panic!("completing job {name}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_jobs_forbid_replace_and_keep_their_history_limit() {
    let server = Server::start(&[]);
    server.namespaces(&["cjp"]).await;
    let client = server.client();
    let clock = FakeClock::new();
    let factory = SharedInformerFactory::new(server.client());
    let controller = Arc::new(
        CronJobController::with_options(
            &factory,
            server.client(),
            CronJobControllerOptions {
                workers: 2,
                clock: clock.shared(),
            },
        )
        .unwrap(),
    );
    let _running = Running(tokio::spawn({
        let c = controller.clone();
        async move { c.run().await }
    }));
    create(
        &client,
        "cjp",
        &cron_job("f", json!({"concurrencyPolicy": "Forbid"})),
    )
    .await;
    create(
        &client,
        "cjp",
        &cron_job("r", json!({"concurrencyPolicy": "Replace"})),
    )
    .await;
    create(
        &client,
        "cjp",
        &cron_job("h", json!({"successfulJobsHistoryLimit": 1})),
    )
    .await;
    let api = Api::<Job>::for_type(client.clone(), "cjp");

    clock.step(Duration::from_secs(61));
    eventually("each cron job's first job", LIMIT, || async {
        jobs_of(&api, "f").await.len() == 1
            && jobs_of(&api, "r").await.len() == 1
            && jobs_of(&api, "h").await.len() == 1
    })
    .await;
    let (f1, r1, h1) = (
        jobs_of(&api, "f").await.remove(0),
        jobs_of(&api, "r").await.remove(0),
        jobs_of(&api, "h").await.remove(0),
    );
    eventually("the first jobs are active", LIMIT, || async {
        let mut all = true;
        for c in ["f", "r", "h"] {
            let s = get::<CronJob>(&client, "cjp", c)
                .await
                .status
                .unwrap_or_default();
            all &= s.active.unwrap_or_default().len() == 1;
        }
        all
    })
    .await;

    // The next minute: Forbid waits for its running job, Replace replaces it, and Allow
    // runs a second one.
    clock.step(Duration::from_secs(60));
    eventually("r's job replaced and h's second job", LIMIT, || async {
        let r = jobs_of(&api, "r").await;
        r.len() == 1 && r[0] != r1 && jobs_of(&api, "h").await.len() == 2
    })
    .await;
    eventually("f's JobAlreadyActive event", LIMIT, || async {
        Api::<k8s_openapi::api::core::v1::Event>::for_type(client.clone(), "cjp")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("JobAlreadyActive"))
    })
    .await;
    assert_eq!(
        jobs_of(&api, "f").await,
        vec![f1.clone()],
        "Forbid ran no second job"
    );

    // Both of h's jobs succeed: only the newest stays (successfulJobsHistoryLimit 1).
    let h = jobs_of(&api, "h").await;
    complete_job(&client, "cjp", &h[0], "2024-01-01T00:00:00Z").await;
    complete_job(&client, "cjp", &h[1], "2024-01-01T00:01:00Z").await;
    assert_eq!(h[0], h1);
    eventually("the older successful job deleted", LIMIT, || async {
        jobs_of(&api, "h").await == vec![h[1].clone()]
    })
    .await;
    eventually("h's status", LIMIT, || async {
        let s = get::<CronJob>(&client, "cjp", "h")
            .await
            .status
            .unwrap_or_default();
        s.active.unwrap_or_default().is_empty() && s.last_successful_time.is_some()
    })
    .await;
}
