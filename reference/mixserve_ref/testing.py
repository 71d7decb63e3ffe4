"""Helpers for tests and golden fixtures: random configs and weights that exercise every term."""
import torch

from .config import MIXERS, ModelConfig
from .mixers import MIXERS as TABLE


class Draw:
    """The random choices a mixer's random_params makes, from one generator."""

    def __init__(self, gen, d):
        self.gen = gen
        self.heads = self.pick([h for h in (1, 2, 4) if d % h == 0 and (d // h) % 2 == 0])

    def pick(self, choices):
        return choices[int(torch.randint(len(choices), (1,), generator=self.gen))]

    def coin(self):
        return bool(torch.randint(2, (1,), generator=self.gen))


def layer_params(kind, gen, d, max_seq_len):
    """Random but valid parameters for one layer of the given mixer kind."""
    return {"mixer": kind, **TABLE[kind].random_params(Draw(gen, d))}


def random_config(kinds, gen, d=16, vocab=61, max_seq_len=40, **overrides):
    """A small config with one layer per entry of kinds; the FFN is the mixers' own when they all
    name the same one (RWKV's channel mix), else the MLP."""
    ffns = {TABLE[k].model_overrides.get("ffn", "mlp") for k in kinds}
    ffn = ffns.pop() if len(ffns) == 1 else "mlp"
    kw = dict(vocab_size=vocab, d_model=d, n_layers=len(kinds), ffn_dim=2 * d, max_seq_len=max_seq_len,
              layers=[layer_params(k, gen, d, max_seq_len) for k in kinds], ffn=ffn)
    kw.update(overrides)
    return ModelConfig(**kw)


def randomize(model, gen, scale=1.0):
    """Give every parameter a non-trivial value (norm gains ≠ 1, group-norm weights too, biases ≠ 0
    (the Hadamard feature maps' too), weights ~ 1/sqrt(fan_in))
    so that a backend that drops or mis-indexes any term fails the comparison."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if p.dim() >= 2 and leaf != "pos_bias" and leaf != "features":
                fan_in = p.shape[-1] if leaf != "ext" else p.shape[-2]
                p.copy_(torch.randn(p.shape, generator=gen) * scale / fan_in ** 0.5)
            elif leaf == "features":
                continue  # already a proper FAVOR+ draw
            elif ".ln" in name or name.startswith(("norm_f", "embed_norm")) or name.endswith(".mixer.gn.weight"):
                p.copy_((1.0 if leaf == "weight" else 0.0) + 0.2 * torch.randn(p.shape, generator=gen))
            elif leaf.startswith("time_mix"):
                p.copy_(torch.rand(p.shape, generator=gen))
            elif leaf == "time_decay":
                p.copy_(torch.randn(p.shape, generator=gen) - 0.5)
            else:  # biases, pos_bias, ext vectors/scalars, time_first
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
    return model


ALL_MIXERS = MIXERS
