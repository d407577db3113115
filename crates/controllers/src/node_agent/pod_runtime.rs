//! The simulated container runtime of one pod: what a kubelet and its runtime would do with
//! the pod's containers, as a pure state machine over time.
//!
//! [`PodRuntime::sync`] is called with the pod as the API has it and the current time, and
//! advances the simulation: it starts the pod (init containers run to completion at once,
//! app containers and sidecars start), lets containers exit when the
//! [`EXIT_AFTER_ANNOTATION`] says so, restarts them as the `restartPolicy` asks (with the
//! kubelet's crash-loop back-off: the first restart at once, then 10 s, doubling up to
//! 5 minutes), makes them ready once their readiness probe's `initialDelaySeconds` (and
//! started once their startup probe's) have passed, and stops them when the pod is being
//! deleted. It reports the events a kubelet records (`Pulled`, `Created`, `Started`,
//! `Killing`, `BackOff`), whether the pod must now be deleted, and when it needs to be
//! synced again. Nothing here does I/O: the pod worker writes what it decides.
//!
//! Time is logical: a container that was due to exit at 10:00:05 is recorded as finished at
//! 10:00:05 even when the sync runs later, and several exits and restarts that fell due
//! while nobody looked are all played through, so a fake clock can jump ahead.
//!
//! A runtime created for a pod that already has container statuses (an agent restarted)
//! adopts them instead of starting the containers again.

use super::ids::{container_id, image_id, normalized_image};
use super::ipam::IpAllocator;
use crate::node_agent::EventType;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime};

use super::wall_clock::system_time;

/// Pod annotation: every app container exits this long after it started (a duration such
/// as `5s`, `1m30s`, `250ms`), with the code of [`EXIT_CODE_ANNOTATION`]. Restarted
/// containers exit again after the same time.
pub const EXIT_AFTER_ANNOTATION: &str = "listwatch.dev/exit-after";
/// Pod annotation: the exit code of the exits [`EXIT_AFTER_ANNOTATION`] asks for
/// (default 0).
pub const EXIT_CODE_ANNOTATION: &str = "listwatch.dev/exit-code";

/// The kubelet's first crash-loop back-off.
const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
/// The kubelet's longest crash-loop back-off.
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How many exits and restarts one sync plays through at most (a fake clock jumping days
/// ahead must not make a sync loop forever).
const MAX_STEPS: usize = 1000;
/// How long a pod that got no address waits before trying again.
const SANDBOX_RETRY: Duration = Duration::from_secs(10);

/// An event the runtime wants recorded on the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuntimeEvent {
    /// The container's field path (`spec.containers{web}`), if about a container.
    pub field_path: Option<String>,
    /// Normal or Warning.
    pub event_type: EventType,
    /// The kubelet's reason.
    pub reason: &'static str,
    /// The kubelet's message.
    pub message: String,
}

/// How one container run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Termination {
    pub exit_code: i32,
    pub reason: String,
    pub started_at: SystemTime,
    pub finished_at: SystemTime,
    pub container_id: String,
}

/// Where a container is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunState {
    /// Not started yet, or waiting out a back-off (`reason` as the kubelet reports it).
    Waiting {
        reason: String,
        message: Option<String>,
        /// When the back-off ends (`None` if it is not a back-off).
        until: Option<SystemTime>,
    },
    /// Running since `started_at`.
    Running {
        started_at: SystemTime,
        container_id: String,
    },
    /// Stopped and not to be restarted.
    Terminated(Termination),
}

/// One container of the pod.
#[derive(Debug, Clone)]
pub(crate) struct ContainerRun {
    pub name: String,
    /// The image as the pod spec names it.
    pub spec_image: String,
    /// The image as the runtime names it.
    pub image: String,
    pub image_id: String,
    /// An init container (`spec.initContainers`).
    pub init: bool,
    /// An init container with `restartPolicy: Always` (a sidecar).
    pub sidecar: bool,
    pub restart_count: i32,
    pub state: RunState,
    pub last_termination: Option<Termination>,
    /// The readiness probe's initial delay, if the container has one.
    pub readiness_delay: Option<Duration>,
    /// The startup probe's initial delay, if the container has one.
    pub startup_delay: Option<Duration>,
}

