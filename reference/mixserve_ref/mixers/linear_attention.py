"""Linear attention (Katharopoulos et al. 2020) and Performer's FAVOR+ (Choromanski et al. 2021).

Per head: S ← S + φ(k)ᵀ v, z ← z + φ(k); o = φ(q) S / (φ(q)·z + ε); y = o W_o.
linear: φ(x) = elu(x) + 1. performer: φ(x) = exp(ω x' − |x'|²/2) / √m with x' = x h^{−1/4} and
ω ∈ R^{m×h} the stored random projection. The positive features are bounded by e^{|ω_i|²/2}, so
no data-dependent stabiliser (which would break the exact recurrence) is needed.

Switches of `linear` for flash-linear-attention's LinearAttention (docs/mixers.md), all off by
default: feature_map (elu, relu, identity, or elementwise_product: fla's Hadamard map
φ(x) = (x W₁ᵀ + b₁) ⊙ (x W₂ᵀ + b₂) per head, [h, h] weights shared by the heads, one map for q
(fq1, fq2) and one for k (fk1, fk2)); q_scale (φ(q) · m^{−1/2}, m the feature size); normalize
(false: o = φ(q) S; z is still updated, unused); group_norm (none, layernorm, rmsnorm: per head over h with
gn_eps) and gn_weight (its weight [h], shared by the heads: tensor `gn.weight`), before W_o.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..cost_model import Cost, group_norm as group_norm_cost, vec_mat
from .common import NormWeight, group_norm, linear, merge_heads, split_heads
from .spec import MixerSpec


def linear_attention(fq, fk, v, eps, normalize=True):
    """The parallel form of the core: o_t = Σ_{j≤t} (φq_t·φk_j) v_j / (Σ_{j≤t} φq_t·φk_j + ε) per
    head, with the features φq, φk [B, n, T, m] and v [B, n, T, h]; without normalize the
    numerator alone. fla's naive_recurrent_linear_attn(normalize=True, scale=1) is this with
    ε = 1e-10 (tests/golden_public/linear_attn)."""
    a = (fq @ fk.transpose(-1, -2)).tril()  # [B, n, T, T]
    return (a @ v) / (a.sum(-1, keepdim=True) + eps) if normalize else a @ v


def linear_attention_step(S, z, fq, fk, v, eps, normalize=True):
    """The recurrent form, one token: S ← S + φkᵀ v, z ← z + φk, o = φq S / (φq·z + ε) (without
    normalize o = φq S; z is updated all the same)."""
    S = S + fk.transpose(-1, -2) @ v
    z = z + fk[:, :, 0]
    o = fq @ S
    return S, z, (o / ((fq[:, :, 0] * z).sum(-1)[..., None, None] + eps) if normalize else o)


FEATURE_MAPS = ("elu", "relu", "identity", "elementwise_product")


class LinearAttention(nn.Module, MixerSpec):
    name = "linear"
    params = {"heads": 1, "eps": 1e-6, "feature_map": "elu", "q_scale": False, "normalize": True,
              "group_norm": "none", "gn_eps": 1e-5, "gn_weight": False}
    quiet_params = ("feature_map", "q_scale", "normalize", "group_norm", "gn_eps", "gn_weight")
    choices = {"feature_map": FEATURE_MAPS, "q_scale": (False, True), "normalize": (False, True),
               "group_norm": ("none", "layernorm", "rmsnorm"), "gn_weight": (False, True)}
    paper_layer = {"heads": 4}
    golden = {"linear": dict(layers=[{"mixer": "linear", "heads": 2}] * 2)}

    @staticmethod
    def random_params(draw):
        return {"heads": draw.heads}

    @staticmethod
    def token_cost(d, t, p):
        return linear_cost(d, p["heads"], p["feature_map"], p["q_scale"], p["normalize"], p["group_norm"],
                           p["gn_weight"])

    @staticmethod
    def param_count(d, l, p):
        h = d // p["heads"]
        # q, k, v, o; the Hadamard maps' four [h, h] weights; the group norm's weight [h]
        return (4 * d * d + (4 * h * h if p["feature_map"] == "elementwise_product" else 0)
                + (h if p["gn_weight"] else 0))

    def __init__(self, cfg, p):
        super().__init__()
        self.n, self.h, self.eps = p["heads"], cfg.d_model // p["heads"], p["eps"]
        self.q, self.k, self.v, self.o = (linear(cfg) for _ in range(4))
        # the switches (Performer has none of them: it takes the defaults)
        self.fmap = p.get("feature_map", "elu")
        self.q_scale, self.normalize = p.get("q_scale", False), p.get("normalize", True)
        self.group_norm, self.gn_eps = p.get("group_norm", "none"), p.get("gn_eps", 1e-5)
        if self.fmap == "elementwise_product":  # biases whatever the model's `bias`, as fla's
            self.fq1, self.fq2, self.fk1, self.fk2 = (nn.Linear(self.h, self.h) for _ in range(4))
        self.gn = NormWeight(self.h) if p.get("gn_weight") else None

    def feature_map(self, x, which="q"):
        """φ of q or k [..., h] (which: "q" or "k"; only the Hadamard map has one map each)."""
        if self.fmap == "elu":
            return F.elu(x) + 1
        if self.fmap == "relu":
            return F.relu(x)
        if self.fmap == "identity":
            return x
        l1, l2 = (self.fq1, self.fq2) if which == "q" else (self.fk1, self.fk2)
        return l1(x) * l2(x)

    def n_features(self):
        return self.h

    def _phi_qkv(self, x):
        q, k, v = (split_heads(f(x), self.n) for f in (self.q, self.k, self.v))
        fq = self.feature_map(q, "q")
        if self.q_scale:
            fq = fq * self.n_features() ** -0.5
        return fq, self.feature_map(k, "k"), v

    def _out(self, o):
        """o [B, n, T, h] -> y [B, T, d]: the group norm (and its weight), then W_o."""
        o = group_norm(o, self.group_norm, self.gn_eps)
        if self.gn is not None:
            o = self.gn(o)
        return self.o(merge_heads(o))

    def forward(self, x):
        fq, fk, v = self._phi_qkv(x)
        return self._out(linear_attention(fq, fk, v, self.eps, self.normalize))

    def init_state(self, B, device):
        m = self.n_features()
        return {"S": torch.zeros(B, self.n, m, self.h, device=device),
                "z": torch.zeros(B, self.n, m, device=device)}

    def step(self, x, state, pos):
        fq, fk, v = self._phi_qkv(x[:, None])  # [B, n, 1, ·]
        state["S"], state["z"], o = linear_attention_step(state["S"], state["z"], fq, fk, v, self.eps,
                                                          self.normalize)
        return self._out(o)[:, 0]


class Performer(LinearAttention):
    name = "performer"
    params = {"heads": 1, "features": None, "eps": 1e-6}
    quiet_params = ()
    choices = {}
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

    def feature_map(self, x, which="q"):
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


def _linear_recurrence(d, heads, features, normalize=True):
    """Per head with m = features: S += φ(k)ᵀ v, z += φ(k), φ(q) S, φ(q)·z + ε, and the division
    (without normalize only S, z and φ(q) S: z is kept up to date all the same)."""
    n, h, m = heads, d // heads, features
    per_head = (Cost(mul=m * h, add=m * h)    # S += φ(k)ᵀ v
                + Cost(add=m)                 # z += φ(k)
                + vec_mat(m, h))              # φ(q) S
    if normalize:
        per_head = (per_head
                    + vec_mat(m, 1)           # φ(q)·z
                    + Cost(add=1)             # + ε (counted like σ's 1 + and group norm's + ε)
                    + Cost(div=h))            # numerator / denominator
    return n * per_head


def feature_map_cost(d, heads, feature_map):
    """φ of one of q, k (d values, n heads of h), with its path."""
    n, h = heads, d // heads
    if feature_map == "elu":
        # elu(x) + 1 = x + 1 (x > 0) or e^{x}: counted as 1 exp + 1 add per element, whichever
        # branch is taken (the comparison is not counted)
        return Cost(exp=d, add=d).with_path("exp-cum")
    if feature_map in ("relu", "identity"):
        return Cost()  # a comparison, or nothing
    if feature_map == "elementwise_product":
        # (x W₁ᵀ + b₁) ⊙ (x W₂ᵀ + b₂) per head: two h×h products side by side (biases not
        # counted), then the product
        return (n * (2 * vec_mat(h, h)) + Cost(mul=d)).with_path("mul-cum-mul")
    raise ValueError(f"unknown feature map {feature_map!r}")


def linear_cost(d, heads, feature_map="elu", q_scale=False, normalize=True, group_norm="none", gn_weight=False):
    n, h = heads, d // heads
    phi = feature_map_cost(d, heads, feature_map)
    c = 4 * vec_mat(d, d) + 2 * phi + _linear_recurrence(d, heads, h, normalize)
    if q_scale:
        # φ(q)·m^{−1/2}, counted as a division like attention's 1/√h; on q's branch, which
        # reaches φ(q) S before S (behind φ(k)ᵀ v and S +=) is ready: off the path
        c = c + Cost(div=d)
    norm = group_norm_cost(h, group_norm)
    c = c + n * norm
    if gn_weight:
        c = c + Cost(mul=d)  # the norm's weight (it could be folded into W_o; counted as computed)
    # k: proj, φ, φ(k)ᵀv, S+, φ(q)S (mul-cum), ÷, the group norm and its weight, W_o
    path = ["mul-cum", phi.critical_path, "mul-cum-mul-cum", "div" if normalize else "", norm.critical_path,
            "mul" if gn_weight else "", "mul-cum"]
    return c.with_path("-".join(p for p in path if p))


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
