"""Writes tests/golden/tokenizer_cases.json: what the Python sentencepiece library gives for
models/tokenizer.model — encodings of KJV verses and edge cases, decodings of id sequences with
control, unknown and byte tokens. mixserve's own C++ tokenizer must give exactly the same.

  /usr/bin/python3 reference/tokenizer_cases.py
"""
import json
import os
import random
import subprocess

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    sp = spm.SentencePieceProcessor(model_file=os.path.join(ROOT, "models", "tokenizer.model"))
    rng = random.Random(11)
    bible = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True).stdout.splitlines()
    verses = [l.split(" ", 1)[1] for l in bible if " " in l]
    texts = rng.sample(verses, 600) + ["\n".join(rng.sample(verses, 5)) for _ in range(30)]
    texts += ["", " ", "  two  spaces", "trailing ", "\ttab", "\n", "\nAnd he said", "a\n\nb", "naïve café — 東京 😀",
              "ASCII only", "UPPERCASE LORD GOD", "1234567890", "x" * 300, "\u0000zero", "mixed 東京 and\ttabs\r\n",
              "emoji 👍🏽 and ∑ ∞ ≠", "🦀" * 5, "Ω≈ç√∫˜µ≤≥÷", " leading", "trailing\n", "And God said, Let there be light"]
    alphabet = list("abcdefghij ,.;:'\n\tABC") + ["é", "ü", "東", "京", "😀", "∑", "\u2581", "\u00a0"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(200)]
    encode = [{"text": t, "ids": sp.encode(t)} for t in texts]
    V = sp.get_piece_size()
    special = [0, 1, 2] + [sp.piece_to_id("<0x%02X>" % b) for b in (0x0A, 0x41, 0xE6, 0x9D, 0xB1, 0xF0, 0x9F, 0xFF, 0x80)]
    decode = []
    for _ in range(400):
        ids = [rng.choice(special) if rng.random() < 0.4 else rng.randrange(V) for _ in range(rng.randint(1, 12))]
        decode.append({"ids": ids, "text": sp.decode(ids)})
    for c in encode[:100]:
        decode.append({"ids": c["ids"], "text": sp.decode(c["ids"])})
    out = {"model": "models/tokenizer.model", "sentencepiece": spm.__version__, "encode": encode, "decode": decode}
    path = os.path.join(ROOT, "tests", "golden", "tokenizer_cases.json")
    with open(path, "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
    print(f"wrote {len(encode)} encodings and {len(decode)} decodings to {path}")


if __name__ == "__main__":
    main()
