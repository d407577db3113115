//! RFC 7386 JSON merge patch (`application/merge-patch+json`).
//!
//! The rules: a patch that is an object is merged key by key into the target (a target that
//! is not an object is first replaced by `{}`); a `null` member deletes the key; a member
//! that is an object merges recursively; anything else (strings, numbers, booleans, arrays)
//! replaces the target's value. A patch that is not an object replaces the whole target.
//! Arrays are never merged: to change one element the client sends the whole array.

use serde_json::{Map, Value};

/// Applies `patch` to `original` by RFC 7386 and returns the result.
///
/// Never fails and never panics: every JSON value is a valid merge patch. `original` is not
/// modified. `null`s inside newly added objects are dropped, as the RFC specifies.
///
/// ```
/// use api::patch::merge_patch::apply;
/// use serde_json::json;
///
/// let out = apply(&json!({"a": "b", "c": {"d": "e"}}), &json!({"a": null, "c": {"f": 1}}));
/// assert_eq!(out, json!({"c": {"d": "e", "f": 1}}));
/// ```
pub fn apply(original: &Value, patch: &Value) -> Value {
    let mut target = original.clone();
    merge_into(&mut target, patch);
    target
}

/// Applies `patch` to `target` in place; the recursive step of [`apply`].
pub fn merge_into(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target_map) = target {
        for (key, value) in patch_map {
            if value.is_null() {
                target_map.remove(key);
            } else {
                let slot = target_map.entry(key.clone()).or_insert(Value::Null);
                merge_into(slot, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The test cases of RFC 7386, Appendix A, in order.
    #[test]
    fn rfc7386_appendix_a() {
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":"b","b":"c"}),
                json!({"a":null}),
                json!({"b":"c"}),
            ),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ];
        for (i, (original, patch, expected)) in cases.iter().enumerate() {
            assert_eq!(&apply(original, patch), expected, "case {i}");
        }
    }

    /// The example of RFC 7386 section 3.
    #[test]
    fn rfc7386_section3_example() {
        let original = json!({
            "title": "Goodbye!",
            "author": {"givenName": "John", "familyName": "Doe"},
            "tags": ["example", "sample"],
            "content": "This will be unchanged"
        });
        let patch = json!({
            "title": "Hello!",
            "phoneNumber": "+01-123-456-7890",
            "author": {"familyName": null},
            "tags": ["example"]
        });
        assert_eq!(
            apply(&original, &patch),
            json!({
                "title": "Hello!",
                "author": {"givenName": "John"},
                "tags": ["example"],
                "content": "This will be unchanged",
                "phoneNumber": "+01-123-456-7890"
            })
        );
    }

    #[test]
    fn original_is_left_untouched() {
        let original = json!({"metadata": {"labels": {"a": "1"}}});
        let _ = apply(&original, &json!({"metadata": {"labels": null}}));
        assert_eq!(original, json!({"metadata": {"labels": {"a": "1"}}}));
    }

    #[test]
    fn kubectl_label_and_unlabel() {
        let pod = json!({"metadata": {"name": "x", "labels": {"app": "web"}}});
        let labelled = apply(&pod, &json!({"metadata": {"labels": {"tier": "fe"}}}));
        assert_eq!(
            labelled["metadata"]["labels"],
            json!({"app": "web", "tier": "fe"})
        );
        let unlabelled = apply(&labelled, &json!({"metadata": {"labels": {"app": null}}}));
        assert_eq!(unlabelled["metadata"]["labels"], json!({"tier": "fe"}));
        assert_eq!(unlabelled["metadata"]["name"], "x");
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-c]{0,2}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Mimics what a diff tool would produce: changed members, new members, `null` for
    /// removed members, recursion into objects on both sides.
    fn diff(from: &Value, to: &Value) -> Value {
        match (from, to) {
            (Value::Object(a), Value::Object(b)) => {
                let mut out = Map::new();
                for (k, v) in b {
                    match a.get(k) {
                        Some(old) if old == v => {}
                        Some(old) => {
                            out.insert(k.clone(), diff(old, v));
                        }
                        None => {
                            out.insert(k.clone(), v.clone());
                        }
                    }
                }
                for k in a.keys() {
                    if !b.contains_key(k) {
                        out.insert(k.clone(), Value::Null);
                    }
                }
                Value::Object(out)
            }
            _ => to.clone(),
        }
    }

    fn strip_nulls(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), strip_nulls(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn diff_like_patches_never_panic_and_reach_target(a in arb_json(), b in arb_json()) {
            let patch = diff(&a, &b);
            let out = apply(&a, &patch);
            // Merge patch cannot express nulls inside objects, so compare without them.
            if b.is_object() {
                prop_assert_eq!(strip_nulls(&out), strip_nulls(&b));
            }
        }

        #[test]
        fn arbitrary_patches_never_panic_and_are_idempotent(a in arb_json(), p in arb_json()) {
            let once = apply(&a, &p);
            let twice = apply(&once, &p);
            prop_assert_eq!(once, twice);
        }
    }
}
