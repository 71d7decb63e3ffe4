"""flash-linear-attention's (fla) RetNet and linear-attention models (fla/models/retnet,
fla/models/linear_attn: RetNetForCausalLM, LinearAttentionForCausalLM) as mixserve models: their
Hugging Face config.json and state_dict names mapped to ours (docs/model-format.md,
"flash-linear-attention models"). The C++ engine implements the same mapping.

An fla directory is config.json as transformers' save_pretrained writes it (RetNetConfig or
LinearAttentionConfig, recognised by "model_type": "retnet" or "linear_attn") and
model.safetensors holding the model's state_dict under fla's names (a tied lm_head.weight may be
left out, as transformers does).

What we cannot run is refused with a ValueError naming the key, never approximated. The keys
that only select a kernel (attn_mode: chunk, fused_chunk, fused_recurrent and parallel are the
same function), fuse a computation (fuse_norm, fuse_swiglu: the same math, only the tensor name of
RetNet's group-norm weight differs), serve training (fuse_cross_entropy,
fuse_linear_cross_entropy, use_l2warp, initializer_range, use_cache) or are Hugging Face's own
(architectures, transformers_version, torch_dtype, dtype, model_type, pad_token_id,
_name_or_path) are accepted and have no effect; so are RetNet's use_short_conv and conv_size,
which RetNetBlock does not pass to MultiScaleRetention (fla commit bc3b101).
"""
import json
import os

import torch

from . import safetensors_io
from .config import ModelConfig
from .model import Model, drop_tied_head

# The classes' defaults (fla/models/retnet/configuration_retnet.py,
# fla/models/linear_attn/configuration_linear_attn.py, commit bc3b101): a key missing from
# config.json means what it means to fla.
_COMMON = {
    "hidden_size": 2048, "expand_k": 1.0, "hidden_ratio": None, "intermediate_size": None,
    "num_hidden_layers": 24, "num_kv_heads": None, "hidden_act": "swish", "max_position_embeddings": 2048,
    "elementwise_affine": True, "norm_eps": 1e-6, "attn": None, "use_cache": True, "pad_token_id": None,
    "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False, "initializer_range": 0.02,
    "fuse_norm": True, "fuse_swiglu": True, "fuse_cross_entropy": True, "fuse_linear_cross_entropy": False,
    "use_l2warp": False, "vocab_size": 32000, "attnres_block_size": None,
}
DEFAULTS = {
    "retnet": {**_COMMON, "attn_mode": "chunk", "expand_v": 2.0, "hidden_ratio": 2, "num_heads": 8,
               "feature_map": None, "use_short_conv": False, "conv_size": 4, "use_output_gate": True},
    "linear_attn": {**_COMMON, "attn_mode": "fused_chunk", "expand_v": 1.0, "hidden_ratio": 4, "num_heads": 4,
                    "feature_map": "elementwise_product", "tie_feature_map_qk": False, "norm_q": False,
                    "norm_k": False, "norm_feature_map": False},
}
# Hugging Face's keys and fla's training / kernel choices: accepted, no effect (module docstring)
IGNORED = {"architectures", "transformers_version", "torch_dtype", "dtype", "model_type", "_name_or_path",
           "use_cache", "initializer_range", "pad_token_id", "attn_mode", "fuse_norm", "fuse_swiglu",
           "fuse_cross_entropy", "fuse_linear_cross_entropy", "use_l2warp"}
IGNORED_RETNET = {"use_short_conv", "conv_size"}

# Settings that change the model into one we do not have: (model types, key, refused?, why).
REFUSED = (
    ("retnet linear_attn", "attn", lambda v: v is not None, "hybrid softmax-attention layers are not implemented"),
    ("retnet linear_attn", "attnres_block_size", lambda v: v is not None,
     "attention residuals (attnres) are not implemented"),
    ("retnet linear_attn", "hidden_act", lambda v: v != "swish", "only swish (the SwiGLU MLP) is implemented"),
    ("retnet linear_attn", "expand_k", lambda v: v != 1, "a key width other than hidden_size is not implemented"),
    ("linear_attn", "expand_v", lambda v: v != 1,
     "a value width other than hidden_size is not implemented for linear attention"),
    ("retnet", "use_output_gate", lambda v: not v, "RetNet without its output gate is not implemented"),
    ("retnet", "feature_map", lambda v: v is not None, "a feature map on RetNet's q and k is not implemented"),
    ("linear_attn", "norm_q", lambda v: bool(v), "q / (Σq + 1e-4) is not implemented"),
    ("linear_attn", "norm_k", lambda v: bool(v), "k / (Σk + 1e-4) is not implemented"),
)
FEATURE_MAPS = ("elu", "relu", "identity", "elementwise_product")
LINEAR_EPS = 1e-10  # fla.ops.linear_attn.utils.normalize_with_z_state's denominator ε
ROPE_BASE = 10000.0  # MultiScaleRetention's RotaryEmbedding(dim=head_k_dim): base 10000, rotate-half


