//! libFuzzer entry point of [`fuzz::continue_token`] (see the `fuzz` crate's docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::continue_token(data));
