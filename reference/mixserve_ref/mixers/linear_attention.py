"""Linear attention (Katharopoulos et al. 2020) and Performer's FAVOR+ (Choromanski et al. 2021).

Per head: S ← S + φ(k)ᵀ v, z ← z + φ(k); o = φ(q) S / (φ(q)·z + ε); y = o W_o.
linear: φ(x) = elu(x) + 1. performer: φ(x) = exp(ω x' − |x'|²/2) / √m with x' = x h^{−1/4} and
ω ∈ R^{m×h} the stored random projection. The positive features are bounded by e^{|ω_i|²/2}, so
no data-dependent stabiliser (which would break the exact recurrence) is needed.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..cost_model import Cost, vec_mat
from .common import linear, merge_heads, split_heads
from .spec import MixerSpec


def linear_attention(fq, fk, v, eps):
    """The parallel form of the core: o_t = Σ_{j≤t} (φq_t·φk_j) v_j / (Σ_{j≤t} φq_t·φk_j + ε) per
    head, with the features φq, φk [B, n, T, m] and v [B, n, T, h]. fla's
    naive_recurrent_linear_attn(normalize=True, scale=1) is this with ε = 1e-10
    (tests/golden_public/linear_attn)."""
    a = (fq @ fk.transpose(-1, -2)).tril()  # [B, n, T, T]
    return (a @ v) / (a.sum(-1, keepdim=True) + eps)


def linear_attention_step(S, z, fq, fk, v, eps):
    """The recurrent form, one token: S ← S + φkᵀ v, z ← z + φk, o = φq S / (φq·z + ε)."""
    S = S + fk.transpose(-1, -2) @ v
    z = z + fk[:, :, 0]
    return S, z, (fq @ S) / ((fq[:, :, 0] * z).sum(-1)[..., None, None] + eps)


class LinearAttention(nn.Module, MixerSpec):
    name = "linear"
    params = {"heads": 1, "eps": 1e-6}
    paper_layer = {"heads": 4}
    golden = {"linear": dict(layers=[{"mixer": "linear", "heads": 2}] * 2)}

    @staticmethod
    def random_params(draw):
        return {"heads": draw.heads}

    @staticmethod
    def token_cost(d, t, p):
        return linear_cost(d, p["heads"])

    @staticmethod
    def param_count(d, l, p):
        return 4 * d * d

    def __init__(self, cfg, p):
        super().__init__()
        self.n, self.h, self.eps = p["heads"], cfg.d_model // p["heads"], p["eps"]
        self.q, self.k, self.v, self.o = (linear(cfg) for _ in range(4))

    def feature_map(self, x):
        return F.elu(x) + 1

    def n_features(self):
        return self.h

    def _phi_qkv(self, x):
        q, k, v = (split_heads(f(x), self.n) for f in (self.q, self.k, self.v))
        return self.feature_map(q), self.feature_map(k), v

    def forward(self, x):
        fq, fk, v = self._phi_qkv(x)
        return self.o(merge_heads(linear_attention(fq, fk, v, self.eps)))

    def init_state(self, B, device):
        m = self.n_features()
        return {"S": torch.zeros(B, self.n, m, self.h, device=device),
                "z": torch.zeros(B, self.n, m, device=device)}

    def step(self, x, state, pos):
        fq, fk, v = self._phi_qkv(x[:, None])  # [B, n, 1, ·]
        state["S"], state["z"], o = linear_attention_step(state["S"], state["z"], fq, fk, v, self.eps)
        return self.o(merge_heads(o))[:, 0]


class Performer(LinearAttention):
    name = "performer"
    params = {"heads": 1, "features": None, "eps": 1e-6}
    paper_layer = {"heads": 4, "features": 32}
    golden = {"performer": dict(layers=[{"mixer": "performer", "heads": 2, "features": 8}] * 2)}

    @staticmethod
    def random_params(draw):
        return {"heads": draw.heads, "features": draw.pick([4, 8, 16])}

    @staticmethod
    def token_cost(d, t, p):
        return performer_cost(d, p["heads"], p["features"])

    @staticmethod
    def param_count(d, l, p):
        return 4 * d * d  # ω is stored but not trained

    def __init__(self, cfg, p):
        super().__init__(cfg, p)
        self.m = p["features"]
        # stored in the weights as `features` so every backend uses the same draw; not trained
        self.features = nn.Parameter(orthogonal_gaussian(self.m, self.h), requires_grad=False)

    def n_features(self):
        return self.m

    def feature_map(self, x):
        x = x * self.h ** -0.25
        proj = x @ self.features.t()  # [..., m]
        return torch.exp(proj - (x * x).sum(-1, keepdim=True) / 2) / math.sqrt(self.m)


def orthogonal_gaussian(m, h, generator=None):
    """FAVOR+ orthogonal random features: blocks of orthogonal rows, norms of Gaussian vectors."""
    blocks, left = [], m
    while left > 0:
        g = torch.randn(h, h, generator=generator)
        q, _ = torch.linalg.qr(g)
        blocks.append(q.t()[: min(left, h)])
        left -= h
    w = torch.cat(blocks)
    norms = torch.randn(m, h, generator=generator).norm(dim=1, keepdim=True)
    return w * norms


def _linear_recurrence(d, heads, features):
    """Per head with m = features: S += φ(k)ᵀ v, z += φ(k), φ(q) S, φ(q)·z + ε, and the division."""
    n, h, m = heads, d // heads, features
    per_head = (Cost(mul=m * h, add=m * h)    # S += φ(k)ᵀ v
                + Cost(add=m)                 # z += φ(k)
                + vec_mat(m, h)               # φ(q) S
                + vec_mat(m, 1)               # φ(q)·z
                + Cost(add=1)                 # + ε (counted like σ's 1 + and group norm's + ε)
                + Cost(div=h))                # numerator / denominator
    return n * per_head


def linear_cost(d, heads):
    # φ(x) = elu(x) + 1 = x + 1 (x > 0) or e^{x}: counted as 1 exp + 1 add per element,
    # whichever branch is taken (the comparison is not counted)
    phi = Cost(exp=d, add=d)
    c = 4 * vec_mat(d, d) + 2 * phi + _linear_recurrence(d, heads, d // heads)
    # k: proj, e^, +1, φ(k)ᵀv, S+, φ(q)S (mul-cum), ÷, W_o
    return c.with_path("mul-cum-exp-cum-mul-cum-mul-cum-div-mul-cum")


def performer_cost(d, heads, features):
    n, h, m = heads, d // heads, features
    # FAVOR+ φ(x) = exp(ω x' − ‖x'‖²/2) / √m, x' = x h^{−1/4}, ω ∈ R^{m×h}, per head
    phi_per_head = (Cost(mul=h)               # x' = x h^{−1/4}
                    + vec_mat(h, m)           # ω x'
                    + vec_mat(h, 1)           # ‖x'‖²
                    + Cost(mul=1)             # · ½
                    + Cost(add=m)             # ω x' − ‖x'‖²/2
                    + Cost(exp=m)
                    + Cost(mul=m))            # · 1/√m
    c = 4 * vec_mat(d, d) + 2 * n * phi_per_head + _linear_recurrence(d, heads, features)
    # k: proj, ·h^{−1/4}, x'², Σ, ·½, −, exp, ·1/√m, φ(k)ᵀv, S+, φ(q)S (mul-cum), ÷, W_o
    # (the ‖x'‖²/2 branch is one stage longer than the ω x' branch)
    return c.with_path("mul-cum-mul-mul-cum-mul-cum-exp-mul-mul-cum-mul-cum-div-mul-cum")