def is_fla_config(d):
    return d.get("model_type") in DEFAULTS


def gated_mlp_size(hidden_size, hidden_ratio, intermediate_size):
    """fla.modules.mlp.GatedMLP's width: intermediate_size, else the multiple of 256 at or above
    int(hidden_size · hidden_ratio · 2/3) (hidden_ratio None: 4)."""
    if intermediate_size is not None:
        return intermediate_size
    ratio = 4 if hidden_ratio is None else hidden_ratio
    size = int(hidden_size * ratio * 2 / 3)
    return 256 * ((size + 255) // 256)


def _token_id(a, key):
    v = a[key]
    if v is None:
        return -1
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"fla config: {key}={v!r} must be an integer or null")
    return v


def config_from_fla(d):
    """An fla config.json (a dict) as a ModelConfig. ValueError names the first key we cannot run."""
    kind = d.get("model_type")
    if kind not in DEFAULTS:
        raise ValueError(f"fla config: model_type={kind!r}: only retnet and linear_attn are implemented")
    defaults = DEFAULTS[kind]
    unknown = set(d) - set(defaults) - IGNORED
    if unknown:
        raise ValueError(f"fla config: unknown keys {sorted(unknown)} ({kind}: "
                         f"{'RetNetConfig' if kind == 'retnet' else 'LinearAttentionConfig'}'s keys only)")
    a = {**defaults, **d}
    for kinds, key, refused, why in REFUSED:
        if kind in kinds.split() and refused(a[key]):
            raise ValueError(f"fla config: {key}={a[key]!r}: {why}")
    if kind == "linear_attn" and a["feature_map"] not in FEATURE_MAPS:
        raise ValueError(f"fla config: feature_map={a['feature_map']!r}: only {', '.join(FEATURE_MAPS)} "
                         "are implemented")
    for key in ("vocab_size", "hidden_size", "num_heads", "num_hidden_layers"):
        if isinstance(a[key], bool) or not isinstance(a[key], int) or a[key] <= 0:
            raise ValueError(f"fla config: {key}={a[key]!r} must be a positive integer")
    d_model, heads = a["hidden_size"], a["num_heads"]
    if d_model % heads:
        raise ValueError(f"fla config: hidden_size={d_model} is not a multiple of num_heads={heads}")
    kv = a["num_kv_heads"]
    if kv is not None and (isinstance(kv, bool) or not isinstance(kv, int) or kv <= 0 or heads % kv):
        raise ValueError(f"fla config: num_kv_heads={kv!r} must divide num_heads={heads}")
    gn_weight = bool(a["elementwise_affine"])  # fla's RMSNorm: a weight exactly when truthy
    if kind == "retnet":
        value_dim = int(d_model * a["expand_v"])
        if value_dim <= 0 or value_dim % heads:
            raise ValueError(f"fla config: expand_v={a['expand_v']!r} gives a value width {value_dim} that is not "
                             f"a positive multiple of num_heads={heads}")
        layer = {"mixer": "retnet", "heads": heads, "value_dim": value_dim, "rope_style": "half",
                 "rope_base": ROPE_BASE, "group_norm": "rmsnorm", "gn_eps": a["norm_eps"], "gn_weight": gn_weight,
                 "decay_normalize": False}
    else:
        layer = {"mixer": "linear", "heads": heads, "feature_map": a["feature_map"], "q_scale": True,
                 "normalize": bool(a["norm_feature_map"]), "eps": LINEAR_EPS, "group_norm": "rmsnorm",
                 "gn_eps": a["norm_eps"], "gn_weight": gn_weight}
    n_layers = a["num_hidden_layers"]
    return ModelConfig(
        vocab_size=a["vocab_size"], d_model=d_model, n_layers=n_layers,
        ffn_dim=gated_mlp_size(d_model, a["hidden_ratio"], a["intermediate_size"]),
        max_seq_len=a["max_position_embeddings"], layers=[dict(layer) for _ in range(n_layers)], position="none",
        embed_scale=1.0, norm="rmsnorm", norm_eps=a["norm_eps"], activation="silu", ffn="glu", bias=False,
        head_bias=False, tie_embeddings=bool(a["tie_word_embeddings"]), embed_norm=False,
        bos_id=_token_id(a, "bos_token_id"), eos_id=_token_id(a, "eos_token_id"))


