//! The two Event APIs over one object: `events.k8s.io/v1` Events and core `v1` Events are
//! the same stored object (kept in the core form, as Kubernetes keeps them), read and written
//! through either API with the fields renamed.
//!
//! | core `v1`            | `events.k8s.io/v1`         |
//! |----------------------|----------------------------|
//! | `involvedObject`     | `regarding`                |
//! | `message`            | `note`                     |
//! | `reportingComponent` | `reportingController`      |
//! | `source`             | `deprecatedSource`         |
//! | `firstTimestamp`     | `deprecatedFirstTimestamp` |
//! | `lastTimestamp`      | `deprecatedLastTimestamp`  |
//! | `count`              | `deprecatedCount`          |
//!
//! Everything else (`metadata`, `eventTime`, `series`, `reportingInstance`, `action`,
//! `reason`, `related`, `type`) has the same name in both.

use serde_json::{Map, Value};

/// (core name, events.k8s.io name) of every renamed field.
const RENAMED: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// The API version of the events.k8s.io form.
pub const EVENTS_V1: &str = "events.k8s.io/v1";

/// Rewrites a core `v1` Event into its `events.k8s.io/v1` form, in place.
pub fn core_to_events_v1(obj: &mut Map<String, Value>) {
    rename(obj, |(core, new)| (core, new));
    obj.insert("apiVersion".into(), Value::String(EVENTS_V1.into()));
}

/// Rewrites an `events.k8s.io/v1` Event into the core `v1` form it is stored in, in place.
pub fn events_v1_to_core(obj: &mut Map<String, Value>) {
    rename(obj, |(core, new)| (new, core));
    obj.insert("apiVersion".into(), Value::String("v1".into()));
}

/// Moves each renamed field from its `from` name to its `to` name, as `pick` orders the pair.
/// A field already present under the target name is replaced: an object carries one form.
fn rename(
    obj: &mut Map<String, Value>,
    pick: impl Fn((&'static str, &'static str)) -> (&'static str, &'static str),
) {
    for &pair in RENAMED {
        let (from, to) = pick(pair);
        match obj.remove(from) {
            Some(v) => {
                obj.insert(to.into(), v);
            }
            None => {
                obj.remove(to);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn fields_are_renamed_both_ways_and_round_trip() {
        let core = map(json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "message": "pulled", "reason": "Pulled", "type": "Normal",
            "source": {"component": "kubelet"}, "reportingComponent": "kubelet",
            "reportingInstance": "n1", "firstTimestamp": "2024-01-01T00:00:00Z",
            "lastTimestamp": "2024-01-01T00:00:05Z", "count": 2,
            "eventTime": null, "action": "Pull",
        }));
        let mut new = core.clone();
        core_to_events_v1(&mut new);
        assert_eq!(
            Value::Object(new.clone()),
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "e", "namespace": "default"},
                "regarding": {"kind": "Pod", "name": "p"},
                "note": "pulled", "reason": "Pulled", "type": "Normal",
                "deprecatedSource": {"component": "kubelet"}, "reportingController": "kubelet",
                "reportingInstance": "n1", "deprecatedFirstTimestamp": "2024-01-01T00:00:00Z",
                "deprecatedLastTimestamp": "2024-01-01T00:00:05Z", "deprecatedCount": 2,
                "eventTime": null, "action": "Pull",
            })
        );
        events_v1_to_core(&mut new);
        assert_eq!(new, core);
    }
}
