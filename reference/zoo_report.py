"""Writes docs/model-zoo.md, docs/model-zoo.json and docs/model-zoo-curves.png from the training
logs models/zoo/*/train_log.json: per mixer its size, validation loss and perplexity against a
unigram baseline, the learning curves, text from every model for the same prompt and seed (as the
Extractor paper's Table 2), and the commands and seeds that reproduce each model.

  /usr/bin/python3 reference/zoo_report.py
  /usr/bin/python3 reference/zoo_report.py --zoo /tmp/trial --docs /tmp/trial-docs   # a trial run
"""
import argparse
import glob
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)


# `bible`'s abbreviations of the held-out books, spelled out for the page
BOOK_NAMES = {"Est": "Esther", "Lam": "Lamentations", "Hab": "Habakkuk", "Phmn": "Philemon", "2Pet": "2 Peter"}


def precision(log):
    """Logs written before train.py recorded --tf32 came from a trainer that always enabled TF32
    matmuls on CUDA."""
    if log.get("amp") == "bf16":
        return "bf16 autocast"
    tf32 = log.get("tf32", "cuda" in str(log.get("device", "")).lower() or "NVIDIA" in str(log.get("device", "")))
    return "fp32 with TF32 matmuls" if tf32 else "fp32"


def unigram_baseline(data_dir, vocab_size):
    """Validation loss (nats/token) of the unigram distribution of the training tokens, add-one
    smoothed so that a token unseen in training costs a finite amount."""
    train = np.fromfile(os.path.join(data_dir, "train.u16"), dtype="<u2")
    val = np.fromfile(os.path.join(data_dir, "val.u16"), dtype="<u2")
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64) + 1
    logp = np.log(counts / counts.sum())
    return float(-logp[val].mean())


