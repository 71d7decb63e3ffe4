"""The cost model (docs/cost-model.md): the Extractor paper's closed forms (Tables 5, 6), its
training totals (Tables 3, 4, 7), the derived mixers' closed forms, critical paths and shapes."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mixserve_ref.config import MIXERS, ModelConfig  # noqa: E402
from mixserve_ref.cost import (ffn_token_cost, model_token_cost, param_count, token_cost,  # noqa: E402
                               training_totals)

ATTENTION_PATH = "mul-cum-mul-cum-div-exp-cum-div-mul-cum-mul-cum"
PAPER_CASES = [(d, n, t, W) for d in (4, 16, 128) for n in (1, 4) for t in (1, 7, 128) for W in (None, 5, 128)]


def counts(c):
    return c.mul, c.add, c.div, c.exp


def layer_for(kind, heads=4, window=8, features=3, **extra):
    """A layer of any kind with every parameter it might read."""
    return {"mixer": kind, "heads": heads, "window": window, "features": features, **extra}


# ---------------------------------------------------------------- the paper, Tables 5 and 6

@pytest.mark.parametrize("d,n,t,W", PAPER_CASES)
def test_paper_inference_closed_forms(d, n, t, W):
    assert counts(token_cost({"mixer": "attention", "heads": n}, d, t)) == (
        2 * t * d + 4 * d * d, 2 * t * d - t * n + t + 4 * d * d - 5 * d - 1, 2 * t * n, t * n)
    L = min(t, W) if W else t  # the paper's t is the number of lags in use
    window = {"window": W} if W else {}
    assert counts(token_cost({"mixer": "she", **window}, d, t)) == (
        L * d * d + 2 * d * d + d, L * d * d + 2 * d * d - 3 * d, 0, 0)
    assert counts(token_cost({"mixer": "he", **window}, d, t)) == (L * d + 3 * d * d + d, L * d + 3 * d * d - 4 * d, 0, 0)
    assert counts(token_cost({"mixer": "we", **window}, d, t)) == (L * d + 2 * d * d + d, L * d + 2 * d * d - 3 * d, 0, 0)
    assert counts(token_cost({"mixer": "me", **window}, d, t)) == (L * d, L * d - d, 0, 0)


def test_paper_critical_paths():
    assert token_cost({"mixer": "attention", "heads": 4}, 8, 3).critical_path == ATTENTION_PATH
    assert token_cost({"mixer": "attention"}, 8, 3).depth == 12
    assert token_cost({"mixer": "she", "window": 4}, 8, 3).critical_path == "mul-cum-mul-mul-cum"
    assert token_cost({"mixer": "she", "window": 4}, 8, 3).depth == 5
    assert token_cost({"mixer": "we", "window": 4}, 8, 3).critical_path == "mul-cum-mul-mul-cum"
    assert token_cost({"mixer": "he", "window": 4}, 8, 3).critical_path == "mul-cum-mul-cum-mul-mul-cum"
    assert token_cost({"mixer": "me", "window": 4}, 8, 3).critical_path == "mul-cum"
    assert token_cost({"mixer": "me", "window": 4}, 8, 3).depth == 2


# ---------------------------------------------------------------- the paper, Tables 3, 4 and 7

TABLE7 = {  # name: (layer, mul, add, div, exp, params, total arithmetic operations)
    "1-head attention": ({"mixer": "attention", "heads": 1}, 10502144, 10420096, 16512, 8256, 65536, 20947008),
    "32-head attention": ({"mixer": "attention", "heads": 32}, 10502144, 10416128, 528384, 264192, 65536, 21710848),
    "SHE": ({"mixer": "she", "window": 128}, 139476992, 139411456, 0, 0, 2129920, 278888448),
    "HE": ({"mixer": "he", "window": 128}, 7364608, 7282688, 0, 0, 65536, 14647296),
    "WE": ({"mixer": "we", "window": 128}, 5267456, 5201920, 0, 0, 49152, 10469376),
    "ME": ({"mixer": "me", "window": 128}, 1056768, 1040384, 0, 0, 128, 2097152),
}


@pytest.mark.parametrize("name", TABLE7)
def test_table7(name):
    layer, mul, add, div, exp, params, total = TABLE7[name]
    c = training_totals(layer, 128, 128)
    assert counts(c) == (mul, add, div, exp)
    assert c.total == total
    assert param_count(layer, 128, 128) == params


@pytest.mark.parametrize("d,n,l", [(4, 1, 1), (16, 4, 9), (64, 8, 33), (128, 32, 128)])
def test_training_closed_forms(d, n, l):
    """Tables 3 and 4 symbol by symbol (halves written as exact integer quotients)."""
    att = training_totals({"mixer": "attention", "heads": n}, d, l)
    assert counts(att) == (l * l * d + 4 * l * d * d + l * d, l * l * d + 4 * l * d * d - 4 * l * d - l * n,
                           n * l * l + n * l, (n * l * l + n * l) // 2)
    assert counts(training_totals({"mixer": "she"}, d, l)) == (
        (l * l * d * d + 5 * l * d * d) // 2 + l * d, (l * l * d * d + 5 * l * d * d) // 2 - 3 * l * d, 0, 0)
    assert counts(training_totals({"mixer": "he"}, d, l)) == (
        (l * l * d + 3 * l * d) // 2 + 3 * l * d * d, 3 * l * d * d + (l * l * d - 7 * l * d) // 2, 0, 0)
    assert counts(training_totals({"mixer": "we"}, d, l)) == (
        (l * l * d + 3 * l * d) // 2 + 2 * l * d * d, 2 * l * d * d + (l * l * d - 5 * l * d) // 2, 0, 0)
    assert counts(training_totals({"mixer": "me"}, d, l)) == ((l * l * d + l * d) // 2, (l * l * d - l * d) // 2, 0, 0)
    assert param_count({"mixer": "she"}, d, l) == l * d * d + 2 * d * d
    assert param_count({"mixer": "he"}, d, l) == l * d + 3 * d * d
    assert param_count({"mixer": "we"}, d, l) == l * d + 2 * d * d
    assert param_count({"mixer": "me"}, d, l) == l


@pytest.mark.parametrize("kind", MIXERS)
def test_totals_are_sums_of_tokens(kind):
    d, l, n = 32, 20, 4
    layer = layer_for(kind, heads=n)
    total = training_totals(layer, d, l)
    tokens = [token_cost(layer, d, t) for t in range(1, l + 1)]
    summed = tuple(sum(getattr(c, op) for c in tokens) for op in ("mul", "add", "div", "exp"))
    if kind != "attention":
        assert counts(total) == summed
        return
    # the paper's own inconsistency: Table 3 counts the (t − 1) softmax-denominator additions in
    # every head, Table 5 once, so training has (n − 1)·Σ(t − 1) more additions
    assert (total.mul, total.div, total.exp) == (summed[0], summed[2], summed[3])
    assert total.add - summed[1] == (n - 1) * l * (l - 1) // 2
    one_head = layer_for(kind, heads=1)
    assert training_totals(one_head, d, l).add == sum(token_cost(one_head, d, t).add for t in range(1, l + 1))


# ---------------------------------------------------------------- options of the paper's mixers

def test_out_proj_false_drops_the_output_projection():
    d, t = 16, 5
    for kind, path in (("she", "mul-cum-mul"), ("he", "mul-cum-mul-cum-mul"), ("we", "mul-cum-mul")):
        with_out = token_cost({"mixer": kind, "window": 8}, d, t)
        without = token_cost({"mixer": kind, "window": 8, "out_proj": False}, d, t)
        assert (with_out.mul - without.mul, with_out.add - without.add) == (d * d, (d - 1) * d), kind
        assert (with_out.div, with_out.exp, without.div, without.exp) == (0, 0, 0, 0)
        assert without.critical_path == path and with_out.critical_path == path + "-mul-cum", kind
        assert param_count({"mixer": kind, "window": 8}, d, 64) - param_count(
            {"mixer": kind, "window": 8, "out_proj": False}, d, 64) == d * d


@pytest.mark.parametrize("kind", ["she", "he", "we", "me"])
def test_fir_window_clamps_the_lags(kind):
    d, W = 8, 6
    costs = [token_cost({"mixer": kind, "window": W}, d, t) for t in range(1, 30)]
    no_window = [token_cost({"mixer": kind}, d, t) for t in range(1, 30)]
    assert costs[:W] == no_window[:W]  # below the window nothing changes
    assert all(c == costs[W - 1] for c in costs[W:])  # from t = W on: W lags, flat
    assert counts(costs[-1]) == counts(no_window[W - 1])


def test_attention_with_rope_adds_the_rotation_of_q_and_k():
    d, n, t = 16, 4, 9
    plain = token_cost({"mixer": "attention", "heads": n}, d, t)
    rotated = token_cost({"mixer": "attention", "heads": n, "rope": True}, d, t)
    assert (rotated.mul - plain.mul, rotated.add - plain.add, rotated.div, rotated.exp) == (
        4 * d, 2 * d, plain.div, plain.exp)
    assert rotated.critical_path == "mul-cum-" + ATTENTION_PATH


# ---------------------------------------------------------------- the derived mixers

@pytest.mark.parametrize("d,n,t", [(8, 1, 1), (16, 4, 3), (64, 8, 40), (128, 32, 128)])
def test_derived_closed_forms(d, n, t):
    """The closed forms of docs/cost-model.md."""
    h = d // n
    assert counts(token_cost({"mixer": "aft_simple"}, d, t)) == (4 * d * d + 2 * d, 4 * d * d - d, 2 * d, 2 * d)
    assert counts(token_cost({"mixer": "aft_full"}, d, t)) == (
        4 * d * d + t * d + d, 4 * d * d + 3 * t * d - 5 * d, 2 * d, t * d + d)
    for s in (1, 5, 200):
        L, A = min(t, s), int(t > s)
        assert counts(token_cost({"mixer": "aft_local", "window": s}, d, t)) == (
            4 * d * d + (L + A + 1) * d, 4 * d * d + (3 * L + 4 * A - 5) * d, 2 * d, (L + A + 1) * d), s
    assert counts(token_cost({"mixer": "retnet", "heads": n}, d, t)) == (
        5 * d * d + 3 * d * h + 8 * d, 5 * d * d + 2 * d * h - n, 2 * d + 2 * n, d + n)
    assert counts(token_cost({"mixer": "rwkv"}, d, t)) == (4 * d * d + 11 * d, 4 * d * d + 5 * d, 2 * d, 3 * d)
    assert counts(token_cost({"mixer": "linear", "heads": n}, d, t)) == (
        4 * d * d + 2 * d * h + d, 4 * d * d + 2 * d * h - d, d, 2 * d)
    for m in (1, h, 3 * h):
        M = n * m
        assert counts(token_cost({"mixer": "performer", "heads": n, "features": m}, d, t)) == (
            4 * d * d + 4 * d + 4 * M * h + 3 * M + 2 * n, 4 * d * d - 3 * d + 4 * M * h + 2 * M - 2 * n, d, 2 * M)


@pytest.mark.parametrize("d,n,dv", [(8, 1, 8), (16, 4, 32), (32, 4, 64), (64, 8, 24)])
def test_retnet_torchscale_switches(d, n, dv):
    """value_dim (m = dv/n per head), the RMS group norm and the decay scale (docs/cost-model.md)."""
    h, m = d // n, dv // n
    layer = {"mixer": "retnet", "heads": n, "value_dim": dv}
    # projections, RoPE, γS + kᵀv + qS, group norm (2m mul, 3m − 1 add per head), swish, gate
    base = (2 * d * d + 3 * d * dv + 4 * d + 3 * n * h * m + 2 * dv + 2 * dv,
            2 * (d - 1) * d + 2 * (d - 1) * dv + (dv - 1) * d + 2 * d + n * h * m + n * (h - 1) * m
            + n * (3 * m - 1) + dv,
            d + 2 * n + dv, n + dv)
    assert counts(token_cost(layer, d, 5)) == base
    rms = token_cost({**layer, "group_norm": "rmsnorm"}, d, 5)  # per head: m − 1 + 1 add, 1 div
    assert counts(rms) == (base[0], base[1] - n * (3 * m - 1) + n * m, d + n + dv, n + dv)
    scaled = token_cost({**layer, "group_norm": "rmsnorm", "decay_normalize": True}, d, 5)
    assert counts(scaled) == (base[0] + dv,) + counts(rms)[1:]
    assert rms.critical_path == "mul-cum-mul-cum-div-mul-cum-mul-cum-mul-cum-div-cum-exp-mul-mul-mul-cum"
    assert scaled.critical_path == "mul-cum-mul-cum-div-mul-cum-mul-cum-mul-mul-cum-div-cum-exp-mul-mul-mul-cum"
    assert param_count(layer, d, 10) == 2 * d * d + 3 * d * dv
    # the defaults are the plain retnet, and value_dim = d is value_dim left out
    assert token_cost({"mixer": "retnet", "heads": n, "value_dim": d, "rope_style": "torchscale"}, d, 5) == token_cost(
        {"mixer": "retnet", "heads": n}, d, 5)
    assert param_count({"mixer": "retnet", "heads": n}, d, 10) == 5 * d * d


@pytest.mark.parametrize("d,n", [(8, 1), (16, 4), (64, 8), (32, 2)])
def test_fla_switches(d, n):
    """linear's feature_map, q_scale, normalize, group_norm, gn_weight and RetNet's gn_weight
    (docs/cost-model.md): each changes the defaults' counts by its own terms."""
    h = d // n
    base = {"mixer": "linear", "heads": n}
    plain = counts(token_cost(base, d, 5))

    def delta(**switch):
        return tuple(a - b for a, b in zip(counts(token_cost({**base, **switch}, d, 5)), plain))
    assert delta(feature_map="relu") == delta(feature_map="identity") == (0, -2 * d, 0, -2 * d)  # no elu + 1
    # two h×h products per head for q and for k, and their ⊙, instead of elu + 1
    assert delta(feature_map="elementwise_product") == (4 * d * h + 2 * d, 4 * d * (h - 1) - 2 * d, 0, -2 * d)
    assert delta(q_scale=True) == (0, 0, d, 0)
    assert delta(normalize=False) == (-d, -d, -d, 0)  # no φ(q)·z, + ε, division; z += φ(k) stays
    assert delta(group_norm="rmsnorm") == (2 * d, d, n, n)
    assert delta(group_norm="layernorm") == (2 * d, 3 * d - n, 2 * n, n)
    assert delta(gn_weight=True) == (d, 0, 0, 0)
    fla = dict(feature_map="elementwise_product", q_scale=True, normalize=False, group_norm="rmsnorm", gn_weight=True)
    parts = [delta(**{k: v}) for k, v in fla.items()]
    assert delta(**fla) == tuple(sum(p[i] for p in parts) for i in range(4))
    assert token_cost({**base, "feature_map": "relu"}, d, 5).critical_path == "mul-cum-mul-cum-mul-cum-div-mul-cum"
    assert token_cost({**base, **fla}, d, 5).critical_path == (
        "mul-cum-mul-cum-mul-mul-cum-mul-cum-mul-cum-div-cum-exp-mul-mul-mul-cum")
    assert token_cost({**base, **fla, "feature_map": "elu", "normalize": True}, d, 5).critical_path == (
        "mul-cum-exp-cum-mul-cum-mul-cum-div-mul-cum-div-cum-exp-mul-mul-mul-cum")
    assert token_cost({**base, "q_scale": True}, d, 5).critical_path == token_cost(base, d, 5).critical_path
    assert param_count({**base, **fla}, d, 10) == 4 * d * d + 4 * h * h + h
    assert param_count(base, d, 10) == 4 * d * d
    # RetNet's group-norm weight: dv mul after the norm, dv/n parameters
    retnet = {"mixer": "retnet", "heads": n, "value_dim": 2 * d, "group_norm": "rmsnorm"}
    a, b = token_cost(retnet, d, 5), token_cost({**retnet, "gn_weight": True}, d, 5)
    assert counts(b) == (a.mul + 2 * d, a.add, a.div, a.exp)
    assert b.critical_path == a.critical_path.replace("-exp-mul-mul-mul-cum", "-exp-mul-mul-mul-mul-cum")
    assert param_count({**retnet, "gn_weight": True}, d, 10) == param_count(retnet, d, 10) + 2 * d // n


