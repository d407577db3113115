//! The listwatch control plane: the components of the seeds' pod-creation flow (article 003,
//! figure 7-1), each talking to the API server only through the client library.
//!
//! Data flow: every component builds shared informers from one `SharedInformerFactory`
//! (list, then watch, through the API server's watch cache), registers handlers that turn
//! changes into keys in a rate-limited work queue, and runs workers that read the current
//! state from `Lister`s and write back through the API:
//! - the **scheduler** ([`scheduler`]) watches the pods that have no node
//!   (`spec.nodeName=""`) and the nodes, picks a node for each pod and posts a `Binding`;
//! - each **node agent** ([`node_agent`]), a simulated kubelet, registers its `Node`, renews
//!   its `Lease`, watches only its own pods (`spec.nodeName=NODE`) and runs them: status
//!   Pending → Running (or Succeeded/Failed), and deletes them when they are terminating;
//! - the **ReplicaSet controller** ([`replicaset`]) keeps each ReplicaSet's pods at its
//!   replicas (a create whose answer was lost is retried under the same pod name,
//!   [`uncertain_creates`], so that it never makes a second pod), and the **Deployment
//!   controller** ([`deployment`]) rolls Deployments over
//!   from one ReplicaSet to the next within maxSurge and maxUnavailable;
//! - the **node lifecycle controller** ([`node_lifecycle`]) marks nodes whose lease went
//!   stale unreachable and evicts their pods;
//! - the **Endpoints controller** ([`endpoints`]) lists, for each Service with a selector,
//!   the addresses and ports of the pods it selects, and the **EndpointSlice controller**
//!   ([`endpointslice`]) the same as `discovery.k8s.io/v1` EndpointSlices;
//! - the **DaemonSet controller** ([`daemonset`]) keeps one pod of every DaemonSet on each
//!   node that should run it, rolling updates through ControllerRevisions
//!   ([`controller_history`]);
//! - the **StatefulSet controller** ([`statefulset`]) keeps each StatefulSet's pods
//!   `<set>-<ordinal>` with their claims, created, deleted and updated in ordinal order;
//! - the **garbage collector** ([`garbage_collector`]) deletes objects whose owners are
//!   gone and finishes foreground and orphaning deletions;
//! - the **Job controller** ([`job`]) runs each Job's pods until enough succeeded or the
//!   Job fails, and the **CronJob controller** ([`cronjob`]) creates a Job at each time a
//!   CronJob's schedule names;
//! - the **ServiceAccounts controller** ([`serviceaccounts`]) gives every active namespace
//!   its `default` ServiceAccount;
//! - the **namespace controller** ([`namespace`]) deletes the content of deleted
//!   namespaces, then releases them to the server;
//! - the **ResourceQuota controller** ([`resource_quota`]) keeps each ResourceQuota's
//!   status (its limits and what its namespace uses of them) up to date;
//! - [`leader_election`] lets several replicas of a component run with one acting,
//!   [`event_recorder`] reports what happened as Kubernetes `Event`s, and
//!   [`client_builder`] gives each controller a client of its own ServiceAccount, so that
//!   it can do only what its role allows.
//!
//! Nothing here depends on the server's crates: the components run unchanged against a real
//! kube-apiserver.
#![warn(missing_docs)]

pub mod client_builder;
pub mod controller_history;
pub mod controller_ref_manager;
pub mod controller_utils;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod discovery;
pub mod endpoints;
pub mod endpointslice;
pub mod event_recorder;
pub mod expectations;
pub mod garbage_collector;
pub mod job;
pub mod leader_election;
pub mod namespace;
pub mod node_agent;
pub mod node_lifecycle;
pub mod pod_control;
pub mod replicaset;
pub mod resource_quota;
pub mod scheduler;
pub mod semantic;
pub mod serviceaccounts;
pub mod statefulset;
pub mod uncertain_creates;
