#!/usr/bin/env bash
# Installs the tokenizer oracles (package.json / package-lock.json beside this script) into
# DEST/node_modules with npm ci, once: again only when the lock file changes. Fails with a clear
# message when node or npm is missing or the registry cannot be reached; never skips.
#   tests/tokenizer/npm_oracles.sh DEST
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v node >/dev/null || fail "node is not installed (scripts/install-deps installs nodejs)"
mkdir -p "$dest"
if ! cmp -s "$here/package-lock.json" "$dest/package-lock.json" || [ ! -d "$dest/node_modules/gpt-3-encoder" ]; then
  command -v npm >/dev/null || fail "npm is not installed: it is needed once to fetch the tokenizer oracles"
  cp "$here/package.json" "$here/package-lock.json" "$dest/"
  (cd "$dest" && npm ci --no-audit --no-fund --loglevel=error) || fail "npm ci of the tokenizer oracles failed (is the npm registry reachable?)"
fi
