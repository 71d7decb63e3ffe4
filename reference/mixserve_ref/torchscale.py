"""microsoft/torchscale's RetNet (torchscale/architecture/retnet.py, RetNetDecoder) as a mixserve
model: its config's keyword arguments and its state_dict's names mapped to ours
(docs/model-format.md, "torchscale RetNet"). The C++ engine implements the same mapping.

A torchscale directory is config.json holding RetNetConfig's keyword arguments (recognised by the
key "decoder_retention_heads") and model.safetensors holding RetNetDecoder's state_dict under
torchscale's names, with or without fairseq's leading "decoder.".

What we cannot run is refused with a ValueError naming the key, never approximated.
"""
import json
import math
import os

from . import safetensors_io
from .config import ModelConfig
from .mixers.common import pair_thetas
from .mixers.retnet import gammas
from .model import Model, drop_tied_head

# RetNetConfig's defaults (torchscale/architecture/config.py, commit 4d1e0e8): a key missing from
# config.json means what it means to torchscale.
DEFAULTS = {
    "decoder_embed_dim": 768, "decoder_value_embed_dim": 1280, "decoder_retention_heads": 3,
    "decoder_ffn_embed_dim": 1280, "decoder_layers": 12, "decoder_normalize_before": True,
    "activation_fn": "gelu", "dropout": 0.0, "drop_path_rate": 0.0, "activation_dropout": 0.0,
    "no_scale_embedding": True, "layernorm_embedding": False, "moe_freq": 0, "moe_top1_expert": False,
    "moe_expert_count": 0, "moe_gating_use_fp32": True, "moe_eval_capacity_token_fraction": 0.25,
    "moe_second_expert_policy": "random", "moe_normalize_gate_prob_before_dropping": False, "use_xmoe": False,
    "rel_pos_buckets": 0, "max_rel_pos": 0, "deepnorm": False, "subln": True, "multiway": False,
    "share_decoder_input_output_embed": False, "max_target_positions": 1024, "no_output_layer": False,
    "layernorm_eps": 1e-6, "chunkwise_recurrent": False, "recurrent_chunk_size": 512, "vocab_size": -1,
    "checkpoint_activations": False, "fsdp": False, "ddp_rank": 0, "xpos_rel_pos": False, "xpos_scale_base": 512,
}

# Settings that change the model into one we do not have: (key, the value that is refused, why).
# Dropout, drop path, activation checkpointing, FSDP and the chunkwise form (another evaluation
# order of the same function) only matter for training and are accepted whatever their value;
# subln, max_rel_pos and xpos_scale_base are not read by RetNetDecoder.
REFUSED = (
    ("deepnorm", lambda v: bool(v), "DeepNorm's scaled residuals are not implemented"),
    ("multiway", lambda v: bool(v), "multiway (two sets of weights) is not implemented"),
    ("moe_freq", lambda v: v > 0, "mixture-of-experts layers are not implemented"),
    ("use_xmoe", lambda v: bool(v), "mixture-of-experts layers are not implemented"),
    ("decoder_normalize_before", lambda v: not v, "post-norm layers are not implemented"),
    ("xpos_rel_pos", lambda v: bool(v), "xPos relative positions are not implemented"),
    ("rel_pos_buckets", lambda v: v > 0, "relative position buckets are not implemented"),
    ("no_output_layer", lambda v: bool(v), "a model without an output layer gives no logits"),
)

# torchscale's GLU takes its activation from feedforward_network.get_activation_fn
ACTIVATIONS = {"gelu": "gelu", "swish": "silu", "relu": "relu"}
ROPE_BASE = 10000.0  # RetNetRelPos's angles: 1/10000^linspace(0, 1, key_dim/2), hard-coded there


def is_torchscale_config(d):
    return "decoder_retention_heads" in d


def config_from_torchscale(kwargs):
    """RetNetConfig(**kwargs) as a ModelConfig. ValueError names the first key we cannot run."""
    unknown = set(kwargs) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"torchscale config: unknown keys {sorted(unknown)} (RetNetConfig's keys only)")
    a = {**DEFAULTS, **kwargs}
    for key, refused, why in REFUSED:
        if refused(a[key]):
            raise ValueError(f"torchscale config: {key}={a[key]!r}: {why}")
    if a["activation_fn"] not in ACTIVATIONS:
        raise ValueError(f"torchscale config: activation_fn={a['activation_fn']!r}: "
                         f"only {', '.join(ACTIVATIONS)} are implemented")
    if not isinstance(a["vocab_size"], int) or a["vocab_size"] <= 0:
        raise ValueError(f"torchscale config: vocab_size={a['vocab_size']!r} must be positive "
                         "(RetNetDecoder builds no output layer otherwise)")
    d, eps, heads = a["decoder_embed_dim"], a["layernorm_eps"], a["decoder_retention_heads"]
    for key in ("decoder_embed_dim", "decoder_value_embed_dim"):
        if not isinstance(heads, int) or heads <= 0 or a[key] % heads:
            # torchscale floors the per-head size and its view() then fails
            raise ValueError(f"torchscale config: {key}={a[key]!r} is not a multiple of "
                             f"decoder_retention_heads={heads!r}")
    layer = {"mixer": "retnet", "heads": heads, "value_dim": a["decoder_value_embed_dim"],
             "rope_style": "torchscale", "group_norm": "rmsnorm", "decay_normalize": True, "gn_eps": eps,
             "rope_base": ROPE_BASE}
    return ModelConfig(
        vocab_size=a["vocab_size"], d_model=d, n_layers=a["decoder_layers"], ffn_dim=a["decoder_ffn_embed_dim"],
        max_seq_len=a["max_target_positions"], layers=[dict(layer) for _ in range(a["decoder_layers"])],
        position="none", embed_scale=1.0 if a["no_scale_embedding"] else math.sqrt(d),
        norm="rmsnorm", norm_eps=eps, activation=ACTIVATIONS[a["activation_fn"]], ffn="glu", bias=False,
        head_bias=False, tie_embeddings=bool(a["share_decoder_input_output_embed"]),
        embed_norm=bool(a["layernorm_embedding"]))


