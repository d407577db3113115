//! The control plane reaches state only through the API: its crate must never depend on the
//! server's crates (`apiserver`, `storage`, `storage-etcd`), directly or through another
//! crate of the workspace. Checked on `cargo metadata`'s view of the workspace: only
//! workspace crates can lead to the server's (nothing from a registry depends on them), so
//! following their declared normal dependencies is enough.

use std::collections::{BTreeSet, HashMap};
use std::process::Command;

#[test]
fn controllers_never_depend_on_the_server() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    // Workspace crate → the names of its normal (not dev, not build) dependencies.
    let deps: HashMap<&str, Vec<&str>> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter_map(|p| {
            let name = p["name"].as_str()?;
            let ds = p["dependencies"]
                .as_array()?
                .iter()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str())
                .collect();
            Some((name, ds))
        })
        .collect();
    assert!(deps.contains_key("controllers"), "{:?}", deps.keys());
    let mut reached = BTreeSet::new();
    let mut todo = vec!["controllers"];
    while let Some(name) = todo.pop() {
        if !reached.insert(name) {
            continue;
        }
        todo.extend(deps.get(name).into_iter().flatten().copied());
    }
    assert!(
        reached.contains("client"),
        "the walk found nothing: {reached:?}"
    );
    for forbidden in ["apiserver", "storage", "storage-etcd"] {
        assert!(
            !reached.contains(forbidden),
            "controllers depends on {forbidden} (components must reach state only through the API)"
        );
    }
}
