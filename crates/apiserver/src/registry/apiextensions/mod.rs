//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): what a definition says, checked,
//! and turned into served resources.
//!
//! Data flow: a CRD is stored like any object. The server's CRD controller
//! ([`crate::handlers::crd_controller`]) follows the CRD watch cache, decides each
//! definition's names ([`naming`]), marks it `NamesAccepted` and `Established`, and publishes
//! the served set ([`CustomResources`]) that routing, discovery and the handlers read. Each
//! served version of an established definition is one [`ResourceInfo`] whose
//! [`ResourceInfo::custom`] carries the version's [`CustomResource`]: its structural schema
//! ([`structural`]: validation, pruning, defaulting) and its printer columns.
//!
//! A `ResourceInfo` is `&'static` everywhere in the server. Custom ones are interned
//! ([`intern`]): built once per distinct definition and kept for the life of the process, so
//! a definition changed back and forth costs nothing more, and the memory held is bounded by
//! the number of distinct definitions ever served (a few KiB each).

pub mod cel;
pub mod crd;
pub mod crd_validation;
pub mod custom_resources;
pub mod naming;
pub mod strategy;
pub mod structural;

pub use crd::{Crd, CrdVersion, Names, PrinterColumn, ScalePaths};
pub use custom_resources::{CustomResources, Served};
pub use structural::Schema;

use super::resources::{NameRule, ResourceInfo, SelectableField};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// The list semantics a custom resource's schema gives server-side apply and field
/// tracking; `None` for built-in kinds (they use the kinds' table).
pub fn list_strategies(
    info: &ResourceInfo,
) -> Option<&'static dyn api::managed_fields::ListStrategies> {
    let custom: &'static CustomResource = info.custom?;
    let schema: &'static Schema = custom.schema.as_deref()?;
    Some(schema)
}

/// The finalizer a CRD carries once deleted, until its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// What one served version of a custom resource is, beyond its names: the parts of its
/// definition the handlers and encoders consult.
#[derive(Debug, PartialEq)]
pub struct CustomResource {
    /// The CRD's name, `<plural>.<group>`.
    pub crd_name: String,
    /// The version's structural schema (`None`: anything goes, nothing pruned).
    pub schema: Option<Arc<Schema>>,
    /// The `status` subresource is enabled.
    pub status_subresource: bool,
    /// The `scale` subresource's paths, if enabled.
    pub scale: Option<ScalePaths>,
    /// `additionalPrinterColumns`, in order.
    pub printer_columns: Vec<PrinterColumn>,
    /// The version objects are stored at.
    pub storage_version: String,
    /// The CRD is being deleted: objects may be read and deleted, not created.
    pub terminating: bool,
}

/// The interned [`ResourceInfo`] for `version` of `crd`, served under `names` (the accepted
/// ones). Equal definitions give the same reference.
pub fn intern(
    crd: &Crd,
    names: &Names,
    version: &CrdVersion,
    terminating: bool,
) -> &'static ResourceInfo {
    let custom = CustomResource {
        crd_name: crd.name.clone(),
        schema: version.schema.clone(),
        status_subresource: version.status_subresource,
        scale: version.scale.clone(),
        printer_columns: version.printer_columns.clone(),
        storage_version: crd.storage_version().unwrap_or(&version.name).to_string(),
        terminating,
    };
    let key = InternKey {
        group: crd.group.clone(),
        version: version.name.clone(),
        plural: names.plural.clone(),
        singular: names.singular.clone(),
        kind: names.kind.clone(),
        short_names: names.short_names.clone(),
        categories: names.categories.clone(),
        namespaced: crd.namespaced,
        selectable: version.selectable_fields.clone(),
    };
    static INTERNED: OnceLock<Mutex<HashMap<InternKey, Vec<&'static ResourceInfo>>>> =
        OnceLock::new();
    let mut interned = INTERNED.get_or_init(Default::default).lock();
    let same = interned.entry(key.clone()).or_default();
    if let Some(found) = same.iter().find(|i| i.custom == Some(&custom)) {
        return found;
    }
    let info: &'static ResourceInfo = Box::leak(Box::new(ResourceInfo {
        group: leak(&key.group),
        version: leak(&key.version),
        resource: leak(&key.plural),
        singular: leak(&key.singular),
        kind: leak(&key.kind),
        short_names: leak_all(&key.short_names),
        categories: leak_all(&key.categories),
        namespaced: key.namespaced,
        has_status: custom.status_subresource,
        // Custom resources always count spec changes in `metadata.generation`.
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: Box::leak(
            key.selectable
                .iter()
                .map(|path| {
                    let label = leak(path.trim_start_matches('.'));
                    SelectableField {
                        label,
                        path: label,
                        default: "",
                    }
                })
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        ),
        custom: Some(Box::leak(Box::new(custom))),
    }));
    same.push(info);
    info
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct InternKey {
    group: String,
    version: String,
    plural: String,
    singular: String,
    kind: String,
    short_names: Vec<String>,
    categories: Vec<String>,
    namespaced: bool,
    selectable: Vec<String>,
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn leak_all(v: &[String]) -> &'static [&'static str] {
    Box::leak(
        v.iter()
            .map(|s| leak(s))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(columns: &str) -> Crd {
        Crd::from_value(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                    "additionalPrinterColumns": [
                        {"name": columns, "type": "string", "jsonPath": ".spec.size"}
                    ]
                }]
            }
        }))
        .unwrap()
    }

    #[test]
    fn equal_definitions_intern_to_one_info() {
        let a = crd("Size");
        let b = crd("Size");
        let c = crd("Width");
        let ia = intern(&a, &a.names, &a.versions[0], false);
        let ib = intern(&b, &b.names, &b.versions[0], false);
        let ic = intern(&c, &c.names, &c.versions[0], false);
        assert!(std::ptr::eq(ia, ib));
        assert!(!std::ptr::eq(ia, ic));
        assert_eq!(ia.resource, "widgets");
        assert_eq!(ia.singular, "widget");
        assert_eq!(ia.api_version(), "example.com/v1");
        assert_eq!(ia.key_prefix(), "/registry/example.com/widgets/");
        assert!(ia
            .custom
            .is_some_and(|c| c.printer_columns[0].name == "Size"));
        assert!(!std::ptr::eq(
            ia,
            intern(&a, &a.names, &a.versions[0], true)
        ));
    }
}
