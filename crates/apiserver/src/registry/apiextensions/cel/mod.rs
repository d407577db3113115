//! Validation rules in CEL (`x-kubernetes-validations`) of custom resource schemas.
//!
//! Data flow: when a CRD is written (and when a server starts serving it), the rules of
//! each version's structural schema are parsed and checked against the schema
//! ([`check`]), their worst-case cost estimated, and any that does not compile or would
//! cost more than Kubernetes' limits refuses the CRD ([`compile`]). The compiled rules
//! live in the schema's nodes. Every custom object written is then evaluated against them
//! ([`validator`]), as CEL values built from its JSON by the schema ([`value`]), with the
//! functions of [`library`]; each rule that does not hold is a field error of the write's
//! 422.
//!
//! The CEL implementation is the `cel` crate (cel-rust). What it lacks against cel-go as
//! Kubernetes configures it: timestamps and durations (`format: date-time` strings are
//! strings here), and Kubernetes' `quantity`, `url`, `ip`, `cidr` and `format` libraries.

pub mod check;
pub mod compile;
pub mod library;
pub mod validator;
pub mod value;

pub use compile::{compile_rules, CompiledRule};
pub use validator::validate;

use super::structural::Node;

/// What a CRD's writer should be told of its rules: one warning per rule that calls
/// functions this server does not have (it is not enforced here).
pub fn warnings(root: &Node) -> Vec<String> {
    fn walk(n: &Node, out: &mut Vec<String>) {
        if !n.rules_below {
            return;
        }
        for r in n.rules.iter().filter(|r| !r.unsupported.is_empty()) {
            out.push(format!(
                "{}: the rule calls {} which this server does not have: it is not enforced",
                r.at,
                r.unsupported.join(", ")
            ));
        }
        n.properties.values().for_each(|p| walk(p, out));
        if let Some(v) = n.additional_properties.as_deref() {
            walk(v, out);
        }
        if let Some(i) = n.items.as_deref() {
            walk(i, out);
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::super::structural::Schema;
    use api::status::FieldError;
    use serde_json::{json, Map, Value};

    const AT: &str = "spec.versions[0].schema.openAPIV3Schema";

    fn schema(spec: Value) -> Result<Schema, Vec<FieldError>> {
        Schema::compile(&json!({"type": "object", "properties": {"spec": spec}}), AT)
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn replicas() -> Value {
        json!({
            "type": "object",
            "properties": {
                "replicas": {"type": "integer"},
                "maxReplicas": {"type": "integer"},
                "mode": {"type": "string", "maxLength": 16},
            },
            "x-kubernetes-validations": [
                {"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"},
                {"rule": "!has(self.mode) || self.mode == oldSelf.mode", "reason": "FieldValueForbidden",
                 "fieldPath": ".mode", "messageExpression": "'mode is immutable, was ' + oldSelf.mode"},
            ],
        })
    }

    #[test]
    fn a_rule_that_does_not_hold_is_a_field_error_with_its_message() {
        let s = schema(replicas()).unwrap();
        let good = obj(json!({"spec": {"replicas": 2, "maxReplicas": 3}}));
        assert!(s.validate(&good).is_empty());
        let bad = obj(json!({"spec": {"replicas": 5, "maxReplicas": 3}}));
        let errs = s.validate(&bad);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec");
        assert_eq!(
            errs[0].body,
            "Invalid value: \"object\": replicas must not exceed maxReplicas"
        );
    }

    #[test]
    fn transition_rules_run_on_update_only_and_see_the_old_value() {
        let s = schema(replicas()).unwrap();
        let old = obj(json!({"spec": {"replicas": 1, "maxReplicas": 3, "mode": "a"}}));
        let changed = obj(json!({"spec": {"replicas": 1, "maxReplicas": 3, "mode": "b"}}));
        // A create has no old value: the transition rule does not run.
        assert!(s.validate(&changed).is_empty());
        let errs = s.validate_update(&changed, Some(&old));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec.mode");
        assert_eq!(errs[0].reason, "FieldValueForbidden");
        assert_eq!(errs[0].body, "Forbidden: mode is immutable, was a");
        let same = obj(json!({"spec": {"replicas": 2, "maxReplicas": 3, "mode": "a"}}));
        assert!(s.validate_update(&same, Some(&old)).is_empty());
    }

    #[test]
    fn an_unchanged_value_is_not_revalidated_by_its_plain_rules() {
        let s = schema(replicas()).unwrap();
        // Written before the rule existed: unchanged, it is let through; changed, refused.
        let old = obj(json!({"spec": {"replicas": 5, "maxReplicas": 3}}));
        assert!(s.validate_update(&old, Some(&old)).is_empty());
        let changed = obj(json!({"spec": {"replicas": 6, "maxReplicas": 3}}));
        assert_eq!(s.validate_update(&changed, Some(&old)).len(), 1);
    }

    #[test]
    fn rules_run_on_every_list_item_and_map_value_with_paths() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "ports": {"type": "array", "maxItems": 8, "items": {
                    "type": "integer", "x-kubernetes-validations": [{"rule": "self > 0 && self < 65536"}]}},
                "labels": {"type": "object", "maxProperties": 8, "additionalProperties": {
                    "type": "string", "maxLength": 63,
                    "x-kubernetes-validations": [{"rule": "self.startsWith('x-')", "message": "must start with x-"}]}},
            },
        }))
        .unwrap();
        let errs = s.validate(&obj(json!({"spec": {
            "ports": [80, 0, 70000],
            "labels": {"a": "x-1", "b": "y"},
        }})));
        let got: Vec<(&str, &str)> = errs
            .iter()
            .map(|e| (e.field.as_str(), e.body.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("spec.labels[b]", "Invalid value: \"y\": must start with x-"),
                (
                    "spec.ports[1]",
                    "Invalid value: 0: failed rule: self > 0 && self < 65536"
                ),
                (
                    "spec.ports[2]",
                    "Invalid value: 70000: failed rule: self > 0 && self < 65536"
                ),
            ]
        );
    }

    #[test]
    fn evaluation_errors_are_reported_per_rule() {
        let s = schema(json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.a / self.b > 1"}, {"rule": "self.a > 0"}],
        }))
        .unwrap();
        let errs = s.validate(&obj(json!({"spec": {"a": 1, "b": 0}})));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(
            errs[0].body,
            "Invalid value: \"object\": division by zero evaluating rule: self.a / self.b > 1"
        );
        let errs = s.validate(&obj(json!({"spec": {"b": 1}})));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs[0].body.contains("no such key: a evaluating rule"),
            "{errs:?}"
        );
    }

    #[test]
    fn root_rules_see_the_name_and_kind_but_not_the_rest_of_metadata() {
        let s = Schema::compile(
            &json!({"type": "object",
                    "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('w-') && self.kind == 'Widget'"}]}),
            AT,
        )
        .unwrap();
        let named =
            |n: &str| obj(json!({"kind": "Widget", "metadata": {"name": n, "labels": {"a": "b"}}}));
        assert!(s.validate(&named("w-1")).is_empty());
        let errs = s.validate(&named("v-1"));
        assert_eq!(errs[0].field, "<nil>");
        let e = Schema::compile(
            &json!({"type": "object", "x-kubernetes-validations": [{"rule": "size(self.metadata.labels) > 0"}]}),
            AT,
        )
        .unwrap_err();
        assert!(e[0].body.contains("undefined field 'labels'"), "{e:?}");
    }

    #[test]
    fn escaped_names_reach_properties_cel_cannot_name() {
        let s = schema(json!({
            "type": "object",
            "properties": {"max-size": {"type": "integer"}, "namespace": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": "self.max__dash__size < 10 && self.__namespace__ != ''"}],
        }))
        .unwrap();
        assert!(s
            .validate(&obj(json!({"spec": {"max-size": 3, "namespace": "a"}})))
            .is_empty());
        assert_eq!(
            s.validate(&obj(json!({"spec": {"max-size": 30, "namespace": "a"}})))
                .len(),
            1
        );
    }

    #[test]
    fn rules_that_cannot_compile_are_refused_with_reasons() {
        let errs = |rule: Value| {
            schema(json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "l": {"type": "array", "maxItems": 4, "items": {
                "type": "object", "properties": {"x": {"type": "string", "maxLength": 4}},
                "x-kubernetes-validations": [{"rule": "self.x == oldSelf.x"}]}}},
            "x-kubernetes-validations": [rule],
        }))
        .unwrap_err()
        };
        let at = format!("{AT}.properties[spec].x-kubernetes-validations[0]");
        // Items of a list that is not a map-list cannot be paired with old ones.
        let e = errs(json!({"rule": "true"}));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].body.contains(
                "oldSelf cannot be used on the uncorrelatable portion of the schema within"
            ),
            "{e:?}"
        );
        for (rule, field, says) in [
            (
                json!({"rule": "self.a >"}),
                "rule",
                "compilation failed: ERROR: <input>:1:",
            ),
            (
                json!({"rule": "self.nope == 1"}),
                "rule",
                "undefined field 'nope'",
            ),
            (
                json!({"rule": "other == 1"}),
                "rule",
                "undeclared reference to 'other'",
            ),
            (
                json!({"rule": "self.a + 1"}),
                "rule",
                "cel expression must evaluate to a bool",
            ),
            (
                json!({"rule": ""}),
                "rule",
                "Required value: rule is not specified",
            ),
            (
                json!({"rule": "true", "reason": "Nope"}),
                "reason",
                "Unsupported value: \"Nope\"",
            ),
            (
                json!({"rule": "true", "fieldPath": ".b"}),
                "fieldPath",
                "fieldPath must be a valid path",
            ),
            (
                json!({"rule": "true", "optionalOldSelf": true}),
                "optionalOldSelf",
                "may not be set if oldSelf is not used in rule",
            ),
            (
                json!({"rule": "true", "messageExpression": "self.a +"}),
                "messageExpression",
                "messageExpression compilation failed",
            ),
        ] {
            let e = errs(rule.clone());
            assert!(
                e.iter()
                    .any(|x| x.field == format!("{at}.{field}") && x.body.contains(says)),
                "{rule}: {e:?}"
            );
        }
    }

    #[test]
    fn rules_over_unbounded_lists_are_refused_for_their_cost_until_bounded() {
        let spec = |max: Option<u64>| {
            let mut list = json!({"type": "array", "items": {"type": "string"}});
            if let Some(m) = max {
                list["maxItems"] = json!(m);
                list["items"]["maxLength"] = json!(64);
            }
            json!({"type": "object", "properties": {"l": list},
                   "x-kubernetes-validations": [{"rule": "self.l.all(x, self.l.exists(y, x == y))"}]})
        };
        let e = schema(spec(None)).unwrap_err();
        assert_eq!(
            e[0].field,
            format!("{AT}.properties[spec].x-kubernetes-validations[0].rule")
        );
        assert!(
            e[0].body.starts_with("Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems"),
            "{e:?}"
        );
        assert!(
            e.iter().any(|x| x
                .body
                .contains("estimated rule cost total for entire OpenAPIv3 schema")),
            "{e:?}"
        );
        let s = schema(spec(Some(16))).unwrap();
        assert!(s
            .validate(&obj(json!({"spec": {"l": ["a", "b"]}})))
            .is_empty());
    }

    #[test]
    fn deeply_nested_rules_are_refused_not_overflowing_the_stack() {
        let deep = format!("{}true{}", "(".repeat(5000), ")".repeat(5000));
        let e = schema(json!({"type": "object", "x-kubernetes-validations": [{"rule": deep}]}))
            .unwrap_err();
        assert!(e[0].body.contains("compilation failed"), "{e:?}");
        let nested = format!("{}1{}", "[".repeat(1000), "]".repeat(1000));
        let e = schema(json!({"type": "object", "x-kubernetes-validations": [{"rule": format!("size({nested}) == 1")}]})).unwrap_err();
        assert!(e[0].body.contains("compilation failed"), "{e:?}");
    }

    #[test]
    fn the_deepest_rule_allowed_evaluates_on_a_small_stack() {
        // As deep as the parser allows: evaluation (on a runtime thread in the server) must
        // fit in far less than the 2 MiB a tokio worker has.
        let depth = super::compile::MAX_NESTING as usize - 2;
        let rule = format!("{}self.a{} == 1", "(".repeat(depth), ")".repeat(depth));
        let s = schema(
            json!({"type": "object", "properties": {"a": {"type": "integer"}},
                              "x-kubernetes-validations": [{"rule": rule}]}),
        )
        .unwrap();
        let errs = std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || s.validate(&obj(json!({"spec": {"a": 2}}))).len())
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(errs, 1);
    }

    #[test]
    fn rules_calling_functions_the_server_lacks_are_kept_unenforced_with_a_warning() {
        let s = schema(json!({
            "type": "object",
            "properties": {"limit": {"type": "string", "maxLength": 16}},
            "x-kubernetes-validations": [
                {"rule": "quantity(self.limit).isGreaterThan(quantity('1'))"},
                {"rule": "self.limit != 'none'"},
            ],
        }))
        .unwrap();
        let w = super::warnings(&s.root);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("x-kubernetes-validations[0]") && w[0].contains("quantity"),
            "{w:?}"
        );
        // The other rule is still enforced.
        assert!(s.validate(&obj(json!({"spec": {"limit": "0"}}))).is_empty());
        assert_eq!(
            s.validate(&obj(json!({"spec": {"limit": "none"}}))).len(),
            1
        );
    }

    #[test]
    fn long_operator_chains_are_refused_without_exhausting_the_stack() {
        let rule = |n: usize| format!("self.a{} > 0", " + 1".repeat(n));
        let spec = |r: String| {
            json!({"type": "object", "properties": {"a": {"type": "integer"}},
                                      "x-kubernetes-validations": [{"rule": r}]})
        };
        let tail = |e: &[FieldError]| e[0].body.chars().rev().take(200).collect::<String>();
        let e = schema(spec(rule(20_000))).unwrap_err();
        assert!(
            e[0].body.contains("operators and punctuation"),
            "{}",
            tail(&e)
        );
        let e = schema(spec(rule(500))).unwrap_err();
        assert!(e[0].body.contains("levels deep"), "{}", tail(&e));
        // The longest chain allowed evaluates on half the stack a worker thread has.
        let s = schema(spec(rule(super::compile::MAX_DEPTH - 4))).unwrap();
        let errs = std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(move || s.validate(&obj(json!({"spec": {"a": -1000}}))).len())
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(errs, 1);
        // A long chain of alternatives, as rules that list allowed values are written, is
        // fine, and evaluates on a small stack.
        let alternatives: Vec<String> = (0..90).map(|i| format!("self.a == {i}")).collect();
        let s = schema(spec(alternatives.join(" || "))).unwrap();
        let errs = std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || {
                (
                    s.validate(&obj(json!({"spec": {"a": 89}}))).len(),
                    s.validate(&obj(json!({"spec": {"a": 90}}))).len(),
                )
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(errs, (0, 1));
    }

    #[test]
    fn functions_that_build_large_values_are_priced_by_what_they_build() {
        let spec = |max: Option<u64>| {
            let mut s = json!({"type": "string"});
            if let Some(m) = max {
                s["maxLength"] = json!(m);
            }
            json!({"type": "object", "properties": {"s": s},
                   "x-kubernetes-validations": [{"rule": "self.s.replace('', self.s) != ''"}]})
        };
        let e = schema(spec(None)).unwrap_err();
        assert!(
            e[0].body.contains("estimated rule cost exceeds budget"),
            "{e:?}"
        );
        assert!(schema(spec(Some(64))).is_ok());
        // Kubernetes prices a prefix test by the prefix, not by the string.
        let prefixes = json!({"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string"}}},
                              "x-kubernetes-validations": [{"rule": "self.l.all(x, x.startsWith('/'))"}]});
        assert!(schema(prefixes).is_ok());
    }

    #[test]
    fn map_list_items_see_their_old_item_by_key() {
        let s = schema(json!({
            "type": "object",
            "properties": {"ports": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"], "maxItems": 16,
                "items": {"type": "object", "required": ["name"],
                    "properties": {"name": {"type": "string", "maxLength": 16}, "port": {"type": "integer"}},
                    "x-kubernetes-validations": [{"rule": "self.port == oldSelf.port", "message": "port is immutable"}]}}},
        }))
        .unwrap();
        let old =
            obj(json!({"spec": {"ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}]}}));
        // Reordered and one added: each pairs with its own old item.
        let reordered = obj(
            json!({"spec": {"ports": [{"name": "c", "port": 9}, {"name": "b", "port": 2}, {"name": "a", "port": 1}]}}),
        );
        assert!(s.validate_update(&reordered, Some(&old)).is_empty());
        let changed =
            obj(json!({"spec": {"ports": [{"name": "b", "port": 3}, {"name": "a", "port": 1}]}}));
        let errs = s.validate_update(&changed, Some(&old));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec.ports[0]");
    }

    #[test]
    fn a_stored_definition_whose_rules_do_not_compile_here_is_served_and_says_so() {
        let source = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.nope > 0"}, {"rule": "self.a > 0"}]}}});
        assert!(Schema::compile(&source, AT).is_err());
        let s = Schema::compile_stored(&source, AT).unwrap();
        let errs = s.validate(&obj(json!({"spec": {"a": 1}})));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].body.contains("rule compile error:")
                && errs[0].body.contains("undefined field 'nope'"),
            "{errs:?}"
        );
    }

    #[test]
    fn kubernetes_libraries_this_server_lacks_are_warned_about_not_refused() {
        let s = schema(json!({
            "type": "object",
            "properties": {"l": {"type": "array", "maxItems": 4, "items": {"type": "string", "maxLength": 8}},
                           "n": {"type": "string", "maxLength": 63}},
            "x-kubernetes-validations": [
                {"rule": "sets.contains(self.l, ['a'])"},
                {"rule": "!format.dns1123Label().validate(self.n).hasValue()"},
                {"rule": "self.l.indexOf('a') == 0"},
            ],
        }))
        .unwrap();
        let w = super::warnings(&s.root);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].contains("sets.contains"), "{w:?}");
        assert!(w[1].contains("format.dns1123Label"), "{w:?}");
        assert!(w[2].contains("indexOf"), "{w:?}");
        assert!(s
            .validate(&obj(json!({"spec": {"l": ["b"], "n": "x"}})))
            .is_empty());
    }

    #[test]
    fn a_rule_past_its_iteration_budget_stops_the_validation() {
        let s = schema(json!({
            "type": "object",
            "properties": {"l": {"type": "array", "maxItems": 100, "items": {"type": "integer"}}},
            "x-kubernetes-validations": [
                {"rule": "self.l.all(x, x > 0)"},
                {"rule": "size(self.l) < 5"},
            ],
        }))
        .unwrap();
        let long = obj(json!({"spec": {"l": (1..=20).collect::<Vec<i64>>()}}));
        super::library::set_rule_limit(10);
        let errs = s.validate(&long);
        super::library::set_rule_limit(super::library::RULE_ITERATIONS);
        // The first rule is stopped; the second, which would fail, does not run.
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].body.contains("'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.l.all(x, x > 0)"),
            "{errs:?}"
        );
        // Under the real limit both run (the second fails).
        assert_eq!(s.validate(&long).len(), 1);
        assert!(s.validate(&long)[0].body.contains("size(self.l) < 5"));
    }

    #[test]
    fn kubernetes_list_and_regex_functions_are_there() {
        let s = schema(json!({
            "type": "object",
            "properties": {"l": {"type": "array", "maxItems": 8, "items": {"type": "integer"}},
                           "s": {"type": "string", "maxLength": 32}},
            "x-kubernetes-validations": [
                {"rule": "self.l.isSorted() && self.l.sum() == 6 && self.l.min() == 1 && self.l.max() == 3"},
                {"rule": "self.s.find('[0-9]+') == '42' && self.s.findAll('[a-z]') == ['a', 'b']"},
                {"rule": "self.s.lowerAscii().contains('a42') && self.s.matches('^a[0-9]+b$')"},
            ],
        }))
        .unwrap();
        assert_eq!(
            s.validate(&obj(json!({"spec": {"l": [1, 2, 3], "s": "a42b"}}))),
            vec![]
        );
        assert_eq!(
            s.validate(&obj(json!({"spec": {"l": [3, 2, 1], "s": "a42b"}})))
                .len(),
            1
        );
    }
}
