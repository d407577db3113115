//! Create/update strategies: what the server sets, keeps and checks on every write.
//!
//! Rules (as kube-apiserver applies them):
//! - create: the server assigns `uid`, `creationTimestamp`, a name from `generateName`, and
//!   clears `resourceVersion`/`deletionTimestamp`; for kinds with a status subresource the
//!   submitted status is reset (pods start `Pending`, namespaces `Active`). Kinds that track
//!   their spec's generation ([`ResourceInfo::tracks_generation`]) start at `generation` 1;
//!   others keep whatever `generation` the request carried (usually none). New nodes get
//!   the `node.kubernetes.io/not-ready:NoSchedule` taint ([`super::node_taint`]).
//! - update of the main resource: `status` changes are ignored; `generation` is bumped only when
//!   something outside `metadata` and `status` changed, for kinds that track it, and is kept
//!   from the stored object otherwise.
//! - update of `/status`: only `status` is taken from the request.

use super::resources::{NameRule, ResourceInfo};
use api::object::{
    validate_dns1123_label, validate_dns1123_subdomain, validate_path_segment, Object,
};
use api::status::FieldError;
use api::Status;
use serde_json::{json, Map, Value};

/// The name `generateName: prefix` stands for (see [`api::object::generated_name`]), drawn
/// at random.
pub fn generate_name(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4();
    let mut random = [0u8; 8];
    random.copy_from_slice(&id.as_bytes()[..8]);
    api::object::generated_name(prefix, u64::from_le_bytes(random))
}

/// Checks `apiVersion`/`kind` of a request body against the resource, filling them if absent.
pub fn check_type(info: &ResourceInfo, obj: &mut Object) -> Result<(), Status> {
    let want_av = info.api_version();
    match obj.0.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            obj.0.insert("apiVersion".into(), json!(want_av));
        }
        Some(av) if av == want_av => {}
        Some(av) => {
            return Err(Status::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )))
        }
    }
    match obj.0.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            obj.0.insert("kind".into(), json!(info.kind));
        }
        Some(k) if k == info.kind => {}
        Some(k) => {
            return Err(Status::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                info.kind
            )))
        }
    }
    Ok(())
}

/// What reading a stored object of `info` does to it beyond the resourceVersion: a custom
/// object is served at the version asked for, with its schema's defaults applied (as
/// kube-apiserver defaults what it reads from storage). Built-in objects are left alone.
pub fn custom_read(info: &ResourceInfo, obj: &mut Object) {
    if let Some(custom) = info.custom {
        super::apiextensions::strategy::read(info, custom, obj);
    }
}

/// Whether [`custom_read`] may change the stored object `stored` of `info`: always false
/// for built-in kinds; for a custom one, when the schema has defaults the object may lack
/// (it was not `written_under_current_schema`) or the object was not stored at the version
/// `info` serves (stored objects begin with their `apiVersion`, their keys being sorted).
pub fn custom_read_changes(
    info: &ResourceInfo,
    stored: &[u8],
    written_under_current_schema: bool,
) -> bool {
    let Some(custom) = info.custom else {
        return false;
    };
    if !written_under_current_schema && custom.schema.as_ref().is_some_and(|s| s.has_defaults()) {
        return true;
    }
    // `{"apiVersion":"group/version"`, compared piece by piece (no key built per event).
    let rest = stored.strip_prefix(b"{\"apiVersion\":\"".as_slice());
    let rest = rest.and_then(|r| r.strip_prefix(info.group.as_bytes()));
    let rest = rest.and_then(|r| r.strip_prefix(b"/".as_slice()));
    let rest = rest.and_then(|r| r.strip_prefix(info.version.as_bytes()));
    !rest.is_some_and(|r| r.starts_with(b"\""))
}

