//! libFuzzer entry point of [`fuzz::protobuf_server`] (see the `fuzz` crate's docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::protobuf_server(data));
