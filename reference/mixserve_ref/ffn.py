"""The FFNs: DESIGN §4's `mlp` and RWKV-4's `rwkv_channel_mix` (which has a token-shift state), and
torchscale's gated `glu` (component/gate_linear_unit.py)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .mixers.common import linear
from .mixers.rwkv import lerp, token_shift


def _at_least_float32(f):
    """torchscale applies its activations to x.float(): half-precision inputs in float32."""
    def act(x):
        return f(x.float()).to(x.dtype) if x.dtype in (torch.float16, torch.bfloat16) else f(x)
    return act


ACTIVATIONS = {
    "relu": F.relu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's gelu_new
    "gelu": _at_least_float32(F.gelu),                     # exact: 0.5 x (1 + erf(x/√2))
    "silu": _at_least_float32(F.silu),                     # x σ(x), torchscale's "swish"
}


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = linear(cfg, cfg.d_model, cfg.ffn_dim)
        self.fc2 = linear(cfg, cfg.ffn_dim, cfg.d_model)
        self.act = ACTIVATIONS[cfg.activation]

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))

    def init_state(self, B, device):
        return {}

    def step(self, x, state):
        return self.forward(x)


class RwkvChannelMix(nn.Module):
    """r = σ(x_r W_r); y = r ⊙ (relu(x_k W_k)² W_v), x_* token-shift mixes as in the time mix."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg.d_model
        self.time_mix_k = nn.Parameter(torch.zeros(d))
        self.time_mix_r = nn.Parameter(torch.zeros(d))
        self.key = linear(cfg, d, cfg.ffn_dim)
        self.value = linear(cfg, cfg.ffn_dim, d)
        self.receptance = linear(cfg, d, d)

    def _mix(self, x, x_prev):
        k = torch.square(torch.relu(self.key(lerp(x, x_prev, self.time_mix_k))))
        return torch.sigmoid(self.receptance(lerp(x, x_prev, self.time_mix_r))) * self.value(k)

    def forward(self, x):
        return self._mix(x, token_shift(x))

    def init_state(self, B, device):
        return {"x_prev": torch.zeros(B, self.key.in_features, device=device)}

    def step(self, x, state):
        y = self._mix(x, state["x_prev"])
        state["x_prev"] = x
        return y


class GLU(nn.Module):
    """y = fc2(act(fc1 x) ⊙ gate x): torchscale's GLU, biases when `bias` is set."""

    def __init__(self, cfg):
        super().__init__()
        self.fc1 = linear(cfg, cfg.d_model, cfg.ffn_dim)
        self.gate = linear(cfg, cfg.d_model, cfg.ffn_dim)
        self.fc2 = linear(cfg, cfg.ffn_dim, cfg.d_model)
        self.act = ACTIVATIONS[cfg.activation]

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)) * self.gate(x))

    def init_state(self, B, device):
        return {}

    def step(self, x, state):
        return self.forward(x)


def make_ffn(cfg):
    return {"mlp": MLP, "rwkv_channel_mix": RwkvChannelMix, "glu": GLU}[cfg.ffn](cfg)
