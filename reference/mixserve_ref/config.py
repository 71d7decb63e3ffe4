"""config.json of a mixserve model (docs/model-format.md): parse, validate, write."""
import json
import math
from dataclasses import dataclass, asdict

from .mixers import MIXERS as _TABLE

MIXERS = tuple(_TABLE)  # the names, in the table's order
# Per-mixer parameters and their defaults; None means "derived from the model" (see _complete()).
MIXER_PARAMS = {name: cls.params for name, cls in _TABLE.items()}


class ConfigError(ValueError):
    pass


@dataclass
class ModelConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    ffn_dim: int
    max_seq_len: int
    layers: list
    position: str = "learned"
    embed_scale: float = 1.0
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    activation: str = "relu"
    ffn: str = "mlp"
    bias: bool = True
    head_bias: bool = None  # the head's bias; None: same as bias (GPT-2 has none there)
    tie_embeddings: bool = True
    embed_norm: bool = False
    bos_id: int = -1
    eos_id: int = -1

    def __post_init__(self):
        if self.head_bias is None:
            self.head_bias = self.bias
        self.layers = [self._complete(i, dict(l)) for i, l in enumerate(self.layers)]
        self.validate()

    def _complete(self, i, layer):
        kind = layer.get("mixer")
        if kind not in MIXER_PARAMS:
            raise ConfigError(f"layers[{i}].mixer: unknown mixer {kind!r} (known: {', '.join(MIXERS)})")
        params = MIXER_PARAMS[kind]
        unknown = set(layer) - set(params) - {"mixer"}
        if unknown:
            raise ConfigError(f"layers[{i}] ({kind}): unknown keys {sorted(unknown)}")
        out = {"mixer": kind}
        for k, default in params.items():
            v = layer.get(k, default)
            if v is None and k == "window":
                v = self.max_seq_len
            if v is None and k == "features":
                v = self.d_model // layer.get("heads", params["heads"])
            out[k] = v
        return out

    def validate(self):
        for k in ("vocab_size", "d_model", "n_layers", "ffn_dim", "max_seq_len"):
            v = getattr(self, k)
            if not isinstance(v, int) or v <= 0:
                raise ConfigError(f"{k} must be a positive integer, got {v!r}")
        if self.n_layers != len(self.layers):
            raise ConfigError(f"n_layers is {self.n_layers} but layers has {len(self.layers)} entries")
        if self.position not in ("learned", "sinusoidal", "none"):
            raise ConfigError(f"position must be learned, sinusoidal or none, got {self.position!r}")
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ConfigError(f"norm must be layernorm or rmsnorm, got {self.norm!r}")
        if self.activation not in ("relu", "gelu_tanh", "gelu", "silu"):
            raise ConfigError(f"activation must be relu, gelu_tanh, gelu or silu, got {self.activation!r}")
        if self.ffn not in ("mlp", "rwkv_channel_mix", "glu"):
            raise ConfigError(f"ffn must be mlp, rwkv_channel_mix or glu, got {self.ffn!r}")
        if self.position == "sinusoidal" and self.d_model % 2:
            raise ConfigError("sinusoidal positions need an even d_model")
        for i, l in enumerate(self.layers):
            if "heads" in l:
                if not isinstance(l["heads"], int) or l["heads"] <= 0 or self.d_model % l["heads"]:
                    raise ConfigError(f"layers[{i}].heads={l['heads']} must divide d_model={self.d_model}")
                h = self.d_model // l["heads"]
                if (l.get("rope") or _TABLE[l["mixer"]].always_rotates) and h % 2:
                    raise ConfigError(f"layers[{i}]: RoPE needs an even head size, got {h}")
            if "window" in l:
                w = l["window"]
                if not isinstance(w, int) or not 1 <= w <= self.max_seq_len:
                    raise ConfigError(f"layers[{i}].window={w} must be in [1, max_seq_len={self.max_seq_len}]")
            if "features" in l and (not isinstance(l["features"], int) or l["features"] <= 0):
                raise ConfigError(f"layers[{i}].features must be a positive integer")
            dv = l.get("value_dim")
            if dv is not None and (not isinstance(dv, int) or dv <= 0 or dv % l["heads"]):
                raise ConfigError(f"layers[{i}].value_dim={dv!r} must be a positive multiple of heads={l['heads']}")
            for key, allowed in _TABLE[l["mixer"]].choices.items():
                v = l[key]
                if isinstance(allowed[0], bool):
                    if not isinstance(v, bool):
                        raise ConfigError(f"layers[{i}].{key} must be true or false, got {v!r}")
                elif v not in allowed:
                    raise ConfigError(f"layers[{i}].{key} must be {', '.join(allowed[:-1])} or {allowed[-1]}, "
                                      f"got {v!r}")

    def head_dim(self, i):
        return self.d_model // self.layers[i].get("heads", 1)

    def to_dict(self):
        d = asdict(self)
        # a mixer's quiet params at their default are left out, so that models written before
        # those params existed are written as they were
        d["layers"] = [{k: v for k, v in l.items()
                        if not (k in _TABLE[l["mixer"]].quiet_params and v == MIXER_PARAMS[l["mixer"]][k])}
                       for l in self.layers]
        return d

    @classmethod
    def from_dict(cls, d):
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"config.json: unknown keys {sorted(unknown)}")
        missing = {"vocab_size", "d_model", "n_layers", "ffn_dim", "max_seq_len", "layers"} - set(d)
        if missing:
            raise ConfigError(f"config.json: missing keys {sorted(missing)}")
        return cls(**d)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            return cls.from_dict(json.load(f))

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")


def paper_embed_scale(d):
    """The Extractor paper multiplies embeddings by sqrt(d) (Vaswani et al.)."""
    return math.sqrt(d)
