// Writes GPT-2's tokenizer.json as Hugging Face's own tokenizers library (Rust, through the
// @anush008/tokenizers binding) saves it: BPE from GPT-2's vocab.json + merges.txt, the ByteLevel
// pre-tokenizer, <|endoftext|> as a special token. The binding has no ByteLevel decoder
// constructor, so that key (and the post-processor) are written into the saved JSON as `gpt2`'s
// tokenizer.json has them. Used by hf_oracle.js (require) and prepare_gpt2_small.sh / the
// benchmark (command line):
//   node gpt2_tokenizer_json.js VOCAB_JSON MERGES_TXT OUT_JSON
const fs = require('fs');

// t: the @anush008/tokenizers module. Returns the JSON object it wrote to out.
async function writeGpt2TokenizerJson(t, vocab, merges, out) {
  const tok = new t.Tokenizer(await t.BPE.fromFile(vocab, merges, {}));
  tok.setPreTokenizer(t.byteLevelPreTokenizer(false, true));
  tok.addSpecialTokens(['<|endoftext|>']);
  tok.save(out, false);
  const j = JSON.parse(fs.readFileSync(out, 'utf8'));
  j.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  j.post_processor = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true };
  fs.writeFileSync(out, JSON.stringify(j));
  t.Tokenizer.fromFile(out);  // the file must load back in the library that wrote it
  return j;
}

module.exports = { writeGpt2TokenizerJson };

if (require.main === module) {
  const [vocab, merges, out] = process.argv.slice(2);
  writeGpt2TokenizerJson(require('@anush008/tokenizers'), vocab, merges, out).catch((e) => {
    process.stderr.write(`error: ${e.stack || e}\n`);
    process.exit(1);
  });
}
