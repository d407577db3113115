//! The pod status a kubelet reports for a [`PodRuntime`]: phase, addresses, start time,
//! container statuses and the conditions `PodReadyToStartContainers`, `Initialized`,
//! `ContainersReady`, `Ready` and `PodScheduled`.
//!
//! The status is computed over the one the API holds: fields the kubelet does not own
//! (`qosClass`, `nominatedNodeName`, conditions other components set such as
//! `DisruptionTarget`) are kept, and a condition whose status did not change keeps its
//! `lastTransitionTime`. The status is written as a strategic merge patch of `pods/status`
//! carrying the pod's uid (so a pod replaced under the same name is never written to),
//! with only the kubelet's fields; conditions merge by `type`, so the others stay.

use super::pod_runtime::{ContainerRun, Phase, PodRuntime, RunState, Termination};
use super::wall_clock::time;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use std::net::Ipv4Addr;
use std::time::SystemTime;

/// The conditions the kubelet owns, in the order it writes them.
const OWN_CONDITIONS: [&str; 5] = [
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
];

fn terminated(t: &Termination) -> ContainerStateTerminated {
    ContainerStateTerminated {
        container_id: Some(t.container_id.clone()),
        exit_code: t.exit_code,
        reason: Some(t.reason.clone()),
        started_at: Some(time(t.started_at)),
        finished_at: Some(time(t.finished_at)),
        ..Default::default()
    }
}

fn container_status(run: &ContainerRun, now: SystemTime) -> ContainerStatus {
    let (state, container_id) = match &run.state {
        RunState::Waiting {
            reason, message, ..
        } => (
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: message.clone(),
                }),
                ..Default::default()
            },
            run.last_termination
                .as_ref()
                .map(|t| t.container_id.clone()),
        ),
        RunState::Running {
            started_at,
            container_id,
        } => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(time(*started_at)),
                }),
                ..Default::default()
            },
            Some(container_id.clone()),
        ),
        RunState::Terminated(t) => (
            ContainerState {
                terminated: Some(terminated(t)),
                ..Default::default()
            },
            Some(t.container_id.clone()),
        ),
    };
    ContainerStatus {
        name: run.name.clone(),
        image: run.image.clone(),
        image_id: run.image_id.clone(),
        container_id,
        ready: run.ready(now),
        started: Some(run.started(now)),
        restart_count: run.restart_count,
        state: Some(state),
        last_state: Some(ContainerState {
            terminated: run.last_termination.as_ref().map(terminated),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A condition with `status`, `reason` and `message`; its transition time is `now` unless
/// `current` holds the same status, whose time is kept.
fn condition(
    current: &[PodCondition],
    type_: &str,
    status: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: SystemTime,
) -> PodCondition {
    let status = if status { "True" } else { "False" };
    let previous = current.iter().find(|c| c.type_ == type_);
    let transition = match previous {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => None,
    };
    PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: transition.or_else(|| Some(time(now))),
        ..Default::default()
    }
}

/// The kubelet's conditions for `rt` at `now`, given the pod's current ones.
fn own_conditions(rt: &PodRuntime, pod: &Pod, now: SystemTime) -> Vec<PodCondition> {
    let current: &[PodCondition] = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let completed = rt.phase == Phase::Succeeded;
    let unready: Vec<&str> = rt
        .init_containers
        .iter()
        .filter(|r| r.sidecar)
        .chain(&rt.containers)
        .filter(|r| !r.ready(now))
        .map(|r| r.name.as_str())
        .collect();
    let uninitialized: Vec<&str> = rt
        .init_containers
        .iter()
        .filter(|r| !r.sidecar && !matches!(&r.state, RunState::Terminated(t) if t.exit_code == 0))
        .map(|r| r.name.as_str())
        .collect();
    let containers_ready = unready.is_empty() && !rt.phase.is_terminal();
    let (cr_reason, cr_message) = if containers_ready {
        (None, None)
    } else if completed {
        (Some("PodCompleted"), None)
    } else {
        (
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    // Readiness gates: every gated condition must be True too.
    let gate_problem = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .into_iter()
        .flatten()
        .find_map(
            |g| match current.iter().find(|c| c.type_ == g.condition_type) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate \"{}\" does not exist.",
                    g.condition_type
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate \"{}\" is not \"True\", but {}",
                    g.condition_type, c.status
                )),
                Some(_) => None,
            },
        );
    let (ready, ready_reason, ready_message) = match (&gate_problem, containers_ready) {
        (_, false) => (false, cr_reason, cr_message.clone()),
        (Some(problem), true) => (false, Some("ReadinessGatesNotReady"), Some(problem.clone())),
        (None, true) => (true, None, None),
    };
    let initialized = uninitialized.is_empty();
    vec![
        condition(current, OWN_CONDITIONS[0], rt.sandbox, None, None, now),
        condition(
            current,
            OWN_CONDITIONS[1],
            initialized,
            (!initialized).then_some("ContainersNotInitialized"),
            (!initialized).then(|| {
                format!(
                    "containers with incomplete status: [{}]",
                    uninitialized.join(" ")
                )
            }),
            now,
        ),
        condition(
            current,
            OWN_CONDITIONS[2],
            ready,
            ready_reason,
            ready_message,
            now,
        ),
        condition(
            current,
            OWN_CONDITIONS[3],
            containers_ready,
            cr_reason,
            cr_message,
            now,
        ),
        match current.iter().find(|c| c.type_ == "PodScheduled") {
            Some(c) if c.status == "True" => c.clone(),
            _ => condition(current, "PodScheduled", true, None, None, now),
        },
    ]
}

/// The status the kubelet wants the pod to have: the current status with the kubelet's
/// fields replaced (see the module docs). Only meaningful once `rt.started`.
pub(crate) fn desired_status(
    rt: &PodRuntime,
    pod: &Pod,
    host_ip: Ipv4Addr,
    now: SystemTime,
) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    status.phase = Some(rt.phase.as_str().to_string());
    let own = own_conditions(rt, pod, now);
    let mut conditions: Vec<PodCondition> = status.conditions.take().unwrap_or_default();
    for c in own {
        match conditions.iter_mut().find(|x| x.type_ == c.type_) {
            Some(slot) => *slot = c,
            None => conditions.push(c),
        }
    }
    status.conditions = Some(conditions);
    let host = host_ip.to_string();
    status.host_ip = Some(host.clone());
    status.host_ips = Some(vec![HostIP { ip: host }]);
    if let Some(ip) = rt.pod_ip {
        let ip = ip.to_string();
        status.pod_ip = Some(ip.clone());
        status.pod_ips = Some(vec![PodIP { ip }]);
    }
    status.start_time = rt.start_time.map(time);
    status.init_container_statuses = (!rt.init_containers.is_empty()).then(|| {
        rt.init_containers
            .iter()
            .map(|r| container_status(r, now))
            .collect()
    });
    status.container_statuses = Some(
        rt.containers
            .iter()
            .map(|r| container_status(r, now))
            .collect(),
    );
    status
}

