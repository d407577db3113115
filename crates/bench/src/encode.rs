//! `listwatch bench encode`: the CPU cost of turning one change of a ~2 KB pod into watch
//! event bytes, in nanoseconds per event, measured in this process (no server, no I/O).
//!
//! The JSON figures, each the mean over `--iterations` runs after a warm-up:
//! - `decode_stored`: what the watch cache does once per change, shared by every watcher:
//!   parse the stored JSON, stamp the resourceVersion, re-serialize (`CachedObject::decode`).
//! - `serde_parse`: `serde_json::from_slice` of the object into a `Value` (a reference: what a
//!   server that keeps parsed objects would pay per change).
//! - `serde_to_vec_event`: `serde_json::to_vec` of `{"type":…,"object":<parsed object>}`: what
//!   a server that serializes per watcher from a parsed object would pay per delivered event.
//! - `cached_frame`: the server's actual per-delivered-event path: `WatchFrame::encode` of the
//!   cached object bytes into the stream's buffer (two small literals around one copy).
//!
//! Then the protobuf figures, for a configmap of the same size and for the pod:
//! - `protobuf_convert`: what a change costs once when any client watches or lists in
//!   protobuf: the object's JSON to its enveloped protobuf body (`encode_body`).
//! - `protobuf_frame`: per delivered event, the `WatchEvent` frame around that cached body.
//!
//! Last, the client's side of the pod's events: `client_read_json` reads the JSON watch line
//! into a `DynamicObject` (the whole object validated, its metadata read), and
//! `client_read_protobuf` the protobuf frame into a `ProtobufObject` (its metadata read, its
//! message copied out of the received bytes): the decode step of an informer, per event.

use super::{pod_body, round3, BENCH_NAMESPACE};
use anyhow::{ensure, Context as _};
use apiserver::cacher::{CachedObject, WatchFrame};
use bytes::{Bytes, BytesMut};
use clap::Args;
use client::object::{DecodeObject as _, DynamicObject};
use client::protobuf_object::ProtobufObject;
use client::rest::protobuf_decoder::parse_protobuf_event;
use client::rest::watch_decoder::{cache_object, parse_event};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

/// Options of `listwatch bench encode`.
#[derive(Args, Debug, Clone)]
pub struct EncodeArgs {
    /// Approximate size of the pod in bytes (padding goes in an annotation).
    #[arg(long, default_value_t = 2048)]
    pub object_size: usize,
    /// Timed repetitions of each operation (a tenth as many again warm up first).
    #[arg(long, default_value_t = 100_000)]
    pub iterations: u64,
}

/// Runs `f` `iterations / 10` times to warm up, then `iterations` times; returns the mean
/// nanoseconds per call.
fn time_ns(iterations: u64, mut f: impl FnMut()) -> f64 {
    for _ in 0..iterations / 10 {
        f();
    }
    let started = Instant::now();
    for _ in 0..iterations {
        f();
    }
    started.elapsed().as_nanos() as f64 / iterations.max(1) as f64
}

/// One measured figure.
#[derive(Debug, Clone, Copy)]
struct Figure {
    name: &'static str,
    what: &'static str,
    ns: f64,
    bytes: usize,
}

/// Runs the encoding benchmark and prints its figures (readable lines, then one JSON line).
/// Times `put` appending one frame to `out` (then split off, as a response body would) and
/// returns the mean ns per frame and the frame's length.
fn time_framing(
    iterations: u64,
    out: &mut BytesMut,
    mut put: impl FnMut(&mut BytesMut),
) -> (f64, usize) {
    let mut len = 0;
    let ns = time_ns(iterations, || {
        put(out);
        let chunk = out.split().freeze();
        len = chunk.len();
        black_box(chunk);
        if out.capacity() < 8 * 1024 {
            out.reserve(64 * 1024);
        }
    });
    (ns, len)
}

/// What a client's decoder is handed for one pod event: the JSON watch line (without its
/// newline) and the protobuf frame (without its 4-byte length), as the server writes them.
fn client_inputs(frame: &WatchFrame, protobuf_body: &[u8]) -> (Bytes, Bytes) {
    let mut line = BytesMut::new();
    frame.encode("v1", "Pod", &mut line);
    let mut line = line.freeze();
    if line.last() == Some(&b'\n') {
        line.truncate(line.len() - 1);
    }
    let mut pb = BytesMut::new();
    apiserver::encoding::protobuf_encode::put_watch_frame_raw("MODIFIED", protobuf_body, &mut pb);
    (line, pb.freeze().slice(4..))
}