/// Sets the server-owned fields of a new object. `namespace` is the request's namespace.
pub fn prepare_for_create(
    info: &ResourceInfo,
    obj: &mut Object,
    namespace: &str,
) -> Result<(), Status> {
    check_type(info, obj)?;
    if !obj.0.get("metadata").is_none_or(Value::is_object) {
        return Err(Status::bad_request("metadata must be an object"));
    }
    match info.custom {
        Some(custom) => super::apiextensions::strategy::prepare_for_create(info, custom, obj)?,
        None => {
            super::defaults::apply(info.kind, &mut obj.0);
            admit(info, obj);
        }
    }
    if info.group.is_empty() && info.kind == "Node" {
        super::node_taint::apply(&mut obj.0);
    }
    if info.namespaced {
        let body_ns = obj.namespace().to_string();
        if !body_ns.is_empty() && body_ns != namespace {
            return Err(Status::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        obj.set_meta("namespace", namespace);
    } else {
        obj.remove_meta("namespace");
    }
    if obj.name().is_empty() {
        let prefix = obj.meta_str("generateName").to_string();
        if !prefix.is_empty() {
            obj.set_meta("name", generate_name(&prefix));
        }
    }
    let meta = obj.metadata_mut();
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(api::time::now_rfc3339()));
    if info.tracks_generation {
        meta.insert("generation".into(), json!(1));
    }
    meta.remove("resourceVersion");
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    meta.remove("selfLink");
    if info.group == "batch" && info.kind == "Job" {
        // Needs the uid just assigned, as Kubernetes' job strategy does it at validation.
        super::job::generate_selector(obj);
    }
    // Custom kinds may share a built-in kind's name: only built-in kinds get its rules.
    let builtin_kind = if info.custom.is_none() { info.kind } else { "" };
    match builtin_kind {
        "Pod" => {
            let mut status = Map::new();
            status.insert("phase".into(), json!("Pending"));
            let qos = super::defaults::qos_class(obj.0.get("spec").unwrap_or(&Value::Null));
            status.insert("qosClass".into(), json!(qos));
            obj.0.insert("status".into(), Value::Object(status));
        }
        "Namespace" => {
            obj.0.insert("status".into(), json!({"phase": "Active"}));
            super::namespace_lifecycle::prepare_for_create(obj);
        }
        "Deployment" | "ReplicaSet" | "ReplicationController" => {
            obj.0.insert("status".into(), json!({}));
        }
        "Secret" => normalize_secret(obj)?,
        "CustomResourceDefinition" if info.group == "apiextensions.k8s.io" => {
            // The status is the server's: the CRD controller writes it.
            obj.0.insert("status".into(), json!({}));
        }
        _ => {}
    }
    Ok(())
}

/// What a Kubernetes server does to every Secret it stores: `stringData` is a write-only
/// convenience merged into `data` (base64, overriding keys already there) and never kept;
/// an empty `type` defaults to `Opaque`.
fn normalize_secret(obj: &mut Object) -> Result<(), Status> {
    use base64::Engine as _;
    if let Some(string_data) = obj.0.remove("stringData") {
        let entries = match string_data {
            Value::Null => Map::new(),
            Value::Object(m) => m,
            _ => return Err(Status::bad_request("stringData must be an object")),
        };
        let data = obj.0.entry("data").or_insert_with(|| json!({}));
        if data.is_null() {
            *data = json!({});
        }
        let Value::Object(data) = data else {
            return Err(Status::bad_request("data must be an object"));
        };
        for (k, v) in entries {
            let Value::String(v) = v else {
                return Err(Status::bad_request(format!(
                    "stringData.{k}: expected a string value"
                )));
            };
            let encoded = base64::engine::general_purpose::STANDARD.encode(v.as_bytes());
            data.insert(k, Value::String(encoded));
        }
    }
    if obj.0.get("type").is_none_or(|t| t.is_null() || t == "") {
        obj.0.insert("type".into(), json!("Opaque"));
    }
    Ok(())
}

/// The mutating admission kube-apiserver runs by default on writes of the main resource:
/// `DefaultTolerationSeconds` for pods.
fn admit(info: &ResourceInfo, obj: &mut Object) {
    if info.group.is_empty() && info.kind == "Pod" {
        if let Some(spec) = obj.0.get_mut("spec").and_then(Value::as_object_mut) {
            super::default_tolerations::apply(spec);
        }
    }
}

/// Fields that are not part of the "spec" for generation purposes.
fn spec_equal(a: &Object, b: &Object) -> bool {
    let skip = |k: &str| matches!(k, "metadata" | "status" | "apiVersion" | "kind");
    let count = |o: &Object| o.0.keys().filter(|k| !skip(k)).count();
    count(a) == count(b)
        && a.0
            .iter()
            .filter(|(k, _)| !skip(k))
            .all(|(k, v)| b.0.get(k) == Some(v))
}

/// Carries server-owned fields from `old` into the update `new` of the main resource (or of
/// the `status` subresource when `status_only`), and bumps `generation` on spec changes.
/// Returns the object to store.
pub fn prepare_for_update(
    info: &ResourceInfo,
    old: &Object,
    new: Object,
    status_only: bool,
) -> Result<Object, Status> {
    let mut out = prepare_update(info, old, new, status_only)?;
    // A custom object is stored at its CRD's storage version, whatever version it was
    // read and written at.
    if let Some(custom) = info.custom {
        super::apiextensions::strategy::store_at_storage_version(info, custom, &mut out);
    }
    Ok(out)
}

fn prepare_update(
    info: &ResourceInfo,
    old: &Object,
    mut new: Object,
    status_only: bool,
) -> Result<Object, Status> {
    check_type(info, &mut new)?;
    if !new.0.get("metadata").is_none_or(Value::is_object) {
        return Err(Status::bad_request("metadata must be an object"));
    }
    if !status_only {
        match info.custom {
            Some(custom) => super::apiextensions::strategy::prepare_for_update(custom, &mut new),
            None => {
                super::defaults::apply(info.kind, &mut new.0);
                admit(info, &mut new);
            }
        }
    }
    if status_only {
        let mut out = old.clone();
        match new.0.remove("status") {
            Some(s) => out.0.insert("status".into(), s),
            None => out.0.remove("status"),
        };
        // Field ownership travels with the write (server-side apply sets it; an ordinary
        // write sends back what it read, and tracking then records the change).
        if let Some(mf) = new.remove_meta("managedFields") {
            out.metadata_mut().insert("managedFields".into(), mf);
        }
        return Ok(out);
    }
    if info.has_status {
        match old.0.get("status") {
            Some(s) => new.0.insert("status".into(), s.clone()),
            None => new.0.remove("status"),
        };
    }
    if super::namespace_lifecycle::is_namespaces(info) {
        // Only the `finalize` subresource changes a namespace's finalizers.
        let finalizers = super::namespace_lifecycle::spec_finalizers(old);
        super::namespace_lifecycle::set_spec_finalizers(&mut new, finalizers);
    }
    let old_meta = old.metadata().cloned().unwrap_or_default();
    let meta = new.metadata_mut();
    for k in [
        "uid",
        "creationTimestamp",
        "namespace",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        match old_meta.get(k) {
            Some(v) => meta.insert(k.into(), v.clone()),
            None => meta.remove(k),
        };
    }
    meta.remove("resourceVersion");
    meta.remove("selfLink");
    if info.custom.is_none() && info.kind == "Secret" {
        normalize_secret(&mut new)?;
    }
    if !info.tracks_generation {
        match old_meta.get("generation") {
            Some(v) => new.set_meta("generation", v.clone()),
            None => {
                new.metadata_mut().remove("generation");
            }
        }
        return Ok(new);
    }
    let old_gen = old.generation().max(1);
    // Objects stored before a default existed compare as if they had it (Kubernetes
    // defaults what it reads from storage), so a new default is not a spec change.
    let defaulted_old;
    let old = if info.custom.is_none() && super::defaults::has_defaults(info.kind) {
        let mut o = old.clone();
        super::defaults::apply(info.kind, &mut o.0);
        defaulted_old = o;
        &defaulted_old
    } else {
        old
    };
    let gen = if spec_equal(old, &new) {
        old_gen
    } else {
        old_gen + 1
    };
    new.set_meta("generation", gen);
    Ok(new)
}

/// Refuses an object with a value of the wrong JSON type for its field (a string for
/// `spec.replicas`, a number for a container's image, bytes that are not base64...), as
/// Kubernetes' typed decoding does with a 400. The check is the protobuf encoding of the
/// object through the kinds' field table, which every stored object must pass anyway to be
/// served to protobuf clients.
fn check_types(info: &ResourceInfo, obj: &Object) -> Result<(), Status> {
    use crate::schema::protobuf_generic::{check, root};
    let api_version = info.api_version();
    let Some(index) = root(&api_version, info.kind) else {
        return Ok(());
    };
    check(index, &obj.0).map_err(|e| {
        Status::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {e}",
            kind = info.kind,
            version = info.version,
        ))
    })
}

