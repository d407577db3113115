//! Authentication and authorization.
//!
//! Data flow: a listener that authenticates ([`authenticator::Authenticator`]) finds the
//! request's user (client certificate, bearer token, ServiceAccount token, or anonymous) and
//! attaches it ([`user_info::Authenticated`]); dispatch applies impersonation
//! ([`impersonation`]), reads the request's [`attributes::Attributes`] and asks the
//! [`Authorizer`] — `system:masters`, then the Node authorizer, then RBAC — before anything
//! else runs. A watch is authorized once, when it starts; its events cost nothing more.
//! Writes of roles and bindings are further checked against escalation
//! ([`rbac::escalation`]).

pub mod attributes;
pub mod authenticator;
pub mod client_cert;
pub mod impersonation;
pub mod node_authorizer;
pub mod rbac;
pub mod request_header;
pub mod service_account_token;
pub mod token_file;
pub mod user_info;

use attributes::Attributes;
use node_authorizer::NodeDecision;
use rbac::{Decision, Rbac};
use std::sync::Arc;
use user_info::UserInfo;

/// The server's authorizer chain.
#[derive(Debug)]
pub struct Authorizer {
    rbac: Rbac,
    pods: Arc<crate::cacher::Cacher>,
}

impl Authorizer {
    /// The chain over the RBAC caches (in [`rbac::RESOURCES`] order) and the pods cache.
    pub fn new(
        rbac_caches: [Arc<crate::cacher::Cacher>; 4],
        pods: Arc<crate::cacher::Cacher>,
    ) -> Self {
        Authorizer {
            rbac: Rbac::new(rbac_caches),
            pods,
        }
    }

    /// The RBAC authorizer.
    pub fn rbac(&self) -> &Rbac {
        &self.rbac
    }

    /// Decides whether `user` may do `attrs`: members of `system:masters` may do everything;
    /// a node is decided by the Node authorizer when the `system:node` role covers the
    /// request; everyone else (and a node's other requests) by RBAC.
    pub fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        if user.is_master() {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        if let Some(node) = user.node_name() {
            let snap = self.rbac.snapshot();
            match node_authorizer::authorize(node, attrs, &snap, &self.pods) {
                NodeDecision::Allow => {
                    return Decision {
                        allowed: true,
                        reason: String::new(),
                    }
                }
                NodeDecision::Deny(reason) => {
                    return Decision {
                        allowed: false,
                        reason,
                    }
                }
                NodeDecision::NoOpinion => {}
            }
        }
        self.rbac.authorize(user, attrs)
    }
}
