"""Multi-head causal softmax attention (GPT-2 style), optional rotate-half RoPE."""
import math

import torch
import torch.nn as nn

from ..cost_model import Cost, rope, vec_mat
from .common import apply_rope, linear, merge_heads, rope_angles, split_heads
from .spec import MixerSpec


class Attention(nn.Module, MixerSpec):
    name = "attention"
    params = {"heads": 1, "rope": False, "rope_base": 10000.0}
    paper_layer = {"heads": 32}  # the paper's best attention
    golden = {
        "attention": dict(layers=[{"mixer": "attention", "heads": 4}] * 2),
        "attention_rope": dict(layers=[{"mixer": "attention", "heads": 2, "rope": True}] * 2, position="none",
                               activation="gelu_tanh", tie_embeddings=False, bias=False),
    }

    @staticmethod
    def random_params(draw):
        return {"heads": draw.heads, "rope": draw.coin()}

    @staticmethod
    def token_cost(d, t, p):
        return attention_cost(d, t, p["heads"], p["rope"])

    @staticmethod
    def param_count(d, l, p):
        return 4 * d * d

    def __init__(self, cfg, p):
        super().__init__()
        self.n, self.h = p["heads"], cfg.d_model // p["heads"]
        self.rope, self.rope_base = p["rope"], p["rope_base"]
        self.q, self.k, self.v, self.o = (linear(cfg) for _ in range(4))

    def _qkv(self, x, positions):
        q, k, v = (split_heads(f(x), self.n) for f in (self.q, self.k, self.v))
        if self.rope:
            cos, sin = rope_angles(positions, self.h, self.rope_base)
            cos, sin = cos.to(x.device), sin.to(x.device)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return q, k, v

    def forward(self, x):
        T = x.shape[1]
        q, k, v = self._qkv(x, torch.arange(T))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.h)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = scores.masked_fill(mask, float("-inf")).softmax(-1)
        return self.o(merge_heads(att @ v))

    def init_state(self, B, device):
        d = self.n * self.h
        return {"k": torch.zeros(B, 0, d, device=device), "v": torch.zeros(B, 0, d, device=device)}

    def step(self, x, state, pos):
        q, k, v = self._qkv(x[:, None], torch.tensor([pos]))
        state["k"] = torch.cat([state["k"], merge_heads(k)], 1)
        state["v"] = torch.cat([state["v"], merge_heads(v)], 1)
        K, V = split_heads(state["k"], self.n), split_heads(state["v"], self.n)
        att = (q @ K.transpose(-1, -2) / math.sqrt(self.h)).softmax(-1)
        return self.o(merge_heads(att @ V))[:, 0]


def attention_cost(d, t, heads=1, rope_qk=False):
    n, h = heads, d // heads
    per_head = (3 * vec_mat(d, h)        # q, k, v of this head
                + t * vec_mat(h, 1)      # q·k_j for the t keys
                + Cost(div=t)            # scores / √h
                + Cost(exp=t)            # e^{score}
                + Cost(div=t)            # e^{score} / Σ e^{score}
                + vec_mat(t, h))         # Σ_j weight_j v_j
    softmax_denominator = Cost(add=t - 1)  # Table 5 counts it once, not per head (see training_totals)
    c = n * per_head + softmax_denominator + vec_mat(d, d)  # + output projection
    path = "mul-cum-mul-cum-div-exp-cum-div-mul-cum-mul-cum"
    if rope_qk:  # not in the paper: rotating q and k adds one mul-cum after the projections
        c = c + rope(d) + rope(d)
        path = "mul-cum-" + path
    return c.with_path(path)
