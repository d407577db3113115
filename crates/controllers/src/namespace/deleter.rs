//! The namespaced-resources deleter: one pass over a Terminating namespace, as
//! kube-controller-manager's namespace controller makes it.
//!
//! A pass reads the namespace afresh (nothing to do if it is gone, not being deleted, or
//! already finalized), makes sure its phase says Terminating, then for every deletable
//! namespaced resource ([`super::discovery`]): estimates how long its objects may take to
//! go (pods: the longest `terminationGracePeriodSeconds` of those not finished, counted from
//! the namespace's `deletionTimestamp`), deletes them (`deletecollection` where served,
//! else a list and a delete per object; always with `propagationPolicy: Background`, so no
//! orphan finalizer is added), and lists what remains. Remaining objects held by finalizers
//! are expected (an estimate of 15 s is given for them); remaining objects without a
//! finalizer and without an estimate are an error. The pass reports all this in the
//! namespace's conditions ([`super::conditions`]), and, when nothing remains, removes its
//! finalizer token from `spec.finalizers` through the `finalize` subresource — which lets
//! the server remove the namespace.

use super::conditions::{ConditionUpdater, ContentTotals};
use super::discovery::{self, Deletable};
use crate::controller_utils::error_message;
use crate::controller_utils::WallClock;
use client::clock::RealClock;
use client::rest::Client;
use http::Method;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The estimate given to objects held by finalizers, in seconds: time for the garbage
/// collector (or whoever owns the finalizer) to finish.
pub const FINALIZER_ESTIMATE_SECONDS: u64 = 15;

/// Why a pass did not finish the namespace.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    /// Content remains that should go by itself within about `estimate` seconds (pods in
    /// their grace period, objects held by finalizers).
    #[error(
        "some content remains in the namespace, estimate {estimate} seconds before it is removed"
    )]
    ContentRemaining {
        /// Seconds.
        estimate: u64,
    },
    /// A request failed.
    #[error(transparent)]
    Api(#[from] client::rest::Error),
    /// Discovering or deleting some of the content failed (each message, as reported in the
    /// `NamespaceDeletionContentFailure` and discovery conditions).
    #[error("{}", .0.join(", "))]
    Content(Vec<String>),
}

/// What one resource's deletion left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceOutcome {
    /// Seconds the remaining objects may still take (0: they should be gone).
    pub estimate: u64,
    /// Objects left.
    pub remaining: usize,
    /// Objects left per finalizer.
    pub finalizers: BTreeMap<String, usize>,
}

/// The estimate for pods, given `(phase, terminationGracePeriodSeconds)` of each pod in the
/// namespace, `elapsed` seconds after the namespace's deletion: the longest grace period of
/// the pods not finished, or 0 once that much time has passed.
pub fn pod_estimate<'a>(
    pods: impl IntoIterator<Item = (&'a str, Option<i64>)>,
    elapsed: i64,
) -> u64 {
    let longest = pods
        .into_iter()
        .filter(|(phase, _)| !matches!(*phase, "Succeeded" | "Failed"))
        .filter_map(|(_, grace)| grace)
        .max()
        .unwrap_or(0)
        .max(0);
    if elapsed >= longest {
        return 0;
    }
    u64::try_from(longest).unwrap_or(0)
}

/// What remains of one resource, given the finalizers of each object still listed and the
/// estimate made before deleting: `Err` (with the outcome all the same) when objects remain
/// with neither an estimate nor a finalizer to explain them.
pub fn remaining_outcome(
    item_finalizers: &[Vec<String>],
    estimate: u64,
    what: &Deletable,
    namespace: &str,
) -> (ResourceOutcome, Option<String>) {
    if item_finalizers.is_empty() {
        return (ResourceOutcome::default(), None);
    }
    let mut finalizers = BTreeMap::new();
    for f in item_finalizers.iter().flatten() {
        *finalizers.entry(f.clone()).or_insert(0) += 1;
    }
    let remaining = item_finalizers.len();
    if estimate > 0 {
        return (
            ResourceOutcome {
                estimate,
                remaining,
                finalizers,
            },
            None,
        );
    }
    if !finalizers.is_empty() {
        return (
            ResourceOutcome {
                estimate: FINALIZER_ESTIMATE_SECONDS,
                remaining,
                finalizers,
            },
            None,
        );
    }
    let outcome = ResourceOutcome {
        estimate,
        remaining,
        finalizers,
    };
    let error = format!(
        "unexpected items still remain in namespace: {namespace} for gvr: {}",
        what.gvr()
    );
    (outcome, Some(error))
}

