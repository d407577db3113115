//! A short run of every fuzz target on stable Rust, as part of `cargo test --workspace`:
//! each file of the target's checked-in corpus (`/fuzz/corpus/<target>/`, which must exist and
//! be non-empty), then a fixed number of deterministic mutations of them (bit flips, byte
//! inserts and deletes, splices of two corpus files), from a seeded PRNG so that a failure
//! reproduces. It catches regressions of the properties the targets check and of the inputs
//! that once crashed (they stay in the corpus); the long runs are `scripts/fuzz.sh`'s.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

/// xorshift64*: tiny, seeded, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// The checked-in corpus of `target`, sorted by file name. Panics when it is missing or
/// empty: a smoke test without inputs would pass while testing nothing.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "the corpus of {target} at {} is missing: {e}",
            dir.display()
        )
    });
    let mut files: Vec<(String, Vec<u8>)> = entries
        .map(|e| {
            let path = e.expect("a corpus directory entry").path();
            let data = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                data,
            )
        })
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "the corpus of {target} at {} is empty",
        dir.display()
    );
    files
}

/// One mutation of `base`, drawing on `others` for splices.
fn mutate(rng: &mut Rng, base: &[u8], others: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(5) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(out.len() + 1);
                // Bytes that matter to the parsers more often than random ones.
                const INTERESTING: &[u8] = b"\0\n\r ,=!()\"{}[]:/\\~0123456789";
                let b = if rng.below(2) == 0 {
                    INTERESTING[rng.below(INTERESTING.len())]
                } else {
                    rng.next_u64() as u8
                };
                out.insert(i, b);
            }
            2 if !out.is_empty() => {
                let i = rng.below(out.len());
                let n = 1 + rng.below(8.min(out.len() - i));
                out.drain(i..i + n);
            }
            3 => {
                let other = &others[rng.below(others.len())].1;
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let to = from + rng.below(other.len() - from) + 1;
                    let at = rng.below(out.len() + 1);
                    out.truncate(at);
                    out.extend_from_slice(&other[from..to]);
                }
            }
            _ if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = rng.next_u64() as u8;
            }
            _ => out.push(rng.next_u64() as u8),
        }
    }
    out
}

/// Runs `input` through the target `f`, turning a panic into one that names the input.
fn run_one(target: &str, what: &str, f: fn(&[u8]), input: &[u8]) {
    if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(input))) {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!(
            "fuzz target {target} failed on {what} ({} bytes): {msg}\ninput: {:?}",
            input.len(),
            String::from_utf8_lossy(input)
        );
    }
}

/// Every corpus file of `target`, then `mutations` mutations of them.
fn smoke(target: &str, mutations: usize) {
    let f = fuzz::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("no fuzz target {target}"));
    let files = corpus(target);
    for (name, data) in &files {
        run_one(target, &format!("corpus file {name}"), f, data);
    }
    // Seeded by the target's name, so each target sees its own sequence.
    let seed = target.bytes().fold(0x9e37_79b9_7f4a_7c15u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut rng = Rng(seed | 1);
    for i in 0..mutations {
        let (name, base) = &files[rng.below(files.len())];
        let input = mutate(&mut rng, base, &files);
        run_one(target, &format!("mutation {i} of {name}"), f, &input);
    }
}

/// Every target has a smoke test below.
#[test]
fn every_target_is_smoke_tested() {
    let tested = include_str!("smoke.rs");
    for (name, _) in fuzz::TARGETS {
        assert!(
            tested.contains(&format!("\n    {name}: ")),
            "fuzz target {name} has no smoke test"
        );
    }
}

macro_rules! smoke_tests {
    ($($name:ident: $mutations:expr,)*) => {
        $(
            #[test]
            fn $name() {
                smoke(stringify!($name), $mutations);
            }
        )*
    };
}

// Mutation counts keep each target to a few seconds in the debug profile (the server
// targets run a whole connection per input).
smoke_tests! {
    label_selector: 5000,
    field_selector: 5000,
    resource_version: 5000,
    continue_token: 5000,
    list_options: 5000,
    json_patch: 5000,
    merge_patch: 5000,
    strategic_merge_patch: 5000,
    server_side_apply: 5000,
    json: 5000,
    yaml: 5000,
    protobuf_server: 5000,
    protobuf_client: 5000,
    watch_decoder: 5000,
    http2: 1000,
    hpack: 5000,
    websocket: 5000,
    connection: 1000,
}
