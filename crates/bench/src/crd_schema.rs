//! `listwatch bench crd-schema`: what a custom resource's structural schema costs per write,
//! in this process (no server): pruning, defaulting and validating one object of the size
//! asked for, with the benchmarks' Widget schema (a map of strings, a bounded integer with a
//! default) and with a wider one (20 typed properties: patterns, enums, bounds, a list of
//! objects with a map-list key), each the mean over `--iterations` after a warm-up; then the
//! wide one again with five CEL validation rules (`x-kubernetes-validations`: comparisons, a
//! `matches`, an `all` over a list, and a transition rule that runs on the update measured).
//! The server spends this once per create or update of a custom object, on top of what a
//! built-in kind of the same size costs.

use super::kinds::Kind;
use super::round3;
use anyhow::Context as _;
use apiserver::registry::apiextensions::Schema;
use clap::Args;
use serde_json::{json, Map, Value};
use std::hint::black_box;
use std::time::Instant;

/// Options of `listwatch bench crd-schema`.
#[derive(Args, Debug, Clone)]
pub struct CrdSchemaArgs {
    /// Approximate size of the Widget in bytes.
    #[arg(long, default_value_t = 2048)]
    pub object_size: usize,
    /// Measured runs per figure.
    #[arg(long, default_value_t = 100_000)]
    pub iterations: u32,
}

/// A schema with 20 typed fields, as operators' CRDs have.
fn wide_schema() -> (Value, Value) {
    let mut props = Map::new();
    let mut spec = Map::new();
    for i in 0..8 {
        props.insert(
            format!("name{i}"),
            json!({"type": "string", "pattern": "^[a-z][a-z0-9-]*$", "maxLength": 63}),
        );
        spec.insert(format!("name{i}"), json!(format!("item-{i}")));
    }
    for i in 0..6 {
        props.insert(
            format!("count{i}"),
            json!({"type": "integer", "minimum": 0, "maximum": 1000, "default": 1}),
        );
        spec.insert(format!("count{i}"), json!(i * 10));
    }
    for i in 0..4 {
        props.insert(
            format!("mode{i}"),
            json!({"type": "string", "enum": ["Fast", "Safe", "Off"]}),
        );
        spec.insert(format!("mode{i}"), json!("Safe"));
    }
    props.insert(
        "ports".into(),
        json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
               "items": {"type": "object", "required": ["name"], "properties": {
                   "name": {"type": "string"}, "port": {"type": "integer", "minimum": 1, "maximum": 65535}}}}),
    );
    spec.insert(
        "ports".into(),
        json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}]),
    );
    props.insert(
        "selector".into(),
        json!({"type": "object", "additionalProperties": {"type": "string"}}),
    );
    spec.insert("selector".into(), json!({"app": "web", "tier": "front"}));
    let schema =
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": props}}});
    let obj = json!({"apiVersion": "bench.listwatch.dev/v1", "kind": "Wide",
                     "metadata": {"name": "w"}, "spec": spec});
    (schema, obj)
}

fn widget_schema() -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "data": {"type": "object", "additionalProperties": {"type": "string"}},
        "replicas": {"type": "integer", "minimum": 0, "default": 1}}}}})
}

/// The wide schema with CEL rules on `spec` and on the ports list.
fn with_rules(mut wide: Value) -> Value {
    wide["properties"]["spec"]["x-kubernetes-validations"] = json!([
        {"rule": "self.count0 <= self.count1 + 100", "message": "count0 may exceed count1 by 100 at most"},
        {"rule": "self.name0 != self.name1"},
        {"rule": "self.name2.matches('^item-[0-9]+$')"},
        {"rule": "self.mode0 == oldSelf.mode0 || oldSelf.mode0 != 'Off'", "message": "mode0 stays Off"},
    ]);
    wide["properties"]["spec"]["properties"]["ports"]["maxItems"] = json!(64);
    wide["properties"]["spec"]["properties"]["ports"]["x-kubernetes-validations"] =
        json!([{"rule": "self.all(p, p.port > 0 && p.port < 65536)"}]);
    wide
}

