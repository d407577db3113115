//! [`Selection`]: which objects of a resource a list or a watch is about, as a label
//! selector and a field selector in the syntax the API server parses.
//!
//! One value carries the selection everywhere it travels: a request's parameters
//! ([`ListParams`](super::ListParams), [`WatchParams`](super::WatchParams)), a lister-watcher
//! ([`RestListerWatcher`](crate::cache::RestListerWatcher)), and what an informer factory
//! hands out ([`ListWatchOptions`](crate::cache::ListWatchOptions)). A list and the watch
//! that follows it must send the same selection, or a cache would hold objects the watch
//! never reports on; one value copied whole into both requests makes that the default.

/// A label selector and a field selector, both in the wire syntax (`app=web,tier!=db`,
/// `spec.nodeName=n1,status.phase!=Failed`); an object is selected when it matches both.
///
/// Contract:
/// - `None` and `Some("")` mean the same thing: no selector of that kind, every object
///   matches it, and no query parameter is sent for it. The setters store an empty
///   selector as `None`, so selections built through them compare equal when they send the
///   same query.
/// - The strings are not parsed or validated here; the server parses them and answers an
///   invalid one with 400 Bad Request.
/// - Requirements joined by a top-level comma are ANDed in both syntaxes, which is what
///   [`and_labels`](Self::and_labels) and [`and_fields`](Self::and_fields) rely on.
///
/// `Default` (the same as [`Selection::everything`]) selects every object.
///
/// ```
/// use client::rest::{ListParams, Selection};
///
/// let unfinished = Selection::default()
///     .labels("app=web")
///     .fields("status.phase!=Succeeded")
///     .and_fields("status.phase!=Failed");
/// assert_eq!(
///     unfinished.fields.as_deref(),
///     Some("status.phase!=Succeeded,status.phase!=Failed")
/// );
/// assert!(!unfinished.is_everything());
/// let query = ListParams::default().selection(unfinished).to_query();
/// assert!(query.starts_with("labelSelector=app%3Dweb&fieldSelector=status.phase"));
/// assert!(Selection::default().labels("").is_everything());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[must_use]
pub struct Selection {
    /// The label selector (`labelSelector`), e.g. `app=web,tier!=db`; `None` or `""` = no
    /// label selector.
    pub labels: Option<String>,
    /// The field selector (`fieldSelector`), e.g. `spec.nodeName=n1`; `None` or `""` = no
    /// field selector.
    pub fields: Option<String>,
}

/// `Some(selector)`, or `None` for the empty selector.
fn non_empty(selector: String) -> Option<String> {
    Some(selector).filter(|s| !s.is_empty())
}

/// `theirs` ANDed with `ours`: joined by a comma when both are non-empty, else whichever is.
fn and(theirs: Option<String>, ours: &str) -> Option<String> {
    match theirs {
        Some(mut theirs) if !theirs.is_empty() => {
            if !ours.is_empty() {
                theirs.push(',');
                theirs.push_str(ours);
            }
            Some(theirs)
        }
        _ => non_empty(ours.to_string()),
    }
}

impl Selection {
    /// The selection of every object: no label selector, no field selector.
    pub const fn everything() -> Selection {
        Selection {
            labels: None,
            fields: None,
        }
    }

