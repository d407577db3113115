//! Validation of a CustomResourceDefinition written by a client: the rules of
//! kube-apiserver's CRD strategy that a served definition depends on (names, scope, one
//! storage version, structural schemas, printer columns, subresource paths, immutable
//! fields), each violation a field error of one 422.

use super::structural::Schema;
use api::status::FieldError;
use serde_json::Value;
use std::collections::HashSet;

/// The field errors of `crd` (a whole object), given the stored `old` one for an update.
pub fn validate(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let spec = crd.get("spec").cloned().unwrap_or(Value::Null);
    let str_at = |p: &str| spec.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let group = str_at("/group");
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else if !group.contains('.') {
        errs.push(FieldError::invalid(
            "spec.group",
            &Value::from(group),
            "should be a domain with at least one dot",
        ));
    } else if crate::registry::resources::group_versions()
        .iter()
        .any(|(g, _)| *g == group)
    {
        errs.push(FieldError::invalid(
            "spec.group",
            &Value::from(group),
            "is served by the API server itself",
        ));
    } else if !is_subdomain(group) {
        errs.push(FieldError::invalid(
            "spec.group",
            &Value::from(group),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        ));
    }
    match str_at("/scope") {
        "Namespaced" | "Cluster" => {}
        "" => errs.push(FieldError::required("spec.scope", "")),
        other => errs.push(FieldError::not_supported(
            "spec.scope",
            other,
            &["Cluster", "Namespaced"],
        )),
    }
    let plural = str_at("/names/plural");
    let kind = str_at("/names/kind");
    if plural.is_empty() {
        errs.push(FieldError::required("spec.names.plural", ""));
    } else if !is_label(plural) {
        errs.push(label_error("spec.names.plural", plural));
    }
    let singular = str_at("/names/singular");
    if !singular.is_empty() && !is_label(singular) {
        errs.push(label_error("spec.names.singular", singular));
    }
    if kind.is_empty() {
        errs.push(FieldError::required("spec.names.kind", ""));
    } else if !is_kind(kind) {
        errs.push(FieldError::invalid(
            "spec.names.kind",
            &Value::from(kind),
            "may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?",
        ));
    }
    let list_kind = str_at("/names/listKind");
    if !list_kind.is_empty() && (!is_kind(list_kind) || list_kind == kind) {
        errs.push(FieldError::invalid(
            "spec.names.listKind",
            &Value::from(list_kind),
            "may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])? and differ from kind",
        ));
    }
    for (field, list) in [
        ("shortNames", "/names/shortNames"),
        ("categories", "/names/categories"),
    ] {
        if let Some(items) = spec.pointer(list).and_then(Value::as_array) {
            for (i, item) in items.iter().enumerate() {
                if !item.as_str().is_some_and(is_label) {
                    errs.push(label_error(
                        &format!("spec.names.{field}[{i}]"),
                        item.as_str().unwrap_or_default(),
                    ));
                }
            }
        }
    }
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid(
            "metadata.name",
            &Value::from(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match spec.pointer("/conversion/strategy").and_then(Value::as_str) {
        None | Some("None") => {}
        Some(other) => errs.push(FieldError::not_supported(
            "spec.conversion.strategy",
            other,
            &["None"],
        )),
    }
    validate_versions(&spec, &mut errs);
    if let Some(old) = old {
        for (field, p) in [("spec.scope", "/spec/scope"), ("spec.group", "/spec/group")] {
            let was = old.pointer(p).and_then(Value::as_str).unwrap_or_default();
            let now = crd.pointer(p).and_then(Value::as_str).unwrap_or_default();
            if was != now {
                errs.push(FieldError::invalid(
                    field,
                    &Value::from(now),
                    "field is immutable",
                ));
            }
        }
        let served: HashSet<&str> = spec
            .get("versions")
            .and_then(Value::as_array)
            .map(|vs| {
                vs.iter()
                    .filter_map(|v| v.get("name").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(stored) = old
            .pointer("/status/storedVersions")
            .and_then(Value::as_array)
        {
            for (i, v) in stored.iter().filter_map(Value::as_str).enumerate() {
                if !served.contains(v) {
                    errs.push(FieldError::invalid(
                        format!("status.storedVersions[{i}]"),
                        &Value::from(v),
                        "must appear in spec.versions",
                    ));
                }
            }
        }
    }
    errs
}

/// What a client should know of a CRD this server stores but does not fully act on: the
/// CEL rules that call functions this server lacks, which it does not enforce.
pub fn warnings(crd: &serde_json::Map<String, Value>) -> Vec<String> {
    let versions = crd
        .get("spec")
        .and_then(|s| s.get("versions"))
        .and_then(Value::as_array);
    let mut out = Vec::new();
    for (i, v) in versions.into_iter().flatten().enumerate() {
        if let Some(s) = v.pointer("/schema/openAPIV3Schema") {
            if let Ok(schema) =
                Schema::compile(s, &format!("spec.versions[{i}].schema.openAPIV3Schema"))
            {
                out.extend(super::cel::warnings(&schema.root));
            }
        }
    }
    out
}

fn validate_versions(spec: &Value, errs: &mut Vec<FieldError>) {
    let Some(versions) = spec
        .get("versions")
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())
    else {
        errs.push(FieldError::required(
            "spec.versions",
            "must have exactly one version marked as storage version",
        ));
        return;
    };
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if storage != 1 {
        errs.push(FieldError::invalid(
            "spec.versions",
            &Value::from(storage),
            "must have exactly one version marked as storage version",
        ));
    }
    let mut seen = HashSet::new();
    for (i, v) in versions.iter().enumerate() {
        let at = format!("spec.versions[{i}]");
        let name = v.get("name").and_then(Value::as_str).unwrap_or_default();
        if name.is_empty() {
            errs.push(FieldError::required(format!("{at}.name"), ""));
        } else if !is_label(name) {
            errs.push(label_error(&format!("{at}.name"), name));
        } else if !seen.insert(name) {
            errs.push(FieldError {
                reason: "FieldValueDuplicate",
                field: format!("{at}.name"),
                body: format!("Duplicate value: {name:?}"),
            });
        }
        match v.pointer("/schema/openAPIV3Schema") {
            None => errs.push(FieldError::required(
                format!("{at}.schema.openAPIV3Schema"),
                "schemas are required",
            )),
            Some(s) => {
                if let Err(e) = Schema::compile(s, &format!("{at}.schema.openAPIV3Schema")) {
                    errs.extend(e);
                }
            }
        }
        if let Some(cols) = v.get("additionalPrinterColumns").and_then(Value::as_array) {
            for (j, c) in cols.iter().enumerate() {
                let cat = format!("{at}.additionalPrinterColumns[{j}]");
                if c.get("name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    errs.push(FieldError::required(format!("{cat}.name"), ""));
                }
                let types = ["integer", "number", "string", "boolean", "date"];
                match c.get("type").and_then(Value::as_str) {
                    Some(t) if types.contains(&t) => {}
                    Some(t) => {
                        errs.push(FieldError::not_supported(format!("{cat}.type"), t, &types))
                    }
                    None => errs.push(FieldError::required(format!("{cat}.type"), "")),
                }
                match c.get("jsonPath").and_then(Value::as_str) {
                    Some(p) if p.starts_with('.') => {}
                    Some(p) => errs.push(FieldError::invalid(
                        format!("{cat}.jsonPath"),
                        &Value::from(p),
                        "must be a simple json path starting with .",
                    )),
                    None => errs.push(FieldError::required(format!("{cat}.jsonPath"), "")),
                }
            }
        }
        if let Some(scale) = v.pointer("/subresources/scale") {
            for (k, prefix) in [
                ("specReplicasPath", ".spec."),
                ("statusReplicasPath", ".status."),
                ("labelSelectorPath", "."),
            ] {
                let p = scale.get(k).and_then(Value::as_str);
                let required = k != "labelSelectorPath";
                match p {
                    None if required => errs.push(FieldError::required(
                        format!("{at}.subresources.scale.{k}"),
                        "",
                    )),
                    Some(p) if !p.starts_with(prefix) || p.contains('[') => {
                        errs.push(FieldError::invalid(
                            format!("{at}.subresources.scale.{k}"),
                            &Value::from(p),
                            &format!(
                                "should be a json path under {}",
                                prefix.trim_end_matches('.')
                            ),
                        ))
                    }
                    _ => {}
                }
            }
        }
        if let Some(fields) = v.get("selectableFields").and_then(Value::as_array) {
            for (j, f) in fields.iter().enumerate() {
                if !f
                    .get("jsonPath")
                    .and_then(Value::as_str)
                    .is_some_and(|p| p.starts_with('.'))
                {
                    errs.push(FieldError::invalid(
                        format!("{at}.selectableFields[{j}].jsonPath"),
                        f.get("jsonPath").unwrap_or(&Value::Null),
                        "must be a simple json path starting with .",
                    ));
                }
            }
        }
    }
}

fn label_error(field: &str, value: &str) -> FieldError {
    FieldError::invalid(
        field,
        &Value::from(value),
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
    )
}

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label)
}

fn is_kind(s: &str) -> bool {
    is_label(&s.to_ascii_lowercase()) && s.starts_with(|c: char| c.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn good() -> Value {
        json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": {"type": "object"}}}]
            }
        })
    }

    #[test]
    fn a_good_definition_passes() {
        assert_eq!(validate(&good(), None), vec![]);
    }

    #[test]
    fn each_broken_rule_is_named() {
        let mut c = good();
        c["metadata"]["name"] = json!("other.example.com");
        c["spec"]["scope"] = json!("Galaxy");
        c["spec"]["names"]["plural"] = json!("Widgets");
        c["spec"]["versions"][0]["storage"] = json!(false);
        c["spec"]["versions"][0]["schema"] =
            json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {}}}});
        let fields: Vec<String> = validate(&c, None).into_iter().map(|e| e.field).collect();
        for f in [
            "spec.scope",
            "spec.names.plural",
            "spec.versions",
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].type",
        ] {
            assert!(fields.iter().any(|x| x == f), "{f} missing from {fields:?}");
        }
    }

    #[test]
    fn cel_rules_that_do_not_compile_refuse_the_crd() {
        let mut c = good();
        c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"] = json!({
            "spec": {"type": "object", "properties": {"a": {"type": "integer"}},
                     "x-kubernetes-validations": [{"rule": "self.a > 0"}, {"rule": "self.b > 0"}]}
        });
        let errs = validate(&c, None);
        assert_eq!(errs.len(), 1, "{errs:?}");
        let at = "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[1].rule";
        assert_eq!(errs[0].field, at);
        assert!(
            errs[0]
                .body
                .contains("compilation failed: ERROR: <input>:1:"),
            "{}",
            errs[0].body
        );
        assert!(
            errs[0].body.contains("undefined field 'b'"),
            "{}",
            errs[0].body
        );
    }

    #[test]
    fn scope_and_group_are_immutable() {
        let old = good();
        let mut new = good();
        new["spec"]["scope"] = json!("Cluster");
        let errs = validate(&new, Some(&old));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.scope");
    }
}
