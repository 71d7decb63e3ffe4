"""mixserve_ref/torchscale.py: torchscale's RetNetConfig keyword arguments and RetNetDecoder state_dict
names mapped to ours, and what is refused (docs/model-format.md, "torchscale RetNet"). The logits
of mapped models against torchscale's own are in test_public_fixtures.py."""
import json
import math
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "reference"))
from mixserve_ref import safetensors_io  # noqa: E402
from mixserve_ref.model import Model  # noqa: E402
from mixserve_ref.torchscale import (config_from_torchscale, is_torchscale_config, load_dir,  # noqa: E402
                                     tensors_from_torchscale)

FIXTURE = os.path.join(ROOT, "tests", "golden_public", "retnet_torchscale", "model")
TIED = os.path.join(ROOT, "tests", "golden_public", "retnet_torchscale_tied", "model")


def fixture(path=FIXTURE):
    with open(os.path.join(path, "config.json")) as f:
        kwargs = json.load(f)
    tensors, _ = safetensors_io.load(os.path.join(path, "model.safetensors"))
    return kwargs, tensors


SMALL = dict(vocab_size=10, decoder_embed_dim=16, decoder_value_embed_dim=32, decoder_retention_heads=2)


def test_defaults_are_retnetconfigs():
    # RetNetConfig's own defaults cannot run, in torchscale either: 1280 values in 3 heads (its
    # v.view(..., 3, 1280 // 3) fails); with a value width that divides, every other key is its default
    with pytest.raises(ValueError, match="decoder_value_embed_dim=1280"):
        config_from_torchscale({"vocab_size": 10})
    cfg = config_from_torchscale({"vocab_size": 10, "decoder_value_embed_dim": 1536})
    assert (cfg.d_model, cfg.n_layers, cfg.ffn_dim, cfg.max_seq_len) == (768, 12, 1280, 1024)
    assert (cfg.norm, cfg.norm_eps, cfg.activation, cfg.ffn, cfg.position) == ("rmsnorm", 1e-6, "gelu", "glu", "none")
    assert (cfg.bias, cfg.head_bias, cfg.tie_embeddings, cfg.embed_norm, cfg.embed_scale) == (
        False, False, False, False, 1.0)
    assert cfg.layers == [{"mixer": "retnet", "heads": 3, "rope_base": 10000.0, "gn_eps": 1e-6, "value_dim": 1536,
                           "rope_style": "torchscale", "group_norm": "rmsnorm", "decay_normalize": True,
                           "gn_weight": False}] * 12


def test_keys_map_to_ours():
    cfg = config_from_torchscale(dict(vocab_size=50, decoder_embed_dim=16, decoder_value_embed_dim=8,
                                      decoder_retention_heads=2, decoder_ffn_embed_dim=24, decoder_layers=3,
                                      max_target_positions=40, activation_fn="swish", no_scale_embedding=False,
                                      share_decoder_input_output_embed=True, layernorm_embedding=True,
                                      layernorm_eps=1e-5, dropout=0.1, chunkwise_recurrent=True))
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.ffn_dim, cfg.max_seq_len) == (50, 16, 3, 24, 40)
    assert cfg.activation == "silu" and cfg.embed_scale == math.sqrt(16) and cfg.norm_eps == 1e-5
    assert cfg.tie_embeddings and cfg.embed_norm
    assert all(l["heads"] == 2 and l["value_dim"] == 8 and l["gn_eps"] == 1e-5 for l in cfg.layers)
    assert config_from_torchscale(dict(SMALL, activation_fn="relu")).activation == "relu"
    assert is_torchscale_config({"decoder_retention_heads": 3}) and not is_torchscale_config({"d_model": 8})


@pytest.mark.parametrize("key,value", [("deepnorm", True), ("multiway", True), ("moe_freq", 2), ("use_xmoe", True),
                                       ("decoder_normalize_before", False), ("xpos_rel_pos", True),
                                       ("rel_pos_buckets", 32), ("no_output_layer", True),
                                       ("activation_fn", "gelu_fast"), ("vocab_size", -1), ("decoder_layer", 2)])
def test_what_we_cannot_run_is_refused_by_name(key, value):
    with pytest.raises(ValueError, match=key):
        config_from_torchscale(dict(SMALL, **{key: value}))


def test_tensors_are_renamed_and_buffers_dropped():
    kwargs, raw = fixture()
    cfg = config_from_torchscale(kwargs)
    ours = tensors_from_torchscale(raw, cfg)
    assert set(ours) == set(Model(cfg).state_dict())
    assert torch.equal(ours["layers.1.mixer.o.weight"], raw["layers.1.retention.out_proj.weight"])
    assert torch.equal(ours["head.weight"], raw["output_projection.weight"])
    prefixed = tensors_from_torchscale({"decoder." + k: v for k, v in raw.items()}, cfg)  # fairseq's names
    assert all(torch.equal(prefixed[k], v) for k, v in ours.items()) and set(prefixed) == set(ours)


def test_tied_head_may_be_absent_or_must_be_the_embedding():
    kwargs, raw = fixture(TIED)
    cfg = config_from_torchscale(kwargs)
    assert "head.weight" not in tensors_from_torchscale(raw, cfg)
    without = {k: v for k, v in raw.items() if k != "output_projection.weight"}
    assert set(tensors_from_torchscale(without, cfg)) == set(Model(cfg).state_dict())
    other = dict(raw, **{"output_projection.weight": raw["embed_tokens.weight"] + 1})
    with pytest.raises(ValueError, match="output_projection.weight"):
        tensors_from_torchscale(other, cfg)


def test_bad_tensors_are_errors():
    kwargs, raw = fixture()
    cfg = config_from_torchscale(kwargs)
    with pytest.raises(ValueError, match="layers.0.retention.extra"):
        tensors_from_torchscale(dict(raw, **{"layers.0.retention.extra": torch.zeros(1)}), cfg)
    with pytest.raises(ValueError, match="appears twice"):
        tensors_from_torchscale(dict(raw, **{"decoder.embed_tokens.weight": raw["embed_tokens.weight"]}), cfg)
    for name in ("retnet_rel_pos.angle", "retnet_rel_pos.decay"):
        bad = raw[name].clone()
        bad[-1] += 1e-5
        with pytest.raises(ValueError, match=name):
            tensors_from_torchscale(dict(raw, **{name: bad}), cfg)
    # another head count implies another schedule: the buffers say the checkpoint is not this config
    with pytest.raises(ValueError, match="retnet_rel_pos"):
        tensors_from_torchscale(raw, config_from_torchscale(dict(kwargs, decoder_retention_heads=2)))


def test_load_dir_checks_shapes():
    model = load_dir(FIXTURE)
    assert model.cfg.layers[0]["value_dim"] == 64 and model.layers[0].mixer.v.weight.shape == (64, 32)
    kwargs, _ = fixture()
    with pytest.raises(ValueError, match="shape"):  # value width 32 instead of the checkpoint's 64
        Model.from_tensors(config_from_torchscale(dict(kwargs, decoder_value_embed_dim=32)),
                           tensors_from_torchscale(fixture()[1], config_from_torchscale(kwargs)), FIXTURE)
