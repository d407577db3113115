//! libFuzzer entry point of [`fuzz::watch_decoder`] (see the `fuzz` crate's docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::watch_decoder(data));
