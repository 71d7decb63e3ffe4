"""The CPU projection kernel beside OpenBLAS, as fractions of this host's FMA peak: the batch sizes
of #21's throughput targets (32, 64) on GPT-2-small's four projection shapes, weights in cache and
from memory, alternated over rounds in one run.

  /usr/bin/python3 bench/projection_peer.py [--rounds 3] [--threads 2] [--batches 32,64]
      [--coretypes default,SkylakeX] [--build-dir build/release]

Each round runs bench/projection_bench.cc (mixserve-projection-bench) once for mixserve's f32 and
f16 panels and once per OpenBLAS core type (OPENBLAS_CORETYPE; "default" leaves OpenBLAS's own
choice: Debian's 0.3.21 does not recognise every recent CPU and then runs generic kernels), with
--copies 1 (the weights stay in cache: the kernel's arithmetic) and --copies 16 (75 MB of
weights: streamed from memory, as in a decode step). The FMA peak is the newest
bench/results/floor-*.json measured on a CPU of the same model name (bench/floor.py; run it first
on a new host). Writes bench/results/projection-peer-<date>.json and .png with the date, CPU,
commit and OpenBLAS's Debian version.
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
from floor import host_contended, host_facts, latest_floor, write_result  # noqa: E402

SHAPES = "2304x768,768x768,3072x768,768x3072"  # GPT-2-small: qkv, out, fc1, fc2


def run_bench(binary, formats, copies, args, coretype=None):
    env = dict(os.environ)
    if coretype and coretype != "default":
        env["OPENBLAS_CORETYPE"] = coretype
    out = subprocess.run([binary, "--batches", args.batches, "--threads", str(args.threads),
                          "--formats", formats, "--copies", str(copies), "--shapes", SHAPES,
                          "--reps", str(args.reps)],
                         check=True, capture_output=True, text=True, env=env).stdout
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    for r in rows:
        if r["weights"].startswith("openblas"):
            forced = " (forced)" if coretype != "default" else " (its choice)"
            r["side"] = f"OpenBLAS {r['gemm'].split('-', 1)[1]}{forced}"
        else:
            r["side"] = f"mixserve {r['weights']}"
    return rows


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cases = result["summary"]
    sides = sorted({c["side"] for c in cases}, key=lambda s: (not s.startswith("mixserve"), s))
    panels = sorted({(c["batch"], c["copies"]) for c in cases})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.5), squeeze=False)
    shapes = SHAPES.split(",")
    for ax, (batch, copies) in zip(axes[0], panels):
        width = 0.8 / len(sides)
        for i, side in enumerate(sides):
            vals = []
            for s in shapes:
                n, k = (int(v) for v in s.split("x"))
                row = next((c for c in cases if c["side"] == side and c["batch"] == batch and
                            c["copies"] == copies and c["n_out"] == n and c["k"] == k), None)
                vals.append(100 * row["fraction_of_fma_peak"] if row else 0)
            ax.bar([j + (i - (len(sides) - 1) / 2) * width for j in range(len(shapes))], vals, width, label=side)
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, fontsize=8)
        ax.set_ylim(0, 100)
        ax.set_ylabel("% of FMA peak (median)")
        ax.set_title(f"batch {batch}, weights {'in cache' if copies == 1 else 'from memory'}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"projection kernel vs OpenBLAS {result['versions']['openblas']}: {result['cpu']}, "
                 f"{result['threads']} threads, peak {result['fma_peak_gflop_s']:.0f} GFLOP/s, "
                 f"{result['date']}, {result['commit']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batches", default="32,64")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--coretypes", default="default,SkylakeX",
                    help="OpenBLAS core types to time (OPENBLAS_CORETYPE; default: its own choice)")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args()
    binary = os.path.join(args.build_dir, "bench", "mixserve-projection-bench")
    if not os.path.exists(binary):
        sys.exit(f"{binary} is missing: cmake --build {args.build_dir} --target mixserve-projection-bench")
    facts = host_facts()
    floor = latest_floor()
    if not floor or floor.get("cpu") != facts["cpu"]:
        sys.exit(f"no floor result for {facts['cpu']} in bench/results: run /usr/bin/python3 bench/floor.py first")
    peak = floor["summary"]["fma_gflop_s"][str(args.threads)]
    load_before = os.getloadavg()
    raw = []
    for rnd in range(args.rounds):
        for copies in (1, 16):
            jobs = [("f32,f16", None)] + [("openblas", c) for c in args.coretypes.split(",")]
            if rnd % 2:
                jobs.reverse()  # alternate who goes first
            for formats, coretype in jobs:
                print(f"[round {rnd + 1}/{args.rounds}] copies {copies}: {formats} {coretype or ''}", flush=True)
                for r in run_bench(binary, formats, copies, args, coretype or "default"):
                    r["round"] = rnd
                    raw.append(r)
    groups = {}
    for r in raw:
        groups.setdefault((r["side"], r["n_out"], r["k"], r["batch"], r["copies"]), []).append(r)
    summary = []
    for (side, n, k, batch, copies), rows in sorted(groups.items()):
        med = statistics.median(r["gflop_s_median"] for r in rows)
        summary.append({"side": side, "n_out": n, "k": k, "batch": batch, "copies": copies,
                        "gflop_s_median": round(med, 1),
                        "gflop_s_best": round(max(r["gflop_s_best"] for r in rows), 1),
                        "fraction_of_fma_peak": round(med / peak, 3)})
        print(f"  {side:28s} {n:5d}x{k:<5d} batch {batch:3d} {'cache ' if copies == 1 else 'memory'} "
              f"{med:7.1f} GFLOP/s median = {100 * med / peak:5.1f}% of peak", flush=True)
    load_after = os.getloadavg()
    openblas = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "libopenblas0-pthread"],
                              capture_output=True, text=True).stdout or "unknown"
    date = datetime.date.today().isoformat()
    result = {"benchmark": "projection-peer", "date": date, "device": "CPU", **facts,
              "threads": args.threads, "rounds": args.rounds, "batches": args.batches, "shapes": SHAPES,
              "fma_peak_gflop_s": peak, "floor": {"date": floor["date"], "commit": floor["commit"]},
              "versions": {"openblas": openblas}, "load_before": load_before, "load_after": load_after,
              "host_contended": host_contended(load_before[0]),
              "note": "median over rounds of each run's median GFLOP/s (2 flops per multiply-add); "
                      "copies 1: weights in cache, 16: from memory; OpenBLAS: cblas_sgemm on float32 "
                      "weights, y = x·Wᵀ, its threads set to the same count",
              "summary": summary, "raw": raw}
    write_result(result, args.out, f"projection-peer-{date}", plot)


if __name__ == "__main__":
    main()
