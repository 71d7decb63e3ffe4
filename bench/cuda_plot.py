#!/usr/bin/env python3
"""Merges mixserve-cuda-bench's JSON with the PyTorch peers' (same run, same GPU): peer_bench.py's
plain loop and bench/torch_peer.py's tuned steps, PEER.json being one file or several joined by
commas; prints the table (step time, tokens/s, speed-up over the fastest peer of the same mixer and
batch, and which peer that was) and plots step time against batch size per mixer.
  python3 bench/cuda_plot.py MIXSERVE.json PEER.json[,PEER2.json] OUT_PREFIX   (writes OUT_PREFIX.json/.png)
"""
import argparse, json, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import fastest_peer, load_peers  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("ours")
ap.add_argument("peer")
ap.add_argument("prefix")
ap.add_argument("--sampling", help="the bench with --device-sampling (host vs device sampled steps)")
ap.add_argument("--tc", help="the same bench with MIXSERVE_CUDA_TENSOR_CORES=1")
ap.add_argument("--commit", default=subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                                   text=True).stdout.strip(),
                help="the commit the binaries were built from (default: this checkout's HEAD)")
ap.add_argument("--tiled", help="the same bench with MIXSERVE_CUDA_GEMV=0 (batches 1 and 8): the tiled "
                "kernel at every M, against the default small-batch GEMM")
ap.add_argument("--large", help="the large config (d=1024, m=24, c=4096)")
ap.add_argument("--large-tc", help="the large config with tensor cores")
ap.add_argument("--large-tiled", help="the large config with MIXSERVE_CUDA_GEMV=0")
ap.add_argument("--context", help="--context-sweep output (per-token cost vs position)")
args = ap.parse_args()
ours_path, peer_path, prefix = args.ours, args.peer, args.prefix
ours = json.load(open(ours_path))


def load_optional(path):
    try:
        return json.load(open(path)) if path else None
    except Exception as e:  # a stage failed or timed out: report it, keep the rest
        print(f"(could not read {path}: {e!r:.120})")
        return None


sampling, tc, tiled, large, large_tc, large_tiled, context = (
    load_optional(p) for p in (args.sampling, args.tc, args.tiled, args.large, args.large_tc, args.large_tiled,
                               args.context))
# Every file's cases ("name/B<batch>"), and each file's own fields under "sources".
cases, sources = load_peers(peer_path.split(","))
peer = dict(cases, sources=sources)

rows = []
for r in ours["results"]:
    p, peer_name = fastest_peer(cases, r["mixer"], r["batch"])
    dev = r.get("device_us_per_step_median", r["us_per_step_median"])
    rows.append(dict(mixer=r["mixer"], batch=r["batch"], us=r["us_per_step_median"], tok_s=r["tok_s"],
                     dev_us=dev, dev_tok_s=r["batch"] / dev * 1e6, peer_us=p, peer=peer_name,
                     speedup=(p / r["us_per_step_median"]) if p else None,
                     dev_speedup=(p / dev) if p else None))
merged = dict(device=ours.get("device"), date=ours.get("date"), commit=args.commit, config=ours.get("config"),
              weights=ours.get("weights"), mixserve=ours["results"], peer=peer, table=rows,
              device_sampling=sampling, tensor_cores=tc, tiled=tiled, large=large, large_tensor_cores=large_tc, large_tiled=large_tiled, context=context)
json.dump(merged, open(prefix + ".json", "w"), indent=1)

# us/step: forward() end to end with the logits copied to the host; dev us: the GPU's share.
print(f"{'mixer':<11}{'batch':>6}{'us/step':>9}{'tok/s':>10}{'dev us':>8}{'dev tok/s':>11}{'peer us':>9}{'x':>6}"
      f"{'x dev':>7}  fastest peer")
for r in rows:
    ps = f"{r['peer_us']:.0f}" if r["peer_us"] else "-"
    sp = f"{r['speedup']:.1f}" if r["speedup"] else "-"
    dsp = f"{r['dev_speedup']:.1f}" if r["dev_speedup"] else "-"
    print(f"{r['mixer']:<11}{r['batch']:>6}{r['us']:>9.1f}{r['tok_s']:>10.0f}{r['dev_us']:>8.1f}{r['dev_tok_s']:>11.0f}"
          f"{ps:>9}{sp:>6}{dsp:>7}  {r['peer'] or '-'}")

def key(r):
    return (r["mixer"], r["batch"])


