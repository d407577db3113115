//! The strategy of custom objects and of CRDs themselves: what the registry's create and
//! update paths do differently for them.
//!
//! A custom object is pruned to its schema (in [`crate::registry::field_validation`], under
//! the request's `fieldValidation`), defaulted, checked against the schema (every violation
//! in one 422) and stored at the CRD's storage version; it is read back at the version
//! asked for, defaulted again (a default added to the schema later shows up on read).

use super::CustomResource;
use crate::registry::ResourceInfo;
use api::{Object, Status};
use serde_json::{json, Value};

/// Prepares a new custom object: refused (405) while its CRD is being deleted; the status
/// dropped when it is a subresource (written only through it); defaults applied.
pub fn prepare_for_create(
    info: &ResourceInfo,
    custom: &CustomResource,
    obj: &mut Object,
) -> Result<(), Status> {
    if custom.terminating {
        return Err(Status::new(
            api::Reason::MethodNotAllowed,
            format!(
                "create not allowed while custom resource definition {} is terminating",
                custom.crd_name
            ),
        ));
    }
    if custom.status_subresource {
        obj.0.remove("status");
    }
    if let Some(schema) = &custom.schema {
        schema.apply_defaults(&mut obj.0);
    }
    store_at_storage_version(info, custom, obj);
    Ok(())
}

/// Prepares an update of the main resource of a custom object: defaults applied.
pub fn prepare_for_update(custom: &CustomResource, obj: &mut Object) {
    if let Some(schema) = &custom.schema {
        schema.apply_defaults(&mut obj.0);
    }
}

/// Sets `obj`'s `apiVersion` to its CRD's storage version (conversion `None`: only the
/// apiVersion differs between versions).
pub fn store_at_storage_version(info: &ResourceInfo, custom: &CustomResource, obj: &mut Object) {
    if custom.storage_version != info.version {
        obj.0.insert(
            "apiVersion".into(),
            json!(format!("{}/{}", info.group, custom.storage_version)),
        );
    }
}

/// Every violation of the schema and of its CEL rules in `obj` (`old`: the stored object,
/// on an update), as one 422.
pub fn validate(
    info: &ResourceInfo,
    custom: &CustomResource,
    obj: &Object,
    old: Option<&Object>,
) -> Result<(), Status> {
    let Some(schema) = &custom.schema else {
        return Ok(());
    };
    // The stored object is compared as it reads: defaults added to the schema since it
    // was written apply to it too.
    let defaulted;
    let old = match old {
        Some(o) if schema.root.rules_below && schema.has_defaults() => {
            let mut o = o.0.clone();
            schema.apply_defaults(&mut o);
            defaulted = o;
            Some(&defaulted)
        }
        other => other.map(|o| &o.0),
    };
    let errs = schema.validate_update(&obj.0, old);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(Status::invalid_fields(
            info.kind,
            info.group,
            obj.name(),
            &errs,
        ))
    }
}

/// What reading a stored custom object does: the version asked for, defaults applied.
pub fn read(info: &ResourceInfo, custom: &CustomResource, obj: &mut Object) {
    let api_version = info.api_version();
    if obj.0.get("apiVersion").and_then(Value::as_str) != Some(api_version.as_str()) {
        obj.0.insert("apiVersion".into(), json!(api_version));
    }
    if let Some(schema) = &custom.schema {
        schema.apply_defaults(&mut obj.0);
    }
}

/// A CRD as written by a client ([`super::crd_validation`]), as one 422.
pub fn validate_crd(crd: &Object, old: Option<&Object>) -> Result<(), Status> {
    let crd_value = Value::Object(crd.0.clone());
    let old_value = old.map(|o| Value::Object(o.0.clone()));
    let errs = super::crd_validation::validate(&crd_value, old_value.as_ref());
    if errs.is_empty() {
        Ok(())
    } else {
        Err(Status::invalid_fields(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            crd.name(),
            &errs,
        ))
    }
}
