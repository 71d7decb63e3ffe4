"""The host side of a decode step's page addressing on a device backend, page lists against block
tables (bench/device_batch_bench.cc; docs/cuda.md "Device-resident page tables").

  python3 bench/device_batch.py [--build-dir build/release] [--reps 3] [--tag NAME]

Builds mixserve-device-batch-bench in --build-dir when it is missing, runs it, and writes
bench/results/device-batch-<date>[-<tag>].json (Google Benchmark's JSON plus date, CPU, commit and load
average) and .png (µs a step and bytes uploaded, by batch and context).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tag", default="", help="appended to the result files' names (a second run in a day)")
    args = ap.parse_args()
    binary = os.path.join(args.build_dir, "bench", "mixserve-device-batch-bench")
    if not os.path.exists(binary):
        subprocess.run(["cmake", "--build", args.build_dir, "--target", "mixserve-device-batch-bench"], check=True)
    load_before = os.getloadavg()[0]
    print(f"running {binary} ({args.reps} repetitions)", flush=True)
    out = subprocess.run([binary, f"--benchmark_repetitions={args.reps}", "--benchmark_report_aggregates_only=true",
                          "--benchmark_format=json"], check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True).stdout.strip())
    date = datetime.date.today().isoformat()
    result["mixserve"] = {"date": date, "cpu": cpu_model(), "commit": commit, "commit_dirty": dirty,
                          "load_before": load_before, "load_after": os.getloadavg()[0]}
    rows = {}
    for b in result["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name, batch, ctx = b["run_name"].split("/")
        rows.setdefault((int(batch), int(ctx)), {})[name[3:]] = (b["real_time"], b.get("upload_bytes", 0))
    print(f"{'batch':>5} {'ctx':>5} | {'page lists µs':>13} {'bytes':>10} | {'tables µs':>9} {'bytes':>7} | "
          f"{'all growing µs':>14} | {'compared µs':>11}")
    for (batch, ctx), r in sorted(rows.items()):
        pl, bt, bg, bc = r["PageLists"], r["BlockTables"], r["BlockTablesGrowing"], r["BlockTablesCompared"]
        print(f"{batch:>5} {ctx:>5} | {pl[0]:>13.2f} {pl[1]:>10.0f} | {bt[0]:>9.2f} {bt[1]:>7.0f} | "
              f"{bg[0]:>14.2f} | {bc[0]:>11.2f}")
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"device-batch-{date}" + (f"-{args.tag}" if args.tag else ""))
    with open(path + ".json", "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", path + ".json")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot", file=sys.stderr)
        return
    keys = sorted(rows)
    labels = [f"B={b}\nctx={c}" for b, c in keys]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.2
    for i, (name, label) in enumerate([("PageLists", "page lists"), ("BlockTablesCompared", "tables, lists compared"),
                                       ("BlockTablesGrowing", "tables, every sequence grown"),
                                       ("BlockTables", "tables, steady")]):
        xs = [k + (i - 1.5) * width for k in range(len(keys))]
        a1.bar(xs, [rows[k][name][0] for k in keys], width, label=label)
        a2.bar(xs, [max(rows[k][name][1], 1) for k in keys], width, label=label)
    for ax, title in ((a1, "host µs a step (pack + plan)"), (a2, "bytes uploaded a step")):
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle(f"18 attention layers, decode steps — {cpu_model()}, {date}, {commit}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path + ".png", dpi=110)
    print("wrote", path + ".png")


if __name__ == "__main__":
    main()
