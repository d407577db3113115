//! The checks kube-apiserver makes of ConfigMaps and Secrets, whose keys become file names
//! when a pod mounts them.
//!
//! Checked, as `ValidateConfigMap` and `ValidateSecret` check them: every key of a
//! ConfigMap's `data` and `binaryData` and of a Secret's `data` (after `stringData` was
//! merged in) a config key — at most 253 characters of letters, digits, `-`, `_` and `.`,
//! not `.` or `..` and not starting with `..`; no key in both of a ConfigMap's maps; the
//! values at most 1 MiB together (binary values counted decoded); for the Secret types that
//! name keys, those keys present (and a docker config's JSON well formed), and a
//! service-account token Secret annotated with its account. On update, as
//! `ValidateConfigMapUpdate` and `ValidateSecretUpdate`: once `immutable` is set, neither
//! it nor the data may change; a Secret's `type` never changes.

use api::status::FieldError;
use api::{Object, Status};
use base64::Engine as _;
use serde_json::{Map, Value};

/// The most a ConfigMap's or a Secret's values may hold together (Kubernetes'
/// `MaxSecretSize`, 1 MiB).
pub const MAX_DATA_SIZE: usize = 1024 * 1024;

const KEY_FORMAT: &str = "a valid config key must consist of alphanumeric characters, '-', \
    '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation \
    is '[-._a-zA-Z0-9]+')";

/// What is wrong with `key` as a ConfigMap or Secret key (Kubernetes' `IsConfigMapKey`), in
/// its words; empty when nothing is.
pub fn config_key_errors(key: &str) -> Vec<&'static str> {
    let mut errs = Vec::new();
    if key.len() > 253 {
        errs.push("must be no more than 253 characters");
    }
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        errs.push(KEY_FORMAT);
    }
    if key == "." {
        errs.push("must not be '.'");
    } else if key == ".." {
        errs.push("must not be '..'");
    } else if key.starts_with("..") {
        errs.push("must not start with '..'");
    }
    errs
}

fn map<'a>(obj: &'a Object, field: &str) -> Option<&'a Map<String, Value>> {
    obj.get(field).and_then(Value::as_object)
}

/// The decoded length of base64 `text` (as stored: valid, padded).
fn decoded_len(text: &str) -> usize {
    let padding = text.bytes().rev().take_while(|b| *b == b'=').count();
    (text.len() / 4 * 3).saturating_sub(padding)
}

/// Checks every key of `obj[field]`, adding each value's size (`binary`: base64, counted
/// decoded) to `total`.
fn check_keys(
    obj: &Object,
    field: &str,
    binary: bool,
    total: &mut usize,
    errs: &mut Vec<FieldError>,
) {
    for (key, value) in map(obj, field).into_iter().flatten() {
        for e in config_key_errors(key) {
            errs.push(FieldError::invalid(
                format!("{field}[{key}]"),
                &Value::String(key.clone()),
                e,
            ));
        }
        let text = value.as_str().unwrap_or_default();
        *total += if binary {
            decoded_len(text)
        } else {
            text.len()
        };
    }
}

fn too_long(field: &str) -> FieldError {
    FieldError {
        reason: "FieldValueTooLong",
        field: field.into(),
        body: format!("Too long: may not be more than {MAX_DATA_SIZE} bytes"),
    }
}

/// Checks a core/v1 ConfigMap or Secret about to be stored (a Secret after `stringData`
/// was merged into `data`); other kinds pass untouched.
///
/// # Errors
/// 422 Invalid listing every broken rule.
pub fn validate(group: &str, kind: &str, obj: &Object) -> Result<(), Status> {
    if !group.is_empty() {
        return Ok(());
    }
    let mut errs = Vec::new();
    let mut total = 0;
    match kind {
        "ConfigMap" => {
            check_keys(obj, "data", false, &mut total, &mut errs);
            check_keys(obj, "binaryData", true, &mut total, &mut errs);
            let binary = map(obj, "binaryData");
            for key in map(obj, "data").into_iter().flat_map(Map::keys) {
                if binary.is_some_and(|b| b.contains_key(key)) {
                    errs.push(FieldError::invalid(
                        format!("data[{key}]"),
                        &Value::String(key.clone()),
                        "duplicate of key present in binaryData",
                    ));
                }
            }
            if total > MAX_DATA_SIZE {
                errs.push(too_long(""));
            }
        }
        "Secret" => {
            check_keys(obj, "data", true, &mut total, &mut errs);
            if total > MAX_DATA_SIZE {
                errs.push(too_long("data"));
            }
            secret_type_errors(obj, &mut errs);
        }
        _ => return Ok(()),
    }
    Status::invalid_if_any(kind, group, obj.name(), &errs)
}

