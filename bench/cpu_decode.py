"""CPU decode benchmark: mixserve's CPU backend beside the PyTorch reference's decode loop, on the
same models and positions, in the same run.

  /usr/bin/python3 bench/cpu_decode.py [--threads 2] [--ref-threads 1,2] [--batches 1,8,64] [--mixers all]

The reference side is reference/bench_decode.py: the reference models' step written for speed
(reference/fast_step.py: torch.inference_mode, fused projections, state updated in place; checked
against Model.step at start-up), timed over repeated passes of the same positions as mixserve-bench
(≥ 64 steps and ≥ 1 s a figure), at each of --ref-threads; its best thread count's median counts.

Models: the shipped default and, per mixer, the Extractor paper's configuration (u=5000, l=128,
d=128, c=512, m=18; random weights — speed does not depend on their values — stored in float16
like the shipped models; both sides compute in float32). Writes
bench/results/cpu-decode-<host>-<date>.json and a PNG of tokens/s and speedups.
Targets (issue P0-2): ≥ 10× the reference at batch 1, ≥ 2× at batch 64.
"""
import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "reference"))
from mixserve_ref.mixers import MIXERS as TABLE  # noqa: E402
from floor import host_contended  # noqa: E402  (bench/, this script's folder)

MIXERS = list(TABLE)


def paper_model(kind, out):
    """The Extractor paper's config with `kind` in every layer, written once (seed 0)."""
    import torch
    from mixserve_ref.config import ModelConfig
    from mixserve_ref.model import Model
    path = os.path.join(out, kind)
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return path
    layer = {"mixer": kind, **TABLE[kind].paper_layer}  # e.g. attention's 32 heads, the paper's best
    extra = TABLE[kind].model_overrides
    cfg = ModelConfig(vocab_size=5000, d_model=128, n_layers=18, ffn_dim=512, max_seq_len=128,
                      embed_scale=128 ** 0.5, layers=[layer] * 18, **extra)
    torch.manual_seed(0)
    Model(cfg).save_dir(path, dtype=torch.float16)  # float16 weights, as the shipped models
    return path


