//! libFuzzer entry point of [`fuzz::resource_version`] (see the `fuzz` crate's docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::resource_version(data));
