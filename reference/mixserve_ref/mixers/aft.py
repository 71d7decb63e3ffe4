"""Attention Free Transformer (Zhai et al. 2021): AFT-simple, AFT-local (window s), AFT-full.

y_t = σ(q_t) ⊙ Σ_{j≤t} e^{k_j + w_{t,j}} ⊙ v_j / Σ_{j≤t} e^{k_j + w_{t,j}}, then W_o, with
w = 0 (simple), learned pair biases (full), or learned biases inside the window and 0 outside
(local). Every exponential is taken relative to a running maximum, so nothing overflows.
"""
import torch
import torch.nn as nn

from ..cost_model import Cost, sigmoid, vec_mat
from .common import NEG_BIG, linear
from .spec import MixerSpec


def _weighted_mean(logits, v, dim):
    """Σ softmax(logits) v along dim, stable."""
    m = logits.amax(dim, keepdim=True)
    e = torch.exp(logits - m)
    return (e * v).sum(dim) / e.sum(dim)


def _absorb(state, k, v):
    """Add e^{k} v and e^{k} into the running (max, num, den) sums."""
    m_new = torch.maximum(state["max"], k)
    a, b = torch.exp(state["max"] - m_new), torch.exp(k - m_new)
    state["num"] = state["num"] * a + b * v
    state["den"] = state["den"] * a + b
    state["max"] = m_new


class _AftBase(nn.Module, MixerSpec):
    def __init__(self, cfg):
        super().__init__()
        self.q, self.k, self.v, self.o = (linear(cfg) for _ in range(4))

    def _sums_state(self, B, device):
        d = self.q.out_features
        return {"max": torch.full((B, d), NEG_BIG, device=device),
                "num": torch.zeros(B, d, device=device), "den": torch.zeros(B, d, device=device)}

    def _parallel_with_bias(self, x, bias):
        """bias [T, T] (w_{t,j}; -inf above the diagonal)."""
        q, k, v = self.q(x), self.k(x), self.v(x)
        # exp(w) @ (exp(k) ⊙ v) / exp(w) @ exp(k), with row maxima of w and channel maxima of k
        # subtracted (the ratio does not change).
        w = bias - bias.amax(-1, keepdim=True)
        ew = torch.exp(w)
        ek = torch.exp(k - k.amax(1, keepdim=True))
        num = torch.einsum("tj,bjd->btd", ew, ek * v)
        den = torch.einsum("tj,bjd->btd", ew, ek)
        return self.o(torch.sigmoid(q) * num / den)


class AftSimple(_AftBase):
    name = "aft_simple"
    golden = {"aft_simple": dict(layers=[{"mixer": "aft_simple"}] * 2)}

    @staticmethod
    def token_cost(d, t, p):
        return aft_simple_cost(d)

    @staticmethod
    def param_count(d, l, p):
        return 4 * d * d

    def __init__(self, cfg, p):
        super().__init__(cfg)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        ek = torch.exp(k - k.amax(1, keepdim=True))
        return self.o(torch.sigmoid(q) * torch.cumsum(ek * v, 1) / torch.cumsum(ek, 1))

    def init_state(self, B, device):
        return self._sums_state(B, device)

    def step(self, x, state, pos):
        q, k, v = self.q(x), self.k(x), self.v(x)
        _absorb(state, k, v)
        return self.o(torch.sigmoid(q) * state["num"] / state["den"])


class AftFull(_AftBase):
    name = "aft_full"
    golden = {"aft_full": dict(layers=[{"mixer": "aft_full"}] * 2)}

    @staticmethod
    def token_cost(d, t, p):
        return aft_full_cost(d, t)

    @staticmethod
    def param_count(d, l, p):
        return 4 * d * d + l * l

    def __init__(self, cfg, p):
        super().__init__(cfg)
        self.pos_bias = nn.Parameter(torch.zeros(cfg.max_seq_len, cfg.max_seq_len))

    def forward(self, x):
        T = x.shape[1]
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        return self._parallel_with_bias(x, self.pos_bias[:T, :T].masked_fill(mask, float("-inf")))

    def init_state(self, B, device):
        d = self.q.out_features
        return {"k": torch.zeros(B, 0, d, device=device), "v": torch.zeros(B, 0, d, device=device)}

    def step(self, x, state, pos):
        q, k, v = self.q(x), self.k(x), self.v(x)
        state["k"] = torch.cat([state["k"], k[:, None]], 1)
        state["v"] = torch.cat([state["v"], v[:, None]], 1)
        logits = state["k"] + self.pos_bias[pos, : pos + 1][None, :, None]
        return self.o(torch.sigmoid(q) * _weighted_mean(logits, state["v"], 1))


