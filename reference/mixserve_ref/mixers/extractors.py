"""The Extractors (Chen 2023): SHE, HE, WE, ME — finite-impulse-response token mixers.

ext_t = Σ_{λ=0}^{min(t,W−1)} x_{t−λ} E_λ (SHE: E_λ ∈ R^{d×d}; HE: on u = x W_in with e_λ ∈ R^d,
element-wise; WE: x with e_λ ∈ R^d; ME: scalars e_λ); adj = (x_t A) ⊙ ext_t; y = adj W_o (W_o
optional). ME is ext alone. The decode state is a ring of the last W inputs (u for HE).
"""
import torch
import torch.nn as nn

from ..cost_model import Cost, vec_mat
from .common import causal_lags, linear, ring_lags
from .spec import MixerSpec


class _Extractor(nn.Module, MixerSpec):
    params = {"window": None, "out_proj": True}
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
    name = "she"
    golden = {"she": dict(layers=[{"mixer": "she", "window": 8}] * 2, position="sinusoidal",
                          embed_scale=32 ** 0.5)}

    @staticmethod
    def random_params(draw):
        return {"window": draw.pick([3, 5, 8]), "out_proj": draw.coin()}

    @staticmethod
    def token_cost(d, t, p):
        return she_cost(d, _lags(t, p), p["out_proj"])

    @staticmethod
    def param_count(d, l, p):
        return (p["window"] or l) * d * d + d * d + _out(d, p)

    def ext_shape(self, d):
        return (self.W, d, d)

    def combine(self, lags, L):  # Σ_λ x_{t−λ} E_λ as one GEMM over (lag, channel)
        B, T = lags.shape[:2]
        return (lags.reshape(B, T, -1) @ self.ext[:L].reshape(L * self.d, self.d))


class WE(_Extractor):
    name = "we"
    golden = {"we": dict(layers=[{"mixer": "we", "window": 8}] * 2)}
    random_params = SHE.random_params

    @staticmethod
    def token_cost(d, t, p):
        return we_cost(d, _lags(t, p), p["out_proj"])

    @staticmethod
    def param_count(d, l, p):
        return (p["window"] or l) * d + d * d + _out(d, p)

    def ext_shape(self, d):
        return (self.W, d)

    def combine(self, lags, L):  # Σ_λ x_{t−λ} ⊙ e_λ
        return (lags * self.ext[:L]).sum(-2)


class HE(WE):
    name = "he"
    has_input_proj = True
    golden = {"he": dict(layers=[{"mixer": "he", "window": 8, "out_proj": False}] * 2)}

    @staticmethod
    def token_cost(d, t, p):
        return he_cost(d, _lags(t, p), p["out_proj"])

    @staticmethod
    def param_count(d, l, p):
        return (p["window"] or l) * d + 2 * d * d + _out(d, p)


class ME(_Extractor):
    name = "me"
    params = {"window": None}
    has_adjust = False
    golden = {"me": dict(layers=[{"mixer": "me", "window": 8}] * 2)}

    @staticmethod
    def random_params(draw):
        return {"window": draw.pick([3, 5, 8])}

    @staticmethod
    def token_cost(d, t, p):
        return me_cost(d, _lags(t, p))

    @staticmethod
    def param_count(d, l, p):
        return p["window"] or l

    def ext_shape(self, d):
        return (self.W,)

    def combine(self, lags, L):  # Σ_λ x_{t−λ} e_λ
        return (lags * self.ext[:L, None]).sum(-2)


def _lags(t, p):
    """The lags in use at position t: all t without a window (the paper's form)."""
    return min(t, p["window"]) if p.get("window") else t


def _out(d, p):
    return d * d if p.get("out_proj", True) else 0


def _adjust_and_output(d, out_proj):
    """adj = (x A) ⊙ ext, then y = adj W_o if out_proj; the path stages after ext's mul-cum."""
    c = vec_mat(d, d) + Cost(mul=d)
    if out_proj:
        return c + vec_mat(d, d), "-mul-mul-cum"
    return c, "-mul"


def she_cost(d, lags, out_proj=True):
    ext = lags * vec_mat(d, d) + Cost(add=(lags - 1) * d)  # Σ_λ x_{t−λ} E_λ
    rest, tail = _adjust_and_output(d, out_proj)
    return (ext + rest).with_path("mul-cum" + tail)


def he_cost(d, lags, out_proj=True):
    u = vec_mat(d, d)  # u_t = x_t W_in (older u come from the ring)
    ext = Cost(mul=lags * d, add=(lags - 1) * d)  # Σ_λ u_{t−λ} ⊙ e_λ
    rest, tail = _adjust_and_output(d, out_proj)
    return (u + ext + rest).with_path("mul-cum-mul-cum" + tail)


def we_cost(d, lags, out_proj=True):
    ext = Cost(mul=lags * d, add=(lags - 1) * d)  # Σ_λ x_{t−λ} ⊙ e_λ
    rest, tail = _adjust_and_output(d, out_proj)
    return (ext + rest).with_path("mul-cum" + tail)


def me_cost(d, lags):
    return Cost(mul=lags * d, add=(lags - 1) * d).with_path("mul-cum")  # Σ_λ e_λ x_{t−λ}
