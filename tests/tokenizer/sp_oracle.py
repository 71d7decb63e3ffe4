"""The sentencepiece oracle: trains small models on the King James Bible with sentencepiece's own
trainer, one per normalization rule and option, and writes what the Python sentencepiece (Debian's
python3-sentencepiece) makes of the whole text and of tests/tokenizer/torture.json: ids and
decode(ids) of every case, and the decode of random id sequences. sp_oracle_test.cc compares
mixserve's sentencepiece tokenizer with these, exactly.

usage: sp_oracle.py OUT_DIR
writes OUT_DIR/cases.bin (the texts), and OUT_DIR/<name>.model and OUT_DIR/<name>.expect per model.

Layouts, little endian. cases.bin: b"SPC1", u32 count, each (u32 len, bytes). .expect: b"SPX2",
u32 count (as cases.bin), each (u32 n, n × u16 ids, u8 same: 1 when decode(ids) is the text
itself, else u32 len, bytes); then u32 count of decode cases, each (u32 n, n × u16 ids, u32 len,
decoded bytes). Ids fit 16 bits: the vocabularies are small.
"""
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg):
    print(f"sp_oracle.py: {msg}", file=sys.stderr)
    sys.exit(1)


try:
    import sentencepiece as spm
except ImportError:
    fail("the Python sentencepiece module is missing (Debian: apt-get install python3-sentencepiece)")
if shutil.which("bible") is None:
    fail("`bible` is missing (Debian: apt-get install bible-kjv)")

VERSE = re.compile(r"^([0-9]?[A-Za-z]+)[0-9]+:[0-9]+ (.*)$")  # as reference/data.py reads it

# Extra cases for the options: user-defined and control symbols written in text, spaces.
EXTRA = ["<sep>", "a<sep>b", "<sep><sep> <cls>", "the Lord LORD Lordship", "<ctl> <mask> are text",
         "<s> </s> <unk> stay text", "\u2603 snow\u2603man", "AAAA AAA", "x\u3000\u3000y",
         "\u00e9t\u00e9 caf\u00e9", "\u2019tis", "\t\tindented", "end \u2581 \u2581\u2581 marks",
         "\u2581leading mark"]
EXTRA_BYTES = [b"bad \xff utf8", b"\xe2\x82 cut", b"\xc0\xaf overlong", b"\xed\xa0\x80 surrogate",
               b"nul\x00byte", b"\xf4\x90\x80\x80 past U+10FFFF", b"\xef\xbf\xbd real U+FFFD"]

BASE = dict(vocab_size=800, num_threads=2, minloglevel=2, character_coverage=0.9995)
RULES = {
    "identity": dict(normalization_rule_name="identity"),
    "nfkc": dict(normalization_rule_name="nfkc"),
    "nmt_nfkc": dict(normalization_rule_name="nmt_nfkc"),
    "nfkc_cf": dict(normalization_rule_name="nfkc_cf"),
    "nmt_nfkc_cf": dict(normalization_rule_name="nmt_nfkc_cf"),
    "rules_tsv": dict(normalization_rule_tsv=os.path.join(HERE, "sp_rules.tsv")),
    "no_dummy_prefix": dict(add_dummy_prefix=False),
    "keep_spaces": dict(remove_extra_whitespaces=False),
    "keep_spaces_no_dummy": dict(remove_extra_whitespaces=False, add_dummy_prefix=False),
    "suffix": dict(treat_whitespace_as_suffix=True),
    "byte_fallback": dict(byte_fallback=True, character_coverage=0.98),
    "symbols": dict(user_defined_symbols=["<sep>", "<cls>", "Lord", "\u2603"],
                    control_symbols=["<ctl>", "<mask>"]),
}


def read_bible():
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    verses = [m.group(2).strip() for line in out.splitlines() if (m := VERSE.match(line))]
    if len(verses) != 31102:
        fail(f"bible printed {len(verses)} verses, expected 31102")
    return verses


def u32(n):
    return struct.pack("<I", n)


def blob(b):
    return u32(len(b)) + b


def ids_blob(ids):
    return u32(len(ids)) + struct.pack(f"<{len(ids)}H", *ids)


def main():
    if len(sys.argv) != 2:
        fail("usage: sp_oracle.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.time()
    verses = read_bible()
    with open(os.path.join(HERE, "torture.json"), encoding="utf-8") as f:
        torture = json.load(f)["cases"]
    train = os.path.join(out_dir, "train.txt")
    with open(train, "w", encoding="utf-8") as f:  # every 10th verse: training stays ~0.5 s
        f.write("\n".join(verses[::10]) + "\n")
    # Cases as bytes: a torture case may hold a lone surrogate, which we send as its
    # surrogateescape bytes (malformed UTF-8, as a client could); sentencepiece takes bytes too.
    cases = [s.encode("utf-8", "surrogatepass") for s in torture + EXTRA] + EXTRA_BYTES + \
            [v.encode() for v in verses]
    # Also a few long inputs: whole chapters' worth of verses joined by newlines and spaces.
    cases += ["\n".join(verses[i:i + 40]).encode() for i in range(0, 2000, 400)]
    cases += ["  ".join(verses[i:i + 40]).encode() for i in range(2000, 4000, 400)]
    with open(os.path.join(out_dir, "cases.bin"), "wb") as f:
        f.write(b"".join([b"SPC1", u32(len(cases))] + [blob(c) for c in cases]))
    rng = random.Random(7)
    for name, opts in RULES.items():
        for model_type in ("bpe", "unigram"):
            prefix = os.path.join(out_dir, f"{name}-{model_type}")
            spm.SentencePieceTrainer.train(input=train, model_prefix=prefix, model_type=model_type,
                                           **{**BASE, **opts})
            sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
            ids = [sp.encode(c) for c in cases]
            decoded = sp.decode(ids)
            out = [b"SPX2", u32(len(cases))]
            for c, i, d in zip(cases, ids, decoded):
                d = d.encode("utf-8", "surrogatepass")
                out += [ids_blob(i), b"\1" if d == c else b"\0" + blob(d)]
            # Random id sequences: control, unknown, byte and user-defined pieces in any order.
            n = sp.get_piece_size()
            special = [i for i in range(n) if sp.is_control(i) or sp.is_unknown(i) or
                       sp.is_byte(i)] + [sp.piece_to_id(u) for u in opts.get("user_defined_symbols", [])]
            seqs = [[rng.choice(special) if special and rng.random() < 0.4 else rng.randrange(n)
                     for _ in range(rng.randrange(1, 12))] for _ in range(300)]
            out.append(u32(len(seqs)))
            for s, d in zip(seqs, sp.decode(seqs)):
                out += [ids_blob(s), blob(d.encode("utf-8", "surrogatepass"))]
            with open(prefix + ".expect", "wb") as f:
                f.write(b"".join(out))
    print(f"sp_oracle.py: {2 * len(RULES)} models, {len(cases)} cases each, "
          f"{time.time() - t0:.1f} s")


main()
