"""The reference model's recurrent step, written for speed as a careful PyTorch user would for
serving, with the same math: reference/bench_decode.py times it as the fair PyTorch baseline.

Differences from Model.step (mixserve_ref), none of which changes what is computed:
- projections that read the same input are one Linear, their weights concatenated once at load
  (q, k, v of attention, AFT, linear attention and Performer; q, k, v, g of RetNet; inp and adj of
  HE; fc1 and gate of the GLU), and RWKV's key, value and receptance (three inputs) are one
  batched matmul;
- decode state is allocated once for max_seq_len and updated in place: K/V caches and rings are
  written at their slot instead of concatenated or cloned every step;
- F.linear / F.layer_norm are called directly rather than through nn.Module.__call__;
- RetNet's decay scale 1/√(Σ_{j≤t} γ^j) (decay_normalize) is a table made once;
- ring buffers are read in lag order through index tensors made once.
Summation orders inside a fused GEMM may differ from the separate calls, so logits agree with
Model.step to rounding, not bit for bit; check_against_reference() checks them.
"""
import math

import torch
import torch.nn.functional as F

from mixserve_ref.ffn import ACTIVATIONS
from mixserve_ref.mixers.common import NEG_BIG, apply_rope, group_norm, rms_norm, rope_angles
from mixserve_ref.mixers.retnet import decay_scale


def _cat_linears(*linears):
    """One weight (and bias) for Linears that read the same input: outputs in the given order."""
    w = torch.cat([l.weight for l in linears]).contiguous()
    b = torch.cat([l.bias for l in linears]).contiguous() if linears[0].bias is not None else None
    return w, b


def _row(table, pos):
    """Row pos of a table, as [1, …]: a slice for an int position; for a 0-d tensor one (graph_step.py,
    whose captured step may not read the position on the host) an index_select."""
    return table[pos : pos + 1] if isinstance(pos, int) else table.index_select(0, pos.view(1))


def _lag_slots(window, max_seq_len):
    """For each position, the ring slots of lags 0, 1, … min(pos+1, window)-1 as an index tensor."""
    return [torch.tensor([(pos - lag) % window for lag in range(min(pos + 1, window))]) for pos in range(max_seq_len)]


class _Attention:
    def __init__(self, m, cfg):
        self.n, self.h, self.T = m.n, m.h, cfg.max_seq_len
        self.wqkv, self.bqkv = _cat_linears(m.q, m.k, m.v)
        self.wo, self.bo = m.o.weight, m.o.bias
        self.rope = m.rope
        if self.rope:
            self.cos, self.sin = rope_angles(torch.arange(self.T), self.h, m.rope_base)
        self.sqrt_h = math.sqrt(self.h)

    def init_state(self, B):
        return {"K": torch.zeros(B, self.n, self.T, self.h), "V": torch.zeros(B, self.n, self.T, self.h)}

    def qkv(self, x, pos):
        """q, k, v [B, n, 1, h] of the row at pos, RoPE applied."""
        q, k, v = F.linear(x, self.wqkv, self.bqkv).view(x.shape[0], 3, self.n, 1, self.h).unbind(1)
        if self.rope:
            cos, sin = _row(self.cos, pos), _row(self.sin, pos)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return q, k, v

    def step(self, x, st, pos):
        B = x.shape[0]
        q, k, v = self.qkv(x, pos)
        st["K"][:, :, pos : pos + 1] = k
        st["V"][:, :, pos : pos + 1] = v
        K, V = st["K"][:, :, : pos + 1], st["V"][:, :, : pos + 1]
        att = (q @ K.transpose(-1, -2) / self.sqrt_h).softmax(-1)
        return F.linear((att @ V).reshape(B, self.n * self.h), self.wo, self.bo)


def _absorb(st, k, v):
    """mixserve_ref.mixers.aft._absorb, in place."""
    m_new = torch.maximum(st["max"], k)
    a, b = torch.exp(st["max"] - m_new), torch.exp(k - m_new)
    st["num"].mul_(a).add_(b * v)
    st["den"].mul_(a).add_(b)
    st["max"].copy_(m_new)