/// Runs `bench encode`: prints, per encoding, the cost of converting and framing one event.
pub fn run(args: EncodeArgs) -> anyhow::Result<()> {
    let iterations = args.iterations.max(1);
    let info = apiserver::registry::resources::find("", "v1", "pods")
        .context("the pods resource is not registered")?;
    // The pod as the server stores it: the bench body plus the server-owned metadata.
    let mut obj = api::Object::from_slice(&pod_body("encode-0", args.object_size, Some(1)))
        .map_err(|s| anyhow::anyhow!("bench pod body: {}", s.message))?;
    apiserver::registry::strategy::prepare_for_create(info, &mut obj, BENCH_NAMESPACE)
        .map_err(|s| anyhow::anyhow!("preparing the pod: {}", s.message))?;
    let stored = obj.to_vec();
    let key = format!("{BENCH_NAMESPACE}/encode-0");
    let rv = 123_456u64;
    let cached =
        Arc::new(CachedObject::decode(info, &key, &stored, rv).map_err(|e| anyhow::anyhow!(e))?);
    let parsed: serde_json::Value = serde_json::from_slice(&cached.json)?;
    let event = serde_json::json!({"type": "MODIFIED", "object": parsed});
    let frame = WatchFrame::Event {
        event_type: "MODIFIED",
        object: cached.clone(),
    };

    let mut figures = Vec::new();
    let ns = time_ns(iterations, || {
        let c = CachedObject::decode(info, &key, black_box(&stored), rv);
        black_box(c.ok());
    });
    figures.push(Figure {
        name: "decode_stored",
        what: "per change: stored JSON -> cached object (parse, stamp RV, serialize)",
        ns,
        bytes: cached.json.len(),
    });
    let ns = time_ns(iterations, || {
        let v: Result<serde_json::Value, _> = serde_json::from_slice(black_box(&cached.json));
        black_box(v.ok());
    });
    figures.push(Figure {
        name: "serde_parse",
        what: "reference: serde_json::from_slice of the object into a Value",
        ns,
        bytes: cached.json.len(),
    });
    let to_vec_len = serde_json::to_vec(&event)?.len() + 1;
    let ns = time_ns(iterations, || {
        let mut v = serde_json::to_vec(black_box(&event)).unwrap_or_default();
        v.push(b'\n');
        black_box(v);
    });
    figures.push(Figure {
        name: "serde_to_vec_event",
        what: "per event if serialized per watcher: serde_json::to_vec of the parsed event",
        ns,
        bytes: to_vec_len,
    });
    let mut out = BytesMut::with_capacity(64 * 1024);
    let (ns, frame_len) = time_framing(iterations, &mut out, |out| {
        black_box(&frame).encode("v1", "Pod", out)
    });
    figures.push(Figure {
        name: "cached_frame",
        what: "per event, server's path: watch frame from the cached JSON bytes",
        ns,
        bytes: frame_len,
    });

    // A configmap of about the same size (its data is mostly one string) for comparison.
    let cm_info = apiserver::registry::resources::find("", "v1", "configmaps")
        .context("the configmaps resource is not registered")?;
    let cm_body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "encode-cm", "namespace": BENCH_NAMESPACE, "labels": {"app": "bench"}},
        "data": {"payload": "x".repeat(args.object_size.saturating_sub(300))}});
    let mut cm = api::Object::from_value(cm_body).context("bench configmap")?;
    apiserver::registry::strategy::prepare_for_create(cm_info, &mut cm, BENCH_NAMESPACE)
        .map_err(|s| anyhow::anyhow!("preparing the configmap: {}", s.message))?;
    let cm_key = format!("{BENCH_NAMESPACE}/encode-cm");
    let cm_cached = Arc::new(
        CachedObject::decode(cm_info, &cm_key, &cm.to_vec(), rv).map_err(|e| anyhow::anyhow!(e))?,
    );
    let cm_frame = WatchFrame::Event {
        event_type: "MODIFIED",
        object: cm_cached.clone(),
    };
    let (ns, cm_len) = time_framing(iterations, &mut out, |out| {
        black_box(&cm_frame).encode("v1", "ConfigMap", out)
    });
    figures.push(Figure {
        name: "cached_frame_configmap",
        what: "per event, JSON watch frame of a configmap of the same size (for the rows below)",
        ns,
        bytes: cm_len,
    });
    let pb_body = apiserver::encoding::protobuf_encode::encode_body(&cm_cached.json)
        .map_err(|s| anyhow::anyhow!("protobuf: {}", s.message))?;
    let ns = time_ns(iterations, || {
        let b = apiserver::encoding::protobuf_encode::encode_body(black_box(&cm_cached.json));
        black_box(b.ok());
    });
    figures.push(Figure {
        name: "protobuf_convert",
        what: "per change: the configmap's JSON -> protobuf body (cached on the object)",
        ns,
        bytes: pb_body.len(),
    });
    let (ns, pb_len) = time_framing(iterations, &mut out, |out| {
        apiserver::encoding::protobuf_encode::put_watch_frame_raw(
            "MODIFIED",
            black_box(&pb_body),
            out,
        )
    });
    figures.push(Figure {
        name: "protobuf_frame",
        what: "per event, protobuf path: length-prefixed WatchEvent around the cached body",
        ns,
        bytes: pb_len,
    });

    // The pod itself (deeper, with many small fields).
    let pod_pb = apiserver::encoding::protobuf_encode::encode_body(&cached.json)
        .map_err(|s| anyhow::anyhow!("protobuf pod: {}", s.message))?;
    let ns = time_ns(iterations, || {
        let b = apiserver::encoding::protobuf_encode::encode_body(black_box(&cached.json));
        black_box(b.ok());
    });
    figures.push(Figure {
        name: "protobuf_convert_pod",
        what: "per change: the pod's JSON -> protobuf body (cached on the object)",
        ns,
        bytes: pod_pb.len(),
    });
    let (ns, pod_pb_len) = time_framing(iterations, &mut out, |out| {
        apiserver::encoding::protobuf_encode::put_watch_frame_raw(
            "MODIFIED",
            black_box(&pod_pb),
            out,
        )
    });
    figures.push(Figure {
        name: "protobuf_frame_pod",
        what: "per event, protobuf path for the pod",
        ns,
        bytes: pod_pb_len,
    });

    // The other end: what a client pays to read each of those events into its cache's
    // object type (the informer's decode step, single thread, no I/O).
    let (line, pb_frame) = client_inputs(&frame, &pod_pb);
    let read = parse_event(&line, cache_object::<DynamicObject>);
    ensure!(
        read.is_ok(),
        "the client cannot read the JSON event: {read:?}"
    );
    let ns = time_ns(iterations, || {
        black_box(parse_event(black_box(&line), cache_object::<DynamicObject>).ok());
    });
    figures.push(Figure {
        name: "client_read_json",
        what: "per event, client: the JSON watch line -> DynamicObject (validated, metadata read)",
        ns,
        bytes: line.len(),
    });
    let decode: fn(&[u8]) -> Result<ProtobufObject, _> = ProtobufObject::decode_protobuf;
    let read = parse_protobuf_event(&pb_frame, decode);
    ensure!(
        read.is_ok(),
        "the client cannot read the protobuf event: {read:?}"
    );
    let ns = time_ns(iterations, || {
        black_box(parse_protobuf_event(black_box(&pb_frame), decode).ok());
    });
    figures.push(Figure {
        name: "client_read_protobuf",
        what: "per event, client: the protobuf frame -> ProtobufObject (metadata read, copied)",
        ns,
        bytes: pb_frame.len(),
    });

    println!(
        "encode: one ~{} byte pod, {iterations} iterations per figure (single thread)",
        args.object_size
    );
    for f in &figures {
        super::line(
            f.name,
            format!("{:>9.1} ns/event  {:>5} bytes  ({})", f.ns, f.bytes, f.what),
        );
    }
    let mut json = serde_json::Map::new();
    json.insert("bench".into(), "encode".into());
    json.insert("object_size".into(), args.object_size.into());
    json.insert("iterations".into(), iterations.into());
    for f in &figures {
        json.insert(
            f.name.into(),
            serde_json::json!({"ns_per_event": round3(f.ns), "bytes": f.bytes}),
        );
    }
    println!("{}", serde_json::Value::Object(json));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_runs_warm_up_and_measured_iterations() {
        let mut calls = 0u64;
        let ns = time_ns(50, || calls += 1);
        assert_eq!(calls, 55);
        assert!(ns >= 0.0);
    }

    #[test]
    fn server_frame_and_serde_event_carry_the_same_object() {
        let info = apiserver::registry::resources::find("", "v1", "pods").unwrap();
        let body = pod_body("p", 2048, Some(3));
        let cached = CachedObject::decode(info, "bench/p", &body, 42).unwrap();
        let frame = WatchFrame::Event {
            event_type: "MODIFIED",
            object: Arc::new(cached.clone()),
        };
        let mut out = BytesMut::new();
        frame.encode("v1", "Pod", &mut out);
        assert_eq!(out.last(), Some(&b'\n'));
        let from_frame: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let parsed: serde_json::Value = serde_json::from_slice(&cached.json).unwrap();
        assert_eq!(
            from_frame,
            serde_json::json!({"type": "MODIFIED", "object": parsed})
        );
        assert_eq!(from_frame["object"]["metadata"]["resourceVersion"], "42");
    }

    /// The client figures time real reads: both of the server's frames of the pod decode to
    /// the pod, with its resourceVersion.
    #[test]
    fn the_client_reads_the_server_frames_of_the_pod() {
        use client::object::KubeObject as _;
        use client::rest::WatchEvent;
        let info = apiserver::registry::resources::find("", "v1", "pods").unwrap();
        let body = pod_body("p", 2048, Some(3));
        let cached = Arc::new(CachedObject::decode(info, "bench/p", &body, 42).unwrap());
        let pb = apiserver::encoding::protobuf_encode::encode_body(&cached.json).unwrap();
        let frame = WatchFrame::Event {
            event_type: "MODIFIED",
            object: cached,
        };
        let (line, pb_frame) = client_inputs(&frame, &pb);
        match parse_event(&line, cache_object::<DynamicObject>) {
            Ok(WatchEvent::Modified(o)) => {
                assert_eq!((o.name(), o.resource_version()), ("p", Some("42")));
            }
            other => panic!("{other:?}"),
        }
        match parse_protobuf_event(&pb_frame, ProtobufObject::decode_protobuf) {
            Ok(WatchEvent::Modified(o)) => {
                assert_eq!((o.name(), o.namespace()), ("p", Some(BENCH_NAMESPACE)));
                assert_eq!(o.resource_version(), Some("42"));
            }
            other => panic!("{other:?}"),
        }
    }
}
