//! libFuzzer entry point of [`fuzz::list_options`] (see the `fuzz` crate's docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::list_options(data));
