//! TEMPORARY: the API of `crate::event_recorder` (being written elsewhere), with a minimal
//! implementation, until that module is merged; then this file goes.

use client::rest::{resource::EVENTS, Client, PostParams};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The type of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something may need attention.
    Warning,
}

/// Records events (shim: one POST per event, in the background).
#[derive(Clone, Debug)]
pub struct EventRecorder {
    client: Client,
    component: String,
    host: Option<String>,
}

impl EventRecorder {
    /// A recorder for `component` on `host`.
    pub fn new(client: Client, component: impl Into<String>, host: Option<String>) -> Self {
        EventRecorder {
            client,
            component: component.into(),
            host,
        }
    }

    /// Records an event without blocking.
    pub fn event(
        &self,
        object: &ObjectReference,
        event_type: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let now = crate::node_agent::wall_clock::time(std::time::SystemTime::now());
        let ns = object.namespace.clone().unwrap_or_else(|| "default".into());
        let ev = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!(
                    "{}.",
                    object.name.as_deref().unwrap_or("object")
                )),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: object.clone(),
            reason: Some(reason.to_string()),
            message: Some(message.into()),
            type_: Some(match event_type {
                EventType::Normal => "Normal".into(),
                EventType::Warning => "Warning".into(),
            }),
            count: Some(1),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: self.host.clone(),
            }),
            reporting_component: Some(self.component.clone()),
            reporting_instance: self.host.clone(),
            ..Default::default()
        };
        let client = self.client.clone();
        tokio::spawn(async move {
            let _ = client
                .create(&EVENTS, Some(&ns), &PostParams::default(), &ev)
                .await;
        });
    }
}

/// A reference to `obj` for an event.
pub fn object_reference<K>(obj: &K) -> ObjectReference
where
    K: k8s_openapi::Resource
        + k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
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
