//! Validation of `rbac.authorization.k8s.io/v1` RoleBindings and ClusterRoleBindings, as
//! kube-apiserver 1.32 applies it: `roleRef` names a Role (RoleBindings only) or ClusterRole
//! of group `rbac.authorization.k8s.io` and never changes once stored; every subject is a
//! `User` or `Group` (group `rbac.authorization.k8s.io`) or a `ServiceAccount` (core group,
//! with a namespace in a ClusterRoleBinding), with a name.

use api::status::FieldError;
use api::{Object, Status};
use serde_json::Value;

const GROUP: &str = "rbac.authorization.k8s.io";

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// Checks a binding of `kind` (`RoleBinding` or `ClusterRoleBinding`) about to be stored;
/// `old` is the stored one on an update.
///
/// # Errors
/// 422 naming every field in error.
pub fn validate_binding(kind: &str, obj: &Object, old: Option<&Object>) -> Result<(), Status> {
    let mut errs = Vec::new();
    let role_ref = obj.get("roleRef").cloned().unwrap_or(Value::Null);
    let allowed_kinds: &[&str] = if kind == "RoleBinding" {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !role_ref.is_object() {
        errs.push(FieldError::required("roleRef", ""));
    } else {
        if s(&role_ref, "apiGroup") != GROUP {
            errs.push(FieldError::not_supported(
                "roleRef.apiGroup",
                s(&role_ref, "apiGroup"),
                &[GROUP],
            ));
        }
        if !allowed_kinds.contains(&s(&role_ref, "kind")) {
            errs.push(FieldError::not_supported(
                "roleRef.kind",
                s(&role_ref, "kind"),
                allowed_kinds,
            ));
        }
        if s(&role_ref, "name").is_empty() {
            errs.push(FieldError::required("roleRef.name", ""));
        }
    }
    if let Some(old) = old {
        if old.get("roleRef") != obj.get("roleRef") {
            errs.push(FieldError::invalid(
                "roleRef",
                &role_ref,
                "cannot change roleRef",
            ));
        }
    }
    let subjects = obj
        .get("subjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, sub) in subjects.iter().enumerate() {
        let path = |f: &str| format!("subjects[{i}].{f}");
        if s(sub, "name").is_empty() {
            errs.push(FieldError::required(path("name"), ""));
        }
        match s(sub, "kind") {
            "User" | "Group" => {
                if s(sub, "apiGroup") != GROUP {
                    errs.push(FieldError::not_supported(
                        path("apiGroup"),
                        s(sub, "apiGroup"),
                        &[GROUP],
                    ));
                }
            }
            "ServiceAccount" => {
                if !s(sub, "apiGroup").is_empty() {
                    errs.push(FieldError::not_supported(
                        path("apiGroup"),
                        s(sub, "apiGroup"),
                        &[""],
                    ));
                }
                if kind == "ClusterRoleBinding" && s(sub, "namespace").is_empty() {
                    errs.push(FieldError::required(path("namespace"), ""));
                }
            }
            other => errs.push(FieldError::not_supported(
                path("kind"),
                other,
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
    if errs.is_empty() {
        return Ok(());
    }
    Err(Status::invalid_fields(kind, GROUP, obj.name(), &errs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn role_refs_and_subjects_are_checked() {
        let good = obj(json!({"metadata": {"name": "b"},
            "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "r"},
            "subjects": [{"kind": "User", "apiGroup": GROUP, "name": "alice"},
                         {"kind": "ServiceAccount", "name": "bot"}]}));
        assert!(validate_binding("RoleBinding", &good, None).is_ok());
        let e = validate_binding("ClusterRoleBinding", &good, None).unwrap_err();
        assert_eq!(e.code(), 422);
        assert!(e.message.contains("roleRef.kind"), "{}", e.message);
        assert!(e.message.contains("subjects[1].namespace"), "{}", e.message);
        let none = obj(json!({"metadata": {"name": "b"}}));
        assert!(validate_binding("RoleBinding", &none, None)
            .unwrap_err()
            .message
            .contains("roleRef"));
        let moved = obj(json!({"metadata": {"name": "b"},
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "admin"}}));
        let e = validate_binding("RoleBinding", &moved, Some(&good)).unwrap_err();
        assert!(e.message.contains("cannot change roleRef"), "{}", e.message);
        let odd = obj(json!({"metadata": {"name": "b"},
            "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "r"},
            "subjects": [{"kind": "Robot", "name": "x"}, {"kind": "Group", "name": ""}]}));
        let e = validate_binding("RoleBinding", &odd, None).unwrap_err();
        assert!(
            e.message.contains("subjects[0].kind") && e.message.contains("subjects[1].name"),
            "{}",
            e.message
        );
    }
}
