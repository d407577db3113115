//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection`
//! does it, so that several replicas of a component can run and exactly one acts.
//!
//! The Lease records the holder (`spec.holderIdentity`), how long its claim lasts
//! (`leaseDurationSeconds`), when it was acquired and last renewed, and how often it changed
//! hands (`leaseTransitions`). A candidate:
//! - **acquires** the lease when nobody holds it, when it was released (empty holder), or
//!   when the holder's claim has expired — judged by *this* process's clock: the record must
//!   have stayed unchanged for a whole lease duration since this candidate last saw it
//!   change, so clocks of different machines never have to agree;
//! - then **renews** it every retry period; a renewal that has not succeeded for the renew
//!   deadline loses the leadership (the leader's work is stopped before another candidate
//!   can have acquired it: renew deadline < lease duration);
//! - optionally **releases** it when it stops leading of its own accord, so a successor
//!   need not wait for the claim to expire.
//!
//! Every change is an update with the record's `resourceVersion` (compare-and-swap), so two
//! candidates can never both believe they acquired it.

use client::cache::backoff::SplitMix64;
use client::clock::{RealClock, SharedClock};
use client::rest::{Api, Client, PostParams};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How a candidate competes for a lease. [`LeaderElectionConfig::new`] gives Kubernetes'
/// defaults for its control-plane components (15 s, 10 s, 2 s).
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    /// The Lease's namespace (`kube-system` for the control plane).
    pub lease_namespace: String,
    /// The Lease's name (e.g. `kube-scheduler`).
    pub lease_name: String,
    /// This candidate's identity, unique among the candidates (e.g. `host_uuid`).
    pub identity: String,
    /// How long a claim lasts without renewal before others may take the lease.
    pub lease_duration: Duration,
    /// How long one renewal cycle (starting a retry period after the last renewal) keeps
    /// trying before the leader gives up leading; `retry_period + renew_deadline` should be
    /// less than `lease_duration`.
    pub renew_deadline: Duration,
    /// The pause between attempts to acquire or renew.
    pub retry_period: Duration,
    /// Release the lease when leading ends of its own accord.
    pub release_on_cancel: bool,
}

impl LeaderElectionConfig {
    /// Kubernetes' defaults: 15 s lease, 10 s renew deadline, 2 s retry period, release on
    /// stop.
    pub fn new(
        lease_namespace: impl Into<String>,
        lease_name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        LeaderElectionConfig {
            lease_namespace: lease_namespace.into(),
            lease_name: lease_name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: true,
        }
    }
}

/// How [`LeaderElector::run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeadershipEnd {
    /// The leader's work finished by itself (the lease was released if so configured).
    Finished,
    /// Renewal failed for the renew deadline: the work was stopped.
    Lost,
}

/// What this candidate last saw of the lease.
#[derive(Debug, Clone)]
struct Observed {
    /// The spec as read (holder, duration, times, transitions).
    spec: LeaseSpec,
    /// When, on this process's clock, the spec was last seen to change.
    changed_at: Instant,
}

/// One candidate. See the [module docs](self).
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    clock: SharedClock,
    observed: parking_lot::Mutex<Option<Observed>>,
    leading: AtomicBool,
    rng: parking_lot::Mutex<SplitMix64>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("lease", &self.config.lease_name)
            .field("identity", &self.config.identity)
            .finish_non_exhaustive()
    }
}

fn now_micro() -> MicroTime {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // Microseconds, as the type says (and as a kube-apiserver stores it).
    let micros = i32::try_from(since.subsec_micros()).unwrap_or(0);
    let at = i64::try_from(since.as_secs()).unwrap_or(0);
    MicroTime(k8s_openapi::jiff::Timestamp::new(at, micros * 1000).unwrap_or_default())
}

/// The outcome of one attempt.
enum Attempt {
    /// We hold the lease (acquired or renewed).
    Held,
    /// Someone else holds a valid claim.
    Taken,
    /// The attempt failed (API error, conflict): try again later.
    Failed(String),
}

impl LeaderElector {
    /// A candidate for `config`'s lease, talking through `client`.
    pub fn new(client: Client, config: LeaderElectionConfig) -> Self {
        Self::with_clock(client, config, RealClock::shared())
    }

    /// [`LeaderElector::new`] on another clock (expiry, retry and deadlines run on it).
    pub fn with_clock(client: Client, config: LeaderElectionConfig, clock: SharedClock) -> Self {
        LeaderElector {
            api: Api::for_type(client, &config.lease_namespace),
            config,
            clock,
            observed: parking_lot::Mutex::new(None),
            leading: AtomicBool::new(false),
            rng: parking_lot::Mutex::new(SplitMix64::from_entropy()),
        }
    }

