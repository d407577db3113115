//! Server-side apply: field ownership (`managedFields`) and conflicts.
//!
//! Input framing: `flags live \0 config`. `flags` is one byte: bit 0 force, bit 1 the status
//! subresource, bit 2 the kind has a status, bits 3–4 which of four field managers applies.
//! `live` is the stored object (`{}`-less or empty input: none, the apply creates it) and
//! `config` the applied configuration, both JSON objects.

use crate::input::split_nul;
use api::managed_fields::apply::apply;
use api::managed_fields::{entries_of, validate_entries, Operation, Writer};
use api::patch::PatchKindHint;
use serde_json::{Map, Value};

const MANAGERS: [&str; 4] = [
    "kubectl",
    "kube-controller-manager",
    "helm",
    "before-first-apply",
];

/// Applies `config` over `live` as field manager N, as the server's apply handler does after
/// its own checks (so `config` carries no `managedFields`, both have object `metadata` if
/// any, and a live object's own `managedFields` are well-formed, as the server only stores
/// such). On success the result's
/// `managedFields` must be well-formed and hold the applier's `Apply` entry when the config
/// sets any field; applying the same config again, without force, must find no conflicts.
pub fn server_side_apply(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (live, config) = match split_nul(rest) {
        (live, Some(config)) => (Some(live), config),
        (config, None) => (None, config),
    };
    let live: Option<Map<String, Value>> = match live {
        Some(b) if !b.is_empty() => match serde_json::from_slice(b) {
            Ok(m) => Some(m),
            Err(_) => return,
        },
        _ => None,
    };
    if let Some(mf) = live.as_ref().and_then(managed_fields) {
        if validate_entries(mf).is_err() {
            return;
        }
    }
    let Ok(mut config) = serde_json::from_slice::<Map<String, Value>>(config) else {
        return;
    };
    // The server answers 400 to an object whose metadata is not an object, before apply
    // runs, and stores none (found by this target: with such a config, apply has nowhere to
    // record the applier's fields).
    let bad_metadata = |o: &Map<String, Value>| o.get("metadata").is_some_and(|m| !m.is_object());
    if bad_metadata(&config) || live.as_ref().is_some_and(bad_metadata) {
        return;
    }
    if let Some(Value::Object(meta)) = config.get_mut("metadata") {
        meta.remove("managedFields");
    }
    let api_version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("v1")
        .to_string();
    let kind = config
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let writer = Writer {
        manager: MANAGERS[usize::from(flags >> 3) & 3],
        api_version: &api_version,
        kind: PatchKindHint::new(group, &kind),
        lists: None,
        status_only: flags & 2 != 0,
        has_status: flags & 4 != 0,
        now: "2026-01-01T00:00:00Z",
    };
    let force = flags & 1 != 0;
    let Ok(out) = apply(live.as_ref(), &config, &writer, force) else {
        return;
    };
    if let Some(mf) = managed_fields(&out) {
        validate_entries(mf).unwrap_or_else(|e| panic!("apply wrote bad managedFields: {e}"));
    }
    if !writer.fields_of(&config).is_empty() {
        assert!(
            entries_of(&out)
                .iter()
                .any(|e| e.manager == writer.manager && e.operation == Operation::Apply),
            "the applier has no Apply entry after applying fields"
        );
    }
    if let Err(conflicts) = apply(Some(&out), &config, &writer, false) {
        panic!("applying the same config again conflicts: {conflicts:?}");
    }
}

fn managed_fields(obj: &Map<String, Value>) -> Option<&Value> {
    obj.get("metadata")?
        .get("managedFields")
        .filter(|v| !v.is_null())
}
