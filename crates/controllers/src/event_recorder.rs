//! `EventRecorder`: reports what a component did as core/v1 `Event`s, the way client-go's
//! `tools/record` does, so that `kubectl describe` and `kubectl get events` read as on a
//! cluster.
//!
//! Recording never blocks the caller: [`EventRecorder::event`] hands the event to a
//! background task through a bounded queue (a full queue drops it, as events are hints).
//! The task runs each event through a correlator before anything is written:
//! - **spam filter**: per source and object, a token bucket of 25 events refilled at one per
//!   5 minutes; events beyond it are dropped;
//! - **aggregation**: when more than 10 events that differ only in their message are seen
//!   for one source, object, type and reason within 10 minutes, the rest are folded into one
//!   event whose message says `(combined from similar events): …`;
//! - **deduplication**: an event identical to one already written (same message too) is not
//!   written again: the existing one gets its `count` and `lastTimestamp` raised.
//!
//! Writes run concurrently (bounded), with at most one write in flight per event: changes to
//! an event whose write has not returned yet are coalesced into one patch carrying the
//! newest count. A failed write is retried a few times with a growing pause; a patch of an
//! event that has disappeared (expired by the server's event TTL) creates it again.

use client::clock::{RealClock, SharedClock};
use client::rest::{ApiResource, Client, PatchParams, PatchType, PostParams};
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// The type of an event, as Kubernetes knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something may need attention.
    Warning,
}

impl EventType {
    /// The `type` field's value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// A reference to `obj` for an event's `involvedObject`: its kind, API version, namespace,
/// name, uid and resourceVersion.
pub fn object_reference<K>(obj: &K) -> ObjectReference
where
    K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta>,
{
    let m = obj.metadata();
    ObjectReference {
        api_version: Some(K::API_VERSION.to_string()),
        kind: Some(K::KIND.to_string()),
        namespace: m.namespace.clone(),
        name: m.name.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        field_path: None,
    }
}

/// Events queued for the background task beyond which new ones are dropped.
const QUEUE_CAPACITY: usize = 1000;
/// Event writes in flight at once.
const MAX_IN_FLIGHT: usize = 64;
/// Attempts per write before the event is given up.
const MAX_TRIES: u32 = 4;
/// The pause before the first retry (doubling after).
const FIRST_RETRY: Duration = Duration::from_millis(500);
/// Similar events (differing only in message) before the rest are aggregated.
const AGGREGATE_AFTER: usize = 10;
/// How long similar events count together.
const AGGREGATE_WINDOW: Duration = Duration::from_secs(600);
/// The spam filter's bucket: burst, and the time one token takes to come back.
const SPAM_BURST: f64 = 25.0;
const SPAM_REFILL: Duration = Duration::from_secs(300);
/// Entries each of the correlator's caches keeps (oldest forgotten first).
const CACHE_ENTRIES: usize = 4096;

/// One recorded event, before correlation.
#[derive(Debug)]
struct Recorded {
    object: ObjectReference,
    event_type: EventType,
    reason: String,
    message: String,
}

/// Records events for one component. Cheap to clone; clones share the background task,
/// which ends when the last clone is dropped (after the events it holds are written).
#[derive(Clone)]
pub struct EventRecorder {
    tx: mpsc::Sender<Recorded>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder").finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder writing through `client` as `component` (e.g. `default-scheduler`,
    /// `kubelet`) on `host` (the node, for a kubelet): the events' `source` and
    /// `reportingComponent`/`reportingInstance`.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the background task is spawned here).
    pub fn new(
        client: Client,
        component: impl Into<String>,
        host: Option<String>,
    ) -> EventRecorder {
        Self::with_clock(client, component, host, RealClock::shared())
    }

    /// [`EventRecorder::new`] with the clock the correlator's windows and buckets run on.
    pub fn with_clock(
        client: Client,
        component: impl Into<String>,
        host: Option<String>,
        clock: SharedClock,
    ) -> EventRecorder {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let writer = Writer {
            client,
            source: Source {
                component: component.into(),
                host,
            },
        };
        tokio::spawn(run(rx, writer, clock));
        EventRecorder { tx }
    }