/// The checks only a create makes, after [`validate`]: the strict rules of
/// `events.k8s.io/v1` Events and those of ControllerRevisions.
pub fn validate_create(info: &ResourceInfo, obj: &Object) -> Result<(), Status> {
    match (info.group, info.kind) {
        ("events.k8s.io", _) => super::event_validation::validate_create(obj),
        ("apps", "ControllerRevision") => {
            super::controller_revision_validation::validate_create(obj)
        }
        ("rbac.authorization.k8s.io", k @ ("RoleBinding" | "ClusterRoleBinding")) => {
            super::rbac_validation::validate_binding(k, obj, None)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            super::admission_policy::validate_policy(obj)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            super::admission_policy::validate_binding(obj)
        }
        _ => Ok(()),
    }
}

/// The checks an update of `old` (as stored) to `new` (as it would be stored) makes, after
/// [`validate`]: what may change of a pod ([`super::pod_update`]), of an
/// `events.k8s.io/v1` Event and of a ControllerRevision. Status writes are not checked here.
pub fn validate_update(
    info: &ResourceInfo,
    old: &Object,
    new: &Object,
    status_only: bool,
) -> Result<(), Status> {
    if status_only {
        return Ok(());
    }
    if info.custom.is_some() {
        return Ok(());
    }
    super::workload_validation::validate_update(info.group, info.kind, new, old)?;
    super::config_validation::validate_update(info.group, info.kind, new, old)?;
    match (info.group, info.kind) {
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            super::apiextensions::strategy::validate_crd(new, Some(old))
        }
        ("", "Pod") => {
            // A pod stored before a default existed compares as if it had it (Kubernetes
            // defaults what it reads from storage).
            let mut old = old.clone();
            super::defaults::apply(info.kind, &mut old.0);
            super::pod_update::validate(&old, new)
        }
        ("events.k8s.io", "Event") => super::event_validation::validate_update(old, new),
        ("apps", "ControllerRevision") => {
            super::controller_revision_validation::validate_update(old, new)
        }
        ("rbac.authorization.k8s.io", k @ ("RoleBinding" | "ClusterRoleBinding")) => {
            super::rbac_validation::validate_binding(k, new, Some(old))
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            super::admission_policy::validate_policy(new)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            super::admission_policy::validate_binding(new)
        }
        _ => Ok(()),
    }
}

