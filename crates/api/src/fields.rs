//! Kubernetes field selectors (`?fieldSelector=spec.nodeName=node1,status.phase!=Failed`).
//!
//! A selector is a comma-separated AND of terms `field=value`, `field==value` or
//! `field!=value`. In values, `\,`, `\=` and `\\` stand for `,`, `=` and `\`; any other
//! backslash sequence, and any unescaped `=` in a value, is an error. Nothing is trimmed:
//! whitespace is part of the field name or value, as in Kubernetes.
//!
//! Which fields exist depends on the resource: parsing accepts any field name, and the
//! server then calls [`FieldSelector::validate`] with the resource's selectable fields.
//! When matching, a field the object does not have compares as the empty string.
//!
//! ```
//! use api::fields::FieldSelector;
//! use serde_json::json;
//!
//! let sel = FieldSelector::parse("spec.nodeName=node1,status.phase!=Failed").unwrap();
//! sel.validate(&["metadata.name", "spec.nodeName", "status.phase"]).unwrap();
//! let pod = json!({"spec": {"nodeName": "node1"}, "status": {"phase": "Running"}});
//! assert!(sel.matches(&pod));
//! assert_eq!(sel.requires_exact("spec.nodeName"), Some("node1"));
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::BuildHasher;
use std::str::FromStr;

pub use crate::labels::SelectorError;

/// Read access to an object's selectable fields by their dotted name (`spec.nodeName`).
///
/// Values are returned as [`Cow`] so string fields can be borrowed while booleans and
/// numbers are rendered (`"true"`, `"3"`) as Kubernetes does.
pub trait FieldSet {
    /// The value of `field`, or `None` if the object has no such field (which selectors
    /// treat as the empty string).
    fn get_field(&self, field: &str) -> Option<Cow<'_, str>>;
}

impl FieldSet for BTreeMap<String, String> {
    fn get_field(&self, field: &str) -> Option<Cow<'_, str>> {
        self.get(field).map(|v| Cow::Borrowed(v.as_str()))
    }
}

impl<S: BuildHasher> FieldSet for HashMap<String, String, S> {
    fn get_field(&self, field: &str) -> Option<Cow<'_, str>> {
        self.get(field).map(|v| Cow::Borrowed(v.as_str()))
    }
}

/// A JSON object: the field name is a dotted path into nested objects. Strings are borrowed;
/// booleans and numbers are rendered; `null`, arrays, objects and missing paths are absent.
impl FieldSet for serde_json::Value {
    fn get_field(&self, field: &str) -> Option<Cow<'_, str>> {
        let mut v = self;
        for part in field.split('.') {
            v = v.as_object()?.get(part)?;
        }
        match v {
            serde_json::Value::String(s) => Some(Cow::Borrowed(s.as_str())),
            serde_json::Value::Bool(b) => Some(Cow::Borrowed(if *b { "true" } else { "false" })),
            serde_json::Value::Number(n) => Some(Cow::Owned(n.to_string())),
            _ => None,
        }
    }
}

impl<T: FieldSet + ?Sized> FieldSet for &T {
    fn get_field(&self, field: &str) -> Option<Cow<'_, str>> {
        (**self).get_field(field)
    }
}

/// The operator of one field requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FieldOperator {
    /// `f=v` or `f==v`: the field's value (absent = "") equals `v`.
    Equals,
    /// `f!=v`: the field's value (absent = "") differs from `v`.
    NotEquals,
}

/// One term of a [`FieldSelector`]; `value` is unescaped.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldRequirement {
    /// The dotted field name, e.g. `spec.nodeName`. Never empty.
    pub field: String,
    /// The comparison.
    pub op: FieldOperator,
    /// The value to compare with, with escapes already resolved.
    pub value: String,
}

impl FieldRequirement {
    /// Whether a field whose value is `actual` (absent = `None`, compared as "") satisfies
    /// this term.
    pub fn matches_value(&self, actual: Option<&str>) -> bool {
        let equal = actual.unwrap_or("") == self.value;
        match self.op {
            FieldOperator::Equals => equal,
            FieldOperator::NotEquals => !equal,
        }
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        };
        write!(f, "{}{}{}", self.field, op, escape_value(&self.value))
    }
}

