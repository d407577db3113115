#!/usr/bin/env bash
# Runs every test of the project: formatting, lints, unit, integration, conformance and
# interop tests. Installs what the tests need on a fresh Debian machine first.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBECTL=/usr/lib/google-cloud-sdk/bin/kubectl.1.32
need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
# etcd-client compiles etcd's protobuf definitions with protoc; the etcd backend's tests
# start real etcd 3.4 processes.
command -v protoc >/dev/null || need_apt+=(protobuf-compiler)
command -v etcd >/dev/null || need_apt+=(etcd-server)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing: ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi
if [ ! -x "$KUBECTL" ]; then
  # kubectl 1.32 comes with the machine's Google Cloud SDK; no registry here ships it.
  echo "error: $KUBECTL is missing; the interop tests need the real kubectl 1.32" >&2
  exit 1
fi
export LISTWATCH_KUBECTL="$KUBECTL"

cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace
