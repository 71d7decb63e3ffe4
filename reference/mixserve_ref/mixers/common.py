"""Pieces shared by several mixers: projections, RoPE (rotate-half and torchscale's pairs), RMS norm,
per-head group norms and their optional learnable weight, the 'very negative' max sentinel."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Initial value of running maxima (AFT, RWKV's pp). Finite on purpose: exp(NEG_BIG - k) is an
# exact 0 and max(NEG_BIG, k) = k, with no inf arithmetic on any backend (as Hugging Face's RWKV).
NEG_BIG = -1e38


def linear(cfg, d_in=None, d_out=None):
    d = cfg.d_model
    return nn.Linear(d_in or d, d_out or d, bias=cfg.bias)


def rope_angles(positions, head_dim, base, style="half"):
    """cos, sin of shape [len(positions), head_dim], angles in float64 then cast.
    half: rotate-half RoPE, θ_i = base^(−2i/h) for x_i and x_{i+h/2};
    torchscale: its theta_shift, θ_i = base^(−linspace(0, 1, h/2)_i) for the pair (x_2i, x_2i+1)
    (θ_0 = 1 and the last is 1/base; one pair: θ = 1)."""
    if style == "torchscale":
        ang = positions.to(torch.float64)[:, None] * pair_thetas(head_dim, base)[None, :]
        return ang.cos().float(), ang.sin().float()
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def pair_thetas(head_dim, base):
    """torchscale's angles per element, float64 [head_dim]: θ_i = base^(−linspace(0, 1, h/2)_i),
    each twice (x_2i and x_2i+1 turn together); RetNetRelPos stores them as its `angle` buffer."""
    return (base ** -torch.linspace(0, 1, head_dim // 2, dtype=torch.float64)).repeat_interleave(2)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def rotate_pairs(x):
    """(x_2i, x_2i+1) -> (−x_2i+1, x_2i): torchscale's rotate_every_two."""
    return torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).flatten(-2)


def apply_rope(x, cos, sin, style="half"):
    """x [..., T, h] with cos/sin [T, h] from rope_angles(..., style)."""
    return x * cos + (rotate_pairs(x) if style == "torchscale" else rotate_half(x)) * sin


def rms_norm(x, eps):
    """x · (mean(x²) + ε)^(−1/2) over the last dimension, no affine. Like torchscale's RMSNorm
    (`x.float()`), half-precision inputs are normalised in float32; float64 stays float64 (the
    golden fixtures' expected values are computed in it)."""
    y = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def group_norm(o, kind, eps):
    """A per-head norm of o [..., m] over its last dimension, no affine: `layernorm` (zero mean,
    unit variance: GroupNorm with one group per head), `rmsnorm` (rms_norm) or `none`."""
    if kind == "rmsnorm":
        return rms_norm(o, eps)
    if kind == "layernorm":
        return F.layer_norm(o, (o.shape[-1],), eps=eps)
    return o


class NormWeight(nn.Module):
    """The learnable weight [m] of a per-head group norm (tensor `mixer.gn.weight`), shared by all
    heads and multiplied after the norm (fla's RMSNorm / FusedRMSNormGated weight)."""

    def __init__(self, m):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(m))

    def forward(self, o):
        return o * self.weight


def split_heads(x, n):
    """[B, T, d] -> [B, n, T, h]."""
    B, T, d = x.shape
    return x.view(B, T, n, d // n).transpose(1, 2)


def merge_heads(x):
    """[B, n, T, h] -> [B, T, d]."""
    B, n, T, h = x.shape
    return x.transpose(1, 2).reshape(B, T, n * h)


def causal_lags(x, window):
    """[B, T, d] -> [B, T, W, d] with out[:, t, λ] = x[:, t-λ] (zero where t-λ < 0)."""
    B, T, d = x.shape
    padded = torch.cat([x.new_zeros(B, window - 1, d), x], dim=1)  # position p at index p+W-1
    # index t+W-1-λ for λ in 0..W-1
    idx = (torch.arange(T)[:, None] + window - 1 - torch.arange(window)[None, :]).to(x.device)
    return padded[:, idx]


def ring_lags(ring, pos, window):
    """Entries of a ring buffer [B, W, d] ordered by lag: [B, L, d], L = min(pos+1, W), lag 0 first."""
    lags = min(pos + 1, window)
    slots = [(pos - lag) % window for lag in range(lags)]
    return ring[:, slots]
