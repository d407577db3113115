//! The review APIs: `SelfSubjectAccessReview` and `SelfSubjectRulesReview` (`kubectl auth
//! can-i [--list]`), `SubjectAccessReview` (may another user do this?) and
//! `SelfSubjectReview` (`kubectl auth whoami`). Each is answered by the server's own
//! authorizer for the caller (or, for `SubjectAccessReview`, the user it names), so the
//! answer is what the server would decide. Nothing is stored: a review is answered and
//! forgotten, as in Kubernetes.

use super::json_response;
use super::state::ApiServer;
use crate::auth::attributes::Attributes;
use crate::auth::rbac::policy_rule::strings;
use crate::auth::user_info::UserInfo;
use crate::encoding::body::Body;
use api::Status;
use http::Response;
use serde_json::{json, Value};
use std::sync::Arc;

/// One review resource: (group, version, resource, kind).
pub type Review = (&'static str, &'static str, &'static str, &'static str);

/// The review resources served.
pub const REVIEWS: &[Review] = &[
    (
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
    ),
    (
        "authorization.k8s.io",
        "v1",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
    ),
    (
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "SubjectAccessReview",
    ),
    (
        "authentication.k8s.io",
        "v1",
        "selfsubjectreviews",
        "SelfSubjectReview",
    ),
];

/// The review served at `group`/`version`/`resource`, if any.
pub fn find(group: &str, version: &str, resource: &str) -> Option<&'static Review> {
    REVIEWS
        .iter()
        .find(|(g, v, r, _)| *g == group && *v == version && *r == resource)
}

/// The attributes of a review's `spec` (`resourceAttributes` or `nonResourceAttributes`).
fn attributes(kind: &str, spec: &Value) -> Result<Attributes, Status> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    match (
        spec.get("resourceAttributes"),
        spec.get("nonResourceAttributes"),
    ) {
        (Some(r), None) if r.is_object() => Ok(Attributes::resource(
            &s(r, "verb"),
            &s(r, "group"),
            &s(r, "resource"),
            &s(r, "subresource"),
            &s(r, "namespace"),
            &s(r, "name"),
        )),
        (None, Some(n)) if n.is_object() => {
            Ok(Attributes::non_resource(&s(n, "verb"), &s(n, "path")))
        }
        _ => Err(Status::invalid(
            kind,
            "",
            "spec.resourceAttributes",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
    }
}

/// The user a `SubjectAccessReview` asks about.
fn subject(spec: &Value) -> Result<UserInfo, Status> {
    let user = spec.get("user").and_then(Value::as_str).unwrap_or("");
    let groups = strings(spec, "groups");
    if user.is_empty() && groups.is_empty() {
        return Err(Status::invalid(
            "SubjectAccessReview",
            "",
            "spec.user",
            "at least one of user or group must be specified",
        ));
    }
    let mut extra = std::collections::BTreeMap::new();
    let extras = &spec["extra"];
    if let Some(m) = extras.as_object() {
        for k in m.keys() {
            extra.insert(k.clone(), strings(extras, k));
        }
    }
    Ok(UserInfo {
        name: user.to_string(),
        uid: spec
            .get("uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        groups,
        extra,
    })
}

/// A review's status for `user` asking `attrs`.
fn access_status(srv: &ApiServer, user: &UserInfo, attrs: &Attributes) -> Value {
    let d = srv.authorizer().authorize(user, attrs);
    let mut st = json!({"allowed": d.allowed});
    if !d.reason.is_empty() {
        st["reason"] = d.reason.into();
    }
    st
}

/// The rules `user` holds in `namespace`, as a `SelfSubjectRulesReview` status.
fn rules_status(srv: &ApiServer, user: &UserInfo, namespace: &str) -> Value {
    let rbac = srv.authorizer().rbac();
    let mut rules = rbac.rules_for(user, namespace);
    if user.node_name().is_some() {
        if let Some(node) = rbac.snapshot().role_rules(
            &crate::auth::rbac::snapshot::RoleRef::Cluster("system:node".into()),
            "",
        ) {
            rules.extend(node.iter().cloned());
        }
    }
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in rules {
        if !r.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}));
        }
        if !r.resources.is_empty() {
            let mut v =
                json!({"verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources});
            if !r.resource_names.is_empty() {
                v["resourceNames"] = json!(r.resource_names);
            }
            resource_rules.push(v);
        }
    }
    json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    })
}

