"""CPU decode step of two builds side by side: runs two mixserve-bench binaries alternately, round
after round, on the same models, batches and steps, and writes the medians and their ratio as JSON
and a PNG. For refactors that must not slow the forward pass (issue #23: "no regression beyond
noise, alternating A/B runs against the commit before the change").

  /usr/bin/python3 bench/decode_ab.py --before OLD_BIN --before-label 2dccf09 \\
      [--after build/release/bench/mixserve-bench] [--after-label now] [--mixers all]
      [--batches 1,8,64] [--rounds 5] [--threads 2] [--out bench/results/decode-ab-DATE]

Models: the Extractor paper's configuration per mixer, as bench/cpu_decode.py makes them (in
--models-dir). Alternating the builds on one machine in one sitting is what makes the ratio
meaningful on a shared VM whose speed drifts; the 1-minute load average before and after is
recorded, and a run with load above 0.5 before it is labelled contended.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from cpu_decode import MIXERS, paper_model, run_json_lines  # noqa: E402
from floor import host_contended  # noqa: E402


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = report["rows"]
    batches = sorted({r["batch"] for r in rows})
    mixers = list(dict.fromkeys(r["mixer"] for r in rows))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(batches)
    for i, b in enumerate(batches):
        ratio = [next(r["after_over_before"] for r in rows if r["mixer"] == m and r["batch"] == b) for m in mixers]
        ax.bar([x + i * width for x in range(len(mixers))], ratio, width, label=f"batch {b}")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks([x + width * (len(batches) - 1) / 2 for x in range(len(mixers))])
    ax.set_xticklabels(mixers, rotation=30)
    ax.set_ylabel(f"step time {report['after_label']} / {report['before_label']}")
    ax.set_title(f"CPU decode step, A/B ({report['date']}, {report['threads']} threads, "
                 f"{report['rounds']} alternating rounds; < 1 is faster)", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--before-label", default="before")
    ap.add_argument("--after", default=os.path.join(ROOT, "build", "release", "bench", "mixserve-bench"))
    ap.add_argument("--after-label", default="now")
    ap.add_argument("--mixers", default="all")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models-dir", default="/tmp/mixserve-bench-models")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                   f"decode-ab-{datetime.date.today().isoformat()}"))
    args = ap.parse_args()
    mixers = MIXERS if args.mixers == "all" else args.mixers.split(",")
    load_before = os.getloadavg()[0]
    rows = []
    for i, mixer in enumerate(mixers):
        path = paper_model(mixer, args.models_dir)
        runs = {"before": [], "after": []}
        for r in range(args.rounds):
            for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                binary = args.before if side == "before" else args.after
                runs[side].append(run_json_lines([binary, "--model", path, "--batches", args.batches,
                                                  "--steps", str(args.steps), "--threads", str(args.threads)]))
        for b, first in enumerate(runs["before"][0]):
            before = [rnd[b]["ms_per_step_median"] for rnd in runs["before"]]
            after = [rnd[b]["ms_per_step_median"] for rnd in runs["after"]]
            row = {"mixer": mixer, "batch": first["batch"], "before_ms": statistics.median(before),
                   "after_ms": statistics.median(after), "before_ms_rounds": before, "after_ms_rounds": after}
            row["after_over_before"] = row["after_ms"] / row["before_ms"]
            rows.append(row)
            print(f"[{i + 1}/{len(mixers)}] {mixer:10s} batch {row['batch']:3d}: {args.before_label} "
                  f"{row['before_ms']:.3f} ms, {args.after_label} {row['after_ms']:.3f} ms "
                  f"({row['after_over_before']:.3f}x)", flush=True)
    load_after = os.getloadavg()[0]
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    report = {"benchmark": "cpu-decode-ab", "date": datetime.date.today().isoformat(), "device": "CPU",
              "host": f"{cpu_name()}, {os.cpu_count()} vCPUs", "commit": commit,
              "before_label": args.before_label, "after_label": args.after_label,
              "threads": args.threads, "steps": args.steps, "rounds": args.rounds,
              "statistic": "median over rounds of each run's median step",
              "load_1min_before": load_before, "load_1min_after": load_after,
              "host_contended": host_contended(load_before), "rows": rows}
    with open(args.out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    plot(report, args.out + ".png")
    ratios = [r["after_over_before"] for r in rows]
    print(f"wrote {args.out}.json {args.out}.png; after/before median {statistics.median(ratios):.3f}, "
          f"range {min(ratios):.3f}-{max(ratios):.3f}")


if __name__ == "__main__":
    main()
