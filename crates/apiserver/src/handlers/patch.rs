//! PATCH: merge, JSON and strategic-merge patches applied to the current object, then the
//! same compare-and-swap path as update; server-side apply (`application/apply-patch+yaml`)
//! is in [`super::apply`].

use super::state::{ApiServer, WriteOptions};
use super::update::{parse_precondition, write_with_retry, Tracking};
use super::RequestInfo;
use crate::encoding::body::Body;
use api::patch::{apply_patch_to, PatchType};
use api::{Object, Status};
use bytes::Bytes;
use http::Response;

/// The media type of a server-side apply request.
pub const APPLY_PATCH_CONTENT_TYPE: &str = "application/apply-patch+yaml";

/// Handles `PATCH .../{name}` and `PATCH .../{name}/status`.
pub async fn patch(
    srv: &ApiServer,
    req: &RequestInfo,
    content_type: &str,
    body: Bytes,
    wopts: &WriteOptions,
) -> Result<Response<Body>, Status> {
    let name = req.require_name("PATCH")?.to_string();
    let media = content_type.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case(APPLY_PATCH_CONTENT_TYPE) {
        return super::apply::apply(srv, req, &name, body, wopts).await;
    }
    let patch_type = PatchType::from_content_type(content_type)
        // Custom objects have no patch strategies to merge by, as in Kubernetes.
        .filter(|t| !(req.info.custom.is_some() && *t == PatchType::StrategicMerge))
        .ok_or_else(|| {
            let [json, merge, strategic] = PatchType::ALL.map(PatchType::content_type);
            let accepted: Vec<&str> = if req.info.custom.is_some() {
                vec![json, merge, APPLY_PATCH_CONTENT_TYPE]
            } else {
                vec![json, merge, strategic, APPLY_PATCH_CONTENT_TYPE]
            };
            Status::unsupported_media_type(content_type, &accepted)
        })?;
    if wopts.force.is_some() {
        return Err(Status::new(
            api::Reason::Invalid,
            "force: Forbidden: may not be specified for non-apply patch",
        )
        .with_cause(
            "FieldValueForbidden",
            "force",
            "may not be specified for non-apply patch",
        ));
    }
    let status_only = req.subresource.as_deref() == Some("status");
    let info = req.info;
    // A resourceVersion inside the patch is a precondition, as in kube-apiserver.
    let precondition = match patch_resource_version(&body) {
        Some(rv) => parse_precondition(&rv)?,
        None => None,
    };
    let hint = api::patch::PatchKindHint::new(info.group, info.kind);
    let tracking = Tracking::Update;
    write_with_retry(
        srv,
        req,
        &name,
        precondition,
        status_only,
        wopts,
        tracking,
        |old| {
            let patched = apply_patch_to(hint, old.clone().into_value(), &body, patch_type)
                .map_err(|e| match e.reason() {
                    api::Reason::Invalid => {
                        Status::invalid(info.kind, &name, "patch", &e.to_string())
                    }
                    _ => e.to_status(),
                })?;
            let mut obj = Object::from_value(patched)
                .ok_or_else(|| Status::bad_request("the patched object is not a JSON object"))?;
            wopts.check_fields(info, &mut obj)?;
            if obj.name() != name {
                return Err(Status::bad_request(
                    "metadata.name cannot be changed by a patch",
                ));
            }
            check_identity(req, old, &obj)?;
            obj.remove_meta("resourceVersion");
            Ok(obj)
        },
    )
    .await
}

/// The string at `metadata.resourceVersion` of a patch body, as reading the whole body into
/// a tree and looking there would find it (the last of repeated keys counts; a body the
/// tree would refuse has none), but building only the `metadata` member.
fn patch_resource_version(body: &[u8]) -> Option<String> {
    use serde::de::{Deserializer as _, MapAccess, SeqAccess, Visitor};
    /// A value read as the tree reads it (every string checked, numbers in range, nesting
    /// bounded: serde_json's `IgnoredAny` checks none of these) and dropped.
    struct Skip;
    impl<'de> serde::Deserialize<'de> for Skip {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Skip, D::Error> {
            d.deserialize_any(SkipVisitor)
        }
    }
    struct SkipVisitor;
    impl<'de> Visitor<'de> for SkipVisitor {
        type Value = Skip;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
            while map.next_key::<Skip>()?.is_some() {
                map.next_value::<Skip>()?;
            }
            Ok(Skip)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
            while seq.next_element::<Skip>()?.is_some() {}
            Ok(Skip)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
            Ok(Skip)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
            Ok(Skip)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
            Ok(Skip)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
            Ok(Skip)
        }
        fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
            Ok(Skip)
        }
        fn visit_unit<E>(self) -> Result<Skip, E> {
            Ok(Skip)
        }
    }
    struct Top;
    impl<'de> Visitor<'de> for Top {
        type Value = Option<serde_json::Value>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a patch")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut metadata = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == "metadata" {
                    metadata = Some(map.next_value::<serde_json::Value>()?);
                } else {
                    map.next_value::<Skip>()?;
                }
            }
            Ok(metadata)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<Skip>()?.is_some() {}
            Ok(None)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let metadata = de.deserialize_any(Top).ok()?;
    de.end().ok()?;
    metadata?
        .get("resourceVersion")?
        .as_str()
        .map(str::to_string)
}