/// The kinds that may not own anything (Kubernetes' `BannedOwners`), as `(apiVersion, kind)`.
const BANNED_OWNERS: &[(&str, &str)] = &[("v1", "Event")];

/// Kubernetes' checks of `metadata.generation`, `ownerReferences` and `finalizers` (types
/// were checked before): a generation is not negative; each owner reference names a version,
/// kind, name and uid, is not a banned kind, and at most one is the controller; each
/// finalizer is a qualified name, and `orphan` and `foregroundDeletion` are not both set.
/// Every failure is a 422 naming the field.
fn validate_meta_lists(info: &ResourceInfo, name: &str, obj: &Object) -> Result<(), Status> {
    let empty = Map::new();
    let meta = obj.metadata().unwrap_or(&empty);
    let mut errs = Vec::new();
    if let Some(g) = meta.get("generation").and_then(Value::as_i64) {
        if g < 0 {
            errs.push(FieldError::invalid(
                "metadata.generation",
                &Value::from(g),
                "must be greater than or equal to 0",
            ));
        }
    }
    let owners = meta.get("ownerReferences").and_then(Value::as_array);
    let mut controller: Option<String> = None;
    for r in owners.into_iter().flatten() {
        let text = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("");
        let api_version = text("apiVersion");
        // "group/version" or, for the core group, "version"; anything else has no version.
        let version = match api_version.split('/').collect::<Vec<_>>()[..] {
            [v] | [_, v] => v,
            _ => "",
        };
        for (f, empty, why) in [
            (
                "apiVersion",
                version.is_empty(),
                "version must not be empty",
            ),
            ("kind", text("kind").is_empty(), "must not be empty"),
            ("name", text("name").is_empty(), "must not be empty"),
            ("uid", text("uid").is_empty(), "must not be empty"),
        ] {
            if empty {
                errs.push(FieldError::invalid(
                    format!("metadata.ownerReferences.{f}"),
                    &Value::String(text(f).into()),
                    why,
                ));
            }
        }
        if BANNED_OWNERS.contains(&(api_version, text("kind"))) {
            errs.push(FieldError::invalid(
                "metadata.ownerReferences",
                r,
                &format!(
                    "/{api_version}, Kind={} is disallowed from being an owner",
                    text("kind")
                ),
            ));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            let this = format!("{}/{}", text("kind"), text("name"));
            if let Some(first) = &controller {
                errs.push(FieldError::invalid(
                    "metadata.ownerReferences",
                    meta.get("ownerReferences").unwrap_or(&Value::Null),
                    &format!("Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"),
                ));
            } else {
                controller = Some(this);
            }
        }
    }
    let listed = meta.get("finalizers").and_then(Value::as_array);
    if listed.is_some_and(|a| a.iter().any(|f| !f.is_string())) {
        return Err(Status::bad_request("metadata.finalizers must hold strings"));
    }
    let finalizers: Vec<&str> = listed
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for f in &finalizers {
        if let Err(e) = api::labels::validate_label_key(f) {
            errs.push(FieldError::invalid(
                "metadata.finalizers",
                &Value::String((*f).into()),
                &e.to_string(),
            ));
        }
    }
    if finalizers.contains(&api::object::ORPHAN_FINALIZER)
        && finalizers.contains(&api::object::FOREGROUND_FINALIZER)
    {
        errs.push(FieldError::invalid(
            "metadata.finalizers",
            &json!(finalizers),
            &format!(
                "finalizer {} and {} cannot be both set",
                api::object::ORPHAN_FINALIZER,
                api::object::FOREGROUND_FINALIZER
            ),
        ));
    }
    invalid_if_any(info, name, &errs)
}

/// Whether every violation `new` names (its causes: field and message) was named by
/// `before` too; a failure without causes is compared by its message.
fn only_old_violations(new: &Status, before: &Status) -> bool {
    if new.code() != before.code() {
        return false;
    }
    if new.causes.is_empty() {
        return new.message == before.message;
    }
    new.causes.iter().all(|c| {
        before
            .causes
            .iter()
            .any(|b| b.field == c.field && b.message == c.message)
    })
}

/// A 422 naming `errs`, worded as kube-apiserver words it, or `Ok` when there are none.
fn invalid_if_any(info: &ResourceInfo, name: &str, errs: &[FieldError]) -> Result<(), Status> {
    if errs.is_empty() {
        Ok(())
    } else {
        Err(Status::invalid_fields(info.kind, info.group, name, errs))
    }
}