    /// Records that `reason` happened to `object`, with a human-readable `message`. Returns
    /// at once; the event is written in the background (or dropped, see the module docs).
    pub fn event(
        &self,
        object: &ObjectReference,
        event_type: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let recorded = Recorded {
            object: object.clone(),
            event_type,
            reason: reason.to_string(),
            message: message.into(),
        };
        if self.tx.try_send(recorded).is_err() {
            tracing::debug!(reason, "event dropped: the recorder's queue is full");
        }
    }
}

/// Who reports the events.
#[derive(Debug, Clone)]
struct Source {
    component: String,
    host: Option<String>,
}

/// A small map that forgets its oldest entries beyond [`CACHE_ENTRIES`].
struct Bounded<V> {
    map: HashMap<String, V>,
    order: VecDeque<String>,
}

impl<V> Bounded<V> {
    fn new() -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    fn get_or_insert_with(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        if !self.map.contains_key(key) {
            while self.map.len() >= CACHE_ENTRIES {
                match self.order.pop_front() {
                    Some(old) => {
                        self.map.remove(&old);
                    }
                    None => break,
                }
            }
            self.order.push_back(key.to_string());
        }
        self.map.entry(key.to_string()).or_insert_with(make)
    }
}

/// A spam-filter bucket.
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Similar events seen for one aggregation key.
struct Similar {
    messages: std::collections::HashSet<String>,
    since: Instant,
}

/// What deduplication knows of an event already written (or being written).
#[derive(Debug, Clone)]
struct Written {
    name: String,
    namespace: String,
    count: i32,
    first: String,
    last: String,
    message: String,
    /// A write for it is in flight.
    busy: bool,
    /// Changed since the write in flight was sent.
    dirty: bool,
    /// The event exists on the server (its create returned).
    created: bool,
    /// The full event, to create it (again).
    event: Box<Event>,
}

/// The correlator's decision for one event.
#[derive(Debug, PartialEq)]
enum Action {
    /// Nothing to write (dropped, or coalesced into a write in flight).
    Nothing,
    /// Write the event with this dedup key (create or patch, per its state).
    Write(String),
}

/// Spam filter, aggregation and deduplication state.
struct Correlator {
    source: Source,
    clock: SharedClock,
    buckets: Bounded<Bucket>,
    similar: Bounded<Similar>,
    written: Bounded<Written>,
}

fn object_key(o: &ObjectReference) -> String {
    format!(
        "{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}",
        o.api_version.as_deref().unwrap_or(""),
        o.kind.as_deref().unwrap_or(""),
        o.namespace.as_deref().unwrap_or(""),
        o.name.as_deref().unwrap_or(""),
        o.uid.as_deref().unwrap_or("")
    )
}

impl Correlator {
    fn new(source: Source, clock: SharedClock) -> Self {
        Correlator {
            source,
            clock,
            buckets: Bounded::new(),
            similar: Bounded::new(),
            written: Bounded::new(),
        }
    }

