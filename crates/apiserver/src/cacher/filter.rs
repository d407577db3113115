//! The predicate a list or watch applies: request namespace + label + field selectors.

use super::cached_object::CachedObject;
use crate::registry::ResourceInfo;
use api::fields::FieldSelector;
use api::labels::LabelSelector;

/// Which watcher-index bucket a filter can live in: the most selective exact requirement it
/// has. An event only wakes watchers in the buckets its old and new state fall into.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Bucket {
    /// `metadata.name` (and namespace) fixed: the object key.
    Key(String),
    /// `spec.nodeName=X` (pods).
    Node(String),
    /// Namespace-scoped request.
    Namespace(String),
    /// Everything else.
    All,
}

/// A compiled list/watch predicate. Cheap to evaluate per object.
#[derive(Debug, Clone)]
pub struct Filter {
    /// The request's namespace (`None` = all namespaces).
    pub namespace: Option<String>,
    /// Parsed label selector.
    pub labels: LabelSelector,
    /// Parsed (and validated) field selector.
    pub fields: FieldSelector,
    info: &'static ResourceInfo,
}

impl Filter {
    /// Builds a filter; the field selector must already be validated against `info`.
    pub fn new(
        info: &'static ResourceInfo,
        namespace: Option<String>,
        labels: LabelSelector,
        fields: FieldSelector,
    ) -> Filter {
        Filter {
            namespace,
            labels,
            fields,
            info,
        }
    }

    /// A filter that matches everything in `namespace` (or everywhere).
    pub fn everything(info: &'static ResourceInfo, namespace: Option<String>) -> Filter {
        Filter::new(
            info,
            namespace,
            LabelSelector::everything(),
            FieldSelector::everything(),
        )
    }

    /// True if no selector narrows the result beyond the namespace.
    pub fn is_unfiltered(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Does `obj` pass?
    pub fn matches(&self, obj: &CachedObject) -> bool {
        if let Some(ns) = &self.namespace {
            if &obj.namespace != ns {
                return false;
            }
        }
        if !self.labels.is_empty() && !self.labels.matches(&obj.labels) {
            return false;
        }
        if !self.fields.is_empty() {
            let info = self.info;
            return self
                .fields
                .matches_fn(|label: &str| obj.field(info, label).map(std::borrow::Cow::Borrowed));
        }
        true
    }

    /// The index bucket for a watcher with this filter.
    pub fn bucket(&self) -> Bucket {
        let ns_from_field = self.fields.requires_exact("metadata.namespace");
        let ns = self.namespace.as_deref().or(ns_from_field);
        if let Some(name) = self.fields.requires_exact("metadata.name") {
            if self.info.namespaced {
                if let Some(ns) = ns {
                    return Bucket::Key(format!("{ns}/{name}"));
                }
            } else {
                return Bucket::Key(name.to_string());
            }
        }
        if self.info.kind == "Pod" {
            if let Some(node) = self.fields.requires_exact("spec.nodeName") {
                return Bucket::Node(node.to_string());
            }
        }
        match ns {
            Some(ns) => Bucket::Namespace(ns.to_string()),
            None => Bucket::All,
        }
    }
}

/// The buckets an object state falls into (for event dispatch).
pub fn object_buckets(info: &ResourceInfo, obj: &CachedObject, out: &mut Vec<Bucket>) {
    let key = Bucket::Key(obj.key.clone());
    if !out.contains(&key) {
        out.push(key);
    }
    if info.kind == "Pod" {
        if let Some(node) = obj.field(info, "spec.nodeName") {
            let b = Bucket::Node(node.to_string());
            if !out.contains(&b) {
                out.push(b);
            }
        }
    }
    if !obj.namespace.is_empty() {
        let b = Bucket::Namespace(obj.namespace.clone());
        if !out.contains(&b) {
            out.push(b);
        }
    }
    if !out.contains(&Bucket::All) {
        out.push(Bucket::All);
    }
}
