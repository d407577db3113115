//! Dropping `metadata.managedFields` from an object's JSON text before it is decoded.
//!
//! Controllers never read field ownership, yet a pod written by three managers carries three
//! `fieldsV1` trees, and decoding them into a typed object costs more than the rest of its
//! metadata. kube-scheduler and kube-controller-manager trim them from every object their
//! informers hold; an informer whose [`ListWatchOptions`](crate::cache::ListWatchOptions)
//! ask for it does the same here, but before decoding, so the trees are never built.
//!
//! Writing such an object back is safe: a write without `managedFields` leaves the server's
//! record of them as it was (an absent list means "not set", as in kube-apiserver).

use crate::json_validate::{JsonError, Validator};
use crate::object::{DecodeObject, ObjectError};
use std::borrow::Cow;
use std::ops::Range;

/// The bytes of `json` (one well-formed JSON object) to cut so that its
/// `metadata.managedFields` member is gone and what remains is still well-formed: the
/// member, and the comma that joined it to a neighbour. `None` if the object has no such
/// member (or spells its key with escapes, which only costs the saving).
///
/// # Errors
/// When `json` is not well-formed up to the end of `metadata`.
pub fn managed_fields_span(json: &[u8]) -> Result<Option<Range<usize>>, JsonError> {
    scan_metadata(json, false).map(|m| m.managed_fields)
}

/// What [`scan_metadata`] found in an object's `metadata`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MetadataScan<'a> {
    /// As [`managed_fields_span`].
    pub managed_fields: Option<Range<usize>>,
    /// The raw text of `metadata.uid` between its quotes, if it is a string without escapes
    /// (and given once).
    pub uid: Option<&'a [u8]>,
    /// The raw text of `metadata.resourceVersion`, likewise.
    pub resource_version: Option<&'a [u8]>,
}

/// One walk over the members of `json`'s `metadata` (`json` being one JSON object): the
/// span [`managed_fields_span`] returns and, with `identity`, the object's uid and
/// resourceVersion. Stops at the end of `metadata`, or without `identity` as soon as the
/// span is found.
///
/// # Errors
/// When `json` is not well-formed up to where the walk stops.
pub fn scan_metadata(json: &[u8], identity: bool) -> Result<MetadataScan<'_>, JsonError> {
    let mut v = Validator::new(json);
    v.expect(b'{', "expected an object")?;
    if v.peek() == Some(b'}') {
        return Ok(MetadataScan::default());
    }
    loop {
        let (key, _) = v.string()?;
        v.expect(b':', "expected `:`")?;
        if key == b"metadata" {
            return if v.peek() == Some(b'{') {
                scan_members(&mut v, identity)
            } else {
                Ok(MetadataScan::default())
            };
        }
        v.value()?;
        if !v.next_member(b'}')? {
            return Ok(MetadataScan::default());
        }
    }
}

/// With the cursor on `metadata`'s object: the span of its `managedFields` member with one
/// joining comma, and (with `identity`) its plain uid and resourceVersion strings.
fn scan_members<'a>(v: &mut Validator<'a>, identity: bool) -> Result<MetadataScan<'a>, JsonError> {
    let mut found = MetadataScan::default();
    // A uid or resourceVersion given twice is no identity: which one counts is the
    // decoder's business.
    let (mut uids, mut versions) = (0, 0);
    v.expect(b'{', "expected an object")?;
    if v.peek() == Some(b'}') {
        return Ok(found);
    }
    // Where the previous member's value ended (the comma before a member follows it).
    let mut previous_end = None;
    loop {
        v.peek();
        let start = v.pos();
        let (key, _) = v.string()?;
        v.expect(b':', "expected `:`")?;
        let (value_start, end) = v.value()?;
        let more = v.next_member(b'}')?;
        match key {
            // The first one, as `managed_fields_span` cuts (a decoder refuses the text).
            b"managedFields" if found.managed_fields.is_none() => {
                found.managed_fields = Some(if more {
                    // `"managedFields":value,` — up to where the next member's key begins.
                    v.peek();
                    start..v.pos()
                } else if let Some(previous_end) = previous_end {
                    // The last member: `,"managedFields":value`.
                    previous_end..end
                } else {
                    start..end
                });
            }
            b"uid" if identity => {
                uids += 1;
                found.uid = plain_string(v.text(), value_start, end).filter(|_| uids == 1);
            }
            b"resourceVersion" if identity => {
                versions += 1;
                found.resource_version =
                    plain_string(v.text(), value_start, end).filter(|_| versions == 1);
            }
            _ => {}
        }
        // For the identity every member must be seen (one given twice is no identity).
        if !more || (found.managed_fields.is_some() && !identity) {
            return Ok(found);
        }
        previous_end = Some(end);
    }
}

/// The text between the quotes of the validated JSON value at `start..end`, if it is a
/// string without escapes.
fn plain_string(text: &[u8], start: usize, end: usize) -> Option<&[u8]> {
    match text.get(start..end)? {
        [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => Some(inner),
        _ => None,
    }
}

/// `json` without its `metadata.managedFields` (borrowed when there are none).
///
/// # Errors
/// When `json` is not well-formed up to the end of `metadata`.
pub fn without_managed_fields(json: &[u8]) -> Result<Cow<'_, [u8]>, JsonError> {
    Ok(match managed_fields_span(json)? {
        None => Cow::Borrowed(json),
        Some(span) => Cow::Owned(cut(json, span)),
    })
}

/// [`DecodeObject::decode_well_formed`] of `json` without its `metadata.managedFields`.
///
/// # Errors
/// As [`DecodeObject::decode`].
pub fn decode_well_formed_trimmed<K: DecodeObject>(json: &[u8]) -> Result<K, ObjectError> {
    let span = managed_fields_span(json)
        .map_err(|e| ObjectError::Json(<serde_json::Error as serde::de::Error>::custom(e)))?;
    decode_well_formed_cut(json, span)
}

