"""The analytic cost model of DESIGN §5 (docs/cost-model.md): multiplications, additions,
divisions and exponentiations of one mixer sublayer for a new token at 1-based position t, and
its critical path. Attention, SHE, HE, WE and ME follow the Extractor paper's Table 5/6 closed
forms exactly; the other mixers are derived in the same convention. The C++ engine mirrors this
module (engine/mixers/*/*.cc, *_cost) and the golden fixtures carry its numbers.

Convention (the paper's): x·W with W ∈ R^{d×d} costs d² mul and (d−1)·d add; an element-wise
product d mul; biases, layer norms outside the mixer, the max-subtraction of numerically stable
forms and comparisons are not counted; σ(x) = 1/(1+e^{−x}) is 1 exp + 1 add + 1 div; a square
root counts as one exp (x^{1/2}).

  /usr/bin/python3 -m mixserve_ref.cost --d 128 --l 128     (from reference/)
"""
import argparse
from dataclasses import dataclass


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

    def __add__(self, o):
        return Cost(self.mul + o.mul, self.add + o.add, self.div + o.div, self.exp + o.exp, self.critical_path)


def _extractor(kind, d, t, layer):
    L = min(t, layer.get("window") or t)
    out = layer.get("out_proj", True) and kind != "me"
    tail = "-mul-mul-cum" if out else "-mul"
    if kind == "she":
        c = Cost(L * d * d + d * d + d, L * (d - 1) * d + (L - 1) * d + (d - 1) * d, 0, 0, "mul-cum" + tail)
    elif kind == "he":
        c = Cost(L * d + 2 * d * d + d, (L - 1) * d + 2 * (d - 1) * d, 0, 0, "mul-cum-mul-cum" + tail)
    elif kind == "we":
        c = Cost(L * d + d * d + d, (L - 1) * d + (d - 1) * d, 0, 0, "mul-cum" + tail)
    else:
        return Cost(L * d, (L - 1) * d, 0, 0, "mul-cum")
    if out:
        c.mul += d * d
        c.add += (d - 1) * d
    return c


def token_cost(layer, d, t):
    """Cost of one token at 1-based position t through the mixer sublayer `layer`."""
    kind = layer["mixer"]
    n = layer.get("heads", 1)
    h = d // n
    if kind == "attention":  # the paper's Table 5
        return Cost(2 * t * d + 4 * d * d, 2 * t * d - t * n + t + 4 * d * d - 5 * d - 1, 2 * t * n, t * n,
                    "mul-cum-mul-cum-div-exp-cum-div-mul-cum-mul-cum")
    if kind in ("she", "he", "we", "me"):
        return _extractor(kind, d, t, layer)
    if kind == "aft_simple":
        # q,k,v,o; e^{k}; e^{k}⊙v; num += ; den += ; σ(q); num/den; σ(q)⊙
        return Cost(4 * d * d + 2 * d, 4 * d * d - d, 2 * d, 2 * d, "mul-cum-exp-mul-cum-div-mul-mul-cum")
    if kind in ("aft_full", "aft_local"):
        # L kept terms: k+w (add), e^{·}, ⊙v, accumulations; AFT-local also folds the token that
        # leaves the window into its running sums (A = 1 once t > s)
        L = t if kind == "aft_full" else min(t, layer["window"])
        A = 1 if kind == "aft_local" and t > layer["window"] else 0
        return Cost(4 * d * d + L * d + A * d + d, 4 * d * d - 4 * d + L * d + 2 * (L - 1 + A) * d + 2 * A * d + d,
                    2 * d, L * d + A * d + d, "mul-cum-cum-exp-mul-cum-div-mul-mul-cum")
    if kind == "retnet":
        # q,k,v,g,o; RoPE on q, k; k/√h; S ← γS + kᵀv; o = qS; group norm; swish gate
        return Cost(5 * d * d + 3 * d * h + 8 * d, 5 * d * d + 2 * d * h - n, 2 * d + 2 * n, d + n,
                    "mul-cum-mul-cum-div-mul-cum-mul-cum-cum-div-mul-cum-div-exp-mul-mul-mul-cum")
    if kind == "rwkv":
        # 3 token-shift lerps; r,k,v,o; σ(r); WKV (unstabilised); r ⊙ wkv
        return Cost(4 * d * d + 11 * d, 4 * d * d + 5 * d, 2 * d, 3 * d, "mul-cum-mul-cum-cum-exp-mul-cum-div-mul-mul-cum")
    if kind == "linear":
        return Cost(4 * d * d + 2 * d * h + d, 4 * d * d + 2 * d * h - d, d, 2 * d,
                    "mul-cum-exp-cum-mul-cum-mul-cum-div-mul-cum")
    if kind == "performer":
        M = n * layer["features"]
        return Cost(4 * d * d + 4 * d + 4 * M * h + 2 * n + 3 * M, 4 * d * d - 3 * d + 4 * M * h + 2 * M - 2 * n,
                    d, 2 * M, "mul-cum-mul-mul-cum-cum-exp-mul-mul-cum-mul-cum-div-mul-cum")
    raise ValueError(f"unknown mixer {kind!r}")


def training_totals(layer, d, l):
    """Totals over a training sequence of length l: Σ_{t=1}^{l} of the per-token counts, except
    attention's additions, where the paper's Table 3 closed form l²d + 4ld² − 4ld − ln is used:
    Table 3 counts the (t−1) softmax-denominator additions per head, Table 5 once."""
    total = Cost()
    for t in range(1, l + 1):
        total = total + token_cost(layer, d, t)
    if layer["mixer"] == "attention":
        n = layer.get("heads", 1)
        total.add = l * l * d + 4 * l * d * d - 4 * l * d - l * n
    return total


def param_count(layer, d, l):
    """Trainable parameters of the mixer sublayer without biases (the paper's Tables 3/4)."""
    kind, W = layer["mixer"], layer.get("window") or l
    out = d * d if layer.get("out_proj", True) else 0
    return {"attention": 4 * d * d, "aft_simple": 4 * d * d, "aft_full": 4 * d * d + l * l,
            "aft_local": 4 * d * d + l * layer.get("window", 0), "retnet": 5 * d * d,
            "she": W * d * d + d * d + out, "he": W * d + 2 * d * d + out, "we": W * d + d * d + out, "me": W,
            "rwkv": 4 * d * d + 5 * d, "linear": 4 * d * d, "performer": 4 * d * d}[kind]


def model_token_cost(cfg, t):
    """Per-layer costs of one token at position t for a ModelConfig (mixers only)."""
    return [token_cost(layer, cfg.d_model, t) for layer in cfg.layers]


def main():
    ap = argparse.ArgumentParser(description="Table 7 and per-token costs")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--l", type=int, default=128)
    args = ap.parse_args()
    d, l = args.d, args.l
    rows = [("1-head attention", {"mixer": "attention", "heads": 1}), ("32-head attention", {"mixer": "attention", "heads": 32}),
            ("SHE", {"mixer": "she", "window": l}), ("HE", {"mixer": "he", "window": l}),
            ("WE", {"mixer": "we", "window": l}), ("ME", {"mixer": "me", "window": l})]
    print(f"training totals at d = {d}, l = {l} (the paper's Table 7):")
    print(f"{'':18s} {'mul':>12s} {'add':>12s} {'div':>9s} {'exp':>9s} {'params':>10s}")
    for name, layer in rows:
        c = training_totals(layer, d, l)
        print(f"{name:18s} {c.mul:12,d} {c.add:12,d} {c.div:9,d} {c.exp:9,d} {param_count(layer, d, l):10,d}")


if __name__ == "__main__":
    main()
