//! Indexed completion mode: each pod of a Job with `completionMode: Indexed` carries a
//! completion index in `[0, completions)`, and the Job is complete when every index has a
//! succeeded pod. The indexes that succeeded are kept in `status.completedIndexes` as a
//! compact list of intervals (`"1,3-5,7"`).

use super::JOB_COMPLETION_INDEX_ANNOTATION;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeSet;

/// The completion index a pod's annotation gives it, if any valid one.
pub(crate) fn completion_index(pod: &Pod) -> Option<i32> {
    let value = pod
        .metadata
        .annotations
        .as_ref()?
        .get(JOB_COMPLETION_INDEX_ANNOTATION)?;
    // Kubernetes accepts only a plain decimal number (no sign, no padding beyond "0").
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if value.len() > 1 && value.starts_with('0') {
        return None;
    }
    value.parse::<i32>().ok()
}

/// Parses `status.completedIndexes` (`"1,3-5"`), keeping only indexes below `completions`.
/// Malformed parts are skipped.
pub(crate) fn parse_indexes(s: &str, completions: i32) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<i32>(), b.parse::<i32>()),
            None => (part.parse::<i32>(), part.parse::<i32>()),
        };
        let (Ok(first), Ok(last)) = (first, last) else {
            continue;
        };
        if first < 0 || last < first {
            continue;
        }
        for ix in first..=last.min(completions.saturating_sub(1)) {
            out.insert(ix);
        }
    }
    out
}

/// Formats indexes as `status.completedIndexes` does: ascending, runs of consecutive
/// indexes as `a-b` (a run of two written as two single indexes, `a,b`).
pub(crate) fn format_indexes(indexes: &BTreeSet<i32>) -> String {
    let mut parts = Vec::new();
    let mut iter = indexes.iter().copied().peekable();
    while let Some(first) = iter.next() {
        let mut last = first;
        while iter.peek() == Some(&(last + 1)) {
            last += 1;
            iter.next();
        }
        match last - first {
            0 => parts.push(first.to_string()),
            1 => {
                parts.push(first.to_string());
                parts.push(last.to_string());
            }
            _ => parts.push(format!("{first}-{last}")),
        }
    }
    parts.join(",")
}

/// The first `count` indexes in `[0, completions)` that neither succeeded nor have an
/// active pod.
pub(crate) fn first_pending_indexes(
    succeeded: &BTreeSet<i32>,
    active: &BTreeSet<i32>,
    count: usize,
    completions: i32,
) -> Vec<i32> {
    (0..completions.max(0))
        .filter(|ix| !succeeded.contains(ix) && !active.contains(ix))
        .take(count)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use proptest::prelude::*;

    fn annotated(v: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                annotations: Some([(JOB_COMPLETION_INDEX_ANNOTATION.into(), v.into())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn indexes_come_from_the_annotation() {
        assert_eq!(completion_index(&annotated("3")), Some(3));
        assert_eq!(completion_index(&annotated("0")), Some(0));
        for bad in ["", "-1", "03", "x", "1.0", "99999999999"] {
            assert_eq!(completion_index(&annotated(bad)), None, "{bad:?}");
        }
        assert_eq!(completion_index(&Pod::default()), None);
    }

    #[test]
    fn completed_indexes_round_trip_in_kubernetes_format() {
        let set: BTreeSet<i32> = [0, 1, 3, 4, 5, 7].into();
        assert_eq!(format_indexes(&set), "0,1,3-5,7");
        assert_eq!(parse_indexes("0,1,3-5,7", 10), set);
        assert_eq!(parse_indexes("0,1,3-5,7", 4), [0, 1, 3].into());
        assert_eq!(format_indexes(&BTreeSet::new()), "");
        assert_eq!(parse_indexes("x,2,5-3", 10), [2].into());
        assert_eq!(
            first_pending_indexes(&[0, 2].into(), &[1].into(), 2, 6),
            vec![3, 4]
        );
    }

    proptest! {
        #[test]
        fn any_set_of_indexes_round_trips(v in proptest::collection::btree_set(0i32..200, 0..60)) {
            let s = format_indexes(&v);
            prop_assert_eq!(parse_indexes(&s, 200), v);
        }
    }
}