class _AftSimple:
    def __init__(self, m, cfg):
        self.d = m.q.out_features
        self.wqkv, self.bqkv = _cat_linears(m.q, m.k, m.v)
        self.wo, self.bo = m.o.weight, m.o.bias

    def init_state(self, B):
        return {"max": torch.full((B, self.d), NEG_BIG), "num": torch.zeros(B, self.d), "den": torch.zeros(B, self.d)}

    def step(self, x, st, pos):
        q, k, v = F.linear(x, self.wqkv, self.bqkv).chunk(3, -1)
        _absorb(st, k, v)
        return F.linear(torch.sigmoid(q) * st["num"] / st["den"], self.wo, self.bo)


class _AftFull(_AftSimple):
    def __init__(self, m, cfg):
        super().__init__(m, cfg)
        self.pos_bias, self.T = m.pos_bias, cfg.max_seq_len

    def init_state(self, B):
        return {"k": torch.zeros(B, self.T, self.d), "v": torch.zeros(B, self.T, self.d)}

    def step(self, x, st, pos):
        q, k, v = F.linear(x, self.wqkv, self.bqkv).chunk(3, -1)
        st["k"][:, pos], st["v"][:, pos] = k, v
        logits = st["k"][:, : pos + 1] + self.pos_bias[pos, : pos + 1][None, :, None]
        m = logits.amax(1, keepdim=True)  # mixserve_ref.mixers.aft._weighted_mean
        e = torch.exp(logits - m)
        mean = (e * st["v"][:, : pos + 1]).sum(1) / e.sum(1)
        return F.linear(torch.sigmoid(q) * mean, self.wo, self.bo)


class _AftLocal(_AftSimple):
    def __init__(self, m, cfg):
        super().__init__(m, cfg)
        self.s, self.pos_bias = m.s, m.pos_bias
        self.slots = _lag_slots(self.s, cfg.max_seq_len)

    def init_state(self, B):
        st = super().init_state(B)
        st["ring_k"], st["ring_v"] = torch.zeros(B, self.s, self.d), torch.zeros(B, self.s, self.d)
        return st

    def step(self, x, st, pos):
        q, k, v = F.linear(x, self.wqkv, self.bqkv).chunk(3, -1)
        slot = pos % self.s
        if pos >= self.s:  # token pos-s leaves the window; it sits in the slot we overwrite
            _absorb(st, st["ring_k"][:, slot], st["ring_v"][:, slot])
        st["ring_k"][:, slot], st["ring_v"][:, slot] = k, v
        slots = self.slots[pos]
        logits = st["ring_k"].index_select(1, slots) + self.pos_bias[pos, : len(slots)][None, :, None]
        return self.output(q, st, logits, slots)

    def output(self, q, st, logits, slots):
        """The window's weighted mean beside the folded sums: logits [B, L, d] of the ring's slots
        `slots` (lag order)."""
        m = torch.maximum(st["max"], logits.amax(1))
        e = torch.exp(logits - m[:, None])
        scale = torch.exp(st["max"] - m)
        num = st["num"] * scale + (e * st["ring_v"].index_select(1, slots)).sum(1)
        den = st["den"] * scale + e.sum(1)
        return F.linear(torch.sigmoid(q) * num / den, self.wo, self.bo)


class _RetNet:
    def __init__(self, m, cfg):
        self.n, self.h, self.m, self.gn_eps, self.module = m.n, m.h, m.m, m.gn_eps, m
        self.w, self.b = _cat_linears(m.q, m.k, m.v, m.g)
        self.wo, self.bo = m.o.weight, m.o.bias
        self.cos, self.sin = rope_angles(torch.arange(cfg.max_seq_len), self.h, m.rope_base, m.rope_style)
        self.gamma = m.gamma[None, :, None, None]
        self.rsqrt_scale = decay_scale(m.gamma, cfg.max_seq_len).rsqrt().t()[:, None, :, None]  # [T, 1, n, 1]
        self.widths = [m.h * m.n, m.h * m.n, m.dv, m.dv]

    def init_state(self, B):
        return {"S": torch.zeros(B, self.n, self.h, self.m)}

    def step(self, x, st, pos):
        B, d = x.shape
        m = self.module
        q, k, v, g = F.linear(x, self.w, self.b).split(self.widths, -1)
        q, k = (t.reshape(B, self.n, 1, self.h) for t in (q, k))
        v = v.reshape(B, self.n, 1, self.m)
        cos, sin = _row(self.cos, pos), _row(self.sin, pos)
        q, k = apply_rope(q, cos, sin, m.rope_style), apply_rope(k, cos, sin, m.rope_style) * self.h**-0.5
        S = st["S"].mul_(self.gamma).add_(k.transpose(-1, -2) @ v)
        o = (q @ S)[:, :, 0]  # [B, n, m]
        if m.decay_normalize:
            o = o * _row(self.rsqrt_scale, pos)[0]
        o = group_norm(o, m.group_norm, self.gn_eps)
        if m.gn is not None:
            o = o * m.gn.weight
        return F.linear(F.silu(g) * o.reshape(B, m.dv), self.wo, self.bo)


