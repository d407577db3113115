//! RFC 6902 JSON patch (`application/json-patch+json`).
//!
//! A patch is an array of operations applied in order to a copy of the document; if any
//! operation fails, the whole patch fails and nothing is changed. Operations: `add`, `remove`,
//! `replace`, `move`, `copy`, `test`. Locations are RFC 6901 JSON pointers (`/a/b/0`, with `~1`
//! for `/` and `~0` for `~` inside a token, `""` for the whole document); `-` names the
//! position after the last element of an array and is only valid where something is added.
//!
//! Error classes follow kube-apiserver: a body that is not an array of objects is an
//! [`PatchError::InvalidDocument`] (400); anything found wrong while applying an operation,
//! including a missing `path` or an unknown `op`, is a 422 ([`PatchError::InvalidOperation`],
//! [`PatchError::PathNotFound`], [`PatchError::TestFailed`]). At most
//! [`MAX_JSON_PATCH_OPERATIONS`] operations are accepted, and `copy` operations may copy at
//! most [`MAX_ACCUMULATED_COPY_BYTES`] in total, so a small patch cannot blow up memory
//! ([`PatchError::TooLarge`], 413); nothing may end up nested deeper than
//! [`MAX_PATCHED_DEPTH`] (422).

use serde_json::{Map, Value};

use super::{json_equal, PatchError, MAX_JSON_PATCH_OPERATIONS};

/// The total size (roughly, in bytes of JSON) that `copy` operations of one patch may copy.
pub const MAX_ACCUMULATED_COPY_BYTES: usize = 3 * 1024 * 1024;

/// The deepest nesting of arrays and objects a patched document may reach: what a JSON
/// parser accepts (`serde_json`'s limit), so that the result can be read back. Without it,
/// `move` and `copy` could stack a parsed document's branches into one arbitrarily deep
/// chain, which every recursive walk (clone, drop, serialization) would then overflow on.
pub const MAX_PATCHED_DEPTH: usize = 127;

/// Applies the RFC 6902 patch `patch` (an array of operation objects) to `original`.
///
/// Returns the patched document; `original` is never modified. See the module docs for the
/// error classes. Never panics, whatever `patch` contains.
///
/// ```
/// use api::patch::json_patch::apply;
/// use serde_json::json;
///
/// let doc = json!({"spec": {"replicas": 1, "ports": [80]}});
/// let patch = json!([
///     {"op": "test", "path": "/spec/replicas", "value": 1},
///     {"op": "replace", "path": "/spec/replicas", "value": 3},
///     {"op": "add", "path": "/spec/ports/-", "value": 443}
/// ]);
/// assert_eq!(apply(&doc, &patch).unwrap(), json!({"spec": {"replicas": 3, "ports": [80, 443]}}));
/// ```
pub fn apply(original: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops = patch.as_array().ok_or_else(|| {
        PatchError::InvalidDocument(format!(
            "a JSON patch must be an array of operations, got {}",
            type_name(patch)
        ))
    })?;
    if let Some(i) = ops.iter().position(|op| !op.is_object()) {
        return Err(PatchError::InvalidDocument(format!(
            "JSON patch operation {i} must be an object, got {}",
            type_name(&ops[i])
        )));
    }
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooLarge(format!(
            "the JSON patch has {} operations, more than the limit of {}",
            ops.len(),
            MAX_JSON_PATCH_OPERATIONS
        )));
    }
    let mut doc = original.clone();
    let mut copy_budget = MAX_ACCUMULATED_COPY_BYTES;
    for (index, op) in ops.iter().enumerate() {
        let Value::Object(op) = op else { continue };
        apply_op(&mut doc, op, index, &mut copy_budget)?;
    }
    Ok(doc)
}

/// The JSON type name of a value, for messages.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One operation being applied: its position and name, to build errors.
struct OpCtx<'a> {
    index: usize,
    op: &'a str,
}

impl OpCtx<'_> {
    fn invalid(&self, message: impl Into<String>) -> PatchError {
        PatchError::InvalidOperation {
            index: self.index,
            op: self.op.to_string(),
            message: message.into(),
        }
    }

    fn not_found(&self, path: &str) -> PatchError {
        PatchError::PathNotFound {
            index: self.index,
            op: self.op.to_string(),
            path: path.to_string(),
        }
    }
}

