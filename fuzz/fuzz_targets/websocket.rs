//! libFuzzer entry point of [`fuzz::websocket`] (see the `fuzz` crate's docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::websocket(data));