/// The keys a Secret of a known type must have.
fn secret_type_errors(obj: &Object, errs: &mut Vec<FieldError>) {
    let data = map(obj, "data");
    let has = |k: &str| data.is_some_and(|d| d.contains_key(k));
    let value = |k: &str| data.and_then(|d| d.get(k)).and_then(Value::as_str);
    let required = |k: &str| FieldError::required(format!("data[{k}]"), "");
    match obj.get("type").and_then(Value::as_str).unwrap_or("") {
        "kubernetes.io/service-account-token" => {
            let named = obj
                .get("metadata")
                .and_then(|m| m.get("annotations"))
                .and_then(|a| a.get("kubernetes.io/service-account.name"))
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            if !named {
                errs.push(FieldError::required(
                    "metadata.annotations[kubernetes.io/service-account.name]",
                    "",
                ));
            }
        }
        t @ ("kubernetes.io/dockercfg" | "kubernetes.io/dockerconfigjson") => {
            let key = if t == "kubernetes.io/dockercfg" {
                ".dockercfg"
            } else {
                ".dockerconfigjson"
            };
            match value(key) {
                None => errs.push(required(key)),
                Some(text) => {
                    let parsed = base64::engine::general_purpose::STANDARD
                        .decode(text)
                        .map_err(|e| e.to_string())
                        .and_then(|bytes| {
                            serde_json::from_slice::<Map<String, Value>>(&bytes)
                                .map(|_| ())
                                .map_err(|e| e.to_string())
                        });
                    if let Err(e) = parsed {
                        errs.push(FieldError::invalid(
                            format!("data[{key}]"),
                            &Value::String("<secret contents redacted>".into()),
                            &e,
                        ));
                    }
                }
            }
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            errs.push(required("username"));
            errs.push(required("password"));
        }
        "kubernetes.io/ssh-auth" if value("ssh-privatekey").is_none_or(str::is_empty) => {
            errs.push(required("ssh-privatekey"));
        }
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    errs.push(required(k));
                }
            }
        }
        _ => {}
    }
}

