#!/usr/bin/env python3
"""The tuned PyTorch peer of mixserve's CUDA backend, for every mixer: the reference model's decode
step as a careful user writes it for serving (reference/fast_step.py: fused projections, states
updated in place), eager, and with every shape fixed and captured in one CUDA graph
(reference/graph_step.py), on the same config as mixserve-cuda-bench's (the Extractor paper's by
default: u 5000, l 128, d 128, c 512, 18 layers, 4 heads, float16). ../shared/bench/peer_bench.py's
plain loop covers aft_simple, RetNet and the FIR Extractors; this covers all twelve, so #24's
"≥ 3× the CUDA-graph PyTorch peer for every mixer" can be measured (bench/cuda_plot.py takes the
fastest peer of each mixer and batch from both files).

A step is what mixserve's timed step does: one token per sequence through the model, the logits'
argmax fed back as the next token (in the graph), the position advanced on the device. Sequences
start at position 16 (the bench's 16-token prompt). Each case runs --rounds rounds of --steps steps
after 3 warm-up steps; the JSON gives the median round (ms_per_step), the best round (steady state)
and the mean of all steps. Usage (on the GPU host, Python with torch):
  python3 bench/torch_peer.py [--kinds all|aft_simple,...] [--batches 1,8,64,256] [--steps 32]
      [--rounds 3] [--modes eager,cudagraph[,compiled]] [--out FILE]
--modes compiled (`tuned_compiled_<mixer>`) runs the graph step through torch.compile (PyTorch 2,
TorchInductor with Triton) before the capture: fused elementwise kernels, a stronger peer where the
GPU host's PyTorch has it, at ~30–60 s of compilation per case (not in gpu-check's short stages).
--device cpu (float32) runs the same steps without graphs: the CPU smoke test's way
(reference/tests/test_torch_peer.py).
"""
import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "reference"))
from graph_step import DeviceFastModel, GraphModel  # noqa: E402
from mixserve_ref.config import MIXER_PARAMS, MIXERS, ModelConfig  # noqa: E402
from mixserve_ref.model import Model  # noqa: E402
from mixserve_ref.testing import randomize  # noqa: E402

PROMPT = 16  # mixserve-cuda-bench's prompt: timed steps start at this position


def paper_config(kind, a):
    """mixserve-cuda-bench's paper_config(): the same layer keys, norms, FFN and embedding."""
    layer = {"mixer": kind}
    if "heads" in MIXER_PARAMS[kind]:
        layer["heads"] = a.heads
    if a.window > 0 and "window" in MIXER_PARAMS[kind]:
        layer["window"] = a.window
    return ModelConfig(vocab_size=a.vocab, d_model=a.d, n_layers=a.layers, ffn_dim=a.ffn, max_seq_len=a.ctx,
                       layers=[dict(layer) for _ in range(a.layers)], position="learned",
                       embed_scale=math.sqrt(a.d), norm="layernorm", activation="relu",
                       ffn="rwkv_channel_mix" if kind == "rwkv" else "mlp", bias=True, tie_embeddings=True)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_rounds(run_steps, a, device):
    """run_steps(n) runs n steps; returns the seconds a step took in each round."""
    run_steps(3)  # warm-up
    rounds = []
    for _ in range(a.rounds):
        sync(device)
        t = time.perf_counter()
        run_steps(a.steps)
        sync(device)
        rounds.append((time.perf_counter() - t) / a.steps)
    return rounds


def eager(model, B, a, device):
    """FastModel's step with a host position (its K/V caches and rings sliced by it)."""
    fast = DeviceFastModel(model)
    states, tok = fast.init_state(B), torch.zeros(B, dtype=torch.long, device=device)
    pos = [PROMPT]

    def run(n):
        for _ in range(n):
            tok.copy_(fast.step(tok, pos[0], states).argmax(-1))
            pos[0] = PROMPT + (pos[0] + 1 - PROMPT) % (a.ctx - PROMPT)

    return timed_rounds(run, a, device)