/// The strategic merge patch of `pods/status` that writes `status`'s kubelet-owned fields
/// to the pod with `uid`.
pub(crate) fn status_patch(uid: &str, status: &PodStatus) -> serde_json::Value {
    let own: Vec<&PodCondition> = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| OWN_CONDITIONS.contains(&c.type_.as_str()))
        .collect();
    let mut body = serde_json::json!({
        "metadata": {"uid": uid},
        "status": {
            "phase": status.phase,
            "conditions": own,
            "hostIP": status.host_ip,
            "hostIPs": status.host_ips,
            "startTime": status.start_time,
            "containerStatuses": status.container_statuses,
        }
    });
    let s = &mut body["status"];
    if let Some(ip) = &status.pod_ip {
        s["podIP"] = serde_json::json!(ip);
        s["podIPs"] = serde_json::json!(status.pod_ips);
    }
    if let Some(init) = &status.init_container_statuses {
        s["initContainerStatuses"] = serde_json::json!(init);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_agent::ipam::IpAllocator;
    use crate::node_agent::pod_runtime::tests::{at, pod, HOST};
    use crate::node_agent::pod_runtime::{EXIT_AFTER_ANNOTATION, EXIT_CODE_ANNOTATION};
    use k8s_openapi::api::core::v1::{PodReadinessGate, Probe};

    fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("no {t} condition in {:?}", s.conditions))
    }

    #[test]
    fn a_running_pod_reports_what_a_kubelet_does() {
        let mut p = pod("Always", &[]);
        p.status.as_mut().unwrap().qos_class = Some("BestEffort".into());
        let mut ips = IpAllocator::new(Ipv4Addr::new(10, 244, 0, 0));
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        rt.sync(&p, at(0), &mut ips, HOST);
        let s = desired_status(&rt, &p, HOST, at(1));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.244.0.2"));
        assert_eq!(s.host_ip.as_deref(), Some("10.200.0.1"));
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"), "kept");
        assert_eq!(s.start_time, Some(time(at(0))));
        let types: Vec<&str> = s
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(types, OWN_CONDITIONS);
        assert!(s.conditions.iter().flatten().all(|c| c.status == "True"));
        let c = &s.container_statuses.as_ref().unwrap()[0];
        assert!(c.ready && c.started == Some(true));
        assert_eq!(c.image, "docker.io/library/nginx:1.27");
        assert!(c.image_id.starts_with("docker.io/library/nginx@sha256:"));
        assert!(c
            .container_id
            .as_deref()
            .unwrap()
            .starts_with("containerd://"));
        let running = c.state.as_ref().unwrap().running.as_ref().unwrap();
        assert_eq!(running.started_at, Some(time(at(0))));

        // The patch carries the uid and only the kubelet's fields.
        let patch = status_patch("uid-1", &s);
        assert_eq!(patch["metadata"]["uid"], "uid-1");
        assert_eq!(patch["status"]["podIPs"][0]["ip"], "10.244.0.2");
        assert!(patch["status"].get("qosClass").is_none());
        assert_eq!(patch["status"]["conditions"].as_array().unwrap().len(), 5);
    }

    #[test]
    fn unchanged_conditions_keep_their_transition_time_and_foreign_ones_stay() {
        let mut p = pod("Always", &[]);
        p.spec.as_mut().unwrap().containers[0].readiness_probe = Some(Probe {
            initial_delay_seconds: Some(10),
            ..Default::default()
        });
        let mut ips = IpAllocator::new(Ipv4Addr::new(10, 244, 0, 0));
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        rt.sync(&p, at(0), &mut ips, HOST);
        let first = desired_status(&rt, &p, HOST, at(0));
        let ready = cond(&first, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [app]")
        );
        // Someone else's condition.
        let mut seen = p.clone();
        let mut st = first.clone();
        st.conditions.as_mut().unwrap().push(PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            ..Default::default()
        });
        seen.status = Some(st);
        let later = desired_status(&rt, &seen, HOST, at(5));
        assert_eq!(
            later,
            seen.status.clone().unwrap(),
            "nothing changed by 5 s"
        );
        let ready_now = desired_status(&rt, &seen, HOST, at(10));
        assert_eq!(cond(&ready_now, "Ready").status, "True");
        assert_eq!(
            cond(&ready_now, "Ready").last_transition_time,
            Some(time(at(10)))
        );
        assert_eq!(
            cond(&ready_now, "Initialized").last_transition_time,
            Some(time(at(0)))
        );
        assert_eq!(cond(&ready_now, "DisruptionTarget").status, "True");
    }

    #[test]
    fn completed_and_failed_pods() {
        let p = pod("Never", &[(EXIT_AFTER_ANNOTATION, "1s")]);
        let mut ips = IpAllocator::new(Ipv4Addr::new(10, 244, 0, 0));
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        rt.sync(&p, at(0), &mut ips, HOST);
        rt.sync(&p, at(2), &mut ips, HOST);
        let s = desired_status(&rt, &p, HOST, at(2));
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "False");
        let t = s.container_statuses.as_ref().unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .clone()
            .unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        assert_eq!(
            s.pod_ip.as_deref(),
            Some("10.244.0.2"),
            "the address stays in the status"
        );

        let p = pod(
            "Always",
            &[(EXIT_AFTER_ANNOTATION, "1s"), (EXIT_CODE_ANNOTATION, "2")],
        );
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        rt.sync(&p, at(0), &mut ips, HOST);
        rt.sync(&p, at(2), &mut ips, HOST); // exit at 1, restarted at once, exit at 2 → back-off
        let s = desired_status(&rt, &p, HOST, at(2));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let c = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(c.restart_count, 1);
        let waiting = c.state.as_ref().unwrap().waiting.clone().unwrap();
        assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
        let last = c.last_state.as_ref().unwrap().terminated.clone().unwrap();
        assert_eq!((last.exit_code, last.reason.as_deref()), (2, Some("Error")));
        assert_eq!(cond(&s, "ContainersReady").status, "False");
    }

    #[test]
    fn readiness_gates_hold_the_ready_condition() {
        let mut p = pod("Always", &[]);
        p.spec.as_mut().unwrap().readiness_gates = Some(vec![PodReadinessGate {
            condition_type: "example.com/lb".into(),
        }]);
        let mut ips = IpAllocator::new(Ipv4Addr::new(10, 244, 0, 0));
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        rt.sync(&p, at(0), &mut ips, HOST);
        let s = desired_status(&rt, &p, HOST, at(0));
        assert_eq!(cond(&s, "ContainersReady").status, "True");
        let ready = cond(&s, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
    }
}
