#!/usr/bin/env python3
"""Merges mixserve-cuda-bench's JSON with peer_bench.py's (same run, same GPU), prints the table
(step time, tokens/s, speed-up over the fastest PyTorch peer of the same mixer) and plots step time
against batch size per mixer.
  python3 bench/cuda_plot.py MIXSERVE.json PEER.json OUT_PREFIX   (writes OUT_PREFIX.json/.png)
"""
import json, sys

ours_path, peer_path, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
ours = json.load(open(ours_path))
try:
    peer = json.load(open(peer_path))
except Exception as e:  # the peer run failed: keep our numbers
    peer = {"error": repr(e)[:200]}

def peer_us(mixer, batch):
    """Fastest peer step (µs) for this mixer and batch: eager or CUDA graph; GPT-2 for attention."""
    names = [f"torch_eager_{mixer}/B{batch}", f"torch_cudagraph_{mixer}/B{batch}"]
    if mixer == "attention":
        names.append(f"hf_gpt2_generate/B{batch}")
    best = [peer[n]["ms_per_step"] * 1e3 for n in names if isinstance(peer.get(n), dict) and "ms_per_step" in peer[n]]
    return min(best) if best else None

rows = []
for r in ours["results"]:
    p = peer_us(r["mixer"], r["batch"])
    dev = r.get("device_us_per_step_median", r["us_per_step_median"])
    rows.append(dict(mixer=r["mixer"], batch=r["batch"], us=r["us_per_step_median"], tok_s=r["tok_s"],
                     dev_us=dev, dev_tok_s=r["batch"] / dev * 1e6, peer_us=p,
                     speedup=(p / r["us_per_step_median"]) if p else None,
                     dev_speedup=(p / dev) if p else None))
merged = dict(device=ours.get("device"), date=ours.get("date"), config=ours.get("config"),
              weights=ours.get("weights"), mixserve=ours["results"], peer=peer, table=rows)
json.dump(merged, open(prefix + ".json", "w"), indent=1)

# us/step: forward() end to end with the logits copied to the host; dev us: the GPU's share.
print(f"{'mixer':<11}{'batch':>6}{'us/step':>9}{'tok/s':>10}{'dev us':>8}{'dev tok/s':>11}{'peer us':>9}{'x':>6}{'x dev':>7}")
for r in rows:
    ps = f"{r['peer_us']:.0f}" if r["peer_us"] else "-"
    sp = f"{r['speedup']:.1f}" if r["speedup"] else "-"
    dsp = f"{r['dev_speedup']:.1f}" if r["dev_speedup"] else "-"
    print(f"{r['mixer']:<11}{r['batch']:>6}{r['us']:>9.1f}{r['tok_s']:>10.0f}{r['dev_us']:>8.1f}{r['dev_tok_s']:>11.0f}{ps:>9}{sp:>6}{dsp:>7}")

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
