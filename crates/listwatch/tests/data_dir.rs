//! The data directory of `listwatch serve` is private to its user: a fresh start creates
//! only 0700 directories and 0600 files, and a start on a directory an older version left
//! readable by others (0755 directories, 0644 files) tightens it, one log line per entry.
#![cfg(unix)]

mod common;

use common::TestServer;
use serde_json::json;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// Every entry under `dir` (itself included) with its permission bits, sorted by path.
fn modes(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                todo.push(e.unwrap().path());
            }
        }
        out.push((p, meta.permissions().mode() & 0o7777));
    }
    out.sort();
    out
}

/// Asserts every directory under `dir` is 0700 and every file 0600.
fn assert_private(dir: &Path) {
    for (p, mode) in modes(dir) {
        let want = if p.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode, want, "{} is {mode:04o}", p.display());
    }
}

#[test]
fn a_fresh_data_directory_is_private_from_the_start() {
    let srv = TestServer::start();
    let (code, _) = common::http_json(
        "POST",
        &format!("{}/api/v1/namespaces/default/secrets", srv.url),
        Some(
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                     "data": {"k": "dg=="}}),
        ),
    );
    assert_eq!(code, 201);
    let data = srv.dir().join("data");
    let entries = modes(&data);
    let names: Vec<String> = entries
        .iter()
        .map(|(p, _)| p.strip_prefix(&data).unwrap().display().to_string())
        .collect();
    assert!(
        names.contains(&"listwatch.redb".to_string())
            && names.contains(&"pki/ca.key".to_string())
            && names.contains(&"pki/admin.token".to_string()),
        "{names:?}"
    );
    assert_private(&data);
    assert!(
        !srv.stderr().contains("permissions tightened"),
        "nothing to fix on a fresh start: {}",
        srv.stderr()
    );
}

#[test]
fn loose_modes_left_by_an_older_version_are_tightened_at_start() {
    let srv = TestServer::start();
    let dir = srv.kill9();
    let data = dir.path().join("data");
    // What an older version left: directories 0755, files 0644.
    let entries = modes(&data);
    for (p, _) in &entries {
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let srv = TestServer::start_in(dir, &[]);
    assert_private(&srv.dir().join("data"));
    let stderr = srv.stderr();
    let fixes = stderr.matches("permissions tightened").count();
    assert_eq!(
        fixes,
        entries.len(),
        "one log line per entry fixed ({entries:?}):\n{stderr}"
    );
    assert!(
        stderr.contains("listwatch.redb") && stderr.contains("0644"),
        "{stderr}"
    );
    // The server works on the fixed directory.
    let (code, _) = common::http_json("GET", &format!("{}/api/v1/namespaces", srv.url), None);
    assert_eq!(code, 200);
}

/// A data directory whose store was damaged (here: cut to a third) stops `listwatch serve`
/// at start, exit status 1, with a message naming the file and what to do: never a start
/// that silently lost data.
#[test]
fn a_damaged_store_stops_the_server_at_start_saying_what_to_do() {
    let srv = TestServer::start();
    for i in 0..50 {
        let (code, _) = common::http_json(
            "POST",
            &format!("{}/api/v1/namespaces/default/configmaps", srv.url),
            Some(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("c{i}")}, "data": {"k": "x".repeat(2000)}})),
        );
        assert_eq!(code, 201);
    }
    let dir = srv.kill9();
    let store = dir.path().join("data").join("listwatch.redb");
    let bytes = std::fs::read(&store).unwrap();
    let cut = bytes[..bytes.len() / 3].to_vec();
    std::fs::write(&store, &cut).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_listwatch"))
        .args([
            "serve",
            "--insecure-bind",
            "127.0.0.1:0",
            "--bind",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .expect("running listwatch serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&store.display().to_string()), "{stderr}");
    assert!(stderr.contains("cannot be read"), "{stderr}");
    assert!(
        stderr.contains("Restore the data directory from a backup"),
        "{stderr}"
    );
}
