#!/usr/bin/env bash
# Runs every test of the project: formatting, lints, unit, integration, conformance and
# interop tests. Installs what the tests need on a fresh Debian machine first.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBECTL=/usr/lib/google-cloud-sdk/bin/kubectl.1.32
need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
# The etcd backend's tests start real etcd 3.4 processes. (etcd-client's build needs protoc:
# scripts/protoc finds the system's or the vendored one, so nothing is installed for it.)
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

# The official Python and JavaScript Kubernetes clients for tests/clients.rs, pinned, in a
# cache directory outside the work tree; reinstalled only when the installed version differs.
# The JavaScript client 1.x needs Node.js 20 or later (it uses AbortSignal.any).
PY_CLIENT_VERSION=37.0.2
JS_CLIENT_VERSION=1.4.0
CLIENTS_DIR="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/listwatch-test-clients"
PY_VENV="$CLIENTS_DIR/venv"
JS_DIR="$CLIENTS_DIR/node"
if ! "$PY_VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('kubernetes') != '$PY_CLIENT_VERSION')" 2>/dev/null; then
  echo "installing the Python client kubernetes==$PY_CLIENT_VERSION into $PY_VENV"
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
  fi
  rm -rf "$PY_VENV"
  python3 -m venv "$PY_VENV"
  "$PY_VENV/bin/python" -m pip install -q --disable-pip-version-check "kubernetes==$PY_CLIENT_VERSION"
fi
js_pkg="$JS_DIR/node_modules/@kubernetes/client-node/package.json"
if [ "$(node -p "require('$js_pkg').version" 2>/dev/null || true)" != "$JS_CLIENT_VERSION" ]; then
  echo "installing @kubernetes/client-node@$JS_CLIENT_VERSION into $JS_DIR"
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
  fi
  mkdir -p "$JS_DIR"
  [ -f "$JS_DIR/package.json" ] || echo '{"name":"listwatch-test-clients","private":true}' >"$JS_DIR/package.json"
  npm install --prefix "$JS_DIR" --no-audit --no-fund --loglevel=error \
    "@kubernetes/client-node@$JS_CLIENT_VERSION"
fi
export LISTWATCH_TEST_PYTHON="$PY_VENV/bin/python"
export LISTWATCH_TEST_NODE_MODULES="$JS_DIR/node_modules"

cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace
