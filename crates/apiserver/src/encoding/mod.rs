//! Encodings of objects and lists, beside both the cacher and the server: JSON list bodies,
//! protobuf (envelopes, transcoding, request decoding), Tables and PartialObjectMetadata,
//! YAML bodies within bounds, and the negotiation between them. Handlers and the server use
//! them; they know the cached objects and the kinds' schemas, but no transport.

pub mod blocking;
pub mod body;
pub mod bounded_yaml;
pub mod json_path;
pub mod negotiate;
pub mod protobuf;
pub mod protobuf_encode;
pub mod protobuf_transcode;
pub mod table;
pub mod watch_json;
pub mod yaml_depth;

/// The media types of a body that is read as JSON (YAML is converted to JSON first).
pub const JSON_OR_YAML: [&str; 2] = ["application/json", "application/yaml"];