/// [`decode_well_formed_trimmed`] with the span to cut already found by [`scan_metadata`].
///
/// # Errors
/// As [`DecodeObject::decode`].
pub fn decode_well_formed_cut<K: DecodeObject>(
    json: &[u8],
    managed_fields: Option<Range<usize>>,
) -> Result<K, ObjectError> {
    match managed_fields {
        None => K::decode_well_formed(json),
        Some(span) => K::decode_well_formed(&cut(json, span)),
    }
}

/// `json` without the bytes of `span`.
fn cut(json: &[u8], span: Range<usize>) -> Vec<u8> {
    let mut trimmed = Vec::with_capacity(json.len().saturating_sub(span.len()));
    trimmed.extend_from_slice(json.get(..span.start).unwrap_or_default());
    trimmed.extend_from_slice(json.get(span.end..).unwrap_or_default());
    trimmed
}

/// [`DecodeObject::decode`] of `json` without its `metadata.managedFields`: the whole text
/// is validated first.
///
/// # Errors
/// As [`DecodeObject::decode`].
pub fn decode_trimmed<K: DecodeObject>(json: &[u8]) -> Result<K, ObjectError> {
    crate::json_validate::validate(json)
        .map_err(|e| ObjectError::Json(<serde_json::Error as serde::de::Error>::custom(e)))?;
    decode_well_formed_trimmed(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn trimmed(v: &Value) -> Value {
        let text = serde_json::to_vec(v).unwrap();
        serde_json::from_slice(&without_managed_fields(&text).unwrap()).unwrap()
    }

    fn expected(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        v
    }

    #[test]
    fn the_member_goes_wherever_it_stands() {
        let mf = json!([{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]);
        for meta in [
            json!({"managedFields": mf}),
            json!({"managedFields": mf, "name": "a"}),
            json!({"name": "a", "managedFields": mf}),
            json!({"name": "a", "managedFields": mf, "uid": "u"}),
            json!({"name": "a"}),
            json!({}),
        ] {
            let obj = json!({"kind": "Pod", "metadata": meta, "spec": {"x": 1}});
            assert_eq!(trimmed(&obj), expected(&obj), "{obj}");
        }
        let spaced = br#" { "metadata" : { "a" : 1 ,  "managedFields" : [ ] } } "#;
        let out = without_managed_fields(spaced.trim_ascii()).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&out).unwrap(),
            json!({"metadata": {"a": 1}})
        );
    }

    #[test]
    fn nothing_is_copied_without_managed_fields() {
        let text = br#"{"metadata":{"name":"a"},"spec":{"managedFields":1}}"#;
        assert!(matches!(
            without_managed_fields(text).unwrap(),
            Cow::Borrowed(_)
        ));
        let text = br#"{"metadata":5}"#;
        assert!(matches!(
            without_managed_fields(text).unwrap(),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn typed_objects_decode_without_them() {
        use k8s_openapi::api::core::v1::Pod;
        let text = serde_json::to_vec(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "managedFields": [{"manager": "m", "operation": "Update",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}], "uid": "u"},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .unwrap();
        let pod: Pod = decode_trimmed(&text).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
        assert_eq!(pod.metadata.uid.as_deref(), Some("u"));
        assert!(pod.metadata.managed_fields.is_none());
        assert!(decode_trimmed::<Pod>(b"{\"metadata\":{\"managedFields\":[}}").is_err());
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-zA-Z\"\\\\ ]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("managedFields".to_string()),
                        Just("metadata".to_string()),
                        "[a-z]{1,4}"
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn trimming_equals_removing_the_member(
            meta in prop::collection::btree_map(
                prop_oneof![Just("managedFields".to_string()), "[a-z]{1,4}"],
                json_value(),
                0..5,
            ),
            before in prop::collection::btree_map("[a-l]{1,3}", json_value(), 0..3),
            after in prop::collection::btree_map("[n-z]{1,3}", json_value(), 0..3),
        ) {
            let mut obj = serde_json::Map::new();
            obj.extend(before);
            obj.insert("metadata".into(), Value::Object(meta.into_iter().collect()));
            obj.extend(after);
            let obj = Value::Object(obj);
            prop_assert_eq!(trimmed(&obj), expected(&obj));
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = without_managed_fields(&data);
            let _ = scan_metadata(&data, true);
        }

        /// The identity scan finds the same span as the plain one, and exactly the plain
        /// uid and resourceVersion strings `serde_json` reads there.
        #[test]
        fn the_identity_scan_reads_what_serde_reads(
            meta in prop::collection::btree_map(
                prop_oneof![
                    Just("managedFields".to_string()),
                    Just("uid".to_string()),
                    Just("resourceVersion".to_string()),
                    "[a-z]{1,4}",
                ],
                prop_oneof![json_value(), "[0-9a-f\\\\\"-]{0,6}".prop_map(Value::String)],
                0..6,
            ),
        ) {
            let obj = json!({"kind": "Pod", "metadata": meta.clone()});
            let text = serde_json::to_vec(&obj).unwrap();
            let scan = scan_metadata(&text, true).unwrap();
            prop_assert_eq!(&scan.managed_fields, &managed_fields_span(&text).unwrap());
            let plain = |k: &str| match meta.get(k) {
                Some(Value::String(s)) if !s.contains(['\\', '"']) => Some(s.as_bytes().to_vec()),
                _ => None,
            };
            prop_assert_eq!(scan.uid.map(<[u8]>::to_vec), plain("uid"));
            prop_assert_eq!(scan.resource_version.map(<[u8]>::to_vec), plain("resourceVersion"));
        }
    }
}