class _LinearAttention:
    def __init__(self, m, cfg):
        self.m, self.n, self.h, self.eps = m, m.n, m.h, m.eps
        self.wqkv, self.bqkv = _cat_linears(m.q, m.k, m.v)
        self.wo, self.bo = m.o.weight, m.o.bias
        self.q_scale = m.n_features() ** -0.5 if m.q_scale else None
        self.gn_weight = m.gn.weight if m.gn is not None else None

    def init_state(self, B):
        f = self.m.n_features()
        return {"S": torch.zeros(B, self.n, f, self.h), "z": torch.zeros(B, self.n, f)}

    def step(self, x, st, pos):
        B, d = x.shape
        q, k, v = F.linear(x, self.wqkv, self.bqkv).view(B, 3, self.n, 1, self.h).unbind(1)
        fq, fk = self.m.feature_map(q, "q"), self.m.feature_map(k, "k")  # [B, n, 1, features]
        if self.q_scale is not None:
            fq = fq * self.q_scale
        st["S"].add_(fk.transpose(-1, -2) @ v)
        st["z"].add_(fk[:, :, 0])
        o = fq @ st["S"]
        if self.m.normalize:
            o = o / ((fq[:, :, 0] * st["z"]).sum(-1)[..., None, None] + self.eps)
        o = group_norm(o, self.m.group_norm, self.m.gn_eps)
        if self.gn_weight is not None:
            o = o * self.gn_weight
        return F.linear(o.reshape(B, d), self.wo, self.bo)


def _stack_bias(linears):
    """Biases of Linears for baddbmm, [n, 1, d_out] (None without biases)."""
    return torch.stack([l.bias for l in linears])[:, None, :] if linears[0].bias is not None else None


class _RWKV:
    def __init__(self, m, cfg):
        lins = (m.key, m.value, m.receptance)
        self.mix = torch.stack([m.time_mix_k, m.time_mix_v, m.time_mix_r])[:, None, :]  # [3, 1, d]
        self.one_minus_mix = 1 - self.mix
        self.w = torch.stack([l.weight.t() for l in lins]).contiguous()  # [3, d_in, d_out]
        self.b = _stack_bias(lins)
        self.wo, self.bo = m.output.weight, m.output.bias
        self.u, self.decay = m.time_first, -torch.exp(m.time_decay)

    def init_state(self, B):
        d = self.w.shape[1]
        return {"x_prev": torch.zeros(B, d), "aa": torch.zeros(B, d), "bb": torch.zeros(B, d),
                "pp": torch.full((B, d), NEG_BIG)}

    def step(self, x, st, pos):
        xs = x[None] * self.mix + st["x_prev"][None] * self.one_minus_mix  # lerp, as mixers.rwkv
        kvr = torch.baddbmm(self.b, xs, self.w) if self.b is not None else torch.bmm(xs, self.w)
        k, v, r = kvr[0], kvr[1], torch.sigmoid(kvr[2])
        aa, bb, pp = st["aa"], st["bb"], st["pp"]
        ww = self.u + k
        p = torch.maximum(pp, ww)
        e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
        wkv = (e1 * aa + e2 * v) / (e1 * bb + e2)
        ww = pp + self.decay
        p = torch.maximum(ww, k)
        e1, e2 = torch.exp(ww - p), torch.exp(k - p)
        new_aa, new_bb = e1 * aa + e2 * v, e1 * bb + e2
        for name, value in (("x_prev", x), ("aa", new_aa), ("bb", new_bb), ("pp", p)):
            st[name].copy_(value)  # in place: a captured step replays into the same memory
        return F.linear(r * wkv, self.wo, self.bo)


