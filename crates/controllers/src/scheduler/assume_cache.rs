//! The scheduler's cache of nodes and the pods counted on them, with **assumed** pods: a
//! pod counts on its node from the moment the scheduler decides (before its binding is even
//! sent), so that the next decisions see the node as it will be, and two decisions never
//! book the same room before the watch confirms either (kube-scheduler's
//! `internal/cache`).
//!
//! A pod's life here:
//! - [`SchedulerCache::assume_pod`]: the scheduler chose a node; the pod counts there.
//! - [`SchedulerCache::finish_binding`]: the binding was accepted; from now on the
//!   assumption expires after the TTL if the watch never confirms it (a pod bound and then
//!   deleted while our watch was away would otherwise hold its room forever).
//! - [`SchedulerCache::forget_pod`]: the binding failed; the room is given back.
//! - [`SchedulerCache::add_pod`] from the assigned-pods informer: the watch confirms the
//!   pod (on the node the server has, which replaces the assumed one) and it stops being
//!   assumed; [`SchedulerCache::update_pod`] and [`SchedulerCache::remove_pod`] follow it
//!   until it leaves.
//!
//! Per node, the totals of [`NodeInfo`] are kept as pods come and go; per controlling owner,
//! the number of its pods on each node, for the spreading score. Nodes live in slots that
//! are reused once both the node and its pods are gone, so that a decision can walk them
//! as a plain vector.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;

use super::filters::{Plugin, PluginSet};
use super::node_info::{NodeData, NodeInfo};
use super::pod_info::PodInfo;

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Where a pod is counted and whether the watch has confirmed it.
#[derive(Debug)]
struct PodState {
    info: Arc<PodInfo>,
    slot: u32,
    assumed: bool,
    /// Set by `finish_binding`: when an unconfirmed assumption is dropped.
    deadline: Option<Instant>,
}

/// Why the cache refused an operation (each is a bug in the caller or a race it must
/// handle, never a state the cache gets into by itself).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// The pod is already counted (assumed or confirmed).
    #[error("pod {0} is already in the scheduler cache")]
    AlreadyCounted(String),
}

/// The nodes and the pods counted on them. Not synchronised: the scheduler wraps it in a
/// mutex.
#[derive(Debug)]
pub struct SchedulerCache {
    slots: Vec<NodeInfo>,
    free_slots: Vec<u32>,
    by_name: FastMap<Arc<str>, u32>,
    /// Pods by UID.
    pods: FastMap<Arc<str>, PodState>,
    /// Per controlling owner UID: node slot → number of the owner's pods there.
    owners: FastMap<Arc<str>, FastMap<u32, u32>>,
    /// Slots holding a `Node` object.
    node_count: usize,
    /// Pods assumed and not yet confirmed.
    assumed: usize,
    assumed_ttl: Option<Duration>,
}

impl SchedulerCache {
    /// An empty cache. Assumed pods whose binding finished are dropped after `assumed_ttl`
    /// unless the watch confirms them first; `None` keeps them until confirmed or
    /// forgotten.
    pub fn new(assumed_ttl: Option<Duration>) -> SchedulerCache {
        SchedulerCache {
            slots: Vec::new(),
            free_slots: Vec::new(),
            by_name: FastMap::default(),
            pods: FastMap::default(),
            owners: FastMap::default(),
            node_count: 0,
            assumed: 0,
            assumed_ttl,
        }
    }

    /// Every slot, including empty ones (check [`NodeInfo::data`]); slot `i` is
    /// `slots()[i]`.
    pub fn slots(&self) -> &[NodeInfo] {
        &self.slots
    }

    /// The number of nodes (slots with a `Node` object).
    pub fn node_count(&self) -> usize {
        self.node_count
    }

    /// The slot of node `name`, if known (with or without its `Node` object).
    pub fn slot_of(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// The node `name`, if known.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.slot_of(name).map(|s| &self.slots[s as usize])
    }

    /// The owner's pod counts per slot, if it has pods anywhere.
    pub fn owner_counts(&self, owner: &str) -> Option<&FastMap<u32, u32>> {
        self.owners.get(owner)
    }

