"""RetNet multi-scale retention (Sun et al. 2023) as DESIGN §5 fixes it.

Per head i: γ_i = 1 − 2^{−5−i}; q, k rotated by rotate-half RoPE, k scaled by h^{−1/2};
S_i ← γ_i S_i + k_iᵀ v_i; o_i = q_i S_i; y = (swish(x W_g) ⊙ GroupNorm_n(o)) W_o, the group norm
per head without affine parameters.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import apply_rope, linear, merge_heads, rope_angles, split_heads


def gammas(n):
    return 1.0 - 2.0 ** (-5.0 - torch.arange(n, dtype=torch.float64))


class RetNet(nn.Module):
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
        T = x.shape[1]
        q, k, v = self._qkv(x, torch.arange(T))
        t = torch.arange(T, device=x.device)
        lag = (t[:, None] - t[None, :]).float()
        decay = torch.exp(lag[None] * torch.log(self.gamma)[:, None, None])  # γ^{t-j}
        decay = decay.masked_fill(lag[None] < 0, 0.0)  # [n, T, T]
        return self._out(x, ((q @ k.transpose(-1, -2)) * decay) @ v)

    def init_state(self, B, device):
        return {"S": torch.zeros(B, self.n, self.h, self.h, device=device)}

    def step(self, x, state, pos):
        q, k, v = self._qkv(x[:, None], torch.tensor([pos]))  # [B, n, 1, h]
        S = state["S"] * self.gamma[None, :, None, None] + k.transpose(-1, -2) @ v
        state["S"] = S
        return self._out(x[:, None], q @ S)[:, 0]
