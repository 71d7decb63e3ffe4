// The oracles' encoders timed as bench/tokenizer_bench.cc times ours: the whole text as one
// string and line by line, ROUNDS passes each, on one thread (TOKENIZERS_PARALLELISM=false and
// RAYON_NUM_THREADS=1 keep Hugging Face's Rust tokenizers on one core; bench/tokenizer.py sets them).
//   node bench/tokenizer_oracles.js ORACLE TOKENIZER_JSON TEXT_FILE ROUNDS
// ORACLE: rust (@anush008/tokenizers), js (@huggingface/tokenizers) or gpt-3-encoder.
// Prints one JSON object like mixserve-tokenizer-bench's.
const fs = require('fs');
const path = require('path');

// A package's version from its package.json (some packages do not export that file).
function versionOf(name) {
  const main = require.resolve(name);
  let dir = path.dirname(main);
  while (!fs.existsSync(path.join(dir, 'package.json')) || JSON.parse(fs.readFileSync(path.join(dir, 'package.json'))).name !== name)
    dir = path.dirname(dir);
  return JSON.parse(fs.readFileSync(path.join(dir, 'package.json'))).version;
}

async function main() {
  const [oracle, tokenizerJson, textFile, roundsArg] = process.argv.slice(2);
  const rounds = Math.max(1, parseInt(roundsArg || '5', 10));
  const text = fs.readFileSync(textFile, 'utf8');
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  let encode;  // (string) => Promise<number> | number: the token count
  let version;
  if (oracle === 'rust') {
    const { Tokenizer } = require('@anush008/tokenizers');
    const tok = Tokenizer.fromFile(tokenizerJson);
    encode = async (s) => (await tok.encode(s, null, { addSpecialTokens: false })).getLength();
    version = versionOf('@anush008/tokenizers');
  } else if (oracle === 'js') {
    const { Tokenizer } = require('@huggingface/tokenizers');
    const tok = new Tokenizer(JSON.parse(fs.readFileSync(tokenizerJson, 'utf8')), {});
    encode = (s) => tok.encode(s, { add_special_tokens: false }).ids.length;
    version = versionOf('@huggingface/tokenizers');
  } else if (oracle === 'gpt-3-encoder') {
    const enc = require('gpt-3-encoder');
    encode = (s) => enc.encode(s).length;
    version = versionOf('gpt-3-encoder');
  } else {
    throw new Error(`unknown oracle ${oracle}`);
  }
  // gpt-3-encoder's encode is quadratic in the text's length (280 KB as one string: 89 s), so it
  // is timed verse by verse only.
  const whole = oracle !== 'gpt-3-encoder';
  const out = { oracle, version, bytes: Buffer.byteLength(text), lines: lines.length, line_seconds: [], whole_seconds: [] };
  for (let r = 0; r < rounds; ++r) {
    let t0 = process.hrtime.bigint();
    let n = 0;
    for (const l of lines) n += await encode(l);
    out.line_seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
    out.line_tokens = n;
    if (whole) {
      t0 = process.hrtime.bigint();
      out.whole_tokens = await encode(text);
      out.whole_seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
    }
    process.stderr.write(`${oracle} pass ${r + 1}/${rounds}: lines ${out.line_seconds[r].toFixed(3)} s` +
                         (whole ? `, whole ${out.whole_seconds[r].toFixed(3)} s` : '') + '\n');
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
  process.stderr.write(`error: ${e.stack || e}\n`);
  process.exit(1);
});