/// Mean nanoseconds of validating `obj` as an update of `old` (schema and rules).
fn measure_update(
    schema: &Schema,
    obj: &Map<String, Value>,
    old: &Map<String, Value>,
    iterations: u32,
) -> f64 {
    for _ in 0..1000 {
        black_box(schema.validate_update(obj, Some(old)));
    }
    let started = Instant::now();
    for _ in 0..iterations {
        let errs = schema.validate_update(black_box(obj), Some(old));
        debug_assert!(errs.is_empty(), "{errs:?}");
        black_box(errs);
    }
    started.elapsed().as_nanos() as f64 / f64::from(iterations)
}

/// Mean nanoseconds of pruning, defaulting and validating a copy of `obj`.
fn measure(schema: &Schema, obj: &Map<String, Value>, iterations: u32) -> (f64, f64) {
    for _ in 0..1000 {
        let mut o = obj.clone();
        schema.prune(&mut o);
        schema.apply_defaults(&mut o);
        let errs = schema.validate(&o);
        assert!(errs.is_empty(), "the benchmark object is valid: {errs:?}");
    }
    let started = Instant::now();
    for _ in 0..iterations {
        black_box(obj.clone());
    }
    let clone_ns = started.elapsed().as_nanos() as f64 / f64::from(iterations);
    let started = Instant::now();
    for _ in 0..iterations {
        let mut o = obj.clone();
        black_box(schema.prune(&mut o));
        schema.apply_defaults(&mut o);
        black_box(schema.validate(&o));
    }
    let total = started.elapsed().as_nanos() as f64 / f64::from(iterations);
    (total - clone_ns, clone_ns)
}

/// Runs the benchmark.
pub fn run(args: CrdSchemaArgs) -> anyhow::Result<()> {
    let widget = Schema::compile(&widget_schema(), "widget")
        .map_err(|e| anyhow::anyhow!("the Widget schema: {e:?}"))?;
    let body = Kind::Widget.body("w", args.object_size, None);
    let widget_obj: Map<String, Value> =
        serde_json::from_slice(&body).context("the Widget body")?;
    let (wide_src, wide_obj) = wide_schema();
    let wide = Schema::compile(&wide_src, "wide")
        .map_err(|e| anyhow::anyhow!("the wide schema: {e:?}"))?;
    let wide_obj = wide_obj.as_object().cloned().unwrap_or_default();
    let ruled = Schema::compile(&with_rules(wide_src), "wide-rules")
        .map_err(|e| anyhow::anyhow!("the wide schema with rules: {e:?}"))?;
    let (w_ns, w_clone) = measure(&widget, &widget_obj, args.iterations);
    let (x_ns, x_clone) = measure(&wide, &wide_obj, args.iterations);
    let (r_ns, _) = measure(&ruled, &wide_obj, args.iterations);
    let mut old = wide_obj.clone();
    if let Some(Value::Object(spec)) = old.get_mut("spec") {
        spec.insert("count0".into(), json!(7));
    }
    let u_ns = measure_update(&ruled, &wide_obj, &old, args.iterations);
    println!(
        "crd-schema: prune + default + validate, ns per object (the copy it works on excluded)"
    );
    println!(
        "  widget (~{} bytes, 2 fields)    {w_ns:.0} ns  (copy {w_clone:.0} ns)",
        body.len()
    );
    println!("  wide (20 typed fields, a map-list) {x_ns:.0} ns  (copy {x_clone:.0} ns)");
    println!(
        "  wide + 5 CEL rules, create       {r_ns:.0} ns  (rules: {:.0} ns)",
        r_ns - x_ns
    );
    println!(
        "  wide + 5 CEL rules, update (validation only, transition rule included) {u_ns:.0} ns"
    );
    println!(
        "{}",
        json!({"bench": "crd-schema", "object_size": body.len(), "iterations": args.iterations,
               "widget_ns": round3(w_ns), "wide_ns": round3(x_ns),
               "wide_cel_create_ns": round3(r_ns), "wide_cel_update_validate_ns": round3(u_ns)})
    );
    Ok(())
}