class _Extractor:
    """SHE, HE, WE, ME (mixserve_ref.mixers.extractors): a ring of the last W sources, in place."""

    def __init__(self, m, cfg):
        self.kind, self.W, self.d, self.ext = type(m).__name__, m.W, m.d, m.ext
        self.has_adjust, self.has_inp = m.has_adjust, m.has_input_proj
        if self.has_inp:
            self.w_in, self.b_in = _cat_linears(m.inp, m.adj)  # both read x
        elif self.has_adjust:
            self.w_in, self.b_in = m.adj.weight, m.adj.bias
        if self.has_adjust and m.out is not None:
            self.wo, self.bo = m.out.weight, m.out.bias
        else:
            self.wo = None
        self.slots = _lag_slots(self.W, cfg.max_seq_len)

    def init_state(self, B):
        return {"ring": torch.zeros(B, self.W, self.d)}

    def source_and_adjust(self, x):
        """The ring's new entry (x, or HE's input projection) and the adjustment (None for ME)."""
        if self.has_inp:
            return F.linear(x, self.w_in, self.b_in).chunk(2, -1)
        return x, F.linear(x, self.w_in, self.b_in) if self.has_adjust else None

    def extract(self, lags, adj):
        """The output from the ring's entries in lag order, lags [B, L, d] (L ≤ W)."""
        B, L = lags.shape[:2]
        if self.kind == "SHE":
            ext = lags.reshape(B, L * self.d) @ self.ext[:L].reshape(L * self.d, self.d)
        elif self.kind == "ME":
            ext = (lags * self.ext[:L, None]).sum(1)
        else:  # WE, HE
            ext = (lags * self.ext[:L]).sum(1)
        if not self.has_adjust:
            return ext
        y = adj * ext
        return F.linear(y, self.wo, self.bo) if self.wo is not None else y

    def step(self, x, st, pos):
        source, adj = self.source_and_adjust(x)
        st["ring"][:, pos % self.W] = source
        return self.extract(st["ring"].index_select(1, self.slots[pos]), adj)  # lag 0 first


class _MLP:
    def __init__(self, f, cfg):
        self.w1, self.b1, self.w2, self.b2 = f.fc1.weight, f.fc1.bias, f.fc2.weight, f.fc2.bias
        self.act = ACTIVATIONS[cfg.activation]

    def init_state(self, B):
        return {}

    def step(self, x, st):
        return F.linear(self.act(F.linear(x, self.w1, self.b1)), self.w2, self.b2)


class _GLU:
    def __init__(self, f, cfg):
        self.w1, self.b1 = _cat_linears(f.fc1, f.gate)
        self.w2, self.b2 = f.fc2.weight, f.fc2.bias
        self.act = ACTIVATIONS[cfg.activation]

    def init_state(self, B):
        return {}

    def step(self, x, st):
        h, g = F.linear(x, self.w1, self.b1).chunk(2, -1)
        return F.linear(self.act(h) * g, self.w2, self.b2)


class _ChannelMix:
    def __init__(self, f, cfg):
        self.f = f

    def init_state(self, B):
        return {"x_prev": torch.zeros(B, self.f.key.in_features)}

    def step(self, x, st):
        f, x_prev = self.f, st["x_prev"]
        k = torch.square(torch.relu(F.linear(x * f.time_mix_k + x_prev * (1 - f.time_mix_k), f.key.weight,
                                             f.key.bias)))
        r = torch.sigmoid(F.linear(x * f.time_mix_r + x_prev * (1 - f.time_mix_r), f.receptance.weight,
                                   f.receptance.bias))
        x_prev.copy_(x)  # in place, as _RWKV
        return r * F.linear(k, f.value.weight, f.value.bias)


class _ReferenceStep:
    """A mixer without a tuned class here: the reference module's own step (the same math,
    untuned), so that a new mixer needs no entry below to be benchmarked or tested."""

    def __init__(self, m, cfg):
        self.m = m

    def init_state(self, B):
        return self.m.init_state(B, None)

    def step(self, x, st, pos):
        return self.m.step(x, st, pos)