/// `spec.finalizers` without `token`, sorted and without duplicates (what the `finalize`
/// write sends).
pub fn without_token(finalizers: &[String], token: &str) -> Vec<String> {
    let mut out: Vec<String> = finalizers
        .iter()
        .filter(|f| f.as_str() != token)
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// How long until a namespace with content remaining for `estimate` seconds is looked at
/// again: half the estimate, plus one second.
pub fn requeue_after(estimate: u64) -> std::time::Duration {
    std::time::Duration::from_secs(estimate / 2 + 1)
}

/// The namespace writes a pass makes, retried on conflicts with a fresh read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// `status.phase: Terminating` if it is not yet.
    Terminating,
    /// The token removed from `spec.finalizers`.
    Finalize,
}

/// Deletes the content of Terminating namespaces through the API, then finalizes them.
#[derive(Debug, Clone)]
pub struct NamespacedResourcesDeleter {
    client: Client,
    token: String,
    clock: WallClock,
}

impl NamespacedResourcesDeleter {
    /// A deleter acting as the holder of finalizer `token` (`kubernetes` for the namespace
    /// controller).
    pub fn new(client: Client, token: impl Into<String>) -> NamespacedResourcesDeleter {
        NamespacedResourcesDeleter {
            client,
            token: token.into(),
            clock: WallClock::new(RealClock::shared()),
        }
    }