impl ContainerRun {
    fn new(spec: &Container, init: bool) -> ContainerRun {
        let spec_image = spec.image.clone().unwrap_or_default();
        let image = normalized_image(&spec_image);
        let delay = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
            p.as_ref().map(|p| {
                Duration::from_secs(
                    u64::try_from(p.initial_delay_seconds.unwrap_or(0)).unwrap_or(0),
                )
            })
        };
        ContainerRun {
            name: spec.name.clone(),
            spec_image,
            image_id: image_id(&image),
            image,
            init,
            sidecar: init && spec.restart_policy.as_deref() == Some("Always"),
            restart_count: 0,
            state: RunState::Waiting {
                reason: "ContainerCreating".into(),
                message: None,
                until: None,
            },
            last_termination: None,
            readiness_delay: delay(&spec.readiness_probe),
            startup_delay: delay(&spec.startup_probe),
        }
    }

    /// The field path events about this container name.
    pub(crate) fn field_path(&self) -> String {
        if self.init {
            format!("spec.initContainers{{{}}}", self.name)
        } else {
            format!("spec.containers{{{}}}", self.name)
        }
    }

    /// Whether the startup probe (if any) has passed at `now`.
    pub(crate) fn started(&self, now: SystemTime) -> bool {
        match &self.state {
            RunState::Running { started_at, .. } => {
                self.startup_delay.is_none_or(|d| now >= *started_at + d)
            }
            _ => false,
        }
    }

    /// Whether the container is ready at `now`: running, started, and past its readiness
    /// probe's initial delay.
    pub(crate) fn ready(&self, now: SystemTime) -> bool {
        match &self.state {
            RunState::Running { started_at, .. } => {
                self.started(now) && self.readiness_delay.is_none_or(|d| now >= *started_at + d)
            }
            _ => false,
        }
    }

    /// The next instant at which `started` or `ready` will change by itself.
    fn next_probe_change(&self, now: SystemTime) -> Option<SystemTime> {
        let RunState::Running { started_at, .. } = &self.state else {
            return None;
        };
        [self.startup_delay, self.readiness_delay]
            .into_iter()
            .flatten()
            .map(|d| *started_at + d)
            .filter(|t| *t > now)
            .min()
    }

    fn start(&mut self, at: SystemTime, pod_uid: &str, events: &mut Vec<RuntimeEvent>) {
        let id = container_id(pod_uid, &self.name, self.restart_count);
        let path = self.field_path();
        let ev = |reason: &'static str, message: String| RuntimeEvent {
            field_path: Some(path.clone()),
            event_type: EventType::Normal,
            reason,
            message,
        };
        events.push(ev(
            "Pulled",
            format!(
                "Container image \"{}\" already present on machine",
                self.spec_image
            ),
        ));
        events.push(ev("Created", format!("Created container: {}", self.name)));
        events.push(ev("Started", format!("Started container {}", self.name)));
        self.state = RunState::Running {
            started_at: at,
            container_id: id,
        };
    }

    /// Adopts what the API says about this container (a restarted agent).
    fn adopt(&mut self, status: &ContainerStatus) {
        self.restart_count = status.restart_count;
        let state = status.state.clone().unwrap_or_default();
        let termination = |t: &k8s_openapi::api::core::v1::ContainerStateTerminated| Termination {
            exit_code: t.exit_code,
            reason: t.reason.clone().unwrap_or_default(),
            started_at: t
                .started_at
                .as_ref()
                .map_or(SystemTime::UNIX_EPOCH, system_time),
            finished_at: t
                .finished_at
                .as_ref()
                .map_or(SystemTime::UNIX_EPOCH, system_time),
            container_id: t.container_id.clone().unwrap_or_default(),
        };
        self.last_termination = status
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(termination);
        if let Some(r) = &state.running {
            self.state = RunState::Running {
                started_at: r
                    .started_at
                    .as_ref()
                    .map_or(SystemTime::UNIX_EPOCH, system_time),
                container_id: status.container_id.clone().unwrap_or_default(),
            };
        } else if let Some(t) = &state.terminated {
            self.state = RunState::Terminated(termination(t));
        } else if let Some(w) = &state.waiting {
            self.state = RunState::Waiting {
                reason: w.reason.clone().unwrap_or_default(),
                message: w.message.clone(),
                // A back-off is simply over: the restart happens at the next sync.
                until: None,
            };
        }
    }
}

