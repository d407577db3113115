//! libFuzzer entry point of [`fuzz::label_selector`] (see the `fuzz` crate's docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::label_selector(data));
