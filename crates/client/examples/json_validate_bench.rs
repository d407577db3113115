//! Prints the cost of validating one watch event line (a ~2.2 KB pod with a 1.6 KB
//! annotation and managedFields, like the informer benchmarks' objects): listwatch's
//! validator against `serde_json` skipping the value plus a UTF-8 check, which is what the
//! watch decoder did before. Then the cost of turning the line into a cache object
//! (`DynamicObject`, its JSON copied out): in one pass, as the informers' watches do
//! (`cache_object`), against validating the line first and reading the object's metadata
//! in a second pass (what they did before).
//!
//! `cargo run --release -p client --example json_validate_bench [LINE_FILE]`
//!
//! With `LINE_FILE`, the line measured is that file's first line instead: for example one
//! event of a real server's watch (`curl -s 'http://…/api/v1/namespaces/N/pods?watch=1' -m 1`).

use bytes::Bytes;
use client::json_validate::validate;
use client::object::DynamicObject;
use client::rest::watch_decoder::{cache_object, parse_event, raw_object};
use serde_json::json;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let obj = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-1", "namespace": "bench", "resourceVersion": "123456",
            "uid": "8d0c1c5e-0000-4000-8000-000000000001",
            "annotations": {"pad": "x".repeat(1600)}, "labels": {"app": "web"},
            "managedFields": [{"manager": "bench", "operation": "Update", "apiVersion": "v1",
                "time": "2025-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:pad": {}},
                    "f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"main\"}":
                        {".": {}, "f:image": {}, "f:name": {}}}}}}]
        },
        "spec": {"containers": [{"name": "main", "image": "nginx"}]},
        "status": {"phase": "Pending"}
    });
    let line = match std::env::args_os().nth(1) {
        Some(path) => {
            let text = std::fs::read(path)?;
            let first = text.split(|&b| b == b'\n').next().unwrap_or_default();
            first.trim_ascii().to_vec()
        }
        None => serde_json::to_vec(&json!({"type": "MODIFIED", "object": obj}))?,
    };
    println!("event line: {} bytes", line.len());
    let n = 200_000u32;
    for round in 1..=3 {
        let t = Instant::now();
        for _ in 0..n {
            validate(std::hint::black_box(&line))?;
        }
        let ours = t.elapsed().as_nanos() / u128::from(n);
        let t = Instant::now();
        for _ in 0..n {
            let l = std::hint::black_box(&line);
            serde_json::from_slice::<serde::de::IgnoredAny>(l)?;
            std::str::from_utf8(l)?;
        }
        let serde = t.elapsed().as_nanos() / u128::from(n);
        println!(
            "round {round}: json_validate {ours} ns/line, serde_json skip + UTF-8 {serde} ns/line"
        );
    }
    let line = Bytes::from(line);
    for round in 1..=3 {
        let t = Instant::now();
        for _ in 0..n {
            let event = parse_event(std::hint::black_box(&line), cache_object::<DynamicObject>)?;
            std::hint::black_box(event);
        }
        let one = t.elapsed().as_nanos() / u128::from(n);
        let t = Instant::now();
        for _ in 0..n {
            let event = parse_event(std::hint::black_box(&line), raw_object)?;
            if let Some(raw) = event.object() {
                std::hint::black_box(DynamicObject::from_well_formed(Bytes::copy_from_slice(
                    raw,
                ))?);
            }
        }
        let two = t.elapsed().as_nanos() / u128::from(n);
        println!(
            "round {round}: line → DynamicObject in one pass {one} ns, validate then read metadata {two} ns"
        );
    }
    Ok(())
}
