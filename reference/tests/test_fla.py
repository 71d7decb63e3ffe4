"""mixserve_ref/fla.py: flash-linear-attention's RetNet / linear-attention config.json and state_dict
names mapped to ours, and what is refused (docs/model-format.md, "flash-linear-attention models").
The logits of mapped models against fla's own are in test_public_fixtures.py."""
import json
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "reference"))
from mixserve_ref import safetensors_io  # noqa: E402
from mixserve_ref.fla import config_from_fla, gated_mlp_size, is_fla_config, load_dir, tensors_from_fla  # noqa: E402
from mixserve_ref.model import Model  # noqa: E402

PUBLIC = os.path.join(ROOT, "tests", "golden_public")


def fixture(op):
    path = os.path.join(PUBLIC, op, "model")
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    tensors, _ = safetensors_io.load(os.path.join(path, "model.safetensors"))
    return config, tensors


RETNET = {"model_type": "retnet", "vocab_size": 10, "hidden_size": 16, "num_heads": 2, "num_hidden_layers": 1}
LINEAR = {"model_type": "linear_attn", "vocab_size": 10, "hidden_size": 16, "num_heads": 2, "num_hidden_layers": 1}


def test_defaults_are_the_config_classes():
    cfg = config_from_fla({"model_type": "retnet"})
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.max_seq_len) == (32000, 2048, 24, 2048)
    assert cfg.ffn_dim == 2816  # GatedMLP: int(2048 · 2 · 2/3) = 2730, rounded up to a multiple of 256
    assert (cfg.norm, cfg.norm_eps, cfg.activation, cfg.ffn, cfg.position, cfg.embed_scale) == (
        "rmsnorm", 1e-6, "silu", "glu", "none", 1.0)
    assert (cfg.bias, cfg.head_bias, cfg.tie_embeddings, cfg.embed_norm, cfg.bos_id, cfg.eos_id) == (
        False, False, False, False, 1, 2)
    assert cfg.layers == [{"mixer": "retnet", "heads": 8, "rope_base": 10000.0, "gn_eps": 1e-6, "value_dim": 4096,
                           "rope_style": "half", "group_norm": "rmsnorm", "decay_normalize": False,
                           "gn_weight": True}] * 24
    cfg = config_from_fla({"model_type": "linear_attn"})
    assert (cfg.d_model, cfg.n_layers, cfg.ffn_dim) == (2048, 24, 5632)  # hidden_ratio 4: 5461 -> 5632
    assert cfg.layers[0] == {"mixer": "linear", "heads": 4, "eps": 1e-10, "feature_map": "elementwise_product",
                             "q_scale": True, "normalize": False, "group_norm": "rmsnorm", "gn_eps": 1e-6,
                             "gn_weight": True}
    assert is_fla_config({"model_type": "retnet"}) and is_fla_config({"model_type": "linear_attn"})
    assert not is_fla_config({"model_type": "gpt2"}) and not is_fla_config({"decoder_retention_heads": 3})


def test_keys_map_to_ours():
    cfg = config_from_fla(dict(RETNET, expand_v=1.5, intermediate_size=40, max_position_embeddings=99,
                               norm_eps=1e-5, elementwise_affine=False, tie_word_embeddings=True, bos_token_id=None,
                               eos_token_id=0, attn_mode="fused_recurrent", fuse_norm=False, use_short_conv=True,
                               conv_size=3, architectures=["RetNetForCausalLM"], transformers_version="4.53.0",
                               torch_dtype="bfloat16", use_cache=False, initializer_range=0.1, pad_token_id=0))
    assert (cfg.ffn_dim, cfg.max_seq_len, cfg.norm_eps, cfg.tie_embeddings, cfg.bos_id, cfg.eos_id) == (
        40, 99, 1e-5, True, -1, 0)
    assert cfg.layers[0]["value_dim"] == 24 and cfg.layers[0]["gn_eps"] == 1e-5 and not cfg.layers[0]["gn_weight"]
    cfg = config_from_fla(dict(LINEAR, feature_map="relu", norm_feature_map=True, hidden_ratio=None))
    assert cfg.layers[0]["feature_map"] == "relu" and cfg.layers[0]["normalize"] and cfg.ffn_dim == 256
    assert gated_mlp_size(16, 2, None) == 256 and gated_mlp_size(384, 2, None) == 512
    assert config_from_fla(dict(LINEAR, feature_map="identity")).layers[0]["feature_map"] == "identity"


@pytest.mark.parametrize("base,key,value", [
    (RETNET, "expand_k", 0.5), (LINEAR, "expand_k", 2.0), (LINEAR, "expand_v", 2.0),
    (RETNET, "use_output_gate", False), (RETNET, "feature_map", "relu"),
    (RETNET, "attn", {"layers": [0], "num_heads": 2}), (LINEAR, "attnres_block_size", 2),
    (RETNET, "hidden_act", "relu"), (LINEAR, "hidden_act", "powlu"), (LINEAR, "norm_q", True),
    (LINEAR, "norm_k", True), (LINEAR, "feature_map", "hedgehog"), (LINEAR, "feature_map", "dpfp"),
    (LINEAR, "num_kv_heads", 3), (RETNET, "num_heads", 3), (RETNET, "expand_v", 0.1),
    (RETNET, "bos_token_id", [1, 2]), (RETNET, "tie_feature_map_qk", True), (LINEAR, "use_short_conv", True),
    (RETNET, "hidden_sise", 8), (RETNET, "model_type", "gla")])
def test_what_we_cannot_run_is_refused_by_name(base, key, value):
    with pytest.raises(ValueError, match=key if key != "num_heads" else "hidden_size"):
        config_from_fla(dict(base, **{key: value}))