def test_performer_features_default_to_the_head_size():
    assert token_cost({"mixer": "performer", "heads": 4}, 32, 1) == token_cost(
        {"mixer": "performer", "heads": 4, "features": 8}, 32, 1)


def test_derived_critical_paths():
    paths = {
        "aft_simple": "mul-cum-exp-mul-cum-div-mul-mul-cum",
        "aft_local": "mul-cum-cum-exp-mul-cum-div-mul-mul-cum",
        "aft_full": "mul-cum-cum-exp-mul-cum-div-mul-mul-cum",
        "retnet": "mul-cum-mul-cum-div-mul-cum-mul-cum-cum-div-cum-mul-cum-div-cum-exp-mul-mul-mul-cum",
        "rwkv": "mul-cum-mul-cum-cum-exp-mul-cum-div-mul-mul-cum",
        "linear": "mul-cum-exp-cum-mul-cum-mul-cum-div-mul-cum",
        "performer": "mul-cum-mul-mul-cum-mul-cum-exp-mul-mul-cum-mul-cum-div-mul-cum",
    }
    for kind, path in paths.items():
        for t in (1, 50):
            c = token_cost(layer_for(kind), 16, t)
            assert c.critical_path == path, kind
            assert c.depth == len(path.split("-"))


def test_aft_local_window_clamps_the_in_window_terms():
    d, s = 8, 5
    local = [token_cost({"mixer": "aft_local", "window": s}, d, t) for t in range(1, 30)]
    full = [token_cost({"mixer": "aft_full"}, d, t) for t in range(1, 30)]
    assert local[:s] == full[:s]  # inside the window AFT-local is AFT-full
    # once tokens leave the window: s pair terms + the evicted token + the running sums, flat
    assert all(c == local[s] for c in local[s:])
    assert local[s].mul - local[s - 1].mul == d and local[s].exp - local[s - 1].exp == d
    assert local[-1].exp < full[-1].exp


