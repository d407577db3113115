//! Kubernetes label selectors: parsing, validation, matching and a canonical string form.
//!
//! The grammar is the one `kubectl -l` and `?labelSelector=` use:
//!
//! ```text
//! selector    := "" | requirement ("," requirement)*
//! requirement := "!" key                    (the key is absent)
//!              | key                        (the key is present)
//!              | key ("=" | "==" | "!=") value?
//!              | key ("in" | "notin") "(" value? ("," value?)* ")"
//!              | key (">" | "<") integer
//! ```
//!
//! Whitespace (space, tab, CR, LF) may appear between tokens but never inside one. Keys are
//! qualified names (`[prefix/]name`, the prefix a DNS subdomain of at most 253 characters, the
//! name at most 63 characters of alphanumerics, `-`, `_` and `.`, starting and ending with an
//! alphanumeric); values are label values (the same rules as a name, but they may be empty).
//!
//! Matching follows Kubernetes: `!=` and `notin` also match objects that lack the key; `=`,
//! `in`, `>` and `<` need it. The requirements of one selector are ANDed.
//!
//! ```
//! use std::collections::BTreeMap;
//! use api::labels::LabelSelector;
//!
//! let sel = LabelSelector::parse("app.kubernetes.io/name=web, tier notin (db), !canary").unwrap();
//! let mut labels = BTreeMap::new();
//! labels.insert("app.kubernetes.io/name".to_string(), "web".to_string());
//! assert!(sel.matches(&labels));
//! labels.insert("canary".to_string(), "yes".to_string());
//! assert!(!sel.matches(&labels));
//! assert_eq!(sel.to_string(), "app.kubernetes.io/name=web,!canary,tier notin (db)");
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::BuildHasher;
use std::str::FromStr;

use crate::status::Status;