# fla's name -> ours; {i} is the layer
NAMES = {
    "model.embeddings.weight": "embed.weight",
    "model.norm.weight": "norm_f.weight",
    "lm_head.weight": "head.weight",
    "model.layers.{i}.attn_norm.weight": "layers.{i}.ln1.weight",
    "model.layers.{i}.mlp_norm.weight": "layers.{i}.ln2.weight",
    "model.layers.{i}.attn.q_proj.weight": "layers.{i}.mixer.q.weight",
    "model.layers.{i}.attn.k_proj.weight": "layers.{i}.mixer.k.weight",
    "model.layers.{i}.attn.v_proj.weight": "layers.{i}.mixer.v.weight",
    "model.layers.{i}.attn.o_proj.weight": "layers.{i}.mixer.o.weight",
    "model.layers.{i}.mlp.gate_proj.weight": "layers.{i}.ffn.fc1.weight",
    "model.layers.{i}.mlp.up_proj.weight": "layers.{i}.ffn.gate.weight",
    "model.layers.{i}.mlp.down_proj.weight": "layers.{i}.ffn.fc2.weight",
}
NAMES_RETNET = {
    "model.layers.{i}.attn.g_proj.weight": "layers.{i}.mixer.g.weight",
    "model.layers.{i}.attn.g_norm_swish_gate.weight": "layers.{i}.mixer.gn.weight",  # fuse_norm true
    "model.layers.{i}.attn.g_norm.weight": "layers.{i}.mixer.gn.weight",  # fuse_norm false
}
NAMES_LINEAR = {
    "model.layers.{i}.attn.norm.weight": "layers.{i}.mixer.gn.weight",
}
NAMES_HADAMARD = {
    f"model.layers.{{i}}.attn.feature_map_{x}.layer{j}.{w}": f"layers.{{i}}.mixer.f{x}{j}.{w}"
    for x in "qk" for j in (1, 2) for w in ("weight", "bias")
}


def _repeat_kv_rows(w, kv_heads, heads, key):
    """[kv_heads·s, d] -> [heads·s, d]: query head j reads kv head j // (heads / kv_heads), so each
    kv head's rows are repeated for its heads / kv_heads query heads (fla's repeat
    '... h d -> ... (h g) d')."""
    rows, d = w.shape
    if rows % kv_heads:
        raise ValueError(f"fla checkpoint: {key} has {rows} rows, not a multiple of num_kv_heads={kv_heads}")
    return w.reshape(kv_heads, rows // kv_heads, d).repeat_interleave(heads // kv_heads, 0).reshape(-1, d)


def tensors_from_fla(state_dict, cfg, config):
    """The model's state_dict (fla's names) renamed to ours for `cfg` (from config_from_fla(config)),
    with num_kv_heads < num_heads expanded to one k and v per query head. A tied lm_head.weight may
    be present and must equal the embedding; with tie_feature_map_qk the q feature map serves k too
    (feature_map_k's tensors, if present, must equal it); any other tensor we do not know is an error."""
    kind = config.get("model_type")
    extra = NAMES_RETNET if kind == "retnet" else NAMES_LINEAR
    if kind == "linear_attn" and cfg.layers[0]["feature_map"] == "elementwise_product":
        extra = {**extra, **NAMES_HADAMARD}
    names = {}
    for i in range(cfg.n_layers):
        for theirs, ours in {**NAMES, **extra}.items():
            names[theirs.format(i=i)] = ours.format(i=i)
    heads = cfg.layers[0]["heads"]
    kv_heads = config.get("num_kv_heads") or heads
    tied_maps = kind == "linear_attn" and config.get("tie_feature_map_qk", False)
    out, k_maps = {}, {}
    for key, t in state_dict.items():
        if key not in names:
            raise ValueError(f"fla checkpoint: unknown tensor {key}")
        ours = names[key]
        if ours in out:
            raise ValueError(f"fla checkpoint: {key} and another tensor both map to {ours}")
        if tied_maps and ".mixer.fk" in ours:
            k_maps[ours] = (key, t)
            continue
        if kv_heads != heads and ours.endswith((".mixer.k.weight", ".mixer.v.weight")):
            t = _repeat_kv_rows(t, kv_heads, heads, key)
        out[ours] = t
    if tied_maps:
        for ours, (key, t) in k_maps.items():
            q = out.get(ours.replace(".mixer.fk", ".mixer.fq"))
            if q is not None and not torch.equal(q, t):
                raise ValueError(f"fla checkpoint: tie_feature_map_qk is true but {key} differs from feature_map_q's")
        for ours in list(out):
            if ".mixer.fq" in ours:
                out[ours.replace(".mixer.fq", ".mixer.fk")] = out[ours]
    return drop_tied_head(cfg, out, "fla checkpoint: tie_word_embeddings is true but lm_head.weight differs "
                                    "from model.embeddings.weight")


def load_dir(path):
    """An fla RetNet or linear-attention directory (config.json + model.safetensors) as a reference Model."""
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    cfg = config_from_fla(config)
    tensors, _ = safetensors_io.load(os.path.join(path, "model.safetensors"))
    return Model.from_tensors(cfg, tensors_from_fla(tensors, cfg, config), path)
