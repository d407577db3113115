//! The real kubectl 1.32 driving Deployments that our controllers roll out, against a
//! `listwatch serve` child: `create deployment`, `rollout status|history|undo|pause|
//! resume|restart`, `set image` and `scale` behave as on a cluster.

mod common;
mod workloads;

use common::Server;
use k8s_openapi::api::apps::v1::Deployment;
use std::path::{Path, PathBuf};
use std::time::Duration;
use workloads::*;

const KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.32";
const LIMIT: Duration = Duration::from_secs(60);

fn listwatch_binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("debug").join("listwatch")
}

struct Kubectl {
    kubeconfig: PathBuf,
    _dir: TempDir,
}

/// A directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Kubectl {
    async fn for_server(server: &Server) -> Kubectl {
        let dir = std::env::temp_dir().join(format!(
            "listwatch-kubectl-rollout-{}-{}",
            std::process::id(),
            server.addr().port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let out = tokio::process::Command::new(listwatch_binary())
            .args(["kubeconfig", "--server", &server.url])
            .output()
            .await
            .expect("running listwatch kubeconfig");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, &out.stdout).unwrap();
        Kubectl {
            kubeconfig,
            _dir: TempDir(dir),
        }
    }

    /// Runs kubectl with `args` in namespace `ns`; returns (success, stdout, stderr).
    async fn run(&self, ns: &str, args: &[&str]) -> (bool, String, String) {
        let child = tokio::process::Command::new(KUBECTL)
            .arg("--kubeconfig")
            .arg(self.kubeconfig.as_path())
            .args(["-n", ns])
            .args(args)
            .env(
                "HOME",
                self.kubeconfig.parent().unwrap_or(Path::new("/tmp")),
            )
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(120), child)
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish"))
            .expect("running kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn ok(&self, ns: &str, args: &[&str]) -> String {
        let (ok, out, err) = self.run(ns, args).await;
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        out
    }
}

/// The revisions `kubectl rollout history` lists.
fn revisions(history: &str) -> Vec<String> {
    history
        .lines()
        .skip_while(|l| !l.starts_with("REVISION"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rolls_out_undoes_pauses_scales_and_restarts() {
    let server = Server::start(&[]);
    server.namespaces(&["k1"]).await;
    let client = server.client();
    let _cm = ControllerManager::start(server.client());
    let _kubelet = FakeKubelet::start(server.client(), "k1");
    let k = Kubectl::for_server(&server).await;
    let status = ["rollout", "status", "deployment/web", "--timeout=60s"];
    let done = "deployment \"web\" successfully rolled out";

    let out = k
        .ok(
            "k1",
            &[
                "create",
                "deployment",
                "web",
                "--image=nginx:1.26",
                "--replicas=2",
            ],
        )
        .await;
    assert!(out.contains("deployment.apps/web created"), "{out}");
    let out = k.ok("k1", &status).await;
    assert!(out.contains(done), "{out}");
    assert_eq!(pods(&client, "k1", "app=web").await.len(), 2);

    let out = k
        .ok(
            "k1",
            &["set", "image", "deployment/web", "nginx=nginx:1.27"],
        )
        .await;
    assert!(out.contains("image updated"), "{out}");
    let out = k.ok("k1", &status).await;
    assert!(out.contains(done), "{out}");
    let history = k.ok("k1", &["rollout", "history", "deployment/web"]).await;
    assert_eq!(revisions(&history), ["1", "2"], "{history}");
    let first = k
        .ok(
            "k1",
            &["rollout", "history", "deployment/web", "--revision=1"],
        )
        .await;
    assert!(first.contains("nginx:1.26"), "{first}");

    // Undo: kubectl patches the template of revision 1 back; it rolls out as revision 3.
    let out = k.ok("k1", &["rollout", "undo", "deployment/web"]).await;
    assert!(out.contains("deployment.apps/web rolled back"), "{out}");
    let out = k.ok("k1", &status).await;
    assert!(out.contains(done), "{out}");
    let image = k
        .ok(
            "k1",
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.spec.template.spec.containers[0].image}",
            ],
        )
        .await;
    assert_eq!(image, "nginx:1.26");
    let history = k.ok("k1", &["rollout", "history", "deployment/web"]).await;
    assert_eq!(revisions(&history), ["2", "3"], "{history}");
    eventually("only nginx:1.26 pods", LIMIT, || async {
        let p = pods(&client, "k1", "app=web").await;
        p.len() == 2
            && p.iter().all(|p| {
                p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("nginx:1.26")
            })
    })
    .await;

    let out = k
        .ok("k1", &["scale", "deployment/web", "--replicas=4"])
        .await;
    assert!(out.contains("deployment.apps/web scaled"), "{out}");
    let out = k.ok("k1", &status).await;
    assert!(out.contains(done), "{out}");
    eventually("four pods", LIMIT, || async {
        pods(&client, "k1", "app=web").await.len() == 4
    })
    .await;

    // Paused: a template change creates no ReplicaSet.
    let out = k.ok("k1", &["rollout", "pause", "deployment/web"]).await;
    assert!(out.contains("paused"), "{out}");
    k.ok(
        "k1",
        &["set", "image", "deployment/web", "nginx=nginx:1.28"],
    )
    .await;
    eventually("the paused change observed", LIMIT, || async {
        let d: Deployment = get(&client, "k1", "web").await;
        d.status.as_ref().and_then(|s| s.observed_generation) == d.metadata.generation
            && condition(&d, "Progressing")
                .is_some_and(|c| c == ("Unknown".into(), "DeploymentPaused".into()))
    })
    .await;
    let d: Deployment = get(&client, "k1", "web").await;
    let uid = d.metadata.uid.clone().unwrap();
    assert_eq!(
        owned_replica_sets(&client, "k1", &uid).await.len(),
        2,
        "no rollout while paused"
    );
    let (ok, _, err) = k.run("k1", &["rollout", "undo", "deployment/web"]).await;
    assert!(
        !ok && err.contains("paused"),
        "undo of a paused deployment: {err}"
    );

    let out = k.ok("k1", &["rollout", "resume", "deployment/web"]).await;
    assert!(out.contains("resumed"), "{out}");
    let out = k.ok("k1", &status).await;
    assert!(out.contains(done), "{out}");
    assert_eq!(owned_replica_sets(&client, "k1", &uid).await.len(), 3);

    let out = k.ok("k1", &["rollout", "restart", "deployment/web"]).await;
    assert!(out.contains("restarted"), "{out}");
    let out = k.ok("k1", &status).await;
    assert!(out.contains(done), "{out}");
    let history = k.ok("k1", &["rollout", "history", "deployment/web"]).await;
    assert_eq!(revisions(&history), ["2", "3", "4", "5"], "{history}");
    let d: Deployment = get(&client, "k1", "web").await;
    assert!(rolled_out(&d));
    assert_eq!(d.spec.replicas, Some(4));
}
