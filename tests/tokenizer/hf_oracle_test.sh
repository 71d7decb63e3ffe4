#!/usr/bin/env bash
# Prepares the Hugging Face tokenizer oracles' outputs (once per build tree: again when
# hf_oracle.js, the npm lock file or the KJV text change), then runs hf_oracle_tests on them.
# Fails with a clear message when node, npm, the registry or bible is missing: never skips.
#   hf_oracle_test.sh SOURCE_DIR WORK_DIR TEST_BINARY [gtest args]
set -euo pipefail
source_dir=$1 work=$2 binary=$3
shift 3
here=$source_dir/tests/tokenizer
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v bible >/dev/null || fail "bible is not installed: install Debian's bible-kjv (scripts/install-deps)"
"$here/npm_oracles.sh" "$work/node"
out=$work/out
mkdir -p "$out"
bible -f Gen1:1-Rev22:21 > "$work/kjv.txt" || fail "bible -f Gen1:1-Rev22:21 failed"
stamp=$(cat "$here/hf_oracle.js" "$here/gpt2_tokenizer_json.js" "$here/package-lock.json" "$here/torture.json" "$work/kjv.txt" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$out/stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -f "$out/stamp"
  echo "hf_oracle_test.sh: running the oracles (once per build tree)"
  node "$here/hf_oracle.js" "$work/node/node_modules" "$source_dir" "$work/kjv.txt" "$out" || fail "hf_oracle.js failed"
  echo "$stamp" > "$out/stamp"
fi
MIXSERVE_HF_ORACLE_DIR=$out exec "$binary" "$@"
