//! JSON and YAML request and response bodies.

use apiserver::encoding::{bounded_yaml, yaml_depth};
use client::json_validate;
use client::object::DynamicObject;

/// Whether `serde_json` refused `data` only for a number beyond `f64`'s range, which the
/// client's validator accepts on purpose (JSON allows such numbers; see its docs), or only
/// because of its private raw-value key (see [`holds_serde_json_raw_value_key`]).
pub(crate) fn serde_json_quirk(e: &serde_json::Error, data: &[u8]) -> bool {
    e.to_string().contains("number out of range") || holds_serde_json_raw_value_key(data)
}

/// Whether `data` holds `serde_json`'s private token `$serde_json::private::RawValue` as a
/// key. With its `raw_value` feature (which the workspace uses), `serde_json` reads an object
/// whose first key is that token not as an object but as the JSON text in its value: it
/// refuses valid JSON (`{"$serde_json::private::RawValue":"05"}`) and reads other documents
/// as something else (`{"$serde_json::private::RawValue":"[1]"}` as `[1]`). Go's
/// `encoding/json` and the client's validator take it as the ordinary key it is. Found by
/// the `watch_decoder` target (fuzz/corpus/watch_decoder/regress-serde-json-raw-value-key).
pub(crate) fn holds_serde_json_raw_value_key(data: &[u8]) -> bool {
    const TOKEN: &[u8] = b"\"$serde_json::private::RawValue\"";
    data.windows(TOKEN.len()).any(|w| w == TOKEN)
}

/// Feeds the bytes as a JSON body to the client's one-pass validator
/// ([`json_validate::validate`]), the client's object reader ([`DynamicObject::from_slice`])
/// and the server's ([`api::Object::from_slice`]). The validator must accept exactly what
/// `serde_json` accepts into a `Value` (except numbers beyond `f64`'s range, which it accepts
/// on purpose); an object either reader accepts must be JSON `serde_json` accepts.
pub fn json(data: &[u8]) {
    let ours = json_validate::validate(data);
    let theirs = serde_json::from_slice::<serde_json::Value>(data);
    match (&ours, &theirs) {
        (Ok(()), Err(e)) => assert!(
            serde_json_quirk(e, data),
            "the validator accepts what serde_json refuses ({e})"
        ),
        (Err(e), Ok(_)) => panic!("the validator refuses ({e}) what serde_json accepts"),
        _ => {}
    }
    if let Ok(obj) = DynamicObject::from_slice(data) {
        if let Err(e) = &theirs {
            assert!(
                serde_json_quirk(e, data),
                "the client reads an object serde_json refuses ({e}): {obj:?}"
            );
        }
    }
    if let Ok(obj) = api::Object::from_slice(data) {
        assert!(
            theirs.is_ok(),
            "the server reads an object serde_json refuses"
        );
        let _ = obj.meta();
        let _ = obj.to_vec();
    }
}

/// Feeds the bytes as a YAML request body to the server's bounded reader
/// ([`bounded_yaml::from_slice`], after its linear depth check [`yaml_depth::check`]). A
/// document that reads must print as JSON that the same reader (JSON being YAML) reads back
/// to the same value, unless it holds a character YAML 1.1 counts as a line break (U+0085,
/// U+2028, U+2029), which JSON prints raw.
pub fn yaml(data: &[u8]) {
    let _ = yaml_depth::check(data, yaml_depth::MAX_DEPTH);
    let Ok(v) = bounded_yaml::from_slice(data) else {
        return;
    };
    let text = serde_json::to_vec(&v).unwrap_or_else(|e| panic!("{v:?} does not print: {e}"));
    if has_yaml_1_1_break(&text) || has_long_key(&v) {
        // JSON prints U+0085, U+2028 and U+2029 raw, but the YAML 1.1 parser (libyaml, as
        // go-yaml under kube-apiserver's YAML decoding) takes them for line breaks; and it
        // reads a key of more than 1,024 characters only when it is marked explicit (`? `),
        // which JSON never does. Such JSON does not read back as YAML (both found by this
        // target; see RELIABILITY.md). The server reads JSON bodies with a JSON parser,
        // apply configurations included.
        return;
    }
    let back = bounded_yaml::from_slice(&text).unwrap_or_else(|e| {
        panic!(
            "{} (the JSON of a YAML document) does not read back: {e}",
            String::from_utf8_lossy(&text)
        )
    });
    assert!(
        crate::input::json_same(&back, &v),
        "YAML {v} reads back through JSON as {back}"
    );
}

/// The longest span YAML allows an implicit key (from the key's first character, its
/// opening quote in JSON, to the `:` after it): 1,024 characters by the specification; the
/// parser here counts bytes (a key of 1,022 characters, two of them U+FEFF, was refused).
const YAML_IMPLICIT_KEY_LIMIT: usize = 1024;

