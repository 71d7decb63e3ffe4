#!/usr/bin/env python3
"""Side-by-side CUDA decode runs of one GPU call (scripts/gpu-check quick: the base commit's bench,
this commit's defaults, an option being decided): the device step time of each, its ratio to the
base's, per mixer and batch. Writes PREFIX.json (every run's raw results, device, date, commits)
and PREFIX.png (the ratios).

  bench/cuda_ab.py PREFIX BASE.json:LABEL RUN.json:LABEL [RUN.json:LABEL ...] [--note TEXT]
                   [--metric device_us_per_step_median|sample_device_us_per_step_median|...]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("prefix")
    ap.add_argument("runs", nargs="+", help="FILE:LABEL, the first is the base")
    ap.add_argument("--note", default="", help="what the labels mean (commits, options)")
    ap.add_argument("--metric", default="device_us_per_step_median",
                    help="the result field compared (µs; sample_device_us_per_step_median: whole "
                         "steps sampled on the device, --device-sampling runs)")
    a = ap.parse_args()
    runs = []
    for spec in a.runs:
        path, _, label = spec.rpartition(":")
        runs.append((label, json.load(open(path))))
    index = [{(r["mixer"], r["batch"]): r for r in run["results"]} for _, run in runs]
    keys = sorted(index[0], key=lambda k: (k[0], k[1]))
    labels = [label for label, _ in runs]
    print(f"{runs[0][1].get('device')} {runs[0][1].get('date')}  {a.metric} (ratio to {labels[0]})")
    print("%-11s %5s " % ("mixer", "batch") + " ".join("%16s" % l for l in labels))
    table = []
    for k in keys:
        base = index[0][k][a.metric]
        row = {"mixer": k[0], "batch": k[1]}
        cells = []
        for label, idx in zip(labels, index):
            us = idx[k].get(a.metric) if k in idx else None
            row[label + "_us"] = us
            row[label + "_ratio"] = us / base if us else None
            cells.append("%9.0f (%4.2f)" % (us, us / base) if us else "%16s" % "-")
        table.append(row)
        print("%-11s %5d " % k + " ".join(cells))
    out = {"device": runs[0][1].get("device"), "date": runs[0][1].get("date"), "note": a.note,
           "metric": a.metric, "labels": labels, "table": table, "raw": {label: run for label, run in runs}}
    json.dump(out, open(a.prefix + ".json", "w"), indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: JSON only)")
        return 0
    mixers = sorted({k[0] for k in keys})
    batches = sorted({k[1] for k in keys})
    fig, axes = plt.subplots(1, len(batches), figsize=(4.2 * len(batches), 4.8), sharey=True)
    for ax, batch in zip(axes, batches):
        width = 0.8 / (len(labels) - 1)
        for j, label in enumerate(labels[1:]):
            ys = [next((r[label + "_ratio"] for r in table if r["mixer"] == m and r["batch"] == batch), None) or 0
                  for m in mixers]
            ax.bar([i + j * width for i in range(len(mixers))], ys, width, label=label)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(mixers))])
        ax.set_xticklabels(mixers, rotation=60, fontsize=8)
        ax.set_title(f"batch {batch}")
    axes[0].set_ylabel(f"{a.metric} / {labels[0]}'s")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{out['device']}, {out['date']}: {a.note}"[:150], fontsize=9)
    fig.tight_layout()
    fig.savefig(a.prefix + ".png", dpi=110)
    print(f"wrote {a.prefix}.json, {a.prefix}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
