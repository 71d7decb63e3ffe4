#!/usr/bin/env python3
"""Where a decode step's device time goes: reads the Nsight Compute CSVs that
`scripts/gpu-check profile` writes (one gpu__time_duration per kernel launch) and tables the last
decode step of each (from its last embed_kernel on): kernel, grid, launches, total and mean µs —
and, where the CSV has dram__bytes_read.sum too (the large config's case), the bytes each group
read from DRAM and at what rate (GB/s over its device time).

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
    """[(kernel, grid, µs, DRAM bytes or None)] of the last step, in launch order."""
    launches = collections.OrderedDict()  # ncu's launch ID -> [kernel, grid, µs, bytes]
    with open(path) as f:
        for row in csv.DictReader(line for line in f if line.startswith('"')):
            metric = row.get("Metric Name")
            if metric not in ("gpu__time_duration.sum", "dram__bytes_read.sum"):
                continue
            value = float(row["Metric Value"].replace(",", ""))
            unit = row.get("Metric Unit", "")
            k = launches.setdefault(row.get("ID"), [kernel_name(row["Kernel Name"]), row["Grid Size"], 0.0, None])
            if metric == "gpu__time_duration.sum":
                k[2] = value / (1000 if unit in ("nsecond", "") else 1e-3 if unit == "msecond" else 1)
            else:
                scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(unit, 1)
                k[3] = value * scale
    launches = [tuple(v) for v in launches.values()]
    starts = [i for i, k in enumerate(launches) if k[0].startswith("embed_kernel")]
    return launches[starts[-1]:] if starts else []


def main(paths):
    if not paths:
        print(__doc__)
        return 2
    for path in paths:
        step = last_step(path)
        print(f"{path}: {len(step)} kernels in the last step, {sum(k[2] for k in step):.1f} µs of device time")
        groups = collections.defaultdict(lambda: [0, 0.0, None])
        for name, grid, us, dram in step:
            g = groups[(name, grid)]
            g[0] += 1
            g[1] += us
            if dram is not None:
                g[2] = (g[2] or 0.0) + dram
        total_bytes = sum(k[3] for k in step if k[3] is not None)
        if total_bytes:
            print(f"  DRAM read {total_bytes / 1e6:.1f} MB, {total_bytes / 1e3 / sum(k[2] for k in step):.0f} GB/s over the step")
        for (name, grid), (n, us, dram) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
            rate = f"  {dram / 1e6:8.2f} MB {dram / 1e3 / us:6.0f} GB/s" if dram is not None and us > 0 else ""
            print(f"  {us:8.1f} µs  {n:4d} × {us / n:6.2f}  grid {grid:12s}{rate} {name[:90]}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
