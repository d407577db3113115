//! The full schemas of the served kinds for the OpenAPI documents, taken from the JSON schemas
//! that k8s-openapi ships for every Kubernetes type (its `schemars` feature).
//!
//! They are what `kubectl explain pods.spec.containers` walks: every field with its type and
//! description, named as Kubernetes names them (`io.k8s.api.core.v1.PodSpec`). Each document
//! gets the definitions its kinds reach, wrapped for its dialect: OpenAPI 3.0 documents keep
//! them under `#/components/schemas/`, Swagger 2.0 under `#/definitions/`, and a `$ref` that
//! has a description beside it is wrapped in `allOf` (neither dialect reads siblings of a
//! `$ref`), as Kubernetes' own documents do.
//!
//! The schemas carry no strategic-merge keys, and the documents do not advertise strategic
//! merge patch (see the [`openapi`](crate::server::openapi) module docs): client-side `kubectl apply`
//! keeps using its compiled-in types for that.

use k8s_openapi::api::{
    apps, autoscaling, batch, coordination, core, discovery, events, networking, policy, rbac,
    scheduling, storage,
};
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::JsonSchema;
use serde_json::{Map, Value};

/// Which flavour of document the schemas are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaDialect {
    /// OpenAPI 3.0: references to `#/components/schemas/{name}`.
    OpenApi3,
    /// Swagger 2.0: references to `#/definitions/{name}`.
    Swagger2,
}

/// Collects the typed schemas of several kinds into one set of definitions.
pub struct TypedSchemas {
    generator: SchemaGenerator,
}

impl std::fmt::Debug for TypedSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedSchemas")
            .field("definitions", &self.generator.definitions().len())
            .finish()
    }
}

impl TypedSchemas {
    /// An empty set whose references point where `dialect` keeps its schemas.
    pub fn new(dialect: SchemaDialect) -> TypedSchemas {
        let settings = match dialect {
            SchemaDialect::OpenApi3 => SchemaSettings::openapi3(),
            SchemaDialect::Swagger2 => SchemaSettings::draft07(),
        };
        TypedSchemas {
            generator: settings.into_generator(),
        }
    }

    /// Adds the kind `group/version, Kind=kind` and every type it reaches. Returns the name of
    /// its schema (`io.k8s.api.core.v1.Pod`), or `None` when no typed schema is known for it
    /// (the caller then describes the kind itself).
    pub fn add_kind(&mut self, group: &str, version: &str, kind: &str) -> Option<String> {
        fn add<T: JsonSchema>(g: &mut SchemaGenerator) -> Option<String> {
            // `subschema_for` registers the definition (and everything below it); the
            // returned reference itself is not needed.
            let _reference = g.subschema_for::<T>();
            Some(T::schema_name().into_owned())
        }
        let g = &mut self.generator;
        match (group, version, kind) {
            ("", "v1", "Namespace") => add::<core::v1::Namespace>(g),
            ("", "v1", "Pod") => add::<core::v1::Pod>(g),
            ("", "v1", "Node") => add::<core::v1::Node>(g),
            ("", "v1", "ConfigMap") => add::<core::v1::ConfigMap>(g),
            ("", "v1", "Secret") => add::<core::v1::Secret>(g),
            ("", "v1", "Service") => add::<core::v1::Service>(g),
            ("", "v1", "Event") => add::<core::v1::Event>(g),
            ("apps", "v1", "ReplicaSet") => add::<apps::v1::ReplicaSet>(g),
            ("apps", "v1", "Deployment") => add::<apps::v1::Deployment>(g),
            ("coordination.k8s.io", "v1", "Lease") => add::<coordination::v1::Lease>(g),
            ("", "v1", "ServiceAccount") => add::<core::v1::ServiceAccount>(g),
            ("", "v1", "PersistentVolumeClaim") => add::<core::v1::PersistentVolumeClaim>(g),
            ("apps", "v1", "StatefulSet") => add::<apps::v1::StatefulSet>(g),
            ("apps", "v1", "DaemonSet") => add::<apps::v1::DaemonSet>(g),
            ("apps", "v1", "ControllerRevision") => add::<apps::v1::ControllerRevision>(g),
            ("batch", "v1", "Job") => add::<batch::v1::Job>(g),
            ("batch", "v1", "CronJob") => add::<batch::v1::CronJob>(g),
            ("networking.k8s.io", "v1", "Ingress") => add::<networking::v1::Ingress>(g),
            ("networking.k8s.io", "v1", "NetworkPolicy") => add::<networking::v1::NetworkPolicy>(g),
            ("policy", "v1", "PodDisruptionBudget") => add::<policy::v1::PodDisruptionBudget>(g),
            ("autoscaling", "v2", "HorizontalPodAutoscaler") => {
                add::<autoscaling::v2::HorizontalPodAutoscaler>(g)
            }
            ("rbac.authorization.k8s.io", "v1", "Role") => add::<rbac::v1::Role>(g),
            ("rbac.authorization.k8s.io", "v1", "RoleBinding") => add::<rbac::v1::RoleBinding>(g),
            ("rbac.authorization.k8s.io", "v1", "ClusterRole") => add::<rbac::v1::ClusterRole>(g),
            ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
                add::<rbac::v1::ClusterRoleBinding>(g)
            }
            ("", "v1", "PersistentVolume") => add::<core::v1::PersistentVolume>(g),
            ("", "v1", "Endpoints") => add::<core::v1::Endpoints>(g),
            ("", "v1", "ResourceQuota") => add::<core::v1::ResourceQuota>(g),
            ("", "v1", "LimitRange") => add::<core::v1::LimitRange>(g),
            ("discovery.k8s.io", "v1", "EndpointSlice") => add::<discovery::v1::EndpointSlice>(g),
            ("networking.k8s.io", "v1", "IngressClass") => add::<networking::v1::IngressClass>(g),
            ("storage.k8s.io", "v1", "StorageClass") => add::<storage::v1::StorageClass>(g),
            ("scheduling.k8s.io", "v1", "PriorityClass") => add::<scheduling::v1::PriorityClass>(g),
            ("events.k8s.io", "v1", "Event") => add::<events::v1::Event>(g),
            ("", "v1", "ReplicationController") => add::<core::v1::ReplicationController>(g),
            ("storage.k8s.io", "v1", "CSINode") => add::<storage::v1::CSINode>(g),
            ("storage.k8s.io", "v1", "CSIDriver") => add::<storage::v1::CSIDriver>(g),
            ("storage.k8s.io", "v1", "CSIStorageCapacity") => {
                add::<storage::v1::CSIStorageCapacity>(g)
            }
            ("", "v1", "Binding") => add::<core::v1::Binding>(g),
            ("policy", "v1", "Eviction") => add::<policy::v1::Eviction>(g),
            ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy") => {
                add::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>(g)
            }
            ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding") => add::<
                k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
            >(g),
            ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => add::<
                k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
            >(g),
            _ => None,
        }
    }

    /// Every definition added so far, keyed by schema name, rewritten for the dialect.
    ///
    /// `metadata` is never listed as required: k8s-openapi's Rust types make it so, the
    /// Kubernetes API does not (`kubectl explain` would print it as `-required-`).
    pub fn into_definitions(mut self) -> Map<String, Value> {
        let mut defs = self.generator.take_definitions(true);
        for schema in defs.values_mut() {
            let Some(obj) = schema.as_object_mut() else {
                continue;
            };
            if let Some(Value::Array(required)) = obj.get_mut("required") {
                required.retain(|field| field != "metadata");
                if required.is_empty() {
                    obj.remove("required");
                }
            }
        }
        defs
    }
}

