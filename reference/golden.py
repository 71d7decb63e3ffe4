"""Generates tests/golden/: tiny seeded models with the logits and states the C++ backends must
reproduce. One command: /usr/bin/python3 reference/golden.py [--out tests/golden]

Each case directory holds config.json + model.safetensors (F32), expected.safetensors and
fixture.json. The token sequence has PROMPT_LEN prompt tokens and N_DECODE decode tokens:
prefill consumes tokens[:PROMPT_LEN] (prefill_logits: every prompt position); decode step i feeds
tokens[PROMPT_LEN + i] at that position (decode_logits[i]). Expected values are computed in
float64 from the float32 weights, then stored as float32. States: `state.L.mixer.NAME` after all
tokens and `prefill_state.L...` right after the prompt (prefill must leave exactly that).
"""
import argparse
import json
import os
import shutil
import sys
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mixserve_ref import safetensors_io  # noqa: E402
from mixserve_ref.config import ModelConfig  # noqa: E402
from mixserve_ref.mixers import MIXERS  # noqa: E402
from mixserve_ref.model import Model  # noqa: E402
from mixserve_ref.testing import randomize  # noqa: E402
from half_precision import errors as half_precision_errors  # noqa: E402

PROMPT_LEN, N_DECODE = 20, 10  # 30 positions: past every window below (W = 8, s = 6)
TOLERANCE = 1e-4
BASE = dict(vocab_size=97, d_model=32, ffn_dim=64, max_seq_len=64)

# Each mixer's own cases (its class's `golden`), then the hybrids that mix them.
CASES = {name: case for cls in MIXERS.values() for name, case in cls.golden.items()}
CASES.update({
    "hybrid_a": dict(layers=[{"mixer": "she", "window": 8}, {"mixer": "attention", "heads": 2},
                             {"mixer": "rwkv"}, {"mixer": "me", "window": 5}]),
    "hybrid_b": dict(layers=[{"mixer": "retnet", "heads": 2}, {"mixer": "aft_local", "window": 4},
                             {"mixer": "performer", "heads": 4, "features": 4}, {"mixer": "we", "window": 3},
                             {"mixer": "linear", "heads": 1}, {"mixer": "he", "window": 6},
                             {"mixer": "aft_full"}, {"mixer": "aft_simple"}],
                     position="none", embed_norm=True, activation="gelu_tanh"),
    # microsoft/torchscale's RetNet conventions (reference/mixserve_ref/torchscale.py maps its configs here)
    "retnet_torchscale": dict(layers=[{"mixer": "retnet", "heads": 4, "value_dim": 64, "rope_style": "torchscale",
                                       "group_norm": "rmsnorm", "decay_normalize": True, "gn_eps": 1e-6}] * 2,
                              norm="rmsnorm", norm_eps=1e-6, ffn="glu", activation="gelu", bias=False,
                              tie_embeddings=False, position="none"),
    # flash-linear-attention's RetNet and linear attention (reference/mixserve_ref/fla.py maps its models here)
    "retnet_fla": dict(layers=[{"mixer": "retnet", "heads": 4, "value_dim": 64, "group_norm": "rmsnorm",
                                "gn_weight": True, "gn_eps": 1e-6}] * 2,
                       norm="rmsnorm", ffn="glu", activation="silu", bias=False, tie_embeddings=False, position="none"),
    "linear_fla": dict(layers=[{"mixer": "linear", "heads": 2, "feature_map": "elementwise_product", "q_scale": True,
                                "normalize": False, "group_norm": "rmsnorm", "gn_weight": True, "gn_eps": 1e-2},
                               {"mixer": "linear", "heads": 2, "feature_map": "elu", "q_scale": True, "normalize": True,
                                "eps": 1e-10, "group_norm": "rmsnorm", "gn_weight": True, "gn_eps": 1e-2}],
                       norm="rmsnorm", ffn="glu", activation="silu", bias=False),
    "glu_silu": dict(layers=[{"mixer": "attention", "heads": 2},
                             {"mixer": "retnet", "heads": 2, "group_norm": "rmsnorm"}],
                     norm="rmsnorm", ffn="glu", activation="silu", bias=True, embed_norm=True),
})


def flatten_states(states, prefix):
    out = {}
    for i, st in enumerate(states):
        for part, tensors in st.items():
            for name, t in tensors.items():
                out[f"{prefix}.{i}.{part}.{name}"] = t[0].float().clone()
    return out


def cost_numbers(cfg, positions):
    try:
        from mixserve_ref import cost
    except ImportError:
        return None
    out = []
    for i, layer in enumerate(cfg.layers):
        per_t = {}
        for t in positions:
            c = cost.token_cost(layer, cfg.d_model, t)
            per_t[str(t)] = {"mul": c.mul, "add": c.add, "div": c.div, "exp": c.exp,
                             "critical_path": c.critical_path}
        out.append(per_t)
    return out


def make_case(name, spec, seed, out_dir):
    cfg = ModelConfig(n_layers=len(spec["layers"]), **BASE, **spec)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = randomize(Model(cfg), gen).float()
    path = os.path.join(out_dir, name)
    if os.path.exists(path):
        shutil.rmtree(path)
    model.save_dir(path, dtype=torch.float32, metadata={"generator": "reference/golden.py", "seed": seed})
    model = model.double()  # float64 math on the float32-rounded weights
    tokens = torch.randint(0, cfg.vocab_size, (1, PROMPT_LEN + N_DECODE), generator=gen)
    with torch.no_grad():
        prefill_logits = model(tokens[:, :PROMPT_LEN])[0]
        states = model.init_state(1)
        step_logits = [model.step(tokens[:, t], t, states)[0] for t in range(PROMPT_LEN)]
        prefill_state = flatten_states(states, "prefill_state")
        decode_logits = [model.step(tokens[:, t], t, states)[0]
                         for t in range(PROMPT_LEN, PROMPT_LEN + N_DECODE)]
        final_state = flatten_states(states, "state")
    # the recurrent form must agree with the parallel one before anything is written
    assert (torch.stack(step_logits) - prefill_logits).abs().max() < 1e-9, name
    expected = {"tokens": tokens[0].to(torch.int32), "prefill_logits": prefill_logits.float(),
                "decode_logits": torch.stack(decode_logits).float(), **prefill_state, **final_state}
    safetensors_io.save(expected, os.path.join(path, "expected.safetensors"))
    positions = [1, PROMPT_LEN, PROMPT_LEN + N_DECODE]
    meta = {"name": name, "seed": seed, "prompt_len": PROMPT_LEN, "n_decode": N_DECODE,
            "tolerance": TOLERANCE, "mixers": [l["mixer"] for l in cfg.layers],
            "cost_positions": positions, "cost": cost_numbers(cfg, positions)}
    meta["half_precision_error"] = half_precision_errors(path)
    with open(os.path.join(path, "fixture.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    return path


def case_seed(name):
    """A case's seed follows from its name alone, so adding or removing a case (a new mixer's row)
    leaves every other fixture as it was."""
    return zlib.crc32(name.encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(root, "tests", "golden"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(args.out, exist_ok=True)
    total = 0
    for i, (name, spec) in enumerate(CASES.items()):
        path = make_case(name, spec, case_seed(name), args.out)
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
        total += size
        print(f"[{i + 1:2d}/{len(CASES)}] {name:15s} {size / 1024:7.1f} KiB", flush=True)
    print(f"wrote {len(CASES)} fixtures, {total / 1024:.0f} KiB, to {args.out}")


if __name__ == "__main__":
    main()
