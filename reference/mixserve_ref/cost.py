"""The analytic cost model of DESIGN §5 (derivations: docs/cost-model.md).

For ONE new token at 1-based position t, each mixer sublayer (and each FFN) reports its
multiplications, additions, divisions and exponentiations and its critical path: the ordered
chain of dependent stages ("mul", "cum", "div", "exp"), whose length is the depth.
Attention, SHE, HE, WE and ME equal the Extractor paper's Table 5/6 closed forms exactly; the
other mixers are derived in the same convention. Each mixer's count is its class's
`token_cost` (mixers/<family>.py); this module sums them and the FFNs over a model. The C++ engine
mirrors them (engine/mixers/*/*.cc, `*_cost`) and every golden fixture carries their numbers.

Convention (the paper's):
- x·W with x ∈ R^r, W ∈ R^{r×c}: r·c mul, (r−1)·c add (`vec_mat`);
- an element-wise product of two k-vectors: k mul;
- not counted: biases, the block's layer norms, the max-subtraction of numerically stable
  forms, comparisons (max, relu), sign flips, per-channel constants that can be precomputed;
- σ(x) = 1/(1 + e^{−x}): 1 exp + 1 add + 1 div per element; a (reciprocal) square root is a
  power, counted as 1 exp;
- "cum" is an addition stage (an accumulation of any number of terms, two-term sums included:
  the paper has no other label for additions).

  /usr/bin/python3 -m mixserve_ref.cost --d 128 --l 128     (from reference/)
"""
import argparse

from .config import MIXER_PARAMS
from .cost_model import Cost, sigmoid, vec_mat  # noqa: F401 (Cost is part of this module's interface)
from .mixers import MIXERS


# ---------------------------------------------------------------- FFNs

def gelu_tanh(size):
    """0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))) as written, tanh(z) = (e^{2z} − 1)/(e^{2z} + 1):
    x³ 2 mul, ·0.044715 1, x + 1 add, ·√(2/π) 1 mul, 2z 1 mul, e^{2z} 1 exp, −1 and +1 2 add,
    the division 1 div, 1 + tanh 1 add, 0.5 x 1 mul, the product 1 mul."""
    return Cost(mul=7 * size, add=4 * size, div=size, exp=size)


GELU_PATH = "mul-mul-mul-cum-mul-mul-exp-cum-div-cum-mul"


def activation_cost(activation, size):
    """An activation on `size` elements, with its own path ("" for relu, a comparison).
    gelu (exact) as written, 0.5 x (1 + erf(x/√2)): x/√2 1 mul, erf 1 exp (one transcendental
    evaluation, counted like e^x), 1 + 1 add, x·(…) 1 mul, 0.5· 1 mul.
    silu = x σ(x): σ 1 exp + 1 add + 1 div, the product 1 mul."""
    if activation == "relu":
        return Cost()
    if activation == "gelu_tanh":
        return gelu_tanh(size).with_path(GELU_PATH)
    if activation == "gelu":
        return Cost(mul=3 * size, add=size, exp=size, critical_path="mul-exp-cum-mul-mul")
    if activation == "silu":
        return (sigmoid(size) + Cost(mul=size)).with_path("exp-cum-div-mul")
    raise ValueError(f"unknown activation {activation!r}")


def _then(*paths):
    return "-".join(p for p in paths if p)


def mlp_cost(d, hidden, activation="relu"):
    act = activation_cost(activation, hidden)
    c = vec_mat(d, hidden) + vec_mat(hidden, d) + act
    return c.with_path(_then("mul-cum", act.critical_path, "mul-cum"))


def glu_cost(d, hidden, activation="relu"):
    """fc2(act(fc1 x) ⊙ gate x): fc1 and gate side by side (the path goes through fc1 and the
    activation), the product c mul, fc2."""
    act = activation_cost(activation, hidden)
    c = 2 * vec_mat(d, hidden) + act + Cost(mul=hidden) + vec_mat(hidden, d)
    return c.with_path(_then("mul-cum", act.critical_path, "mul", "mul-cum"))


def rwkv_channel_mix_cost(d, hidden):
    c = (2 * Cost(mul=2 * d, add=d)   # token shift for k and r
         + vec_mat(d, hidden)         # key
         + Cost(mul=hidden)           # relu(·)²
         + vec_mat(hidden, d)         # value
         + vec_mat(d, d)              # receptance
         + sigmoid(d)                 # σ(r)
         + Cost(mul=d))               # σ(r) ⊙ value
    return c.with_path("mul-cum-mul-cum-mul-mul-cum-mul")  # lerp, key, square, value, r ⊙


def ffn_token_cost(ffn, d, hidden, activation="relu"):
    """One token through the FFN sublayer (its cost does not depend on t)."""
    if ffn == "mlp":
        return mlp_cost(d, hidden, activation)
    if ffn == "rwkv_channel_mix":
        return rwkv_channel_mix_cost(d, hidden)
    if ffn == "glu":
        return glu_cost(d, hidden, activation)
    raise ValueError(f"unknown ffn {ffn!r}")


# ---------------------------------------------------------------- entry points

def with_defaults(layer, d):
    """The layer's params with config.py's defaults filled in. A missing FIR window means the
    paper's form (all t lags); performer features default to the head size, as in config.py."""
    p = {**MIXER_PARAMS[layer["mixer"]], **layer}
    if p.get("features", 0) is None:
        p["features"] = d // p["heads"]
    return p


