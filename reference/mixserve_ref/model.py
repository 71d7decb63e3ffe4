"""The block of DESIGN §4 around the mixers: embeddings, pre-norm layers, head.

forward(tokens) is the parallel (training) form; init_state/step the recurrent one-token form.
Module and parameter names are the tensor names of docs/model-format.md, so state_dict() is the
safetensors content.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import safetensors_io
from .config import ModelConfig
from .ffn import make_ffn
from .mixers import make_mixer
from .mixers.common import rms_norm


def sinusoidal_positions(T, d):
    t = torch.arange(T, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(T, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(t * freq), torch.cos(t * freq)
    return pe.float()


class RMSNorm(nn.Module):
    """y = x (mean(x²) + ε)^{−1/2} · weight (torchscale's RMSNorm): no mean, no bias."""

    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return rms_norm(x, self.eps) * self.weight


def make_norm(cfg):
    """Every norm of the model is config.json's `norm`: ln1, ln2, norm_f, embed_norm."""
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.d_model, cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)


class Layer(nn.Module):
    def __init__(self, cfg, i, dropout):
        super().__init__()
        self.ln1 = make_norm(cfg)
        self.mixer = make_mixer(cfg, cfg.layers[i])
        self.ln2 = make_norm(cfg)
        self.ffn = make_ffn(cfg)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = x + self.drop(self.mixer(self.ln1(x)))
        return h + self.drop(self.ffn(self.ln2(h)))

    def step(self, x, state, pos):
        h = x + self.mixer.step(self.ln1(x), state["mixer"], pos)
        return h + self.ffn.step(self.ln2(h), state["ffn"])


class Head(nn.Module):
    """logits = x Wᵀ (+ b); W is the embedding matrix when tied (then no weight of its own)."""

    def __init__(self, cfg):
        super().__init__()
        if not cfg.tie_embeddings:
            self.weight = nn.Parameter(torch.zeros(cfg.vocab_size, cfg.d_model))
        if cfg.head_bias:
            self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, x, embed_weight):
        w = getattr(self, "weight", embed_weight)
        return F.linear(x, w, getattr(self, "bias", None))


class Model(nn.Module):
    def __init__(self, cfg: ModelConfig, dropout=0.0, init_std=0.01):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d)
        if cfg.position == "learned":
            self.pos_embed = nn.Embedding(cfg.max_seq_len, d)
        elif cfg.position == "sinusoidal":
            self.register_buffer("sinusoid", sinusoidal_positions(cfg.max_seq_len, d), persistent=False)
        if cfg.embed_norm:
            self.embed_norm = make_norm(cfg)
        self.layers = nn.ModuleList(Layer(cfg, i, dropout) for i in range(cfg.n_layers))
        self.norm_f = make_norm(cfg)
        self.head = Head(cfg)
        self.drop = nn.Dropout(dropout)
        self.reset_parameters(init_std)

    def reset_parameters(self, std):
        """The Extractor paper's rule: weights N(0, std), biases 0, norms 1/0 (a mixer's group-norm
        weight `mixer.gn.weight` 1); AFT pair biases 0; RWKV's time parameters as RWKV-4 initialises
        them; Performer features stay as drawn."""
        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if not p.requires_grad:
                continue
            if ".ln" in name or name.startswith(("norm_f", "embed_norm")) or name.endswith(".mixer.gn.weight"):
                nn.init.ones_(p) if leaf == "weight" else nn.init.zeros_(p)
            elif leaf in ("bias", "pos_bias"):
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, std)
        for i, layer in enumerate(self.layers):
            layer.mixer.paper_init(layer, i, self.cfg.n_layers)

    def embed_tokens(self, tokens, positions):
        x = self.embed(tokens) * self.cfg.embed_scale
        if self.cfg.position == "learned":
            x = x + self.pos_embed(positions)
        elif self.cfg.position == "sinusoidal":
            x = x + self.sinusoid[positions]
        return self.embed_norm(x) if self.cfg.embed_norm else x

    def logits(self, x):
        return self.head(self.norm_f(x), self.embed.weight)

    def forward(self, tokens):
        T = tokens.shape[1]
        if T > self.cfg.max_seq_len:
            raise ValueError(f"sequence of {T} tokens exceeds max_seq_len {self.cfg.max_seq_len}")
        x = self.drop(self.embed_tokens(tokens, torch.arange(T, device=tokens.device)))
        for layer in self.layers:
            x = layer(x)
        return self.logits(x)

    def init_state(self, B, device=None):
        device, dtype = device or self.embed.weight.device, self.embed.weight.dtype
        cast = lambda st: {k: v.to(dtype) for k, v in st.items()}
        return [{"mixer": cast(l.mixer.init_state(B, device)), "ffn": cast(l.ffn.init_state(B, device))}
                for l in self.layers]

    def step(self, tokens, pos, states):
        if pos >= self.cfg.max_seq_len:
            raise ValueError(f"position {pos} exceeds max_seq_len {self.cfg.max_seq_len}")
        x = self.embed_tokens(tokens, torch.full_like(tokens, pos))
        for layer, st in zip(self.layers, states):
            x = layer.step(x, st, pos)
        return self.logits(x)

    def export_tensors(self):
        return {k: v.detach() for k, v in self.state_dict().items()}

    def save_dir(self, path, dtype=torch.float32, tokenizer=None, metadata=None):
        os.makedirs(path, exist_ok=True)
        self.cfg.save(os.path.join(path, "config.json"))
        tensors = {k: v.to(dtype) for k, v in self.export_tensors().items()}
        safetensors_io.save(tensors, os.path.join(path, "model.safetensors"), metadata)
        if tokenizer:
            link = os.path.join(path, "tokenizer.model")
            if os.path.lexists(link):
                os.remove(link)
            os.symlink(os.path.relpath(tokenizer, path), link)

    @classmethod
    def load_dir(cls, path, device="cpu"):
        cfg = ModelConfig.load(os.path.join(path, "config.json"))
        tensors, _ = safetensors_io.load(os.path.join(path, "model.safetensors"))
        return cls.from_tensors(cfg, tensors, path).to(device)

    @classmethod
    def from_tensors(cls, cfg, tensors, path):
        """A model (eval mode) holding exactly `tensors`, named and shaped as docs/model-format.md
        says; `path` names them in errors."""
        model = cls(cfg)
        expected = model.state_dict()
        missing, unexpected = set(expected) - set(tensors), set(tensors) - set(expected)
        if missing or unexpected:
            raise ValueError(f"{path}: missing tensors {sorted(missing)}, unexpected {sorted(unexpected)}")
        for k, v in tensors.items():
            if tuple(v.shape) != tuple(expected[k].shape):
                raise ValueError(f"{path}: tensor {k} has shape {list(v.shape)}, expected {list(expected[k].shape)}")
        model.load_state_dict({k: v.float() for k, v in tensors.items()})
        return model.eval()


def drop_tied_head(cfg, tensors, error):
    """An imported checkpoint of a tied model may hold its head (head.weight) as well: it must be
    the embedding itself, and is dropped; `error` is the ValueError's message otherwise."""
    if cfg.tie_embeddings and "head.weight" in tensors:
        head = tensors.pop("head.weight")
        if "embed.weight" in tensors and not torch.equal(head, tensors["embed.weight"]):
            raise ValueError(error)
    return tensors