# Sampling: whole steps with a token per sequence (temperature 1, top-p 0.9), host vs device.
if sampling:
    print()
    print("sampling  (a whole step with a token per sequence: host = all logits copied + engine/sampler, "
          "device = forward_and_sample with the device sampler)")
    print(f"{'mixer':<11}{'batch':>6}{'logits us':>10}{'host us':>9}{'device us':>10}{'device/host':>12}")
    for r in sampling["results"]:
        h, d = r.get("sample_host_us_per_step_median"), r.get("sample_device_us_per_step_median")
        if h and d:
            print(f"{r['mixer']:<11}{r['batch']:>6}{r['us_per_step_median']:>10.1f}{h:>9.1f}{d:>10.1f}{d / h:>12.2f}")


def compare(title, base, other, name="tc"):
    if not base or not other:
        return
    print()
    print(title)
    print(f"{'mixer':<11}{'batch':>6}{'base dev us':>12}{name + ' dev us':>12}{name + '/base':>10}"
          f"{'base GB/s':>10}{name + ' GB/s':>10}")
    o = {key(r): r for r in other["results"]}
    for r in base["results"]:
        t = o.get(key(r))
        if not t:
            continue
        a, b = r["device_us_per_step_median"], t["device_us_per_step_median"]
        print(f"{r['mixer']:<11}{r['batch']:>6}{a:>12.1f}{b:>12.1f}{b / a:>10.2f}"
              f"{r.get('weight_GBps', 0):>10.0f}{t.get('weight_GBps', 0):>10.0f}")


compare("tensor cores  (MIXSERVE_CUDA_TENSOR_CORES=1 vs the CUDA-core GEMM, paper config, f16)", ours, tc)
compare("small-batch GEMM  (the default, gemv.cu at M <= 8, vs MIXSERVE_CUDA_GEMV=0: the tiled kernel; "
        "paper config, f16)", tiled, ours, "gemv")
if large:
    cfg = large.get("config", {})
    print()
    print(f"large config d={cfg.get('d')} m={cfg.get('m')} c={cfg.get('c')} (GB/s: weight bytes / device time)")
    print(f"{'mixer':<11}{'batch':>6}{'dev us':>10}{'GB/s':>8}")
    for r in large["results"]:
        print(f"{r['mixer']:<11}{r['batch']:>6}{r['device_us_per_step_median']:>10.1f}{r.get('weight_GBps', 0):>8.0f}")
    compare("large config, tensor cores", large, large_tc)
    compare("large config, small-batch GEMM (vs the tiled kernel)", large_tiled, large, "gemv")
if context:
    print()
    print("context sweep  (batch-1 device us at positions)")
    for c in context.get("context_sweep", []):
        pts = list(zip(c["position"], c["device_us"]))
        picks = [pts[i] for i in sorted({0, len(pts) // 4, len(pts) // 2, 3 * len(pts) // 4, len(pts) - 1})] if pts else []
        print(f"{c['mixer']:<11}" + "  ".join(f"p{p}:{u:.0f}" for p, u in picks))

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
mixers = sorted({r["mixer"] for r in rows}, key=[r["mixer"] for r in rows].index)
fig, ax = plt.subplots(figsize=(9, 6))
cmap = plt.get_cmap("tab20")
for i, m in enumerate(mixers):
    rs = [r for r in rows if r["mixer"] == m]
    ax.plot([r["batch"] for r in rs], [r["dev_us"] for r in rs], "-o", color=cmap(i), label=f"mixserve {m}")
    ps = [r for r in rs if r["peer_us"]]
    if ps:
        ax.plot([r["batch"] for r in ps], [r["peer_us"] for r in ps], "--x", color=cmap(i), alpha=0.6,
                label=f"PyTorch {m}")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("batch size (sequences per decode step)")
ax.set_ylabel("decode step time on the GPU (µs)")
cfg = ours.get("config", {})
ax.set_title(f"Decode step, {ours.get('device')} {ours.get('date', '')[:10]}, "
             f"u={cfg.get('u')} l={cfg.get('l')} d={cfg.get('d')} c={cfg.get('c')} m={cfg.get('m')}, {ours.get('weights')}")
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=6, ncol=2)
fig.tight_layout()
fig.savefig(prefix + ".png", dpi=120)

if context and context.get("context_sweep"):
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, c in enumerate(context["context_sweep"]):
        ax.plot(c["position"], c["device_us"], "-", color=cmap(i), label=c["mixer"])
    cfg = context.get("config", {})
    ax.set_xlabel("position of the decoded token")
    ax.set_ylabel("batch-1 decode step on the GPU (µs)")
    ax.set_title(f"Per-token cost vs context, {context.get('device')}, d={cfg.get('d')} m={cfg.get('m')} "
                 f"l={cfg.get('l')} W={cfg.get('window')}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(prefix + "-context.png", dpi=120)
