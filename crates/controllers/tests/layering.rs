//! The control plane reaches state only through the API: its crate must never depend on the
//! server's crates (`apiserver`, `storage`, `storage-etcd`), directly or through another
//! dependency. Checked on `cargo metadata`'s resolved dependency graph.

use std::collections::{BTreeSet, HashMap};
use std::process::Command;

#[test]
fn controllers_never_depend_on_the_server() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let names: HashMap<&str, &str> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?)))
        .collect();
    let nodes = meta["resolve"]["nodes"].as_array().expect("resolve nodes");
    let deps: HashMap<&str, Vec<&str>> = nodes
        .iter()
        .filter_map(|n| {
            let id = n["id"].as_str()?;
            let ds = n["deps"]
                .as_array()?
                .iter()
                .filter(|d| {
                    // Normal (not dev or build) dependencies only.
                    d["dep_kinds"]
                        .as_array()
                        .is_some_and(|ks| ks.iter().any(|k| k["kind"].is_null()))
                })
                .filter_map(|d| d["pkg"].as_str())
                .collect();
            Some((id, ds))
        })
        .collect();
    let root = names
        .iter()
        .find(|(_, n)| **n == "controllers")
        .map(|(id, _)| *id)
        .expect("the controllers package");
    let mut seen = BTreeSet::new();
    let mut todo = vec![root];
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        todo.extend(deps.get(id).into_iter().flatten().copied());
    }
    let reached: BTreeSet<&str> = seen
        .iter()
        .filter_map(|id| names.get(id).copied())
        .collect();
    assert!(
        reached.contains("client"),
        "the graph walk found nothing: {reached:?}"
    );
    for forbidden in ["apiserver", "storage", "storage-etcd"] {
        assert!(
            !reached.contains(forbidden),
            "controllers depends on {forbidden} (components must reach state only through the API)"
        );
    }
}
