//! libFuzzer entry point of [`fuzz::http2`] (see the `fuzz` crate's docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::http2(data));