/// A parsed field selector: the AND of its terms. The empty selector matches everything.
///
/// Terms are kept sorted, so [`Display`](fmt::Display) is canonical and parsing it gives
/// back an equal selector.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses a selector string. The empty string selects everything; empty terms (as in
    /// `a=b,,c=d`) are skipped.
    ///
    /// # Errors
    /// [`SelectorError::InvalidFieldTerm`] for a term without an operator or with an empty
    /// field name, [`SelectorError::InvalidFieldValue`] for a bad escape or an unescaped `=`
    /// in a value.
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        let mut requirements = Vec::new();
        for term in split_terms(s) {
            if term.is_empty() {
                continue;
            }
            let bad_term = || SelectorError::InvalidFieldTerm {
                selector: s.to_string(),
                term: term.to_string(),
            };
            let (field, op, raw) = split_term(term).ok_or_else(bad_term)?;
            if field.is_empty() {
                return Err(bad_term());
            }
            requirements.push(FieldRequirement {
                field: field.to_string(),
                op,
                value: unescape_value(raw)?,
            });
        }
        requirements.sort();
        Ok(FieldSelector { requirements })
    }

    /// The selector that matches every object.
    pub fn everything() -> FieldSelector {
        FieldSelector::default()
    }

    /// Whether this selector has no terms (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Checks every term's field against the fields the resource supports.
    ///
    /// # Errors
    /// [`SelectorError::UnsupportedField`] for the first field not in `allowed`
    /// (message `field label not supported: <field>`).
    pub fn validate(&self, allowed: &[&str]) -> Result<(), SelectorError> {
        match self
            .requirements
            .iter()
            .find(|r| !allowed.contains(&r.field.as_str()))
        {
            Some(r) => Err(SelectorError::UnsupportedField(r.field.clone())),
            None => Ok(()),
        }
    }

    /// Whether the object whose fields `fields` exposes satisfies every term.
    pub fn matches(&self, fields: &impl FieldSet) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_value(fields.get_field(&r.field).as_deref()))
    }

    /// Like [`matches`](Self::matches), with a closure as the field source: `get` returns
    /// the value of a field (borrowed from the object where possible), or `None` if absent.
    pub fn matches_fn<'a>(&self, get: impl Fn(&str) -> Option<Cow<'a, str>>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_value(get(&r.field).as_deref()))
    }

    /// If the selector pins `field` to one value with `=`/`==`, that value (unescaped);
    /// useful to pick an index such as `spec.nodeName`. `None` otherwise.
    pub fn requires_exact(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.op == FieldOperator::Equals)
            .map(|r| r.value.as_str())
    }

    /// The terms, in canonical (sorted) order.
    pub fn requirements(&self) -> impl ExactSizeIterator<Item = &FieldRequirement> + '_ {
        self.requirements.iter()
    }
}

impl FromStr for FieldSelector {
    type Err = SelectorError;

    /// Same as [`FieldSelector::parse`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FieldSelector::parse(s)
    }
}

impl fmt::Display for FieldSelector {
    /// The canonical form: sorted terms joined by `,`, `=` for equality, values escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Escapes `\`, `,` and `=` in a value so it can be written into a selector string.
pub fn escape_value(value: &str) -> Cow<'_, str> {
    if !value.contains(['\\', ',', '=']) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 4);
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    Cow::Owned(out)
}

/// Resolves `\\`, `\,` and `\=` in a raw value.
///
/// # Errors
/// [`SelectorError::InvalidFieldValue`] for any other escape, a trailing lone backslash, or
/// an unescaped `=` or `,`.
pub fn unescape_value(raw: &str) -> Result<String, SelectorError> {
    let bad = |reason| SelectorError::InvalidFieldValue {
        value: raw.to_string(),
        reason,
    };
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(_) => {
                    return Err(bad(
                        "invalid escape sequence (only \\\\, \\, and \\= are allowed)",
                    ))
                }
                None => return Err(bad("ends with an unfinished escape '\\'")),
            },
            '=' | ',' => return Err(bad("'=' and ',' must be escaped with '\\' in values")),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Splits at commas that are not escaped by a backslash.