/// The pod's phase, as the kubelet computes it from its containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl Phase {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// What a sync decided.
#[derive(Debug, Default)]
pub(crate) struct SyncOutcome {
    /// Events to record, in order.
    pub events: Vec<RuntimeEvent>,
    /// The pod must be deleted (grace 0) once its status is written.
    pub delete: bool,
    /// When the pod needs to be synced again by itself.
    pub wake_at: Option<SystemTime>,
}

/// The exits asked of the app containers by annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ExitSpec {
    after: Duration,
    code: i32,
}

/// The simulated runtime state of one pod (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct PodRuntime {
    pub uid: String,
    /// The sandbox exists (the pod was started and not yet torn down).
    pub sandbox: bool,
    /// The pod was started at some point (its status has been filled in).
    pub started: bool,
    pub pod_ip: Option<Ipv4Addr>,
    /// The address came from the node's pod CIDR (not host networking) and is held.
    pub holds_ip: bool,
    pub start_time: Option<SystemTime>,
    pub init_containers: Vec<ContainerRun>,
    pub containers: Vec<ContainerRun>,
    pub phase: Phase,
    /// The pod is being deleted and its containers were stopped.
    pub stopped_for_deletion: bool,
    exit: Option<ExitSpec>,
    restart_policy: String,
    /// `name_namespace(uid)`, as the kubelet names the pod in back-off messages.
    pod_ref: String,
    /// The annotation could not be read (reported once).
    bad_exit_annotation: Option<String>,
}

/// Parses a duration as Go writes them (`1h2m3.5s`, `250ms`, `90s`, `1us`).
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    Duration::try_from_secs_f64(total).ok()
}

impl PodRuntime {
    /// A runtime for `pod`, not started. A pod that the API already shows as started (by
    /// an earlier agent) is adopted: its containers' states, restart counts and address are
    /// taken from its status, and its address is reserved in `ips`.
    pub(crate) fn new(pod: &Pod, ips: &mut IpAllocator, host_ip: Ipv4Addr) -> PodRuntime {
        let spec = pod.spec.clone().unwrap_or_default();
        let annotations = pod.metadata.annotations.as_ref();
        let mut bad_exit_annotation = None;
        let exit = annotations
            .and_then(|a| a.get(EXIT_AFTER_ANNOTATION))
            .and_then(|after| {
                let code = annotations
                    .and_then(|a| a.get(EXIT_CODE_ANNOTATION))
                    .map_or(Some(0), |c| c.trim().parse::<i32>().ok());
                match (parse_duration(after), code) {
                    (Some(after), Some(code)) => Some(ExitSpec { after, code }),
                    _ => {
                        bad_exit_annotation = Some(format!(
                            "annotations {EXIT_AFTER_ANNOTATION}={after:?} and \
                             {EXIT_CODE_ANNOTATION} must be a duration (e.g. 5s) and an integer"
                        ));
                        None
                    }
                }
            });
        let mut rt = PodRuntime {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            sandbox: false,
            started: false,
            pod_ip: None,
            holds_ip: false,
            start_time: None,
            init_containers: spec
                .init_containers
                .iter()
                .flatten()
                .map(|c| ContainerRun::new(c, true))
                .collect(),
            containers: spec
                .containers
                .iter()
                .map(|c| ContainerRun::new(c, false))
                .collect(),
            phase: Phase::Pending,
            stopped_for_deletion: false,
            exit,
            restart_policy: spec.restart_policy.unwrap_or_else(|| "Always".into()),
            pod_ref: format!(
                "{}_{}({})",
                pod.metadata.name.as_deref().unwrap_or_default(),
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.uid.as_deref().unwrap_or_default()
            ),
            bad_exit_annotation,
        };
        rt.adopt(pod, ips, host_ip);
        rt
    }

