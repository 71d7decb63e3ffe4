"""The hardware floor of this host: streaming read bandwidth and FP32 FMA peak, at 1 thread and at
every thread (bench/floor_bench.cc), so that CPU decode results can be stated as a fraction of it.

  python3 bench/floor.py [--rounds 3] [--reps 7] [--build-dir build/release] [--bin PATH]

Builds mixserve-floor-bench in --build-dir when it is missing (configuring a CPU-only release
build there if the directory has none), runs it --rounds times, and writes
bench/results/floor-<date>.json and .png with the date, CPU model, commit, cores and load average.
Across rounds, each figure's best is the best repetition of any round and its median the median
of all repetitions.

Other bench scripts read the newest result with

  sys.path.insert(0, os.path.join(ROOT, "bench")); from floor import latest_floor, stream_floor_ms
  floor = latest_floor()                      # the parsed JSON, or None when there is none
  floor["summary"]["read_gb_s"]["2"]          # median streaming read GB/s at 2 threads (1 GiB)
  floor["summary"]["fma_gflop_s"]["1"]        # median FP32 FMA GFLOP/s at 1 thread, widest ISA
  stream_floor_ms(floor, 177.5e6, threads=2)  # the ms that reading 177.5 MB once takes at best
"""
import argparse
import datetime
import glob
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
CONTENDED_LOAD = 0.5  # a 1-minute load average above this when a run began: it shared the host


def host_contended(load_before):
    """Whether a run that began at this 1-minute load average shared the host with other work:
    every bench result records it as host_contended, and latest_floor prefers a quiet floor."""
    return load_before > CONTENDED_LOAD


def latest_floor(results_dir=RESULTS):
    """The newest bench/results/floor-<date>.json, parsed (None when there is none). The newest
    is the latest date in the file name; a quiet run (host_contended false) of that date or
    earlier is preferred to a contended one."""
    paths = sorted(glob.glob(os.path.join(results_dir, "floor-*.json")), reverse=True)
    floors = []
    for p in paths:
        with open(p) as f:
            floors.append(json.load(f))
    quiet = [f for f in floors if not f.get("host_contended")]
    return (quiet or floors or [None])[0]


def stream_floor_ms(floor, nbytes, threads, buffer="big"):
    """Milliseconds to stream `nbytes` once at the floor's median read bandwidth at `threads`
    (the 1 GiB buffer by default; "gpt2_small_f16" for the 177.5 MB one)."""
    row = next(r for r in floor["bandwidth"] if r["threads"] == threads and r["buffer"] == buffer)
    return nbytes / (row["gb_s_median"] * 1e9) * 1e3


def host_facts():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "bench/floor_bench.cc"],
                           capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "commit": commit + ("+dirty floor_bench.cc" if dirty else ""), "cores": os.cpu_count()}


