"""FastModel's decode step (fast_step.py) with every shape fixed and the position a tensor, so that
one step can be captured in a CUDA graph and replayed: the PyTorch peer a careful user would write
for serving on a GPU, for every mixer (bench/torch_peer.py times it beside mixserve's CUDA backend;
../shared/bench/peer_bench.py's loop covers aft_simple, RetNet and the FIR Extractors only).

What changes from FastModel, none of it the math:
- the position is a 0-d long tensor on the model's device: a graph replays device work only, so the
  step reads its tables with index_select (fast_step._row) and writes caches and rings with
  index_copy_, and never reads a device value on the host;
- attention's and AFT-full's K/V caches are read whole (max_seq_len entries), the positions after
  the current one masked out — a static KV cache, as Hugging Face's StaticCache;
- AFT-local's and the Extractors' rings are read in lag order through slots computed on the device,
  ((pos − lag) mod W): AFT-local masks the lags past the position with −∞, the Extractors read
  zeros there (slots not yet written);
- AFT-local's leaving token is folded in with torch.where instead of an `if`;
- every state is updated in place (a graph replays into the same memory), and tables made at load
  are moved to the model's device and float type.
Sums over all max_seq_len (or W) entries, the masked ones zero, agree with Model.step to rounding;
tests/test_graph_step.py checks the logits and that the step reads nothing on the host.
"""
import torch
import torch.nn.functional as F

import fast_step
from fast_step import _row


class _Attention(fast_step._Attention):
    def __init__(self, m, cfg):
        super().__init__(m, cfg)
        self.positions = torch.arange(self.T)

    def step(self, x, st, pos):
        q, k, v = self.qkv(x, pos)
        st["K"].index_copy_(2, pos.view(1), k)
        st["V"].index_copy_(2, pos.view(1), v)
        att = (q @ st["K"].transpose(-1, -2)) / self.sqrt_h  # [B, n, 1, T]
        att = att.masked_fill(self.positions > pos, float("-inf")).softmax(-1)
        return F.linear((att @ st["V"]).reshape(x.shape[0], self.n * self.h), self.wo, self.bo)


class _AftFull(fast_step._AftFull):
    def __init__(self, m, cfg):
        super().__init__(m, cfg)
        self.positions = torch.arange(self.T)

    def step(self, x, st, pos):
        q, k, v = F.linear(x, self.wqkv, self.bqkv).chunk(3, -1)
        st["k"].index_copy_(1, pos.view(1), k[:, None])
        st["v"].index_copy_(1, pos.view(1), v[:, None])
        logits = st["k"] + _row(self.pos_bias, pos)[0][None, :, None]  # [B, T, d]
        logits = logits.masked_fill((self.positions > pos)[None, :, None], float("-inf"))
        m = logits.amax(1, keepdim=True)
        e = torch.exp(logits - m)
        mean = (e * st["v"]).sum(1) / e.sum(1)
        return F.linear(torch.sigmoid(q) * mean, self.wo, self.bo)


class _AftLocal(fast_step._AftLocal):
    def __init__(self, m, cfg):
        super().__init__(m, cfg)
        self.lags = torch.arange(self.s)

    def step(self, x, st, pos):
        q, k, v = F.linear(x, self.wqkv, self.bqkv).chunk(3, -1)
        slot = (pos % self.s).view(1)
        # Token pos − s leaves the window (it sits in the slot about to be overwritten): folded into
        # the running sums as fast_step._absorb does, where pos ≥ s; elsewhere the sums stay.
        leaving = pos >= self.s
        old_k, old_v = st["ring_k"].index_select(1, slot)[:, 0], st["ring_v"].index_select(1, slot)[:, 0]
        m_new = torch.where(leaving, torch.maximum(st["max"], old_k), st["max"])
        a = torch.where(leaving, torch.exp(st["max"] - m_new), torch.ones_like(m_new))
        b = torch.where(leaving, torch.exp(old_k - m_new), torch.zeros_like(m_new))
        st["num"].mul_(a).add_(b * old_v)
        st["den"].mul_(a).add_(b)
        st["max"].copy_(m_new)
        st["ring_k"].index_copy_(1, slot, k[:, None])
        st["ring_v"].index_copy_(1, slot, v[:, None])
        slots = (pos - self.lags) % self.s  # lag order
        past = (self.lags > pos)[None, :, None]
        logits = st["ring_k"].index_select(1, slots) + _row(self.pos_bias, pos)[0][None, :, None]
        return self.output(q, st, logits.masked_fill(past, float("-inf")), slots)


class _Extractor(fast_step._Extractor):
    def __init__(self, m, cfg):
        super().__init__(m, cfg)
        self.lags = torch.arange(self.W)

    def step(self, x, st, pos):
        source, adj = self.source_and_adjust(x)
        st["ring"].index_copy_(1, (pos % self.W).view(1), source[:, None])
        # All W lags, lag 0 first; those before position 0 read slots not yet written: zeros (init_state)
        return self.extract(st["ring"].index_select(1, (pos - self.lags) % self.W), adj)


MIXERS = {**fast_step.MIXERS, "attention": _Attention, "aft_full": _AftFull, "aft_local": _AftLocal,
          "she": _Extractor, "he": _Extractor, "we": _Extractor, "me": _Extractor}


def _place(obj, device, dtype):
    """Moves the tensors a step object made at load (tables, index tensors; not the module's own
    parameters, which move with the model) to the model's device, floating ones to its type."""
    def move(t):
        return t.to(device, dtype) if t.is_floating_point() else t.to(device)

    for name, value in vars(obj).items():
        if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
            setattr(obj, name, move(value))
        elif isinstance(value, list) and value and all(isinstance(t, torch.Tensor) for t in value):
            setattr(obj, name, [move(t) for t in value])


class DeviceFastModel(fast_step.FastModel):
    """FastModel with its load-time tables and its states on the model's device and float type
    (FastModel makes them on the CPU in float32): the eager peer on a GPU."""

    def __init__(self, model):
        super().__init__(model)
        self.device, self.dtype = model.embed.weight.device, model.embed.weight.dtype
        for step in self.mixers + self.ffns:
            _place(step, self.device, self.dtype)

    def init_state(self, B):
        def move(t):
            return t.to(self.device, self.dtype) if t.is_floating_point() else t.to(self.device)

        return [({k: move(t) for k, t in mst.items()}, {k: move(t) for k, t in fst.items()})
                for mst, fst in super().init_state(B)]


class GraphModel(DeviceFastModel):
    """step(tokens, pos, states) -> logits [B, vocab] with pos a 0-d long tensor on the model's device;
    init_state(B) on that device and type. Every mixer has a graph step (MIXERS); one without
    raises, as its reference step slices by a host position."""

    def __init__(self, model):
        missing = {p["mixer"] for p in model.cfg.layers} - set(MIXERS)
        if missing:
            raise ValueError(f"no static-shape step for {sorted(missing)}")
        super().__init__(model)

    @staticmethod
    def mixer_steps():
        return MIXERS
