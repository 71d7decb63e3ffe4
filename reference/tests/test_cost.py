"""The cost model: the Extractor paper's closed forms (Tables 5, 6) and training totals (Table 7)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mixserve_ref.config import MIXERS  # noqa: E402
from mixserve_ref.cost import param_count, token_cost, training_totals  # noqa: E402

CASES = [(d, n, t) for d in (16, 64, 128) for n in (1, 4, 16) for t in (1, 7, 128)]


@pytest.mark.parametrize("d,n,t", CASES)
def test_paper_inference_closed_forms(d, n, t):
    c = token_cost({"mixer": "attention", "heads": n}, d, t)
    assert (c.mul, c.add, c.div, c.exp) == (2 * t * d + 4 * d * d, 2 * t * d - t * n + t + 4 * d * d - 5 * d - 1,
                                            2 * t * n, t * n)
    W = {"window": 1000}
    assert token_cost({"mixer": "she", **W}, d, t).mul == t * d * d + 2 * d * d + d
    assert token_cost({"mixer": "she", **W}, d, t).add == t * d * d + 2 * d * d - 3 * d
    assert token_cost({"mixer": "he", **W}, d, t).mul == t * d + 3 * d * d + d
    assert token_cost({"mixer": "he", **W}, d, t).add == t * d + 3 * d * d - 4 * d
    assert token_cost({"mixer": "we", **W}, d, t).mul == t * d + 2 * d * d + d
    assert token_cost({"mixer": "we", **W}, d, t).add == t * d + 2 * d * d - 3 * d
    assert token_cost({"mixer": "me", **W}, d, t).mul == t * d
    assert token_cost({"mixer": "me", **W}, d, t).add == t * d - d


def test_table7():
    d = l = 128
    expect = {  # name: (layer, mul, add, div, exp, params)
        "1-head attention": ({"mixer": "attention", "heads": 1}, 10502144, 10420096, 16512, 8256, 65536),
        "32-head attention": ({"mixer": "attention", "heads": 32}, 10502144, 10416128, 528384, 264192, 65536),
        "SHE": ({"mixer": "she", "window": l}, 139476992, 139411456, 0, 0, 2129920),
        "HE": ({"mixer": "he", "window": l}, 7364608, 7282688, 0, 0, 65536),
        "WE": ({"mixer": "we", "window": l}, 5267456, 5201920, 0, 0, 49152),
        "ME": ({"mixer": "me", "window": l}, 1056768, 1040384, 0, 0, 128),
    }
    for name, (layer, mul, add, div, exp, params) in expect.items():
        c = training_totals(layer, d, l)
        assert (c.mul, c.add, c.div, c.exp) == (mul, add, div, exp), name
        assert param_count(layer, d, l) == params, name
    # total arithmetic operations row of Table 7
    assert sum(vars(training_totals(expect["SHE"][0], d, l)).get(k) for k in ("mul", "add", "div", "exp")) == 278888448


def test_totals_are_sums_of_tokens_except_attention_additions():
    d, l = 32, 20
    for kind in MIXERS:
        layer = {"mixer": kind, "heads": 4, "window": 8, "features": 4, "out_proj": True}
        total = training_totals(layer, d, l)
        tokens = [token_cost(layer, d, t) for t in range(1, l + 1)]
        assert total.mul == sum(c.mul for c in tokens), kind
        if kind != "attention":
            assert total.add == sum(c.add for c in tokens), kind
    att = training_totals({"mixer": "attention", "heads": 4}, d, l)
    assert att.add == l * l * d + 4 * l * d * d - 4 * l * d - l * 4


def test_critical_paths():
    assert token_cost({"mixer": "attention"}, 8, 3).critical_path == "mul-cum-mul-cum-div-exp-cum-div-mul-cum-mul-cum"
    assert token_cost({"mixer": "she", "window": 4}, 8, 3).critical_path == "mul-cum-mul-mul-cum"
    assert token_cost({"mixer": "me", "window": 4}, 8, 3).critical_path == "mul-cum"
    assert token_cost({"mixer": "she", "window": 4}, 8, 3).depth == 5
    assert token_cost({"mixer": "she", "window": 4, "out_proj": False}, 8, 3).critical_path == "mul-cum-mul"


def test_shapes_of_growth():
    d = 16
    for kind in MIXERS:
        layer = {"mixer": kind, "heads": 4, "window": 8, "features": 4}
        costs = [token_cost(layer, d, t) for t in range(1, 40)]
        for c in costs:
            assert min(c.mul, c.add, c.div, c.exp) >= 0
        muls = [c.mul for c in costs]
        assert muls == sorted(muls), kind  # never decreasing in t
        if kind in ("retnet", "rwkv", "linear", "performer", "aft_simple"):
            assert len(set(muls)) == 1, kind  # constant per token
        elif kind in ("attention", "aft_full"):
            assert muls[-1] > muls[20] > muls[0], kind  # grows with the context
        else:  # FIR mixers and aft_local grow until the window, then stay flat
            assert muls[7] > muls[0] and muls[8] == muls[38] or kind == "aft_local", kind
    local = [token_cost({"mixer": "aft_local", "window": 8}, d, t).mul for t in range(1, 40)]
    assert local[8] == local[38] and local[7] > local[0]


def test_out_proj_and_window():
    d = 16
    with_out = token_cost({"mixer": "we", "window": 8}, d, 5)
    without = token_cost({"mixer": "we", "window": 8, "out_proj": False}, d, 5)
    assert with_out.mul - without.mul == d * d and with_out.add - without.add == (d - 1) * d
    assert token_cost({"mixer": "she", "window": 8}, d, 100).mul == token_cost({"mixer": "she", "window": 8}, d, 8).mul
