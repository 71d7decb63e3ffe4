"""The plot of bench/peer_decode.py's result (and `best`, which it shares): per model, the batch-1
step by thread count (every side, the end-to-end ones included) and the aggregate tok/s by batch
(each side at its best thread count)."""
from server_side import SIDES as SERVER_SIDES

BATCH_1_SIDES = ("mixserve generate",) + SERVER_SIDES  # end to end, batch 1 only


def best(rows, side, batch):
    cands = [r for r in rows if r["side"] == side and r["batch"] == batch]
    return min(cands, key=lambda r: r["ms_per_step_median"]) if cands else None


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = result["models"]
    fig, axes = plt.subplots(len(models), 2, figsize=(13, 4.6 * len(models)), squeeze=False)
    colors = {"mixserve": "tab:blue", "mixserve kv f16": "tab:green", "mixserve generate": "tab:cyan",
              SERVER_SIDES[0]: "tab:purple", SERVER_SIDES[1]: "tab:pink", "llama.cpp": "tab:orange"}
    for row_axes, model in zip(axes, models):
        rows = [r for r in result["rows"] if r["model"] == model["key"]]
        what = (f"{model['dtype'].upper()} weights" if model["weights"] == "f16" else
                f"llama.cpp {model['peer_format']} ({model['dtype'].upper()} model)" if result["peer_only"] else
                f"mixserve {model['weights']}, llama.cpp {model['peer_format']} ({model['dtype'].upper()} model)")
        # Left: batch-1 step time by thread count, range over rounds as error bars.
        ax = row_axes[0]
        sides = [s for s in colors if any(r["side"] == s for r in rows)]
        threads = sorted({r["threads"] for r in rows})
        width = 0.8 / len(sides)
        for j, side in enumerate(sides):
            for i, t in enumerate(threads):
                r = next((r for r in rows if r["side"] == side and r["batch"] == 1 and r["threads"] == t), None)
                if not r:
                    continue
                lo, hi = r["ms_per_step_range"]
                m = r["ms_per_step_median"]
                ax.bar(i + j * width, m, width, color=colors[side], label=side if i == 0 else None,
                       yerr=[[m - lo], [hi - m]], capsize=3)
                if "ms_per_step_mean" in r and side == "llama.cpp":
                    ax.plot(i + j * width, r["ms_per_step_mean"], "kx")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(threads))])
        ax.set_xticklabels([f"{t} thread{'s' if t > 1 else ''}" for t in threads])
        ax.set_yscale("log")
        ax.set_ylabel("ms per decode step (log)")
        ax.set_title(f"{what}, batch 1: median step, range over rounds; x = llama.cpp's mean", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        # Right: aggregate tok/s by batch, each side at its best thread count.
        ax = row_axes[1]
        batches = sorted({r["batch"] for r in rows if r["side"] not in BATCH_1_SIDES})
        tput_sides = [s for s in ["mixserve", "mixserve kv f16", "llama.cpp"] if any(r["side"] == s for r in rows)]
        bw = 0.8 / len(tput_sides)
        for j, side in enumerate(tput_sides):
            vals = [best(rows, side, b) for b in batches]
            ax.bar([i + j * bw for i in range(len(batches))], [v["tok_s"] if v else 0 for v in vals], bw,
                   color=colors[side], label=f"{side} (best thread count)")
            for i, v in enumerate(vals):
                if v:
                    ax.annotate(f"{v['tok_s']:.0f}\n{v['threads']}t", (i + j * bw, v["tok_s"]), ha="center",
                                va="bottom", fontsize=7)
        ax.set_xticks([i + 0.4 - bw / 2 for i in range(len(batches))])
        ax.set_xticklabels([f"batch {b}" for b in batches])
        ax.set_ylabel("decode tokens/s (all sequences)")
        ax.set_title(f"{what}: throughput", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    note = f" — HOST CONTENDED (load {result['load_average_before'][0]:.1f}), not final" if result["host_contended"] else ""
    sides = "llama.cpp alone" if result["peer_only"] else "mixserve vs llama.cpp"
    fig.suptitle(f"{sides} ({result['versions']['node-llama-cpp']}), GPT-2-small shape, vocab 5000, "
                 f"{result['cpu']}, {result['date']}, {result['commit'][:10]}{note}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
