"""The analytic cost model of DESIGN §5 (derivations: docs/cost-model.md).

For ONE new token at 1-based position t, each mixer sublayer (and each FFN) reports its
multiplications, additions, divisions and exponentiations and its critical path: the ordered
chain of dependent stages ("mul", "cum", "div", "exp"), whose length is the depth.
Attention, SHE, HE, WE and ME equal the Extractor paper's Table 5/6 closed forms exactly; the
other mixers are derived in the same convention. The C++ engine mirrors this module
(engine/mixers/*/*.cc, `*_cost`) and every golden fixture carries its numbers.

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
from dataclasses import dataclass

from .config import MIXER_PARAMS


@dataclass
class Cost:
    mul: int = 0
    add: int = 0
    div: int = 0
    exp: int = 0
    critical_path: str = ""

    @property
    def depth(self):
        return len(self.critical_path.split("-")) if self.critical_path else 0

    @property
    def total(self):
        """All arithmetic operations (the last row of the paper's Table 7)."""
        return self.mul + self.add + self.div + self.exp

    def __add__(self, other):
        # Counts only: how paths combine (in sequence, in parallel) is the caller's business.
        return Cost(self.mul + other.mul, self.add + other.add, self.div + other.div, self.exp + other.exp)

    def __rmul__(self, times):
        return Cost(times * self.mul, times * self.add, times * self.div, times * self.exp)

    def with_path(self, path):
        return Cost(self.mul, self.add, self.div, self.exp, path)


def vec_mat(rows, cols):
    """x·W with x ∈ R^rows, W ∈ R^{rows×cols}: every output is a dot product of length rows."""
    return Cost(mul=rows * cols, add=(rows - 1) * cols)


def sigmoid(size):
    """σ(x) = 1/(1 + e^{−x}) element-wise."""
    return Cost(add=size, div=size, exp=size)


def rope(size):
    """x·cos + rotate_half(x)·sin (the angles are constants of the position)."""
    return Cost(mul=2 * size, add=size)


# ---------------------------------------------------------------- the paper's mixers (Tables 5, 6)

def attention_cost(d, t, heads=1, rope_qk=False):
    n, h = heads, d // heads
    per_head = (3 * vec_mat(d, h)        # q, k, v of this head
                + t * vec_mat(h, 1)      # q·k_j for the t keys
                + Cost(div=t)            # scores / √h
                + Cost(exp=t)            # e^{score}
                + Cost(div=t)            # e^{score} / Σ e^{score}
                + vec_mat(t, h))         # Σ_j weight_j v_j
    softmax_denominator = Cost(add=t - 1)  # Table 5 counts it once, not per head (see training_totals)
    c = n * per_head + softmax_denominator + vec_mat(d, d)  # + output projection
    path = "mul-cum-mul-cum-div-exp-cum-div-mul-cum-mul-cum"
    if rope_qk:  # not in the paper: rotating q and k adds one mul-cum after the projections
        c = c + rope(d) + rope(d)
        path = "mul-cum-" + path
    return c.with_path(path)


def _adjust_and_output(d, out_proj):
    """adj = (x A) ⊙ ext, then y = adj W_o if out_proj; the path stages after ext's mul-cum."""
    c = vec_mat(d, d) + Cost(mul=d)
    if out_proj:
        return c + vec_mat(d, d), "-mul-mul-cum"
    return c, "-mul"


def she_cost(d, lags, out_proj=True):
    ext = lags * vec_mat(d, d) + Cost(add=(lags - 1) * d)  # Σ_λ x_{t−λ} E_λ
    rest, tail = _adjust_and_output(d, out_proj)
    return (ext + rest).with_path("mul-cum" + tail)


def he_cost(d, lags, out_proj=True):
    u = vec_mat(d, d)  # u_t = x_t W_in (older u come from the ring)
    ext = Cost(mul=lags * d, add=(lags - 1) * d)  # Σ_λ u_{t−λ} ⊙ e_λ
    rest, tail = _adjust_and_output(d, out_proj)
    return (u + ext + rest).with_path("mul-cum-mul-cum" + tail)


def we_cost(d, lags, out_proj=True):
    ext = Cost(mul=lags * d, add=(lags - 1) * d)  # Σ_λ x_{t−λ} ⊙ e_λ
    rest, tail = _adjust_and_output(d, out_proj)
    return (ext + rest).with_path("mul-cum" + tail)


def me_cost(d, lags):
    return Cost(mul=lags * d, add=(lags - 1) * d).with_path("mul-cum")  # Σ_λ e_λ x_{t−λ}


# ---------------------------------------------------------------- the other mixers (derived)

def _aft_output(d):
    """σ(q), num/den, σ(q) ⊙ (num/den): common to every AFT variant."""
    return sigmoid(d) + Cost(div=d) + Cost(mul=d)


def aft_simple_cost(d):
    # Unstabilised recurrence num += e^{k}⊙v, den += e^{k}: no rescaling of the sums is needed
    # (the running max and its rescale are the stable form's max-subtraction, not counted).
    c = (4 * vec_mat(d, d)          # q, k, v, o
         + Cost(exp=d)              # e^{k}
         + Cost(mul=d)              # e^{k} ⊙ v
         + Cost(add=2 * d)          # num += , den +=
         + _aft_output(d))
    return c.with_path("mul-cum-exp-mul-cum-div-mul-mul-cum")


AFT_PAIR_PATH = "mul-cum-cum-exp-mul-cum-div-mul-mul-cum"  # k, +w, e^, ⊙v, Σ, ÷, gate, W_o


def _aft_pair_terms(d, terms):
    """terms tokens with a pair bias: k_j + w_{t,j}, e^{·}, ⊙ v_j; then Σ over them in num, den."""
    return terms * Cost(add=d, exp=d, mul=d) + Cost(add=2 * (terms - 1) * d)


def aft_full_cost(d, t):
    # w_{t,j} depends on t, so all t terms are recomputed for every new token
    return (4 * vec_mat(d, d) + _aft_pair_terms(d, t) + _aft_output(d)).with_path(AFT_PAIR_PATH)


def aft_local_cost(d, t, window):
    in_window = min(t, window)
    c = 4 * vec_mat(d, d) + _aft_pair_terms(d, in_window) + _aft_output(d)
    if t > window:
        # the token leaving the window joins the running sums (w = 0 there): e^{k}, ⊙v,
        # num_out += , den_out += ; then num, den add the running sums to the in-window terms
        c = c + Cost(exp=d, mul=d, add=2 * d) + Cost(add=2 * d)
    return c.with_path(AFT_PAIR_PATH)


def retnet_cost(d, heads):
    n, h = heads, d // heads
    group_norm_per_head = (Cost(add=h - 1, div=1)              # mean
                           + Cost(add=h)                       # centre
                           + Cost(mul=h, add=h - 1, div=1)     # variance
                           + Cost(add=1)                       # + ε
                           + Cost(exp=1)                       # (var + ε)^{−1/2}
                           + Cost(mul=h))                      # normalise
    c = (5 * vec_mat(d, d)                    # q, k, v, g, o
         + rope(d) + rope(d)                  # RoPE on q and k
         + Cost(div=d)                        # k / √h (the paper counts attention's 1/√h as div)
         + n * (Cost(mul=h * h)               # γ S
                + Cost(mul=h * h, add=h * h)  # + kᵀ v
                + vec_mat(h, h))              # o = q S
         + n * group_norm_per_head
         + sigmoid(d) + Cost(mul=d)           # swish(g) = g σ(g)
         + Cost(mul=d))                       # swish(g) ⊙ GroupNorm(o)
    # k: proj, RoPE, ÷√h, kᵀv, +γS, qS, mean, centre, square, Σ, ÷h, +ε, rsqrt, normalise, gate, W_o
    return c.with_path("mul-cum-mul-cum-div-mul-cum-mul-cum-cum-div-cum-mul-cum-div-cum-exp-mul-mul-mul-cum")


def rwkv_cost(d):
    # e^{w} with w = −exp(time_decay) and 1 − μ are per-channel constants, precomputed.
    c = (3 * Cost(mul=2 * d, add=d)           # token shift x μ + x_prev (1 − μ) for r, k, v
         + 4 * vec_mat(d, d)                  # r, k, v, o
         + sigmoid(d)                         # σ(r)
         + Cost(add=d, exp=d)                 # e^{u + k}
         + Cost(mul=d)                        # e^{u + k} ⊙ v
         + Cost(add=2 * d, div=d)             # (a + ·) / (b + ·)
         + Cost(exp=d)                        # e^{k}
         + Cost(mul=3 * d, add=2 * d)         # a' = e^{w} a + e^{k} v,  b' = e^{w} b + e^{k}
         + Cost(mul=d))                       # r ⊙ wkv
    # lerp, k, u+k, exp, ⊙v, a+, ÷, r⊙, W_o (the a', b' update is for the next token)
    return c.with_path("mul-cum-mul-cum-cum-exp-mul-cum-div-mul-mul-cum")


def _linear_recurrence(d, heads, features):
    """Per head with m = features: S += φ(k)ᵀ v, z += φ(k), φ(q) S, φ(q)·z + ε, and the division."""
    n, h, m = heads, d // heads, features
    per_head = (Cost(mul=m * h, add=m * h)    # S += φ(k)ᵀ v
                + Cost(add=m)                 # z += φ(k)
                + vec_mat(m, h)               # φ(q) S
                + vec_mat(m, 1)               # φ(q)·z
                + Cost(add=1)                 # + ε (counted like σ's 1 + and group norm's + ε)
                + Cost(div=h))                # numerator / denominator
    return n * per_head


def linear_cost(d, heads):
    # φ(x) = elu(x) + 1 = x + 1 (x > 0) or e^{x}: counted as 1 exp + 1 add per element,
    # whichever branch is taken (the comparison is not counted)
    phi = Cost(exp=d, add=d)
    c = 4 * vec_mat(d, d) + 2 * phi + _linear_recurrence(d, heads, d // heads)
    # k: proj, e^, +1, φ(k)ᵀv, S+, φ(q)S (mul-cum), ÷, W_o
    return c.with_path("mul-cum-exp-cum-mul-cum-mul-cum-div-mul-cum")


def performer_cost(d, heads, features):
    n, h, m = heads, d // heads, features
    # FAVOR+ φ(x) = exp(ω x' − ‖x'‖²/2) / √m, x' = x h^{−1/4}, ω ∈ R^{m×h}, per head
    phi_per_head = (Cost(mul=h)               # x' = x h^{−1/4}
                    + vec_mat(h, m)           # ω x'
                    + vec_mat(h, 1)           # ‖x'‖²
                    + Cost(mul=1)             # · ½
                    + Cost(add=m)             # ω x' − ‖x'‖²/2
                    + Cost(exp=m)
                    + Cost(mul=m))            # · 1/√m
    c = 4 * vec_mat(d, d) + 2 * n * phi_per_head + _linear_recurrence(d, heads, features)
    # k: proj, ·h^{−1/4}, x'², Σ, ·½, −, exp, ·1/√m, φ(k)ᵀv, S+, φ(q)S (mul-cum), ÷, W_o
    # (the ‖x'‖²/2 branch is one stage longer than the ω x' branch)
    return c.with_path("mul-cum-mul-mul-cum-mul-cum-exp-mul-mul-cum-mul-cum-div-mul-cum")


# ---------------------------------------------------------------- FFNs

def gelu_tanh(size):
    """0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))) as written, tanh(z) = (e^{2z} − 1)/(e^{2z} + 1):
    x³ 2 mul, ·0.044715 1, x + 1 add, ·√(2/π) 1 mul, 2z 1 mul, e^{2z} 1 exp, −1 and +1 2 add,
    the division 1 div, 1 + tanh 1 add, 0.5 x 1 mul, the product 1 mul."""
    return Cost(mul=7 * size, add=4 * size, div=size, exp=size)


GELU_PATH = "mul-mul-mul-cum-mul-mul-exp-cum-div-cum-mul"


def mlp_cost(d, hidden, activation="relu"):
    c = vec_mat(d, hidden) + vec_mat(hidden, d)  # relu is a comparison: not counted
    if activation == "gelu_tanh":
        return (c + gelu_tanh(hidden)).with_path("mul-cum-" + GELU_PATH + "-mul-cum")
    return c.with_path("mul-cum-mul-cum")


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
    (a dict like {"mixer": "she", "window": 32, "out_proj": True})."""
    if t < 1:
        raise ValueError(f"positions are 1-based, got t={t}")
    kind = layer["mixer"]
    if kind not in MIXER_PARAMS:
        raise ValueError(f"unknown mixer {kind!r}")
    p = with_defaults(layer, d)
    lags = min(t, p["window"]) if p.get("window") else t  # FIR mixers: the lags in use
    if kind == "attention":
        return attention_cost(d, t, p["heads"], p["rope"])
    if kind == "she":
        return she_cost(d, lags, p["out_proj"])
    if kind == "he":
        return he_cost(d, lags, p["out_proj"])
    if kind == "we":
        return we_cost(d, lags, p["out_proj"])
    if kind == "me":
        return me_cost(d, lags)
    if kind == "aft_simple":
        return aft_simple_cost(d)
    if kind == "aft_full":
        return aft_full_cost(d, t)
    if kind == "aft_local":
        return aft_local_cost(d, t, p["window"])
    if kind == "retnet":
        return retnet_cost(d, p["heads"])
    if kind == "rwkv":
        return rwkv_cost(d)
    if kind == "linear":
        return linear_cost(d, p["heads"])
    return performer_cost(d, p["heads"], p["features"])


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
    p = with_defaults(layer, d)
    kind, window = p["mixer"], p.get("window") or l
    out = d * d if p.get("out_proj", True) else 0
    return {"attention": 4 * d * d, "aft_simple": 4 * d * d, "aft_full": 4 * d * d + l * l,
            "aft_local": 4 * d * d + l * window,  # pos_bias [l, s]
            "retnet": 5 * d * d, "she": window * d * d + d * d + out, "he": window * d + 2 * d * d + out,
            "we": window * d + d * d + out, "me": window, "rwkv": 4 * d * d + 5 * d,
            "linear": 4 * d * d, "performer": 4 * d * d,  # ω is stored but not trained
            }[kind]


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
    """Every mixer at one configuration: the paper's, plus the others with `heads` heads."""
    return paper_rows(l) + [
        ("aft_simple", {"mixer": "aft_simple"}), ("aft_local", {"mixer": "aft_local", "window": aft_window}),
        ("aft_full", {"mixer": "aft_full"}), ("retnet", {"mixer": "retnet", "heads": heads}),
        ("rwkv", {"mixer": "rwkv"}), ("linear", {"mixer": "linear", "heads": heads}),
        ("performer", {"mixer": "performer", "heads": heads})]


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
                           ("rwkv_channel_mix", "rwkv_channel_mix", "relu")):
        c = ffn_token_cost(ffn, d, args.c, act)
        print(f"{name:18s} {'any':>4s} {c.mul:11,d} {c.add:11,d} {c.div:7,d} {c.exp:7,d} {c.depth:5d}  "
              f"{c.critical_path}   (c = {args.c})")


if __name__ == "__main__":
    main()
