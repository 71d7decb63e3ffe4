#!/usr/bin/env bash
# Runs a browser test (the playground's, or the one named by a fourth argument): installs playwright-core (pinned in package-lock.json) into
# the build tree with npm ci when needed, then drives Debian's chromium against a real server.
# Fails with a clear message when node, npm, playwright-core or chromium is missing: never skips.
# Usage: run_playground_test.sh SERVER_BINARY SOURCE_DIR WORK_DIR [TEST_SCRIPT (default playground_test.js)]
set -euo pipefail
server=$1 source_dir=$2 work_dir=$3 script=${4:-playground_test.js}
here=$source_dir/tests/clients
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v node >/dev/null || fail "node is not installed (scripts/install-deps installs nodejs)"
[ -x "${CHROMIUM:-/usr/bin/chromium}" ] || fail "chromium is not installed: install Debian's chromium (scripts/install-deps)"
node_dir=$work_dir/node
mkdir -p "$node_dir"
if ! cmp -s "$here/package-lock.json" "$node_dir/package-lock.json" || [ ! -d "$node_dir/node_modules/playwright-core" ]; then
  command -v npm >/dev/null || fail "npm is not installed: it is needed once to fetch playwright-core"
  cp "$here/package.json" "$here/package-lock.json" "$node_dir/"
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error) || fail "npm ci of playwright-core failed (is the npm registry reachable?)"
fi
NODE_PATH=$node_dir/node_modules exec node "$here/$script" "$server" "$source_dir" "$work_dir/output"
