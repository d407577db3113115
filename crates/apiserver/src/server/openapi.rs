//! OpenAPI documents: `/openapi/v3` (the index), `/openapi/v3/api/v1` and
//! `/openapi/v3/apis/{group}/{version}` (one OpenAPI 3.0 document per group version), and
//! `/openapi/v2` (one Swagger 2.0 document for everything).
//!
//! The documents are generated from [`crate::registry::resources::RESOURCES`] and exist for
//! clients, not for code generation. What they must get right:
//!
//! - **kubectl's field-validation probe.** Before `create -f` / `apply -f`, kubectl 1.32 looks in
//!   the group version's v3 document for a `patch` operation whose
//!   `x-kubernetes-group-version-kind` is the object's GVK, and checks that it declares the
//!   `fieldValidation` query parameter. If it does, validation is left to the server; if the
//!   documents are missing, kubectl refuses to send anything. So every kind gets `patch`
//!   operations (item and `/status`) carrying `fieldValidation`, and the first matching one kubectl
//!   happens to see must have it: all of them do.
//! - **Every field described.** Each kind has a schema named as Kubernetes names it
//!   (`io.k8s.api.core.v1.Pod`) with `x-kubernetes-group-version-kind`, and the full schemas of
//!   the types it reaches ([`crate::schema::openapi_types`]), so `kubectl explain pods.spec.containers`
//!   works. A kind without a typed schema gets an outline: typed `metadata` and free-form bodies
//!   marked `x-kubernetes-preserve-unknown-fields`. Field checking stays the server's job.
//! - **No strategic-merge-patch content type is advertised.** Client-side `kubectl apply` builds
//!   its strategic merge patch from the OpenAPI schema when the document says the kind accepts
//!   `application/strategic-merge-patch+json`; our schemas carry no merge keys, so it
//!   would warn and produce list-replacing patches. Without that content type kubectl falls back
//!   to its compiled-in Go types, which have the real merge keys. The server still accepts the
//!   strategic merge patches kubectl then sends.
//!
//! The index gives each document a URL with `?hash=`, a hex digest of the document
//! ([`document_hash`]); it changes whenever the document does, so clients may cache by URL.
//! The HTTP layer should ignore the `hash` query parameter when serving a document.

use serde_json::{json, Map, Value};
use std::sync::OnceLock;

use super::discovery::GIT_VERSION;
use crate::registry::resources::{group_versions, group_versions_of, ResourceInfo, RESOURCES};
use crate::schema::openapi_types::{SchemaDialect, TypedSchemas};

/// Package prefix of the apimachinery meta types (`ObjectMeta`, `Status`, …).
const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";

/// Content types accepted by `patch` operations (see the module docs for why strategic merge
/// patch is not listed).
const PATCH_CONTENT_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

/// 64-bit FNV-1a of `data`. Not cryptographic: used to derive cache-busting hashes and stable
/// identifiers, where a change of input must (with overwhelming likelihood) change the output.
pub fn fnv1a_64(data: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    data.iter().fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

/// The digest the v3 index puts in a document's URL: [`fnv1a_64`] of the document's compact
/// JSON, as 16 upper-case hex digits. Equal documents give equal digests.
pub fn document_hash(doc: &Value) -> String {
    format!("{:016X}", fnv1a_64(doc.to_string().as_bytes()))
}

/// The index key of a group version below `/openapi/v3/`: `api/v1` for the core group,
/// `apis/{group}/{version}` otherwise.
pub fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `GET /openapi/v3`: `{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=…"},
/// "apis/apps/v1": {…}, …}}`, one entry per served group version. Every URL's path resolves
/// through [`openapi_v3_document`].
pub fn openapi_v3_root(custom: &[&'static ResourceInfo]) -> Value {
    let mut paths = Map::new();
    for doc in v3_documents() {
        let key = group_version_path(doc.group, doc.version);
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", doc.hash)}),
        );
    }
    for (group, version) in group_versions_of(custom.iter().copied()) {
        let key = group_version_path(group, version);
        let hash = document_hash(&v3_document_of(custom, group, version));
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
        );
    }
    json!({ "paths": paths })
}

/// One group version's v3 document with its digest, built once.
struct V3Document {
    group: &'static str,
    version: &'static str,
    doc: Value,
    hash: String,
}

/// The documents follow the static resource table, so they never change while the process
/// runs: each is built (a few milliseconds with the typed schemas) on first use only.
fn v3_documents() -> &'static [V3Document] {
    static DOCS: OnceLock<Vec<V3Document>> = OnceLock::new();
    DOCS.get_or_init(|| {
        group_versions()
            .into_iter()
            .map(|(group, version)| {
                let doc = v3_document(group, version);
                let hash = document_hash(&doc);
                V3Document {
                    group,
                    version,
                    doc,
                    hash,
                }
            })
            .collect()
    })
}

/// `GET /openapi/v3/{gv_path}`: the OpenAPI 3.0 document of one group version, where `gv_path`
/// is an index key (`api/v1`, `apis/apps/v1`). A leading or trailing `/`, a leading
/// `openapi/v3/` and a `?query` are tolerated. `None` when no such group version is served.
pub fn openapi_v3_document(custom: &[&'static ResourceInfo], gv_path: &str) -> Option<Value> {
    let path = gv_path.split('?').next().unwrap_or_default();
    let path = path.trim_matches('/');
    let path = path.strip_prefix("openapi/v3/").unwrap_or(path);
    let segments: Vec<&str> = path.split('/').collect();
    let (group, version) = match segments.as_slice() {
        ["api", version] => ("", *version),
        ["apis", group, version] if !group.is_empty() => (*group, *version),
        _ => return None,
    };
    v3_documents()
        .iter()
        .find(|d| d.group == group && d.version == version)
        .map(|d| d.doc.clone())
        .or_else(|| {
            custom
                .iter()
                .any(|r| r.group == group && r.version == version)
                .then(|| v3_document_of(custom, group, version))
        })
}

/// `GET /openapi/v2`: one Swagger 2.0 document with the operations and definitions of every
/// served group version (same operations, parameters and schemas as the v3 documents).
///
/// Note for the HTTP layer: client-go asks for v2 as protobuf
/// (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`) and cannot read JSON; answer
/// such a request with 406 rather than this JSON, so it fails cleanly and falls back.
pub fn openapi_v2() -> Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(v2_document).clone()
}

fn v2_document() -> Value {
    let mut paths = Map::new();
    for r in RESOURCES {
        for item in path_items(r) {
            paths.insert(item.path.clone(), item.render(r, Dialect::V2));
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "definitions": schemas(&group_versions(), Dialect::V2),
    })
}

/// The name Kubernetes gives a kind's schema: `io.k8s.api.core.v1.Pod`,
/// `io.k8s.api.apps.v1.Deployment`, `io.k8s.api.coordination.v1.Lease`. Groups outside `k8s.io`
/// get their reversed domain (`com.example.stable.v1.CronTab`), as custom resources do.
pub fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let package = if group.is_empty() {
        "io.k8s.api.core".to_string()
    } else if group == "apiextensions.k8s.io" {
        // Served by the apiextensions-apiserver in Kubernetes, named after its Go package.
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions".to_string()
    } else if let Some(base) = group.strip_suffix(".k8s.io") {
        let first = base.split('.').next().unwrap_or(base);
        format!("io.k8s.api.{first}")
    } else if !group.contains('.') {
        format!("io.k8s.api.{group}")
    } else {
        group.rsplit('.').collect::<Vec<_>>().join(".")
    };
    format!("{package}.{version}.{kind}")
}

// ---------------------------------------------------------------------------------------------
// Documents

fn v3_document(group: &str, version: &str) -> Value {
    let builtin: Vec<&'static ResourceInfo> = RESOURCES.iter().collect();
    v3_document_of(&builtin, group, version)
}

/// The v3 document of `group`/`version` among `resources`.
fn v3_document_of(resources: &[&'static ResourceInfo], group: &str, version: &str) -> Value {
    let members: Vec<&'static ResourceInfo> = resources
        .iter()
        .copied()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    let mut paths = Map::new();
    for r in &members {
        for item in path_items(r) {
            paths.insert(item.path.clone(), item.render(r, Dialect::V3));
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas_of(&members, &[(group, version)], Dialect::V3)},
    })
}

/// The two document flavours differ in where schemas live and how parameters, bodies and
/// responses are spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    V2,
    V3,
}

impl Dialect {
    fn reference(self, name: &str) -> Value {
        match self {
            Dialect::V2 => json!({"$ref": format!("#/definitions/{name}")}),
            Dialect::V3 => json!({"$ref": format!("#/components/schemas/{name}")}),
        }
    }

    /// A property whose type is another schema, with its own description. OpenAPI 3.0 ignores
    /// siblings of `$ref`, so v3 wraps the reference in `allOf` as Kubernetes does.
    fn embed(self, name: &str, description: &str) -> Value {
        match self {
            Dialect::V2 => json!({
                "$ref": format!("#/definitions/{name}"),
                "description": description,
            }),
            Dialect::V3 => json!({
                "allOf": [self.reference(name)],
                "default": {},
                "description": description,
            }),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parameters

#[derive(Debug, Clone, Copy)]
enum ParamType {
    String,
    Integer,
    Boolean,
}

#[derive(Debug)]
struct Param {
    name: &'static str,
    in_path: bool,
    ty: ParamType,
    description: &'static str,
}

impl Param {
    fn render(&self, dialect: Dialect) -> Value {
        let ty = match self.ty {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Boolean => "boolean",
        };
        let mut m = Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert(
            "in".into(),
            json!(if self.in_path { "path" } else { "query" }),
        );
        m.insert("description".into(), json!(self.description));
        if self.in_path {
            m.insert("required".into(), json!(true));
        }
        match dialect {
            Dialect::V3 => {
                m.insert("schema".into(), json!({"type": ty, "uniqueItems": true}));
            }
            Dialect::V2 => {
                m.insert("type".into(), json!(ty));
                m.insert("uniqueItems".into(), json!(true));
            }
        }
        Value::Object(m)
    }
}

const fn query(name: &'static str, ty: ParamType, description: &'static str) -> Param {
    Param {
        name,
        in_path: false,
        ty,
        description,
    }
}

static NAME: Param = Param {
    name: "name",
    in_path: true,
    ty: ParamType::String,
    description: "name of the object",
};
static NAMESPACE: Param = Param {
    name: "namespace",
    in_path: true,
    ty: ParamType::String,
    description: "object name and auth scope, such as for teams and projects",
};
static PRETTY: Param = query(
    "pretty",
    ParamType::String,
    "If 'true', the output is indented.",
);
static DRY_RUN: Param = query(
    "dryRun",
    ParamType::String,
    "When present (the only valid value is 'All'), the request is validated but not persisted.",
);
static FIELD_MANAGER: Param = query(
    "fieldManager",
    ParamType::String,
    "A name for the actor making the change, recorded in managedFields.",
);
static FIELD_VALIDATION: Param = query(
    "fieldValidation",
    ParamType::String,
    "How the server treats unknown or duplicate fields in the body: 'Ignore' drops them, \
     'Warn' drops them and returns a warning per field, 'Strict' fails the request.",
);
static FORCE: Param = query(
    "force",
    ParamType::Boolean,
    "Server-side apply only: take ownership of fields held by other managers.",
);
static GRACE_PERIOD: Param = query(
    "gracePeriodSeconds",
    ParamType::Integer,
    "Seconds to wait before the object is removed; zero deletes at once.",
);
static ORPHAN: Param = query(
    "orphanDependents",
    ParamType::Boolean,
    "Deprecated: use propagationPolicy. Whether dependents are orphaned.",
);
static PROPAGATION: Param = query(
    "propagationPolicy",
    ParamType::String,
    "How dependents are garbage collected: 'Orphan', 'Background' or 'Foreground'.",
);
static ALLOW_BOOKMARKS: Param = query(
    "allowWatchBookmarks",
    ParamType::Boolean,
    "Watch only: the server may send BOOKMARK events carrying just a resourceVersion.",
);
static CONTINUE: Param = query(
    "continue",
    ParamType::String,
    "The opaque token of the previous page of a paginated list.",
);
static FIELD_SELECTOR: Param = query(
    "fieldSelector",
    ParamType::String,
    "Restrict the result to objects whose fields match, e.g. 'spec.nodeName=n1'.",
);
static LABEL_SELECTOR: Param = query(
    "labelSelector",
    ParamType::String,
    "Restrict the result to objects whose labels match.",
);
static LIMIT: Param = query(
    "limit",
    ParamType::Integer,
    "The most items to return; a continue token is returned if more remain.",
);
static RESOURCE_VERSION: Param = query(
    "resourceVersion",
    ParamType::String,
    "Which version of the collection to read or to watch from; see resourceVersionMatch.",
);
static RESOURCE_VERSION_MATCH: Param = query(
    "resourceVersionMatch",
    ParamType::String,
    "How resourceVersion is applied to a list: 'NotOlderThan' or 'Exact'.",
);
static SEND_INITIAL_EVENTS: Param = query(
    "sendInitialEvents",
    ParamType::Boolean,
    "Watch only: begin with an ADDED event per current object, then a marked BOOKMARK.",
);
static TIMEOUT_SECONDS: Param = query(
    "timeoutSeconds",
    ParamType::Integer,
    "Close a list or watch call after this many seconds.",
);
static WATCH: Param = query(
    "watch",
    ParamType::Boolean,
    "Stream add, update and delete events instead of returning a list.",
);

static LIST_PARAMS: &[&Param] = &[
    &ALLOW_BOOKMARKS,
    &CONTINUE,
    &FIELD_SELECTOR,
    &LABEL_SELECTOR,
    &LIMIT,
    &RESOURCE_VERSION,
    &RESOURCE_VERSION_MATCH,
    &SEND_INITIAL_EVENTS,
    &TIMEOUT_SECONDS,
    &WATCH,
];
static WRITE_PARAMS: &[&Param] = &[&DRY_RUN, &FIELD_MANAGER, &FIELD_VALIDATION];
static PATCH_PARAMS: &[&Param] = &[&DRY_RUN, &FIELD_MANAGER, &FIELD_VALIDATION, &FORCE];
static DELETE_PARAMS: &[&Param] = &[&DRY_RUN, &GRACE_PERIOD, &ORPHAN, &PROPAGATION];

// ---------------------------------------------------------------------------------------------
// Paths and operations

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    None,
    Object,
    Patch,
    DeleteOptions,
}

#[derive(Debug)]
struct Operation {
    method: &'static str,
    action: &'static str,
    id: String,
    description: String,
    params: &'static [&'static Param],
    body: Body,
    statuses: &'static [u16],
    /// The schema of the success responses.
    response: String,
    /// The (group, version, kind) the operation takes, when it is not the resource's own
    /// (a pod's binding and eviction).
    gvk: Option<(&'static str, &'static str, &'static str)>,
}

#[derive(Debug)]
struct PathItem {
    path: String,
    params: Vec<&'static Param>,
    ops: Vec<Operation>,
}

/// `core`/`Core`, `apps`/`Apps`, `coordination`/`Coordination`, `rbacAuthorization`/
/// `RbacAuthorization`: the group's spelling in tags and operation ids.
fn group_words(group: &str) -> (String, String) {
    if group.is_empty() {
        return ("core".into(), "Core".into());
    }
    let base = group.strip_suffix(".k8s.io").unwrap_or(group);
    let mut tag = String::new();
    let mut id = String::new();
    for (i, word) in base.split(['.', '-']).filter(|w| !w.is_empty()).enumerate() {
        let capital = capitalize(word);
        tag.push_str(if i == 0 { word } else { &capital });
        id.push_str(&capital);
    }
    (tag, id)
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn path_items(r: &ResourceInfo) -> Vec<PathItem> {
    let prefix = if r.group.is_empty() {
        format!("/api/{}", r.version)
    } else {
        format!("/apis/{}/{}", r.group, r.version)
    };
    let (_, group_id) = group_words(r.group);
    let gv_id = format!("{group_id}{}", capitalize(r.version));
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let kind = r.kind;
    let object = schema_name(r.group, r.version, kind);
    let list = schema_name(r.group, r.version, &r.list_kind());
    let (collection, mut scope_params) = if r.namespaced {
        (
            format!("{prefix}/namespaces/{{namespace}}/{}", r.resource),
            vec![&NAMESPACE],
        )
    } else {
        (format!("{prefix}/{}", r.resource), Vec::new())
    };
    let op = |method, action, verb: &str, suffix: &str, description: String| Operation {
        method,
        action,
        id: format!("{verb}{gv_id}{scope}{kind}{suffix}"),
        description,
        params: &[],
        body: Body::None,
        statuses: &[200],
        response: object.clone(),
        gvk: None,
    };

    let mut items = Vec::new();
    let mut collection_params = scope_params.clone();
    collection_params.push(&PRETTY);
    items.push(PathItem {
        path: collection.clone(),
        params: collection_params,
        ops: vec![
            Operation {
                params: LIST_PARAMS,
                response: list.clone(),
                ..op(
                    "get",
                    "list",
                    "list",
                    "",
                    format!("list or watch objects of kind {kind}"),
                )
            },
            Operation {
                params: WRITE_PARAMS,
                body: Body::Object,
                statuses: &[200, 201, 202],
                ..op("post", "post", "create", "", format!("create a {kind}"))
            },
        ],
    });

    scope_params.insert(0, &NAME);
    scope_params.push(&PRETTY);
    items.push(PathItem {
        path: format!("{collection}/{{name}}"),
        params: scope_params.clone(),
        ops: vec![
            op(
                "get",
                "get",
                "read",
                "",
                format!("read the specified {kind}"),
            ),
            Operation {
                params: WRITE_PARAMS,
                body: Body::Object,
                statuses: &[200, 201],
                ..op(
                    "put",
                    "put",
                    "replace",
                    "",
                    format!("replace the specified {kind}"),
                )
            },
            Operation {
                params: PATCH_PARAMS,
                body: Body::Patch,
                statuses: &[200, 201],
                ..op(
                    "patch",
                    "patch",
                    "patch",
                    "",
                    format!("partially update the specified {kind}"),
                )
            },
            Operation {
                params: DELETE_PARAMS,
                body: Body::DeleteOptions,
                statuses: &[200, 202],
                ..op("delete", "delete", "delete", "", format!("delete a {kind}"))
            },
        ],
    });

    if r.group.is_empty() && r.resource == "pods" {
        let create = |kind: (&'static str, &'static str, &'static str), id: String| {
            let (g, v, k) = kind;
            Operation {
                id,
                params: WRITE_PARAMS,
                body: Body::Object,
                statuses: &[200, 201, 202],
                response: schema_name(g, v, k),
                gvk: Some(kind),
                ..op("post", "post", "create", "", format!("create {k} of a Pod"))
            }
        };
        let binding = ("", "v1", "Binding");
        items.push(PathItem {
            path: format!("{collection}/{{name}}/binding"),
            params: scope_params.clone(),
            ops: vec![create(
                binding,
                format!("create{gv_id}NamespacedPodBinding"),
            )],
        });
        items.push(PathItem {
            path: format!("{collection}/{{name}}/eviction"),
            params: scope_params.clone(),
            ops: vec![create(
                ("policy", "v1", "Eviction"),
                format!("create{gv_id}NamespacedPodEviction"),
            )],
        });
        items.push(PathItem {
            path: format!("{prefix}/namespaces/{{namespace}}/bindings"),
            params: vec![&NAMESPACE, &PRETTY],
            ops: vec![create(binding, format!("create{gv_id}NamespacedBinding"))],
        });
    }

    if r.has_status {
        items.push(PathItem {
            path: format!("{collection}/{{name}}/status"),
            params: scope_params,
            ops: vec![
                op(
                    "get",
                    "get",
                    "read",
                    "Status",
                    format!("read status of the specified {kind}"),
                ),
                Operation {
                    params: WRITE_PARAMS,
                    body: Body::Object,
                    statuses: &[200, 201],
                    ..op(
                        "put",
                        "put",
                        "replace",
                        "Status",
                        format!("replace status of the specified {kind}"),
                    )
                },
                Operation {
                    params: PATCH_PARAMS,
                    body: Body::Patch,
                    statuses: &[200, 201],
                    ..op(
                        "patch",
                        "patch",
                        "patch",
                        "Status",
                        format!("partially update status of the specified {kind}"),
                    )
                },
            ],
        });
    }

    if r.namespaced {
        items.push(PathItem {
            path: format!("{prefix}/{}", r.resource),
            params: vec![&PRETTY],
            ops: vec![Operation {
                id: format!("list{gv_id}{kind}ForAllNamespaces"),
                params: LIST_PARAMS,
                response: list,
                ..op(
                    "get",
                    "list",
                    "list",
                    "",
                    format!("list or watch objects of kind {kind}"),
                )
            }],
        });
    }
    items
}

impl PathItem {
    fn render(&self, r: &ResourceInfo, dialect: Dialect) -> Value {
        let mut m = Map::new();
        for op in &self.ops {
            m.insert(op.method.into(), op.render(r, dialect));
        }
        let params: Vec<Value> = self.params.iter().map(|p| p.render(dialect)).collect();
        m.insert("parameters".into(), Value::Array(params));
        Value::Object(m)
    }
}

fn status_text(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        _ => "Unauthorized",
    }
}

impl Operation {
    fn render(&self, r: &ResourceInfo, dialect: Dialect) -> Value {
        let (tag, _) = group_words(r.group);
        let mut m = Map::new();
        m.insert("tags".into(), json!([format!("{tag}_{}", r.version)]));
        m.insert("description".into(), json!(self.description));
        m.insert("operationId".into(), json!(self.id));
        let mut params: Vec<Value> = self.params.iter().map(|p| p.render(dialect)).collect();

        let (group, version, kind) = self.gvk.unwrap_or((r.group, r.version, r.kind));
        let body_schema = match self.body {
            Body::None => None,
            Body::Object => Some(schema_name(group, version, kind)),
            Body::Patch => Some(format!("{META}.Patch")),
            Body::DeleteOptions => Some(format!("{META}.DeleteOptions")),
        };
        let consumes: Vec<&str> = if self.body == Body::Patch {
            PATCH_CONTENT_TYPES.to_vec()
        } else {
            vec!["*/*"]
        };

        let mut responses = Map::new();
        for code in self.statuses {
            let response = match dialect {
                Dialect::V3 => json!({
                    "description": status_text(*code),
                    "content": {"application/json": {"schema": dialect.reference(&self.response)}},
                }),
                Dialect::V2 => json!({
                    "description": status_text(*code),
                    "schema": dialect.reference(&self.response),
                }),
            };
            responses.insert(code.to_string(), response);
        }
        responses.insert("401".into(), json!({"description": "Unauthorized"}));

        match dialect {
            Dialect::V3 => {
                if let Some(schema) = &body_schema {
                    let content: Map<String, Value> = consumes
                        .iter()
                        .map(|ct| (ct.to_string(), json!({"schema": dialect.reference(schema)})))
                        .collect();
                    // A delete body is optional; every other body is required.
                    let required = self.body != Body::DeleteOptions;
                    m.insert(
                        "requestBody".into(),
                        json!({"content": content, "required": required}),
                    );
                }
            }
            Dialect::V2 => {
                m.insert("consumes".into(), json!(consumes));
                m.insert("produces".into(), json!(["application/json"]));
                m.insert("schemes".into(), json!(["https"]));
                if let Some(schema) = &body_schema {
                    params.insert(
                        0,
                        json!({
                            "name": "body",
                            "in": "body",
                            "required": self.body != Body::DeleteOptions,
                            "schema": dialect.reference(schema),
                        }),
                    );
                }
            }
        }
        if !params.is_empty() {
            m.insert("parameters".into(), Value::Array(params));
        }
        m.insert("responses".into(), Value::Object(responses));
        m.insert("x-kubernetes-action".into(), json!(self.action));
        m.insert(
            "x-kubernetes-group-version-kind".into(),
            json!({"group": group, "version": version, "kind": kind}),
        );
        Value::Object(m)
    }
}

// ---------------------------------------------------------------------------------------------
// Schemas

fn gvk_list(group: &str, version: &str, kind: &str) -> Value {
    json!([{"group": group, "version": version, "kind": kind}])
}

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn boolean(description: &str) -> Value {
    json!({"type": "boolean", "description": description})
}

fn integer(format: &str, description: &str) -> Value {
    json!({"type": "integer", "format": format, "description": description})
}

fn string_map(description: &str) -> Value {
    json!({
        "type": "object",
        "additionalProperties": {"type": "string", "default": ""},
        "description": description,
    })
}

fn string_list(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string", "default": ""}, "description": description})
}

fn free_object(description: &str) -> Value {
    json!({
        "type": "object",
        "description": description,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

fn object(description: &str, properties: Vec<(&str, Value)>) -> Value {
    let props: Map<String, Value> = properties
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    json!({"type": "object", "description": description, "properties": props})
}

fn with(mut schema: Value, key: &str, value: Value) -> Value {
    if let Value::Object(m) = &mut schema {
        m.insert(key.to_string(), value);
    }
    schema
}

const API_VERSION_DOC: &str = "The versioned schema of this representation of an object.";
const KIND_DOC: &str = "The REST resource this object represents, in CamelCase.";

/// Every schema a document needs: the shared meta types plus each kind (and its list) of the
/// given group versions.
///
/// A kind with a typed schema ([`TypedSchemas`]) is described field by field, and the types it
/// reaches replace the shorter meta schemas of the same name; any other kind gets
/// [`kind_schema`]'s outline.
fn schemas(gvs: &[(&str, &str)], d: Dialect) -> Map<String, Value> {
    let builtin: Vec<&'static ResourceInfo> = RESOURCES.iter().collect();
    schemas_of(&builtin, gvs, d)
}

/// The schemas of the kinds of `resources` in `gvs`, with the meta schemas they refer to.
fn schemas_of(
    resources: &[&'static ResourceInfo],
    gvs: &[(&str, &str)],
    d: Dialect,
) -> Map<String, Value> {
    let mut out = meta_schemas(d);
    let mut typed = TypedSchemas::new(match d {
        Dialect::V3 => SchemaDialect::OpenApi3,
        Dialect::V2 => SchemaDialect::Swagger2,
    });
    let mut typed_kinds = Vec::new();
    for &r in resources
        .iter()
        .filter(|r| gvs.contains(&(r.group, r.version)))
    {
        if let Some(schema) = r.custom.and_then(|c| c.schema.as_ref()) {
            out.insert(
                schema_name(r.group, r.version, r.kind),
                custom_kind_schema(r, schema.source(), d),
            );
            let list_kind = r.list_kind();
            out.insert(
                schema_name(r.group, r.version, &list_kind),
                list_schema(r, &list_kind, d),
            );
            continue;
        }
        match typed.add_kind(r.group, r.version, r.kind) {
            Some(name) => typed_kinds.push((name, r)),
            None => {
                out.insert(schema_name(r.group, r.version, r.kind), kind_schema(r, d));
            }
        }
        let list_kind = r.list_kind();
        out.insert(
            schema_name(r.group, r.version, &list_kind),
            list_schema(r, &list_kind, d),
        );
    }
    // The kinds the core group's create-only pod subresources take.
    let mut extra = Vec::new();
    if gvs.contains(&("", "v1")) {
        for (g, v, k) in [("", "v1", "Binding"), ("policy", "v1", "Eviction")] {
            if let Some(name) = typed.add_kind(g, v, k) {
                extra.push((name, g, v, k));
            }
        }
    }
    out.extend(typed.into_definitions());
    let gvks = typed_kinds
        .into_iter()
        .map(|(name, r)| (name, r.group, r.version, r.kind))
        .chain(extra);
    for (name, g, v, k) in gvks {
        if let Some(Value::Object(schema)) = out.get_mut(&name) {
            schema.insert("x-kubernetes-group-version-kind".into(), gvk_list(g, v, k));
        }
    }
    out
}

/// A custom kind's schema: its CRD's `openAPIV3Schema`, with `apiVersion`, `kind` and
/// `metadata` described as for every kind.
fn custom_kind_schema(r: &ResourceInfo, source: &Value, d: Dialect) -> Value {
    let mut schema = source.as_object().cloned().unwrap_or_default();
    let props = schema.entry("properties").or_insert_with(|| json!({}));
    if let Some(props) = props.as_object_mut() {
        props.insert("apiVersion".into(), string(API_VERSION_DOC));
        props.insert("kind".into(), string(KIND_DOC));
        props.insert(
            "metadata".into(),
            d.embed(&format!("{META}.ObjectMeta"), "Standard object metadata."),
        );
    }
    schema.insert(
        "x-kubernetes-group-version-kind".into(),
        gvk_list(r.group, r.version, r.kind),
    );
    Value::Object(schema)
}

fn kind_schema(r: &ResourceInfo, d: Dialect) -> Value {
    let mut props = vec![
        ("apiVersion", string(API_VERSION_DOC)),
        ("kind", string(KIND_DOC)),
        (
            "metadata",
            d.embed(&format!("{META}.ObjectMeta"), "Standard object metadata."),
        ),
    ];
    let time = |doc: &str| d.embed(&format!("{META}.Time"), doc);
    match r.kind {
        "ConfigMap" => props.extend([
            ("data", string_map("Configuration data as UTF-8 strings.")),
            (
                "binaryData",
                json!({
                    "type": "object",
                    "additionalProperties": {"type": "string", "format": "byte"},
                    "description": "Binary configuration data, base64-encoded.",
                }),
            ),
            ("immutable", boolean("If true, the data cannot be changed.")),
        ]),
        "Secret" => props.extend([
            (
                "data",
                json!({
                    "type": "object",
                    "additionalProperties": {"type": "string", "format": "byte"},
                    "description": "Secret data, base64-encoded.",
                }),
            ),
            (
                "stringData",
                string_map("Write-only secret data given as plain strings."),
            ),
            (
                "type",
                string("Used to ease programmatic handling of secret data."),
            ),
            ("immutable", boolean("If true, the data cannot be changed.")),
        ]),
        "Event" => props.extend([
            ("action", string("What was done, or failed to be done.")),
            (
                "count",
                integer("int32", "How many times the event occurred."),
            ),
            (
                "eventTime",
                d.embed(
                    &format!("{META}.MicroTime"),
                    "When the event was first observed.",
                ),
            ),
            ("firstTimestamp", time("When the event was first recorded.")),
            (
                "involvedObject",
                free_object("The object this event is about."),
            ),
            (
                "lastTimestamp",
                time("When the event most recently occurred."),
            ),
            ("message", string("A human-readable description.")),
            ("reason", string("A short, machine-understandable reason.")),
            ("related", free_object("A secondary object, if any.")),
            (
                "reportingComponent",
                string("The controller that emitted the event."),
            ),
            (
                "reportingInstance",
                string("The controller instance that emitted it."),
            ),
            (
                "series",
                free_object("Data about a series of similar events."),
            ),
            ("source", free_object("The component reporting the event.")),
            ("type", string("Normal or Warning.")),
        ]),
        _ => {
            props.push((
                "spec",
                free_object(&format!("The desired state of the {}.", r.kind)),
            ));
            if r.has_status {
                props.push((
                    "status",
                    free_object(&format!("The observed state of the {}.", r.kind)),
                ));
            }
        }
    }
    let schema = object(
        &format!(
            "{} ({}); fields beyond metadata are not described here and are checked by the server.",
            r.kind,
            r.api_version()
        ),
        props,
    );
    with(
        schema,
        "x-kubernetes-group-version-kind",
        gvk_list(r.group, r.version, r.kind),
    )
}

fn list_schema(r: &ResourceInfo, list_kind: &str, d: Dialect) -> Value {
    let item = schema_name(r.group, r.version, r.kind);
    let schema = object(
        &format!("A list of {} objects.", r.kind),
        vec![
            ("apiVersion", string(API_VERSION_DOC)),
            (
                "items",
                json!({"type": "array", "items": d.reference(&item), "description": "The objects."}),
            ),
            ("kind", string(KIND_DOC)),
            (
                "metadata",
                d.embed(&format!("{META}.ListMeta"), "Standard list metadata."),
            ),
        ],
    );
    let schema = with(schema, "required", json!(["items"]));
    with(
        schema,
        "x-kubernetes-group-version-kind",
        gvk_list(r.group, r.version, list_kind),
    )
}

fn meta_schemas(d: Dialect) -> Map<String, Value> {
    let mut out = Map::new();
    let meta = |name: &str| format!("{META}.{name}");
    let time = |doc: &str| d.embed(&meta("Time"), doc);

    out.insert(
        meta("Time"),
        json!({"type": "string", "format": "date-time", "description": "An RFC 3339 timestamp with second precision."}),
    );
    out.insert(
        meta("MicroTime"),
        json!({"type": "string", "format": "date-time", "description": "An RFC 3339 timestamp with microsecond precision."}),
    );
    out.insert(
        meta("ObjectMeta"),
        object(
            "Metadata every persisted object has.",
            vec![
                ("annotations", string_map("Unstructured key-value data.")),
                (
                    "creationTimestamp",
                    time("When the object was created; set by the server."),
                ),
                (
                    "deletionGracePeriodSeconds",
                    integer("int64", "Seconds allowed for graceful termination."),
                ),
                (
                    "deletionTimestamp",
                    time("When the object will be deleted; set by the server."),
                ),
                (
                    "finalizers",
                    string_list("Must be empty before the object is deleted."),
                ),
                (
                    "generateName",
                    string("Prefix for a server-generated name."),
                ),
                (
                    "generation",
                    integer("int64", "Sequence number of the desired state."),
                ),
                (
                    "labels",
                    string_map("Key-value pairs used to select objects."),
                ),
                (
                    "managedFields",
                    json!({
                        "type": "array",
                        "items": d.reference(&meta("ManagedFieldsEntry")),
                        "description": "Which manager owns which fields.",
                    }),
                ),
                ("name", string("Unique within a namespace.")),
                ("namespace", string("The namespace of a namespaced object.")),
                (
                    "ownerReferences",
                    json!({
                        "type": "array",
                        "items": d.reference(&meta("OwnerReference")),
                        "description": "Objects this object depends on.",
                        "x-kubernetes-patch-merge-key": "uid",
                        "x-kubernetes-patch-strategy": "merge",
                    }),
                ),
                (
                    "resourceVersion",
                    string("Opaque version of this object, for concurrency control and watches."),
                ),
                ("selfLink", string("Deprecated and unset.")),
                (
                    "uid",
                    string("Unique in time and space; set by the server."),
                ),
            ],
        ),
    );
    let owner = object(
        "Identifies an owning object.",
        vec![
            ("apiVersion", string("API version of the owner.")),
            (
                "blockOwnerDeletion",
                boolean("Whether the owner waits for this object in foreground deletion."),
            ),
            (
                "controller",
                boolean("Whether the owner is the managing controller."),
            ),
            ("kind", string("Kind of the owner.")),
            ("name", string("Name of the owner.")),
            ("uid", string("UID of the owner.")),
        ],
    );
    let owner = with(
        owner,
        "required",
        json!(["apiVersion", "kind", "name", "uid"]),
    );
    out.insert(
        meta("OwnerReference"),
        with(owner, "x-kubernetes-map-type", json!("atomic")),
    );
    out.insert(
        meta("ManagedFieldsEntry"),
        free_object("The fields one manager owns, and how it set them."),
    );
    out.insert(
        meta("ListMeta"),
        object(
            "Metadata of a list.",
            vec![
                ("continue", string("Token for the next page, if any.")),
                (
                    "remainingItemCount",
                    integer("int64", "Items left after this page (an estimate)."),
                ),
                (
                    "resourceVersion",
                    string("The version of the collection this list shows."),
                ),
                ("selfLink", string("Deprecated and unset.")),
            ],
        ),
    );
    let status = object(
        "The result of an operation that returns no object, typically an error.",
        vec![
            ("apiVersion", string(API_VERSION_DOC)),
            ("code", integer("int32", "The HTTP status code.")),
            (
                "details",
                free_object("Extra data about the error, such as the object's name and kind."),
            ),
            ("kind", string(KIND_DOC)),
            ("message", string("A human-readable description.")),
            (
                "metadata",
                d.embed(&meta("ListMeta"), "Standard list metadata."),
            ),
            (
                "reason",
                string("A machine-readable reason, e.g. NotFound."),
            ),
            ("status", string("'Success' or 'Failure'.")),
        ],
    );
    out.insert(
        meta("Status"),
        with(
            status,
            "x-kubernetes-group-version-kind",
            gvk_list("", "v1", "Status"),
        ),
    );
    out.insert(
        meta("Preconditions"),
        object(
            "Conditions that must hold for a delete to proceed.",
            vec![
                ("resourceVersion", string("The expected resourceVersion.")),
                ("uid", string("The expected UID.")),
            ],
        ),
    );
    let delete_gvks: Vec<Value> = std::iter::once(("", "v1"))
        .chain(group_versions().into_iter().filter(|(g, _)| !g.is_empty()))
        .map(|(g, v)| json!({"group": g, "version": v, "kind": "DeleteOptions"}))
        .collect();
    let delete = object(
        "Options of a delete request.",
        vec![
            ("apiVersion", string(API_VERSION_DOC)),
            ("dryRun", string_list("'All' validates without deleting.")),
            (
                "gracePeriodSeconds",
                integer("int64", "Seconds to wait before deletion."),
            ),
            ("kind", string(KIND_DOC)),
            (
                "orphanDependents",
                boolean("Deprecated: use propagationPolicy."),
            ),
            (
                "preconditions",
                d.embed(
                    &meta("Preconditions"),
                    "Must hold for the delete to proceed.",
                ),
            ),
            (
                "propagationPolicy",
                string("'Orphan', 'Background' or 'Foreground'."),
            ),
        ],
    );
    out.insert(
        meta("DeleteOptions"),
        with(
            delete,
            "x-kubernetes-group-version-kind",
            Value::Array(delete_gvks),
        ),
    );
    out.insert(
        meta("Patch"),
        json!({"type": "object", "description": "The body of a PATCH request, in the format its content type names."}),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (path, method, operation) of a document.
    fn operations(doc: &Value) -> Vec<(String, String, Value)> {
        let mut out = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                if method != "parameters" {
                    out.push((path.clone(), method.clone(), op.clone()));
                }
            }
        }
        out
    }

    /// Resolves a `$ref` (or an `allOf` around one) to the schema it names.
    fn resolve<'a>(doc: &'a Value, schema: &Value) -> &'a Value {
        let reference = schema["$ref"]
            .as_str()
            .or_else(|| schema["allOf"][0]["$ref"].as_str())
            .unwrap();
        let name = reference
            .strip_prefix("#/components/schemas/")
            .or_else(|| reference.strip_prefix("#/definitions/"))
            .unwrap();
        let holder = if doc.get("definitions").is_some() {
            &doc["definitions"]
        } else {
            &doc["components"]["schemas"]
        };
        holder
            .get(name)
            .unwrap_or_else(|| panic!("dangling ref {reference}"))
    }

    /// Every `$ref` string anywhere in `v`.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    if let ("$ref", Value::String(r)) = (k.as_str(), x) {
                        // (A JSONSchemaProps schema has a *property* named `$ref`.)
                        out.push(r.clone());
                    } else {
                        refs(x, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn fnv_matches_reference_vectors_and_separates_inputs() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a_64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x85944171f73967e8);
        assert_ne!(fnv1a_64(b"{\"a\":1}"), fnv1a_64(b"{\"a\":2}"));
        let a = document_hash(&json!({"paths": {"x": 1}}));
        let b = document_hash(&json!({"paths": {"x": 2}}));
        assert_ne!(a, b);
        assert_eq!(a, document_hash(&json!({"paths": {"x": 1}})));
        assert_eq!(a.len(), 16);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn schema_names_follow_kubernetes() {
        assert_eq!(schema_name("", "v1", "Pod"), "io.k8s.api.core.v1.Pod");
        assert_eq!(
            schema_name("apps", "v1", "Deployment"),
            "io.k8s.api.apps.v1.Deployment"
        );
        assert_eq!(
            schema_name("coordination.k8s.io", "v1", "Lease"),
            "io.k8s.api.coordination.v1.Lease"
        );
        assert_eq!(
            schema_name("rbac.authorization.k8s.io", "v1", "Role"),
            "io.k8s.api.rbac.v1.Role"
        );
        assert_eq!(
            schema_name("stable.example.com", "v1", "CronTab"),
            "com.example.stable.v1.CronTab"
        );
    }

    #[test]
    fn root_lists_every_group_version_and_each_url_resolves() {
        let root = openapi_v3_root(&[]);
        let paths = root["paths"].as_object().unwrap();
        assert_eq!(paths.len(), group_versions().len());
        for key in ["api/v1", "apis/apps/v1", "apis/coordination.k8s.io/v1"] {
            assert!(paths.contains_key(key), "{key} missing from {root}");
        }
        for (key, entry) in paths {
            let url = entry["serverRelativeURL"].as_str().unwrap();
            let (path, hash) = url.split_once("?hash=").unwrap();
            assert_eq!(path, format!("/openapi/v3/{key}"));
            let doc = openapi_v3_document(&[], path.strip_prefix("/openapi/v3/").unwrap()).unwrap();
            assert_eq!(hash, document_hash(&doc), "hash of {key} is stale");
            // The lenient spellings resolve to the same document.
            assert_eq!(openapi_v3_document(&[], url), Some(doc.clone()));
            assert_eq!(openapi_v3_document(&[], &format!("/{key}/")), Some(doc));
        }
        // The index is stable across calls.
        assert_eq!(root, openapi_v3_root(&[]));
    }

    #[test]
    fn unknown_documents_are_none() {
        for path in [
            "",
            "api",
            "api/v2",
            "apis/apps",
            "apis/apps/v2",
            "apis//v1",
            "apis/nope/v1",
            "x/y/z/w",
        ] {
            assert!(openapi_v3_document(&[], path).is_none(), "{path}");
        }
    }

    #[test]
    fn every_kind_has_patch_with_field_validation_and_its_gvk() {
        for r in RESOURCES {
            let doc = openapi_v3_document(&[], &group_version_path(r.group, r.version)).unwrap();
            assert_eq!(doc["openapi"], "3.0.0");
            let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
            let patches: Vec<_> = operations(&doc)
                .into_iter()
                .filter(|(_, m, op)| m == "patch" && op["x-kubernetes-group-version-kind"] == gvk)
                .collect();
            let expected = if r.has_status { 2 } else { 1 };
            assert_eq!(patches.len(), expected, "patch operations of {}", r.kind);
            for (path, _, op) in &patches {
                // kubectl stops at the first patch operation of the GVK it finds, so every
                // one of them must declare fieldValidation in exactly Kubernetes' shape.
                let fv = op["parameters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|p| p["name"] == "fieldValidation")
                    .unwrap_or_else(|| panic!("{path} lacks fieldValidation"));
                assert_eq!(fv["in"], "query");
                assert_eq!(fv["schema"], json!({"type": "string", "uniqueItems": true}));
                assert_eq!(op["x-kubernetes-action"], "patch");
                let content = op["requestBody"]["content"].as_object().unwrap();
                assert!(content.contains_key("application/merge-patch+json"));
                assert!(!content.contains_key("application/strategic-merge-patch+json"));
            }
            let item_path = if r.namespaced {
                format!(
                    "/{}/namespaces/{{namespace}}/{}/{{name}}",
                    gv_prefix(r),
                    r.resource
                )
            } else {
                format!("/{}/{}/{{name}}", gv_prefix(r), r.resource)
            };
            assert!(
                patches.iter().any(|(p, _, _)| *p == item_path),
                "no patch on {item_path}"
            );
            let item = &doc["paths"][&item_path];
            for method in ["get", "put", "delete"] {
                assert_eq!(item[method]["x-kubernetes-group-version-kind"], gvk);
            }
            let collection = item_path.strip_suffix("/{name}").unwrap();
            assert_eq!(
                doc["paths"][collection]["get"]["x-kubernetes-action"],
                "list"
            );
            assert_eq!(
                doc["paths"][collection]["post"]["x-kubernetes-action"],
                "post"
            );
            let path_params: Vec<&str> = item["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["in"] == "path")
                .map(|p| p["name"].as_str().unwrap())
                .collect();
            let expected: &[&str] = if r.namespaced {
                &["name", "namespace"]
            } else {
                &["name"]
            };
            assert_eq!(path_params, expected);
        }
    }

    fn gv_prefix(r: &ResourceInfo) -> String {
        if r.group.is_empty() {
            format!("api/{}", r.version)
        } else {
            format!("apis/{}/{}", r.group, r.version)
        }
    }

    #[test]
    fn kind_schemas_carry_gvk_and_typed_bodies() {
        let doc = openapi_v3_document(&[], "api/v1").unwrap();
        let schemas = &doc["components"]["schemas"];
        let pod = &schemas["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod["type"], "object");
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{"group": "", "version": "v1", "kind": "Pod"}])
        );
        let spec = resolve(&doc, &pod["properties"]["spec"]);
        let container = resolve(&doc, &spec["properties"]["containers"]["items"]);
        assert_eq!(container["properties"]["image"]["type"], "string");
        let status = resolve(&doc, &pod["properties"]["status"]);
        assert_eq!(status["properties"]["phase"]["type"], "string");
        let meta = resolve(&doc, &pod["properties"]["metadata"]);
        assert_eq!(
            meta["properties"]["labels"]["additionalProperties"]["type"],
            "string"
        );
        let list = &schemas["io.k8s.api.core.v1.PodList"];
        assert_eq!(
            list["x-kubernetes-group-version-kind"][0]["kind"],
            "PodList"
        );
        assert_eq!(resolve(&doc, &list["properties"]["items"]["items"]), pod);
        for meta in ["Status", "DeleteOptions", "Patch", "ObjectMeta", "ListMeta"] {
            assert!(
                schemas.get(format!("{META}.{meta}")).is_some(),
                "{meta} missing"
            );
        }
        // ConfigMaps have data, not spec.
        let cm = &schemas["io.k8s.api.core.v1.ConfigMap"]["properties"];
        assert!(cm.get("data").is_some() && cm.get("spec").is_none());
        // Only the document's own kinds are included.
        assert!(schemas.get("io.k8s.api.apps.v1.Deployment").is_none());

        let apps = openapi_v3_document(&[], "apis/apps/v1").unwrap();
        assert!(apps["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"].is_object());
        let leases = openapi_v3_document(&[], "apis/coordination.k8s.io/v1").unwrap();
        let lease = &leases["components"]["schemas"]["io.k8s.api.coordination.v1.Lease"];
        assert_eq!(
            lease["x-kubernetes-group-version-kind"][0]["group"],
            "coordination.k8s.io"
        );
    }

    #[test]
    fn kinds_without_typed_schemas_get_an_outline() {
        let pod = RESOURCES.iter().find(|r| r.kind == "Pod").unwrap();
        let outline = kind_schema(pod, Dialect::V3);
        assert_eq!(outline["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
        for field in ["spec", "status"] {
            assert_eq!(outline["properties"][field]["type"], "object");
            assert_eq!(
                outline["properties"][field]["x-kubernetes-preserve-unknown-fields"],
                true
            );
        }
        assert_eq!(
            outline["properties"]["metadata"]["allOf"][0]["$ref"],
            format!("#/components/schemas/{META}.ObjectMeta")
        );
    }

    #[test]
    fn every_reference_resolves() {
        let mut docs: Vec<Value> = group_versions()
            .into_iter()
            .map(|(g, v)| openapi_v3_document(&[], &group_version_path(g, v)).unwrap())
            .collect();
        docs.push(openapi_v2());
        for doc in &docs {
            let mut all = Vec::new();
            refs(doc, &mut all);
            assert!(!all.is_empty());
            for reference in all {
                resolve(doc, &json!({ "$ref": reference }));
            }
        }
    }

    #[test]
    fn v2_has_every_kind_with_field_validation() {
        let doc = openapi_v2();
        assert_eq!(doc["swagger"], "2.0");
        assert_eq!(doc["info"]["version"], GIT_VERSION);
        for r in RESOURCES {
            let def = &doc["definitions"][schema_name(r.group, r.version, r.kind)];
            assert_eq!(def["x-kubernetes-group-version-kind"][0]["kind"], r.kind);
            let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
            let patch = operations(&doc)
                .into_iter()
                .find(|(_, m, op)| m == "patch" && op["x-kubernetes-group-version-kind"] == gvk)
                .unwrap_or_else(|| panic!("no v2 patch for {}", r.kind))
                .2;
            let params = patch["parameters"].as_array().unwrap();
            let fv = params
                .iter()
                .find(|p| p["name"] == "fieldValidation")
                .unwrap();
            assert_eq!(fv["in"], "query");
            assert_eq!(fv["type"], "string");
            assert_eq!(params[0]["in"], "body");
            assert!(patch["consumes"]
                .as_array()
                .unwrap()
                .contains(&json!("application/json-patch+json")));
        }
    }
}