    /// Sets the label selector, replacing any the selection had (`""` removes it).
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.labels = non_empty(selector.into());
        self
    }

    /// Sets the field selector, replacing any the selection had (`""` removes it).
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.fields = non_empty(selector.into());
        self
    }

    /// ANDs `selector` onto the label selector: appended after a comma to a non-empty one,
    /// else set as it is. An empty `selector` changes nothing.
    pub fn and_labels(mut self, selector: &str) -> Self {
        self.labels = and(self.labels.take(), selector);
        self
    }

    /// ANDs `selector` onto the field selector: appended after a comma to a non-empty one
    /// (e.g. a factory's own selector plus a component's), else set as it is. An empty
    /// `selector` changes nothing.
    pub fn and_fields(mut self, selector: &str) -> Self {
        self.fields = and(self.fields.take(), selector);
        self
    }

    /// Whether this selection selects every object: neither selector is set to a non-empty
    /// string, so a request carrying it sends no selector parameter.
    pub fn is_everything(&self) -> bool {
        self.label_selector().is_none() && self.field_selector().is_none()
    }

    /// The label selector as sent: `None` when absent or empty.
    fn label_selector(&self) -> Option<&str> {
        self.labels.as_deref().filter(|s| !s.is_empty())
    }

    /// The field selector as sent: `None` when absent or empty.
    fn field_selector(&self) -> Option<&str> {
        self.fields.as_deref().filter(|s| !s.is_empty())
    }

    /// Appends `labelSelector` and then `fieldSelector` to `query`, each only when its
    /// selector is non-empty.
    pub(crate) fn append_to_query(&self, query: &mut form_urlencoded::Serializer<'_, String>) {
        if let Some(labels) = self.label_selector() {
            query.append_pair("labelSelector", labels);
        }
        if let Some(fields) = self.field_selector() {
            query.append_pair("fieldSelector", fields);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::fields::FieldSelector;
    use api::labels::LabelSelector;
    use api::list_options::ListOptions;
    use proptest::prelude::*;

    fn query(selection: &Selection) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        selection.append_to_query(&mut q);
        q.finish()
    }

    #[test]
    fn setters_replace_and_empty_means_none() {
        let s = Selection::default().labels("a=b").labels("c=d");
        assert_eq!(s.labels.as_deref(), Some("c=d"));
        let s = s.labels("").fields("");
        assert_eq!(s, Selection::everything());
        assert_eq!(Selection::everything(), Selection::default());
        // Set directly, an empty string still selects everything and sends nothing.
        let direct = Selection {
            labels: Some(String::new()),
            fields: Some(String::new()),
        };
        assert!(direct.is_everything());
        assert_eq!(query(&direct), "");
        assert!(!Selection::default()
            .fields("spec.nodeName=n1")
            .is_everything());
    }

    #[test]
    fn and_joins_with_a_comma_and_ignores_empty_sides() {
        let s = Selection::default().and_fields("a=1");
        assert_eq!(s.fields.as_deref(), Some("a=1"));
        let s = s.and_fields("b!=2").and_fields("");
        assert_eq!(s.fields.as_deref(), Some("a=1,b!=2"));
        let s = Selection {
            labels: Some(String::new()),
            fields: None,
        }
        .and_labels("app in (a,b)")
        .and_labels("tier");
        assert_eq!(s.labels.as_deref(), Some("app in (a,b),tier"));
        assert_eq!(Selection::default().and_labels(""), Selection::default());
    }

    #[test]
    fn query_order_and_encoding() {
        let s = Selection::default()
            .fields("spec.nodeName=n1")
            .labels("app in (a,b),tier!=db");
        assert_eq!(
            query(&s),
            "labelSelector=app+in+%28a%2Cb%29%2Ctier%21%3Ddb&fieldSelector=spec.nodeName%3Dn1"
        );
        assert_eq!(query(&Selection::default()), "");
    }

    /// One `key=value` requirement, valid in both syntaxes.
    fn requirement() -> impl Strategy<Value = String> {
        (
            "[a-z]{1,6}(\\.[a-z]{1,6})?",
            "[a-z0-9]{0,6}",
            prop::bool::ANY,
        )
            .prop_map(|(key, value, negated)| {
                format!("{key}{}{value}", if negated { "!=" } else { "=" })
            })
    }

    proptest! {
        /// ANDing requirements one by one sends what the server parses as the AND of all of
        /// them, and a selection without requirements sends nothing.
        #[test]
        fn anded_requirements_reach_the_server_as_one_selector(
            labels in prop::collection::vec(requirement(), 0..4),
            fields in prop::collection::vec(requirement(), 0..4),
            start_empty in prop::bool::ANY,
        ) {
            let start = if start_empty {
                Selection { labels: Some(String::new()), fields: Some(String::new()) }
            } else {
                Selection::default()
            };
            let s = labels.iter().fold(start, |s, r| s.and_labels(r));
            let s = fields.iter().fold(s, |s, r| s.and_fields(r));
            prop_assert_eq!(s.is_everything(), labels.is_empty() && fields.is_empty());
            prop_assert_eq!(s.label_selector().is_some(), !labels.is_empty());
            prop_assert_eq!(s.field_selector().is_some(), !fields.is_empty());

            let q = query(&s);
            prop_assert_eq!(q.contains("labelSelector="), !labels.is_empty());
            prop_assert_eq!(q.contains("fieldSelector="), !fields.is_empty());
            let parsed = ListOptions::from_query(&q).unwrap();
            prop_assert_eq!(
                parsed.label_selector,
                LabelSelector::parse(&labels.join(",")).unwrap()
            );
            prop_assert_eq!(
                parsed.field_selector,
                FieldSelector::parse(&fields.join(",")).unwrap()
            );
        }

        /// ANDing is associative on the wire: two requirements one by one equal the two
        /// already joined.
        #[test]
        fn and_twice_equals_and_of_the_joined(a in requirement(), b in requirement()) {
            let base = Selection::default().fields("x=1");
            prop_assert_eq!(
                base.clone().and_fields(&a).and_fields(&b),
                base.and_fields(&format!("{a},{b}"))
            );
        }
    }
}
