"""The Extractors (Chen 2023): SHE, HE, WE, ME — finite-impulse-response token mixers.

ext_t = Σ_{λ=0}^{min(t,W−1)} x_{t−λ} E_λ (SHE: E_λ ∈ R^{d×d}; HE: on u = x W_in with e_λ ∈ R^d,
element-wise; WE: x with e_λ ∈ R^d; ME: scalars e_λ); adj = (x_t A) ⊙ ext_t; y = adj W_o (W_o
optional). ME is ext alone. The decode state is a ring of the last W inputs (u for HE).
"""
import torch
import torch.nn as nn

from .common import causal_lags, linear, ring_lags


class _Extractor(nn.Module):
    has_input_proj = False
    has_adjust = True

    def __init__(self, cfg, p):
        super().__init__()
        self.d, self.W = cfg.d_model, p["window"]
        d = self.d
        self.ext = nn.Parameter(torch.zeros(self.ext_shape(d)))
        if self.has_input_proj:
            self.inp = linear(cfg)
        if self.has_adjust:
            self.adj = linear(cfg)
            self.out = linear(cfg) if p["out_proj"] else None

    def _source(self, x):
        return self.inp(x) if self.has_input_proj else x

    def _finish(self, x, ext):
        if not self.has_adjust:
            return ext
        y = self.adj(x) * ext
        return self.out(y) if self.out is not None else y

    def forward(self, x):
        lags = causal_lags(self._source(x), self.W)  # [B, T, W, d]
        return self._finish(x, self.combine(lags, self.W))

    def init_state(self, B, device):
        return {"ring": torch.zeros(B, self.W, self.d, device=device)}

    def step(self, x, state, pos):
        ring = state["ring"].clone()
        ring[:, pos % self.W] = self._source(x)
        state["ring"] = ring
        lags = ring_lags(ring, pos, self.W)[:, None]  # [B, 1, L, d], lag 0 first
        return self._finish(x, self.combine(lags, lags.shape[2])[:, 0])


class SHE(_Extractor):
    def ext_shape(self, d):
        return (self.W, d, d)

    def combine(self, lags, L):  # Σ_λ x_{t−λ} E_λ as one GEMM over (lag, channel)
        B, T = lags.shape[:2]
        return (lags.reshape(B, T, -1) @ self.ext[:L].reshape(L * self.d, self.d))


class WE(_Extractor):
    def ext_shape(self, d):
        return (self.W, d)

    def combine(self, lags, L):  # Σ_λ x_{t−λ} ⊙ e_λ
        return (lags * self.ext[:L]).sum(-2)


class HE(WE):
    has_input_proj = True


class ME(_Extractor):
    has_adjust = False

    def ext_shape(self, d):
        return (self.W,)

    def combine(self, lags, L):  # Σ_λ x_{t−λ} e_λ
        return (lags * self.ext[:L, None]).sum(-2)
