"""Batch-1 decode of every paper-configuration mixer against its own floor (#21: a step within
1.25× of it): the step of mixserve-bench beside mixserve-gemv-floor-bench's projections of the same
mixer (the matrices its CPU layer streams, fused as it fuses them, with nothing between them),
alternated over rounds in one run on this host.

  /usr/bin/python3 bench/batch1_floor.py [--rounds 3] [--threads 1,2] [--build-dir build/release]

Models: the Extractor paper's configuration with one mixer in all 18 layers (bench/cpu_decode.py's
paper_model: d 128, c 512, vocabulary 5000, float16 weights, ~8.5 MB; SHE also reads ~40 d × d
extraction blocks a layer at these positions). Each side's figure is the median over rounds of its
run's median; a mixer's ratio is its step at its best thread count over its floor at the floor's
best thread count. Writes bench/results/batch1-floor-<date>.json and .png with the date, CPU and
commit.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from cpu_decode import MIXERS, paper_model  # noqa: E402
from floor import host_contended, host_facts, write_result  # noqa: E402

# The floor benchmark whose matrices each mixer's CPU layer holds (bench/gemv_floor_bench.cc).
FLOOR_OF = {m: "qkv_o" for m in ("aft_simple", "aft_local", "aft_full", "attention", "linear", "performer")}
TARGET = 1.25


def floor_run(binary, threads):
    """({(benchmark, threads): median µs}, {benchmark: weight MB}) of one run of the floor bench."""
    out = subprocess.run([binary, "--benchmark_format=json", "--benchmark_repetitions=5",
                          "--benchmark_report_aggregates_only=true"],
                         check=True, capture_output=True, text=True).stdout
    us, weight_mb = {}, {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        _, name, t = b["run_name"].split("/")[:3]  # BM_StepProjections/<mixer>/threads:N/real_time
        t = int(t.split(":")[1])
        if t in threads:
            us[(name, t)] = b["real_time"]
            weight_mb[name] = b["weight_MB"]
    return us, weight_mb


def step_run(binary, models, threads):
    by_path = {p: m for m, p in models.items()}
    steps = {}
    for t in threads:  # mixserve-bench takes one thread count a run
        cmd = [binary, "--batches", "1", "--threads", str(t)]
        for path in models.values():
            cmd += ["--model", path]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for r in (json.loads(l) for l in out.splitlines() if l.startswith("{")):
            steps[(by_path[r["model"]], t)] = r["ms_per_step_median"] * 1e3
    return steps


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = result["mixers"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["floor_us"] for r in rows], 0.4, label="floor: the projections alone")
    ax.bar([i + 0.2 for i in x], [r["step_us"] for r in rows], 0.4, label="decode step (mixserve-bench)")
    for i, r in enumerate(rows):
        ax.annotate(f"{r['ratio']:.2f}×", (i + 0.2, r["step_us"]), ha="center", va="bottom", fontsize=8,
                    color="tab:red" if r["ratio"] > TARGET else "black")
    ax.set_xticks(list(x))
    ax.set_xticklabels([r["mixer"] for r in rows], fontsize=8)
    ax.set_ylabel("µs per batch-1 step (median, best thread count)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"batch 1, paper configuration, step / floor (target ≤ {TARGET}×): {result['cpu']}, "
                 f"{result['date']}, {result['commit']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--models-dir", default="/tmp/mixserve-bench-models")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    floor_bin = os.path.join(args.build_dir, "bench", "mixserve-gemv-floor-bench")
    step_bin = os.path.join(args.build_dir, "bench", "mixserve-bench")
    for b in (floor_bin, step_bin):
        if not os.path.exists(b):
            sys.exit(f"{b} is missing: cmake --build {args.build_dir} --target mixserve-bench mixserve-gemv-floor-bench")
    os.makedirs(args.models_dir, exist_ok=True)
    models = {m: paper_model(m, args.models_dir) for m in MIXERS}
    load_before = os.getloadavg()
    floors, steps = [], []
    for rnd in range(args.rounds):
        for side in (("floor", "step") if rnd % 2 == 0 else ("step", "floor")):
            print(f"[round {rnd + 1}/{args.rounds}, load {os.getloadavg()[0]:.2f}] {side}", flush=True)
            if side == "floor":
                us, weight_mb = floor_run(floor_bin, threads)
                floors.append(us)
            else:
                steps.append(step_run(step_bin, models, threads))
    load_after = os.getloadavg()

    def median_over_rounds(runs, key):
        return statistics.median(r[key] for r in runs)

    mixers = []
    for m in MIXERS:
        floor_name = FLOOR_OF.get(m, m)
        floor_by_t = {t: median_over_rounds(floors, (floor_name, t)) for t in threads}
        step_by_t = {t: median_over_rounds(steps, (m, t)) for t in threads}
        ft, st = min(floor_by_t, key=floor_by_t.get), min(step_by_t, key=step_by_t.get)
        row = {"mixer": m, "floor_benchmark": floor_name, "weight_mb": weight_mb[floor_name],
               "floor_us": floor_by_t[ft], "floor_threads": ft, "step_us": step_by_t[st], "step_threads": st,
               "ratio": step_by_t[st] / floor_by_t[ft],
               "floor_us_by_threads": {str(t): v for t, v in floor_by_t.items()},
               "step_us_by_threads": {str(t): v for t, v in step_by_t.items()}}
        mixers.append(row)
        print(f"  {m:11s} step {row['step_us']:7.1f} µs ({st}t), floor {row['floor_us']:7.1f} µs ({ft}t, "
              f"{row['weight_mb']:.1f} MB): {row['ratio']:.2f}×" + ("" if row["ratio"] <= TARGET else f"  > {TARGET}"),
              flush=True)
    date = datetime.date.today().isoformat()
    result = {"benchmark": "batch1-floor", "date": date, "device": "CPU", **host_facts(), "threads": threads,
              "rounds": args.rounds, "load_before": load_before, "load_after": load_after,
              "host_contended": host_contended(load_before[0]), "target_ratio": TARGET,
              "note": "floor: mixserve-gemv-floor-bench, the mixer's projections of one step alone (median of 5 "
                      "repetitions a round); step: mixserve-bench --batches 1 (16 prompt tokens, 48 steps, "
                      "median step); each the median over rounds, at its best thread count",
              "mixers": mixers,
              "raw": {name: [{f"{k[0]}/{k[1]}": v for k, v in r.items()} for r in runs]
                      for name, runs in (("floor_us", floors), ("step_us", steps))}}
    write_result(result, args.out, f"batch1-floor-{date}", plot)


if __name__ == "__main__":
    main()
