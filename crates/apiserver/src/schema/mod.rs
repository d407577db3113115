//! The schemas of the served kinds, below everything that encodes, validates or publishes
//! them: the protobuf field tables (generated, [`protobuf_schema`]) and the generic protobuf
//! codec over them ([`protobuf_generic`]), and the OpenAPI schema types
//! ([`openapi_types`]). Nothing here knows a request, a cache or a transport.

pub mod openapi_types;
pub mod protobuf_generic;
#[rustfmt::skip]
pub mod protobuf_schema;
