#!/usr/bin/env python3
"""Where a decode step's device time goes: reads the Nsight Compute CSVs that
`scripts/gpu-check profile` writes (one gpu__time_duration per kernel launch) and tables the last
decode step of each (from its last embed_kernel on): kernel, grid, launches, total and mean µs.

  bench/profile_summary.py out/gpu-check/profile-*.csv
"""
import collections
import csv
import re
import sys


def kernel_name(full):
    """'void (anonymous namespace)::gemm_kernel<__half, 32, ...>(...)' -> 'gemm_kernel<__half, 32, ...>'"""
    head, _, _ = full.partition("(")
    if "<" in full:
        head = full[: full.index(">(") + 1] if ">(" in full else head
    return re.sub(r"^.*::", "", head.split("<")[0]) + (head[head.index("<"):] if "<" in head else "")


def last_step(path):
    launches = []
    with open(path) as f:
        for row in csv.DictReader(line for line in f if line.startswith('"')):
            if row.get("Metric Name") != "gpu__time_duration.sum":
                continue
            us = float(row["Metric Value"].replace(",", "")) / 1000
            launches.append((kernel_name(row["Kernel Name"]), row["Grid Size"], us))
    starts = [i for i, k in enumerate(launches) if k[0].startswith("embed_kernel")]
    return launches[starts[-1]:] if starts else []


def main(paths):
    if not paths:
        print(__doc__)
        return 2
    for path in paths:
        step = last_step(path)
        print(f"{path}: {len(step)} kernels in the last step, {sum(k[2] for k in step):.1f} µs of device time")
        groups = collections.defaultdict(lambda: [0, 0.0])
        for name, grid, us in step:
            groups[(name, grid)][0] += 1
            groups[(name, grid)][1] += us
        for (name, grid), (n, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
            print(f"  {us:8.1f} µs  {n:4d} × {us / n:6.2f}  grid {grid:12s} {name[:90]}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
