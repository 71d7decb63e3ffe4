"""The PyTorch peers' results as bench/cuda_plot.py and bench/cuda_targets.py read them: the cases
of several peer files (../shared/bench/peer_bench.py's plain loop, bench/torch_peer.py's tuned
step) merged, and the fastest peer of a mixer at a batch size."""
import json

# The peers' case names, "<mode>_<mixer>/B<batch>": the plain loop eager or in a CUDA graph, the
# tuned step eager, in a CUDA graph or compiled; and GPT-2's generate for attention.
PEER_MODES = ("torch_eager", "torch_cudagraph", "tuned_eager", "tuned_cudagraph", "tuned_compiled")


def load_peers(paths):
    """(cases, sources): every file's cases merged (a failed case keeps its error), and each
    file's own fields (device, versions, date, ...) or the error that kept it from being read, by
    path."""
    cases, sources = {}, {}
    for path in paths:
        try:
            with open(path) as f:
                got = json.load(f)
        except (OSError, ValueError) as e:  # a peer run failed: keep the other peers
            sources[path] = {"error": repr(e)[:200]}
            continue
        if not isinstance(got, dict):
            sources[path] = {"error": f"not a JSON object: {type(got).__name__}"}
            continue
        cases.update({k: v for k, v in got.items() if "/B" in k})
        sources[path] = {k: v for k, v in got.items() if "/B" not in k}
    return cases, sources


def fastest_peer(cases, mixer, batch):
    """(µs a step, case name without the batch) of the fastest peer of mixer at batch, or
    (None, None)."""
    names = [f"{m}_{mixer}/B{batch}" for m in PEER_MODES]
    if mixer == "attention":
        names.append(f"hf_gpt2_generate/B{batch}")
    got = [(cases[n]["ms_per_step"] * 1e3, n.split("/")[0]) for n in names
           if isinstance(cases.get(n), dict) and "ms_per_step" in cases[n]]
    return min(got) if got else (None, None)
