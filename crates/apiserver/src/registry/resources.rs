//! The table of served resources: names, kinds, scope, verbs and selectable fields.
//!
//! Everything that varies per kind and is plain data lives here, so discovery, OpenAPI,
//! routing, field selectors and storage keys all read one definition.

/// One field-selector field: its label, the JSON path it reads and the value an absent field
/// compares as (Kubernetes renders absent booleans as "false").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectableField {
    /// The selector label, e.g. `spec.nodeName`.
    pub label: &'static str,
    /// Dotted JSON path in the object, e.g. `spec.nodeName`.
    pub path: &'static str,
    /// What an absent value reads as.
    pub default: &'static str,
}

const fn field(label: &'static str) -> SelectableField {
    SelectableField {
        label,
        path: label,
        default: "",
    }
}

const fn field_default(label: &'static str, default: &'static str) -> SelectableField {
    SelectableField {
        label,
        path: label,
        default,
    }
}

use super::apiextensions::CustomResource;

/// Which of Kubernetes' name rules a resource's object names follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// A DNS-1123 label (namespaces, services).
    Label,
    /// A DNS-1123 subdomain (most kinds).
    Subdomain,
    /// A path segment: anything but `.`, `..`, `/` and `%` (RBAC's roles and bindings, as in
    /// `system:controller:foo`).
    PathSegment,
}

/// A served resource type and everything the server needs to know about it.
#[derive(Debug)]
pub struct ResourceInfo {
    /// API group, "" for the core group.
    pub group: &'static str,
    /// API version, e.g. `v1`.
    pub version: &'static str,
    /// Plural resource name used in URLs, e.g. `pods`.
    pub resource: &'static str,
    /// Singular name, e.g. `pod`.
    pub singular: &'static str,
    /// Kind, e.g. `Pod`.
    pub kind: &'static str,
    /// Short names kubectl accepts, e.g. `po`.
    pub short_names: &'static [&'static str],
    /// Discovery categories (kubectl's `all`).
    pub categories: &'static [&'static str],
    /// True if objects live in a namespace.
    pub namespaced: bool,
    /// True if the resource has a `status` subresource.
    pub has_status: bool,
    /// True if the server keeps `metadata.generation` for it: 1 on create, bumped when
    /// anything outside `metadata` and `status` changes. kube-apiserver does so for
    /// workloads and a few other kinds (checked against kube-apiserver 1.24, BENCHMARKS.md,
    /// session 20; pods joined them in Kubernetes 1.33, after the 1.32 this server reports).
    /// Other kinds keep the generation a client sent on create and the stored one after.
    pub tracks_generation: bool,
    /// What a name of this resource may look like.
    pub names: NameRule,
    /// Fields usable in field selectors beyond `metadata.name`/`metadata.namespace`.
    pub fields: &'static [SelectableField],
    /// For a custom resource, what its CustomResourceDefinition says of it (schema,
    /// subresources, printer columns); `None` for the built-in kinds.
    pub custom: Option<&'static CustomResource>,
}