    /// One pass over namespace `name` (see the module documentation). `Ok` when there is
    /// nothing (more) to do: the namespace is gone, not being deleted, or finalized now.
    ///
    /// # Errors
    /// [`DeleteError::ContentRemaining`] to be tried again after about the estimate; any
    /// other error to be retried with backoff.
    pub async fn delete(&self, name: &str) -> Result<(), DeleteError> {
        let ns = match self.get(name).await {
            Ok(ns) => ns,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if ns.metadata.deletion_timestamp.is_none() {
            return Ok(());
        }
        let ns = match self.write(ns, Step::Terminating).await {
            Ok(ns) => ns,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if ns.metadata.deletion_timestamp.is_none() || finalized(&ns) {
            return Ok(());
        }
        let estimate = self.delete_all_content(&ns).await?;
        if estimate > 0 {
            return Err(DeleteError::ContentRemaining { estimate });
        }
        match self.write(ns, Step::Finalize).await {
            Ok(_) => Ok(()),
            // Finished by another controller sharing the token.
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn get(&self, name: &str) -> Result<Namespace, client::rest::Error> {
        let path = format!("/api/v1/namespaces/{name}");
        let (_, body) = self.client.request_bytes(Method::GET, &path, None).await?;
        decode(&body, &path)
    }

    /// Makes `step`'s write, reading the namespace again after each conflict (a namespace
    /// recreated under the same name in between is an error).
    async fn write(&self, mut ns: Namespace, step: Step) -> Result<Namespace, client::rest::Error> {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let uid = ns.metadata.uid.clone();
        let mut attempts = 0;
        loop {
            let (sub, mut body) = match step {
                Step::Terminating => {
                    let phase = ns.status.as_ref().and_then(|s| s.phase.as_deref());
                    if phase == Some("Terminating") {
                        return Ok(ns);
                    }
                    let mut out = ns.clone();
                    out.status.get_or_insert_with(Default::default).phase =
                        Some("Terminating".into());
                    ("status", out)
                }
                Step::Finalize => {
                    let current = ns
                        .spec
                        .as_ref()
                        .and_then(|s| s.finalizers.clone())
                        .unwrap_or_default();
                    let mut out = ns.clone();
                    out.spec.get_or_insert_with(Default::default).finalizers =
                        Some(without_token(&current, &self.token));
                    ("finalize", out)
                }
            };
            body.metadata.managed_fields = None;
            let path = format!("/api/v1/namespaces/{name}/{sub}");
            let bytes = serde_json::to_vec(&body).unwrap_or_default();
            match self
                .client
                .request_bytes(Method::PUT, &path, Some((bytes.into(), "application/json")))
                .await
            {
                Ok((_, out)) => return decode(&out, &path),
                Err(e) if e.is_conflict() && attempts < 10 => {
                    attempts += 1;
                    ns = self.get(&name).await?;
                    if ns.metadata.uid != uid {
                        return Err(client::rest::Error::InvalidRequest(
                            "namespace uid has changed across retries".into(),
                        ));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes everything in `ns` that can be deleted, and records how it went in its
    /// conditions. The estimate (seconds) of what remains.
    async fn delete_all_content(&self, ns: &Namespace) -> Result<u64, DeleteError> {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let deleted_at = ns
            .metadata
            .deletion_timestamp
            .as_ref()
            .map_or_else(|| self.clock.now(), |t| t.0);
        let mut conditions = ConditionUpdater::new();
        let mut errors = Vec::new();
        let resources = match discovery::discover(&self.client).await {
            Ok(found) => {
                if let Some(message) = found.failure_message() {
                    conditions.discovery_failed(found.failed.len(), &message);
                    errors.push(message);
                }
                if let Some(e) = &found.parse_error {
                    conditions.group_version_failed(e);
                    errors.push(e.clone());
                }
                found.resources
            }
            Err(e) => {
                let message = error_message(&e);
                conditions.discovery_failed(0, &message);
                errors.push(message);
                Vec::new()
            }
        };
        let mut estimate = 0;
        let mut totals = ContentTotals::default();
        for r in &resources {
            let (outcome, error) = self.delete_resource_content(r, &name, deleted_at).await;
            if let Some(e) = error {
                conditions.content_failed(&e);
                errors.push(e);
            }
            estimate = estimate.max(outcome.estimate);
            if outcome.remaining > 0 {
                *totals.by_resource.entry(r.label()).or_insert(0) += outcome.remaining;
                for (f, n) in outcome.finalizers {
                    *totals.by_finalizer.entry(f).or_insert(0) += n;
                }
            }
        }
        conditions.content_totals(&totals);
        let mut updated = ns.clone();
        let status = updated.status.get_or_insert_with(Default::default);
        if conditions.apply(status, self.clock.now()) {
            updated.metadata.managed_fields = None;
            let path = format!("/api/v1/namespaces/{name}/status");
            let bytes = serde_json::to_vec(&updated).unwrap_or_default();
            if let Err(e) = self
                .client
                .request_bytes(Method::PUT, &path, Some((bytes.into(), "application/json")))
                .await
            {
                tracing::warn!(namespace = %name, error = %e, "could not update the namespace's conditions");
            }
        }
        if !errors.is_empty() {
            return Err(DeleteError::Content(errors));
        }
        Ok(estimate)
    }

    /// Deletes the objects of `r` in `ns`, then lists what remains. The outcome, and the
    /// error that stopped it (if any).
    async fn delete_resource_content(
        &self,
        r: &Deletable,
        ns: &str,
        deleted_at: Timestamp,
    ) -> (ResourceOutcome, Option<String>) {
        let estimate = match self.estimate(r, ns, deleted_at).await {
            Ok(e) => e,
            Err(e) => return (ResourceOutcome::default(), Some(error_message(&e))),
        };
        let with_estimate = |error: String| {
            (
                ResourceOutcome {
                    estimate,
                    ..Default::default()
                },
                Some(error),
            )
        };
        let mut collection_deleted = false;
        if r.delete_collection {
            match self.delete_collection(r, ns).await {
                Ok(()) => collection_deleted = true,
                // Advertised but not served: one by one, then.
                Err(e) if e.is_not_found() || e.code() == Some(405) => {}
                Err(e) => return with_estimate(error_message(&e)),
            }
        }
        if !collection_deleted {
            if let Err(e) = self.delete_each(r, ns).await {
                return with_estimate(error_message(&e));
            }
        }
        if !r.list {
            return (
                ResourceOutcome {
                    estimate,
                    ..Default::default()
                },
                None,
            );
        }
        match self.list_finalizers(r, ns).await {
            Ok(Some(items)) => remaining_outcome(&items, estimate, r, ns),
            Ok(None) => (
                ResourceOutcome {
                    estimate,
                    ..Default::default()
                },
                None,
            ),
            Err(e) => with_estimate(error_message(&e)),
        }
    }

    /// The grace estimate of `r`'s objects: only pods have one.
    async fn estimate(
        &self,
        r: &Deletable,
        ns: &str,
        deleted_at: Timestamp,
    ) -> Result<u64, client::rest::Error> {
        if !(r.resource.group.is_empty() && r.resource.plural == "pods") {
            return Ok(0);
        }
        let path = r.resource.collection_path(Some(ns));
        let (_, body) = self.client.request_bytes(Method::GET, &path, None).await?;
        let list: Value = serde_json::from_slice(&body)
            .map_err(|e| decode_error(format!("the response of GET {path}"), e))?;
        let pods = list["items"].as_array().into_iter().flatten().map(|p| {
            (
                p["status"]["phase"].as_str().unwrap_or(""),
                p["spec"]["terminationGracePeriodSeconds"].as_i64(),
            )
        });
        let elapsed = self.clock.now().as_second() - deleted_at.as_second();
        Ok(pod_estimate(pods, elapsed))
    }

    async fn delete_collection(&self, r: &Deletable, ns: &str) -> Result<(), client::rest::Error> {
        let path = r.resource.collection_path(Some(ns));
        self.client
            .request_bytes(
                Method::DELETE,
                &path,
                Some((background(), "application/json")),
            )
            .await
            .map(drop)
    }

    /// Lists `r` in `ns` and deletes each object (already gone, or not deletable: fine).
    async fn delete_each(&self, r: &Deletable, ns: &str) -> Result<(), client::rest::Error> {
        let Some(names) = self.list_names(r, ns).await? else {
            return Ok(());
        };
        for name in names {
            let path = r.resource.item_path(Some(ns), &name);
            match self
                .client
                .request_bytes(
                    Method::DELETE,
                    &path,
                    Some((background(), "application/json")),
                )
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() || e.code() == Some(405) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The objects of `r` in `ns` as `(name, finalizers)`; `None` when `r` cannot be listed.
    async fn list(
        &self,
        r: &Deletable,
        ns: &str,
    ) -> Result<Option<Vec<(String, Vec<String>)>>, client::rest::Error> {
        if !r.list {
            return Ok(None);
        }
        let path = r.resource.collection_path(Some(ns));
        let body = match self.client.request_bytes(Method::GET, &path, None).await {
            Ok((_, body)) => body,
            Err(e) if e.is_not_found() || e.code() == Some(405) => return Ok(None),
            Err(e) => return Err(e),
        };
        let list: Value = serde_json::from_slice(&body)
            .map_err(|e| decode_error(format!("the response of GET {path}"), e))?;
        let items = list["items"].as_array().into_iter().flatten().map(|o| {
            let meta = &o["metadata"];
            let finalizers = meta["finalizers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
            (meta["name"].as_str().unwrap_or("").to_string(), finalizers)
        });
        Ok(Some(items.collect()))
    }

    async fn list_names(
        &self,
        r: &Deletable,
        ns: &str,
    ) -> Result<Option<Vec<String>>, client::rest::Error> {
        Ok(self
            .list(r, ns)
            .await?
            .map(|items| items.into_iter().map(|(name, _)| name).collect()))
    }

    async fn list_finalizers(
        &self,
        r: &Deletable,
        ns: &str,
    ) -> Result<Option<Vec<Vec<String>>>, client::rest::Error> {
        Ok(self
            .list(r, ns)
            .await?
            .map(|items| items.into_iter().map(|(_, f)| f).collect()))
    }
}

/// Whether the namespace's `spec.finalizers` is empty.
fn finalized(ns: &Namespace) -> bool {
    ns.spec
        .as_ref()
        .and_then(|s| s.finalizers.as_ref())
        .is_none_or(Vec::is_empty)
}

/// The DeleteOptions of every delete the controller makes: dependents are collected in the
/// background (no orphan finalizer: the namespace is to be emptied).
fn background() -> bytes::Bytes {
    serde_json::to_vec(&json!({
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "propagationPolicy": "Background",
    }))
    .unwrap_or_default()
    .into()
}

fn decode(body: &[u8], path: &str) -> Result<Namespace, client::rest::Error> {
    serde_json::from_slice(body).map_err(|e| decode_error(format!("the response of {path}"), e))
}

fn decode_error(context: String, source: serde_json::Error) -> client::rest::Error {
    client::rest::Error::Decode { context, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::rest::resource::ApiResource;

    fn configmaps() -> Deletable {
        Deletable {
            resource: ApiResource::new("", "v1", "configmaps", "ConfigMap", true),
            list: true,
            delete_collection: false,
        }
    }

    #[test]
    fn pods_are_given_their_longest_grace_period_from_the_deletion() {
        let pods = [
            ("Running", Some(30)),
            ("Pending", Some(10)),
            ("Succeeded", Some(600)),
            ("Failed", Some(900)),
            ("Running", None),
        ];
        assert_eq!(pod_estimate(pods, 0), 30);
        assert_eq!(pod_estimate(pods, 29), 30);
        // That long after the namespace's deletion, they should be gone.
        assert_eq!(pod_estimate(pods, 30), 0);
        assert_eq!(pod_estimate([("Succeeded", Some(30))], 0), 0);
        assert_eq!(pod_estimate([], 0), 0);
    }

    #[test]
    fn what_remains_is_waited_for_or_is_an_error() {
        let cms = configmaps();
        // Nothing left.
        assert_eq!(
            remaining_outcome(&[], 30, &cms, "ns"),
            (ResourceOutcome::default(), None)
        );
        // Held by a finalizer: the default estimate.
        let held = vec![vec!["example.com/hold".to_string()], vec![]];
        let (out, err) = remaining_outcome(&held, 0, &cms, "ns");
        assert_eq!(err, None);
        assert_eq!(out.estimate, FINALIZER_ESTIMATE_SECONDS);
        assert_eq!(out.remaining, 2);
        assert_eq!(out.finalizers.get("example.com/hold"), Some(&1));
        // In their grace period: that estimate.
        let (out, err) = remaining_outcome(&[vec![], vec![]], 12, &cms, "ns");
        assert_eq!((out.estimate, out.remaining, err), (12, 2, None));
        // Neither: they should have gone.
        let (out, err) = remaining_outcome(&[vec![]], 0, &cms, "ns");
        assert_eq!((out.estimate, out.remaining), (0, 1));
        assert_eq!(
            err.as_deref(),
            Some(
                "unexpected items still remain in namespace: ns for gvr: /v1, Resource=configmaps"
            )
        );
    }

    #[test]
    fn finalizing_removes_only_the_token() {
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(without_token(&f(&["kubernetes"]), "kubernetes").is_empty());
        assert_eq!(
            without_token(
                &f(&["z.io/b", "kubernetes", "a.io/a", "z.io/b"]),
                "kubernetes"
            ),
            f(&["a.io/a", "z.io/b"])
        );
        let mut ns = Namespace::default();
        assert!(finalized(&ns));
        ns.spec = Some(k8s_openapi::api::core::v1::NamespaceSpec {
            finalizers: Some(f(&["kubernetes"])),
        });
        assert!(!finalized(&ns));
    }

    #[test]
    fn requeues_wait_half_the_estimate_and_a_second() {
        assert_eq!(requeue_after(0).as_secs(), 1);
        assert_eq!(requeue_after(15).as_secs(), 8);
        assert_eq!(requeue_after(30).as_secs(), 16);
    }
}
