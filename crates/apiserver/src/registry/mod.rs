//! Resource definitions and the create/update strategies applied before anything is stored.
//!
//! Data flow: a handler decodes the body, then calls [`strategy::prepare_for_create`] or
//! [`strategy::prepare_for_update`] (defaults, server-owned metadata, status rules,
//! generation), then [`strategy::validate`]; only an object that passes reaches storage.

pub mod defaults;
pub mod field_validation;
pub mod resources;
pub mod strategy;

pub use resources::{ResourceInfo, SelectableField, RESOURCES};
