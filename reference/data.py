"""The training corpus: the King James Bible (Debian's bible-kjv), split by book, and its
sentencepiece tokenizer (BPE, byte fallback, vocab 5000 as in the Extractor paper).

One command regenerates everything (idempotent, a few seconds):

  /usr/bin/python3 reference/data.py

Writes reference/data/{train,val}.u16 (flat little-endian uint16 token ids) and meta.json; these
are gitignored and carried to the GPU machine, which has no `bible` command. The tokenizer
models/tokenizer.model is committed: it is retrained in memory on every run and compared with the
committed file, which is only replaced with --retrain-tokenizer (the zoo was trained with it).

Text layout: one verse per line, verse references stripped, a blank line between books. The text
is tokenized as one stream, so a newline is the byte token <0x0A>.
"""
import argparse
import hashlib
import io
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
UNK, BOS, EOS = 0, 1, 2  # no pad id; BOS/EOS are never inserted into the token streams
# Whole books held out for validation (4.6% of the tokens), spread over both testaments:
# law/history, wisdom, prophets, one Gospel, epistles. Names as `bible` abbreviates them.
HELD_OUT = ["Ruth", "Est", "Lam", "Joel", "Jonah", "Hab", "Mark", "Titus", "Phmn", "2Pet", "Jude"]
VERSE = re.compile(r"^([0-9]?[A-Za-z]+)[0-9]+:[0-9]+ (.*)$")
SPM_OPTIONS = dict(
    vocab_size=VOCAB, model_type="bpe", byte_fallback=True, character_coverage=1.0,
    unk_id=UNK, bos_id=BOS, eos_id=EOS, pad_id=-1,
    # one thread and no sampling or shuffling: the same text gives the same model, byte for byte
    num_threads=1, input_sentence_size=0, shuffle_input_sentence=False,
    # identity normalisation keeps spacing exactly, so decode(encode(text)) == text and
    # generated verses come out one per line
    normalization_rule_name="identity", remove_extra_whitespaces=False, split_digits=True,
    minloglevel=2)


def read_bible():
    """[(book, verse text)] in canonical order, from `bible -f Gen1:1-Rev22:21`."""
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    verses = []
    for line in out.splitlines():
        m = VERSE.match(line)
        if m:
            verses.append((m.group(1), m.group(2).strip()))
    if len(verses) != 31102:  # the KJV has 31,102 verses; anything else means a broken install
        raise RuntimeError(f"bible printed {len(verses)} verses, expected 31102")
    return verses


def split(verses):
    """(train_text, val_text): a verse per line, a blank line between books; the HELD_OUT books
    go to validation, every other book to training."""
    train, val, last = [], [], None
    for book, text in verses:
        dst = val if book in HELD_OUT else train
        if book != last and dst:
            dst.append("")
        dst.append(text)
        last = book
    return "\n".join(train) + "\n", "\n".join(val) + "\n"


def train_tokenizer(train_text):
    """The serialized sentencepiece model trained on the training text only. Sentences come from
    an iterator and the model goes to memory, so no file path ends up inside the model."""
    import sentencepiece as spm
    model = io.BytesIO()
    lines = [line for line in train_text.splitlines() if line]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, **SPM_OPTIONS)
    return model.getvalue()


def sha256(data):
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def write_if_changed(path, data):
    """Writes bytes unless the file already holds exactly them; returns whether it wrote."""
    if os.path.exists(path) and read_bytes(path) == data:
        return False
    with open(path, "wb") as f:
        f.write(data)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--retrain-tokenizer", action="store_true",
                    help="replace models/tokenizer.model by the retrained one if they differ")
    args = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    os.makedirs(os.path.dirname(TOKENIZER), exist_ok=True)

    print("[1/4] reading the King James Bible (bible -f Gen1:1-Rev22:21)", flush=True)
    verses = read_bible()
    train_text, val_text = split(verses)
    held = sum(1 for b, _ in verses if b in HELD_OUT)
    print(f"      {len(verses)} verses, {len(HELD_OUT)} books ({held} verses) held out for validation")

    print(f"[2/4] training the tokenizer on the training text (BPE, vocab {VOCAB}, byte fallback)", flush=True)
    model = train_tokenizer(train_text)
    if not os.path.exists(TOKENIZER) or args.retrain_tokenizer:
        changed = write_if_changed(TOKENIZER, model)
        print(f"      {'wrote' if changed else 'unchanged:'} {os.path.relpath(TOKENIZER, ROOT)}")
    elif read_bytes(TOKENIZER) == model:
        print(f"      identical to the committed {os.path.relpath(TOKENIZER, ROOT)}")
    else:
        print(f"      WARNING: differs from the committed {os.path.relpath(TOKENIZER, ROOT)} (another "
              "sentencepiece version?); keeping the committed one (--retrain-tokenizer replaces it)")

    import sentencepiece as spm
    tokenizer_bytes = read_bytes(TOKENIZER)
    sp = spm.SentencePieceProcessor(model_proto=tokenizer_bytes)
    counts = {}
    for i, (name, text) in enumerate((("train", train_text), ("val", val_text))):
        print(f"[{3 + i}/4] tokenizing {name} ({len(text) / 1e6:.2f} MB of text)", flush=True)
        ids = np.array(sp.encode(text), dtype="<u2")
        if sp.decode(ids.tolist()) != text:
            raise RuntimeError(f"{name}: the tokenizer does not round-trip the text")
        counts[name] = int(ids.size)
        write_if_changed(os.path.join(DATA, f"{name}.u16"), ids.tobytes())

    meta = {"text_sha256": {"train": sha256(train_text), "val": sha256(val_text)},
            "held_out_books": HELD_OUT, "verses": len(verses), "held_out_verses": held,
            "tokens": counts, "val_fraction": round(counts["val"] / (counts["train"] + counts["val"]), 4),
            "vocab_size": VOCAB, "unk_id": UNK, "bos_id": BOS, "eos_id": EOS, "pad_id": -1,
            "dtype": "uint16 little-endian", "tokenizer": os.path.relpath(TOKENIZER, ROOT),
            "tokenizer_sha256": sha256(tokenizer_bytes)}
    write_if_changed(os.path.join(DATA, "meta.json"), (json.dumps(meta, indent=1) + "\n").encode())
    print(f"done: train {counts['train']:,} tokens, val {counts['val']:,} tokens "
          f"({100 * meta['val_fraction']:.1f}%) -> {os.path.relpath(DATA, ROOT)}/")


if __name__ == "__main__":
    sys.exit(main())
