//! libFuzzer entry point of [`fuzz::merge_patch`] (see the `fuzz` crate's docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::merge_patch(data));