fn split_terms(s: &str) -> impl Iterator<Item = &str> {
    let mut escaped = false;
    s.split(move |c| {
        if escaped {
            escaped = false;
            return false;
        }
        match c {
            '\\' => {
                escaped = true;
                false
            }
            ',' => true,
            _ => false,
        }
    })
}

/// Splits a term at its first operator: the earliest position where `!=`, `==` or `=`
/// starts (tried in that order), so the field name never contains `=` or `!=`.
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    term.char_indices().find_map(|(i, _)| {
        let rest = &term[i..];
        if let Some(v) = rest.strip_prefix("!=") {
            Some((&term[..i], FieldOperator::NotEquals, v))
        } else if let Some(v) = rest.strip_prefix("==") {
            Some((&term[..i], FieldOperator::Equals, v))
        } else {
            rest.strip_prefix('=')
                .map(|v| (&term[..i], FieldOperator::Equals, v))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn sel(s: &str) -> FieldSelector {
        FieldSelector::parse(s).unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn empty_selects_everything() {
        let e = sel("");
        assert!(e.is_empty());
        assert_eq!(e, FieldSelector::everything());
        assert!(e.matches(&map(&[])));
        assert_eq!(e.to_string(), "");
        assert!(sel(",,").is_empty());
    }

    #[test]
    fn operators() {
        let m = map(&[("metadata.name", "x")]);
        assert!(sel("metadata.name=x").matches(&m));
        assert!(sel("metadata.name==x").matches(&m));
        assert!(!sel("metadata.name!=x").matches(&m));
        assert!(sel("metadata.name!=y").matches(&m));
        assert_eq!(sel("a==b").to_string(), "a=b");
        assert_eq!(
            sel("a==b").requirements().next().unwrap().op,
            FieldOperator::Equals
        );
    }

    #[test]
    fn absent_field_compares_as_empty() {
        let m = map(&[]);
        assert!(sel("spec.nodeName=").matches(&m));
        assert!(sel("spec.nodeName==").matches(&m));
        assert!(!sel("spec.nodeName!=").matches(&m));
        assert!(sel("spec.nodeName!=n1").matches(&m));
        assert!(!sel("spec.nodeName=n1").matches(&m));
    }

    #[test]
    fn comma_is_and() {
        let s = sel("a=1,b!=2");
        assert!(s.matches(&map(&[("a", "1"), ("b", "3")])));
        assert!(!s.matches(&map(&[("a", "1"), ("b", "2")])));
        assert!(!s.matches(&map(&[("a", "0")])));
        assert_eq!(s.requirements().len(), 2);
    }

    #[test]
    fn escaping() {
        let s = sel(r"a=x\,y\=z\\w,b=c");
        assert_eq!(s.requires_exact("a"), Some(r"x,y=z\w"));
        assert_eq!(s.requires_exact("b"), Some("c"));
        assert!(s.matches(&map(&[("a", r"x,y=z\w"), ("b", "c")])));
        assert_eq!(s.to_string(), r"a=x\,y\=z\\w,b=c");
        assert_eq!(sel(&s.to_string()), s);
        for bad in [r"a=\n", r"a=b\", "a=b=c", r"a=\\\"] {
            assert!(
                matches!(
                    FieldSelector::parse(bad),
                    Err(SelectorError::InvalidFieldValue { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn bad_terms() {
        for bad in ["a", "=x", "!=x", "a!b", "a,b=c"] {
            let e = FieldSelector::parse(bad).unwrap_err();
            assert!(
                matches!(e, SelectorError::InvalidFieldTerm { .. }),
                "{bad}: {e}"
            );
        }
        let e = FieldSelector::parse("a=b,oops").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid field selector: \"a=b,oops\"; can't understand \"oops\""
        );
        // A `!` not followed by `=` belongs to the field name.
        let s = sel("a!b=c");
        assert_eq!(s.requirements().next().unwrap().field, "a!b");
        // `a=!b` is equality with the value `!b`.
        assert_eq!(sel("a=!b").requires_exact("a"), Some("!b"));
    }

    #[test]
    fn validate_against_allowed_fields() {
        let allowed = ["metadata.name", "metadata.namespace", "spec.nodeName"];
        assert!(sel("spec.nodeName=n,metadata.name!=x")
            .validate(&allowed)
            .is_ok());
        assert!(FieldSelector::everything().validate(&[]).is_ok());
        let e = sel("metadata.name=a,foo=bar")
            .validate(&allowed)
            .unwrap_err();
        assert_eq!(e.to_string(), "field label not supported: foo");
        let st: crate::status::Status = e.into();
        assert_eq!(st.code(), 400);
    }

    #[test]
    fn requires_exact_ignores_not_equals() {
        let s = sel("spec.nodeName!=a,status.phase=Running");
        assert_eq!(s.requires_exact("spec.nodeName"), None);
        assert_eq!(s.requires_exact("status.phase"), Some("Running"));
        assert_eq!(s.requires_exact("nope"), None);
    }

    #[test]
    fn json_objects_and_closures() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"hostNetwork": true, "priority": 5, "list": [1]},
        });
        assert!(sel("metadata.name=p,metadata.namespace=default").matches(&pod));
        assert!(sel("spec.hostNetwork=true").matches(&pod));
        assert!(sel("spec.priority=5").matches(&pod));
        assert!(sel("spec.list=").matches(&pod));
        assert!(sel("status.phase=").matches(&pod));
        assert!(!sel("metadata.name=q").matches(&pod));

        let name = String::from("p");
        let get = |f: &str| match f {
            "metadata.name" => Some(Cow::Borrowed(name.as_str())),
            "spec.hostNetwork" => Some(Cow::Owned(false.to_string())),
            _ => None,
        };
        assert!(sel("metadata.name=p,spec.hostNetwork=false,x=").matches_fn(get));
        assert!(!sel("metadata.name=q").matches_fn(get));
    }

    #[test]
    fn canonical_order() {
        assert_eq!(sel("b=1,a!=2,a=3").to_string(), "a=3,a!=2,b=1");
    }

    fn field() -> impl Strategy<Value = String> {
        "[a-zA-Z][a-zA-Z0-9]{0,6}(\\.[a-zA-Z][a-zA-Z0-9]{0,6}){0,2}"
    }

    fn value() -> impl Strategy<Value = String> {
        "[a-z0-9=,\\\\! .-]{0,8}"
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(
            terms in proptest::collection::vec((field(), any::<bool>(), value()), 0..5)
        ) {
            let text = terms
                .iter()
                .map(|(f, eq, v)| format!("{f}{}{}", if *eq { "=" } else { "!=" }, escape_value(v)))
                .collect::<Vec<_>>()
                .join(",");
            let parsed = FieldSelector::parse(&text).unwrap();
            prop_assert_eq!(parsed.requirements().len(), terms.len());
            for (f, eq, v) in &terms {
                let want = FieldRequirement {
                    field: f.clone(),
                    op: if *eq { FieldOperator::Equals } else { FieldOperator::NotEquals },
                    value: v.clone(),
                };
                prop_assert!(parsed.requirements().any(|r| *r == want));
            }
            let reparsed = FieldSelector::parse(&parsed.to_string()).unwrap();
            prop_assert_eq!(reparsed, parsed);
        }

        #[test]
        fn parse_never_panics(s in any::<String>()) {
            let _ = FieldSelector::parse(&s);
        }

        #[test]
        fn parse_never_panics_on_selector_alphabet(s in "[a-z=!,\\\\. ]{0,20}") {
            if let Ok(sel) = FieldSelector::parse(&s) {
                prop_assert_eq!(FieldSelector::parse(&sel.to_string()).unwrap(), sel);
            }
        }

        #[test]
        fn escape_unescape_round_trip(v in any::<String>()) {
            prop_assert_eq!(unescape_value(&escape_value(&v)).unwrap(), v);
        }
    }
}