/// What kube-apiserver refuses of a patched object's identity: a namespace other than the
/// URL's (400; a cluster-scoped object's namespace is dropped, and a removed one is the
/// URL's), and a uid other than the object's (422, the field is immutable; a removed one is
/// the object's).
fn check_identity(req: &RequestInfo, old: &Object, patched: &Object) -> Result<(), Status> {
    let ns = patched.namespace();
    if req.info.namespaced && !ns.is_empty() && ns != req.namespace.as_deref().unwrap_or("") {
        return Err(Status::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let uid = patched.uid();
    if !uid.is_empty() && uid != old.uid() {
        return Err(Status::invalid(
            req.info.kind,
            patched.name(),
            "metadata.uid",
            &format!("Invalid value: {uid:?}: field is immutable"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What reading the whole body into a tree finds.
    fn by_tree(body: &[u8]) -> Option<String> {
        serde_json::from_slice::<serde_json::Value>(body)
            .ok()?
            .get("metadata")?
            .get("resourceVersion")?
            .as_str()
            .map(str::to_string)
    }

    #[test]
    fn a_patch_resource_version_is_read_as_the_tree_reads_it() {
        // What the tree refuses outside `metadata`: out-of-range numbers, lone surrogates,
        // bytes that are not UTF-8, nesting past serde_json's limit.
        let deep = format!(
            r#"{{"metadata":{{"resourceVersion":"5"}},"x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        for body in [
            &br#"{"metadata":{"resourceVersion":"5"},"x":1e400}"#[..],
            br#"{"metadata":{"resourceVersion":"5"},"x":"\ud800"}"#,
            b"{\"metadata\":{\"resourceVersion\":\"5\"},\"x\":\"\xff\"}",
            b"{\"metadata\":{\"resourceVersion\":\"5\"},\"\xff\":1}",
            deep.as_bytes(),
        ] {
            assert_eq!(by_tree(body), None);
            assert_eq!(patch_resource_version(body), None, "{body:?}");
        }
        for body in [
            r#"{"metadata":{"resourceVersion":"5"}}"#,
            r#"{"spec":{"x":[1,2,{"a":null}]},"metadata":{"labels":{"a":"b"},"resourceVersion":"7"}}"#,
            r#"{"metadata":"x","metadata":{"resourceVersion":"8"}}"#,
            r#"{"metadata":{"resourceVersion":"8"},"metadata":{}}"#,
            r#"{"metadata":{"resourceVersion":"8","resourceVersion":"9"}}"#,
            r#"{"metadata":{"resourceVersion":9}}"#,
            r#"{"metadata":{"resourceVersion":"1"}} trailing"#,
            r#"{"metadata":{"resourceVersion":"1"}"#,
            r#"[{"op":"replace","path":"/metadata/resourceVersion","value":"3"}]"#,
            r#""metadata""#,
            "null",
            "",
        ] {
            assert_eq!(
                patch_resource_version(body.as_bytes()),
                by_tree(body.as_bytes()),
                "{body}"
            );
        }
    }

    proptest! {
        #[test]
        fn any_text_is_read_as_the_tree_reads_it(
            body in r#"[{}\[\]",: 0-9a-z]{0,40}"#,
            rv in "[0-9]{1,3}",
        ) {
            let wrapped = format!(r#"{{"metadata":{{"resourceVersion":"{rv}"}},"x":{body}}}"#);
            for text in [body.as_str(), wrapped.as_str()] {
                prop_assert_eq!(
                    patch_resource_version(text.as_bytes()),
                    by_tree(text.as_bytes())
                );
            }
        }
    }
}