fn apply_op(
    doc: &mut Value,
    op: &Map<String, Value>,
    index: usize,
    copy_budget: &mut usize,
) -> Result<(), PatchError> {
    let name = match op.get("op") {
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            return Err(PatchError::InvalidOperation {
                index,
                op: String::new(),
                message: "the \"op\" member must be a string".into(),
            })
        }
        None => {
            return Err(PatchError::InvalidOperation {
                index,
                op: String::new(),
                message: "the operation has no \"op\" member".into(),
            })
        }
    };
    let ctx = OpCtx { index, op: name };
    let path = string_member(op, "path", &ctx)?;
    let tokens = parse_pointer(path).map_err(|m| ctx.invalid(m))?;
    match name {
        "add" => {
            let value = value_member(op, &ctx)?;
            check_depth(&tokens, value, &ctx)?;
            add(doc, &tokens, value.clone(), path, &ctx)
        }
        "remove" => remove(doc, &tokens, path, &ctx).map(drop),
        "replace" => {
            let value = value_member(op, &ctx)?;
            check_depth(&tokens, value, &ctx)?;
            let slot = locate_mut(doc, &tokens, path, &ctx)?;
            *slot = value.clone();
            Ok(())
        }
        "move" => {
            let from = string_member(op, "from", &ctx)?;
            let from_tokens = parse_pointer(from).map_err(|m| ctx.invalid(m))?;
            if from_tokens == tokens {
                // Moving a value onto itself: only check that it exists.
                return locate(doc, &from_tokens, from, &ctx).map(drop);
            }
            if tokens.len() > from_tokens.len() && tokens[..from_tokens.len()] == from_tokens[..] {
                return Err(
                    ctx.invalid(format!("cannot move {from:?} into its own child {path:?}"))
                );
            }
            check_depth(&tokens, locate(doc, &from_tokens, from, &ctx)?, &ctx)?;
            let value = remove(doc, &from_tokens, from, &ctx)?;
            add(doc, &tokens, value, path, &ctx)
        }
        "copy" => {
            let from = string_member(op, "from", &ctx)?;
            let from_tokens = parse_pointer(from).map_err(|m| ctx.invalid(m))?;
            let value = locate(doc, &from_tokens, from, &ctx)?;
            check_depth(&tokens, value, &ctx)?;
            match bounded_size(value, *copy_budget) {
                Some(size) => *copy_budget -= size,
                None => {
                    return Err(PatchError::TooLarge(format!(
                        "copy operations of the JSON patch would copy more than {MAX_ACCUMULATED_COPY_BYTES} bytes"
                    )))
                }
            }
            let value = value.clone();
            add(doc, &tokens, value, path, &ctx)
        }
        "test" => {
            let expected = value_member(op, &ctx)?;
            let actual = locate(doc, &tokens, path, &ctx)?;
            if json_equal(actual, expected) {
                Ok(())
            } else {
                Err(PatchError::TestFailed {
                    index,
                    path: path.to_string(),
                })
            }
        }
        other => Err(ctx.invalid(format!(
            "unknown operation {other:?}; expected add, remove, replace, move, copy or test"
        ))),
    }
}

/// Refuses to put `value` at `tokens` if that would nest something deeper than
/// [`MAX_PATCHED_DEPTH`]. The rest of the document is within the limit (it was parsed, and
/// every earlier operation was checked), so only the value at its new place is measured;
/// without recursion, as the value may be the deep thing.
fn check_depth(tokens: &[String], value: &Value, ctx: &OpCtx<'_>) -> Result<(), PatchError> {
    let too_deep = || {
        ctx.invalid(format!(
            "the result would nest arrays and objects deeper than {MAX_PATCHED_DEPTH} levels"
        ))
    };
    let allowed = MAX_PATCHED_DEPTH
        .checked_sub(tokens.len())
        .ok_or_else(too_deep)?;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, above)) = stack.pop() {
        let level = above + 1;
        match v {
            Value::Array(_) if level > allowed => return Err(too_deep()),
            Value::Object(_) if level > allowed => return Err(too_deep()),
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, level))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, level))),
            _ => {}
        }
    }
    Ok(())
}