class AftLocal(_AftBase):
    """pos_bias[t, λ] is w_{t, t-λ} for lags λ < s; tokens further back get w = 0.

    Decode keeps (max, num, den) over the tokens that have LEFT the window plus a ring of the
    last s (k, v). DESIGN.md's alternative, sums over all tokens plus a correction
    Σ(e^{w}−1)e^{k}v, is mathematically equal but cancels catastrophically when w ≪ 0
    (den = 1 + (e^{w} − 1) → 0 in float32), so the eviction form is the one every backend uses.
    """
    name = "aft_local"
    params = {"window": 32}
    paper_layer = {"window": 32}
    golden = {"aft_local": dict(layers=[{"mixer": "aft_local", "window": 6}] * 2)}

    @staticmethod
    def random_params(draw):
        return {"window": draw.pick([2, 4, 6])}

    @staticmethod
    def token_cost(d, t, p):
        return aft_local_cost(d, t, p["window"])

    @staticmethod
    def param_count(d, l, p):
        return 4 * d * d + l * p["window"]  # pos_bias [l, s]

    def __init__(self, cfg, p):
        super().__init__(cfg)
        self.s = p["window"]
        self.pos_bias = nn.Parameter(torch.zeros(cfg.max_seq_len, self.s))

    def full_bias(self, T, device):
        """[T, T] w_{t,j}: pos_bias inside the window, 0 outside, -inf for j > t."""
        t = torch.arange(T, device=device)[:, None]
        lag = t - torch.arange(T, device=device)[None, :]
        inside = (lag >= 0) & (lag < self.s)
        w = self.pos_bias[t.expand(T, T), lag.clamp(0, self.s - 1)]
        w = torch.where(inside, w, torch.zeros((), device=device))
        return w.masked_fill(lag < 0, float("-inf"))

    def forward(self, x):
        return self._parallel_with_bias(x, self.full_bias(x.shape[1], x.device))

    def init_state(self, B, device):
        d = self.q.out_features
        st = self._sums_state(B, device)
        st["ring_k"] = torch.zeros(B, self.s, d, device=device)
        st["ring_v"] = torch.zeros(B, self.s, d, device=device)
        return st

    def step(self, x, state, pos):
        q, k, v = self.q(x), self.k(x), self.v(x)
        slot = pos % self.s
        if pos >= self.s:  # token pos-s leaves the window; it sits in the slot we overwrite
            _absorb(state, state["ring_k"][:, slot], state["ring_v"][:, slot])
        state["ring_k"] = state["ring_k"].clone()
        state["ring_v"] = state["ring_v"].clone()
        state["ring_k"][:, slot], state["ring_v"][:, slot] = k, v
        lags = min(pos + 1, self.s)
        slots = [(pos - lag) % self.s for lag in range(lags)]
        logits = state["ring_k"][:, slots] + self.pos_bias[pos, :lags][None, :, None]
        m = torch.maximum(state["max"], logits.amax(1))
        e = torch.exp(logits - m[:, None])
        scale = torch.exp(state["max"] - m)
        num = state["num"] * scale + (e * state["ring_v"][:, slots]).sum(1)
        den = state["den"] * scale + e.sum(1)
        return self.o(torch.sigmoid(q) * num / den)


def _aft_output(d):
    """σ(q), num/den, σ(q) ⊙ (num/den): common to every AFT variant."""
    return sigmoid(d) + Cost(div=d) + Cost(mul=d)


def aft_simple_cost(d):
    # Unstabilised recurrence num += e^{k}⊙v, den += e^{k}: no rescaling of the sums is needed
    # (the running max and its rescale are the stable form's max-subtraction, not counted).
    c = (4 * vec_mat(d, d)          # q, k, v, o
         + Cost(exp=d)              # e^{k}
         + Cost(mul=d)              # e^{k} ⊙ v
         + Cost(add=2 * d)          # num += , den +=
         + _aft_output(d))
    return c.with_path("mul-cum-exp-mul-cum-div-mul-mul-cum")


AFT_PAIR_PATH = "mul-cum-cum-exp-mul-cum-div-mul-mul-cum"  # k, +w, e^, ⊙v, Σ, ÷, gate, W_o


def _aft_pair_terms(d, terms):
    """terms tokens with a pair bias: k_j + w_{t,j}, e^{·}, ⊙ v_j; then Σ over them in num, den."""
    return terms * Cost(add=d, exp=d, mul=d) + Cost(add=2 * (terms - 1) * d)


def aft_full_cost(d, t):
    # w_{t,j} depends on t, so all t terms are recomputed for every new token
    return (4 * vec_mat(d, d) + _aft_pair_terms(d, t) + _aft_output(d)).with_path(AFT_PAIR_PATH)


def aft_local_cost(d, t, window):
    in_window = min(t, window)
    c = 4 * vec_mat(d, d) + _aft_pair_terms(d, in_window) + _aft_output(d)
    if t > window:
        # the token leaving the window joins the running sums (w = 0 there): e^{k}, ⊙v,
        # num_out += , den_out += ; then num, den add the running sums to the in-window terms
        c = c + Cost(exp=d, mul=d, add=2 * d) + Cost(add=2 * d)
    return c.with_path(AFT_PAIR_PATH)
