"""The reference's mixer table (mixserve_ref/mixers/__init__.py) is complete and is the C++ table's
twin (engine/mixers/registry.cc): the same names in the same order, the same layer keys, the same
window default and RoPE rule. A row missing something fails here, not when a fixture is made."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mixserve_ref.config import ModelConfig  # noqa: E402
from mixserve_ref.cost_model import Cost  # noqa: E402
from mixserve_ref.mixers import MIXERS, TABLE  # noqa: E402
from mixserve_ref.mixers.spec import MixerSpec  # noqa: E402
from mixserve_ref.testing import random_config  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROW = re.compile(r'\{MixerKind::k\w+, "(\w+)", \{([^}]*)\}, (\d+), (true|false),')


def cpp_rows():
    with open(os.path.join(ROOT, "engine", "mixers", "registry.cc")) as f:
        rows = ROW.findall(f.read())
    assert rows, "no rows found in registry.cc: has its format changed?"
    return [(name, re.findall(r'"(\w+)"', keys), int(window), rotates == "true")
            for name, keys, window, rotates in rows]


def test_same_rows_as_the_cpp_table():
    assert [r[0] for r in cpp_rows()] == list(MIXERS)
    for name, keys, window, rotates in cpp_rows():
        cls = MIXERS[name]
        assert sorted(keys) == sorted(cls.params), name
        assert (cls.params.get("window") or 0) == window, name
        assert cls.always_rotates == rotates, name


def test_every_row_is_complete():
    import torch
    for cls in TABLE:
        assert cls.name and isinstance(cls.name, str)
        for hook in ("token_cost", "param_count"):
            assert getattr(cls, hook) is not getattr(MixerSpec, hook), f"{cls.name} lacks {hook}"
        assert cls.golden, f"{cls.name} has no golden case"
        assert all(case.startswith(cls.name) for case in cls.golden), cls.name
        assert set(cls.paper_layer) <= set(cls.params), cls.name
        layer = {"mixer": cls.name, **cls.random_params(_Draw())}
        assert set(layer) - {"mixer"} <= set(cls.params), cls.name
        cfg = ModelConfig(vocab_size=11, d_model=8, n_layers=1, ffn_dim=16, max_seq_len=12, layers=[layer])
        from mixserve_ref.cost import param_count, token_cost
        assert isinstance(token_cost(cfg.layers[0], 8, 3), Cost)
        assert param_count(cfg.layers[0], 8, 12) > 0
        random_config([cls.name], torch.Generator().manual_seed(1))


class _Draw:
    heads = 2

    def pick(self, choices):
        return choices[0]

    def coin(self):
        return True