# ---------------------------------------------------------------- sanity for every mixer

@pytest.mark.parametrize("kind", MIXERS)
def test_shapes_of_growth(kind):
    d, W = 16, 8
    costs = [token_cost(layer_for(kind, window=W), d, t) for t in range(1, 40)]
    for op in ("mul", "add", "div", "exp"):
        seq = [getattr(c, op) for c in costs]
        assert min(seq) >= 0, (kind, op)
        assert seq == sorted(seq), (kind, op)  # never decreasing in t
    muls = [c.mul for c in costs]
    if kind in ("retnet", "rwkv", "linear", "performer", "aft_simple"):
        assert all(c == costs[0] for c in costs), kind  # constant state, constant cost
    elif kind in ("attention", "aft_full"):
        assert muls[-1] > muls[20] > muls[0], kind  # grows with the context
        assert costs[-1].exp > costs[0].exp
    elif kind == "aft_local":
        assert muls[W] > muls[W - 1] > muls[0] and all(c == costs[W] for c in costs[W:])
    else:  # FIR mixers: grow until the window, then flat
        assert muls[W - 1] > muls[0] and all(c == costs[W - 1] for c in costs[W - 1:]), kind
    assert all(c.depth > 0 and c.critical_path == costs[0].critical_path for c in costs)


