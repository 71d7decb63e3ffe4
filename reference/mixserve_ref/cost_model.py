"""The counting primitives of the cost model (docs/cost-model.md): what one operation costs in the
Extractor paper's convention. Each mixer's own cost function (its `token_cost`, in
mixers/<family>.py) is built from these; cost.py sums them over a model."""
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


def group_norm(m, kind):
    """One head's group norm over its m values (part of the mixer, so counted, unlike the block's
    norms), with its path. layernorm: mean (m − 1 add, 1 div), centre (m add), variance (m mul,
    m − 1 add, 1 div), + ε (1 add), (var + ε)^{−1/2} (1 exp), normalise (m mul); rmsnorm: square
    (m mul), Σ (m − 1 add), ÷m (1 div), + ε (1 add), rsqrt (1 exp), normalise (m mul); none: nothing."""
    if kind == "rmsnorm":
        return (Cost(mul=m, add=m - 1, div=1) + Cost(add=1) + Cost(exp=1) + Cost(mul=m)).with_path(
            "mul-cum-div-cum-exp-mul")
    if kind == "layernorm":
        return (Cost(add=m - 1, div=1) + Cost(add=m) + Cost(mul=m, add=m - 1, div=1) + Cost(add=1) + Cost(exp=1)
                + Cost(mul=m)).with_path("cum-div-cum-mul-cum-div-cum-exp-mul")
    if kind == "none":
        return Cost()
    raise ValueError(f"unknown group norm {kind!r}")
