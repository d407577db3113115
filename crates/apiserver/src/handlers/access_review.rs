//! The self-review APIs clients use to ask what they may do and who they are:
//! `SelfSubjectAccessReview` and `SelfSubjectRulesReview` (`kubectl auth can-i [--list]`) and
//! `SelfSubjectReview` (`kubectl auth whoami`).
//!
//! listwatch has one identity: every authenticated request (admin token, a client
//! certificate of its CA, or the loopback insecure port) may do everything. The reviews say
//! exactly that. Nothing is stored: a review is answered and forgotten, as in Kubernetes.

use super::json_response;
use crate::encoding::body::Body;
use api::Status;
use http::Response;
use serde_json::{json, Value};

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

/// Why every review allows everything (the `reason` of an access review).
const REASON: &str =
    "listwatch serves a single administrator: every authenticated request is allowed";

/// Answers a review `POST`: the request as sent, with its `status` filled in (201).
pub fn review(review: &Review, body: &[u8]) -> Result<Response<Body>, Status> {
    let (group, version, _, kind) = *review;
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
    let status = match kind {
        "SelfSubjectAccessReview" => {
            let attrs = map.get("spec").and_then(|s| {
                s.get("resourceAttributes")
                    .or_else(|| s.get("nonResourceAttributes"))
            });
            if attrs.is_none() {
                return Err(Status::invalid(
                    kind,
                    "",
                    "spec",
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                ));
            }
            json!({"allowed": true, "reason": REASON})
        }
        "SelfSubjectRulesReview" => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
        _ => json!({"userInfo": {
            "username": "admin",
            "groups": ["system:masters", "system:authenticated"],
        }}),
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
    use http_body_util::BodyExt as _;

    async fn answer(resource: &str, body: &str) -> (u16, Value) {
        let r = REVIEWS.iter().find(|r| r.2 == resource).unwrap();
        match review(r, body.as_bytes()) {
            Ok(resp) => {
                let code = resp.status().as_u16();
                let bytes = resp.into_body().collect().await.unwrap().to_bytes();
                (code, serde_json::from_slice(&bytes).unwrap())
            }
            Err(s) => (s.code(), Value::Null),
        }
    }

    #[tokio::test]
    async fn reviews_allow_everything_and_check_their_input() {
        let (code, v) = answer(
            "selfsubjectaccessreviews",
            r#"{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","spec":{"resourceAttributes":{"verb":"create","resource":"pods"}}}"#,
        )
        .await;
        assert_eq!(code, 201);
        assert_eq!(v["status"]["allowed"], true);
        assert_eq!(v["spec"]["resourceAttributes"]["verb"], "create");
        let (code, _) = answer("selfsubjectaccessreviews", r#"{"spec":{}}"#).await;
        assert_eq!(code, 422);
        let (code, _) = answer("selfsubjectaccessreviews", "[").await;
        assert_eq!(code, 400);
        let (code, _) = answer("selfsubjectreviews", r#"{"kind":"Pod"}"#).await;
        assert_eq!(code, 400);
        let (code, v) = answer("selfsubjectreviews", "{}").await;
        assert_eq!(code, 201);
        assert_eq!(v["status"]["userInfo"]["username"], "admin");
        let (_, v) = answer(
            "selfsubjectrulesreviews",
            r#"{"spec":{"namespace":"default"}}"#,
        )
        .await;
        assert_eq!(v["status"]["resourceRules"][0]["verbs"], json!(["*"]));
    }
}