/// Answers a review `POST` by `user` (`None`: a request that was not authenticated, from
/// the loopback port): the request as sent, with its `status` filled in (201). A role or
/// binding this server admitted a moment ago is part of the answer.
pub async fn review(
    srv: &ApiServer,
    review: &Review,
    body: &[u8],
    user: Option<Arc<UserInfo>>,
) -> Result<Response<Body>, Status> {
    let (group, version, _, kind) = *review;
    let user = user.unwrap_or_else(UserInfo::unsecured);
    srv.authorizer().rbac().catch_up().await;
    let mut obj: Value = serde_json::from_slice(body)
        .map_err(|e| Status::bad_request(format!("invalid {kind}: {e}")))?;
    let api_version = format!("{group}/{version}");
    let Some(map) = obj.as_object_mut() else {
        return Err(Status::bad_request(format!("{kind} must be a JSON object")));
    };
    let given_kind = map.get("kind").and_then(Value::as_str).unwrap_or(kind);
    if given_kind != kind {
        return Err(Status::bad_request(format!(
            "expected kind {kind}, got {given_kind:?}"
        )));
    }
    map.insert("kind".into(), json!(kind));
    map.insert("apiVersion".into(), json!(api_version));
    if !map.get("metadata").is_some_and(Value::is_object) {
        map.insert("metadata".into(), json!({}));
    }
    let spec = map.get("spec").cloned().unwrap_or(Value::Null);
    let status = match kind {
        "SelfSubjectAccessReview" => access_status(srv, &user, &attributes(kind, &spec)?),
        "SubjectAccessReview" => {
            let attrs = attributes(kind, &spec)?;
            // Decided on exactly the user and groups the review names, as kube-apiserver does.
            access_status(srv, &subject(&spec)?, &attrs)
        }
        "SelfSubjectRulesReview" => {
            let ns = spec.get("namespace").and_then(Value::as_str).unwrap_or("");
            rules_status(srv, &user, ns)
        }
        _ => json!({"userInfo": user.to_json()}),
    };
    map.insert("status".into(), status);
    Ok(json_response(
        201,
        serde_json::to_vec(&obj).unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::user_info::GROUP_MASTERS;
    use http_body_util::BodyExt as _;

    async fn answer(srv: &ApiServer, user: &UserInfo, resource: &str, body: &str) -> (u16, Value) {
        let r = REVIEWS.iter().find(|r| r.2 == resource).unwrap();
        match review(srv, r, body.as_bytes(), Some(Arc::new(user.clone()))).await {
            Ok(resp) => {
                let code = resp.status().as_u16();
                let bytes = resp.into_body().collect().await.unwrap().to_bytes();
                (code, serde_json::from_slice(&bytes).unwrap())
            }
            Err(s) => (s.code(), Value::Null),
        }
    }

    #[tokio::test]
    async fn reviews_answer_for_the_caller_and_check_their_input() {
        let srv = ApiServer::new(
            Arc::new(storage::memory::MemoryStorage::new()),
            Default::default(),
        )
        .await
        .unwrap();
        let admin = UserInfo::authenticated("root", vec![GROUP_MASTERS.into()]);
        let alice = UserInfo::authenticated("alice", vec![]);
        let create_pods = r#"{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","spec":{"resourceAttributes":{"verb":"create","resource":"pods","namespace":"default"}}}"#;
        let (code, v) = answer(&srv, &admin, "selfsubjectaccessreviews", create_pods).await;
        assert_eq!(code, 201);
        assert_eq!(v["status"]["allowed"], true);
        assert_eq!(v["spec"]["resourceAttributes"]["verb"], "create");
        let (_, v) = answer(&srv, &alice, "selfsubjectaccessreviews", create_pods).await;
        assert_eq!(v["status"]["allowed"], false);
        // system:basic-user lets every authenticated user ask about themselves.
        let (_, v) = answer(
            &srv,
            &alice,
            "selfsubjectaccessreviews",
            r#"{"spec":{"resourceAttributes":{"verb":"create","group":"authorization.k8s.io","resource":"selfsubjectaccessreviews"}}}"#,
        )
        .await;
        assert_eq!(v["status"]["allowed"], true, "{v}");
        assert!(v["status"]["reason"]
            .as_str()
            .unwrap()
            .contains("system:basic-user"));
        let (code, _) = answer(&srv, &alice, "selfsubjectaccessreviews", r#"{"spec":{}}"#).await;
        assert_eq!(code, 422);
        let (code, _) = answer(&srv, &alice, "selfsubjectaccessreviews", "[").await;
        assert_eq!(code, 400);
        let (code, _) = answer(&srv, &alice, "selfsubjectreviews", r#"{"kind":"Pod"}"#).await;
        assert_eq!(code, 400);
        let (code, v) = answer(&srv, &alice, "selfsubjectreviews", "{}").await;
        assert_eq!(code, 201);
        assert_eq!(v["status"]["userInfo"]["username"], "alice");
        assert_eq!(
            v["status"]["userInfo"]["groups"],
            json!(["system:authenticated"])
        );
        let (_, v) = answer(
            &srv,
            &admin,
            "selfsubjectrulesreviews",
            r#"{"spec":{"namespace":"default"}}"#,
        )
        .await;
        assert!(v["status"]["resourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["verbs"] == json!(["*"]) && r["resources"] == json!(["*"])));
        let (_, v) = answer(
            &srv,
            &admin,
            "subjectaccessreviews",
            r#"{"spec":{"user":"bob","groups":["system:masters"],"resourceAttributes":{"verb":"delete","resource":"nodes"}}}"#,
        )
        .await;
        assert_eq!(v["status"]["allowed"], true);
        let (code, _) = answer(
            &srv,
            &admin,
            "subjectaccessreviews",
            r#"{"spec":{"resourceAttributes":{"verb":"get"}}}"#,
        )
        .await;
        assert_eq!(code, 422);
    }
}