    /// Whether the pod with this UID is counted and not yet confirmed by the watch.
    pub fn is_assumed(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|p| p.assumed)
    }

    /// Whether the pod with this UID is counted (assumed or confirmed).
    pub fn contains_pod(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    /// The node the pod with this UID is counted on.
    pub fn node_of_pod(&self, uid: &str) -> Option<&str> {
        self.pods
            .get(uid)
            .map(|p| &*self.slots[p.slot as usize].name)
    }

    /// The number of pods counted (assumed included).
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// The number of pods assumed and not yet confirmed by the watch.
    pub fn assumed_count(&self) -> usize {
        self.assumed
    }

    /// Removes the pod `uid` from the map and from its node.
    fn take(&mut self, uid: &str) -> Option<PodState> {
        let p = self.pods.remove(uid)?;
        if p.assumed {
            self.assumed -= 1;
        }
        self.uncount(&p.info, p.slot);
        Some(p)
    }

    fn slot_for(&mut self, name: &str) -> u32 {
        if let Some(s) = self.by_name.get(name) {
            return *s;
        }
        let name: Arc<str> = Arc::from(name);
        let info = NodeInfo::new(Arc::clone(&name));
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.slots[s as usize] = info;
                s
            }
            None => {
                self.slots.push(info);
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        self.by_name.insert(name, slot);
        slot
    }

    fn release_if_empty(&mut self, slot: u32) {
        let info = &self.slots[slot as usize];
        if info.is_empty() {
            let name = Arc::clone(&info.name);
            self.by_name.remove(&name);
            self.free_slots.push(slot);
        }
    }

    fn count(&mut self, info: &Arc<PodInfo>, slot: u32) {
        self.slots[slot as usize].add_pod(info);
        if let Some(owner) = &info.owner {
            *self
                .owners
                .entry(Arc::clone(owner))
                .or_default()
                .entry(slot)
                .or_insert(0) += 1;
        }
    }

    fn uncount(&mut self, info: &PodInfo, slot: u32) {
        self.slots[slot as usize].remove_pod(info);
        if let Some(owner) = &info.owner {
            if let Some(per_slot) = self.owners.get_mut(owner) {
                if let Some(n) = per_slot.get_mut(&slot) {
                    *n -= 1;
                    if *n == 0 {
                        per_slot.remove(&slot);
                    }
                }
                if per_slot.is_empty() {
                    self.owners.remove(owner);
                }
            }
        }
        self.release_if_empty(slot);
    }

    /// Adds or replaces node `node`. Returns the plugins whose verdict the change may turn
    /// (everything for a new node; for an update, what changed: see
    /// [`node_change_plugins`]).
    pub fn add_or_update_node(&mut self, node: Arc<Node>) -> PluginSet {
        let data = NodeData::new(node);
        let slot = self.slot_for(data.name());
        let info = &mut self.slots[slot as usize];
        let changed = match &info.data {
            None => PluginSet::ALL,
            Some(old) => node_change_plugins(old, &data),
        };
        if info.data.replace(data).is_none() {
            self.node_count += 1;
        }
        changed
    }

    /// Removes node `name`; pods still counted on it keep its slot (without node data, so
    /// no decision picks it) until they go.
    pub fn remove_node(&mut self, name: &str) {
        let Some(slot) = self.slot_of(name) else {
            return;
        };
        if self.slots[slot as usize].data.take().is_some() {
            self.node_count -= 1;
        }
        self.release_if_empty(slot);
    }

    /// Counts `pod` on `node` before the binding is confirmed.
    ///
    /// # Errors
    /// [`CacheError::AlreadyCounted`] if a pod with its UID is counted already.
    pub fn assume_pod(&mut self, pod: Arc<PodInfo>, node: &str) -> Result<(), CacheError> {
        if self.pods.contains_key(&pod.uid) {
            return Err(CacheError::AlreadyCounted(pod.key.to_string()));
        }
        let slot = self.slot_for(node);
        self.count(&pod, slot);
        self.assumed += 1;
        self.pods.insert(
            Arc::clone(&pod.uid),
            PodState {
                info: pod,
                slot,
                assumed: true,
                deadline: None,
            },
        );
        Ok(())
    }

    /// The binding of the assumed pod `uid` was accepted at `now`: its assumption now
    /// expires after the TTL unless confirmed. Does nothing for a pod not assumed.
    pub fn finish_binding(&mut self, uid: &str, now: Instant) {
        let ttl = self.assumed_ttl;
        if let Some(p) = self.pods.get_mut(uid) {
            if p.assumed {
                p.deadline = ttl.and_then(|ttl| now.checked_add(ttl));
            }
        }
    }

    /// Gives back the room of the assumed pod `uid` (its binding failed). Returns whether
    /// an assumption was dropped; a pod the watch confirmed meanwhile stays counted.
    pub fn forget_pod(&mut self, uid: &str) -> bool {
        match self.pods.get(uid) {
            Some(p) if p.assumed => {
                self.take(uid);
                true
            }
            _ => false,
        }
    }

    /// The watch reports `pod` bound to `node`: an assumption of it is confirmed (and moved,
    /// should the server have it elsewhere); an unknown pod is counted; a known one is
    /// updated.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.take(&pod.uid);
        let slot = self.slot_for(node);
        self.count(&pod, slot);
        self.pods.insert(
            Arc::clone(&pod.uid),
            PodState {
                info: pod,
                slot,
                assumed: false,
                deadline: None,
            },
        );
    }

    /// The watch reports a change of a bound pod: counted with its new requests, ports and
    /// owner.
    pub fn update_pod(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.add_pod(pod, node);
    }

    /// The watch reports that the pod with this UID is gone (deleted, or finished): its room
    /// is given back, assumed or not.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        self.take(uid).is_some()
    }

    /// Drops the assumptions whose binding finished more than the TTL before `now` without
    /// the watch confirming them; returns their keys.
    pub fn cleanup_expired(&mut self, now: Instant) -> Vec<Arc<str>> {
        let expired: Vec<Arc<str>> = self
            .pods
            .iter()
            .filter(|(_, p)| p.assumed && p.deadline.is_some_and(|d| d <= now))
            .map(|(uid, _)| Arc::clone(uid))
            .collect();
        let mut keys = Vec::with_capacity(expired.len());
        for uid in expired {
            if let Some(p) = self.take(&uid) {
                keys.push(Arc::clone(&p.info.key));
            }
        }
        keys
    }
}

