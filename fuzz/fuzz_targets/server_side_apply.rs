//! libFuzzer entry point of [`fuzz::server_side_apply`] (see the `fuzz` crate's docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::server_side_apply(data));