    /// True while this candidate leads (between acquiring and losing or releasing).
    pub fn is_leader(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// The identity of the lease's holder as last seen (empty if released, `None` before
    /// the first read).
    pub fn observed_leader(&self) -> Option<String> {
        self.observed
            .lock()
            .as_ref()
            .map(|o| o.spec.holder_identity.clone().unwrap_or_default())
    }

    /// Waits until this candidate holds the lease, then runs `lead` while renewing it.
    /// Returns when `lead` finishes ([`LeadershipEnd::Finished`], releasing the lease if
    /// configured) or when renewal fails for the renew deadline ([`LeadershipEnd::Lost`]:
    /// `lead` is dropped at that moment, before another candidate can acquire the lease).
    /// Dropping the returned future stops leading without releasing.
    pub async fn run<F: Future<Output = ()>>(&self, lead: F) -> LeadershipEnd {
        self.acquire().await;
        self.leading.store(true, Ordering::SeqCst);
        tracing::info!(
            lease = %format!("{}/{}", self.config.lease_namespace, self.config.lease_name),
            identity = self.config.identity,
            "acquired the lease: leading"
        );
        let end = tokio::select! {
            () = lead => LeadershipEnd::Finished,
            () = self.renew_loop() => LeadershipEnd::Lost,
        };
        self.leading.store(false, Ordering::SeqCst);
        match end {
            LeadershipEnd::Lost => {
                tracing::warn!(
                    lease = self.config.lease_name,
                    identity = self.config.identity,
                    "could not renew the lease within the renew deadline: stopped leading"
                );
            }
            LeadershipEnd::Finished => {
                if self.config.release_on_cancel {
                    self.release().await;
                }
            }
        }
        end
    }

    /// Retries every retry period (jittered up to 20 % longer, so candidates spread out)
    /// until the lease is ours.
    async fn acquire(&self) {
        loop {
            match self.try_acquire_or_renew().await {
                Attempt::Held => return,
                Attempt::Taken => {}
                Attempt::Failed(e) => {
                    tracing::debug!(lease = self.config.lease_name, "acquiring: {e}")
                }
            }
            let jitter = 1.0 + 0.2 * self.rng.lock().next_f64();
            self.clock
                .sleep(self.config.retry_period.mul_f64(jitter))
                .await;
        }
    }

    /// Renews as client-go's elector does: a retry period after each renewal a renewal cycle
    /// starts, which tries at once and then every retry period until one attempt succeeds,
    /// for at most the renew deadline (an attempt still in flight then is abandoned).
    /// Returns when a cycle runs out, or when another candidate holds the lease. So the
    /// leader gives up at most retry period + renew deadline after its last renewal (12 s
    /// with the defaults), before the lease (15 s) lets anyone else take it.
    async fn renew_loop(&self) {
        loop {
            self.clock.sleep(self.config.retry_period).await;
            let cycle = self.clock.now();
            loop {
                let left = self
                    .config
                    .renew_deadline
                    .saturating_sub(self.clock.since(cycle));
                if left.is_zero() {
                    return;
                }
                let attempt = tokio::select! {
                    a = self.try_acquire_or_renew() => a,
                    _ = self.clock.sleep(left) => Attempt::Failed("renewal timed out".into()),
                };
                match attempt {
                    Attempt::Held => break,
                    Attempt::Taken => return,
                    Attempt::Failed(e) => {
                        tracing::debug!(lease = self.config.lease_name, "renewing: {e}");
                    }
                }
                let left = self
                    .config
                    .renew_deadline
                    .saturating_sub(self.clock.since(cycle));
                self.clock.sleep(self.config.retry_period.min(left)).await;
            }
        }
    }

    /// One attempt to create, take over or renew the lease.
    async fn try_acquire_or_renew(&self) -> Attempt {
        let duration_secs =
            i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let me = self.config.identity.clone();
        let current = match self.api.get(&self.config.lease_name).await {
            Ok(lease) => lease,
            Err(e) if e.is_not_found() => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.lease_name.clone()),
                        namespace: Some(self.config.lease_namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(me),
                        lease_duration_seconds: Some(duration_secs),
                        acquire_time: Some(now_micro()),
                        renew_time: Some(now_micro()),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(created) => {
                        self.observe(&created);
                        Attempt::Held
                    }
                    Err(e) => Attempt::Failed(format!("creating the lease: {e}")),
                };
            }
            Err(e) => return Attempt::Failed(format!("reading the lease: {e}")),
        };
        self.observe(&current);
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == me;
        if !ours && !holder.is_empty() && !self.expired() {
            return Attempt::Taken;
        }
        let mut next = spec.clone();
        next.holder_identity = Some(me);
        next.lease_duration_seconds = Some(duration_secs);
        next.renew_time = Some(now_micro());
        if !ours {
            next.acquire_time = Some(now_micro());
            next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        let mut lease = current.clone();
        lease.spec = Some(next);
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.observe(&updated);
                Attempt::Held
            }
            Err(e) if e.is_conflict() => Attempt::Failed("the lease changed meanwhile".into()),
            Err(e) => Attempt::Failed(format!("updating the lease: {e}")),
        }
    }

    /// Notes the lease as read, and when its spec last changed on our clock.
    fn observe(&self, lease: &Lease) {
        let spec = lease.spec.clone().unwrap_or_default();
        let mut o = self.observed.lock();
        let changed = o.as_ref().is_none_or(|prev| prev.spec != spec);
        let changed_at = match (&*o, changed) {
            (Some(prev), false) => prev.changed_at,
            _ => self.clock.now(),
        };
        *o = Some(Observed { spec, changed_at });
    }

    /// Whether the holder's claim, unchanged since we last saw it change, has run out.
    fn expired(&self) -> bool {
        let o = self.observed.lock();
        let Some(o) = o.as_ref() else {
            return false;
        };
        let secs = o.spec.lease_duration_seconds.unwrap_or(0).max(0) as u64;
        self.clock.since(o.changed_at) >= Duration::from_secs(secs)
    }

    /// Gives the lease up (empty holder, 1 s duration) if we still hold it.
    async fn release(&self) {
        let Ok(current) = self.api.get(&self.config.lease_name).await else {
            return;
        };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        let mut lease = current.clone();
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now_micro()),
            renew_time: Some(now_micro()),
            lease_transitions: spec.lease_transitions,
            ..Default::default()
        });
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(released) => {
                self.observe(&released);
                tracing::info!(lease = self.config.lease_name, "released the lease");
            }
            Err(e) => tracing::warn!(lease = self.config.lease_name, "releasing the lease: {e}"),
        }
    }
}
