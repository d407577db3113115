//! Label and field selectors: the `labelSelector` and `fieldSelector` query parameters, and
//! the `metav1.LabelSelector` objects of workload specs.

use api::fields::{escape_value, unescape_value, FieldSelector};
use api::labels::LabelSelector;
use std::collections::BTreeMap;

/// Feeds the bytes (when UTF-8) to [`LabelSelector::parse`], and (when JSON) to
/// [`LabelSelector::from_object`]. A selector that parses must print its canonical form, which
/// must parse to an equal selector that prints the same; matching it against a label set
/// built from its own requirements must not panic.
pub fn label_selector(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(sel) = LabelSelector::parse(s) {
            check_label_round_trip(&sel);
        }
    }
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        if let Ok(Some(sel)) = LabelSelector::from_object(&v) {
            check_label_round_trip(&sel);
        }
    }
}

fn check_label_round_trip(sel: &LabelSelector) {
    let printed = sel.to_string();
    let again = LabelSelector::parse(&printed)
        .unwrap_or_else(|e| panic!("{printed:?}, printed from {sel:?}, does not parse: {e}"));
    assert_eq!(&again, sel, "{printed:?} parses to another selector");
    assert_eq!(again.to_string(), printed, "printing is not canonical");
    // A label set that has each required key with the first value the requirement names.
    let labels: BTreeMap<String, String> = sel
        .requirements()
        .iter()
        .map(|r| {
            let v = r.values().first().cloned().unwrap_or_default();
            (r.key().to_string(), v)
        })
        .collect();
    let _ = sel.matches(&labels);
    let _ = sel.matches(&BTreeMap::new());
    for r in sel.requirements() {
        let _ = sel.requires_exact(r.key());
    }
}

/// Feeds the bytes (when UTF-8) to [`FieldSelector::parse`]. A selector that parses must print
/// a canonical form that parses to an equal selector; each requirement's value, escaped, must
/// unescape to itself; matching must not panic.
pub fn field_selector(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sel) = FieldSelector::parse(s) else {
        return;
    };
    let printed = sel.to_string();
    let again = FieldSelector::parse(&printed)
        .unwrap_or_else(|e| panic!("{printed:?}, printed from {sel:?}, does not parse: {e}"));
    assert_eq!(again, sel, "{printed:?} parses to another selector");
    assert_eq!(again.to_string(), printed, "printing is not canonical");
    let mut fields = BTreeMap::new();
    for r in sel.requirements() {
        let escaped = escape_value(&r.value);
        let back = unescape_value(&escaped)
            .unwrap_or_else(|e| panic!("escaped {:?} as {escaped:?}: {e}", r.value));
        assert_eq!(back, r.value, "escaping does not round-trip");
        fields.insert(r.field.clone(), r.value.clone());
        let _ = r.matches_value(None);
        let _ = sel.requires_exact(&r.field);
    }
    let _ = sel.matches(&fields);
    let _ = sel.validate(&["metadata.name", "metadata.namespace"]);
}