/// Why a label or field selector was rejected. The message names the problem and, for
/// syntax errors, the byte offset in the selector string where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The selector string does not follow the grammar.
    #[error(
        "unable to parse requirement: found {found}, expected: {expected} (at byte {position})"
    )]
    Syntax {
        /// Byte offset of the offending token.
        position: usize,
        /// The offending token, quoted, or `end of string`.
        found: String,
        /// What the parser would have accepted there.
        expected: &'static str,
    },
    /// A label key is not a valid qualified name.
    #[error("invalid label key {key:?}: {reason}")]
    InvalidKey {
        /// The rejected key.
        key: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// A label value is not a valid label value.
    #[error("invalid label value {value:?} for key {key:?}: {reason}")]
    InvalidValue {
        /// The key the value belongs to.
        key: String,
        /// The rejected value.
        value: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// `in` / `notin` with an empty list, as in `a in ()`.
    #[error("invalid requirement on {key:?}: the values of 'in' and 'notin' can't be empty")]
    EmptyValueSet {
        /// The key of the requirement.
        key: String,
    },
    /// `>` / `<` with a value that is not a 64-bit integer.
    #[error("invalid requirement on {key:?}: for '>' and '<' the value must be an integer, got {value:?}")]
    NotAnInteger {
        /// The key of the requirement.
        key: String,
        /// The rejected value.
        value: String,
    },
    /// A field selector term has no `=`, `==` or `!=`, or has an empty field name.
    #[error("invalid field selector: {selector:?}; can't understand {term:?}")]
    InvalidFieldTerm {
        /// The whole selector.
        selector: String,
        /// The term that could not be understood.
        term: String,
    },
    /// A field selector value has a bad escape sequence or an unescaped `=`.
    #[error("invalid field selector value {value:?}: {reason}")]
    InvalidFieldValue {
        /// The raw (still escaped) value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A field selector names a field the resource does not support.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

impl From<SelectorError> for Status {
    /// Every selector error is the client's fault: 400 BadRequest carrying the message.
    fn from(e: SelectorError) -> Status {
        Status::bad_request(e.to_string())
    }
}

/// Read access to an object's labels, so selectors can match any label container without
/// copying it.
pub trait LabelSet {
    /// The value of label `key`, or `None` if the object has no such label.
    fn get_label(&self, key: &str) -> Option<&str>;
}

impl LabelSet for BTreeMap<String, String> {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<S: BuildHasher> LabelSet for HashMap<String, String, S> {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A JSON `metadata.labels` object. Entries whose value is not a string count as absent.
impl LabelSet for serde_json::Map<String, serde_json::Value> {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(serde_json::Value::as_str)
    }
}

impl<T: LabelSet + ?Sized> LabelSet for &T {
    fn get_label(&self, key: &str) -> Option<&str> {
        (**self).get_label(key)
    }
}

/// The operator of one label requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LabelOperator {
    /// `key=v` or `key==v`: the label is present and equals the single value.
    Equals,
    /// `key!=v`: the label is absent or differs from the single value.
    NotEquals,
    /// `key in (v1,v2)`: the label is present and equals one of the values.
    In,
    /// `key notin (v1,v2)`: the label is absent or equals none of the values.
    NotIn,
    /// `key`: the label is present (any value).
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key>n`: the label is present, parses as an integer, and is greater than `n`.
    GreaterThan,
    /// `key<n`: the label is present, parses as an integer, and is less than `n`.
    LessThan,
}

/// One validated requirement of a [`LabelSelector`].
///
/// Invariants (upheld by the parser): `values` is sorted and free of duplicates; it holds
/// exactly one value for `Equals`, `NotEquals`, `GreaterThan` and `LessThan` (an integer for
/// the last two), at least one for `In` and `NotIn`, and none for `Exists` and `DoesNotExist`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    op: LabelOperator,
    values: Vec<String>,
    /// The parsed integer for `GreaterThan` / `LessThan`.
    number: i64,
}

impl Requirement {
    /// The label key this requirement is about.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> LabelOperator {
        self.op
    }

    /// The values, sorted and deduplicated (see the type's invariants).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether `labels` satisfies this requirement (see [`LabelOperator`] for each rule).
    pub fn matches(&self, labels: &impl LabelSet) -> bool {
        let actual = labels.get_label(&self.key);
        let contains = |v: &str| self.values.binary_search_by(|x| x.as_str().cmp(v)).is_ok();
        match self.op {
            LabelOperator::Equals | LabelOperator::In => actual.is_some_and(contains),
            LabelOperator::NotEquals | LabelOperator::NotIn => !actual.is_some_and(contains),
            LabelOperator::Exists => actual.is_some(),
            LabelOperator::DoesNotExist => actual.is_none(),
            LabelOperator::GreaterThan => actual
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|n| n > self.number),
            LabelOperator::LessThan => actual
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|n| n < self.number),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let single = self.values.first().map(String::as_str).unwrap_or("");
        match self.op {
            LabelOperator::Exists => write!(f, "{}", self.key),
            LabelOperator::DoesNotExist => write!(f, "!{}", self.key),
            LabelOperator::Equals => write!(f, "{}={}", self.key, single),
            LabelOperator::NotEquals => write!(f, "{}!={}", self.key, single),
            LabelOperator::GreaterThan => write!(f, "{}>{}", self.key, self.number),
            LabelOperator::LessThan => write!(f, "{}<{}", self.key, self.number),
            LabelOperator::In | LabelOperator::NotIn => {
                let word = if self.op == LabelOperator::In {
                    "in"
                } else {
                    "notin"
                };
                // A lone empty value is written `(,)`: `()` would be an empty set.
                let list = match self.values.as_slice() {
                    [only] if only.is_empty() => ",".to_string(),
                    values => values.join(","),
                };
                write!(f, "{} {} ({})", self.key, word, list)
            }
        }
    }
}

/// A parsed, validated label selector: the AND of its requirements.
///
/// The empty selector matches everything. Requirements are kept sorted by key (stable, so
/// two requirements on one key keep their written order), which makes [`Display`](fmt::Display)
/// canonical: parsing the displayed string gives back an equal selector.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses a selector string; the empty (or all-whitespace) string selects everything.
    ///
    /// # Errors
    /// [`SelectorError`] naming the first problem: a syntax error with its byte offset, an
    /// invalid key or value, an empty `in ()` list, or a non-integer `>`/`<` operand.
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Parser::new(s).parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// The selector that matches every object.
    pub fn everything() -> LabelSelector {
        LabelSelector::default()
    }

    /// Whether this selector has no requirements (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfies every requirement.
    pub fn matches(&self, labels: &impl LabelSet) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// If the selector pins `key` to one value (`key=v`, `key==v` or `key in (v)`), that
    /// value; useful to pick an index. `None` otherwise.
    pub fn requires_exact(&self, key: &str) -> Option<&str> {
        self.requirements
            .iter()
            .filter(|r| r.key == key)
            .find(|r| {
                matches!(r.op, LabelOperator::Equals | LabelOperator::In) && r.values.len() == 1
            })
            .and_then(|r| r.values.first().map(String::as_str))
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// The selector a `metav1.LabelSelector` object (`matchLabels` and `matchExpressions`
    /// with operators `In`, `NotIn`, `Exists`, `DoesNotExist`) stands for, as Kubernetes'
    /// `LabelSelectorAsSelector` reads it: `None` for an absent (`null`) selector, which
    /// selects nothing; the empty object selects everything.
    ///
    /// # Errors
    /// [`SelectorError`] for a bad key or value, an unknown operator, `In`/`NotIn` without
    /// values, or `Exists`/`DoesNotExist` with some.
    pub fn from_object(sel: &serde_json::Value) -> Result<Option<LabelSelector>, SelectorError> {
        use serde_json::Value;
        let obj = match sel {
            Value::Null => return Ok(None),
            Value::Object(m) => m,
            _ => {
                return Err(SelectorError::InvalidKey {
                    key: String::new(),
                    reason: "a label selector must be an object".into(),
                })
            }
        };
        let mut requirements = Vec::new();
        if let Some(Value::Object(labels)) = obj.get("matchLabels") {
            for (k, v) in labels {
                let v = v.as_str().unwrap_or("");
                validate_label_key(k)?;
                validate_label_value(k, v)?;
                requirements.push(Requirement {
                    key: k.clone(),
                    op: LabelOperator::Equals,
                    values: vec![v.to_string()],
                    number: 0,
                });
            }
        }
        let expressions = obj.get("matchExpressions").and_then(Value::as_array);
        for e in expressions.into_iter().flatten() {
            let key = e.get("key").and_then(Value::as_str).unwrap_or("");
            validate_label_key(key)?;
            let mut values: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|v| v.as_str().unwrap_or("").to_string())
                .collect();
            for v in &values {
                validate_label_value(key, v)?;
            }
            values.sort();
            values.dedup();
            let op = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                "In" => LabelOperator::In,
                "NotIn" => LabelOperator::NotIn,
                "Exists" => LabelOperator::Exists,
                "DoesNotExist" => LabelOperator::DoesNotExist,
                other => {
                    return Err(SelectorError::InvalidKey {
                        key: key.to_string(),
                        reason: format!("{other:?} is not a valid label selector operator"),
                    })
                }
            };
            let wants_values = matches!(op, LabelOperator::In | LabelOperator::NotIn);
            if wants_values && values.is_empty() {
                return Err(SelectorError::EmptyValueSet {
                    key: key.to_string(),
                });
            }
            if !wants_values && !values.is_empty() {
                return Err(SelectorError::InvalidKey {
                    key: key.to_string(),
                    reason: "values must be empty for 'Exists' and 'DoesNotExist'".into(),
                });
            }
            requirements.push(Requirement {
                key: key.to_string(),
                op,
                values,
                number: 0,
            });
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Some(LabelSelector { requirements }))
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;

    /// Same as [`LabelSelector::parse`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(s)
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical form: requirements joined by `,` without spaces, `=` for equality,
    /// `in`/`notin` lists sorted. The empty selector displays as the empty string.
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

/// Checks that `key` is a qualified name: `[prefix/]name`.
///
/// # Errors
/// [`SelectorError::InvalidKey`] saying which rule is broken.
pub fn validate_label_key(key: &str) -> Result<(), SelectorError> {
    let bad = |reason: String| SelectorError::InvalidKey {
        key: key.to_string(),
        reason,
    };
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err(bad("the prefix before '/' must not be empty".into()));
        }
        check_dns_subdomain(prefix).map_err(|r| bad(format!("prefix: {r}")))?;
    }
    if name.is_empty() {
        return Err(bad("the name part must not be empty".into()));
    }
    check_name_part(name).map_err(|r| bad(format!("name part: {r}")))
}

/// Checks that `value` is a valid label value: empty, or at most 63 alphanumerics, `-`, `_`
/// and `.`, starting and ending with an alphanumeric.
///
/// # Errors
/// [`SelectorError::InvalidValue`] (with `key` for context) saying which rule is broken.
pub fn validate_label_value(key: &str, value: &str) -> Result<(), SelectorError> {
    if value.is_empty() {
        return Ok(());
    }
    check_name_part(value).map_err(|reason| SelectorError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    })
}

/// The rules shared by key names and values (which are not empty here).
fn check_name_part(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err(format!(
            "must be no more than 63 characters, has {}",
            s.len()
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "character {c:?} not allowed (only alphanumerics, '-', '_' and '.')"
        ));
    }
    let b = s.as_bytes();
    let alnum = |c: Option<&u8>| c.is_some_and(u8::is_ascii_alphanumeric);
    if !alnum(b.first()) || !alnum(b.last()) {
        return Err("must start and end with an alphanumeric character".into());
    }
    Ok(())
}

/// RFC 1123 subdomain: dot-separated labels of lowercase alphanumerics and `-`, each starting
/// and ending with an alphanumeric, at most 253 characters in all.
fn check_dns_subdomain(s: &str) -> Result<(), String> {
    if s.len() > 253 {
        return Err(format!(
            "must be no more than 253 characters, has {}",
            s.len()
        ));
    }
    for label in s.split('.') {
        let b = label.as_bytes();
        let ok = !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b.first() != Some(&b'-')
            && b.last() != Some(&b'-');
        if !ok {
            return Err(format!(
                "{s:?} is not a DNS subdomain (dot-separated lowercase alphanumerics and '-', \
                 each part starting and ending with an alphanumeric)"
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Lexer and parser.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    End,
    Ident(&'a str),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
}

impl Tok<'_> {
    fn describe(&self) -> String {
        match self {
            Tok::End => "end of string".into(),
            Tok::Ident(s) => format!("'{s}'"),
            Tok::Not => "'!'".into(),
            Tok::Eq => "'='".into(),
            Tok::DoubleEq => "'=='".into(),
            Tok::NotEq => "'!='".into(),
            Tok::Gt => "'>'".into(),
            Tok::Lt => "'<'".into(),
            Tok::Open => "'('".into(),
            Tok::Close => "')'".into(),
            Tok::Comma => "','".into(),
        }
    }
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'!' | b'=' | b'>' | b'<' | b'(' | b')' | b',')
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    /// The token after `pos`, with its start offset, once peeked.
    peeked: Option<(Tok<'a>, usize, usize)>,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Self {
        Parser {
            src,
            pos: 0,
            peeked: None,
        }
    }

    /// Lexes the token at `self.pos`: returns it, its start and the offset after it.
    fn lex(&self) -> (Tok<'a>, usize, usize) {
        let b = self.src.as_bytes();
        let mut i = self.pos;
        while b.get(i).copied().is_some_and(is_space) {
            i += 1;
        }
        let start = i;
        let Some(&first) = b.get(i) else {
            return (Tok::End, start, i);
        };
        let next = b.get(i + 1).copied();
        let (tok, len) = match first {
            b'!' if next == Some(b'=') => (Tok::NotEq, 2),
            b'!' => (Tok::Not, 1),
            b'=' if next == Some(b'=') => (Tok::DoubleEq, 2),
            b'=' => (Tok::Eq, 1),
            b'>' => (Tok::Gt, 1),
            b'<' => (Tok::Lt, 1),
            b'(' => (Tok::Open, 1),
            b')' => (Tok::Close, 1),
            b',' => (Tok::Comma, 1),
            _ => {
                let mut j = i;
                while b.get(j).is_some_and(|&c| !is_space(c) && !is_special(c)) {
                    j += 1;
                }
                // Stops only at ASCII bytes or the end, so `i..j` is on char boundaries.
                (Tok::Ident(self.src.get(i..j).unwrap_or("")), j - i)
            }
        };
        (tok, start, start + len)
    }

    fn peek(&mut self) -> (Tok<'a>, usize) {
        let t = match self.peeked {
            Some(t) => t,
            None => {
                let t = self.lex();
                self.peeked = Some(t);
                t
            }
        };
        (t.0, t.1)
    }

    fn next(&mut self) -> (Tok<'a>, usize) {
        let (tok, start) = self.peek();
        if let Some((_, _, end)) = self.peeked.take() {
            self.pos = end;
        }
        (tok, start)
    }

    fn err(found: Tok<'_>, position: usize, expected: &'static str) -> SelectorError {
        SelectorError::Syntax {
            position,
            found: found.describe(),
            expected,
        }
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut out = Vec::new();
        if self.peek().0 == Tok::End {
            return Ok(out);
        }
        loop {
            out.push(self.requirement()?);
            match self.next() {
                (Tok::End, _) => return Ok(out),
                (Tok::Comma, _) => {}
                (t, p) => return Err(Self::err(t, p, "',' or end of string")),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let (tok, pos) = self.next();
        let (key, negated) = match tok {
            Tok::Not => match self.next() {
                (Tok::Ident(k), _) => (k, true),
                (t, p) => return Err(Self::err(t, p, "a label key after '!'")),
            },
            Tok::Ident(k) => (k, false),
            t => return Err(Self::err(t, pos, "'!' or a label key")),
        };
        validate_label_key(key)?;
        let req = |op, values: Vec<String>, number| Requirement {
            key: key.to_string(),
            op,
            values,
            number,
        };
        if negated {
            return Ok(req(LabelOperator::DoesNotExist, Vec::new(), 0));
        }
        let (tok, pos) = self.peek();
        let op = match tok {
            Tok::End | Tok::Comma => return Ok(req(LabelOperator::Exists, Vec::new(), 0)),
            Tok::Eq | Tok::DoubleEq => LabelOperator::Equals,
            Tok::NotEq => LabelOperator::NotEquals,
            Tok::Gt => LabelOperator::GreaterThan,
            Tok::Lt => LabelOperator::LessThan,
            Tok::Ident("in") => LabelOperator::In,
            Tok::Ident("notin") => LabelOperator::NotIn,
            t => {
                return Err(Self::err(
                    t,
                    pos,
                    "'=', '==', '!=', 'in', 'notin', '>', '<', ',' or end of string",
                ))
            }
        };
        self.next();
        match op {
            LabelOperator::In | LabelOperator::NotIn => {
                let values = self.value_list(key)?;
                Ok(req(op, values, 0))
            }
            LabelOperator::GreaterThan | LabelOperator::LessThan => {
                let value = self.single_value()?;
                let number = value
                    .parse::<i64>()
                    .map_err(|_| SelectorError::NotAnInteger {
                        key: key.to_string(),
                        value: value.to_string(),
                    })?;
                Ok(req(op, vec![number.to_string()], number))
            }
            _ => {
                let value = self.single_value()?;
                validate_label_value(key, value)?;
                Ok(req(op, vec![value.to_string()], 0))
            }
        }
    }

    /// The operand of `=`, `==`, `!=`, `>`, `<`: one identifier, or nothing (the empty value)
    /// when a `,` or the end follows.
    fn single_value(&mut self) -> Result<&'a str, SelectorError> {
        match self.peek() {
            (Tok::End | Tok::Comma, _) => Ok(""),
            (Tok::Ident(v), _) => {
                self.next();
                Ok(v)
            }
            (t, p) => Err(Self::err(t, p, "a label value")),
        }
    }

    /// `( v, v, ... )` after `in`/`notin`; values may be empty (`(a,)` holds "a" and "").
    fn value_list(&mut self, key: &str) -> Result<Vec<String>, SelectorError> {
        match self.next() {
            (Tok::Open, _) => {}
            (t, p) => return Err(Self::err(t, p, "'('")),
        }
        if let (Tok::Close, _) = self.peek() {
            self.next();
            return Err(SelectorError::EmptyValueSet {
                key: key.to_string(),
            });
        }
        let mut values = Vec::new();
        loop {
            let value = match self.peek() {
                (Tok::Ident(v), _) => {
                    self.next();
                    v
                }
                (Tok::Comma | Tok::Close, _) => "",
                (t, p) => return Err(Self::err(t, p, "a label value, ',' or ')'")),
            };
            validate_label_value(key, value)?;
            values.push(value.to_string());
            match self.next() {
                (Tok::Comma, _) => {}
                (Tok::Close, _) => break,
                (t, p) => return Err(Self::err(t, p, "',' or ')'")),
            }
        }
        values.sort();
        values.dedup();
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap()
    }

    #[test]
    fn empty_selects_everything() {
        for s in ["", "   ", "\t\n"] {
            let e = sel(s);
            assert!(e.is_empty());
            assert_eq!(e, LabelSelector::everything());
            assert!(e.matches(&labels(&[])));
            assert!(e.matches(&labels(&[("a", "b")])));
            assert_eq!(e.to_string(), "");
        }
    }

    #[test]
    fn equality_operators() {
        let l = labels(&[("a", "b")]);
        assert!(sel("a=b").matches(&l));
        assert!(sel("a==b").matches(&l));
        assert!(!sel("a=c").matches(&l));
        assert!(!sel("x=b").matches(&l));
        assert!(!sel("a!=b").matches(&l));
        assert!(sel("a!=c").matches(&l));
        // `!=` matches when the key is absent.
        assert!(sel("x!=b").matches(&l));
        assert_eq!(sel("a==b").to_string(), "a=b");
    }

    #[test]
    fn empty_values() {
        let l = labels(&[("a", "")]);
        assert!(sel("a=").matches(&l));
        assert!(sel("a=,b!=").matches(&l));
        assert!(!sel("a=").matches(&labels(&[])));
        assert!(sel("a in (,x)").matches(&l));
        assert!(sel("a in (x,)").matches(&l));
        assert_eq!(sel("a in (x,)").requirements()[0].values(), &["", "x"]);
        assert_eq!(sel("a=").to_string(), "a=");
        // A set holding only the empty value is written so that it parses back.
        let only_empty = sel("a in (,)");
        assert_eq!(only_empty.requirements()[0].values(), &[""]);
        assert_eq!(only_empty.to_string(), "a in (,)");
        assert_eq!(sel(&only_empty.to_string()), only_empty);
    }

    #[test]
    fn set_operators() {
        let l = labels(&[("env", "prod")]);
        assert!(sel("env in (prod,dev)").matches(&l));
        assert!(sel("env in(prod)").matches(&l));
        assert!(!sel("env in (dev)").matches(&l));
        assert!(!sel("env notin (prod)").matches(&l));
        assert!(sel("env notin (dev,qa)").matches(&l));
        // `notin` matches when the key is absent, `in` does not.
        assert!(sel("x notin (a)").matches(&l));
        assert!(!sel("x in (a)").matches(&l));
        assert_eq!(sel("env in ( qa , dev,qa )").to_string(), "env in (dev,qa)");
    }

    #[test]
    fn existence() {
        let l = labels(&[("a", "1")]);
        assert!(sel("a").matches(&l));
        assert!(!sel("b").matches(&l));
        assert!(sel("!b").matches(&l));
        assert!(!sel("!a").matches(&l));
        assert!(sel(" ! b ").matches(&l));
        assert_eq!(sel("!b,a").to_string(), "a,!b");
    }

    #[test]
    fn numeric_comparisons() {
        let l = labels(&[("n", "5"), ("s", "x")]);
        assert!(sel("n>4").matches(&l));
        assert!(!sel("n>5").matches(&l));
        assert!(sel("n<6").matches(&l));
        assert!(sel("n>-1").matches(&l));
        assert!(!sel("s>1").matches(&l));
        assert!(!sel("m<1").matches(&l));
        assert!(matches!(
            LabelSelector::parse("n>abc"),
            Err(SelectorError::NotAnInteger { .. })
        ));
        assert!(LabelSelector::parse("n>").is_err());
    }

    #[test]
    fn comma_is_and_and_whitespace_is_tolerated() {
        let s = sel("  a = b ,  c in ( d , e ) , ! f ,g  ");
        assert_eq!(s.requirements().len(), 4);
        assert_eq!(s.to_string(), "a=b,c in (d,e),!f,g");
        assert!(s.matches(&labels(&[("a", "b"), ("c", "e"), ("g", "")])));
        assert!(!s.matches(&labels(&[("a", "b"), ("c", "e")])));
        assert!(!s.matches(&labels(&[("a", "b"), ("c", "e"), ("g", ""), ("f", "1")])));
    }

    #[test]
    fn prefixed_keys() {
        let s = sel("app.kubernetes.io/name=web");
        assert!(s.matches(&labels(&[("app.kubernetes.io/name", "web")])));
        assert_eq!(s.requires_exact("app.kubernetes.io/name"), Some("web"));
        for bad in [
            "/name=x",
            "Example.com/name=x",
            "a/b/c=x",
            "a..b/name=x",
            "-a.com/name=x",
            "a.com/=x",
        ] {
            assert!(
                matches!(
                    LabelSelector::parse(bad),
                    Err(SelectorError::InvalidKey { .. })
                ),
                "{bad}"
            );
        }
        let long_prefix = format!("{}/n", ["a"; 128].join("."));
        assert_eq!(long_prefix.len(), 257);
        assert!(LabelSelector::parse(&long_prefix).is_err());
        let ok_prefix = format!("{}/n", ["a"; 127].join("."));
        assert_eq!(ok_prefix.len(), 255);
        assert!(LabelSelector::parse(&ok_prefix).is_ok());
    }

    #[test]
    fn key_and_value_rules() {
        let name63 = "a".repeat(63);
        assert!(LabelSelector::parse(&name63).is_ok());
        assert!(matches!(
            LabelSelector::parse(&"a".repeat(64)),
            Err(SelectorError::InvalidKey { .. })
        ));
        assert!(LabelSelector::parse(&format!("k={name63}")).is_ok());
        for bad in ["k=-a", "k=a-", "k=a/b", "k=é", "k in (ok,_x)"] {
            assert!(
                matches!(
                    LabelSelector::parse(bad),
                    Err(SelectorError::InvalidValue { .. })
                ),
                "{bad}"
            );
        }
        assert!(LabelSelector::parse(&format!("k={}", "a".repeat(64))).is_err());
        assert!(LabelSelector::parse("k=A_b.c-9").is_ok());
        assert!(LabelSelector::parse("_k").is_err());
    }

    #[test]
    fn syntax_errors_say_what_and_where() {
        let e = LabelSelector::parse("a in x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unable to parse requirement: found 'x', expected: '(' (at byte 5)"
        );
        let e = LabelSelector::parse("(a)").unwrap_err();
        assert!(e.to_string().contains("found '('"), "{e}");
        let e = LabelSelector::parse("a=b c").unwrap_err();
        assert!(
            e.to_string()
                .contains("found 'c', expected: ',' or end of string"),
            "{e}"
        );
        for bad in [
            ",",
            "a,",
            ",a",
            "a,,b",
            "!",
            "!a=b",
            "a b",
            "a in (b",
            "a in (b c)",
            "a in ()",
            "a=(b)",
            "a=b=c",
            "a notin",
            "a==",
            "a!",
            "a in ((b))",
        ] {
            if bad == "a==" {
                // `a==` is `a` equal to the empty value.
                assert!(LabelSelector::parse(bad).is_ok());
                continue;
            }
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} should fail");
        }
        assert!(matches!(
            LabelSelector::parse("a in ()"),
            Err(SelectorError::EmptyValueSet { .. })
        ));
    }

    #[test]
    fn keywords_as_keys_and_values() {
        // `in`/`notin` are keywords only in operator position.
        let s = sel("in in (in,notin),notin");
        assert!(s.matches(&labels(&[("in", "notin"), ("notin", "")])));
        assert_eq!(s.to_string(), "in in (in,notin),notin");
        assert_eq!(sel(&s.to_string()), s);
        assert!(sel("a=in").matches(&labels(&[("a", "in")])));
    }

    #[test]
    fn label_selector_objects() {
        use serde_json::json;
        let web = labels(&[("app", "web"), ("tier", "front")]);
        let from = |v| LabelSelector::from_object(&v);
        assert_eq!(from(json!(null)), Ok(None));
        assert!(from(json!({})).unwrap().unwrap().matches(&web));
        let s = from(json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]},
                                 {"key": "canary", "operator": "DoesNotExist"}]}))
        .unwrap()
        .unwrap();
        assert!(s.matches(&web));
        assert_eq!(s.to_string(), "app=web,!canary,tier in (back,front)");
        assert!(!from(json!({"matchLabels": {"app": "db"}}))
            .unwrap()
            .unwrap()
            .matches(&web));
        for bad in [
            json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
            json!({"matchLabels": {"bad key": "x"}}),
            json!("app=web"),
        ] {
            assert!(from(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn requires_exact() {
        let s = sel("a=1,b in (2),c in (3,4),d!=5,e");
        assert_eq!(s.requires_exact("a"), Some("1"));
        assert_eq!(s.requires_exact("b"), Some("2"));
        assert_eq!(s.requires_exact("c"), None);
        assert_eq!(s.requires_exact("d"), None);
        assert_eq!(s.requires_exact("e"), None);
        assert_eq!(s.requires_exact("zz"), None);
    }

    #[test]
    fn json_and_hash_maps() {
        let v = serde_json::json!({"a": "b", "n": 3});
        let m = v.as_object().unwrap();
        assert!(sel("a=b").matches(m));
        // Non-string values count as absent.
        assert!(!sel("n").matches(m));
        assert!(sel("n!=3").matches(m));
        let h: HashMap<String, String> = [("a".to_string(), "b".to_string())].into();
        assert!(sel("a in (b)").matches(&h));
    }

    #[test]
    fn errors_become_bad_request() {
        let st: Status = LabelSelector::parse("a in").unwrap_err().into();
        assert_eq!(st.code(), 400);
        assert!(st.message.contains("expected: '('"), "{}", st.message);
    }

    fn name_part() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9]([a-zA-Z0-9._-]{0,10}[a-zA-Z0-9])?"
    }

    fn key() -> impl Strategy<Value = String> {
        (
            proptest::option::of("[a-z0-9]([a-z0-9-]{0,5}[a-z0-9])?(\\.[a-z0-9]{1,4}){0,2}"),
            name_part(),
        )
            .prop_map(|(p, n)| match p {
                Some(p) => format!("{p}/{n}"),
                None => n,
            })
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), name_part()]
    }

    fn requirement() -> impl Strategy<Value = String> {
        let ws = || "[ \t]{0,2}";
        (
            key(),
            0..8usize,
            proptest::collection::vec(value(), 1..4),
            any::<i64>(),
            ws(),
            ws(),
        )
            .prop_map(|(k, op, mut vals, n, w1, w2)| {
                if vals.iter().all(String::is_empty) {
                    // `()` is an empty set (an error); a set of only "" is written `(,)`.
                    vals = vec![String::new(), String::new()];
                }
                match op {
                    0 => format!("{w1}{k}{w2}"),
                    1 => format!("{w1}!{w2}{k}"),
                    2 => format!("{k}{w1}={w2}{}", vals[0]),
                    3 => format!("{k}{w1}=={w2}{}", vals[0]),
                    4 => format!("{k}{w1}!={w2}{}", vals[0]),
                    5 => format!("{k} in{w1}({w2}{})", vals.join(",")),
                    6 => format!("{k} notin ({}){w2}", vals.join(&format!("{w1},"))),
                    _ => format!("{k}{w1}{}{w2}{n}", if n % 2 == 0 { ">" } else { "<" }),
                }
            })
    }

    proptest! {
        #[test]
        fn generated_selectors_round_trip(reqs in proptest::collection::vec(requirement(), 0..5)) {
            let text = reqs.join(",");
            let parsed = LabelSelector::parse(&text).unwrap();
            prop_assert_eq!(parsed.requirements().len(), reqs.len());
            let shown = parsed.to_string();
            let reparsed = LabelSelector::parse(&shown).unwrap();
            prop_assert_eq!(&reparsed, &parsed);
            prop_assert_eq!(reparsed.to_string(), shown);
        }

        #[test]
        fn parse_never_panics(s in any::<String>()) {
            let _ = LabelSelector::parse(&s);
        }

        #[test]
        fn parse_never_panics_on_selector_alphabet(s in "[a-z0-9=!(), ._/<>-]{0,30}") {
            if let Ok(sel) = LabelSelector::parse(&s) {
                prop_assert_eq!(LabelSelector::parse(&sel.to_string()).unwrap(), sel);
            }
        }

        #[test]
        fn equality_matches_exactly_its_value(k in key(), v in value(), other in value()) {
            let s = LabelSelector::parse(&format!("{k}={v}")).unwrap();
            let mut l = BTreeMap::new();
            l.insert(k.clone(), other.clone());
            prop_assert_eq!(s.matches(&l), v == other);
            let n = LabelSelector::parse(&format!("{k}!={v}")).unwrap();
            prop_assert_eq!(n.matches(&l), v != other);
        }
    }
}