def test_bad_input():
    with pytest.raises(ValueError):
        token_cost({"mixer": "nope"}, 8, 1)
    with pytest.raises(ValueError):
        token_cost({"mixer": "me"}, 8, 0)


# ---------------------------------------------------------------- FFNs and whole models

def test_ffn_costs():
    d, c = 16, 64
    assert (counts(ffn_token_cost("mlp", d, c, "relu")) == (2 * d * c, (d - 1) * c + (c - 1) * d, 0, 0))
    assert ffn_token_cost("mlp", d, c, "relu").critical_path == "mul-cum-mul-cum"
    gelu = ffn_token_cost("mlp", d, c, "gelu_tanh")
    assert counts(gelu) == (2 * d * c + 7 * c, (d - 1) * c + (c - 1) * d + 4 * c, c, c)
    assert gelu.critical_path.startswith("mul-cum-") and gelu.critical_path.endswith("-mul-cum")
    assert counts(ffn_token_cost("rwkv_channel_mix", d, c)) == (
        d * d + 2 * d * c + c + 5 * d, d * d + 2 * d * c - c + d, d, d)
    with pytest.raises(ValueError):
        ffn_token_cost("moe", d, c)
    gelu = ffn_token_cost("mlp", d, c, "gelu")  # 0.5 x (1 + erf(x/√2)): 3 mul, 1 add, erf as 1 exp
    assert counts(gelu) == (2 * d * c + 3 * c, (d - 1) * c + (c - 1) * d + c, 0, c)
    assert gelu.critical_path == "mul-cum-mul-exp-cum-mul-mul-mul-cum"
    silu = ffn_token_cost("mlp", d, c, "silu")  # x σ(x)
    assert counts(silu) == (2 * d * c + c, (d - 1) * c + (c - 1) * d + c, c, c)
    glu = ffn_token_cost("glu", d, c, "silu")  # fc1, gate, silu, ⊙, fc2
    assert counts(glu) == (3 * d * c + 2 * c, 2 * (d - 1) * c + (c - 1) * d + c, c, c)
    assert glu.critical_path == "mul-cum-exp-cum-div-mul-mul-mul-cum"
    assert ffn_token_cost("glu", d, c, "relu").critical_path == "mul-cum-mul-mul-cum"


def test_model_token_cost_sums_the_layers():
    layers = [{"mixer": "she", "window": 4}, {"mixer": "attention", "heads": 2}, {"mixer": "me"}]
    cfg = ModelConfig(vocab_size=10, d_model=8, n_layers=3, ffn_dim=32, max_seq_len=16, layers=layers,
                      activation="gelu_tanh")
    t = 7
    mixers, ffns = model_token_cost(cfg, t)
    parts = [token_cost(layer, 8, t) for layer in cfg.layers]
    assert counts(mixers) == tuple(sum(getattr(c, op) for c in parts) for op in ("mul", "add", "div", "exp"))
    assert mixers.critical_path == "-".join(c.critical_path for c in parts)
    assert mixers.depth == sum(c.depth for c in parts)
    one_ffn = ffn_token_cost("mlp", 8, 32, "gelu_tanh")
    assert counts(ffns) == counts(3 * one_ffn) and ffns.depth == 3 * one_ffn.depth
    # config.py's window default (max_seq_len) is what the FIR layers see
    assert parts[2] == token_cost({"mixer": "me", "window": 16}, 8, t)