    /// Takes over what an earlier agent recorded in the pod's status.
    fn adopt(&mut self, pod: &Pod, ips: &mut IpAllocator, host_ip: Ipv4Addr) {
        let Some(status) = &pod.status else { return };
        let phase = match status.phase.as_deref() {
            Some("Running") => Phase::Running,
            Some("Succeeded") => Phase::Succeeded,
            Some("Failed") => Phase::Failed,
            _ => return,
        };
        self.started = true;
        self.phase = phase;
        self.sandbox = !phase.is_terminal();
        self.start_time = status.start_time.as_ref().map(system_time);
        self.pod_ip = status.pod_ip.as_deref().and_then(|ip| ip.parse().ok());
        if let Some(ip) = self.pod_ip {
            self.holds_ip = ip != host_ip && self.sandbox && ips.reserve(ip);
        }
        for (runs, statuses) in [
            (&mut self.init_containers, &status.init_container_statuses),
            (&mut self.containers, &status.container_statuses),
        ] {
            for run in runs.iter_mut() {
                if let Some(s) = statuses.iter().flatten().find(|s| s.name == run.name) {
                    run.adopt(s);
                }
            }
        }
    }

    /// Advances the simulation to `now` for `pod` (see the module docs). `ips` is the
    /// node's address pool and `host_ip` its address.
    pub(crate) fn sync(
        &mut self,
        pod: &Pod,
        now: SystemTime,
        ips: &mut IpAllocator,
        host_ip: Ipv4Addr,
    ) -> SyncOutcome {
        let mut out = SyncOutcome::default();
        if let Some(problem) = self.bad_exit_annotation.take() {
            out.events.push(RuntimeEvent {
                field_path: None,
                event_type: EventType::Warning,
                reason: "InvalidAnnotation",
                message: problem,
            });
        }
        if pod.metadata.deletion_timestamp.is_some() {
            self.stop_for_deletion(now, ips, &mut out);
            return out;
        }
        if self.phase.is_terminal() {
            return out;
        }
        if !self.started && !self.start(pod, now, ips, host_ip, &mut out) {
            return out;
        }
        self.play_exits(now, &mut out);
        self.phase = self.compute_phase();
        if self.phase.is_terminal() {
            self.tear_down(ips);
        } else {
            out.wake_at = self.next_change(now);
        }
        out
    }

    /// Creates the sandbox and starts the containers; false if no address was free.
    fn start(
        &mut self,
        pod: &Pod,
        now: SystemTime,
        ips: &mut IpAllocator,
        host_ip: Ipv4Addr,
        out: &mut SyncOutcome,
    ) -> bool {
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let ip = if host_network {
            Some(host_ip)
        } else {
            ips.allocate()
        };
        let Some(ip) = ip else {
            out.events.push(RuntimeEvent {
                field_path: None,
                event_type: EventType::Warning,
                reason: "FailedCreatePodSandBox",
                message:
                    "Failed to create pod sandbox: no IP addresses available in the node's pod CIDR"
                        .into(),
            });
            out.wake_at = Some(now + SANDBOX_RETRY);
            return false;
        };
        self.pod_ip = Some(ip);
        self.holds_ip = !host_network;
        self.sandbox = true;
        self.started = true;
        self.start_time = Some(now);
        let uid = self.uid.clone();
        for run in &mut self.init_containers {
            run.start(now, &uid, &mut out.events);
            if !run.sidecar {
                // Init containers of a simulated pod have nothing to do: they succeed at once.
                let RunState::Running { container_id, .. } = &run.state else {
                    continue;
                };
                run.state = RunState::Terminated(Termination {
                    exit_code: 0,
                    reason: "Completed".into(),
                    started_at: now,
                    finished_at: now,
                    container_id: container_id.clone(),
                });
            }
        }
        for run in &mut self.containers {
            run.start(now, &uid, &mut out.events);
        }
        true
    }

