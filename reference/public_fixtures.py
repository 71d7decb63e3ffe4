"""Fixtures made by public code no one here wrote (issue #25): the cores of retention and of
linear attention as flash-linear-attention's naive reference forms compute them, on random
inputs, written to tests/golden_public/<op>/ with their provenance. The public repository is read
from a path given here and never copied into the project; CI checks the reference against the
committed fixtures without it (reference/tests/test_public_fixtures.py).

  /usr/bin/python3 reference/public_fixtures.py --fla PATH/TO/flash-linear-attention [--out DIR]

fla's modules are loaded from their files alone (not the package, whose __init__ needs triton).
fla/ops/linear_attn/naive.py imports einops at the top for its chunked form, which Debian lacks;
the recurrent form used here does not call it, so a stand-in module named einops (whose rearrange
raises if called) is put in sys.modules while the file loads: nothing of einops runs.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import types

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "reference"))
from mixserve_ref import safetensors_io  # noqa: E402


def load_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def commit_of(repo):
    try:
        return subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:  # a snapshot without .git: say so
        return "unknown (not a git checkout)"


def write(out, op, tensors, provenance):
    path = os.path.join(out, op)
    os.makedirs(path, exist_ok=True)
    safetensors_io.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(path, "fixture.safetensors"))
    with open(os.path.join(path, "provenance.json"), "w") as f:
        json.dump(provenance, f, indent=1)
        f.write("\n")
    print(f"{op}: {', '.join(f'{k} {list(v.shape)}' for k, v in tensors.items())}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fla", required=True, help="a checkout of github.com/fla-org/flash-linear-attention")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "golden_public"))
    ap.add_argument("--commit", help="the checkout's commit, when the path is not a git checkout")
    args = ap.parse_args()
    fla = os.path.abspath(args.fla)
    commit = args.commit or commit_of(fla)
    gen = torch.Generator().manual_seed(25)
    B, H, T, D = 2, 3, 37, 16  # T past one 32-row block; three heads: three decays

    retention = load_file(os.path.join(fla, "fla/ops/retention/naive.py"), "fla_retention_naive")
    q, k, v = (torch.randn(B, H, T, D, generator=gen) for _ in range(3))
    o = retention.naive_retention(q, k, v)
    write(args.out, "retention", {"q": q, "k": k, "v": v, "o": o}, {
        "repository": "https://github.com/fla-org/flash-linear-attention", "commit": commit,
        "file": "fla/ops/retention/naive.py", "function": "naive_retention(q, k, v)",
        "layout": "q, k, v, o [B, heads, T, head_dim]; gamma_i = 1 - 2^(-5-i); q scaled by head_dim^-0.5 inside",
        "script": "reference/public_fixtures.py", "torch": torch.__version__})

    stand_in = types.ModuleType("einops")  # see the module docstring

    def rearrange(*_, **__):
        raise RuntimeError("einops is not installed: only the recurrent form may run here")

    stand_in.rearrange = rearrange
    sys.modules.setdefault("einops", stand_in)
    linear = load_file(os.path.join(fla, "fla/ops/linear_attn/naive.py"), "fla_linear_attn_naive")
    # fla takes [B, T, H, D] and the features already applied; elu + 1 makes them positive as ours.
    fq, fk = (torch.nn.functional.elu(torch.randn(B, T, H, D, generator=gen)) + 1 for _ in range(2))
    lv = torch.randn(B, T, H, D, generator=gen)
    lo, _ = linear.naive_recurrent_linear_attn(fq, fk, lv, scale=1.0, normalize=True)
    write(args.out, "linear_attn", {"fq": fq, "fk": fk, "v": lv, "o": lo}, {
        "repository": "https://github.com/fla-org/flash-linear-attention", "commit": commit,
        "file": "fla/ops/linear_attn/naive.py",
        "function": "naive_recurrent_linear_attn(fq, fk, v, scale=1.0, normalize=True)",
        "layout": "fq, fk, v, o [B, T, heads, head_dim]; o_t = sum_j (fq_t.fk_j) v_j / (fq_t . sum_j fk_j + 1e-10)",
        "script": "reference/public_fixtures.py", "torch": torch.__version__})


if __name__ == "__main__":
    main()