/// On an update of an object being deleted (`old` has a deletionTimestamp): no finalizer
/// that `old` lacks may appear in `meta`.
fn validate_no_new_finalizers(
    info: &ResourceInfo,
    name: &str,
    meta: &Map<String, Value>,
    old: &Object,
) -> Result<(), Status> {
    let Some(old_meta) = old.metadata() else {
        return Ok(());
    };
    if !old_meta
        .get("deletionTimestamp")
        .is_some_and(Value::is_string)
    {
        return Ok(());
    }
    let strings = |m: &'_ Map<String, Value>| -> Vec<String> {
        m.get("finalizers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let before = strings(old_meta);
    let added: Vec<String> = strings(meta)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    invalid_if_any(
        info,
        name,
        &[FieldError::forbidden(
            "metadata.finalizers",
            &format!("no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"),
        )],
    )
}

/// Kubernetes' rules for annotations: every key a qualified name (in any case), and keys
/// and values together at most [`TOTAL_ANNOTATION_SIZE_LIMIT`] bytes. Value types were
/// checked before.
fn validate_annotations(info: &ResourceInfo, name: &str, obj: &Object) -> Result<(), Status> {
    let Some(m) = obj
        .metadata()
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    else {
        return Ok(());
    };
    let mut errs = Vec::new();
    let mut bytes = 0usize;
    for (k, v) in m {
        if let Err(e) = api::labels::validate_label_key(&k.to_lowercase()) {
            errs.push(FieldError::invalid(
                "metadata.annotations",
                &Value::String(k.clone()),
                &e.to_string(),
            ));
        }
        bytes += k.len() + v.as_str().map_or(0, str::len);
    }
    if bytes > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError {
            reason: "FieldValueTooLong",
            field: "metadata.annotations".into(),
            body: format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        });
    }
    invalid_if_any(info, name, &errs)
}

