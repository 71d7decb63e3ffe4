"""What 8-bit and 4-bit weights cost in accuracy: for every model of the zoo (models/zoo), the
perplexity of the held-out King James books (reference/data.py's HELD_OUT: windows of the model's
context, every token after a window's first scored, as reference/train.py's validation loss) and
top-1 agreement — at every scored position of the held-out text, whether the most likely next
token is the float16 weights' (teacher-forced greedy agreement) — and greedy agreement: greedy continuations of the first 16 tokens of the first windows, to the end of
each window, token for token against the model's own float16 weights — for --weights int8 and
int4 on the CPU backend (bench/perplexity.cc).

  python3 bench/quant_eval.py [--bin build/release/bench/mixserve-perplexity] [--greedy 3]

Targets (issue #21): int8 within 1% of the float16 perplexity, int4 within 5%.
Writes bench/results/quant-accuracy-<date>.json and .png.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "reference"))
FORMATS = ["auto", "int8", "int4"]
TARGET = {"int8": 0.01, "int4": 0.05}


def held_out_text(path):
    import data  # reference/data.py: reads `bible` and splits off the held-out books

    _, val = data.split(data.read_bible())
    with open(path, "w") as f:
        f.write(val)
    return path


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def agreement(ref, got):
    """(tokens equal at the same position, tokens compared, tokens before the first difference)."""
    same = compared = prefix = 0
    for a, b in zip(ref, got):
        for i, (x, y) in enumerate(zip(a, b)):
            same += x == y
            compared += 1
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        prefix += first
    return same, compared, prefix


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["model"] for r in rows]
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.38
    for i, fmt in enumerate(["int8", "int4"]):
        vals = [100 * r[fmt]["ppl_increase"] for r in rows]
        ax.bar([x + (i - 0.5) * width for x in range(len(rows))], vals, width, label=fmt)
    for fmt, t in TARGET.items():
        ax.axhline(100 * t, ls="--", lw=0.8, color="C0" if fmt == "int8" else "C1")
    ax.set_xticks(range(len(rows)), names, rotation=30)
    ax.set_ylabel("held-out perplexity vs float16 (%)")
    ax.set_title("mixserve CPU backend: cost of quantized weights (dashed: the targets)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "bench", "mixserve-perplexity"))
    ap.add_argument("--zoo", default=os.path.join(ROOT, "models", "zoo"))
    ap.add_argument("--greedy", type=int, default=3, help="greedy continuations per model")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--work-dir", default=os.path.join(ROOT, "build", "quant-eval"))
    args = ap.parse_args()
    if not os.path.exists(args.bin):
        sys.exit(f"{args.bin} not built: cmake --build build/release --target mixserve-perplexity")
    os.makedirs(args.work_dir, exist_ok=True)
    text = held_out_text(os.path.join(args.work_dir, "held_out.txt"))
    models = sorted(glob.glob(os.path.join(args.zoo, "*", "config.json")))
    rows = []
    for n, cfg in enumerate(models):
        model = os.path.dirname(cfg)
        name = os.path.basename(model)
        res = {}
        for fmt in FORMATS:
            print(f"[{n + 1}/{len(models)}] {name} --weights {fmt}", flush=True)
            top1 = os.path.join(args.work_dir, f"{name}-{fmt}.top1")
            out = subprocess.run([args.bin, "--model", model, "--text", text, "--weights", fmt,
                                  "--greedy", str(args.greedy), "--threads", str(args.threads),
                                  "--top1-out", top1],
                                 check=True, capture_output=True, text=True).stdout
            res[fmt] = json.loads(out.strip().splitlines()[-1])
            res[fmt]["top1"] = np.fromfile(top1, dtype=np.int32)
        row = {"model": name, "f16_perplexity": res["auto"]["perplexity"],
               "tokens_scored": res["auto"]["tokens_scored"],
               "reference_val_perplexity": json.load(open(os.path.join(model, "train_log.json"))).get("best_val_ppl")}
        for fmt in ("int8", "int4"):
            same, compared, prefix = agreement(res["auto"]["greedy"], res[fmt]["greedy"])
            row[fmt] = {"perplexity": res[fmt]["perplexity"],
                        "ppl_increase": res[fmt]["perplexity"] / res["auto"]["perplexity"] - 1,
                        "greedy_same": same, "greedy_compared": compared,
                        "greedy_before_first_difference": prefix,
                        "top1_agreement": float(np.mean(res[fmt]["top1"] == res["auto"]["top1"])),
                        "within_target": res[fmt]["perplexity"] / res["auto"]["perplexity"] - 1 <= TARGET[fmt]}
        rows.append(row)
        print(f"    ppl f16 {row['f16_perplexity']:.3f}  int8 {row['int8']['perplexity']:.3f} "
              f"({100 * row['int8']['ppl_increase']:+.2f}%, top-1 {100 * row['int8']['top1_agreement']:.1f}%, "
              f"greedy {row['int8']['greedy_same']}/{compared})  int4 {row['int4']['perplexity']:.3f} "
              f"({100 * row['int4']['ppl_increase']:+.2f}%, top-1 {100 * row['int4']['top1_agreement']:.1f}%, "
              f"greedy {row['int4']['greedy_same']}/{compared})", flush=True)
    date = datetime.date.today().isoformat()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result = {"benchmark": "quant-accuracy", "date": date, "commit": commit, "cpu": cpu_model(),
              "device": "CPU", "held_out_books": __import__("data").HELD_OUT,
              "greedy_continuations": args.greedy, "targets": TARGET, "models": rows,
              "command": " ".join(sys.argv)}
    os.makedirs(args.out_dir, exist_ok=True)
    base = os.path.join(args.out_dir, f"quant-accuracy-{date}")
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
    try:
        plot(rows, base + ".png")
    except Exception as e:  # the JSON is kept whatever happens to the plot
        print(f"plot failed: {e}")
    print(f"wrote {os.path.relpath(base, ROOT)}.json / .png")


if __name__ == "__main__":
    main()
