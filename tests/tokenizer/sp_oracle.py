"""Trains small sentencepiece models here, under every normalization rule, both model types and
the whitespace, byte-fallback and symbol options, with Debian's spm_train on the King James Bible,
and writes what Python's sentencepiece (the library's own C++ through its binding) gives for them:
for each model, one JSON line per case with the text, its ids and the decode of those ids. Cases:
every case of tests/tokenizer/torture.json, and the KJV's verses (all of them for the four base
models, every 15th for the variants) plus a few blocks of many verses as one string.
tests/tokenizer/sp_oracle_test.cc then checks mixserve's tokenizer against these files.

  /usr/bin/python3 tests/tokenizer/sp_oracle.py WORK
"""
import json
import os
import subprocess
import sys
import time

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> spm_train options beyond the common ones
MODELS = {
    "bpe_nmt_nfkc": ["--model_type=bpe"],
    "unigram_nmt_nfkc": ["--model_type=unigram"],
    "bpe_identity": ["--model_type=bpe", "--normalization_rule_name=identity"],
    "unigram_identity": ["--model_type=unigram", "--normalization_rule_name=identity"],
}
for t in ("bpe", "unigram"):
    MODELS.update({
        f"{t}_nfkc": [f"--model_type={t}", "--normalization_rule_name=nfkc"],
        f"{t}_nfkc_cf": [f"--model_type={t}", "--normalization_rule_name=nfkc_cf"],
        f"{t}_nmt_nfkc_cf": [f"--model_type={t}", "--normalization_rule_name=nmt_nfkc_cf"],
        f"{t}_user_rules": [f"--model_type={t}", "--normalization_rule_tsv={rules}"],
        f"{t}_no_dummy_prefix": [f"--model_type={t}", "--add_dummy_prefix=false"],
        f"{t}_keep_whitespace": [f"--model_type={t}", "--remove_extra_whitespaces=false"],
        f"{t}_whitespace_suffix": [f"--model_type={t}", "--treat_whitespace_as_suffix=true"],
        f"{t}_suffix_raw": [f"--model_type={t}", "--treat_whitespace_as_suffix=true", "--add_dummy_prefix=false",
                            "--remove_extra_whitespaces=false", "--split_by_whitespace=false"],
        f"{t}_byte_fallback": [f"--model_type={t}", "--byte_fallback=true"],
        f"{t}_symbols": [f"--model_type={t}", "--user_defined_symbols=<sep>,God,東京,<|im_end|>",
                         "--control_symbols=<ctl>,<x>"],
    })
BASE = ("bpe_nmt_nfkc", "unigram_nmt_nfkc", "bpe_identity", "unigram_identity")
EXTRA_CASES = ["<sep> God said <ctl> to 東京<sep>x<|im_end|>", "A\tB 你好 AAA ＡＡ", "ﬁ① ＡＢＣ ｶﾀｶﾅ ㍻ Å Å"]


def main():
    work = sys.argv[1]
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    verses = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                            text=True).stdout.split("\n")[:-1]
    if len(verses) != 31102:
        raise SystemExit(f"bible printed {len(verses)} verses, expected 31102 (is bible-kjv installed?)")
    train = os.path.join(work, "train.txt")
    with open(train, "w") as f:  # a tenth of the text (trains in about a second) and the torture set
        f.write("\n".join(verses[::10]) + "\n")
        f.write("\n".join(json.load(open(os.path.join(HERE, "torture.json")))["cases"]) + "\n")
    rules = os.path.join(work, "rules.tsv")
    with open(rules, "w") as f:  # a user's rules: A -> a, 你 -> NI, ﬁ -> f i (code points in hex)
        f.write("41\t61\nE4 BD A0\t4E 49\nFB01\t66 20 69\n")
    torture = json.load(open(os.path.join(HERE, "torture.json")))["cases"] + EXTRA_CASES
    blocks = ["\n".join(verses[i:i + 400]) for i in range(0, len(verses), 7800)]
    manifest = []
    for k, (name, opts) in enumerate(MODELS.items()):
        prefix = os.path.join(work, name)
        cmd = ["spm_train", f"--input={train}", f"--model_prefix={prefix}", "--vocab_size=800", "--num_threads=2",
               "--minloglevel=2", "--character_coverage=0.9995"] + [o.format(rules=rules) for o in opts]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"spm_train failed for {name}: {r.stderr[-2000:]}")
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        cases = torture + blocks + (verses if name in BASE else verses[::15])
        with open(prefix + ".cases.jsonl", "w") as f:
            for text in cases:
                ids = sp.encode(text)
                f.write(json.dumps({"text": text, "ids": ids, "decoded": sp.decode(ids)}) + "\n")
        manifest.append({"name": name, "model": prefix + ".model", "cases": prefix + ".cases.jsonl",
                         "count": len(cases)})
        print(f"[{k + 1}/{len(MODELS)}] {name}: {len(cases)} cases", flush=True)
    with open(os.path.join(work, "manifest.json"), "w") as f:
        json.dump({"sentencepiece": spm.__version__, "models": manifest}, f, indent=1)
    print(f"sp_oracle: {len(MODELS)} models in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