def token_cost(layer, d, t):
    """Cost of one token at 1-based position t through the mixer sublayer `layer`
    (a dict like {"mixer": "she", "window": 32, "out_proj": True}): its mixer's `token_cost`."""
    if t < 1:
        raise ValueError(f"positions are 1-based, got t={t}")
    if layer["mixer"] not in MIXERS:
        raise ValueError(f"unknown mixer {layer['mixer']!r}")
    return MIXERS[layer["mixer"]].token_cost(d, t, with_defaults(layer, d))


def training_totals(layer, d, l):
    """Counts over a training sequence of length l (the paper's Tables 3/4): Σ_{t=1}^{l} of the
    per-token counts, except attention's additions. Table 3 (l²d + 4ld² − 4ld − ln) counts the
    (t − 1) softmax-denominator additions in every head, Table 5 once per token; we follow
    Table 3 there, adding the (n − 1)(t − 1) that Table 5 leaves out. No critical path."""
    total = Cost()
    for t in range(1, l + 1):
        total = total + token_cost(layer, d, t)
    if layer["mixer"] == "attention":
        n = with_defaults(layer, d)["heads"]
        total.add += (n - 1) * l * (l - 1) // 2
    return total


def param_count(layer, d, l):
    """Trainable parameters of the mixer sublayer, biases not counted (Tables 3/4)."""
    return MIXERS[layer["mixer"]].param_count(d, l, with_defaults(layer, d))


def model_token_cost(cfg, t):
    """(mixers, ffns): one token at position t summed over the layers of a ModelConfig. Each
    path is that sublayer kind's chain through the layers in order (the model's full chain
    interleaves them)."""
    mixers = [token_cost(layer, cfg.d_model, t) for layer in cfg.layers]
    ffn = ffn_token_cost(cfg.ffn, cfg.d_model, cfg.ffn_dim, cfg.activation)
    return _in_sequence(mixers), _in_sequence([ffn] * cfg.n_layers)


def _in_sequence(costs):
    total = Cost()
    for c in costs:
        total = total + c
    return total.with_path("-".join(c.critical_path for c in costs if c.critical_path))


# ---------------------------------------------------------------- CLI

def paper_rows(l):
    """Table 7's columns."""
    return [("1-head attention", {"mixer": "attention", "heads": 1}),
            ("32-head attention", {"mixer": "attention", "heads": 32}),
            ("SHE", {"mixer": "she", "window": l}), ("HE", {"mixer": "he", "window": l}),
            ("WE", {"mixer": "we", "window": l}), ("ME", {"mixer": "me", "window": l})]


def all_mixer_rows(l, heads=4, aft_window=32):
    """Every mixer at one configuration: the paper's, plus the others, each at its benchmark layer
    (`paper_layer`) with `heads` heads and an aft_local-style window of `aft_window`."""
    rows = paper_rows(l)
    in_paper = {layer["mixer"] for _, layer in rows}
    for name, cls in MIXERS.items():
        if name in in_paper:
            continue
        layer = {"mixer": name, **cls.paper_layer}
        if "heads" in layer:
            layer["heads"] = heads
        if "window" in layer:
            layer["window"] = aft_window
        layer.pop("features", None)  # m = d / heads, the default
        rows.append((name, layer))
    return rows


def main():
    ap = argparse.ArgumentParser(description="The paper's Table 7 and per-token costs of every mixer")
    ap.add_argument("--d", type=int, default=128, help="d_model")
    ap.add_argument("--l", type=int, default=128, help="sequence length; also the FIR window W")
    ap.add_argument("--c", type=int, default=512, help="FFN hidden width")
    ap.add_argument("--heads", type=int, default=4, help="heads of retnet, linear, performer")
    ap.add_argument("--s", type=int, default=32, help="aft_local window")
    args = ap.parse_args()
    d, l = args.d, args.l

    print(f"training totals at d = {d}, l = {l} (the paper's Table 7):")
    print(f"{'':18s} {'mul':>13s} {'add':>13s} {'div':>9s} {'exp':>9s} {'params':>11s} {'total ops':>13s}")
    for name, layer in paper_rows(l):
        c = training_totals(layer, d, l)
        print(f"{name:18s} {c.mul:13,d} {c.add:13,d} {c.div:9,d} {c.exp:9,d} "
              f"{param_count(layer, d, l):11,d} {c.total:13,d}")

    positions = sorted({1, max(1, l // 2), l})
    print(f"\nper-token costs at d = {d} (W = {l}; retnet/linear/performer {args.heads} heads, "
          f"performer m = d/heads, aft_local s = {args.s}):")
    print(f"{'':18s} {'t':>4s} {'mul':>11s} {'add':>11s} {'div':>7s} {'exp':>7s} {'depth':>5s}  critical path")
    for name, layer in all_mixer_rows(l, args.heads, args.s):
        for t in positions:
            c = token_cost(layer, d, t)
            print(f"{name:18s} {t:4d} {c.mul:11,d} {c.add:11,d} {c.div:7,d} {c.exp:7,d} {c.depth:5d}  "
                  f"{c.critical_path if t == positions[0] else ''}")
    for name, ffn, act in (("mlp (relu)", "mlp", "relu"), ("mlp (gelu_tanh)", "mlp", "gelu_tanh"),
                           ("mlp (gelu)", "mlp", "gelu"), ("glu (silu)", "glu", "silu"),
                           ("rwkv_channel_mix", "rwkv_channel_mix", "relu")):
        c = ffn_token_cost(ffn, d, args.c, act)
        print(f"{name:18s} {'any':>4s} {c.mul:11,d} {c.add:11,d} {c.div:7,d} {c.exp:7,d} {c.depth:5d}  "
              f"{c.critical_path}   (c = {args.c})")


if __name__ == "__main__":
    main()
