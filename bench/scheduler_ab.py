"""Host scheduling overhead of two builds side by side (issue P0-3): runs two
mixserve-sched-bench binaries alternately, with request turnover (max_tokens 128: 2 requests retire
and 2 are admitted per step on average) and decode only (max_tokens 5000 and 1,000,000), and writes
the medians as JSON and a PNG.

  /usr/bin/python3 bench/scheduler_ab.py --before OLD_BIN --before-label "1ee9bc9" \
      [--after build/release/bench/mixserve-sched-bench] [--runs 4] [--malloc-hugetlb]
      [--out bench/results/scheduler-DATE]

--malloc-hugetlb runs both builds with GLIBC_TUNABLES=glibc.malloc.hugetlb=1, as scripts/serve and
the container image run the server (malloc's heap on transparent huge pages).

  /usr/bin/python3 bench/scheduler_ab.py --malloc-ab [--after BIN] [--runs 30]

--malloc-ab compares one build (--after) with malloc's defaults and with the huge-page heap,
alternately, instead of two builds: how much the setting is worth on this host. --overlap-ab
compares one build with steps one at a time and overlapped (EngineOptions::overlap_steps): the
engine's own work for each, which overlapping hides behind a device's step.

Alternating the two builds run by run, on the same machine in one sitting, is what makes the ratio
meaningful on a shared VM whose speed drifts; each run already reports its median window.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 5000: beyond the run. 1,000,000: the same decoding, but requests allowed a million tokens, whose
# lists the engine must not size for all of them (StateAllocator::kMaxReservedTokens).
MODES = {"turnover (max_tokens 128)": "128", "decode only": "5000", "decode only, max_tokens 1M": "1000000"}
FIELDS = ["host_us", "schedule_us", "emit_and_bookkeeping_us", "sample_us", "step_us"]


def run(binary, max_tokens, env=None, extra=()):
    out = subprocess.run([binary, "--max-tokens", max_tokens, *extra], check=True, capture_output=True,
                         text=True, env=env).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", help="the other build (required unless --malloc-ab)")
    ap.add_argument("--before-label", default="before")
    ap.add_argument("--after", default=os.path.join(ROOT, "build", "release", "bench", "mixserve-sched-bench"))
    ap.add_argument("--after-label", default="now")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--malloc-hugetlb", action="store_true", help="GLIBC_TUNABLES=glibc.malloc.hugetlb=1")
    ap.add_argument("--malloc-ab", action="store_true",
                    help="one build (--after) with malloc defaults and with glibc.malloc.hugetlb=1")
    ap.add_argument("--overlap-ab", action="store_true",
                    help="one build (--after) with steps one at a time and overlapped (--overlap-steps 1)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  f"scheduler-{datetime.date.today().isoformat()}"))
    args = ap.parse_args()
    defaults = dict(os.environ)
    defaults.pop("GLIBC_TUNABLES", None)
    hugetlb = dict(defaults, GLIBC_TUNABLES="glibc.malloc.hugetlb=1")
    env = hugetlb if args.malloc_hugetlb else defaults
    if args.malloc_ab:  # (label, binary, environment, extra arguments) of each side
        builds = [("malloc defaults", args.after, defaults, ()), ("hugetlb", args.after, hugetlb, ())]
    elif args.overlap_ab:
        builds = [("one at a time", args.after, env, ()),
                  ("overlapped", args.after, env, ("--overlap-steps", "1"))]
    elif args.before:
        builds = [(args.before_label, args.before, env, ()), (args.after_label, args.after, env, ())]
    else:
        ap.error("--before is required (or --malloc-ab, --overlap-ab)")
    malloc = ("both, one build (--malloc-ab)" if args.malloc_ab
              else "glibc.malloc.hugetlb=1 (heap on transparent huge pages)" if args.malloc_hugetlb
              else "glibc malloc defaults (4 KiB pages)")
    samples = {(b, m): [] for b, _, _, _ in builds for m in MODES}
    total = args.runs * len(MODES) * len(builds)
    done = 0
    for i in range(args.runs):
        for mode, max_tokens in MODES.items():
            for label, binary, env, extra in builds:
                r = run(binary, max_tokens, env, extra)
                samples[(label, mode)].append(r)
                done += 1
                print(f"[{done}/{total}] {label:>10} {mode:<27} host {r['host_us']:6.1f} us  "
                      f"schedule {r['schedule_us']:5.1f}  sample {r['sample_us']:5.1f}", flush=True)
    rows = []
    for mode in MODES:
        for label, _, _, _ in builds:
            runs = samples[(label, mode)]
            row = {"build": label, "mode": mode, "max_tokens": int(MODES[mode]), "running": runs[0]["running"]}
            for f in FIELDS:
                row[f] = round(statistics.median(r[f] for r in runs), 2)
            row["host_us_runs"] = [round(r["host_us"], 2) for r in runs]
            row["overlapped_steps"] = runs[0].get("overlapped_steps")
            rows.append(row)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip()
    result = {"benchmark": "scheduler-overhead", "date": datetime.date.today().isoformat(), "commit": commit,
              "host": f"{cpu}, {os.cpu_count()} cores (shared VM)", "null_backend": True, "runs": args.runs,
              "statistic": "median over runs of each run's median window",
              "note": "host_us = step - forward - sampling: admission, batching, pool and cache bookkeeping, "
                      "stop checks and handing each token to its sink; schedule_us = its part before the "
                      "forward call. 18-layer hybrid (attention, SHE, RetNet, AFT-local, RWKV, Performer), "
                      "d = 128, 256 running requests, timed after the prefix cache has filled.",
              "malloc": malloc,
              "target_host_us": 10, "rows": rows}
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=1)
    plot(rows, args.out + ".png", malloc)
    print("wrote", args.out + ".json", args.out + ".png")


def plot(rows, path, malloc):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(MODES), figsize=(5 * len(MODES), 4))
    for ax, mode in zip(axes, MODES):
        parts = [r for r in rows if r["mode"] == mode]
        x = range(len(parts))
        sched = [r["schedule_us"] for r in parts]
        rest = [r["host_us"] - r["schedule_us"] for r in parts]
        ax.bar(x, sched, label="admission + batching")
        ax.bar(x, rest, bottom=sched, label="emit + bookkeeping")
        ax.axhline(10, color="red", linestyle="--", label="target 10 µs")
        ax.set_xticks(list(x), [r["build"] for r in parts])
        ax.set_title(f"{mode}, 256 running")
        ax.set_ylabel("host µs per step (median)")
        for i, r in enumerate(parts):
            ax.text(i, r["host_us"], f"{r['host_us']:.1f}", ha="center", va="bottom")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=3, fontsize=9)
    fig.suptitle(f"Engine host overhead per step, null backend; malloc: {malloc}")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
