"""RetNet multi-scale retention (Sun et al. 2023) as DESIGN §5 fixes it.

Per head i: γ_i = 1 − 2^{−5−i}; q, k rotated by rotate-half RoPE, k scaled by h^{−1/2};
S_i ← γ_i S_i + k_iᵀ v_i; o_i = q_i S_i; y = (swish(x W_g) ⊙ GroupNorm_n(o)) W_o, the group norm
per head without affine parameters.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..cost_model import Cost, rope, sigmoid, vec_mat
from .common import apply_rope, linear, merge_heads, rope_angles, split_heads
from .spec import MixerSpec


def gammas(n):
    return 1.0 - 2.0 ** (-5.0 - torch.arange(n, dtype=torch.float64))


def retention(q, k, v, gamma):
    """The parallel form of retention's core: o_t = Σ_{j≤t} γ^{t−j} (q_t·k_j) v_j per head, with q,
    k, v [B, n, T, h] (k already scaled) and gamma [n]. fla's naive_retention is this with k
    scaled inside (tests/golden_public/retention)."""
    T = q.shape[2]
    t = torch.arange(T, device=q.device)
    lag = (t[:, None] - t[None, :]).to(q.dtype)
    decay = torch.exp(lag[None] * torch.log(gamma.to(q.dtype))[:, None, None])  # γ^{t-j}
    decay = decay.masked_fill(lag[None] < 0, 0.0)  # [n, T, T]
    return ((q @ k.transpose(-1, -2)) * decay) @ v


def retention_step(S, q, k, v, gamma):
    """The recurrent form, one token: S ← γ S + kᵀ v, o = q S (q, k, v [B, n, 1, h])."""
    S = S * gamma[None, :, None, None].to(S.dtype) + k.transpose(-1, -2) @ v
    return S, q @ S


class RetNet(nn.Module, MixerSpec):
    name = "retnet"
    params = {"heads": 1, "rope_base": 10000.0, "gn_eps": 1e-5}
    always_rotates = True
    paper_layer = {"heads": 4}
    golden = {"retnet": dict(layers=[{"mixer": "retnet", "heads": 4}] * 2)}

    @staticmethod
    def random_params(draw):
        return {"heads": draw.heads}

    @staticmethod
    def token_cost(d, t, p):
        return retnet_cost(d, p["heads"])

    @staticmethod
    def param_count(d, l, p):
        return 5 * d * d

    def __init__(self, cfg, p):
        super().__init__()
        self.n, self.h = p["heads"], cfg.d_model // p["heads"]
        self.rope_base, self.gn_eps = p["rope_base"], p["gn_eps"]
        self.q, self.k, self.v, self.g, self.o = (linear(cfg) for _ in range(5))
        self.register_buffer("gamma", gammas(self.n).float(), persistent=False)

    def _qkv(self, x, positions):
        q, k, v = (split_heads(f(x), self.n) for f in (self.q, self.k, self.v))
        cos, sin = rope_angles(positions, self.h, self.rope_base)
        cos, sin = cos.to(x.device), sin.to(x.device)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin) * self.h ** -0.5, v

    def _out(self, x, o):
        """o [B, n, T, h] -> y [B, T, d]."""
        o = F.layer_norm(o, (self.h,), eps=self.gn_eps)  # = GroupNorm(n groups), no affine
        return self.o(F.silu(self.g(x)) * merge_heads(o))

    def forward(self, x):
        q, k, v = self._qkv(x, torch.arange(x.shape[1]))
        return self._out(x, retention(q, k, v, self.gamma))

    def init_state(self, B, device):
        return {"S": torch.zeros(B, self.n, self.h, self.h, device=device)}

    def step(self, x, state, pos):
        q, k, v = self._qkv(x[:, None], torch.tensor([pos]))  # [B, n, 1, h]
        state["S"], o = retention_step(state["S"], q, k, v, self.gamma)
        return self._out(x[:, None], o)[:, 0]


def retnet_cost(d, heads):
    n, h = heads, d // heads
    group_norm_per_head = (Cost(add=h - 1, div=1)              # mean
                           + Cost(add=h)                       # centre
                           + Cost(mul=h, add=h - 1, div=1)     # variance
                           + Cost(add=1)                       # + ε
                           + Cost(exp=1)                       # (var + ε)^{−1/2}
                           + Cost(mul=h))                      # normalise
    c = (5 * vec_mat(d, d)                    # q, k, v, g, o
         + rope(d) + rope(d)                  # RoPE on q and k
         + Cost(div=d)                        # k / √h (the paper counts attention's 1/√h as div)
         + n * (Cost(mul=h * h)               # γ S
                + Cost(mul=h * h, add=h * h)  # + kᵀ v
                + vec_mat(h, h))              # o = q S
         + n * group_norm_per_head
         + sigmoid(d) + Cost(mul=d)           # swish(g) = g σ(g)
         + Cost(mul=d))                       # swish(g) ⊙ GroupNorm(o)
    # k: proj, RoPE, ÷√h, kᵀv, +γS, qS, mean, centre, square, Σ, ÷h, +ε, rsqrt, normalise, gate, W_o
    return c.with_path("mul-cum-mul-cum-div-mul-cum-mul-cum-cum-div-cum-mul-cum-div-cum-exp-mul-mul-mul-cum")