/// The plugins whose verdict a node update may turn: labels (affinity), taints or
/// readiness (taint toleration), `spec.unschedulable`, allocatable resources (fit). Other
/// changes (heartbeats, addresses, images) wake no pod.
pub fn node_change_plugins(old: &NodeData, new: &NodeData) -> PluginSet {
    let mut set = PluginSet::EMPTY;
    if old.node.metadata.labels != new.node.metadata.labels {
        set.insert(Plugin::NodeAffinity);
    }
    if old.taints != new.taints {
        set.insert(Plugin::TaintToleration);
    }
    if old.unschedulable != new.unschedulable {
        set.insert(Plugin::NodeUnschedulable);
    }
    if old.allocatable != new.allocatable || old.allowed_pods != new.allowed_pods {
        set.insert(Plugin::NodeResourcesFit);
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::filters::test_support::*;
    use serde_json::json;

    fn owned(name: &str, cpu: &str, owner: &str) -> Arc<PodInfo> {
        pod_info(
            name,
            cpu,
            "0",
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1",
                "kind": "ReplicaSet", "name": owner, "uid": owner, "controller": true}]}}),
        )
    }

    #[test]
    fn an_assumed_pod_counts_until_forgotten() {
        let mut c = SchedulerCache::new(None);
        c.add_or_update_node(node("n1", json!({})));
        let p = owned("p", "1", "rs");
        c.assume_pod(Arc::clone(&p), "n1").unwrap();
        assert!(c.is_assumed("uid-p"));
        assert_eq!(c.assumed_count(), 1);
        assert_eq!(c.node("n1").unwrap().requested.milli_cpu, 1000);
        assert_eq!(c.owner_counts("rs").unwrap().get(&0), Some(&1));
        assert_eq!(
            c.assume_pod(Arc::clone(&p), "n1"),
            Err(CacheError::AlreadyCounted("ns/p".into()))
        );
        assert!(c.forget_pod("uid-p"));
        assert_eq!(c.assumed_count(), 0);
        assert!(!c.contains_pod("uid-p"));
        assert_eq!(c.node("n1").unwrap().requested.milli_cpu, 0);
        assert_eq!(c.node("n1").unwrap().pod_count, 0);
        assert!(c.owner_counts("rs").is_none());
        assert!(!c.forget_pod("uid-p"));
    }

    #[test]
    fn the_watch_confirms_and_replaces_an_assumption() {
        let mut c = SchedulerCache::new(Some(Duration::from_secs(30)));
        c.add_or_update_node(node("n1", json!({})));
        c.add_or_update_node(node("n2", json!({})));
        let p = owned("p", "1", "rs");
        c.assume_pod(Arc::clone(&p), "n1").unwrap();
        let t0 = Instant::now();
        c.finish_binding("uid-p", t0);
        // The server has it on n2 (say another scheduler won): the watch's word replaces ours.
        let confirmed = owned("p", "2", "rs");
        c.add_pod(confirmed, "n2");
        assert!(!c.is_assumed("uid-p"));
        assert_eq!(c.assumed_count(), 0);
        assert_eq!(c.node_of_pod("uid-p"), Some("n2"));
        assert_eq!(c.node("n1").unwrap().requested.milli_cpu, 0);
        assert_eq!(c.node("n2").unwrap().requested.milli_cpu, 2000);
        assert_eq!(c.owner_counts("rs").unwrap().len(), 1);
        // Confirmed pods neither expire nor are forgotten by a late binding failure.
        assert!(c.cleanup_expired(t0 + Duration::from_secs(3600)).is_empty());
        assert!(!c.forget_pod("uid-p"));
        assert!(c.remove_pod("uid-p"));
        assert_eq!(c.node("n2").unwrap().pod_count, 0);
    }

    #[test]
    fn assumptions_expire_only_after_their_binding_finished() {
        let mut c = SchedulerCache::new(Some(Duration::from_secs(30)));
        c.add_or_update_node(node("n1", json!({})));
        c.assume_pod(owned("a", "1", "rs"), "n1").unwrap();
        c.assume_pod(owned("b", "1", "rs"), "n1").unwrap();
        let t0 = Instant::now();
        c.finish_binding("uid-a", t0);
        assert!(c.cleanup_expired(t0 + Duration::from_secs(29)).is_empty());
        let gone = c.cleanup_expired(t0 + Duration::from_secs(30));
        assert_eq!(gone, vec![Arc::<str>::from("ns/a")]);
        assert_eq!(c.assumed_count(), 1);
        // b's binding is still in flight: it never expires meanwhile.
        assert!(c
            .cleanup_expired(t0 + Duration::from_secs(10_000))
            .is_empty());
        assert!(c.is_assumed("uid-b"));
        assert_eq!(c.node("n1").unwrap().requested.milli_cpu, 1000);
        // Without a TTL nothing expires.
        let mut forever = SchedulerCache::new(None);
        forever.assume_pod(owned("c", "1", "rs"), "n1").unwrap();
        forever.finish_binding("uid-c", t0);
        assert!(forever
            .cleanup_expired(t0 + Duration::from_secs(1 << 30))
            .is_empty());
    }

    #[test]
    fn pods_before_their_node_and_after_it() {
        let mut c = SchedulerCache::new(None);
        // The pod watch is ahead of the node watch: the slot exists without node data.
        c.add_pod(owned("p", "1", "rs"), "late");
        assert_eq!(c.node_count(), 0);
        assert!(c.node("late").unwrap().data.is_none());
        assert_eq!(
            c.add_or_update_node(node("late", json!({}))),
            PluginSet::ALL
        );
        assert_eq!(c.node_count(), 1);
        assert_eq!(c.node("late").unwrap().requested.milli_cpu, 1000);
        // Node deleted while the pod remains: the slot stays (no data) until the pod goes.
        c.remove_node("late");
        assert_eq!(c.node_count(), 0);
        assert!(c.slot_of("late").is_some());
        c.remove_pod("uid-p");
        assert!(c.slot_of("late").is_none());
        // The freed slot is reused.
        c.add_or_update_node(node("next", json!({})));
        assert_eq!(c.slot_of("next"), Some(0));
        assert_eq!(c.slots().len(), 1);
    }

    #[test]
    fn node_updates_report_what_changed() {
        let mut c = SchedulerCache::new(None);
        c.add_or_update_node(node("n", json!({})));
        let same = c.add_or_update_node(node(
            "n",
            json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "lastHeartbeatTime": "2024-01-01T00:00:00Z"}]}}),
        ));
        assert!(same.is_empty(), "a heartbeat wakes nobody");
        let labels = c.add_or_update_node(node("n", json!({"metadata": {"labels": {"a": "b"}}})));
        assert_eq!(labels, PluginSet::EMPTY.with(Plugin::NodeAffinity));
        let not_ready = c.add_or_update_node(node(
            "n",
            json!({"metadata": {"labels": {"a": "b"}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        ));
        assert_eq!(not_ready, PluginSet::EMPTY.with(Plugin::TaintToleration));
        let resized = c.add_or_update_node(node(
            "n",
            json!({"metadata": {"labels": {"a": "b"}},
            "spec": {"unschedulable": true},
            "status": {"allocatable": {"cpu": "8"},
                "conditions": [{"type": "Ready", "status": "False"}]}}),
        ));
        assert_eq!(
            resized,
            PluginSet::EMPTY
                .with(Plugin::NodeUnschedulable)
                .with(Plugin::NodeResourcesFit)
        );
        assert_eq!(c.node_count(), 1);
    }
}