fn string_member<'a>(
    op: &'a Map<String, Value>,
    member: &str,
    ctx: &OpCtx<'_>,
) -> Result<&'a str, PatchError> {
    match op.get(member) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(ctx.invalid(format!(
            "the {member:?} member must be a string, got {}",
            type_name(other)
        ))),
        None => Err(ctx.invalid(format!("the operation has no {member:?} member"))),
    }
}

fn value_member<'a>(op: &'a Map<String, Value>, ctx: &OpCtx<'_>) -> Result<&'a Value, PatchError> {
    op.get("value")
        .ok_or_else(|| ctx.invalid("the operation has no \"value\" member"))
}

/// Splits an RFC 6901 pointer into unescaped reference tokens. `""` is the whole document.
pub fn parse_pointer(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!(
            "JSON pointer {pointer:?} must be empty or start with \"/\""
        ));
    };
    rest.split('/')
        .map(|raw| {
            let mut token = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    token.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => token.push('~'),
                    Some('1') => token.push('/'),
                    _ => {
                        return Err(format!(
                            "JSON pointer {pointer:?} has a \"~\" not followed by 0 or 1"
                        ))
                    }
                }
            }
            Ok(token)
        })
        .collect()
}

/// Parses an array index token: `0` or a decimal number without a leading zero.
fn parse_index(token: &str) -> Option<usize> {
    let valid = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    if valid {
        token.parse().ok()
    } else {
        None
    }
}

/// An index into an existing element of an array of length `len`.
fn existing_index(
    token: &str,
    len: usize,
    path: &str,
    ctx: &OpCtx<'_>,
) -> Result<usize, PatchError> {
    if token == "-" {
        return Err(ctx.invalid(format!(
            "\"-\" in {path:?} names no existing element and can only be used to add"
        )));
    }
    let i = parse_index(token)
        .ok_or_else(|| ctx.invalid(format!("{token:?} in {path:?} is not an array index")))?;
    if i >= len {
        return Err(ctx.invalid(format!(
            "index {i} in {path:?} is out of bounds for an array of length {len}"
        )));
    }
    Ok(i)
}

fn locate<'v>(
    doc: &'v Value,
    tokens: &[String],
    path: &str,
    ctx: &OpCtx<'_>,
) -> Result<&'v Value, PatchError> {
    let mut cur = doc;
    for token in tokens {
        cur = match cur {
            Value::Object(map) => map.get(token).ok_or_else(|| ctx.not_found(path))?,
            Value::Array(items) => &items[existing_index(token, items.len(), path, ctx)?],
            _ => return Err(ctx.not_found(path)),
        };
    }
    Ok(cur)
}

fn locate_mut<'v>(
    doc: &'v mut Value,
    tokens: &[String],
    path: &str,
    ctx: &OpCtx<'_>,
) -> Result<&'v mut Value, PatchError> {
    let mut cur = doc;
    for token in tokens {
        cur = match cur {
            Value::Object(map) => map.get_mut(token).ok_or_else(|| ctx.not_found(path))?,
            Value::Array(items) => {
                let i = existing_index(token, items.len(), path, ctx)?;
                &mut items[i]
            }
            _ => return Err(ctx.not_found(path)),
        };
    }
    Ok(cur)
}

