"""The reference's mixer cores against fixtures made by public code (tests/golden_public, written
by reference/public_fixtures.py from flash-linear-attention's naive forms; provenance.json in each
folder): retention's parallel and recurrent forms (mixers/retnet.py) and linear attention's
(mixers/linear_attention.py), computed in float64 from the fixtures' float32 inputs, within 2e-5 of
the largest output (fla computes in float32, so its own rounding is most of the difference).
The public code is not needed here."""
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "reference"))
from mixserve_ref import safetensors_io  # noqa: E402
from mixserve_ref.mixers.linear_attention import linear_attention, linear_attention_step  # noqa: E402
from mixserve_ref.mixers.retnet import gammas, retention, retention_step  # noqa: E402

PUBLIC = os.path.join(ROOT, "tests", "golden_public")
TOLERANCE = 2e-5


def fixture(op):
    loaded = safetensors_io.load(os.path.join(PUBLIC, op, "fixture.safetensors"))
    tensors = loaded[0] if isinstance(loaded, tuple) else loaded
    return {k: v.double() for k, v in tensors.items()}


def close(ours, theirs):
    scale = theirs.abs().max().item()
    return (ours - theirs).abs().max().item() <= TOLERANCE * scale


def test_retention_matches_fla_naive_retention():
    f = fixture("retention")
    q, k, v, want = f["q"], f["k"], f["v"], f["o"]
    n, h = q.shape[1], q.shape[3]
    gamma = gammas(n)
    k = k * h ** -0.5  # fla scales q inside; scaling k instead is the same product
    assert close(retention(q, k, v, gamma), want)
    S = torch.zeros(q.shape[0], n, h, h, dtype=torch.float64)
    steps = []
    for t in range(q.shape[2]):
        S, o = retention_step(S, q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], gamma)
        steps.append(o)
    assert close(torch.cat(steps, 2), want)


def test_linear_attention_matches_fla_naive_recurrent_linear_attn():
    f = fixture("linear_attn")
    # fla's layout is [B, T, heads, d]; ours [B, heads, T, d]. fla's ε is 1e-10.
    fq, fk, v, want = (f[k].transpose(1, 2) for k in ("fq", "fk", "v", "o"))
    assert close(linear_attention(fq, fk, v, 1e-10), want)
    B, n, T, m = fq.shape
    S, z = torch.zeros(B, n, m, v.shape[-1], dtype=torch.float64), torch.zeros(B, n, m, dtype=torch.float64)
    steps = []
    for t in range(T):
        S, z, o = linear_attention_step(S, z, fq[:, :, t:t + 1], fk[:, :, t:t + 1], v[:, :, t:t + 1], 1e-10)
        steps.append(o)
    assert close(torch.cat(steps, 2), want)


def test_fixtures_name_their_source():
    import json
    for op in ("retention", "linear_attn"):
        with open(os.path.join(PUBLIC, op, "provenance.json")) as f:
            p = json.load(f)
        assert p["repository"].startswith("https://github.com/") and len(p["commit"]) == 40
        assert p["script"] == "reference/public_fixtures.py"
