#!/bin/sh
# ctest's entry to the sentencepiece oracle suite: (re)generates the models and expectations
# (tests/tokenizer/sp_oracle.py, ~40 s on 2 cores) when missing or older than their sources, then
# runs the comparison. usage: sp_oracle_run.sh PYTHON OUT_DIR TEST_BINARY [gtest args]
set -eu
python=$1 out=$2 bin=$3
shift 3
here=$(dirname "$0")
stamp=$out/.done
if [ ! -f "$stamp" ] || [ -n "$(find "$here/sp_oracle.py" "$here/sp_rules.tsv" "$here/torture.json" -newer "$stamp")" ]; then
  rm -rf "$out"
  "$python" "$here/sp_oracle.py" "$out"
  touch "$stamp"
fi
SP_ORACLE_DIR=$out exec "$bin" "$@"
