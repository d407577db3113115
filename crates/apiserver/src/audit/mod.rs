//! The audit log: for each request the audit policy selects, `audit.k8s.io/v1` `Event`s as
//! JSON lines, as kube-apiserver writes them — at `RequestReceived` (before the request
//! runs), `ResponseStarted` (a watch's headers are out) and `ResponseComplete` (for a watch,
//! when it ends), each with the user (and the impersonated one), the verb, the object
//! reference, the answer's code and the authorization decision; at level `Request` and above
//! also the request's body (JSON).
//!
//! Data flow: dispatch asks [`Auditor::begin`] once the request is authorized (refusals are
//! audited too) → a [`RequestAudit`] travels with the request (its body is captured by the
//! write path through [`AuditBody`]) → each stage is written through the
//! [`log_backend::LogBackend`].

pub mod log_backend;
pub mod policy;

use crate::auth::attributes::Attributes;
use crate::auth::user_info::UserInfo;
use bytes::Bytes;
use log_backend::LogBackend;
use policy::{Level, Policy, Stage};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

/// The request body, captured by the write path for levels `Request` and above.
#[derive(Debug, Clone, Default)]
pub struct AuditBody(pub Arc<OnceLock<Bytes>>);

/// The audit policy and where events go.
#[derive(Debug)]
pub struct Auditor {
    policy: Policy,
    backend: LogBackend,
}

/// Now as RFC 3339 with microseconds, as audit events carry their times.
fn now_micro() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    let base = api::time::format_rfc3339(secs);
    format!("{}.{:06}Z", base.trim_end_matches('Z'), d.subsec_micros())
}

/// One audited request, from `RequestReceived` to `ResponseComplete`.
#[derive(Debug)]
pub struct RequestAudit {
    backend: LogBackend,
    level: Level,
    omit: Vec<Stage>,
    event: Value,
    /// The body, when the level records it.
    pub body: Option<AuditBody>,
}

impl Auditor {
    /// An auditor writing what `policy` selects to `backend`.
    pub fn new(policy: Policy, backend: LogBackend) -> Auditor {
        Auditor { policy, backend }
    }

    /// Events dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.backend.dropped()
    }

    /// Starts the audit of a request by `caller` (running as `user`, who differs when
    /// impersonating) asking `attrs`, and writes its `RequestReceived` event; `None` if
    /// the policy's level for it is `None` (the policy is asked about `caller`, the user who
    /// authenticated, as kube-apiserver does). `decision` is the authorization's: `Ok`, the
    /// refusal's reason, or `None` when the request was not authorized at all (a malformed
    /// impersonation).
    #[allow(clippy::too_many_arguments)]
    pub fn begin(
        &self,
        caller: &UserInfo,
        user: &UserInfo,
        attrs: &Attributes,
        uri: &str,
        user_agent: Option<&str>,
        source_ip: Option<std::net::IpAddr>,
        decision: Option<Result<(), &str>>,
    ) -> Option<RequestAudit> {
        let d = self.policy.decide(caller, attrs);
        if d.level == Level::None {
            return None;
        }
        let now = now_micro();
        let mut event = json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": format!("{:?}", d.level),
            "auditID": uuid::Uuid::new_v4().to_string(),
            "requestURI": uri,
            "verb": attrs.verb,
            "user": caller.to_json(),
            "sourceIPs": source_ip.map(|ip| vec![ip.to_string()]).unwrap_or_default(),
            "requestReceivedTimestamp": now,
            "stageTimestamp": now,
        });
        if !std::ptr::eq(caller, user) && caller != user {
            event["impersonatedUser"] = user.to_json();
        }
        if let Some(ua) = user_agent {
            event["userAgent"] = ua.into();
        }
        if attrs.resource_request {
            let mut r = json!({"resource": attrs.resource, "apiVersion": attrs.api_version});
            for (k, v) in [
                ("namespace", &attrs.namespace),
                ("name", &attrs.name),
                ("apiGroup", &attrs.api_group),
                ("subresource", &attrs.subresource),
            ] {
                if !v.is_empty() {
                    r[k] = v.clone().into();
                }
            }
            event["objectRef"] = r;
        }
        match decision {
            Some(Ok(())) => {
                event["annotations"] = json!({"authorization.k8s.io/decision": "allow"});
            }
            Some(Err(reason)) => {
                event["annotations"] = json!({"authorization.k8s.io/decision": "forbid",
                                              "authorization.k8s.io/reason": reason});
            }
            None => {}
        }
        let audit = RequestAudit {
            backend: self.backend.clone(),
            level: d.level,
            omit: d.omit_stages,
            event,
            body: (d.level >= Level::Request).then(AuditBody::default),
        };
        audit.write(Stage::RequestReceived, None);
        Some(audit)
    }
}

impl RequestAudit {
    /// Writes the event of `stage`, with the answer's `code` once there is one.
    pub fn write(&self, stage: Stage, code: Option<u16>) {
        if self.omit.contains(&stage) {
            return;
        }
        let mut ev = self.event.clone();
        ev["stage"] = stage.as_str().into();
        if stage != Stage::RequestReceived {
            ev["stageTimestamp"] = now_micro().into();
        }
        if let Some(c) = code {
            ev["responseStatus"] = json!({"metadata": {}, "code": c});
        }
        if self.level >= Level::Request && stage != Stage::RequestReceived {
            if let Some(b) = self.body.as_ref().and_then(|b| b.0.get()) {
                if let Ok(v) = serde_json::from_slice::<Value>(b) {
                    ev["requestObject"] = v;
                }
            }
        }
        self.backend.write(&ev);
    }
}