MIXERS = {"attention": _Attention, "aft_simple": _AftSimple, "aft_full": _AftFull, "aft_local": _AftLocal,
          "retnet": _RetNet, "linear": _LinearAttention, "performer": _LinearAttention, "rwkv": _RWKV,
          "she": _Extractor, "he": _Extractor, "we": _Extractor, "me": _Extractor}


FFNS = {"mlp": _MLP, "glu": _GLU, "rwkv_channel_mix": _ChannelMix}


class FastModel:
    """step(tokens, pos, states) -> logits [B, vocab], as mixserve_ref's Model.step."""

    def __init__(self, model):
        self.model, cfg = model, model.cfg
        self.cfg, self.d = cfg, cfg.d_model
        self.mixers = [self.mixer_steps().get(p["mixer"], _ReferenceStep)(l.mixer, cfg)
                       for p, l in zip(cfg.layers, model.layers)]
        self.ffns = [FFNS[cfg.ffn](l.ffn, cfg) for l in model.layers]
        self.norms = [(l.ln1.weight, getattr(l.ln1, "bias", None), l.ln2.weight, getattr(l.ln2, "bias", None))
                      for l in model.layers]
        self.head_w = getattr(model.head, "weight", model.embed.weight)
        self.head_b = getattr(model.head, "bias", None)

    @staticmethod
    def mixer_steps():
        """Each mixer's step class (read when a model is made, so a test may take one out)."""
        return MIXERS

    def init_state(self, B):
        return [(m.init_state(B), f.init_state(B)) for m, f in zip(self.mixers, self.ffns)]

    def norm(self, x, w, b):
        if self.cfg.norm == "rmsnorm":
            return rms_norm(x, self.cfg.norm_eps) * w
        return F.layer_norm(x, (self.d,), w, b, self.cfg.norm_eps)

    def step(self, tokens, pos, states):
        cfg, model, norm = self.cfg, self.model, self.norm
        x = F.embedding(tokens, model.embed.weight) * cfg.embed_scale
        if cfg.position == "learned":
            x = x + _row(model.pos_embed.weight, pos)
        elif cfg.position == "sinusoidal":
            x = x + _row(model.sinusoid, pos)
        if cfg.embed_norm:
            x = norm(x, model.embed_norm.weight, getattr(model.embed_norm, "bias", None))
        for mixer, ffn, (w1, b1, w2, b2), (mst, fst) in zip(self.mixers, self.ffns, self.norms, states):
            h = x + mixer.step(norm(x, w1, b1), mst, pos)
            x = h + ffn.step(norm(h, w2, b2), fst)
        x = norm(x, model.norm_f.weight, getattr(model.norm_f, "bias", None))
        return F.linear(x, self.head_w, self.head_b)


def check_against_reference(model, fast, batch=2, positions=None, tol=1e-5, seed=0, position=int):
    """Runs Model.step and FastModel.step side by side from position 0 over `positions` steps
    (default: enough to pass every ring's window, at most max_seq_len) on the same random tokens;
    raises if any logit differs by more than tol · max |reference logit| (relative to the largest
    logit: random-init models have logits of ~1e-3). Returns the largest relative difference.
    `position` makes fast's position from the int (graph_step.py's steps take a tensor)."""
    cfg = model.cfg
    windows = [p.get("window") or 0 for p in cfg.layers]
    positions = positions or min(cfg.max_seq_len, max(windows + [16]) + 8)
    g = torch.Generator().manual_seed(seed)
    ref_states, fast_states = model.init_state(batch), fast.init_state(batch)
    worst = 0.0
    for pos in range(positions):
        tokens = torch.randint(0, cfg.vocab_size, (batch,), generator=g)
        ref, got = model.step(tokens, pos, ref_states), fast.step(tokens, position(pos), fast_states)
        got = got.as_subclass(torch.Tensor)  # a position tensor's subclass propagates to the logits
        diff = (ref - got).abs().max().item() / ref.abs().max().item()
        worst = max(worst, diff)
        if not diff <= tol:  # NaN fails too
            raise AssertionError(f"fast step differs from Model.step at position {pos}: max |Δlogit| / max |logit| "
                                 f"{diff:.3g}")
    return worst