def cudagraph(model, B, a, device, compile_step=False):
    """GraphModel's step captured once and replayed; without CUDA (the smoke test) run eagerly.
    compile_step: the step through torch.compile first (TorchInductor's fused kernels, its own
    graphs off: the capture here is the same for both)."""
    gm = GraphModel(model)
    states, tok = gm.init_state(B), torch.zeros(B, dtype=torch.long, device=device)
    pos = torch.full((), PROMPT, dtype=torch.long, device=device)
    model_step = torch.compile(gm.step, mode="max-autotune-no-cudagraphs", dynamic=False) if compile_step else gm.step

    def step():
        tok.copy_(model_step(tok, pos, states).argmax(-1))
        pos.add_(1 - PROMPT).remainder_(a.ctx - PROMPT).add_(PROMPT)

    if device.type != "cuda":
        return timed_rounds(lambda n: [step() for _ in range(n)], a, device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up before capture, on a side stream (PyTorch's rule)
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return timed_rounds(lambda n: [graph.replay() for _ in range(n)], a, device)


def git_commit():
    """This tree's commit: git's, or on the GPU host (a copy of the tree without .git) the one
    `scripts/gpu-check prepare` recorded beside the carried binaries."""
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
        if commit:
            return commit
    except Exception:  # no git on the host
        pass
    try:
        with open(os.path.join(ROOT, ".devcarry", "bin", "commit")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kinds", default="all")
    p.add_argument("--batches", default="1,8,64,256")
    p.add_argument("--modes", default="eager,cudagraph")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--vocab", type=int, default=5000)
    p.add_argument("--ctx", type=int, default=128)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--layers", type=int, default=18)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--window", type=int, default=0, help="W of aft_local and the Extractors (0: default)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    if a.ctx <= PROMPT or a.steps < 1 or a.rounds < 1:
        p.error(f"--ctx must pass the {PROMPT}-token prompt, --steps and --rounds be at least 1")
    kinds = list(MIXERS) if a.kinds == "all" else a.kinds.split(",")
    unknown = [k for k in kinds if k not in MIXERS]
    if unknown:
        p.error(f"unknown --kinds {','.join(unknown)} (known: {','.join(MIXERS)})")
    device = torch.device(a.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    res = {"peer": "bench/torch_peer.py (reference/fast_step.py eager, reference/graph_step.py in a CUDA graph)",
           "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "cuda": torch.version.cuda, "dtype": str(dtype).replace("torch.", ""),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": git_commit(), "config": dict(u=a.vocab, l=a.ctx, d=a.d, c=a.ffn, m=a.layers, heads=a.heads),
           "start_position": PROMPT}
    runners = {"eager": eager, "cudagraph": cudagraph,
               "compiled": lambda *args: cudagraph(*args, compile_step=True)}
    for kind in kinds:
        gen = torch.Generator().manual_seed(0)
        with torch.inference_mode():
            model = randomize(Model(paper_config(kind, a)), gen).to(device, dtype).eval()
            for B in map(int, a.batches.split(",")):
                for mode in a.modes.split(","):
                    name = f"tuned_{mode}_{kind}/B{B}"
                    try:
                        rounds = runners[mode](model, B, a, device)
                        med = statistics.median(rounds)
                        res[name] = {"ms_per_step": round(med * 1e3, 4), "tok_s": round(B / med, 1),
                                     "ms_best_round": round(min(rounds) * 1e3, 4),
                                     "ms_mean": round(statistics.fmean(rounds) * 1e3, 4),
                                     "ms_rounds": [round(r * 1e3, 4) for r in rounds]}
                    except Exception as e:  # one case's failure (memory, a capture) keeps the others
                        res[name] = {"error": repr(e)[:300]}
                    print(f"{name:<36} {json.dumps(res[name])}", file=sys.stderr, flush=True)
                    save(res, a.out)  # after every case: a run cut off by its time limit keeps them
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(json.dumps(res, indent=1))
    save(res, a.out)
    return res


def save(res, path):
    """res into path (when set) whole or not at all: written beside it, then renamed over it."""
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