    /// Lets containers exit and restart, in time order, up to `now`.
    fn play_exits(&mut self, now: SystemTime, out: &mut SyncOutcome) {
        let uid = self.uid.clone();
        let pod_ref = self.pod_ref.clone();
        for run in &mut self.containers {
            for _ in 0..MAX_STEPS {
                match run.state.clone() {
                    RunState::Running {
                        started_at,
                        container_id,
                    } => {
                        let Some(exit) = self.exit else { break };
                        let finished_at = started_at + exit.after;
                        if finished_at > now {
                            break;
                        }
                        let termination = Termination {
                            exit_code: exit.code,
                            reason: if exit.code == 0 { "Completed" } else { "Error" }.into(),
                            started_at,
                            finished_at,
                            container_id,
                        };
                        let restart = match self.restart_policy.as_str() {
                            "Never" => false,
                            "OnFailure" => exit.code != 0,
                            _ => true,
                        };
                        if !restart {
                            run.state = RunState::Terminated(termination);
                            break;
                        }
                        // The first restart is immediate, later ones wait a growing back-off.
                        let backoff = backoff(run.restart_count);
                        run.last_termination = Some(termination);
                        run.state = RunState::Waiting {
                            reason: "CrashLoopBackOff".into(),
                            message: Some(format!(
                                "back-off {}s restarting failed container={} pod={}",
                                backoff.as_secs(),
                                run.name,
                                pod_ref
                            )),
                            until: Some(finished_at + backoff),
                        };
                        if !backoff.is_zero() && finished_at + backoff > now {
                            out.events.push(RuntimeEvent {
                                field_path: Some(run.field_path()),
                                event_type: EventType::Warning,
                                reason: "BackOff",
                                message: format!(
                                    "Back-off restarting failed container {}",
                                    run.name
                                ),
                            });
                        }
                    }
                    RunState::Waiting {
                        until: Some(until), ..
                    } => {
                        if until > now {
                            break;
                        }
                        run.restart_count += 1;
                        run.start(until, &uid, &mut out.events);
                    }
                    RunState::Waiting { until: None, .. } if run.last_termination.is_some() => {
                        // An adopted back-off: restart now.
                        run.restart_count += 1;
                        run.start(now, &uid, &mut out.events);
                    }
                    _ => break,
                }
            }
        }
    }

    /// The kubelet's phase for the containers' states.
    fn compute_phase(&self) -> Phase {
        if !self.started {
            return Phase::Pending;
        }
        let mut running = 0;
        let mut waiting = 0;
        let mut succeeded = 0;
        let mut failed = 0;
        for run in &self.containers {
            match &run.state {
                RunState::Running { .. } => running += 1,
                // A container in back-off will run again.
                RunState::Waiting { .. } if run.last_termination.is_some() => running += 1,
                RunState::Waiting { .. } => waiting += 1,
                RunState::Terminated(t) if t.exit_code == 0 => succeeded += 1,
                RunState::Terminated(_) => failed += 1,
            }
        }
        if waiting > 0 {
            Phase::Pending
        } else if running > 0 {
            Phase::Running
        } else if failed > 0 {
            Phase::Failed
        } else if succeeded > 0 {
            Phase::Succeeded
        } else {
            Phase::Pending
        }
    }

    /// The earliest instant at which something changes by itself: an exit, the end of a
    /// back-off, a probe's delay passing.
    fn next_change(&self, now: SystemTime) -> Option<SystemTime> {
        self.init_containers
            .iter()
            .chain(&self.containers)
            .filter_map(|run| {
                let own = match &run.state {
                    RunState::Running { started_at, .. } if !run.init => {
                        self.exit.map(|e| *started_at + e.after)
                    }
                    RunState::Waiting {
                        until: Some(until), ..
                    } => Some(*until),
                    _ => None,
                };
                [own, run.next_probe_change(now)]
                    .into_iter()
                    .flatten()
                    .min()
            })
            .min()
    }

    /// Stops every running container (the pod is being deleted) and asks for the pod's
    /// deletion.
    fn stop_for_deletion(&mut self, now: SystemTime, ips: &mut IpAllocator, out: &mut SyncOutcome) {
        out.delete = true;
        if self.stopped_for_deletion || !self.started {
            self.tear_down(ips);
            return;
        }
        self.stopped_for_deletion = true;
        for run in self
            .containers
            .iter_mut()
            .chain(self.init_containers.iter_mut())
        {
            match &run.state {
                RunState::Running {
                    started_at,
                    container_id,
                } => {
                    out.events.push(RuntimeEvent {
                        field_path: Some(run.field_path()),
                        event_type: EventType::Normal,
                        reason: "Killing",
                        message: format!("Stopping container {}", run.name),
                    });
                    // The simulated process exits cleanly on SIGTERM.
                    run.state = RunState::Terminated(Termination {
                        exit_code: 0,
                        reason: "Completed".into(),
                        started_at: *started_at,
                        finished_at: now,
                        container_id: container_id.clone(),
                    });
                }
                RunState::Waiting { .. } => {
                    // A container in back-off stays down: its last run is what counts.
                    if let Some(last) = run.last_termination.take() {
                        run.state = RunState::Terminated(last);
                    }
                }
                RunState::Terminated(_) => {}
            }
        }
        if !self.phase.is_terminal() {
            // A deleted pod ends in a terminal phase (kubelet ≥ 1.27): Succeeded if every
            // container's last run succeeded.
            let all_ok = self
                .containers
                .iter()
                .all(|r| matches!(&r.state, RunState::Terminated(t) if t.exit_code == 0));
            self.phase = if all_ok {
                Phase::Succeeded
            } else {
                Phase::Failed
            };
        }
        self.tear_down(ips);
    }

