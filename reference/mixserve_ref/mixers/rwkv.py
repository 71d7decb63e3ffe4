"""RWKV-4 time mixing (Peng et al. 2023), exactly as Hugging Face's RwkvSelfAttention.

Token shift with the previous (normalised) input x_prev; r = σ(x_r W_r), k = x_k W_k, v = x_v W_v
with x_* = x·μ_* + x_prev·(1−μ_*); WKV with decay w = −exp(time_decay) and bonus u = time_first:
wkv_t = (Σ_{j<t} e^{k_j+(t−1−j)w} v_j + e^{u+k_t} v_t) / (same without v); y = (r ⊙ wkv) W_o.
Decode keeps (aa, bb, pp): numerator and denominator scaled by e^{−pp}, as RWKV-4 does.
"""
import math

import torch
import torch.nn as nn

from ..cost_model import Cost, sigmoid, vec_mat
from .common import NEG_BIG, linear
from .spec import MixerSpec


def token_shift(x):
    """x_prev for every position of a sequence starting from a zero state."""
    return torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], 1)


def lerp(x, x_prev, mix):
    return x * mix + x_prev * (1 - mix)


class RWKV(nn.Module, MixerSpec):
    name = "rwkv"
    # RWKV-4 models: its own channel-mix FFN, no position embedding, a norm after the embedding
    model_overrides = {"ffn": "rwkv_channel_mix", "position": "none", "embed_norm": True}
    golden = {"rwkv": dict(layers=[{"mixer": "rwkv"}] * 2, ffn="rwkv_channel_mix", position="none",
                           embed_norm=True, bias=False, tie_embeddings=False)}

    @staticmethod
    def token_cost(d, t, p):
        return rwkv_cost(d)

    @staticmethod
    def param_count(d, l, p):
        return 4 * d * d + 5 * d

    @staticmethod
    def paper_init(block, index, n_layers):
        """RWKV-4's initialisation of time_decay/time_first/time_mix (BlinkDL/RWKV-LM)."""
        mix, d = block.mixer, block.mixer.time_decay.numel()
        r01 = index / max(n_layers - 1, 1)
        r10 = 1.0 - index / n_layers
        h = torch.arange(d, dtype=torch.float64)
        x = h / d
        with torch.no_grad():
            mix.time_decay.copy_(-5 + 8 * (h / max(d - 1, 1)) ** (0.7 + 1.3 * r01))
            zigzag = torch.tensor([((j + 1) % 3 - 1) * 0.5 for j in range(d)], dtype=torch.float64)
            mix.time_first.copy_(math.log(0.3) + zigzag)
            mix.time_mix_k.copy_(x ** r10)
            mix.time_mix_v.copy_(x ** r10 + 0.3 * r01)
            mix.time_mix_r.copy_(x ** (0.5 * r10))
            if hasattr(block.ffn, "time_mix_k"):
                block.ffn.time_mix_k.copy_(x ** r10)
                block.ffn.time_mix_r.copy_(x ** r10)

    def __init__(self, cfg, p):
        super().__init__()
        d = cfg.d_model
        for name in ("time_mix_k", "time_mix_v", "time_mix_r", "time_decay", "time_first"):
            setattr(self, name, nn.Parameter(torch.zeros(d)))
        self.key, self.value, self.receptance, self.output = (linear(cfg) for _ in range(4))

    def _rkv(self, x, x_prev):
        k = self.key(lerp(x, x_prev, self.time_mix_k))
        v = self.value(lerp(x, x_prev, self.time_mix_v))
        r = torch.sigmoid(self.receptance(lerp(x, x_prev, self.time_mix_r)))
        return r, k, v

    def forward(self, x):
        r, k, v = self._rkv(x, token_shift(x))
        T = x.shape[1]
        t = torch.arange(T, device=x.device)
        lag = (t[:, None] - t[None, :]).float()  # t − j
        w = -torch.exp(self.time_decay)
        # logits[b, t, j, c] = k_j + (t−1−j) w  (j < t);  u + k_t  (j = t);  −inf (j > t)
        logits = k[:, None, :, :] + ((lag - 1)[..., None] * w)[None]
        diag = (lag == 0)[None, :, :, None]
        logits = torch.where(diag, k[:, None, :, :] + self.time_first, logits)
        logits = logits.masked_fill((lag < 0)[None, :, :, None], float("-inf"))
        m = logits.amax(2, keepdim=True)
        e = torch.exp(logits - m)
        wkv = (e * v[:, None]).sum(2) / e.sum(2)
        return self.output(r * wkv)

    def init_state(self, B, device):
        d = self.key.in_features
        z = lambda: torch.zeros(B, d, device=device)
        return {"x_prev": z(), "aa": z(), "bb": z(), "pp": torch.full((B, d), NEG_BIG, device=device)}

    def step(self, x, state, pos):
        r, k, v = self._rkv(x, state["x_prev"])
        aa, bb, pp = state["aa"], state["bb"], state["pp"]
        u, w = self.time_first, -torch.exp(self.time_decay)
        ww = u + k
        p = torch.maximum(pp, ww)
        e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
        wkv = (e1 * aa + e2 * v) / (e1 * bb + e2)
        ww = pp + w
        p = torch.maximum(ww, k)
        e1, e2 = torch.exp(ww - p), torch.exp(k - p)
        state.update(x_prev=x, aa=e1 * aa + e2 * v, bb=e1 * bb + e2, pp=p)
        return self.output(r * wkv)


def rwkv_cost(d):
    # e^{w} with w = −exp(time_decay) and 1 − μ are per-channel constants, precomputed.
    c = (3 * Cost(mul=2 * d, add=d)           # token shift x μ + x_prev (1 − μ) for r, k, v
         + 4 * vec_mat(d, d)                  # r, k, v, o
         + sigmoid(d)                         # σ(r)
         + Cost(add=d, exp=d)                 # e^{u + k}
         + Cost(mul=d)                        # e^{u + k} ⊙ v
         + Cost(add=2 * d, div=d)             # (a + ·) / (b + ·)
         + Cost(exp=d)                        # e^{k}
         + Cost(mul=3 * d, add=2 * d)         # a' = e^{w} a + e^{k} v,  b' = e^{w} b + e^{k}
         + Cost(mul=d))                       # r ⊙ wkv
    # lerp, k, u+k, exp, ⊙v, a+, ÷, r⊙, W_o (the a', b' update is for the next token)
    return c.with_path("mul-cum-mul-cum-cum-exp-mul-cum-div-mul-mul-cum")
