//! Which names each CRD gets: a CRD's requested names are accepted unless another definition
//! of the same group already holds one of them (its plural, singular, a short name, its kind
//! or list kind). The decision is made for every CRD at once, oldest first, so every API
//! server over one store reaches the same one.

use super::crd::{Crd, Names};
use std::borrow::Borrow;
use std::collections::HashSet;

/// The naming decision for one CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The names to publish in `status.acceptedNames` (the requested ones when accepted,
    /// else those accepted before, possibly none).
    pub accepted: Option<Names>,
    /// Whether the requested names were all accepted.
    pub names_accepted: bool,
    /// The `NamesAccepted` condition's reason: `NoConflicts`, `PluralConflict`,
    /// `SingularConflict`, `ShortNamesConflict`, `KindConflict` or `ListKindConflict`.
    pub reason: &'static str,
    /// The condition's message.
    pub message: String,
}

/// Decides the names of every CRD in `crds`, in their order (callers sort oldest first).
pub fn decide<C: Borrow<Crd>>(crds: &[C]) -> Vec<Decision> {
    let crds: Vec<&Crd> = crds.iter().map(Borrow::borrow).collect();
    let mut decided: Vec<Option<Names>> = crds.iter().map(|c| c.accepted_names()).collect();
    let mut out = Vec::with_capacity(crds.len());
    for (i, crd) in crds.iter().enumerate() {
        let others: Vec<&Names> = crds
            .iter()
            .zip(decided.iter())
            .enumerate()
            .filter(|(j, (c, _))| *j != i && c.group == crd.group)
            .filter_map(|(_, (_, n))| n.as_ref())
            .collect();
        let held = |f: fn(&Names) -> Vec<&str>| -> HashSet<String> {
            others
                .iter()
                .flat_map(|n| f(n))
                .map(str::to_string)
                .collect()
        };
        let resource_names = held(resource_names_of);
        let kind_names = held(kind_names_of);
        let want = &crd.names;
        let conflict = if resource_names.contains(&want.plural) {
            Some((
                "PluralConflict",
                format!("{:?} is already in use", want.plural),
            ))
        } else if resource_names.contains(&want.singular) {
            Some((
                "SingularConflict",
                format!("{:?} is already in use", want.singular),
            ))
        } else if let Some(s) = want
            .short_names
            .iter()
            .find(|s| resource_names.contains(*s))
        {
            Some(("ShortNamesConflict", format!("{s:?} is already in use")))
        } else if kind_names.contains(&want.kind) {
            Some(("KindConflict", format!("{:?} is already in use", want.kind)))
        } else if kind_names.contains(&want.list_kind) {
            Some((
                "ListKindConflict",
                format!("{:?} is already in use", want.list_kind),
            ))
        } else {
            None
        };
        let decision = match conflict {
            None => Decision {
                accepted: Some(want.clone()),
                names_accepted: true,
                reason: "NoConflicts",
                message: "no conflicts found".to_string(),
            },
            Some((reason, message)) => Decision {
                accepted: decided[i].clone(),
                names_accepted: false,
                reason,
                message,
            },
        };
        decided[i] = decision.accepted.clone();
        out.push(decision);
    }
    out
}

fn resource_names_of(n: &Names) -> Vec<&str> {
    let mut v = vec![n.plural.as_str(), n.singular.as_str()];
    v.extend(n.short_names.iter().map(String::as_str));
    v
}

fn kind_names_of(n: &Names) -> Vec<&str> {
    vec![n.kind.as_str(), n.list_kind.as_str()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(plural: &str, kind: &str, short: &[&str], accepted: bool) -> Crd {
        let names = json!({"plural": plural, "kind": kind, "shortNames": short});
        let mut v = json!({
            "metadata": {"name": format!("{plural}.example.com")},
            "spec": {"group": "example.com", "scope": "Namespaced", "names": names.clone(),
                     "versions": [{"name": "v1", "served": true, "storage": true}]}
        });
        if accepted {
            v["status"] = json!({"acceptedNames": names});
        }
        Crd::from_value(&v).unwrap()
    }

    #[test]
    fn the_first_holder_keeps_a_name_and_the_second_is_told_why() {
        let decisions = decide(&[
            crd("widgets", "Widget", &["w"], true),
            crd("gadgets", "Gadget", &["w"], false),
            crd("things", "Widget", &[], false),
            crd("bolts", "Bolt", &["b"], false),
        ]);
        assert!(decisions[0].names_accepted);
        assert_eq!(decisions[1].reason, "ShortNamesConflict");
        assert_eq!(decisions[1].message, "\"w\" is already in use");
        assert_eq!(decisions[1].accepted, None);
        // Its singular defaults to the lower-cased kind, which is taken first.
        assert_eq!(decisions[2].reason, "SingularConflict");
        assert!(decisions[3].names_accepted);
        assert_eq!(
            decisions[3].accepted.as_ref().unwrap().list_kind,
            "BoltList"
        );
    }

    #[test]
    fn new_crds_decided_together_do_not_both_take_a_name() {
        let d = decide(&[
            crd("widgets", "Widget", &[], false),
            crd("others", "Widget", &[], false),
        ]);
        assert!(d[0].names_accepted);
        assert!(!d[1].names_accepted);
    }
}
