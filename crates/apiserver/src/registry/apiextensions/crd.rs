//! The parts of a stored CustomResourceDefinition the server acts on, read from its JSON.
//! Reading never fails on a definition that passed [`super::crd_validation`]; one that does
//! not read (written before a check existed) is not served.

use super::structural::Schema;
use serde_json::Value;
use std::sync::Arc;

/// A CRD's names (`spec.names`, or the accepted ones in `status.acceptedNames`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Names {
    /// `plural`, e.g. `widgets`.
    pub plural: String,
    /// `singular` (defaulted to the lower-cased kind).
    pub singular: String,
    /// `kind`, e.g. `Widget`.
    pub kind: String,
    /// `listKind` (defaulted to `<kind>List`).
    pub list_kind: String,
    /// `shortNames`.
    pub short_names: Vec<String>,
    /// `categories`.
    pub categories: Vec<String>,
}

impl Names {
    /// Reads names from `v` (an object with `plural`, `kind`…), defaulting `singular` and
    /// `listKind` as Kubernetes does.
    pub fn from_value(v: &Value) -> Names {
        let s = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let list = |k: &str| -> Vec<String> {
            v.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let kind = s("kind");
        let singular = Some(s("singular"))
            .filter(|x| !x.is_empty())
            .unwrap_or_else(|| kind.to_lowercase());
        let list_kind = Some(s("listKind"))
            .filter(|x| !x.is_empty())
            .unwrap_or_else(|| format!("{kind}List"));
        Names {
            plural: s("plural"),
            singular,
            kind,
            list_kind,
            short_names: list("shortNames"),
            categories: list("categories"),
        }
    }

    /// The names as JSON (`status.acceptedNames`).
    pub fn to_value(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("plural".into(), self.plural.clone().into());
        m.insert("singular".into(), self.singular.clone().into());
        m.insert("kind".into(), self.kind.clone().into());
        m.insert("listKind".into(), self.list_kind.clone().into());
        if !self.short_names.is_empty() {
            m.insert("shortNames".into(), self.short_names.clone().into());
        }
        if !self.categories.is_empty() {
            m.insert("categories".into(), self.categories.clone().into());
        }
        Value::Object(m)
    }
}

/// One `additionalPrinterColumns` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    /// The column's header.
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub type_: String,
    /// `format`, if any.
    pub format: String,
    /// The column's description.
    pub description: String,
    /// 0 for the default view; higher only with `-o wide`.
    pub priority: i64,
    /// A simple JSONPath into the object, e.g. `.spec.replicas`.
    pub json_path: String,
}

/// The `scale` subresource's paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// `specReplicasPath`, e.g. `.spec.replicas`.
    pub spec_replicas: String,
    /// `statusReplicasPath`.
    pub status_replicas: String,
    /// `labelSelectorPath`, if any.
    pub label_selector: Option<String>,
}

/// One entry of `spec.versions`.
#[derive(Debug, Clone)]
pub struct CrdVersion {
    /// The version's name, e.g. `v1`.
    pub name: String,
    /// Served at all.
    pub served: bool,
    /// The storage version (exactly one has it).
    pub storage: bool,
    /// The compiled schema, if it has one that compiles.
    pub schema: Option<Arc<Schema>>,
    /// `subresources.status` is set.
    pub status_subresource: bool,
    /// `subresources.scale`.
    pub scale: Option<ScalePaths>,
    /// `additionalPrinterColumns`.
    pub printer_columns: Vec<PrinterColumn>,
    /// `selectableFields[].jsonPath`, e.g. `.spec.color`.
    pub selectable_fields: Vec<String>,
}

/// A stored CRD, read.
#[derive(Debug, Clone)]
pub struct Crd {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.creationTimestamp`, for ordering who came first.
    pub created: String,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `spec.group`.
    pub group: String,
    /// `spec.names`.
    pub names: Names,
    /// `spec.scope == Namespaced`.
    pub namespaced: bool,
    /// `spec.versions`.
    pub versions: Vec<CrdVersion>,
    /// The whole object.
    pub object: Value,
}

impl Crd {
    /// Reads a CRD object; `None`-like errors for one without a group, names or versions.
    pub fn from_value(v: &Value) -> Result<Crd, String> {
        let meta = v.get("metadata").cloned().unwrap_or(Value::Null);
        let spec = v.get("spec").ok_or("spec is missing")?;
        let group = spec
            .get("group")
            .and_then(Value::as_str)
            .filter(|g| !g.is_empty())
            .ok_or("spec.group is missing")?;
        let names = Names::from_value(spec.get("names").ok_or("spec.names is missing")?);
        let versions = spec
            .get("versions")
            .and_then(Value::as_array)
            .ok_or("spec.versions is missing")?
            .iter()
            .enumerate()
            .map(|(i, v)| read_version(i, v))
            .collect::<Result<Vec<_>, _>>()?;
        let s = |k: &str| {
            meta.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Ok(Crd {
            name: s("name"),
            uid: s("uid"),
            created: s("creationTimestamp"),
            deleting: meta.get("deletionTimestamp").is_some_and(|t| !t.is_null()),
            group: group.to_string(),
            names,
            namespaced: spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
            versions,
            object: v.clone(),
        })
    }

    /// The storage version's name.
    pub fn storage_version(&self) -> Option<&str> {
        self.versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.as_str())
    }

    /// `status.acceptedNames`, if the server has accepted any.
    pub fn accepted_names(&self) -> Option<Names> {
        self.object
            .pointer("/status/acceptedNames")
            .filter(|n| {
                n.get("plural")
                    .and_then(Value::as_str)
                    .is_some_and(|p| !p.is_empty())
            })
            .map(Names::from_value)
    }

    /// Whether condition `type_` is `True` in `status.conditions`.
    pub fn condition_true(&self, type_: &str) -> bool {
        self.object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some(type_)
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            })
    }
}

fn read_version(i: usize, v: &Value) -> Result<CrdVersion, String> {
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("spec.versions[{i}].name is missing"))?;
    let schema = match v.pointer("/schema/openAPIV3Schema") {
        Some(s) => Some(Arc::new(
            Schema::compile_stored(s, &format!("spec.versions[{i}].schema.openAPIV3Schema"))
                .map_err(|e| format!("spec.versions[{i}]: the schema does not compile: {e:?}"))?,
        )),
        None => None,
    };
    let str_at = |x: &Value, k: &str| {
        x.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let scale = v.pointer("/subresources/scale").map(|s| ScalePaths {
        spec_replicas: str_at(s, "specReplicasPath"),
        status_replicas: str_at(s, "statusReplicasPath"),
        label_selector: s
            .get("labelSelectorPath")
            .and_then(Value::as_str)
            .map(str::to_string),
    });
    let printer_columns = v
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .map(|c| PrinterColumn {
                    name: str_at(c, "name"),
                    type_: str_at(c, "type"),
                    format: str_at(c, "format"),
                    description: str_at(c, "description"),
                    priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    json_path: str_at(c, "jsonPath"),
                })
                .collect()
        })
        .unwrap_or_default();
    let selectable_fields = v
        .get("selectableFields")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|f| str_at(f, "jsonPath")).collect())
        .unwrap_or_default();
    Ok(CrdVersion {
        name: name.to_string(),
        served: v.get("served").and_then(Value::as_bool).unwrap_or(false),
        storage: v.get("storage").and_then(Value::as_bool).unwrap_or(false),
        schema,
        status_subresource: v.pointer("/subresources/status").is_some(),
        scale,
        printer_columns,
        selectable_fields,
    })
}
