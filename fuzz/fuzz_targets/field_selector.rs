//! libFuzzer entry point of [`fuzz::field_selector`] (see the `fuzz` crate's docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::field_selector(data));
