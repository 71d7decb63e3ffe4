#!/usr/bin/env bash
# Prepares @huggingface/jinja's renders of every template x case (once per build tree: again when
# a template, the cases, oracle.js or the npm lock file change), then runs chat_template_oracle_tests
# on them. Fails with a clear message when node, npm or the registry is missing: never skips.
#   oracle_test.sh SOURCE_DIR WORK_DIR TEST_BINARY [gtest args]
set -euo pipefail
source_dir=$1 work=$2 binary=$3
shift 3
here=$source_dir/tests/chat_template
fail() { echo "FAIL: $*" >&2; exit 1; }
"$source_dir/tests/tokenizer/npm_oracles.sh" "$work/node"
[ -d "$work/node/node_modules/@huggingface/jinja" ] || fail "@huggingface/jinja is not in $work/node (tests/tokenizer/package.json)"
mkdir -p "$work/out"
stamp=$(cat "$here/oracle.js" "$here/conversations.json" "$here/snippets.txt" "$source_dir/tests/tokenizer/package-lock.json" \
          "$here"/templates/*.jinja | sha256sum | cut -d' ' -f1)
if [ "$(cat "$work/out/stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -f "$work/out/stamp"
  node "$here/oracle.js" "$work/node/node_modules" "$source_dir" "$work/out/renders.json" || fail "oracle.js failed"
  echo "$stamp" > "$work/out/stamp"
fi
MIXSERVE_CHAT_TEMPLATE_ORACLE=$work/out/renders.json MIXSERVE_SOURCE_DIR=$source_dir exec "$binary" "$@"
