"""Sampling cost of two builds side by side: runs two mixserve-sampler-bench binaries (Google
Benchmark) alternately, keeps each benchmark's median over the runs, and writes JSON and a PNG.

  /usr/bin/python3 bench/sampler_ab.py --before OLD_BIN --before-label cef524e \
      [--after build/release/bench/mixserve-sampler-bench] [--runs 3] [--out bench/results/sampler-DATE]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(binary):
    out = subprocess.run([binary, "--benchmark_format=json", "--benchmark_min_time=0.3"], check=True,
                         capture_output=True, text=True).stdout
    return {b["name"]: b for b in json.loads(out)["benchmarks"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--before-label", default="before")
    ap.add_argument("--after", default=os.path.join(ROOT, "build", "release", "bench", "mixserve-sampler-bench"))
    ap.add_argument("--after-label", default="now")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  f"sampler-{datetime.date.today().isoformat()}"))
    args = ap.parse_args()
    builds = [(args.before_label, args.before), (args.after_label, args.after)]
    samples = {label: [] for label, _ in builds}
    for i in range(args.runs):
        for label, binary in builds:
            print(f"[{i + 1}/{args.runs}] {label}", flush=True)
            samples[label].append(run(binary))
    rows = []
    for name, first in samples[builds[0][0]][0].items():
        row = {"benchmark": name, "case": first.get("label", "")}
        for label, _ in builds:
            row[f"{label}_us"] = round(statistics.median(r[name]["real_time"] for r in samples[label]), 2)
        row["speedup"] = round(row[f"{builds[0][0]}_us"] / row[f"{builds[1][0]}_us"], 2)
        rows.append(row)
        print(f"{name:<36} {row['case']:<16} " + "  ".join(f"{l} {row[f'{l}_us']:9.1f} us" for l, _ in builds) +
              f"  x{row['speedup']}")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    result = {"benchmark": "sampler", "date": datetime.date.today().isoformat(),
              "host": f"{cpu}, {os.cpu_count()} cores (shared VM)", "runs": args.runs,
              "statistic": "median over runs of Google Benchmark's real time per iteration",
              "note": "BM_SampleRow/V/case: one row; BM_SampleStep64/V/threads: 64 top-p rows of one step on a "
                      "thread pool of that size (the engine sampled rows on one thread before this change)",
              "builds": [l for l, _ in builds], "rows": rows}
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=1)
    plot(rows, [l for l, _ in builds], args.out + ".png")
    print("wrote", args.out + ".json", args.out + ".png")


def plot(rows, labels, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(11, 4.5))
    names = [r["benchmark"].replace("BM_", "").replace("/real_time", "") + "\n" + r["case"] for r in rows]
    x = range(len(rows))
    width = 0.4
    for k, label in enumerate(labels):
        ax.bar([i + (k - 0.5) * width for i in x], [r[f"{label}_us"] for r in rows], width, label=label)
    ax.set_yscale("log")
    ax.set_ylabel("µs (log scale)")
    ax.set_xticks(list(x), names, rotation=60, ha="right", fontsize=7)
    ax.legend()
    ax.set_title("Sampling cost per row, and per 64-row step on a thread pool")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
