#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/ (cargo-fuzz; the targets live in crates/fuzz):
#
#   scripts/fuzz.sh [TARGET|all] [SECONDS]
#
# each target (all of them in turn by default) for SECONDS (default 1800) or 10 million
# executions, whichever comes first, starting from its checked-in corpus fuzz/corpus/TARGET.
# New inputs go to fuzz/target/work/TARGET; crashes to fuzz/artifacts/TARGET/. With MERGE=1,
# the new inputs that add coverage are merged into the checked-in corpus afterwards
# (libFuzzer's -merge=1, what `cargo fuzz cmin` does). FUZZ_ARGS adds libFuzzer flags.
#
# Toolchain: cargo-fuzz needs nightly rustc flags (-Zsanitizer). The rustup toolchain
# `nightly` is used when installed; otherwise the stable toolchain with RUSTC_BOOTSTRAP=1,
# which unlocks nightly flags on a stable compiler (fine for a local fuzzing build, never
# for a release). cargo-fuzz itself is installed (cargo install cargo-fuzz --locked) when
# missing.
#
# Sanitizer: address sanitizer by default (SANITIZER=address); SANITIZER=none builds without
# one (faster, and enough for safe Rust, where ASan mostly finds nothing the panics on
# bounds and overflow checks do not).
#
# Builds take the machine's shared cargo lock when flock is there (one build at a time on a
# small machine); the fuzzing itself runs without it, niced.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET="${1:-all}"
SECONDS_EACH="${2:-1800}"
RUNS=10000000
SANITIZER="${SANITIZER:-address}"
LOCK="${LISTWATCH_CARGO_LOCK:-/tmp/listwatch-cargo.lock}"

locked() {
  if command -v flock >/dev/null; then flock "$LOCK" "$@"; else "$@"; fi
}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  locked cargo install cargo-fuzz --locked
fi

if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  FUZZ=(cargo +nightly fuzz)
else
  export RUSTC_BOOTSTRAP=1
  FUZZ=(cargo fuzz)
fi

if [ "$TARGET" = all ]; then
  mapfile -t TARGETS < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^listwatch-fuzz-targets$')
else
  TARGETS=("$TARGET")
fi

# One build for all the targets (they share every dependency), or just the one asked for.
if [ "$TARGET" = all ]; then
  (cd fuzz && locked "${FUZZ[@]}" build --sanitizer "$SANITIZER")
else
  (cd fuzz && locked "${FUZZ[@]}" build --sanitizer "$SANITIZER" "$TARGET")
fi

triple="$(rustc -vV | sed -n 's/^host: //p')"
for t in "${TARGETS[@]}"; do
  bin="fuzz/target/$triple/release/$t"
  work="fuzz/target/work/$t"
  mkdir -p "$work" "fuzz/artifacts/$t"
  echo "== $t: ${SECONDS_EACH}s or $RUNS runs"
  # shellcheck disable=SC2086
  nice -n 10 "$bin" -runs="$RUNS" -max_total_time="$SECONDS_EACH" -print_final_stats=1 \
    -artifact_prefix="fuzz/artifacts/$t/" ${FUZZ_ARGS:-} "$work" "fuzz/corpus/$t"
  if [ "${MERGE:-0}" = 1 ]; then
    nice -n 10 "$bin" -merge=1 "fuzz/corpus/$t" "$work"
  fi
done
