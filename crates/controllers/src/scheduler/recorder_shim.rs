//! A stand-in with the API of `crate::event_recorder` until that module is merged; it only
//! logs. Deleted once the real recorder is in.

use client::rest::Client;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The type of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something went wrong.
    Warning,
}

/// Records events (here: logs them).
#[derive(Debug, Clone)]
pub struct EventRecorder {
    component: String,
}

impl EventRecorder {
    /// A recorder reporting as `component`.
    pub fn new(_client: Client, component: impl Into<String>, _host: Option<String>) -> Self {
        EventRecorder {
            component: component.into(),
        }
    }

    /// Records one event about `object`.
    pub fn event(
        &self,
        object: &ObjectReference,
        event_type: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        tracing::info!(component = %self.component, object = ?object.name,
            ?event_type, reason, message = %message.into(), "event");
    }
}

/// A reference to `obj` for an event's `involvedObject`.
pub fn object_reference<K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta>>(
    obj: &K,
) -> ObjectReference {
    let meta = obj.metadata();
    ObjectReference {
        api_version: Some(K::API_VERSION.to_string()),
        kind: Some(K::KIND.to_string()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        field_path: None,
    }
}