def write_result(result, out_dir, stem, plot_fn):
    """Writes <out_dir>/<stem>.json, then its plot <stem>.png with plot_fn(result, path): the JSON
    is kept whatever happens to the plot. Returns the path without its extension."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, stem)
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {base}.json", flush=True)
    try:
        plot_fn(result, base + ".png")
        print(f"wrote {base}.png", flush=True)
    except Exception as e:  # noqa: BLE001 — a plotting failure must not lose the measurements
        print(f"plot failed: {e}", flush=True)
    return base


def find_or_build(build_dir):
    path = os.path.join(build_dir, "bench", "mixserve-floor-bench")
    if os.path.exists(path):
        return path
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        print(f"[build] configuring {build_dir} (CPU only, no server)", flush=True)
        subprocess.run(["cmake", "--preset", "release", "-B", build_dir, "-DMIXSERVE_CUDA=OFF",
                        "-DMIXSERVE_SERVER=OFF"], cwd=ROOT, check=True)
    print(f"[build] mixserve-floor-bench in {build_dir}", flush=True)
    subprocess.run(["cmake", "--build", build_dir, "--target", "mixserve-floor-bench", "-j2"], cwd=ROOT, check=True)
    return path


def combine(rounds, section, key, rate):
    """One row per (key...) across rounds: best of every repetition, median of all of them."""
    rows = {}
    for rnd in rounds:
        for r in rnd[section]:
            k = tuple(r[x] for x in key)
            row = rows.setdefault(k, {x: r[x] for x in r if not x.startswith(rate)})
            row.setdefault(rate + "_reps", []).extend(r[rate + "_reps"])
    for row in rows.values():
        reps = row[rate + "_reps"]
        row[rate + "_best"], row[rate + "_median"] = max(reps), statistics.median(reps)
    return list(rows.values())


def summary(bandwidth, fma):
    """Median read GB/s of the 1 GiB buffer and median FMA GFLOP/s of the widest ISA, per thread count."""
    widest = "avx512" if any(r["isa"] == "avx512" for r in fma) else "avx2"
    return {"read_gb_s": {str(r["threads"]): r["gb_s_median"] for r in bandwidth if r["buffer"] == "big"},
            "read_gb_s_gpt2_small_f16": {str(r["threads"]): r["gb_s_median"] for r in bandwidth
                                         if r["buffer"] == "gpt2_small_f16"},
            "fma_gflop_s": {str(r["threads"]): r["gflop_s_median"] for r in fma if r["isa"] == widest},
            "fma_isa": widest}


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax_bw, ax_fma) = plt.subplots(1, 2, figsize=(11, 4.5))
    names = {"big": f"{result['big_buffer_gib']:g} GiB", "gpt2_small_f16": "177.5 MB (GPT-2-small F16)"}
    bw = result["bandwidth"]
    labels = [f"{names.get(r['buffer'], r['buffer'])}\n{r['threads']} thr" for r in bw]
    x = range(len(bw))
    ax_bw.bar([i - 0.2 for i in x], [r["gb_s_best"] for r in bw], 0.4, label="best")
    ax_bw.bar([i + 0.2 for i in x], [r["gb_s_median"] for r in bw], 0.4, label="median")
    ax_bw.set_xticks(list(x))
    ax_bw.set_xticklabels(labels, fontsize=8)
    ax_bw.set_ylabel("GB/s")
    ax_bw.set_title("streaming read bandwidth")
    fma = result["fma"]
    x = range(len(fma))
    ax_fma.bar([i - 0.2 for i in x], [r["gflop_s_best"] for r in fma], 0.4, label="best")
    ax_fma.bar([i + 0.2 for i in x], [r["gflop_s_median"] for r in fma], 0.4, label="median")
    ax_fma.set_xticks(list(x))
    ax_fma.set_xticklabels([f"{r['isa']}\n{r['threads']} thr" for r in fma], fontsize=8)
    ax_fma.set_ylabel("GFLOP/s (FP32)")
    ax_fma.set_title("FMA peak")
    for ax in (ax_bw, ax_fma):
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
    contended = " — HOST CONTENDED" if result["host_contended"] else ""
    fig.suptitle(f"{result['cpu']}, {result['cores']} cores, {result['date']}, {result['commit']}, "
                 f"load {result['load_before'][0]:.2f}{contended}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=7, help="repetitions of each figure in a round")
    ap.add_argument("--gib", type=float, default=1.0, help="size of the large read buffer")
    ap.add_argument("--threads", default=f"1,{os.cpu_count()}" if os.cpu_count() > 1 else "1")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--bin", help="a built mixserve-floor-bench (else found or built in --build-dir)")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    binary = args.bin or find_or_build(os.path.abspath(args.build_dir))
    load_before = os.getloadavg()
    rounds = []
    for i in range(args.rounds):
        print(f"[round {i + 1}/{args.rounds}] load {os.getloadavg()[0]:.2f}", flush=True)
        out = subprocess.run([binary, "--reps", str(args.reps), "--gib", str(args.gib), "--threads", args.threads],
                             check=True, capture_output=True, text=True)
        sys.stdout.write(out.stderr)
        rounds.append(json.loads(out.stdout))
    bandwidth = combine(rounds, "bandwidth", ("buffer", "threads"), "gb_s")
    fma = combine(rounds, "fma", ("isa", "threads"), "gflop_s")
    date = datetime.date.today().isoformat()
    result = {"benchmark": "floor", "date": date, **host_facts(), "threads": args.threads,
              "pinned": all(r["pinned"] for r in rounds), "rounds": args.rounds, "reps": args.reps,
              "big_buffer_gib": args.gib, "load_before": list(load_before), "load_after": list(os.getloadavg()),
              "host_contended": host_contended(load_before[0]),
              "summary": summary(bandwidth, fma), "bandwidth": bandwidth, "fma": fma,
              "method": "reads: each thread sums its own contiguous slice with vector loads (8 accumulators), "
                        "threads pinned one per CPU; FMA: independent chains in registers (16 zmm / 12 ymm), "
                        "2 flops per lane per FMA; best = best repetition of any round, median = of all"}
    s = result["summary"]
    print(f"read GB/s (1 GiB, median): {s['read_gb_s']}; FMA GFLOP/s ({s['fma_isa']}, median): {s['fma_gflop_s']}"
          + ("  — HOST CONTENDED (load %.2f)" % load_before[0] if result["host_contended"] else ""))
    write_result(result, args.out, f"floor-{date}", plot)


if __name__ == "__main__":
    main()
