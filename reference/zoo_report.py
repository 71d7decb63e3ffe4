"""Writes docs/model-zoo.md, docs/model-zoo.json and docs/model-zoo-curves.png from the training
logs in models/zoo/*/train_log.json: validation loss and perplexity per mixer against a unigram
baseline, the learning curves, and text from every model for the same prompt and seed.

  /usr/bin/python3 reference/zoo_report.py
"""
import glob
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROMPT, SEED, TOP_P, TOKENS = "And God said", 7, 0.6, 60


def unigram_baseline():
    """Validation loss of the unigram distribution of the training tokens (add-one smoothed)."""
    train = np.fromfile(os.path.join(HERE, "data", "train.u16"), dtype=np.uint16)
    val = np.fromfile(os.path.join(HERE, "data", "val.u16"), dtype=np.uint16)
    counts = np.bincount(train, minlength=5000).astype(np.float64) + 1
    logp = np.log(counts / counts.sum())
    return float(-logp[val].mean())


def plot(logs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for i, log in enumerate(sorted(logs, key=lambda l: l["best_val_loss"])):
        ax.plot(log["val_steps"], log["val_loss"], marker="." if i < 10 else "x", linestyle="-" if i < 10 else "--",
                label=f"{log['name']} ({log['best_val_loss']:.3f})")  # tab10 repeats after 10 lines
    ax.set_xlabel("training step (batch 64 × 128 tokens)")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_ylim(3.3, 4.6)
    ax.grid(alpha=0.3)
    ax.legend(ncol=2, fontsize=8)
    ax.set_title("mixserve zoo on the King James Bible: held-out-book validation loss")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    import torch
    import sentencepiece as spm
    from generate import generate
    from mixserve_ref.model import Model
    torch.set_num_threads(2)
    logs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(ROOT, "models", "zoo", "*", "train_log.json")))]
    if not logs:
        sys.exit("no training logs under models/zoo/")
    base = unigram_baseline()
    sp = spm.SentencePieceProcessor(model_file=os.path.join(ROOT, "models", "tokenizer.model"))
    texts = {}
    for log in logs:
        model = Model.load_dir(os.path.join(ROOT, "models", "zoo", log["name"]))
        texts[log["name"]] = generate(model, sp, PROMPT, TOKENS, TOP_P, SEED)
        print("generated:", log["name"], flush=True)
    plot(logs, os.path.join(ROOT, "docs", "model-zoo-curves.png"))
    ranked = sorted(logs, key=lambda l: l["best_val_loss"])
    default = os.path.basename(os.path.realpath(os.path.join(ROOT, "models", "default")))
    rows = []
    for l in ranked:
        size = os.path.getsize(os.path.join(ROOT, "models", "zoo", l["name"], "model.safetensors"))
        rows.append(f"| `{l['name']}` | {l['params'] / 1e6:.2f} M | {size / 1e6:.1f} MB | {l['best_val_loss']:.4f} | "
                    f"{math.exp(l['best_val_loss']):.1f} | {l['best_step']} / {l['steps_done']} | "
                    f"{l['train_tokens'] / 1e6:.1f} M | {l['wall_s']:.0f} s |")
    cmd = ranked[0]["command"]
    md = [
        "# Model zoo",
        "",
        "One model per mixer, trained with the Extractor paper's protocol (Section 6): the same data, the same",
        "batches in the same order, the same initialisation rule and optimiser (AdamW, lr 1e-3, betas (0.9, 0.999),",
        "dropout 0.1, weights N(0, 0.01), biases 0, batch 64 × 128 tokens); only the mixer differs.",
        f"Every model: u = 5000, d = 128, 3 layers, c = 512, l = 128, 4 heads where a mixer has heads, tied embeddings,",
        "learned positions (RWKV: none, with ln0 and its channel-mix FFN, as RWKV-4), float16 weights.",
        "SHE uses a window W = 32 (its W·d² extraction weights would not fit the 40 MB budget at W = 128); HE, WE",
        "and ME use W = l = 128; AFT-local s = 32; Performer 32 random features per head.",
        "",
        "Data: the King James Bible (Debian `bible-kjv`), one verse per line; whole books held out for validation",
        "(Ruth, Esther, Lamentations, Joel, Jonah, Habakkuk, Mark, Titus, Philemon, 2 Peter, Jude): "
        f"{json.load(open(os.path.join(HERE, 'data', 'meta.json')))['tokens']['train']:,} training and "
        f"{json.load(open(os.path.join(HERE, 'data', 'meta.json')))['tokens']['val']:,} validation tokens "
        "with the sentencepiece BPE tokenizer (vocab 5000, byte fallback) `models/tokenizer.model`.",
        "",
        f"Trained on {ranked[0]['device']} with PyTorch {ranked[0]['torch']}, all twelve at once "
        "(`scripts/gpu-train`); each model keeps its checkpoint with the best validation loss.",
        "",
        f"**Unigram baseline** (training-token frequencies): validation loss {base:.4f}, perplexity {math.exp(base):.0f}.",
        f"**Default model** (`models/default`): `{default}`.",
        "",
        "| mixer | params | file | val loss | val ppl | best step / steps | train tokens | wall |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        "![validation loss per mixer](model-zoo-curves.png)",
        "",
        "Notes on what the curves show:",
        "",
        "- SHE overfits: with its 0.5 M extraction parameters per layer and only ~1 M training tokens it reaches its",
        "  best validation loss early and then degrades, unlike the paper's 8.4 M-token runs where it wins.",
    ]
    short = [l for l in logs if l.get("stopped_by_time_budget")]
    for l in short:
        target = l["command"].split("--steps")[1].split()[0] if "--steps" in l["command"] else "?"
        md.append(f"- `{l['name']}` trained {l['steps_done']} of the run's {target} steps before the per-model time budget stopped it (its parallel WKV form is the slowest"
                  " to train); it saw the same batches in the same order, only fewer of them.")
    md += ["", f"## Generated text (prompt \"{PROMPT}\", seed {SEED}, top-p {TOP_P}, {TOKENS} tokens, "
           "`reference/generate.py`)", ""]
    for l in ranked:
        md += [f"**{l['name']}** (val loss {l['best_val_loss']:.3f})", "", "> " + texts[l["name"]].replace("\n", "  \n> "), ""]
    md += ["## Reproduce", "", "```sh", "/usr/bin/python3 reference/data.py        # corpus + tokenizer",
           "scripts/gpu-train                         # all twelve on one GPU (or:)",
           cmd.replace(ROOT + "/", ""), "/usr/bin/python3 reference/zoo_report.py  # this page", "```", "",
           f"Seeds: model init `--seed {ranked[0]['seed']}`, batch order `--data-seed {ranked[0]['data_seed']}`.", ""]
    with open(os.path.join(ROOT, "docs", "model-zoo.md"), "w") as f:
        f.write("\n".join(md))
    summary = {"unigram_val_loss": base, "default": default, "models": {
        l["name"]: {"val_loss": l["best_val_loss"], "val_ppl": math.exp(l["best_val_loss"]), "params": l["params"],
                    "best_step": l["best_step"], "steps": l["steps_done"], "device": l["device"]} for l in logs}}
    with open(os.path.join(ROOT, "docs", "model-zoo.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("wrote docs/model-zoo.md")


if __name__ == "__main__":
    main()
