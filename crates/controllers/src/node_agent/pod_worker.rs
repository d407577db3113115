//! The pod workers: a few tasks, shared by every node of the process, that take pod keys off
//! one work queue and sync each pod — advance its [`PodRuntime`], record its events, write
//! its status, delete it when it is done terminating — and ask to be woken when the pod's
//! next change is due (through the queue's `add_after`, so a pod waiting for an exit or a
//! readiness delay costs an entry in one timer heap, not a task).

use super::agent::pod_reference;
use super::pod_runtime::PodRuntime;
use super::pod_status::{desired_status, status_patch};
use super::Shared;
use bytes::Bytes;
use client::rest::resource::PODS;
use client::rest::{DeleteParams, Error, Preconditions};
use client::workqueue::WorkQueue as _;
use http::Method;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A pod of one node of the process: the node's index and the pod's `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PodKey {
    pub node: u32,
    pub key: Arc<str>,
}

/// What the worker last wrote for a pod, to tell its own writes from others'.
#[derive(Debug)]
struct Written {
    /// The status asked for.
    desired: PodStatus,
    /// The status the server returned.
    result: Option<PodStatus>,
    /// The resourceVersion of the pod the write was computed from.
    from_rv: Option<String>,
}

/// A pod's runtime and the last write made for it.
#[derive(Debug)]
pub(crate) struct PodEntry {
    runtime: PodRuntime,
    written: Option<Written>,
}

/// The runtimes of all pods of the process.
pub(crate) type PodTable = HashMap<PodKey, PodEntry>;

/// Whether `desired` must be written: the pod does not show it, and it is not merely the
/// echo of the worker's own last write still on its way.
fn needs_write(entry: &PodEntry, pod: &Pod, desired: &PodStatus) -> bool {
    if pod.status.as_ref() == Some(desired) {
        return false;
    }
    match &entry.written {
        Some(w) if &w.desired == desired => {
            let unseen = w.from_rv.is_some() && w.from_rv == pod.metadata.resource_version;
            let echoed = w.result.is_some() && w.result == pod.status;
            !(unseen || echoed)
        }
        _ => true,
    }
}

/// Syncs one pod; returns when it wants to be synced again by itself.
pub(crate) async fn sync_pod(shared: &Shared, key: &PodKey) -> Result<Option<Duration>, Error> {
    let Some(agent) = shared.agents.get(key.node as usize) else {
        return Ok(None);
    };
    let (namespace, name) = key.key.split_once('/').unwrap_or(("", &key.key));
    let pod = agent
        .pods
        .get()
        .and_then(|inf| inf.lister().get(Some(namespace), name));
    let Some(pod) = pod else {
        // Gone from the API: the sandbox goes and its address is free again.
        if let Some(entry) = shared.pods.lock().remove(key) {
            entry.runtime.forget(&mut agent.ips.lock());
        }
        return Ok(None);
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let now = shared.wall.now();
    let host_ip = agent.id.ip;
    let (outcome, write) = {
        let mut table = shared.pods.lock();
        let mut ips = agent.ips.lock();
        if table.get(key).is_some_and(|e| e.runtime.uid != uid) {
            // Another pod under the same name.
            if let Some(old) = table.remove(key) {
                old.runtime.forget(&mut ips);
            }
        }
        let entry = table.entry(key.clone()).or_insert_with(|| PodEntry {
            runtime: PodRuntime::new(&pod, &mut ips, host_ip),
            written: None,
        });
        let outcome = entry.runtime.sync(&pod, now, &mut ips, host_ip);
        let write = entry
            .runtime
            .started
            .then(|| desired_status(&entry.runtime, &pod, host_ip, now))
            .filter(|desired| needs_write(entry, &pod, desired));
        (outcome, write)
    };
    for event in outcome.events {
        agent.recorder().event(
            &pod_reference(&pod, event.field_path),
            event.event_type,
            event.reason,
            event.message,
        );
    }
    if let Some(desired) = write {
        match write_status(agent, namespace, name, &uid, &desired).await {
            Ok(result) => {
                if let Some(entry) = shared.pods.lock().get_mut(key) {
                    entry.written = Some(Written {
                        desired,
                        result,
                        from_rv: pod.metadata.resource_version.clone(),
                    });
                }
            }
            // Deleted or replaced meanwhile: the informer will tell.
            Err(e) if e.is_not_found() || e.is_invalid() || e.is_conflict() => {
                tracing::debug!(pod = %key.key, error = %e, "pod status not written");
            }
            Err(e) => return Err(e),
        }
    }
    if outcome.delete {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        match agent
            .client
            .delete::<serde::de::IgnoredAny>(&PODS, Some(namespace), name, &params)
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_not_found() || e.is_conflict() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(outcome
        .wake_at
        .map(|at| at.duration_since(now).unwrap_or(Duration::ZERO)))
}

/// Writes the kubelet's part of `status` to the pod; returns the status the server kept.
async fn write_status(
    agent: &super::agent::Agent,
    namespace: &str,
    name: &str,
    uid: &str,
    status: &PodStatus,
) -> Result<Option<PodStatus>, Error> {
    let path = format!("{}/status", PODS.item_path(Some(namespace), name));
    let body = serde_json::to_vec(&status_patch(uid, status)).map_err(|source| Error::Decode {
        context: "the pod status patch (encoding)".into(),
        source,
    })?;
    let (_, answer) = agent
        .client
        .request_bytes(
            Method::PATCH,
            &path,
            Some((Bytes::from(body), "application/strategic-merge-patch+json")),
        )
        .await?;
    // Only the status is read: building the answer's spec and metadata cost the agents
    // more than the rest of the sync.
    #[derive(serde::Deserialize)]
    struct StatusOnly {
        status: Option<PodStatus>,
    }
    Ok(serde_json::from_slice::<StatusOnly>(&answer)
        .ok()
        .and_then(|p| p.status))
}

/// One worker: syncs pods until the queue shuts down.
pub(crate) async fn run_worker(shared: Arc<Shared>) {
    while let Some(key) = shared.queue.get().await {
        match sync_pod(&shared, &key).await {
            Ok(wake) => {
                shared.queue.forget(&key);
                if let Some(after) = wake {
                    shared.queue.add_after(key.clone(), after);
                }
            }
            Err(e) => {
                tracing::warn!(node = %shared.agents[key.node as usize].name(), pod = %key.key,
                    error = %e, "syncing pod failed; retrying");
                shared.queue.add_rate_limited(key.clone());
            }
        }
        shared.queue.done(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_agent::ipam::IpAllocator;
    use crate::node_agent::pod_runtime::tests::{at, pod, HOST};
    use std::net::Ipv4Addr;

    #[test]
    fn own_writes_are_not_repeated_but_foreign_changes_are_undone() {
        let mut p = pod("Always", &[]);
        p.metadata.resource_version = Some("10".into());
        let mut ips = IpAllocator::new(Ipv4Addr::new(10, 244, 0, 0));
        let mut entry = PodEntry {
            runtime: PodRuntime::new(&p, &mut ips, HOST),
            written: None,
        };
        entry.runtime.sync(&p, at(0), &mut ips, HOST);
        let desired = desired_status(&entry.runtime, &p, HOST, at(0));
        assert!(needs_write(&entry, &p, &desired));
        entry.written = Some(Written {
            desired: desired.clone(),
            result: Some(desired.clone()),
            from_rv: Some("10".into()),
        });
        // The cache has not seen the write yet: not again.
        assert!(!needs_write(&entry, &p, &desired));
        // The cache shows the write: nothing to do.
        let mut seen = p.clone();
        seen.metadata.resource_version = Some("11".into());
        seen.status = Some(desired.clone());
        assert!(!needs_write(&entry, &seen, &desired));
        // Someone (the node lifecycle controller) marked the pod not ready: write again.
        let mut marked = seen.clone();
        marked.metadata.resource_version = Some("12".into());
        for c in marked.status.as_mut().unwrap().conditions.as_mut().unwrap() {
            if c.type_ == "Ready" {
                c.status = "False".into();
            }
        }
        let desired = desired_status(&entry.runtime, &marked, HOST, at(5));
        assert!(needs_write(&entry, &marked, &desired));
    }
}