/// The RFC 6902 `add`: sets an object member, or inserts into an array (shifting later
/// elements), or replaces the whole document when `tokens` is empty.
fn add(
    doc: &mut Value,
    tokens: &[String],
    value: Value,
    path: &str,
    ctx: &OpCtx<'_>,
) -> Result<(), PatchError> {
    let Some((last, parent_tokens)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match locate_mut(doc, parent_tokens, path, ctx)? {
        Value::Object(map) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(items) => {
            let i = if last == "-" {
                items.len()
            } else {
                let i = parse_index(last).ok_or_else(|| {
                    ctx.invalid(format!("{last:?} in {path:?} is not an array index"))
                })?;
                if i > items.len() {
                    return Err(ctx.invalid(format!(
                        "index {i} in {path:?} is out of bounds for an array of length {}",
                        items.len()
                    )));
                }
                i
            };
            items.insert(i, value);
            Ok(())
        }
        _ => Err(ctx.not_found(path)),
    }
}

/// The RFC 6902 `remove`; returns the removed value.
fn remove(
    doc: &mut Value,
    tokens: &[String],
    path: &str,
    ctx: &OpCtx<'_>,
) -> Result<Value, PatchError> {
    let Some((last, parent_tokens)) = tokens.split_last() else {
        return Err(ctx.invalid("cannot remove the whole document"));
    };
    match locate_mut(doc, parent_tokens, path, ctx)? {
        Value::Object(map) => map.remove(last).ok_or_else(|| ctx.not_found(path)),
        Value::Array(items) => {
            let i = existing_index(last, items.len(), path, ctx)?;
            Ok(items.remove(i))
        }
        _ => Err(ctx.not_found(path)),
    }
}

/// An estimate of the serialized size of `v`, or `None` as soon as it exceeds `budget`.
fn bounded_size(v: &Value, budget: usize) -> Option<usize> {
    let mut total = 0usize;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        let own = match v {
            Value::Null | Value::Bool(_) | Value::Number(_) => 8,
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                stack.extend(items);
                2 + items.len()
            }
            Value::Object(map) => {
                let mut keys = 2usize;
                for (k, v) in map {
                    keys = keys.checked_add(k.len() + 4)?;
                    stack.push(v);
                }
                keys
            }
        };
        total = total.checked_add(own)?;
        if total > budget {
            return None;
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn ok(doc: Value, patch: Value) -> Value {
        apply(&doc, &patch).unwrap()
    }

    fn err(doc: Value, patch: Value) -> PatchError {
        apply(&doc, &patch).unwrap_err()
    }

    /// `{"a": {"a": … {}}}`, `n` objects deep, built without recursion.
    fn nested(n: usize) -> Value {
        let mut v = json!({});
        for _ in 1..n {
            v = json!({ "a": v });
        }
        v
    }

    /// Drops a possibly deep value without recursing (the test's own safety net).
    fn flatten_drop(v: Value) {
        let mut stack = vec![v];
        while let Some(v) = stack.pop() {
            match v {
                Value::Object(m) => stack.extend(m.into_iter().map(|(_, v)| v)),
                Value::Array(a) => stack.extend(a),
                _ => {}
            }
        }
    }

    #[test]
    fn the_depth_limit_is_what_a_json_parser_reads_back() {
        let deepest = "[".repeat(MAX_PATCHED_DEPTH) + &"]".repeat(MAX_PATCHED_DEPTH);
        assert!(serde_json::from_str::<Value>(&deepest).is_ok());
        let deeper = format!("[{deepest}]");
        assert!(serde_json::from_str::<Value>(&deeper).is_err());

        // Exactly at the limit is fine; one more level is a 422 and changes nothing.
        let doc = json!({"x": nested(MAX_PATCHED_DEPTH - 2)});
        let patched = ok(
            doc.clone(),
            json!([{"op": "add", "path": "/y", "value": nested(MAX_PATCHED_DEPTH - 1)}]),
        );
        assert!(serde_json::from_slice::<Value>(&serde_json::to_vec(&patched).unwrap()).is_ok());
        let e = err(
            doc.clone(),
            json!([{"op": "add", "path": "/y/z", "value": nested(MAX_PATCHED_DEPTH - 1)}]),
        );
        assert!(
            matches!(e, PatchError::InvalidOperation { index: 0, .. }),
            "{e:?}"
        );
        let e = err(
            doc,
            json!([{"op": "copy", "from": "/x", "path": "/x/a/a/b"}]),
        );
        assert!(matches!(e, PatchError::InvalidOperation { .. }), "{e:?}");
    }

    #[test]
    fn copies_and_moves_cannot_stack_a_document_deeper_than_the_limit() {
        // Each copy puts the chain under its own end: the depth doubles per operation, and
        // without the limit ten of them would nest ~100,000 levels (a stack overflow in the
        // clone, drop or serialization of the result).
        let mut ops = vec![json!({"op": "add", "path": "/x", "value": nested(100)})];
        let mut tokens = vec!["x".to_string()];
        tokens.extend(std::iter::repeat_n("a".to_string(), 99));
        for _ in 0..10 {
            let mut to = tokens.clone();
            to.push("b".into());
            ops.push(json!({"op": "copy", "from": "/x", "path": format!("/{}", to.join("/"))}));
            tokens = to.into_iter().chain(tokens[1..].iter().cloned()).collect();
        }
        let e = err(json!({}), Value::Array(ops));
        assert!(
            matches!(e, PatchError::InvalidOperation { index: 1, .. }),
            "{e:?}"
        );

        // Moves can chain many shallow branches into one deep one.
        let mut doc = Map::new();
        for i in 0..40 {
            doc.insert(format!("b{i}"), nested(10));
        }
        let mut path = "/b0".to_string();
        let mut ops = Vec::new();
        for i in 1..40 {
            path = format!("{path}{}/n", "/a".repeat(8));
            ops.push(json!({"op": "move", "from": format!("/b{i}"), "path": path}));
        }
        match apply(&Value::Object(doc), &Value::Array(ops)) {
            Err(PatchError::InvalidOperation { message, .. }) => {
                assert!(message.contains("deeper than 127"), "{message}")
            }
            other => {
                let failed = format!("{:?}", other.as_ref().map(|_| ()));
                if let Ok(v) = other {
                    flatten_drop(v);
                }
                panic!("expected a depth error, got {failed}");
            }
        }
    }

    // RFC 6902 Appendix A, A.1 to A.16.

    #[test]
    fn a1_add_object_member() {
        assert_eq!(
            ok(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/baz","value":"qux"}])
            ),
            json!({"baz":"qux","foo":"bar"})
        );
    }

    #[test]
    fn a2_add_array_element() {
        assert_eq!(
            ok(
                json!({"foo":["bar","baz"]}),
                json!([{"op":"add","path":"/foo/1","value":"qux"}])
            ),
            json!({"foo":["bar","qux","baz"]})
        );
    }

    #[test]
    fn a3_remove_object_member() {
        assert_eq!(
            ok(
                json!({"baz":"qux","foo":"bar"}),
                json!([{"op":"remove","path":"/baz"}])
            ),
            json!({"foo":"bar"})
        );
    }

    #[test]
    fn a4_remove_array_element() {
        assert_eq!(
            ok(
                json!({"foo":["bar","qux","baz"]}),
                json!([{"op":"remove","path":"/foo/1"}])
            ),
            json!({"foo":["bar","baz"]})
        );
    }

    #[test]
    fn a5_replace_value() {
        assert_eq!(
            ok(
                json!({"baz":"qux","foo":"bar"}),
                json!([{"op":"replace","path":"/baz","value":"boo"}])
            ),
            json!({"baz":"boo","foo":"bar"})
        );
    }

    #[test]
    fn a6_move_value() {
        assert_eq!(
            ok(
                json!({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}}),
                json!([{"op":"move","from":"/foo/waldo","path":"/qux/thud"}])
            ),
            json!({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}})
        );
    }

    #[test]
    fn a7_move_array_element() {
        assert_eq!(
            ok(
                json!({"foo":["all","grass","cows","eat"]}),
                json!([{"op":"move","from":"/foo/1","path":"/foo/3"}])
            ),
            json!({"foo":["all","cows","eat","grass"]})
        );
    }

    #[test]
    fn a8_test_success() {
        assert_eq!(
            ok(
                json!({"baz":"qux","foo":["a",2,"c"]}),
                json!([
                    {"op":"test","path":"/baz","value":"qux"},
                    {"op":"test","path":"/foo/1","value":2}
                ])
            ),
            json!({"baz":"qux","foo":["a",2,"c"]})
        );
    }

    #[test]
    fn a9_test_failure() {
        assert_eq!(
            err(
                json!({"baz":"qux"}),
                json!([{"op":"test","path":"/baz","value":"bar"}])
            ),
            PatchError::TestFailed {
                index: 0,
                path: "/baz".into()
            }
        );
    }

    #[test]
    fn a10_add_nested_member() {
        assert_eq!(
            ok(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/child","value":{"grandchild":{}}}])
            ),
            json!({"foo":"bar","child":{"grandchild":{}}})
        );
    }

    #[test]
    fn a11_ignore_unrecognized_members() {
        assert_eq!(
            ok(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/baz","value":"qux","xyz":123}])
            ),
            json!({"foo":"bar","baz":"qux"})
        );
    }

    #[test]
    fn a12_add_to_nonexistent_target() {
        assert!(matches!(
            err(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/baz/bat","value":"qux"}])
            ),
            PatchError::PathNotFound { index: 0, .. }
        ));
    }

    #[test]
    fn a14_escape_ordering() {
        assert_eq!(
            ok(
                json!({"/":9,"~1":10}),
                json!([{"op":"test","path":"/~01","value":10}])
            ),
            json!({"/":9,"~1":10})
        );
        assert_eq!(
            ok(
                json!({"a/b": 1, "m~n": 2}),
                json!([{"op":"remove","path":"/a~1b"}, {"op":"replace","path":"/m~0n","value":3}])
            ),
            json!({"m~n": 3})
        );
    }

    #[test]
    fn a15_comparing_strings_and_numbers() {
        assert!(matches!(
            err(
                json!({"/":9,"~1":10}),
                json!([{"op":"test","path":"/~01","value":"10"}])
            ),
            PatchError::TestFailed { .. }
        ));
    }

    #[test]
    fn a16_add_array_value() {
        assert_eq!(
            ok(
                json!({"foo":["bar"]}),
                json!([{"op":"add","path":"/foo/-","value":["abc","def"]}])
            ),
            json!({"foo":["bar",["abc","def"]]})
        );
    }

    #[test]
    fn root_pointer_add_and_replace_whole_document() {
        assert_eq!(
            ok(json!({"a":1}), json!([{"op":"add","path":"","value":[1]}])),
            json!([1])
        );
        assert_eq!(
            ok(
                json!({"a":1}),
                json!([{"op":"replace","path":"","value":{"b":2}}])
            ),
            json!({"b":2})
        );
        assert!(matches!(
            err(json!({"a":1}), json!([{"op":"remove","path":""}])),
            PatchError::InvalidOperation { .. }
        ));
    }

    #[test]
    fn copy_and_numeric_test() {
        assert_eq!(
            ok(
                json!({"a":{"b":[1]},"c":{}}),
                json!([
                    {"op":"copy","from":"/a/b","path":"/c/d"},
                    {"op":"test","path":"/c/d/0","value":1.0}
                ])
            ),
            json!({"a":{"b":[1]},"c":{"d":[1]}})
        );
    }

    #[test]
    fn patch_is_atomic() {
        let doc = json!({"a": 1});
        let e = err(
            doc.clone(),
            json!([{"op":"add","path":"/b","value":2},{"op":"remove","path":"/zzz"}]),
        );
        assert_eq!(
            e,
            PatchError::PathNotFound {
                index: 1,
                op: "remove".into(),
                path: "/zzz".into()
            }
        );
        assert_eq!(doc, json!({"a": 1}));
    }

    #[test]
    fn document_shape_errors_are_bad_requests() {
        for patch in [
            json!({"op":"add"}),
            json!("x"),
            json!(null),
            json!([1]),
            json!([{"op":"test","path":"","value":1}, []]),
        ] {
            let e = err(json!({}), patch.clone());
            assert!(
                matches!(e, PatchError::InvalidDocument(_)),
                "{patch}: {e:?}"
            );
            assert_eq!(e.status_code(), 400);
        }
        assert_eq!(ok(json!({"a":1}), json!([])), json!({"a":1}));
    }

    fn invalid_op(doc: Value, op: Value) -> String {
        match err(doc, json!([op])) {
            PatchError::InvalidOperation {
                index: 0, message, ..
            } => message,
            other => panic!("expected InvalidOperation, got {other:?}"),
        }
    }

    #[test]
    fn malformed_operations_are_rejected() {
        let doc = json!({"a": [1, 2], "o": {"k": 1}});
        assert!(invalid_op(doc.clone(), json!({"path":"/a"})).contains("\"op\""));
        assert!(invalid_op(doc.clone(), json!({"op": 3, "path":"/a"})).contains("\"op\""));
        assert!(invalid_op(doc.clone(), json!({"op":"frob","path":"/a"})).contains("frob"));
        for op in ["add", "remove", "replace", "move", "copy", "test"] {
            assert!(
                invalid_op(doc.clone(), json!({"op": op})).contains("\"path\""),
                "{op}"
            );
            assert!(
                invalid_op(doc.clone(), json!({"op": op, "path": 1})).contains("\"path\""),
                "{op}"
            );
            assert!(
                invalid_op(
                    doc.clone(),
                    json!({"op": op, "path": "a", "from": "/a", "value": 1})
                )
                .contains("start with"),
                "{op}"
            );
            assert!(
                invalid_op(
                    doc.clone(),
                    json!({"op": op, "path": "/o/~2", "from": "/a", "value": 1})
                )
                .contains("~"),
                "{op}"
            );
        }
        for op in ["add", "replace", "test"] {
            assert!(
                invalid_op(doc.clone(), json!({"op": op, "path": "/a/0"})).contains("\"value\""),
                "{op}"
            );
        }
        for op in ["move", "copy"] {
            assert!(
                invalid_op(doc.clone(), json!({"op": op, "path": "/b"})).contains("\"from\""),
                "{op}"
            );
            assert!(
                invalid_op(doc.clone(), json!({"op": op, "path": "/b", "from": "o"}))
                    .contains("start with"),
                "{op}"
            );
        }
    }

    #[test]
    fn array_index_errors() {
        let doc = json!({"a": [1, 2]});
        // add may target len, not beyond.
        assert_eq!(
            ok(doc.clone(), json!([{"op":"add","path":"/a/2","value":3}])),
            json!({"a":[1,2,3]})
        );
        assert!(
            invalid_op(doc.clone(), json!({"op":"add","path":"/a/3","value":3}))
                .contains("out of bounds")
        );
        assert!(
            invalid_op(doc.clone(), json!({"op":"add","path":"/a/01","value":3}))
                .contains("not an array index")
        );
        assert!(
            invalid_op(doc.clone(), json!({"op":"add","path":"/a/-1","value":3}))
                .contains("not an array index")
        );
        assert!(
            invalid_op(doc.clone(), json!({"op":"add","path":"/a/x","value":3}))
                .contains("not an array index")
        );
        assert!(invalid_op(
            doc.clone(),
            json!({"op":"add","path":"/a/99999999999999999999999","value":3})
        )
        .contains("not an array index"));
        assert!(
            invalid_op(doc.clone(), json!({"op":"remove","path":"/a/2"})).contains("out of bounds")
        );
        assert!(invalid_op(doc.clone(), json!({"op":"remove","path":"/a/-"})).contains("\"-\""));
        assert!(
            invalid_op(doc.clone(), json!({"op":"replace","path":"/a/-","value":0}))
                .contains("\"-\"")
        );
        assert!(
            invalid_op(doc.clone(), json!({"op":"test","path":"/a/5","value":0}))
                .contains("out of bounds")
        );
        assert!(
            invalid_op(doc.clone(), json!({"op":"copy","from":"/a/5","path":"/b"}))
                .contains("out of bounds")
        );
        assert!(
            invalid_op(doc.clone(), json!({"op":"move","from":"/a/-","path":"/b"}))
                .contains("\"-\"")
        );
    }

    #[test]
    fn missing_targets_are_not_found() {
        let doc = json!({"a": {"b": 1}, "s": "x"});
        for op in [
            json!({"op":"remove","path":"/nope"}),
            json!({"op":"replace","path":"/nope","value":1}),
            json!({"op":"test","path":"/a/nope","value":1}),
            json!({"op":"move","from":"/nope","path":"/c"}),
            json!({"op":"copy","from":"/nope","path":"/c"}),
            json!({"op":"add","path":"/s/x","value":1}),
            json!({"op":"add","path":"/nope/x","value":1}),
            json!({"op":"replace","path":"/s/0","value":1}),
        ] {
            assert!(
                matches!(
                    err(doc.clone(), json!([op.clone()])),
                    PatchError::PathNotFound { .. }
                ),
                "{op}"
            );
        }
    }

    #[test]
    fn move_into_own_child_fails_and_move_to_self_is_noop() {
        let doc = json!({"a": {"b": 1}});
        assert!(
            invalid_op(doc.clone(), json!({"op":"move","from":"/a","path":"/a/c"}))
                .contains("own child")
        );
        assert_eq!(
            ok(doc.clone(), json!([{"op":"move","from":"/a","path":"/a"}])),
            doc
        );
        // A sibling whose name merely starts with the same text is fine.
        assert_eq!(
            ok(
                json!({"a": 1}),
                json!([{"op":"move","from":"/a","path":"/ab"}])
            ),
            json!({"ab": 1})
        );
    }

    #[test]
    fn copy_size_is_bounded() {
        // Each copy doubles the document; without a limit 40 of them would need terabytes.
        let mut ops =
            vec![json!({"op":"add","path":"/x","value":["0123456789abcdef0123456789abcdef"]})];
        for _ in 0..40 {
            ops.push(json!({"op":"copy","from":"/x","path":"/x/-"}));
        }
        let e = err(json!({}), Value::Array(ops));
        assert!(matches!(e, PatchError::TooLarge(_)), "{e:?}");
        assert_eq!(e.status_code(), 413);
    }

    #[test]
    fn operation_count_is_bounded() {
        let ops = vec![json!({"op":"test","path":"","value":{}}); MAX_JSON_PATCH_OPERATIONS + 1];
        assert!(matches!(
            err(json!({}), Value::Array(ops)),
            PatchError::TooLarge(_)
        ));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0i64..4).prop_map(|n| json!(n)),
            "[a-c~/-]{0,2}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-c]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_pointer() -> impl Strategy<Value = Value> {
        prop_oneof![
            prop::collection::vec(
                prop_oneof![
                    "[a-c]".boxed(),
                    "[0-3]".boxed(),
                    Just("-".to_string()).boxed(),
                    Just("~".to_string()).boxed(),
                    Just("~1".to_string()).boxed(),
                    Just("01".to_string()).boxed(),
                ],
                0..4
            )
            .prop_map(|t| Value::String(t.iter().map(|s| format!("/{s}")).collect())),
            "[a/~0-9-]{0,4}".prop_map(Value::String),
            Just(json!(7)),
        ]
    }

    fn arb_op() -> impl Strategy<Value = Value> {
        let name = prop_oneof![
            Just(json!("add")),
            Just(json!("remove")),
            Just(json!("replace")),
            Just(json!("move")),
            Just(json!("copy")),
            Just(json!("test")),
            Just(json!("bogus")),
            Just(json!(null)),
        ];
        (
            name,
            prop::option::of(arb_pointer()),
            prop::option::of(arb_pointer()),
            prop::option::of(arb_json()),
        )
            .prop_map(|(op, path, from, value)| {
                let mut m = Map::new();
                if !op.is_null() {
                    m.insert("op".into(), op);
                }
                if let Some(p) = path {
                    m.insert("path".into(), p);
                }
                if let Some(f) = from {
                    m.insert("from".into(), f);
                }
                if let Some(v) = value {
                    m.insert("value".into(), v);
                }
                Value::Object(m)
            })
    }

    proptest! {
        #[test]
        fn arbitrary_operations_never_panic(
            doc in arb_json(),
            ops in prop::collection::vec(arb_op(), 0..6),
            junk in arb_json(),
        ) {
            let _ = apply(&doc, &Value::Array(ops));
            let _ = apply(&doc, &junk);
        }

        #[test]
        fn failed_patches_leave_the_document_alone_and_successes_are_deterministic(
            doc in arb_json(),
            ops in prop::collection::vec(arb_op(), 0..6),
        ) {
            let before = doc.clone();
            let a = apply(&doc, &Value::Array(ops.clone()));
            let b = apply(&doc, &Value::Array(ops));
            prop_assert_eq!(a, b);
            prop_assert_eq!(doc, before);
        }
    }
}
