"""Multi-head causal softmax attention (GPT-2 style), optional rotate-half RoPE."""
import math

import torch
import torch.nn as nn

from .common import apply_rope, linear, merge_heads, rope_angles, split_heads


class Attention(nn.Module):
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