/// Whether some map key of `v`, printed as JSON (quotes and escapes included), is longer
/// in bytes than YAML allows an implicit key to be.
fn has_long_key(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(m) => m.iter().any(|(k, v)| {
            serde_json::to_string(k).map_or(0, |t| t.len()) > YAML_IMPLICIT_KEY_LIMIT
                || has_long_key(v)
        }),
        serde_json::Value::Array(a) => a.iter().any(has_long_key),
        _ => false,
    }
}

/// Whether `text` holds U+0085 (NEL), U+2028 (LS) or U+2029 (PS), line breaks to YAML 1.1.
fn has_yaml_1_1_break(text: &[u8]) -> bool {
    text.windows(2).any(|w| w == [0xc2, 0x85])
        || text
            .windows(3)
            .any(|w| w == [0xe2, 0x80, 0xa8] || w == [0xe2, 0x80, 0xa9])
}

#[cfg(test)]
mod tests {
    /// The `watch_decoder` target's finding: valid JSON with `serde_json`'s private raw-value
    /// key. The client's validator accepts it (it is JSON), `serde_json` refuses it, and the
    /// readers built on `serde_json` fail cleanly instead of panicking.
    #[test]
    fn serde_json_s_raw_value_key_is_valid_json_that_serde_json_refuses() {
        let doc = br#"{"kind":"Pod","metadata":{"$serde_json::private::RawValue":"05"}}"#;
        assert!(client::json_validate::validate(doc).is_ok());
        assert!(serde_json::from_slice::<serde_json::Value>(doc).is_err());
        assert!(super::holds_serde_json_raw_value_key(doc));
        assert!(api::Object::from_slice(doc).is_err());
        super::json(doc);
        // And where the token's value is JSON text, serde_json reads that text instead.
        let v: serde_json::Value =
            serde_json::from_slice(br#"{"a":{"$serde_json::private::RawValue":"[1]"}}"#)
                .expect("reads");
        assert_eq!(v, serde_json::json!({"a": [1]}));
        assert!(!super::holds_serde_json_raw_value_key(
            br#"{"$serde_json":1}"#
        ));
    }

    /// The first finding of the `yaml` target (fuzz/corpus/yaml/regress-line-separator): a
    /// double-quoted key holding U+2029 reads as YAML, but its JSON does not read back as
    /// YAML. The target must not count that as a failure of the server's reader.
    #[test]
    fn a_yaml_1_1_line_break_in_a_string_is_not_a_round_trip_failure() {
        let input = b"{\"(piVeo.3\na: \xe2\x80\xa9 oq3\nfl: oq3\na: \",\"naa\":{\"gspacJ\nacJ\n\n\n\n\n'!Map\"}}";
        let v = apiserver::encoding::bounded_yaml::from_slice(input).expect("reads as YAML");
        let text = serde_json::to_vec(&v).expect("prints");
        assert!(super::has_yaml_1_1_break(&text));
        assert!(apiserver::encoding::bounded_yaml::from_slice(&text).is_err());
        super::yaml(input);
    }

    /// The `yaml` target's second finding: JSON whose key is longer than YAML's 1,024
    /// characters for an implicit key does not read back as YAML; at the limit it does.
    #[test]
    fn a_key_beyond_yaml_s_implicit_key_limit_is_not_a_round_trip_failure() {
        let read = |key_chars: usize| {
            // The printed key is the key and its two quotes.
            let text = format!("{{\"{}\":null}}", "k".repeat(key_chars - 2));
            apiserver::encoding::bounded_yaml::from_slice(text.as_bytes())
        };
        assert!(read(super::YAML_IMPLICIT_KEY_LIMIT).is_ok());
        assert!(read(super::YAML_IMPLICIT_KEY_LIMIT + 1).is_err());
        // Bytes, not characters: 1,023 characters, one of them 3 bytes long, are too many.
        let multibyte = format!("{{\"{}\u{feff}\":null}}", "k".repeat(1020));
        assert!(apiserver::encoding::bounded_yaml::from_slice(multibyte.as_bytes()).is_err());
        let long = serde_json::json!({"a": [{ "k".repeat(1100): 1 }]});
        assert!(super::has_long_key(&long));
        assert!(!super::has_long_key(
            &serde_json::json!({"k".repeat(1022): 1})
        ));
        for input in [
            "regress-long-implicit-key",
            "regress-long-implicit-key-multibyte",
        ] {
            let path = format!(
                "{}/../../fuzz/corpus/yaml/{input}",
                env!("CARGO_MANIFEST_DIR")
            );
            super::yaml(&std::fs::read(path).expect("the regression input is in the corpus"));
        }
    }
}