    /// Removes the sandbox and gives its address back.
    fn tear_down(&mut self, ips: &mut IpAllocator) {
        self.sandbox = false;
        if self.holds_ip {
            if let Some(ip) = self.pod_ip {
                ips.release(ip);
            }
            self.holds_ip = false;
        }
    }

    /// Gives the address back when the pod is gone from the API.
    pub(crate) fn forget(mut self, ips: &mut IpAllocator) {
        self.tear_down(ips);
    }
}

/// The back-off before the restart that follows `restarts` earlier restarts.
fn backoff(restarts: i32) -> Duration {
    if restarts <= 0 {
        return Duration::ZERO;
    }
    let doublings = u32::try_from(restarts - 1).unwrap_or(0).min(16);
    (BACKOFF_INITIAL * 2u32.pow(doublings)).min(BACKOFF_MAX)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, Probe};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    pub(crate) const T0: Duration = Duration::from_secs(1_700_000_000);
    pub(crate) fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + T0 + Duration::from_secs(secs)
    }
    pub(crate) const HOST: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);

    pub(crate) fn pod(restart_policy: &str, annotations: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("uid-1".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node-0".into()),
                restart_policy: Some(restart_policy.into()),
                containers: vec![Container {
                    name: "app".into(),
                    image: Some("nginx:1.27".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some("Pending".into()),
                ..Default::default()
            }),
        }
    }

    fn ips() -> IpAllocator {
        IpAllocator::new(Ipv4Addr::new(10, 244, 0, 0))
    }

    fn reasons(events: &[RuntimeEvent]) -> Vec<&'static str> {
        events.iter().map(|e| e.reason).collect()
    }

    #[test]
    fn a_pending_pod_starts_running_with_an_address_and_events() {
        let p = pod("Always", &[]);
        let mut ips = ips();
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        let out = rt.sync(&p, at(0), &mut ips, HOST);
        assert_eq!(reasons(&out.events), ["Pulled", "Created", "Started"]);
        assert_eq!(
            out.events[0].message,
            "Container image \"nginx:1.27\" already present on machine"
        );
        assert_eq!(
            out.events[0].field_path.as_deref(),
            Some("spec.containers{app}")
        );
        assert_eq!(rt.phase, Phase::Running);
        assert_eq!(rt.pod_ip, Some(Ipv4Addr::new(10, 244, 0, 2)));
        assert!(rt.containers[0].ready(at(0)));
        assert_eq!(out.wake_at, None);
        assert!(!out.delete);
        // Nothing more happens at a later sync.
        let again = rt.sync(&p, at(100), &mut ips, HOST);
        assert!(again.events.is_empty());
    }

    #[test]
    fn readiness_waits_for_the_probe_delay() {
        let mut p = pod("Always", &[]);
        p.spec.as_mut().unwrap().containers[0].readiness_probe = Some(Probe {
            initial_delay_seconds: Some(5),
            ..Default::default()
        });
        let mut ips = ips();
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        let out = rt.sync(&p, at(0), &mut ips, HOST);
        assert!(!rt.containers[0].ready(at(4)));
        assert!(rt.containers[0].ready(at(5)));
        assert_eq!(out.wake_at, Some(at(5)));
        let out = rt.sync(&p, at(5), &mut ips, HOST);
        assert_eq!(out.wake_at, None);
    }

    #[test]
    fn exits_follow_the_restart_policy() {
        // Never: exit 0 → Succeeded, address released.
        let p = pod("Never", &[(EXIT_AFTER_ANNOTATION, "5s")]);
        let mut ips = ips();
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        let out = rt.sync(&p, at(0), &mut ips, HOST);
        assert_eq!(out.wake_at, Some(at(5)));
        rt.sync(&p, at(4), &mut ips, HOST);
        assert_eq!(rt.phase, Phase::Running);
        let out = rt.sync(&p, at(7), &mut ips, HOST);
        assert_eq!(rt.phase, Phase::Succeeded);
        assert!(out.wake_at.is_none());
        let RunState::Terminated(t) = &rt.containers[0].state else {
            panic!("{:?}", rt.containers[0].state)
        };
        assert_eq!(
            (t.exit_code, t.reason.as_str(), t.finished_at),
            (0, "Completed", at(5))
        );
        assert!(!rt.holds_ip);

        // Never with a failing exit → Failed.
        let p = pod(
            "Never",
            &[(EXIT_AFTER_ANNOTATION, "5s"), (EXIT_CODE_ANNOTATION, "3")],
        );
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        rt.sync(&p, at(0), &mut ips, HOST);
        rt.sync(&p, at(5), &mut ips, HOST);
        assert_eq!(rt.phase, Phase::Failed);

        // OnFailure with exit 0 → Succeeded, no restart.
        let p = pod("OnFailure", &[(EXIT_AFTER_ANNOTATION, "5s")]);
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        rt.sync(&p, at(0), &mut ips, HOST);
        rt.sync(&p, at(5), &mut ips, HOST);
        assert_eq!(rt.phase, Phase::Succeeded);
        assert_eq!(rt.containers[0].restart_count, 0);
    }

    #[test]
    fn failing_containers_restart_with_back_off() {
        let p = pod(
            "OnFailure",
            &[(EXIT_AFTER_ANNOTATION, "5s"), (EXIT_CODE_ANNOTATION, "1")],
        );
        let mut ips = ips();
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        rt.sync(&p, at(0), &mut ips, HOST);
        // First exit at 5 s: restarted at once.
        let out = rt.sync(&p, at(5), &mut ips, HOST);
        assert_eq!(reasons(&out.events), ["Pulled", "Created", "Started"]);
        assert_eq!(rt.containers[0].restart_count, 1);
        assert_eq!(rt.phase, Phase::Running);
        assert_eq!(out.wake_at, Some(at(10)));
        // Second exit at 10 s: 10 s back-off.
        let out = rt.sync(&p, at(10), &mut ips, HOST);
        assert_eq!(reasons(&out.events), ["BackOff"]);
        assert!(matches!(
            &rt.containers[0].state,
            RunState::Waiting { reason, until: Some(u), .. } if reason == "CrashLoopBackOff" && *u == at(20)
        ));
        assert_eq!(rt.phase, Phase::Running);
        assert_eq!(out.wake_at, Some(at(20)));
        // A clock that jumps ahead plays every exit and restart through, in logical time:
        // restarts at 20 (back-off 10), exit 25, back-off 20 → 45, exit 50, back-off 40 → 90.
        let out = rt.sync(&p, at(60), &mut ips, HOST);
        assert_eq!(rt.containers[0].restart_count, 3);
        assert_eq!(out.wake_at, Some(at(90)));
        let last = rt.containers[0].last_termination.clone().unwrap();
        assert_eq!((last.exit_code, last.reason.as_str()), (1, "Error"));
        assert_eq!(last.finished_at, at(50));
    }

    #[test]
    fn deletion_stops_containers_then_asks_for_the_delete() {
        let mut p = pod("Always", &[]);
        let mut ips = ips();
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        rt.sync(&p, at(0), &mut ips, HOST);
        p.metadata.deletion_timestamp = Some(crate::node_agent::wall_clock::time(at(3)));
        let out = rt.sync(&p, at(3), &mut ips, HOST);
        assert!(out.delete);
        assert_eq!(reasons(&out.events), ["Killing"]);
        assert_eq!(out.events[0].message, "Stopping container app");
        assert_eq!(rt.phase, Phase::Succeeded);
        assert!(
            matches!(&rt.containers[0].state, RunState::Terminated(t) if t.finished_at == at(3))
        );
        assert!(!rt.sandbox && !rt.holds_ip);
        // Syncing again (the delete failed) asks again without new events.
        let out = rt.sync(&p, at(4), &mut ips, HOST);
        assert!(out.delete && out.events.is_empty());
    }

    #[test]
    fn a_never_started_pod_that_is_deleted_is_just_deleted() {
        let mut p = pod("Always", &[]);
        p.metadata.deletion_timestamp = Some(crate::node_agent::wall_clock::time(at(0)));
        let mut ips = ips();
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        let out = rt.sync(&p, at(0), &mut ips, HOST);
        assert!(out.delete && out.events.is_empty());
        assert!(!rt.started);
    }

    #[test]
    fn a_restarted_agent_adopts_running_pods() {
        let p = pod("Always", &[(EXIT_AFTER_ANNOTATION, "60s")]);
        let mut ips = ips();
        let mut first = PodRuntime::new(&p, &mut ips, HOST);
        first.sync(&p, at(0), &mut ips, HOST);
        let mut running = p.clone();
        running.status = Some(crate::node_agent::pod_status::desired_status(
            &first,
            &p,
            HOST,
            at(1),
        ));
        // A new agent with a fresh pool.
        let mut ips2 = IpAllocator::new(Ipv4Addr::new(10, 244, 0, 0));
        let mut rt = PodRuntime::new(&running, &mut ips2, HOST);
        assert!(rt.started && rt.sandbox && rt.holds_ip);
        assert_eq!(rt.pod_ip, first.pod_ip);
        // The adopted address is not handed out again.
        assert_ne!(ips2.allocate(), first.pod_ip);
        let out = rt.sync(&running, at(2), &mut ips2, HOST);
        assert!(out.events.is_empty(), "{:?}", out.events);
        assert_eq!(out.wake_at, Some(at(60)));
    }

    #[test]
    fn init_containers_complete_and_sidecars_run() {
        let mut p = pod("Always", &[]);
        let spec = p.spec.as_mut().unwrap();
        spec.init_containers = Some(vec![
            Container {
                name: "setup".into(),
                image: Some("busybox".into()),
                ..Default::default()
            },
            Container {
                name: "proxy".into(),
                image: Some("envoy".into()),
                restart_policy: Some("Always".into()),
                ..Default::default()
            },
        ]);
        let mut ips = ips();
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        let out = rt.sync(&p, at(0), &mut ips, HOST);
        assert_eq!(out.events.len(), 9);
        assert_eq!(
            out.events[0].field_path.as_deref(),
            Some("spec.initContainers{setup}")
        );
        assert!(matches!(
            rt.init_containers[0].state,
            RunState::Terminated(_)
        ));
        assert!(matches!(
            rt.init_containers[1].state,
            RunState::Running { .. }
        ));
        assert_eq!(rt.phase, Phase::Running);
    }

    #[test]
    fn host_network_pods_use_the_node_address() {
        let mut p = pod("Always", &[]);
        p.spec.as_mut().unwrap().host_network = Some(true);
        let mut ips = ips();
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        rt.sync(&p, at(0), &mut ips, HOST);
        assert_eq!(rt.pod_ip, Some(HOST));
        assert!(!rt.holds_ip);
    }

    #[test]
    fn bad_annotations_are_reported_once() {
        let p = pod("Never", &[(EXIT_AFTER_ANNOTATION, "soon")]);
        let mut ips = ips();
        let mut rt = PodRuntime::new(&p, &mut ips, HOST);
        let out = rt.sync(&p, at(0), &mut ips, HOST);
        assert_eq!(out.events[0].reason, "InvalidAnnotation");
        assert_eq!(out.events[0].event_type, EventType::Warning);
        let out = rt.sync(&p, at(1), &mut ips, HOST);
        assert!(out.events.is_empty());
        assert_eq!(rt.phase, Phase::Running);
    }

    #[test]
    fn durations_parse_as_go_writes_them() {
        assert_eq!(parse_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("-5s"), None);
        assert_eq!(parse_duration("s"), None);
        assert_eq!(parse_duration(""), None);
    }

    #[test]
    fn back_off_grows_to_five_minutes() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::from_secs(10));
        assert_eq!(backoff(2), Duration::from_secs(20));
        assert_eq!(backoff(5), Duration::from_secs(160));
        assert_eq!(backoff(6), Duration::from_secs(300));
        assert_eq!(backoff(1000), Duration::from_secs(300));
    }
}