def run_json_lines(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def plot(rows, path, threads):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    batches = sorted({r["batch"] for r in rows})
    names = list(dict.fromkeys(r["name"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    width = 0.8 / len(batches)
    for i, b in enumerate(batches):
        sp = [next((r["speedup"] for r in rows if r["name"] == n and r["batch"] == b), 0) for n in names]
        axes[0].bar([x + i * width for x in range(len(names))], sp, width, label=f"batch {b}")
        ms = [next((r["mixserve_tok_s"] for r in rows if r["name"] == n and r["batch"] == b), 0) for n in names]
        axes[1].bar([x + i * width for x in range(len(names))], ms, width, label=f"batch {b}")
    for ax in axes:
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(names))])
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
    axes[0].axhline(10, color="red", lw=0.8, ls="--")
    axes[0].axhline(2, color="orange", lw=0.8, ls="--")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("speedup over the PyTorch reference loop (×)")
    axes[0].set_title(f"mixserve CPU ({threads} threads) vs PyTorch reference (its best thread count)")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("mixserve decode tokens/s")
    axes[1].set_title("mixserve CPU decode throughput")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--mixers", default="all")
    ap.add_argument("--steps", type=int, default=24, help="decode steps timed by mixserve")
    ap.add_argument("--ref-threads", default="1,2",
                    help="thread counts the reference tries; its best median step is compared")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating runs of both sides per model; each side's figure is its median round")
    ap.add_argument("--models-dir", default="/tmp/mixserve-bench-models")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "bench", "mixserve-bench"))
    args = ap.parse_args()
    mixers = MIXERS if args.mixers == "all" else args.mixers.split(",")
    os.makedirs(args.models_dir, exist_ok=True)
    models = [("default (" + os.path.basename(os.path.realpath(os.path.join(ROOT, "models", "default"))) + ", 3 layers)",
               os.path.join(ROOT, "models", "default"))]
    for i, k in enumerate(mixers):
        print(f"[models {i + 1}/{len(mixers)}] paper config, {k}", flush=True)
        models.append((f"{k} (paper, 18 layers)", paper_model(k, args.models_dir)))
    load_before = os.getloadavg()
    rows = []
    for i, (name, path) in enumerate(models):
        print(f"[bench {i + 1}/{len(models)}] {name}", flush=True)
        # Both sides alternate, round after round, so that a burst of other work on a shared
        # machine lands on both, and each side's figure is the median of its rounds.
        ours_rounds, ref_rounds = [], []
        for _ in range(args.rounds):
            ours_rounds.append(run_json_lines([args.bin, "--model", path, "--batches", args.batches, "--steps",
                                               str(args.steps), "--threads", str(args.threads)]))
            ref_rounds.append(run_json_lines(["/usr/bin/python3", os.path.join(ROOT, "reference", "bench_decode.py"),
                                              "--model", path, "--batches", args.batches, "--steps", str(args.steps),
                                              "--threads", args.ref_threads]))
        ours = ours_rounds[0]
        for b, o in enumerate(ours):
            ours_ms = [rnd[b]["ms_per_step_median"] for rnd in ours_rounds]
            ref_ms = [rnd[b]["ms_per_step_median"] for rnd in ref_rounds]
            ms, ref = statistics.median(ours_ms), statistics.median(ref_ms)
            row = {"name": name, "model": path, "batch": o["batch"], "mixserve_ms": ms,
                   "mixserve_tok_s": o["batch"] / (ms / 1e3), "reference_ms": ref,
                   "reference_tok_s": o["batch"] / (ref / 1e3), "speedup": ref / ms,
                   "mixserve_ms_rounds": ours_ms, "reference_ms_rounds": ref_ms,
                   "reference_threads_rounds": [rnd[b]["threads"] for rnd in ref_rounds],
                   "reference_ms_by_threads": {t: statistics.median(rnd[b]["by_threads"][t]["ms_per_step_median"]
                                                                    for rnd in ref_rounds)
                                               for t in ref_rounds[0][b]["by_threads"]}}
            rows.append(row)
            by_t = "  ".join(f"{t} thr {ms:.3f}" for t, ms in row["reference_ms_by_threads"].items())
            print(f"   batch {row['batch']:3d}: mixserve {row['mixserve_ms']:8.3f} ms  reference {row['reference_ms']:8.3f} ms"
                  f" ({by_t})  speedup {row['speedup']:6.1f}x", flush=True)
    date = datetime.date.today().isoformat()
    host = socket.gethostname()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result = {"benchmark": "cpu-decode", "date": date, "host": host, "cpu": cpu, "cores": os.cpu_count(),
              "commit": commit, "load_before": list(load_before), "load_after": list(os.getloadavg()),
              "host_contended": host_contended(load_before[0]),
              "threads": args.threads, "reference_threads": args.ref_threads,
              "reference_loop": "reference/bench_decode.py (fast_step: inference_mode, fused projections, "
                                "in-place state; per figure >= 64 steps and >= 1 s, perf_counter_ns)",
              "torch": ref_rounds[0][0]["torch"] if ref_rounds and ref_rounds[0] else "",
              "gemm": ours[0].get("gemm") if ours else "", "rows": rows,
              "rounds": args.rounds,
              "note": "ratios measured side by side in one run, both sides alternating for `rounds` rounds (each "
                      "figure its side's median round); absolute times on a shared 2-core VM are noisy"}
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    stem = os.path.join(ROOT, "bench", "results", f"cpu-decode-{date}")
    with open(stem + ".json", "w") as f:
        json.dump(result, f, indent=1)
    plot(rows, stem + ".png", args.threads)
    worst1 = min((r for r in rows if r["batch"] == 1), key=lambda r: r["speedup"], default=None)
    worst64 = min((r for r in rows if r["batch"] == 64), key=lambda r: r["speedup"], default=None)
    if worst1:
        print(f"lowest speedup at batch 1: {worst1['speedup']:.1f}x ({worst1['name']})")
    if worst64:
        print(f"lowest speedup at batch 64: {worst64['speedup']:.1f}x ({worst64['name']})")
    print("wrote", stem + ".json", stem + ".png")


if __name__ == "__main__":
    main()