/// Checks an update of a core/v1 ConfigMap or Secret against the stored `old`: an immutable
/// one keeps its data and stays immutable; a Secret keeps its type.
///
/// # Errors
/// 422 Invalid listing every broken rule.
pub fn validate_update(group: &str, kind: &str, new: &Object, old: &Object) -> Result<(), Status> {
    if !group.is_empty() || !matches!(kind, "ConfigMap" | "Secret") {
        return Ok(());
    }
    let mut errs = Vec::new();
    if kind == "Secret" && new.get("type") != old.get("type") {
        errs.push(FieldError::invalid(
            "type",
            new.get("type").unwrap_or(&Value::Null),
            "field is immutable",
        ));
    }
    let immutable = |o: &Object| o.get("immutable").and_then(Value::as_bool) == Some(true);
    if immutable(old) {
        const WHY: &str = "field is immutable when `immutable` is set";
        if !immutable(new) {
            errs.push(FieldError::forbidden("immutable", WHY));
        }
        let fields: &[&str] = if kind == "ConfigMap" {
            &["data", "binaryData"]
        } else {
            &["data"]
        };
        let empty = Map::new();
        for f in fields {
            if map(new, f).unwrap_or(&empty) != map(old, f).unwrap_or(&empty) {
                errs.push(FieldError::forbidden(*f, WHY));
            }
        }
    }
    Status::invalid_if_any(kind, group, new.name(), &errs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    fn fields(r: Result<(), Status>) -> Vec<String> {
        match r {
            Ok(()) => Vec::new(),
            Err(s) => {
                assert_eq!(s.code(), 422, "{s:?}");
                s.to_value()["details"]["causes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["field"].as_str().unwrap_or_default().to_string())
                    .collect()
            }
        }
    }

    #[test]
    fn config_keys() {
        for good in [
            "a", "key.name", "KEY_NAME", "key-name", ".hidden", "a..b", "1",
        ] {
            assert!(config_key_errors(good).is_empty(), "{good}");
        }
        assert_eq!(config_key_errors("bad key"), [KEY_FORMAT]);
        assert_eq!(config_key_errors(""), [KEY_FORMAT]);
        assert_eq!(config_key_errors("a/b"), [KEY_FORMAT]);
        assert_eq!(config_key_errors("."), ["must not be '.'"]);
        assert_eq!(config_key_errors(".."), ["must not be '..'"]);
        assert_eq!(config_key_errors("..a"), ["must not start with '..'"]);
        assert_eq!(config_key_errors(&"k".repeat(253)).len(), 0);
        assert_eq!(
            config_key_errors(&"k".repeat(254)),
            ["must be no more than 253 characters"]
        );
    }

    #[test]
    fn config_maps() {
        let cm = |data: Value, binary: Value| {
            obj(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                "data": data, "binaryData": binary}),
            )
        };
        assert!(validate(
            "",
            "ConfigMap",
            &cm(json!({"a.b": "x"}), json!({"c": "eA=="}))
        )
        .is_ok());
        assert_eq!(
            fields(validate(
                "",
                "ConfigMap",
                &cm(
                    json!({"bad key": "x", "k": "y"}),
                    json!({"..b": "", "k": "eA=="})
                )
            )),
            ["data[bad key]", "binaryData[..b]", "data[k]"]
        );
        // 1 MiB in all, binary values counted decoded.
        let half = "x".repeat(MAX_DATA_SIZE / 2);
        let half_b64 = base64::engine::general_purpose::STANDARD.encode(half.as_bytes());
        assert!(validate(
            "",
            "ConfigMap",
            &cm(json!({"a": half}), json!({"b": half_b64}))
        )
        .is_ok());
        let over = cm(json!({"a": half, "c": "x"}), json!({"b": half_b64}));
        assert_eq!(fields(validate("", "ConfigMap", &over)), [""]);
        // Other groups' kinds of the same name are not these.
        assert!(validate(
            "example.com",
            "ConfigMap",
            &cm(json!({"bad key": ""}), json!({}))
        )
        .is_ok());
    }

    #[test]
    fn secrets() {
        let secret = |t: &str, data: Value| {
            obj(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                "type": t, "data": data}),
            )
        };
        assert!(validate("", "Secret", &secret("Opaque", json!({"a": "eA=="}))).is_ok());
        assert_eq!(
            fields(validate(
                "",
                "Secret",
                &secret("Opaque", json!({"a b": "eA=="}))
            )),
            ["data[a b]"]
        );
        assert_eq!(
            fields(validate(
                "",
                "Secret",
                &secret("kubernetes.io/tls", json!({"tls.crt": ""}))
            )),
            ["data[tls.key]"]
        );
        assert_eq!(
            fields(validate(
                "",
                "Secret",
                &secret("kubernetes.io/basic-auth", json!({}))
            )),
            ["data[username]", "data[password]"]
        );
        assert!(validate(
            "",
            "Secret",
            &secret("kubernetes.io/basic-auth", json!({"password": ""}))
        )
        .is_ok());
        assert_eq!(
            fields(validate(
                "",
                "Secret",
                &secret("kubernetes.io/ssh-auth", json!({"ssh-privatekey": ""}))
            )),
            ["data[ssh-privatekey]"]
        );
        let json_b64 = base64::engine::general_purpose::STANDARD.encode(br#"{"auths":{}}"#);
        assert!(validate(
            "",
            "Secret",
            &secret(
                "kubernetes.io/dockerconfigjson",
                json!({".dockerconfigjson": json_b64})
            )
        )
        .is_ok());
        let not_json = base64::engine::general_purpose::STANDARD.encode(b"not json");
        assert_eq!(
            fields(validate(
                "",
                "Secret",
                &secret(
                    "kubernetes.io/dockerconfigjson",
                    json!({".dockerconfigjson": not_json})
                )
            )),
            ["data[.dockerconfigjson]"]
        );
        assert_eq!(
            fields(validate(
                "",
                "Secret",
                &secret("kubernetes.io/service-account-token", json!({}))
            )),
            ["metadata.annotations[kubernetes.io/service-account.name]"]
        );
    }

    #[test]
    fn updates() {
        let cm = |immutable: Value, data: Value| {
            obj(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                "immutable": immutable, "data": data}),
            )
        };
        let frozen = cm(json!(true), json!({"a": "1"}));
        assert!(validate_update(
            "",
            "ConfigMap",
            &cm(json!(false), json!({"a": "2"})),
            &cm(json!(false), json!({"a": "1"}))
        )
        .is_ok());
        // Labels may change; data and the flag may not.
        assert!(validate_update("", "ConfigMap", &frozen, &frozen).is_ok());
        assert_eq!(
            fields(validate_update(
                "",
                "ConfigMap",
                &cm(json!(true), json!({"a": "2"})),
                &frozen
            )),
            ["data"]
        );
        assert_eq!(
            fields(validate_update(
                "",
                "ConfigMap",
                &cm(json!(null), json!({"a": "1"})),
                &frozen
            )),
            ["immutable"]
        );
        // Setting it is allowed.
        assert!(validate_update(
            "",
            "ConfigMap",
            &frozen,
            &cm(json!(null), json!({"a": "1"}))
        )
        .is_ok());
        let secret = |t: &str| {
            obj(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": t}))
        };
        assert_eq!(
            fields(validate_update(
                "",
                "Secret",
                &secret("kubernetes.io/tls"),
                &secret("Opaque")
            )),
            ["type"]
        );
    }
}
