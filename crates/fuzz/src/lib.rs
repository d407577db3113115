//! Fuzz targets for every parser of listwatch that reads bytes from the network.
//!
//! Each target is a `pub fn NAME(data: &[u8])` that must never panic, whatever `data` is,
//! except where it asserts a property of the parser (a panic there is a finding too). The
//! same functions are driven two ways:
//!
//! * by libFuzzer through cargo-fuzz, in the separate project `/fuzz` (one thin
//!   `fuzz_target!` per function; `scripts/fuzz.sh` runs them), and
//! * by `tests/smoke.rs` on stable Rust, which replays each target's checked-in corpus
//!   (`/fuzz/corpus/<target>/`) and a few thousand seeded mutations of it, as part of
//!   `cargo test --workspace`.
//!
//! | target | what it feeds | property checked besides "no panic" |
//! | --- | --- | --- |
//! | [`label_selector`] | the bytes as a `labelSelector` string, and as a `metav1.LabelSelector` JSON object | a selector that parses prints a canonical string that parses to an equal selector and prints the same |
//! | [`field_selector`] | the bytes as a `fieldSelector` string | as for labels; a value's escape unescapes to itself |
//! | [`resource_version`] | the bytes as a `resourceVersion` parameter | a parsed version prints a string that parses to the same version |
//! | [`continue_token`] | the bytes as a `continue` token | a token that decodes re-encodes to a token that decodes to the same |
//! | [`list_options`] | the bytes as the query string of a list or watch | parsed options print a query (`to_query`) that parses to equal options |
//! | [`json_patch`] | `base \0 patch`: an object and an RFC 6902 patch | the result is JSON that serializes and reads back equal |
//! | [`merge_patch`] | `base \0 patch`: an object and an RFC 7386 merge patch | the result reads back equal; applying the patch again changes nothing (merge patches are idempotent) |
//! | [`strategic_merge_patch`] | `base \0 patch`; the kind's list strategies come from the base's `apiVersion`/`kind` | the result reads back equal |
//! | [`server_side_apply`] | `flags live \0 config`: server-side apply of `config` over `live` | the result's `managedFields` are valid and hold the applier's entry; applying the same config again (without force) has no conflicts |
//! | [`json`] | the bytes as a JSON body: the client's one-pass validator and the server's object reader | the validator accepts exactly what `serde_json` accepts (but numbers beyond `f64`) |
//! | [`yaml`] | the bytes as a YAML request body (the bounded reader) | a document that reads prints as JSON that reads back (as YAML) to the same value |
//! | [`protobuf_server`] | `resource-selector body`: a protobuf request body for one of the served kinds | what decodes is a JSON object the server's protobuf encoder re-encodes |
//! | [`protobuf_client`] | the bytes as a protobuf object, watch stream (length-prefixed frames), event, list and Status, as the client reads them | frame splitting does not depend on chunk boundaries |
//! | [`watch_decoder`] | `chunking body`: a JSON watch response body cut into chunks | lines do not depend on chunk boundaries; an event's raw object is JSON `serde_json` accepts |
//! | [`http2`] | the bytes after the client preface on an h2c connection to an in-process server | none (the connection task must end, never hang or panic) |
//! | [`hpack`] | `limit blocks…`: length-prefixed header blocks through one HPACK decoder | each block's list stays under its limit, the dynamic table under its size; fields re-encoded decode to the same |
//! | [`websocket`] | the bytes as a client's WebSocket frames | parsing byte by byte gives the frames parsing all at once gives; payloads bounded |
//! | [`connection`] | the raw bytes of a plain connection (HTTP/1.1, h2c prior knowledge, WebSocket upgrade) to an in-process server | none (the connection must end) |
//!
//! The server targets ([`http2`], [`connection`]) share one in-process `ApiServer` on the
//! memory backend, built once, on a single-threaded runtime with a paused clock: the clock
//! jumps to the next timer whenever nothing is runnable, so the server's timeouts (idle
//! connections, unanswered PINGs, watches) pass instantly and every input ends
//! deterministically fast.
#![warn(missing_docs)]

mod apply;
mod connection;
mod hpack;
mod http2;
mod input;
mod json_yaml;
mod patch;
mod protobuf;
mod selectors;
mod tokens;
mod watch_decoder;
mod websocket;

pub use apply::server_side_apply;
pub use connection::connection;
pub use hpack::hpack;
pub use http2::http2;
pub use json_yaml::{json, yaml};
pub use patch::{json_patch, merge_patch, strategic_merge_patch};
pub use protobuf::{protobuf_client, protobuf_server};
pub use selectors::{field_selector, label_selector};
pub use tokens::{continue_token, list_options, resource_version};
pub use watch_decoder::watch_decoder;
pub use websocket::websocket;

/// One fuzz target: its name (the directory of its corpus and the cargo-fuzz binary) and
/// its function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name. The smoke test and the corpus seeder walk this list; the cargo-fuzz
/// project has one binary per entry.
pub const TARGETS: &[Target] = &[
    ("label_selector", label_selector),
    ("field_selector", field_selector),
    ("resource_version", resource_version),
    ("continue_token", continue_token),
    ("list_options", list_options),
    ("json_patch", json_patch),
    ("merge_patch", merge_patch),
    ("strategic_merge_patch", strategic_merge_patch),
    ("server_side_apply", server_side_apply),
    ("json", json),
    ("yaml", yaml),
    ("protobuf_server", protobuf_server),
    ("protobuf_client", protobuf_client),
    ("watch_decoder", watch_decoder),
    ("http2", http2),
    ("hpack", hpack),
    ("websocket", websocket),
    ("connection", connection),
];