# torchscale's name (after the optional "decoder.") -> ours; {i} is the layer
NAMES = {
    "embed_tokens.weight": "embed.weight",
    "output_projection.weight": "head.weight",
    "layernorm_embedding.weight": "embed_norm.weight",
    "layer_norm.weight": "norm_f.weight",
    "layers.{i}.retention_layer_norm.weight": "layers.{i}.ln1.weight",
    "layers.{i}.final_layer_norm.weight": "layers.{i}.ln2.weight",
    "layers.{i}.retention.q_proj.weight": "layers.{i}.mixer.q.weight",
    "layers.{i}.retention.k_proj.weight": "layers.{i}.mixer.k.weight",
    "layers.{i}.retention.v_proj.weight": "layers.{i}.mixer.v.weight",
    "layers.{i}.retention.g_proj.weight": "layers.{i}.mixer.g.weight",
    "layers.{i}.retention.out_proj.weight": "layers.{i}.mixer.o.weight",
    "layers.{i}.ffn.fc1.weight": "layers.{i}.ffn.fc1.weight",
    "layers.{i}.ffn.gate.weight": "layers.{i}.ffn.gate.weight",
    "layers.{i}.ffn.fc2.weight": "layers.{i}.ffn.fc2.weight",
}
BUFFER_TOLERANCE = 1e-6


def expected_buffers(cfg):
    """RetNetRelPos's buffers as the config implies them: angle [key_dim] (each θ twice, for its
    pair) and decay [heads] = log γ."""
    layer = cfg.layers[0]
    return {"retnet_rel_pos.angle": pair_thetas(cfg.d_model // layer["heads"], layer["rope_base"]),
            "retnet_rel_pos.decay": gammas(layer["heads"]).log()}


def tensors_from_torchscale(state_dict, cfg):
    """RetNetDecoder's state_dict (torchscale's names, optionally under "decoder.") renamed to
    ours for `cfg` (from config_from_torchscale). The two RetNetRelPos buffers are checked against
    cfg's schedule and dropped; a tied head's output_projection.weight may be present and must be
    the embedding itself; any other tensor we do not know is an error."""
    names = {}
    for i in range(cfg.n_layers):
        for theirs, ours in NAMES.items():
            names[theirs.format(i=i)] = ours.format(i=i)
    out, buffers, seen = {}, {}, set()
    for key, t in state_dict.items():
        name = key[len("decoder."):] if key.startswith("decoder.") else key
        if name in seen:
            raise ValueError(f"torchscale checkpoint: {name} appears twice (with and without 'decoder.')")
        seen.add(name)
        if name in ("retnet_rel_pos.angle", "retnet_rel_pos.decay"):
            buffers[name] = t
        elif name not in names:
            raise ValueError(f"torchscale checkpoint: unknown tensor {key}")
        else:
            out[names[name]] = t
    for name, want in expected_buffers(cfg).items():
        if name not in buffers:
            continue  # a checkpoint saved without buffers: nothing to check
        got = buffers[name]
        if tuple(got.shape) != tuple(want.shape) or (got.double() - want).abs().max().item() > BUFFER_TOLERANCE:
            raise ValueError(f"torchscale checkpoint: {name} is not the schedule the config implies "
                             f"(decoder_embed_dim/decoder_retention_heads; got {got.tolist()}, "
                             f"expected {want.tolist()})")
    return drop_tied_head(cfg, out, "torchscale checkpoint: share_decoder_input_output_embed is true but "
                                    "output_projection.weight differs from embed_tokens.weight")


def load_dir(path):
    """A torchscale RetNet directory (config.json + model.safetensors) as a reference Model."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = config_from_torchscale(json.load(f))
    tensors, _ = safetensors_io.load(os.path.join(path, "model.safetensors"))
    return Model.from_tensors(cfg, tensors_from_torchscale(tensors, cfg), path)