    /// Takes a token from the bucket of the event's source and object; false if empty.
    fn allow(&mut self, object: &str) -> bool {
        let now = self.clock.now();
        let b = self.buckets.get_or_insert_with(object, || Bucket {
            tokens: SPAM_BURST,
            at: now,
        });
        let refilled =
            now.saturating_duration_since(b.at).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        b.tokens = (b.tokens + refilled).min(SPAM_BURST);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The message to record: the event's own, or the aggregated one once too many similar
    /// events came (and with it the key under which duplicates collapse).
    fn aggregate(&mut self, r: &Recorded, object: &str) -> (String, String) {
        let now = self.clock.now();
        let key = format!(
            "{object}\u{0}{}\u{0}{}\u{0}{}",
            r.event_type.as_str(),
            r.reason,
            self.source.component
        );
        let s = self.similar.get_or_insert_with(&key, || Similar {
            messages: Default::default(),
            since: now,
        });
        if now.saturating_duration_since(s.since) > AGGREGATE_WINDOW {
            s.messages.clear();
            s.since = now;
        }
        if s.messages.contains(&r.message) || s.messages.len() < AGGREGATE_AFTER {
            s.messages.insert(r.message.clone());
            let dedup = format!("{key}\u{0}{}", r.message);
            return (r.message.clone(), dedup);
        }
        (
            format!("(combined from similar events): {}", r.message),
            format!("{key}\u{0}(combined)"),
        )
    }

    /// Decides what to write for `r`.
    fn observe(&mut self, r: Recorded) -> Action {
        let object = object_key(&r.object);
        if !self.allow(&object) {
            tracing::debug!(reason = r.reason, "event dropped by the spam filter");
            return Action::Nothing;
        }
        let (message, dedup) = self.aggregate(&r, &object);
        let now = api::time::now_rfc3339();
        if let Some(w) = self.written.get_mut(&dedup) {
            w.count += 1;
            w.last = now;
            w.message = message;
            if w.busy {
                w.dirty = true;
                return Action::Nothing;
            }
            return Action::Write(dedup);
        }
        let namespace = r
            .object
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        let name = format!(
            "{}.{:x}",
            r.object.name.as_deref().unwrap_or("unknown"),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        let event = self.build(&r, &namespace, &name, &message, &now);
        self.written.get_or_insert_with(&dedup, || Written {
            name,
            namespace,
            count: 1,
            first: now.clone(),
            last: now,
            message,
            busy: false,
            dirty: false,
            created: false,
            event: Box::new(event),
        });
        Action::Write(dedup)
    }

    fn build(&self, r: &Recorded, namespace: &str, name: &str, message: &str, now: &str) -> Event {
        let value = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": r.object,
            "reason": r.reason,
            "message": message,
            "source": {"component": self.source.component, "host": self.source.host},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": r.event_type.as_str(),
            "reportingComponent": self.source.component,
            "reportingInstance": self.source.host.clone().unwrap_or_default(),
        });
        serde_json::from_value(value).unwrap_or_default()
    }
}

/// Writes events through the API.
#[derive(Clone)]
struct Writer {
    client: Client,
    source: Source,
}

/// A write to perform: the event as it should end up.
#[derive(Debug, Clone)]
struct Job {
    dedup: String,
    create: bool,
    written: Written,
}

impl Writer {
    /// Creates or patches, retrying; returns whether the event now exists.
    async fn write(&self, job: &Job) -> bool {
        let w = &job.written;
        let events = ApiResource::of::<Event>();
        let ns = Some(w.namespace.as_str());
        let mut pause = FIRST_RETRY;
        let mut create = job.create;
        for attempt in 1..=MAX_TRIES {
            let result = if create {
                let mut e = (*w.event).clone();
                e.count = Some(w.count);
                e.message = Some(w.message.clone());
                e.first_timestamp = serde_json::from_value(serde_json::json!(w.first)).ok();
                e.last_timestamp = serde_json::from_value(serde_json::json!(w.last)).ok();
                // The answer is not read: nothing here needs the stored event back.
                self.client
                    .create_unread(&events, ns, &PostParams::default(), &e)
                    .await
            } else {
                let patch = serde_json::json!({
                    "count": w.count, "lastTimestamp": w.last, "message": w.message
                });
                match self
                    .client
                    .patch::<serde::de::IgnoredAny, _>(
                        &events,
                        ns,
                        &w.name,
                        &PatchParams::default(),
                        PatchType::Merge,
                        &patch,
                    )
                    .await
                {
                    Err(e) if e.is_not_found() => {
                        // Expired meanwhile: write it anew.
                        create = true;
                        continue;
                    }
                    other => other.map(|_| ()),
                }
            };
            match result {
                Ok(()) => return true,
                Err(e) if create && e.is_already_exists() => return true,
                Err(e) if attempt == MAX_TRIES => {
                    tracing::warn!(
                        component = self.source.component,
                        event = w.name,
                        "giving up writing an event: {e}"
                    );
                }
                Err(e) => {
                    tracing::debug!(event = w.name, "event write failed, retrying: {e}");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
        false
    }
}

async fn run(mut rx: mpsc::Receiver<Recorded>, writer: Writer, clock: SharedClock) {
    let mut correlator = Correlator::new(writer.source.clone(), clock);
    let writer = Arc::new(writer);
    let mut in_flight: JoinSet<(String, bool)> = JoinSet::new();
    let mut waiting: VecDeque<String> = VecDeque::new();
    let mut open = true;
    loop {
        // Start what may start.
        while in_flight.len() < MAX_IN_FLIGHT {
            let Some(dedup) = waiting.pop_front() else {
                break;
            };
            let Some(w) = correlator.written.get_mut(&dedup) else {
                continue;
            };
            if w.busy {
                w.dirty = true;
                continue;
            }
            w.busy = true;
            w.dirty = false;
            let job = Job {
                create: !w.created,
                dedup,
                written: w.clone(),
            };
            let writer = writer.clone();
            in_flight.spawn(async move {
                let ok = writer.write(&job).await;
                (job.dedup, ok)
            });
        }
        if !open && in_flight.is_empty() && waiting.is_empty() {
            return;
        }
        tokio::select! {
            r = rx.recv(), if open => match r {
                Some(r) => {
                    if let Action::Write(dedup) = correlator.observe(r) {
                        waiting.push_back(dedup);
                    }
                }
                None => open = false,
            },
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                let Ok((dedup, ok)) = done else { continue };
                if let Some(w) = correlator.written.get_mut(&dedup) {
                    w.busy = false;
                    w.created |= ok;
                    if w.dirty {
                        waiting.push_back(dedup);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::clock::FakeClock;

    fn pod_ref(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        }
    }

    fn recorded(name: &str, reason: &str, message: &str) -> Recorded {
        Recorded {
            object: pod_ref(name),
            event_type: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn correlator(clock: &FakeClock) -> Correlator {
        Correlator::new(
            Source {
                component: "kubelet".into(),
                host: Some("node-1".into()),
            },
            clock.shared(),
        )
    }

    #[test]
    fn the_same_event_again_raises_the_count_of_the_first() {
        let clock = FakeClock::new();
        let mut c = correlator(&clock);
        let first = c.observe(recorded("p", "Pulled", "image pulled"));
        let Action::Write(key) = first else {
            panic!("the first event is written")
        };
        assert!(!c.written.get_mut(&key).unwrap().created);
        // Written meanwhile; the same event again is the same dedup key, count 2.
        c.written.get_mut(&key).unwrap().created = true;
        assert_eq!(
            c.observe(recorded("p", "Pulled", "image pulled")),
            Action::Write(key.clone())
        );
        let w = c.written.get_mut(&key).unwrap();
        assert_eq!(w.count, 2);
        assert_eq!(w.event.metadata.namespace.as_deref(), Some("ns"));
        assert!(w.name.starts_with("p."));
        // While a write is in flight, more of it only mark it dirty.
        w.busy = true;
        assert_eq!(
            c.observe(recorded("p", "Pulled", "image pulled")),
            Action::Nothing
        );
        let w = c.written.get_mut(&key).unwrap();
        assert!(w.dirty);
        assert_eq!(w.count, 3);
    }

    #[test]
    fn many_similar_events_are_combined() {
        let clock = FakeClock::new();
        let mut c = correlator(&clock);
        let mut keys = std::collections::HashSet::new();
        for i in 0..AGGREGATE_AFTER {
            if let Action::Write(k) = c.observe(recorded("p", "Failed", &format!("error {i}"))) {
                keys.insert(k);
            }
        }
        assert_eq!(
            keys.len(),
            AGGREGATE_AFTER,
            "each distinct message is its own event"
        );
        let Action::Write(k) = c.observe(recorded("p", "Failed", "error 99")) else {
            panic!("written")
        };
        let w = c.written.get_mut(&k).unwrap();
        assert_eq!(w.message, "(combined from similar events): error 99");
        w.busy = true;
        c.observe(recorded("p", "Failed", "error 100"));
        let w = c.written.get_mut(&k).unwrap();
        assert_eq!(
            w.count, 2,
            "later similar events fold into the combined one"
        );
        assert_eq!(w.message, "(combined from similar events): error 100");
        // After the window, messages count anew.
        clock.step(AGGREGATE_WINDOW + Duration::from_secs(1));
        let Action::Write(k) = c.observe(recorded("p", "Failed", "error 101")) else {
            panic!("written")
        };
        assert_eq!(c.written.get_mut(&k).unwrap().message, "error 101");
    }

    #[test]
    fn the_spam_filter_allows_a_burst_per_object_then_one_per_five_minutes() {
        let clock = FakeClock::new();
        let mut c = correlator(&clock);
        // Repeats of an event not being written are writes (count updates) too: each one
        // takes a token, so exactly the burst passes.
        let allowed = (0..40)
            .filter(|i| c.observe(recorded("p", "R", &format!("m{}", i % 3))) != Action::Nothing)
            .count();
        assert_eq!(allowed, SPAM_BURST as usize);
        assert_eq!(c.observe(recorded("p", "R", "m0")), Action::Nothing);
        // Another object has its own bucket.
        assert_ne!(c.observe(recorded("q", "R", "m0")), Action::Nothing);
        // Five minutes bring one token back.
        clock.step(SPAM_REFILL);
        assert_ne!(c.observe(recorded("p", "R", "m0")), Action::Nothing);
        assert_eq!(c.observe(recorded("p", "R", "m0")), Action::Nothing);
    }

    #[test]
    fn object_references_carry_kind_and_identity() {
        let pod = k8s_openapi::api::core::v1::Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let r = object_reference(&pod);
        assert_eq!(r.kind.as_deref(), Some("Pod"));
        assert_eq!(r.api_version.as_deref(), Some("v1"));
        assert_eq!(r.name.as_deref(), Some("web"));
        assert_eq!(r.uid.as_deref(), Some("u1"));
    }
}
