"""RetNet multi-scale retention (Sun et al. 2023) as DESIGN §5 fixes it.

Per head i: γ_i = 1 − 2^{−5−i}; q, k rotated by rotate-half RoPE, k scaled by h^{−1/2};
S_i ← γ_i S_i + k_iᵀ v_i; o_i = q_i S_i; y = (swish(x W_g) ⊙ GroupNorm_n(o)) W_o, the group norm
per head without affine parameters.

Switches for microsoft/torchscale's conventions (docs/mixers.md), each off by default:
value_dim (v, g and o's width; each head's value size value_dim/n, its key size h = d/n),
rope_style "torchscale" (interleaved pairs, θ_i = base^{−i/(h/2−1)}), group_norm "rmsnorm" (per
head, no affine), decay_normalize (o_t ÷ √(Σ_{j≤t} γ^j), torchscale's `scale`). And for
flash-linear-attention's: gn_weight (a learnable weight [value_dim/n], shared by the heads,
multiplied after the group norm: tensor `gn.weight`).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..cost_model import Cost, group_norm as group_norm_cost, rope, sigmoid, vec_mat
from .common import NormWeight, apply_rope, group_norm, linear, merge_heads, rope_angles, split_heads
from .spec import MixerSpec


def gammas(n):
    return 1.0 - 2.0 ** (-5.0 - torch.arange(n, dtype=torch.float64))


def retention(q, k, v, gamma):
    """The parallel form of retention's core: o_t = Σ_{j≤t} γ^{t−j} (q_t·k_j) v_j per head, with q,
    k [B, n, T, h] (k already scaled), v [B, n, T, m] and gamma [n]. fla's naive_retention is this with k
    scaled inside (tests/golden_public/retention)."""
    T = q.shape[2]
    t = torch.arange(T, device=q.device)
    lag = (t[:, None] - t[None, :]).to(q.dtype)
    decay = torch.exp(lag[None] * torch.log(gamma.to(q.dtype))[:, None, None])  # γ^{t-j}
    decay = decay.masked_fill(lag[None] < 0, 0.0)  # [n, T, T]
    return ((q @ k.transpose(-1, -2)) * decay) @ v


def retention_step(S, q, k, v, gamma):
    """The recurrent form, one token: S ← γ S + kᵀ v, o = q S (q, k [B, n, 1, h], v [B, n, 1, m])."""
    S = S * gamma[None, :, None, None].to(S.dtype) + k.transpose(-1, -2) @ v
    return S, q @ S


def decay_scale(gamma, T):
    """[n, T]: Σ_{j=0..t} γ^j for t < T, per head: the row sum of the decay mask, torchscale's
    `scale` (its recurrent form keeps S/√scale, its parallel form divides the mask rows by √scale).
    Summed term by term rather than (1 − γ^{t+1})/(1 − γ), which is 0/0 where γ rounds to 1."""
    return torch.cumsum(gamma[:, None] ** torch.arange(T, dtype=gamma.dtype, device=gamma.device), dim=-1)


class RetNet(nn.Module, MixerSpec):
    name = "retnet"
    params = {"heads": 1, "rope_base": 10000.0, "gn_eps": 1e-5, "value_dim": None, "rope_style": "half",
              "group_norm": "layernorm", "decay_normalize": False, "gn_weight": False}
    quiet_params = ("value_dim", "rope_style", "group_norm", "decay_normalize", "gn_weight")
    choices = {"rope_style": ("half", "torchscale"), "group_norm": ("layernorm", "rmsnorm"),
               "decay_normalize": (False, True), "gn_weight": (False, True)}
    always_rotates = True
    paper_layer = {"heads": 4}
    golden = {"retnet": dict(layers=[{"mixer": "retnet", "heads": 4}] * 2)}

    @staticmethod
    def random_params(draw):
        return {"heads": draw.heads}

    @staticmethod
    def token_cost(d, t, p):
        return retnet_cost(d, p["heads"], p["value_dim"], p["group_norm"], p["decay_normalize"], p["gn_weight"])

    @staticmethod
    def param_count(d, l, p):
        dv = p["value_dim"] or d
        # q, k [d, d]; v, g [dv, d]; o [d, dv]; the group norm's weight [dv/n]
        return 2 * d * d + 3 * d * dv + (dv // p["heads"] if p["gn_weight"] else 0)

    def __init__(self, cfg, p):
        super().__init__()
        d = cfg.d_model
        self.n, self.h = p["heads"], d // p["heads"]
        self.dv = p["value_dim"] or d
        self.m = self.dv // self.n  # a head's value size (its key size is h)
        self.rope_base, self.gn_eps, self.rope_style = p["rope_base"], p["gn_eps"], p["rope_style"]
        self.group_norm, self.decay_normalize = p["group_norm"], p["decay_normalize"]
        self.q, self.k = linear(cfg), linear(cfg)
        self.v, self.g = linear(cfg, d, self.dv), linear(cfg, d, self.dv)
        self.o = linear(cfg, self.dv, d)
        self.gn = NormWeight(self.m) if p.get("gn_weight") else None
        self.register_buffer("gamma", gammas(self.n).float(), persistent=False)

    def _qkv(self, x, positions):
        q, k, v = (split_heads(f(x), self.n) for f in (self.q, self.k, self.v))
        cos, sin = rope_angles(positions, self.h, self.rope_base, self.rope_style)
        cos, sin = cos.to(x.device), sin.to(x.device)
        rot = lambda t: apply_rope(t, cos, sin, self.rope_style)  # noqa: E731
        return rot(q), rot(k) * self.h ** -0.5, v

    def _out(self, x, o, scale):
        """o [B, n, T, m], scale [n, T] (Σ_{j≤t} γ^j) -> y [B, T, d]."""
        if self.decay_normalize:
            o = o / scale.to(o.dtype).sqrt()[None, :, :, None]
        o = group_norm(o, self.group_norm, self.gn_eps)  # layernorm: GroupNorm(n groups), no affine
        if self.gn is not None:
            o = self.gn(o)
        return self.o(F.silu(self.g(x)) * merge_heads(o))

    def forward(self, x):
        T = x.shape[1]
        q, k, v = self._qkv(x, torch.arange(T))
        return self._out(x, retention(q, k, v, self.gamma), decay_scale(self.gamma, T))

    def init_state(self, B, device):
        return {"S": torch.zeros(B, self.n, self.h, self.m, device=device)}

    def step(self, x, state, pos):
        q, k, v = self._qkv(x[:, None], torch.tensor([pos]))  # [B, n, 1, h], v [B, n, 1, m]
        state["S"], o = retention_step(state["S"], q, k, v, self.gamma)
        return self._out(x[:, None], o, decay_scale(self.gamma, pos + 1)[:, -1:])[:, 0]


def retnet_cost(d, heads, value_dim=None, group_norm="layernorm", decay_normalize=False, gn_weight=False):
    n, h = heads, d // heads
    dv = value_dim or d
    m = dv // n  # a head's value size
    norm_per_head = group_norm_cost(m, group_norm)
    norm_path = norm_per_head.critical_path
    c = (2 * vec_mat(d, d)                    # q, k
         + 2 * vec_mat(d, dv) + vec_mat(dv, d)  # v, g; o
         + rope(d) + rope(d)                  # RoPE on q and k
         + Cost(div=d)                        # k / √h (the paper counts attention's 1/√h as div)
         + n * (Cost(mul=h * m)               # γ S
                + Cost(mul=h * m, add=h * m)  # + kᵀ v
                + vec_mat(h, m))              # o = q S
         + n * norm_per_head
         + sigmoid(dv) + Cost(mul=dv)         # swish(g) = g σ(g)
         + Cost(mul=dv))                      # swish(g) ⊙ GroupNorm(o)
    path = "mul-cum-mul-cum-div-mul-cum-mul-cum"  # k: proj, RoPE, ÷√h, kᵀv, +γS, qS
    if decay_normalize:
        # o ÷ √(Σ_{j≤t} γ^j): the factor is a constant of head and position (like RoPE's angles),
        # precomputed; applying it is one mul per value
        c = c + Cost(mul=dv)
        path += "-mul"
    path += "-" + norm_path
    if gn_weight:
        # the norm's weight, one mul per value (it could be folded into W_o; counted as computed)
        c = c + Cost(mul=dv)
        path += "-mul"
    return c.with_path(path + "-mul-mul-cum")  # ..., gate, W_o