def plot(logs, baseline, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for i, log in enumerate(logs):  # tab10 repeats after 10 lines: dashed lines from then on
        ax.plot(log["val_steps"], log["val_loss"], marker="." if i < 10 else "x", linestyle="-" if i < 10 else "--",
                label=f"{log['name']} ({log['best_val_loss']:.3f})")
    lo = min(min(l["val_loss"]) for l in logs)
    hi = max(max(l["val_loss"]) for l in logs)
    ax.set_ylim(lo - 0.05, min(hi, lo + 1.5) + 0.05)  # the interesting end, not the first evals
    if baseline < lo + 1.5:
        ax.axhline(baseline, color="gray", linestyle=":", label=f"unigram ({baseline:.3f})")
    ax.set_xlabel(f"training step (batch {logs[0]['batch']} × {logs[0]['config']['max_seq_len']} tokens)")
    ax.set_ylabel("validation loss (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend(ncol=2, fontsize=8)
    ax.set_title("mixserve zoo on the King James Bible: held-out-book validation loss")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def layer_params(log):
    """The first layer's size parameters, e.g. 'heads 4' or 'window 32' (eps and the like left out)."""
    layer = log["config"]["layers"][0]
    return ", ".join(f"{k} {layer[k]}" for k in ("heads", "window", "features") if k in layer) or "—"


def relative(command):
    """A logged command line with this checkout's paths made relative to the repository."""
    return command.replace(ROOT + "/", "")


def notes(logs, baseline):
    out = []
    for l in logs:
        if l["best_val_loss"] > baseline - 1.0:
            out.append(f"- `{l['name']}` does not clearly beat the unigram baseline "
                       f"({l['best_val_loss']:.3f} vs {baseline:.3f}): undertrained or broken.")
        if l.get("stopped_by_time_budget"):
            planned = f" of the run's {l['steps_target']}" if "steps_target" in l else ""
            out.append(f"- `{l['name']}` trained {l['steps_done']}{planned} steps before its time budget stopped it: "
                       "the same batches in the same order, only fewer of them.")
        elif l["best_step"] < 0.6 * l["steps_done"]:
            out.append(f"- `{l['name']}` reached its best validation loss at step {l['best_step']} of "
                       f"{l['steps_done']} and got worse afterwards (it overfits the ~1 M training tokens); "
                       "the kept checkpoint is the best one.")
    return out


def kilo(rate):
    return f"{rate / 1e3:.0f} k" if rate else "—"  # logs of older trainers lack the rate


def reproduce(logs):
    """Each distinct training command with the models it trained, paths relative."""
    commands = {}
    for l in logs:
        commands.setdefault(relative(l["command"]), []).append(l["name"])
    out = []
    for cmd, names in commands.items():
        out += [f"# {', '.join(names)}", cmd]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zoo", default=os.path.join(ROOT, "models", "zoo"), help="folder of model directories")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs"), help="where the report goes")
    ap.add_argument("--data", default=os.path.join(HERE, "data"), help="train.u16, val.u16, meta.json")
    ap.add_argument("--prompt", default="And God said")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--top-p", type=float, default=0.6)
    ap.add_argument("--tokens", type=int, default=60)
    args = ap.parse_args()

    import torch
    import sentencepiece as spm
    from generate import generate, tokenizer_path
    from mixserve_ref.model import Model
    torch.set_num_threads(2)
    paths = sorted(glob.glob(os.path.join(args.zoo, "*", "train_log.json")))
    if not paths:
        sys.exit(f"no training logs under {args.zoo}/*/")
    logs = []
    for p in paths:
        with open(p) as f:
            logs.append(json.load(f))
    logs.sort(key=lambda l: l["best_val_loss"])
    with open(os.path.join(args.data, "meta.json")) as f:
        meta = json.load(f)
    base = unigram_baseline(args.data, logs[0]["config"]["vocab_size"])
    os.makedirs(args.docs, exist_ok=True)

    texts, files = {}, {}
    for log in logs:
        model_dir = os.path.join(args.zoo, log["name"])
        sp = spm.SentencePieceProcessor(model_file=tokenizer_path(model_dir))
        texts[log["name"]] = generate(Model.load_dir(model_dir), sp, args.prompt, args.tokens, args.top_p, args.seed)
        files[log["name"]] = os.path.getsize(os.path.join(model_dir, "model.safetensors"))
        print("generated:", log["name"], flush=True)
    curves = "model-zoo-curves.png"
    plot(logs, base, os.path.join(args.docs, curves))

    first = logs[0]
    cfg = first["config"]
    rows = [f"| `{l['name']}` | {layer_params(l)} | {l['params'] / 1e6:.2f} M | {files[l['name']] / 1e6:.1f} MB | "
            f"{l['best_val_loss']:.4f} | {math.exp(l['best_val_loss']):.1f} | {l['best_step']} / {l['steps_done']} | "
            f"{l['train_tokens']:,} | {l['wall_s']:.0f} s | {kilo(l.get('tokens_per_s'))} | "
            f"{l['device']} |" for l in logs]
    books = ", ".join(BOOK_NAMES.get(b, b) for b in meta["held_out_books"])
    default = os.path.join(os.path.dirname(os.path.abspath(args.zoo)), "default")
    md = [
        "# Model zoo",
        "",
        "One model per mixer, trained with the Extractor paper's protocol (Section 6): the same data, the same",
        "batches in the same order, the same initialisation rule and optimiser; only the mixer differs.",
        f"AdamW lr {first['lr']:g} ({first.get('lr_schedule', 'constant')}), betas (0.9, 0.999), weight decay "
        f"{first.get('weight_decay', 0.01):g}, dropout {first.get('dropout', 0.1):g}, weights N(0, 0.01), biases 0, "
        f"gradient clipping 1.0, batch {first['batch']} × {cfg['max_seq_len']} tokens, precision "
        f"{precision(first)}.",
        f"Every model: u = {cfg['vocab_size']}, d = {cfg['d_model']}, {cfg['n_layers']} layers of one mixer, "
        f"c = {cfg['ffn_dim']}, l = {cfg['max_seq_len']}, {cfg['activation']}, tied embeddings, embeddings × √d, "
        "learned positions (RWKV: none, with ln0 and its channel-mix FFN, as RWKV-4), float16 weights.",
        "SHE uses a window W = 32 (its W·d² extraction weights would not fit the 40 MB budget of models/ at",
        "W = 128); HE, WE and ME use W = l = 128; AFT-local s = 32; Performer 32 random features per head.",
        "",
        "Data (`reference/data.py`): the King James Bible (Debian `bible-kjv`), one verse per line, a blank line",
        f"between books; whole books held out for validation ({books}): {meta['tokens']['train']:,} training and",
        f"{meta['tokens']['val']:,} validation tokens with the sentencepiece BPE tokenizer `models/tokenizer.model`",
        f"(vocab {meta['vocab_size']}, byte fallback, trained on the training books only). Validation loss is the mean",
        f"over {first.get('val_windows', 'all')} fixed windows of the held-out books; each model keeps its checkpoint",
        "with the best validation loss.",
        "",
        f"**Unigram baseline** (training-token frequencies, add-one smoothed): validation loss {base:.4f}, "
        f"perplexity {math.exp(base):.0f}.",
    ]
    if os.path.islink(default):
        md.append(f"**Default model** (`models/default`): `{os.path.basename(os.path.realpath(default))}`.")
    md += [
        "",
        "| mixer | layer | params | file | val loss | val ppl | best step / steps | train tokens | wall | tokens/s | device |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        f"![validation loss per mixer]({curves})",
        "",
    ]
    remarks = notes(logs, base)
    if remarks:
        md += ["Notes:", "", *remarks, ""]
    md += [f"## Generated text (prompt \"{args.prompt}\", seed {args.seed}, top-p {args.top_p}, "
           f"{args.tokens} tokens, `reference/generate.py`)", ""]
    for l in logs:
        md += [f"**{l['name']}** (val loss {l['best_val_loss']:.3f})", "",
               "> " + texts[l["name"]].rstrip("\n").replace("\n", "  \n> "), ""]
    md += ["## Reproduce", "", "```sh", "/usr/bin/python3 reference/data.py  # corpus, tokenizer, token files",
           *reproduce(logs), "/usr/bin/python3 reference/zoo_report.py  # this page", "```", "",
           f"Seeds: model init `--seed {first['seed']}`, batch order `--data-seed {first['data_seed']}`. "
           f"Trained with PyTorch {first['torch']} on {first['device']}. GPU training is not bit-reproducible "
           "(atomic adds in the backward pass), so a rerun gives close but not identical losses.", ""]
    with open(os.path.join(args.docs, "model-zoo.md"), "w") as f:
        f.write("\n".join(md))

    summary = {"unigram_val_loss": base, "prompt": args.prompt, "seed": args.seed, "top_p": args.top_p,
               "data": {"train_tokens": meta["tokens"]["train"], "val_tokens": meta["tokens"]["val"],
                        "held_out_books": meta["held_out_books"]},
               "models": {l["name"]: {
                   "val_loss": l["best_val_loss"], "val_ppl": math.exp(l["best_val_loss"]), "params": l["params"],
                   "file_bytes": files[l["name"]], "best_step": l["best_step"], "steps": l["steps_done"],
                   "train_tokens": l["train_tokens"], "wall_s": l["wall_s"], "tokens_per_s": l.get("tokens_per_s"),
                   "device": l["device"], "torch": l["torch"], "seed": l["seed"], "data_seed": l["data_seed"],
                   "stopped_by_time_budget": bool(l.get("stopped_by_time_budget")),
                   "command": relative(l["command"]), "generated": texts[l["name"]]} for l in logs}}
    if os.path.islink(default):
        summary["default"] = os.path.basename(os.path.realpath(default))
    with open(os.path.join(args.docs, "model-zoo.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.join(args.docs, 'model-zoo.md')}, model-zoo.json, {curves}")


if __name__ == "__main__":
    main()