/// The most bytes an object's annotations may hold, keys and values together (Kubernetes'
/// `TotalAnnotationSizeLimitB`, 256 KiB).
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// Validates an object about to be stored (metadata shape, name rules, per-kind essentials;
/// for a custom object its schema and CEL rules, whose transition rules compare with `old`,
/// the stored object, on an update).
pub fn validate(info: &ResourceInfo, obj: &Object, old: Option<&Object>) -> Result<(), Status> {
    let name = obj.name();
    let kind = info.kind;
    // kube-apiserver's wording: the kind qualified by its group (`Deployment.apps "x"`).
    let invalid = |field: &str, body: &str| {
        Status::invalid_fields(
            kind,
            info.group,
            name,
            &[FieldError {
                reason: "FieldValueInvalid",
                field: field.into(),
                body: body.into(),
            }],
        )
    };
    check_types(info, obj)?;
    let name_check = match info.names {
        NameRule::Label => validate_dns1123_label(name),
        NameRule::Subdomain => validate_dns1123_subdomain(name),
        NameRule::PathSegment => validate_path_segment(name),
    };
    if let Err(msg) = name_check {
        return Err(invalid(
            "metadata.name",
            &format!("Invalid value: {name:?}: {msg}"),
        ));
    }
    let no_metadata = Map::new();
    let meta = obj.metadata().unwrap_or(&no_metadata);
    for (field, map) in [
        ("labels", meta.get("labels")),
        ("annotations", meta.get("annotations")),
    ] {
        match map {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    if !v.is_string() {
                        return Err(Status::bad_request(format!(
                            "metadata.{field}.{k}: expected a string value"
                        )));
                    }
                    if field == "labels" {
                        if let Err(e) = api::labels::validate_label_key(k) {
                            return Err(invalid(
                                "metadata.labels",
                                &format!("Invalid value: {k:?}: {e}"),
                            ));
                        }
                        if let Err(e) =
                            api::labels::validate_label_value(k, v.as_str().unwrap_or(""))
                        {
                            return Err(invalid(
                                "metadata.labels",
                                &format!("Invalid value: {v}: {e}"),
                            ));
                        }
                    }
                }
            }
            Some(_) => {
                return Err(Status::bad_request(format!(
                    "metadata.{field} must be an object"
                )))
            }
        }
    }
    for (f, want) in [
        ("generation", "integer"),
        ("finalizers", "array"),
        ("ownerReferences", "array"),
    ] {
        if let Some(v) = meta.get(f) {
            let ok = match want {
                "integer" => v.is_i64(),
                _ => v.is_array() || v.is_null(),
            };
            if !ok {
                return Err(Status::bad_request(format!(
                    "metadata.{f} must be an {want}"
                )));
            }
        }
    }
    // Checks added after objects may have been stored without them hold an update to what
    // the stored object already passed: an object that fails one as stored may still be
    // updated (a finalizer removed, a status written) without first being repaired, as
    // long as the update brings no violation the stored object did not already have.
    let ratchet = |check: &dyn Fn(&Object) -> Result<(), Status>| match check(obj) {
        Err(new) => match old.map(check) {
            Some(Err(before)) if only_old_violations(&new, &before) => Ok(()),
            _ => Err(new),
        },
        ok => ok,
    };
    ratchet(&|o| validate_annotations(info, name, o))?;
    ratchet(&|o| validate_meta_lists(info, name, o))?;
    if let Some(old) = old {
        validate_no_new_finalizers(info, name, meta, old)?;
    }
    if info.group == "batch" {
        super::job::validate(kind, obj)?;
    }
    if let Some(custom) = info.custom {
        return super::apiextensions::strategy::validate(info, custom, obj, old);
    }
    if info.group == "apiextensions.k8s.io" && kind == "CustomResourceDefinition" {
        return super::apiextensions::strategy::validate_crd(obj, None);
    }
    // A quantity that is not one never passes: Kubernetes' decoder refuses it.
    super::pod_validation::validate_quantities(info.group, kind, obj)?;
    ratchet(&|o| super::pod_validation::validate(info.group, kind, o))?;
    ratchet(&|o| super::workload_validation::validate(info.group, kind, o))?;
    ratchet(&|o| super::service_validation::validate(info.group, kind, o))?;
    ratchet(&|o| super::config_validation::validate(info.group, kind, o))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::find;

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn create_sets_server_fields_and_generate_name() {
        let info = find("", "v1", "configmaps").unwrap();
        let mut o = obj(json!({"metadata": {"generateName": "x-", "resourceVersion": "5"}}));
        prepare_for_create(info, &mut o, "default").unwrap();
        assert!(o.name().starts_with("x-") && o.name().len() == 7);
        // A long prefix is cut so that the name fits in 63 characters.
        let long = format!("{}-", "a".repeat(70));
        let name = generate_name(&long);
        assert_eq!(name.len(), 63);
        assert!(name.starts_with(&"a".repeat(58)));
        assert_eq!(o.namespace(), "default");
        // A ConfigMap has no generation of its own, as in kube-apiserver.
        assert_eq!(o.metadata().and_then(|m| m.get("generation")), None);
        assert!(!o.uid().is_empty());
        assert_eq!(o.resource_version(), "");
        assert_eq!(o.kind(), "ConfigMap");
        validate(info, &o, None).unwrap();
    }

    #[test]
    fn secrets_merge_string_data_and_default_their_type() {
        let info = find("", "v1", "secrets").unwrap();
        let mut o = obj(json!({"metadata": {"name": "s"},
            "data": {"a": "b2xk", "keep": "eA=="}, "stringData": {"a": "new", "b": "é"}}));
        prepare_for_create(info, &mut o, "default").unwrap();
        assert_eq!(
            o.0["data"],
            json!({"a": "bmV3", "keep": "eA==", "b": "w6k="})
        );
        assert!(o.0.get("stringData").is_none());
        assert_eq!(o.0["type"], "Opaque");
        let mut typed = obj(json!({"metadata": {"name": "t"}, "type": "kubernetes.io/tls"}));
        prepare_for_create(info, &mut typed, "default").unwrap();
        assert_eq!(typed.0["type"], "kubernetes.io/tls");
        // An update with stringData is merged the same way; bad shapes are 400.
        let new = obj(json!({"metadata": {"name": "s"}, "stringData": {"c": "d"}}));
        let out = prepare_for_update(info, &o, new, false).unwrap();
        assert_eq!(out.0["data"], json!({"c": "ZA=="}));
        for bad in [
            json!({"stringData": ["x"]}),
            json!({"stringData": {"k": 1}}),
            json!({"data": 5, "stringData": {"k": "v"}}),
        ] {
            let mut b = obj(bad);
            b.set_meta("name", "b");
            assert_eq!(
                prepare_for_create(info, &mut b, "default")
                    .unwrap_err()
                    .code(),
                400
            );
        }
    }

    #[test]
    fn namespace_mismatch_and_wrong_kind_are_rejected() {
        let info = find("", "v1", "configmaps").unwrap();
        let mut o = obj(json!({"metadata": {"name": "a", "namespace": "other"}}));
        assert_eq!(
            prepare_for_create(info, &mut o, "default")
                .unwrap_err()
                .code(),
            400
        );
        let mut o = obj(json!({"kind": "Pod", "metadata": {"name": "a"}}));
        assert_eq!(
            prepare_for_create(info, &mut o, "default")
                .unwrap_err()
                .code(),
            400
        );
    }

    #[test]
    fn only_kinds_that_track_it_get_a_generation_from_the_server() {
        let cms = find("", "v1", "configmaps").unwrap();
        let deploys = find("apps", "v1", "deployments").unwrap();
        let gen = |o: &Object| o.metadata().and_then(|m| m.get("generation")).cloned();
        let mut d = obj(json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}}));
        prepare_for_create(deploys, &mut d, "default").unwrap();
        assert_eq!(gen(&d), Some(json!(1)));
        // A ConfigMap keeps what the client sent on create, and the stored value after.
        let mut c = obj(json!({"metadata": {"name": "c", "generation": 7}, "data": {"a": "1"}}));
        prepare_for_create(cms, &mut c, "default").unwrap();
        assert_eq!(gen(&c), Some(json!(7)));
        let changed = obj(json!({"metadata": {"name": "c", "generation": 9}, "data": {"a": "2"}}));
        let out = prepare_for_update(cms, &c, changed, false).unwrap();
        assert_eq!(gen(&out), Some(json!(7)));
        let plain = obj(json!({"metadata": {"name": "c"}, "data": {"a": "3"}}));
        let old = obj(json!({"metadata": {"name": "c", "uid": "u"}, "data": {"a": "2"}}));
        let sent = obj(json!({"metadata": {"name": "c", "generation": 3}, "data": {"a": "3"}}));
        assert_eq!(
            gen(&prepare_for_update(cms, &old, sent, false).unwrap()),
            None
        );
        assert_eq!(
            gen(&prepare_for_update(cms, &c, plain, false).unwrap()),
            Some(json!(7))
        );
    }

    #[test]
    fn update_keeps_status_and_bumps_generation_on_spec_change() {
        let info = find("apps", "v1", "deployments").unwrap();
        let old = obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "uid": "u1", "generation": 2, "creationTimestamp": "t"},
            "spec": {"replicas": 1}, "status": {"replicas": 1}}));
        let same = obj(
            json!({"metadata": {"name": "d", "labels": {"a": "b"}}, "spec": {"replicas": 1}, "status": {"replicas": 9}}),
        );
        let out = prepare_for_update(info, &old, same, false).unwrap();
        assert_eq!(out.generation(), 2);
        assert_eq!(out.uid(), "u1");
        assert_eq!(out.get("status"), Some(&json!({"replicas": 1})));
        let changed = obj(json!({"metadata": {"name": "d"}, "spec": {"replicas": 3}}));
        assert_eq!(
            prepare_for_update(info, &old, changed, false)
                .unwrap()
                .generation(),
            3
        );
        let status = obj(
            json!({"metadata": {"name": "d", "labels": {"x": "y"}}, "spec": {"replicas": 7}, "status": {"replicas": 5}}),
        );
        let out = prepare_for_update(info, &old, status, true).unwrap();
        assert_eq!(out.get("spec"), Some(&json!({"replicas": 1})));
        assert_eq!(out.get("status"), Some(&json!({"replicas": 5})));
        assert!(out.labels().is_none());
    }

    #[test]
    fn validation_rejects_bad_names_labels_and_pods_without_containers() {
        let pods = find("", "v1", "pods").unwrap();
        assert_eq!(
            validate(pods, &obj(json!({"metadata": {"name": "Bad_Name"}})), None)
                .unwrap_err()
                .code(),
            422
        );
        assert_eq!(
            validate(
                pods,
                &obj(json!({"metadata": {"name": "p"}, "spec": {}})),
                None
            )
            .unwrap_err()
            .code(),
            422
        );
        let ok = obj(
            json!({"metadata": {"name": "p", "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
        );
        validate(pods, &ok, None).unwrap();
        let bad_label = obj(
            json!({"metadata": {"name": "p", "labels": {"app": "x y"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        );
        assert_eq!(validate(pods, &bad_label, None).unwrap_err().code(), 422);
    }

    /// Annotation keys follow the label-key rule in any case; values are free, but all of an
    /// object's annotations together hold at most 256 KiB.
    #[test]
    fn annotations_need_qualified_keys_and_fit_the_total_size() {
        let cms = find("", "v1", "configmaps").unwrap();
        let cm = |a: Value| obj(json!({"metadata": {"name": "c", "annotations": a}}));
        validate(
            cms,
            &cm(json!({"Example.COM/Some_Key": "any value: x y", "plain": ""})),
            None,
        )
        .unwrap();
        for bad in ["has space", "/x", "a/", "-lead", "x/y/z", &"k".repeat(64)] {
            let err = validate(cms, &cm(json!({ bad: "v" })), None).unwrap_err();
            assert_eq!(err.code(), 422, "{bad:?}");
            assert!(
                err.message.contains("metadata.annotations"),
                "{bad:?}: {}",
                err.message
            );
        }
        // Exactly at the limit is allowed (keys count too); one byte more is not.
        let fits = TOTAL_ANNOTATION_SIZE_LIMIT - "a".len() - "b".len();
        validate(cms, &cm(json!({"a": "x".repeat(fits), "b": ""})), None).unwrap();
        let err =
            validate(cms, &cm(json!({"a": "x".repeat(fits + 1), "b": ""})), None).unwrap_err();
        assert_eq!(err.code(), 422);
        assert!(err.message.contains("Too long"), "{}", err.message);
    }

    /// An object stored before a check existed, and failing it, may still be updated; an
    /// object that passed it may not be updated into failing it.
    #[test]
    fn newer_checks_hold_an_update_to_what_the_stored_object_passed() {
        let cms = find("", "v1", "configmaps").unwrap();
        let with = |a: Value| obj(json!({"metadata": {"name": "c", "annotations": a}}));
        let stored_bad = with(json!({"bad key": "v"}));
        let mut cleared = stored_bad.clone();
        cleared.0.insert("data".into(), json!({"k": "v"}));
        validate(cms, &cleared, Some(&stored_bad)).unwrap();
        let stored_good = with(json!({"good": "v"}));
        assert_eq!(
            validate(cms, &with(json!({"bad key": "v"})), Some(&stored_good))
                .unwrap_err()
                .code(),
            422
        );
        let pods = find("", "v1", "pods").unwrap();
        let pod = |policy: &str| {
            obj(json!({"metadata": {"name": "p"}, "spec": {"containers": [
                {"name": "c", "image": "i", "imagePullPolicy": policy}]}}))
        };
        validate(pods, &pod("Often"), Some(&pod("Often"))).unwrap();
        // A violation the stored object did not have is refused even then.
        let mut worse = stored_bad.clone();
        worse.0["metadata"]["annotations"]["another bad"] = json!("v");
        assert_eq!(
            validate(cms, &worse, Some(&stored_bad)).unwrap_err().code(),
            422
        );
        assert_eq!(
            validate(pods, &pod("Often"), Some(&pod("Always")))
                .unwrap_err()
                .code(),
            422
        );
    }

    /// Generation, owner references and finalizers as Kubernetes checks them on every write,
    /// and no finalizer added to an object being deleted.
    #[test]
    fn generation_owner_references_and_finalizers_are_checked() {
        let cms = find("", "v1", "configmaps").unwrap();
        let cm = |m: Value| {
            let mut meta = json!({"name": "c"});
            meta.as_object_mut()
                .unwrap()
                .extend(m.as_object().unwrap().clone());
            obj(json!({ "metadata": meta }))
        };
        let owner = |name: &str, uid: &str, controller: bool| {
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": uid,
                   "controller": controller})
        };
        let good = cm(json!({"generation": 0,
            "ownerReferences": [owner("a", "1", true), owner("b", "2", false)],
            "finalizers": ["example.com/hold", "orphan"]}));
        validate(cms, &good, None).unwrap();
        let bad = [
            ("metadata.generation", json!({"generation": -1})),
            (
                "metadata.ownerReferences.uid",
                json!({"ownerReferences": [owner("a", "", false)]}),
            ),
            (
                "metadata.ownerReferences.apiVersion",
                json!({"ownerReferences": [{"apiVersion": "apps/", "kind": "K", "name": "n", "uid": "u"}]}),
            ),
            (
                "metadata.ownerReferences.kind",
                json!({"ownerReferences": [{"apiVersion": "v1", "name": "n", "uid": "u"}]}),
            ),
            (
                "metadata.ownerReferences",
                json!({"ownerReferences": [{"apiVersion": "v1", "kind": "Event", "name": "n", "uid": "u"}]}),
            ),
            (
                "metadata.ownerReferences",
                json!({"ownerReferences": [owner("a", "1", true), owner("b", "2", true)]}),
            ),
            (
                "metadata.finalizers",
                json!({"finalizers": ["not qualified"]}),
            ),
            (
                "metadata.finalizers",
                json!({"finalizers": ["orphan", "foregroundDeletion"]}),
            ),
        ];
        for (field, m) in bad {
            let err = validate(cms, &cm(m.clone()), None).unwrap_err();
            assert_eq!(err.code(), 422, "{m}");
            assert!(
                err.message.contains(&format!("{field}:")),
                "{m}: {}",
                err.message
            );
        }
        // Being deleted: finalizers may be removed or kept, not added.
        let deleting = cm(json!({"deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["example.com/a", "example.com/b"]}));
        validate(
            cms,
            &cm(json!({"finalizers": ["example.com/b"]})),
            Some(&deleting),
        )
        .unwrap();
        let err = validate(
            cms,
            &cm(json!({"finalizers": ["example.com/a", "example.com/c"]})),
            Some(&deleting),
        )
        .unwrap_err();
        assert!(err.message.contains("example.com/c"), "{}", err.message);
        // Not being deleted: adding is fine.
        let live = cm(json!({"finalizers": ["example.com/a"]}));
        validate(
            cms,
            &cm(json!({"finalizers": ["example.com/a", "example.com/c"]})),
            Some(&live),
        )
        .unwrap();
    }
}