@pytest.mark.parametrize("op", ["retnet_fla", "linear_attn_fla"])
def test_tensors_are_renamed(op):
    config, raw = fixture(op)
    cfg = config_from_fla(config)
    ours = tensors_from_fla(raw, cfg, config)
    assert set(ours) == set(Model(cfg).state_dict())
    assert torch.equal(ours["layers.1.mixer.o.weight"], raw["model.layers.1.attn.o_proj.weight"])
    assert torch.equal(ours["layers.0.ffn.fc1.weight"], raw["model.layers.0.mlp.gate_proj.weight"])
    assert torch.equal(ours["layers.0.ffn.gate.weight"], raw["model.layers.0.mlp.up_proj.weight"])
    assert torch.equal(ours["head.weight"], raw["lm_head.weight"])
    if op == "retnet_fla":
        assert torch.equal(ours["layers.0.mixer.gn.weight"], raw["model.layers.0.attn.g_norm_swish_gate.weight"])
    else:
        assert torch.equal(ours["layers.0.mixer.gn.weight"], raw["model.layers.0.attn.norm.weight"])
        assert torch.equal(ours["layers.1.mixer.fk2.bias"], raw["model.layers.1.attn.feature_map_k.layer2.bias"])


def test_gqa_repeats_each_kv_head_for_its_query_heads():
    config, raw = fixture("retnet_fla_tied_gqa")  # 4 query heads, 2 kv heads, head size 8 (keys), 16 (values)
    cfg = config_from_fla(config)
    ours = tensors_from_fla(raw, cfg, config)
    k, v = raw["model.layers.0.attn.k_proj.weight"], raw["model.layers.0.attn.v_proj.weight"]
    assert k.shape == (16, 32) and ours["layers.0.mixer.k.weight"].shape == (32, 32)
    for j in range(4):  # query head j reads kv head j // 2
        assert torch.equal(ours["layers.0.mixer.k.weight"][8 * j:8 * j + 8], k[8 * (j // 2):8 * (j // 2) + 8])
        assert torch.equal(ours["layers.0.mixer.v.weight"][16 * j:16 * j + 16], v[16 * (j // 2):16 * (j // 2) + 16])
    assert torch.equal(ours["layers.0.mixer.gn.weight"], raw["model.layers.0.attn.g_norm.weight"])  # fuse_norm false


def test_tied_head_may_be_absent_or_must_be_the_embedding():
    config, raw = fixture("linear_attn_fla_elu")
    cfg = config_from_fla(config)
    assert "lm_head.weight" not in raw and cfg.tie_embeddings
    assert set(tensors_from_fla(raw, cfg, config)) == set(Model(cfg).state_dict())
    same = dict(raw, **{"lm_head.weight": raw["model.embeddings.weight"].clone()})
    assert "head.weight" not in tensors_from_fla(same, cfg, config)
    with pytest.raises(ValueError, match="lm_head.weight"):
        tensors_from_fla(dict(raw, **{"lm_head.weight": raw["model.embeddings.weight"] + 1}), cfg, config)


def test_tied_feature_maps_use_the_q_map_for_both():
    config, raw = fixture("linear_attn_fla")
    config = dict(config, tie_feature_map_qk=True)
    cfg = config_from_fla(config)
    q_only = {k: v for k, v in raw.items() if ".feature_map_k." not in k}
    ours = tensors_from_fla(q_only, cfg, config)
    assert set(ours) == set(Model(cfg).state_dict())
    assert torch.equal(ours["layers.0.mixer.fk1.weight"], raw["model.layers.0.attn.feature_map_q.layer1.weight"])
    both = dict(q_only, **{k.replace("feature_map_q", "feature_map_k"): v for k, v in q_only.items()
                           if "feature_map_q" in k})
    assert all(torch.equal(v, ours[k]) for k, v in tensors_from_fla(both, cfg, config).items())
    with pytest.raises(ValueError, match="feature_map_k"):
        tensors_from_fla(raw, cfg, config)  # the fixture's own k maps differ from its q maps


def test_bad_tensors_are_errors():
    config, raw = fixture("retnet_fla")
    cfg = config_from_fla(config)
    with pytest.raises(ValueError, match="model.layers.0.attn.extra"):
        tensors_from_fla(dict(raw, **{"model.layers.0.attn.extra": torch.zeros(1)}), cfg, config)
    with pytest.raises(ValueError, match="both map to layers.0.mixer.gn.weight"):  # the fused and unfused names
        tensors_from_fla(dict(raw, **{"model.layers.0.attn.g_norm.weight": torch.ones(16)}), cfg, config)
    with pytest.raises(ValueError, match="model.layers.2"):  # a layer the config does not have
        tensors_from_fla(dict(raw, **{"model.layers.2.attn_norm.weight": torch.ones(32)}), cfg, config)
    with pytest.raises(ValueError, match="missing tensors"):  # no weight, but the config says it has one
        Model.from_tensors(cfg, tensors_from_fla({k: v for k, v in raw.items() if "g_norm" not in k}, cfg, config),
                           "x")


def test_load_dir_checks_shapes():
    model = load_dir(os.path.join(PUBLIC, "retnet_fla", "model"))
    assert model.cfg.layers[0]["value_dim"] == 64 and model.layers[0].mixer.v.weight.shape == (64, 32)
    config, raw = fixture("retnet_fla")
    wrong = config_from_fla(dict(config, expand_v=1.0))
    with pytest.raises(ValueError, match="shape"):
        Model.from_tensors(wrong, tensors_from_fla(raw, wrong, config), "retnet_fla")