/// `schema` with its reference followed — a bare `$ref`, or the one entry of an `allOf`
/// (how schemars writes a reference with a description) — to its entry in `definitions`
/// (OpenAPI 3 dialect, [`TypedSchemas::into_definitions`]), through chains of up to eight.
/// A reference to nothing defined leaves the schema as it is.
pub fn resolve_ref<'a>(definitions: &'a Map<String, Value>, mut schema: &'a Value) -> &'a Value {
    for _ in 0..8 {
        let reference = schema
            .get("$ref")
            .or_else(|| schema.pointer("/allOf/0/$ref"))
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/components/schemas/"));
        match reference.and_then(|name| definitions.get(name)) {
            Some(target) => schema = target,
            None => break,
        }
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve<'a>(defs: &'a Map<String, Value>, schema: &'a Value, prefix: &str) -> &'a Value {
        let reference = schema
            .get("$ref")
            .or_else(|| schema.pointer("/allOf/0/$ref"))
            .and_then(Value::as_str);
        match reference {
            Some(r) => {
                let name = r.strip_prefix(prefix).unwrap_or_else(|| panic!("{r}"));
                defs.get(name)
                    .unwrap_or_else(|| panic!("{name} is not defined"))
            }
            None => schema,
        }
    }

    #[test]
    fn pod_reaches_container_fields_in_both_dialects() {
        for (dialect, prefix) in [
            (SchemaDialect::OpenApi3, "#/components/schemas/"),
            (SchemaDialect::Swagger2, "#/definitions/"),
        ] {
            let mut typed = TypedSchemas::new(dialect);
            assert_eq!(
                typed.add_kind("", "v1", "Pod").as_deref(),
                Some("io.k8s.api.core.v1.Pod")
            );
            let defs = typed.into_definitions();
            let pod = &defs["io.k8s.api.core.v1.Pod"];
            let spec = resolve(&defs, &pod["properties"]["spec"], prefix);
            let containers = &spec["properties"]["containers"];
            assert_eq!(containers["type"], "array");
            let container = resolve(&defs, &containers["items"], prefix);
            assert_eq!(container["properties"]["image"]["type"], "string");
            assert!(container["required"]
                .as_array()
                .is_some_and(|r| r.contains(&Value::from("name"))));
            let meta = resolve(&defs, &pod["properties"]["metadata"], prefix);
            assert!(meta["properties"]["labels"].is_object());
            assert!(pod.get("required").is_none(), "{}", pod["required"]);
        }
    }

    #[test]
    fn a_reference_with_a_description_is_wrapped_in_all_of() {
        let mut typed = TypedSchemas::new(SchemaDialect::OpenApi3);
        typed.add_kind("apps", "v1", "Deployment");
        let defs = typed.into_definitions();
        let spec = &defs["io.k8s.api.apps.v1.Deployment"]["properties"]["spec"];
        assert!(spec.get("$ref").is_none(), "{spec}");
        assert_eq!(
            spec["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"
        );
        assert!(spec["description"].is_string());
    }

    #[test]
    fn unknown_kinds_have_no_typed_schema() {
        let mut typed = TypedSchemas::new(SchemaDialect::OpenApi3);
        assert_eq!(typed.add_kind("example.com", "v1", "Widget"), None);
        assert_eq!(typed.add_kind("", "v2", "Pod"), None);
        assert!(typed.into_definitions().is_empty());
    }
}