impl ResourceInfo {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The list kind, e.g. `PodList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The storage key prefix of this resource, ending in '/': `/registry/pods/`.
    pub fn key_prefix(&self) -> String {
        if self.group.is_empty() {
            format!("/registry/{}/", self.resource)
        } else {
            format!("/registry/{}/{}/", self.group, self.resource)
        }
    }

    /// The key of one object below [`ResourceInfo::key_prefix`]: `ns/name` or `name`.
    pub fn object_key(&self, namespace: &str, name: &str) -> String {
        if self.namespaced {
            format!("{namespace}/{name}")
        } else {
            name.to_string()
        }
    }

    /// Every selectable field label, including the two every resource has.
    pub fn field_labels(&self) -> Vec<&'static str> {
        let mut v = vec!["metadata.name", "metadata.namespace"];
        v.extend(self.fields.iter().map(|f| f.label));
        v
    }

    /// The verbs served on this resource (for discovery).
    pub fn verbs(&self) -> &'static [&'static str] {
        &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ]
    }
}

const POD_FIELDS: &[SelectableField] = &[
    field("spec.nodeName"),
    field("spec.restartPolicy"),
    field("spec.schedulerName"),
    field("spec.serviceAccountName"),
    field_default("spec.hostNetwork", "false"),
    field("status.phase"),
    field("status.podIP"),
    field("status.nominatedNodeName"),
];

const EVENT_FIELDS: &[SelectableField] = &[
    field("involvedObject.kind"),
    field("involvedObject.namespace"),
    field("involvedObject.name"),
    field("involvedObject.uid"),
    field("involvedObject.apiVersion"),
    field("involvedObject.resourceVersion"),
    field("involvedObject.fieldPath"),
    field("reason"),
    field("reportingComponent"),
    SelectableField {
        label: "source",
        path: "source.component",
        default: "",
    },
    field("type"),
];

/// The selectable fields of `events.k8s.io/v1` events: the core ones under their new names
/// (Kubernetes converts these labels to the core event's fields).
const EVENTS_V1_FIELDS: &[SelectableField] = &[
    field("regarding.kind"),
    field("regarding.namespace"),
    field("regarding.name"),
    field("regarding.uid"),
    field("regarding.apiVersion"),
    field("regarding.resourceVersion"),
    field("regarding.fieldPath"),
    field("reason"),
    field("reportingController"),
    field("type"),
];

/// Every built-in resource listwatch serves, in discovery order. Custom resources join them
/// at run time (see [`crate::registry::apiextensions`]).
pub static RESOURCES: &[ResourceInfo] = &[
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        short_names: &["ns"],
        categories: &[],
        namespaced: false,
        has_status: true,
        tracks_generation: false,
        names: NameRule::Label,
        fields: &[field("status.phase")],
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "pods",
        singular: "pod",
        kind: "Pod",
        short_names: &["po"],
        categories: &["all"],
        namespaced: true,
        has_status: true,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: POD_FIELDS,
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "nodes",
        singular: "node",
        kind: "Node",
        short_names: &["no"],
        categories: &[],
        namespaced: false,
        has_status: true,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[field_default("spec.unschedulable", "false")],
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        short_names: &["cm"],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "secrets",
        singular: "secret",
        kind: "Secret",
        short_names: &[],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[field("type")],
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "services",
        singular: "service",
        kind: "Service",
        short_names: &["svc"],
        categories: &["all"],
        namespaced: true,
        has_status: true,
        tracks_generation: false,
        names: NameRule::Label,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "events",
        singular: "event",
        kind: "Event",
        short_names: &["ev"],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: EVENT_FIELDS,
        custom: None,
    },
    ResourceInfo {
        group: "apps",
        version: "v1",
        resource: "replicasets",
        singular: "replicaset",
        kind: "ReplicaSet",
        short_names: &["rs"],
        categories: &["all"],
        namespaced: true,
        has_status: true,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[field("status.replicas")],
        custom: None,
    },
    ResourceInfo {
        group: "apps",
        version: "v1",
        resource: "deployments",
        singular: "deployment",
        kind: "Deployment",
        short_names: &["deploy"],
        categories: &["all"],
        namespaced: true,
        has_status: true,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "coordination.k8s.io",
        version: "v1",
        resource: "leases",
        singular: "lease",
        kind: "Lease",
        short_names: &[],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "serviceaccounts",
        singular: "serviceaccount",
        kind: "ServiceAccount",
        short_names: &["sa"],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        kind: "PersistentVolumeClaim",
        short_names: &["pvc"],
        categories: &[],
        namespaced: true,
        has_status: true,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "apps",
        version: "v1",
        resource: "statefulsets",
        singular: "statefulset",
        kind: "StatefulSet",
        short_names: &["sts"],
        categories: &["all"],
        namespaced: true,
        has_status: true,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "apps",
        version: "v1",
        resource: "daemonsets",
        singular: "daemonset",
        kind: "DaemonSet",
        short_names: &["ds"],
        categories: &["all"],
        namespaced: true,
        has_status: true,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    // The history DaemonSets and StatefulSets keep of their templates. Its `data` is
    // immutable and its `revision` is not (see the strategy's validation).
    ResourceInfo {
        group: "apps",
        version: "v1",
        resource: "controllerrevisions",
        singular: "controllerrevision",
        kind: "ControllerRevision",
        short_names: &[],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "batch",
        version: "v1",
        resource: "jobs",
        singular: "job",
        kind: "Job",
        short_names: &[],
        categories: &["all"],
        namespaced: true,
        has_status: true,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "batch",
        version: "v1",
        resource: "cronjobs",
        singular: "cronjob",
        kind: "CronJob",
        short_names: &["cj"],
        categories: &["all"],
        namespaced: true,
        has_status: true,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "networking.k8s.io",
        version: "v1",
        resource: "ingresses",
        singular: "ingress",
        kind: "Ingress",
        short_names: &["ing"],
        categories: &[],
        namespaced: true,
        has_status: true,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "networking.k8s.io",
        version: "v1",
        resource: "networkpolicies",
        singular: "networkpolicy",
        kind: "NetworkPolicy",
        short_names: &["netpol"],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "policy",
        version: "v1",
        resource: "poddisruptionbudgets",
        singular: "poddisruptionbudget",
        kind: "PodDisruptionBudget",
        short_names: &["pdb"],
        categories: &[],
        namespaced: true,
        has_status: true,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "autoscaling",
        version: "v2",
        resource: "horizontalpodautoscalers",
        singular: "horizontalpodautoscaler",
        kind: "HorizontalPodAutoscaler",
        short_names: &["hpa"],
        categories: &["all"],
        namespaced: true,
        has_status: true,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        resource: "roles",
        singular: "role",
        kind: "Role",
        short_names: &[],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: false,
        names: NameRule::PathSegment,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        resource: "rolebindings",
        singular: "rolebinding",
        kind: "RoleBinding",
        short_names: &[],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: false,
        names: NameRule::PathSegment,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        resource: "clusterroles",
        singular: "clusterrole",
        kind: "ClusterRole",
        short_names: &[],
        categories: &[],
        namespaced: false,
        has_status: false,
        tracks_generation: false,
        names: NameRule::PathSegment,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        resource: "clusterrolebindings",
        singular: "clusterrolebinding",
        kind: "ClusterRoleBinding",
        short_names: &[],
        categories: &[],
        namespaced: false,
        has_status: false,
        tracks_generation: false,
        names: NameRule::PathSegment,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "persistentvolumes",
        singular: "persistentvolume",
        kind: "PersistentVolume",
        short_names: &["pv"],
        categories: &[],
        namespaced: false,
        has_status: true,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "endpoints",
        singular: "endpoints",
        kind: "Endpoints",
        short_names: &["ep"],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "resourcequotas",
        singular: "resourcequota",
        kind: "ResourceQuota",
        short_names: &["quota"],
        categories: &[],
        namespaced: true,
        has_status: true,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "limitranges",
        singular: "limitrange",
        kind: "LimitRange",
        short_names: &["limits"],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "discovery.k8s.io",
        version: "v1",
        resource: "endpointslices",
        singular: "endpointslice",
        kind: "EndpointSlice",
        short_names: &[],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "networking.k8s.io",
        version: "v1",
        resource: "ingressclasses",
        singular: "ingressclass",
        kind: "IngressClass",
        short_names: &[],
        categories: &[],
        namespaced: false,
        has_status: false,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "storage.k8s.io",
        version: "v1",
        resource: "storageclasses",
        singular: "storageclass",
        kind: "StorageClass",
        short_names: &["sc"],
        categories: &[],
        namespaced: false,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "scheduling.k8s.io",
        version: "v1",
        resource: "priorityclasses",
        singular: "priorityclass",
        kind: "PriorityClass",
        short_names: &["pc"],
        categories: &[],
        namespaced: false,
        has_status: false,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        resource: "replicationcontrollers",
        singular: "replicationcontroller",
        kind: "ReplicationController",
        short_names: &["rc"],
        categories: &["all"],
        namespaced: true,
        has_status: true,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[field("status.replicas")],
        custom: None,
    },
    // The CSI kinds kube-scheduler's volume plugins watch (every scheduler start lists them).
    ResourceInfo {
        group: "storage.k8s.io",
        version: "v1",
        resource: "csinodes",
        singular: "csinode",
        kind: "CSINode",
        short_names: &[],
        categories: &[],
        namespaced: false,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    // Kubernetes bumps a CSIDriver's generation only when its token requests or
    // republishing change, and sets none on create: closer to a kind that keeps what it
    // was given than to one that tracks its spec.
    ResourceInfo {
        group: "storage.k8s.io",
        version: "v1",
        resource: "csidrivers",
        singular: "csidriver",
        kind: "CSIDriver",
        short_names: &[],
        categories: &[],
        namespaced: false,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "storage.k8s.io",
        version: "v1",
        resource: "csistoragecapacities",
        singular: "csistoragecapacity",
        kind: "CSIStorageCapacity",
        short_names: &[],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    // Stored with the core events (see [`super::cohabitation`]): one object, two APIs.
    ResourceInfo {
        group: "events.k8s.io",
        version: "v1",
        resource: "events",
        singular: "event",
        kind: "Event",
        short_names: &["ev"],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: false,
        names: NameRule::Subdomain,
        fields: EVENTS_V1_FIELDS,
        custom: None,
    },
    ResourceInfo {
        group: "apiextensions.k8s.io",
        version: "v1",
        resource: "customresourcedefinitions",
        singular: "customresourcedefinition",
        kind: "CustomResourceDefinition",
        short_names: &["crd", "crds"],
        categories: &["api-extensions"],
        namespaced: false,
        has_status: true,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "admissionregistration.k8s.io",
        version: "v1",
        resource: "validatingadmissionpolicies",
        singular: "validatingadmissionpolicy",
        kind: "ValidatingAdmissionPolicy",
        short_names: &[],
        categories: &["api-extensions"],
        namespaced: false,
        has_status: true,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
    ResourceInfo {
        group: "admissionregistration.k8s.io",
        version: "v1",
        resource: "validatingadmissionpolicybindings",
        singular: "validatingadmissionpolicybinding",
        kind: "ValidatingAdmissionPolicyBinding",
        short_names: &[],
        categories: &["api-extensions"],
        namespaced: false,
        has_status: false,
        tracks_generation: true,
        names: NameRule::Subdomain,
        fields: &[],
        custom: None,
    },
];

/// Looks up a resource by group, version and plural name.
pub fn find(group: &str, version: &str, resource: &str) -> Option<&'static ResourceInfo> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.resource == resource)
}

/// The distinct (group, version) pairs of the built-in resources, core first.
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    group_versions_of(RESOURCES)
}

/// The distinct (group, version) pairs of `resources`, in their order.
pub fn group_versions_of<'a>(
    resources: impl IntoIterator<Item = &'a ResourceInfo>,
) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for r in resources {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}
