//! Resource definitions and the create/update strategies applied before anything is stored.
//!
//! Data flow: a handler decodes the body, then calls [`strategy::prepare_for_create`] or
//! [`strategy::prepare_for_update`] (defaults, server-owned metadata, status rules,
//! generation, the default admission), then [`strategy::validate`] (and
//! [`strategy::validate_create`] or [`strategy::validate_update`]); only an object that passes
//! reaches storage.

pub mod admission_policy;
pub mod apiextensions;
pub mod cohabitation;
pub mod config_validation;
pub mod controller_revision_validation;
pub mod default_tolerations;
pub mod defaults;
pub mod event_conversion;
pub mod event_validation;
pub mod field_validation;
pub mod job;
pub mod namespace_lifecycle;
pub mod node_taint;
pub mod pod_update;
pub mod pod_validation;
pub mod rbac_validation;
pub mod resources;
pub mod service_validation;
pub mod strategy;
pub mod workload_validation;

pub use resources::{ResourceInfo, SelectableField, RESOURCES};
