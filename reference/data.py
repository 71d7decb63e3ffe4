"""The training corpus: the King James Bible (Debian's bible-kjv), split by book, and its
sentencepiece tokenizer (BPE, byte fallback, vocab 5000 as in the Extractor paper).

One command regenerates everything: /usr/bin/python3 reference/data.py
Writes models/tokenizer.model (committed) and reference/data/{train,val}.u16 + meta.json
(token streams, not committed; carried to the GPU machine for training).
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "reference", "data")
TOKENIZER = os.path.join(ROOT, "models", "tokenizer.model")
VOCAB = 5000
UNK, BOS, EOS = 0, 1, 2
# Whole books held out for validation, spread over both testaments (~4.5% of the verses).
HELD_OUT = ["Ruth", "Est", "Lam", "Joel", "Jonah", "Hab", "Mark", "Titus", "Phmn", "2Pet", "Jude"]
VERSE = re.compile(r"^([0-9]?[A-Za-z]+)[0-9]+:[0-9]+ (.*)$")


def read_bible():
    """[(book, verse text)] in canonical order, from `bible -f Gen1:1-Rev22:21`."""
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout
    verses = []
    for line in out.splitlines():
        m = VERSE.match(line)
        if m:
            verses.append((m.group(1), m.group(2).strip()))
    return verses


def split(verses):
    """Verse per line; a blank line between books; held-out books go to validation."""
    train, val, last = [], [], None
    for book, text in verses:
        dst = val if book in HELD_OUT else train
        if book != last and dst:
            dst.append("")
        dst.append(text)
        last = book
    return "\n".join(train) + "\n", "\n".join(val) + "\n"


def train_tokenizer(train_text, path):
    import sentencepiece as spm
    tmp = os.path.join(DATA, "tokenizer_input.txt")
    with open(tmp, "w") as f:
        f.write(train_text)
    prefix = path[: -len(".model")]
    spm.SentencePieceTrainer.train(
        input=tmp, model_prefix=prefix, vocab_size=VOCAB, model_type="bpe", byte_fallback=True,
        character_coverage=1.0, num_threads=1, unk_id=UNK, bos_id=BOS, eos_id=EOS, pad_id=-1,
        # identity normalisation keeps newlines (as byte tokens) and spacing exactly, so
        # decode(encode(text)) == text and generated verses come out one per line
        normalization_rule_name="identity", remove_extra_whitespaces=False, split_digits=True,
        shuffle_input_sentence=False, minloglevel=2)
    os.remove(prefix + ".vocab")
    os.remove(tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--force", action="store_true", help="rebuild even if outputs exist")
    args = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    os.makedirs(os.path.dirname(TOKENIZER), exist_ok=True)
    print("[1/4] reading the King James Bible (bible -f Gen1:1-Rev22:21)", flush=True)
    verses = read_bible()
    train_text, val_text = split(verses)
    digest = hashlib.sha256((train_text + val_text).encode()).hexdigest()
    meta_path = os.path.join(DATA, "meta.json")
    if not args.force and os.path.exists(meta_path) and os.path.exists(TOKENIZER):
        if json.load(open(meta_path)).get("text_sha256") == digest:
            print("up to date:", meta_path)
            return
    print(f"      {len(verses)} verses; {len(HELD_OUT)} books held out for validation", flush=True)
    if args.force or not os.path.exists(TOKENIZER):
        print("[2/4] training the tokenizer (BPE, vocab 5000, byte fallback)", flush=True)
        train_tokenizer(train_text, TOKENIZER)
    else:
        print("[2/4] keeping the committed tokenizer", TOKENIZER, flush=True)
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=TOKENIZER)
    counts = {}
    for i, (name, text) in enumerate((("train", train_text), ("val", val_text))):
        print(f"[{3 + i}/4] tokenizing {name} ({len(text) / 1e6:.1f} MB)", flush=True)
        ids = np.array(sp.encode(text), dtype=np.uint16)
        ids.tofile(os.path.join(DATA, f"{name}.u16"))
        counts[name] = int(ids.size)
    meta = {"text_sha256": digest, "held_out_books": HELD_OUT, "tokens": counts, "vocab_size": VOCAB,
            "verses": len(verses), "tokenizer": os.path.relpath(TOKENIZER, ROOT)}
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    print(f"train {counts['train']} tokens, val {counts['val']} tokens -> {DATA}")


if __name__ == "__main__":
    sys.exit(main())
