"""Float64 oracles written straight from the papers in ../shared/seeds/ (issue #25, item 2).

Each function takes the mixer input x [T, d] and the weights as plain arrays, named as in the
paper, and returns y [T, d] by the naive per-position sums exactly as printed: a loop over the
output position and, inside it, a loop over the past positions (or lags). No running maxima, no
ring buffers, no prefix-sum tricks, no shared code with `mixserve_ref` (this file imports numpy
only). Every weight is in the papers' row-vector convention: a row x times W ∈ R^{d_in × d_out}
(PyTorch's nn.Linear keeps [d_out, d_in], so W = weight.T).

Sources (plain text in /work/shared/seeds/):
- Extractors: Z. Chen, "Attention Is Not All You Need Anymore", arXiv:2308.07661v2, §5,
  Eqs. (23)–(29): `extractors-attention-is-not-all-you-need-anymore.txt`.
- AFT: "An Attention Free Transformer", the anonymous ICLR-2021 submission, §3.1–3.2,
  Eqs. (2)–(4), (8), Table 2, Algorithm 1: `aft-attention-free-transformer.txt`. NOTE: this draft
  is not the published version (Zhai et al., arXiv:2105.14103), which the reference and
  DESIGN §5 follow; see `aft_full` and `aft_local` for what differs.

Indexing: the papers count positions from 1 (i, j, t, t' = 1 … T). The loops below keep the
1-based names and index the 0-based arrays with [i - 1]; the lag weight W_k (k = i − j + 1,
k = 1 is the current token) is W[k - 1], i.e. the reference's lag λ = k − 1.

`pair_bias_softmax` at the end is NOT from the seeds: it is DESIGN §5's AFT formula (the
published AFT's Eq. 2), written the same naive way, so the tests can tell a disagreement with the
seed paper apart from a bug in the reference.
"""
import numpy as np


def _f64(a):
    return None if a is None else np.asarray(a, dtype=np.float64)


def _affine(X, W, b):
    """X W (+ b): a linear map in the papers' row convention; b is our reading of where biases go."""
    Y = X @ _f64(W)
    return Y if b is None else Y + _f64(b)


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


# --------------------------------------------------------------------------------------------
# The Extractors (arXiv:2308.07661v2, §5)
#
# Readings shared by the four (the paper leaves them open):
# - Lags before position 1: the printed sums start at j = 1, so nothing precedes the sequence
#   (the same as zero-padding the past). The paper assumes t ≤ l (§3, §5.1: "only t linear
#   transformation blocks are in use at a certain time").
# - Window: the paper has exactly l lag weights W_1 … W_l and t ≤ l, so every lag is in use.
#   The project's `window` W < l is read as W_k = 0 for k > W: the sum drops the terms with
#   i − j + 1 > W. The weights passed in are W_1 … W_W; with W ≥ T this is the printed sum.
# - Biases: Eqs. (23)–(29) print none; §6 says "the biases of the models are initialized with
#   zeros", so the trained models had some. We read them as affine maps X W + b on W[adj],
#   W[out] and HE's W[in_ext], never on the lag weights. Left as None, the functions are exactly
#   the printed equations.
# --------------------------------------------------------------------------------------------

def _adjust_and_output(X, X_out_ext, W_adj, W_out, b_adj, b_out):
    """Eq. (24): X[out_adj] = (X[in_sub1] W[adj]) ∘ X[out_ext];
    Eq. (25): X[out_sub1] = X[out_adj] W[out] ("optional, as it is not a critical component")."""
    X_out_adj = _affine(X, W_adj, b_adj) * X_out_ext
    return X_out_adj if W_out is None else _affine(X_out_adj, W_out, b_out)


def she(x, W_ext, W_adj, W_out=None, b_adj=None, b_out=None):
    """Super high-performance Extractor, §5.1, Eqs. (23)–(25).

        (23)  x[out_ext]_i = Σ_{j=1}^{i} x[in_sub1]_j W[ext]_{i−j+1},   i = 1, …, t
        (24)  X[out_adj]   = (X[in_sub1] W[adj]) ∘ X[out_ext]
        (25)  X[out_sub1]  = X[out_adj] W[out]                           (optional)

    x: [T, d]; W_ext: [W, d, d], W_ext[k-1] = W[ext]_k ∈ R^{d×d} (x_j W_k, rows in, columns out);
    W_adj, W_out: [d, d] or W_out None (Eq. 25 left out); b_adj, b_out: our bias reading.
    """
    X, W_ext = _f64(x), _f64(W_ext)
    X_out_ext = _lag_sum(X, W_ext, np.matmul)
    return _adjust_and_output(X, X_out_ext, W_adj, W_out, b_adj, b_out)


def _lag_sum(X, w_ext, product=np.multiply):
    """x[out]_i = Σ_{j=1}^{i} product(x_j, w_{i−j+1}) for i = 1 … T, as Eqs. (23), (26), (28) and
    (29) print it: x_j W_k with W_k ∈ R^{d×d} (SHE, product = np.matmul), or x_j ∘ w_k with w_k a
    vector of R^{1×d} (WE, HE) or a scalar (ME); w_k = 0 for k beyond the W lags given.
    X: [T, d]; w_ext: [W, d, d], [W, d] or [W], w_ext[k-1] = w_k."""
    T, d = X.shape
    n_lags = w_ext.shape[0]
    out = np.zeros((T, d))
    for i in range(1, T + 1):
        acc = np.zeros(d)
        for j in range(1, i + 1):
            k = i - j + 1
            if k <= n_lags:
                acc += product(X[j - 1], w_ext[k - 1])
        out[i - 1] = acc
    return out


def we(x, w_ext, W_adj, W_out=None, b_adj=None, b_out=None):
    """Worthwhile Extractor, §5.2: Eq. (23) "reduced to" Eq. (26), then Eqs. (24)–(25).

        (26)  x[out_ext]_i = Σ_{j=1}^{i} x[in_sub1]_j ∘ w[ext]_{i−j+1},  w[ext]_k ∈ R^{1×d}

    The adjustment and output parts stay those of the SHE (Fig. 4; Table 4 counts
    d·l + d·d + d·d parameters: the lag vectors, W[adj] and W[out]).
    x: [T, d]; w_ext: [W, d], w_ext[k-1] = w[ext]_k.
    """
    X, w_ext = _f64(x), _f64(w_ext)
    X_out_ext = _lag_sum(X, w_ext)
    return _adjust_and_output(X, X_out_ext, W_adj, W_out, b_adj, b_out)


def he(x, W_in_ext, w_ext, W_adj, W_out=None, b_in_ext=None, b_adj=None, b_out=None):
    """Higher-performance Extractor, §5.3: Eq. (26) "replaced by" Eqs. (27) and (28), then (24)–(25).

        (27)  X[ext]       = X[in_sub1] W[in_ext]
        (28)  x[out_ext]_i = Σ_{j=1}^{i} x[ext]_j ∘ w[ext]_{i−j+1}

    The adjustment (24) still multiplies X[in_sub1] W[adj], not X[ext] (Fig. 5). Table 4:
    d·l + 3·d·d parameters (lag vectors, W[in_ext], W[adj], W[out]).
    x: [T, d]; W_in_ext: [d, d]; w_ext: [W, d].
    """
    X, w_ext = _f64(x), _f64(w_ext)
    X_ext = _affine(X, W_in_ext, b_in_ext)
    X_out_ext = _lag_sum(X_ext, w_ext)
    return _adjust_and_output(X, X_out_ext, W_adj, W_out, b_adj, b_out)


def me(x, w_ext):
    """Minimalist Extractor, §5.4, Eq. (29): "the ME only contains the extraction part".

        (29)  x[out_sub1]_i = Σ_{j=1}^{i} x[in_sub1]_j w[ext]_{i−j+1},  w[ext]_k ∈ R

    No adjustment, no output projection, no bias. x: [T, d]; w_ext: [W] scalars.
    """
    X, w_ext = _f64(x), _f64(w_ext)
    return _lag_sum(X, w_ext)


# --------------------------------------------------------------------------------------------
# AFT (the anonymous ICLR-2021 submission in the seeds)
#
# Readings shared by the three:
# - Self-attention use: Q = K = V = x, then Q' = Q W^Q, K' = K W^K, V' = V W^V (§3.1).
# - σ_q = sigmoid, σ_k = softmax along the context: "unless otherwise mentioned, we use the
#   sigmoid + softmax setting for σ_q and σ_k by default" (§3.1). (Algorithm 1 uses relu(Q').)
# - Output projection: Eqs. (2)–(8) end at the σ_q product and print no W^O. We read the usual
#   output projection of an attention replacement (DESIGN §5's W_o) as an optional
#   Y W^O (+ b^O); W_O None is the printed equation.
# - Biases on W^Q, W^K, W^V, W^O: none printed; optional, as for the Extractors.
# - Exponentials are taken as printed, exp(K'), with no max subtraction (float64; the tests keep
#   |K'| small).
# --------------------------------------------------------------------------------------------

def _qkv(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
    X = _f64(x)
    return X, _affine(X, W_Q, b_Q), _affine(X, W_K, b_K), _affine(X, W_V, b_V)


def _output(Y, W_O, b_O):
    return Y if W_O is None else _affine(Y, W_O, b_O)


def aft_simple(x, W_Q, W_K, W_V, W_O=None, b_Q=None, b_K=None, b_V=None, b_O=None):
    """Causal AFT with σ_k = softmax (the published paper's "AFT-simple"), §3.1, Eq. (4):

        Y_t = σ_q(Q'_t) ⊙ ( g_t(t) ⊙ V'_t + Σ_{t'=1}^{t−1} g_t(t') ⊙ V'_{t'} ),
        g_t(t') = exp(K'_{t'}) / Σ_{t'=1}^{t} exp(K'_{t'})          (element-wise, per channel)

    The seed never uses the name "AFT-simple"; this is its default AFT-sigmoid-softmax.
    x: [T, d]; W_Q, W_K, W_V, W_O: [d, d] (W_O None: no output projection).
    """
    X, Q, K, V = _qkv(x, W_Q, W_K, W_V, b_Q, b_K, b_V)
    T, d = X.shape
    Y = np.zeros((T, d))
    for t in range(1, T + 1):
        Z = np.zeros(d)
        for tp in range(1, t + 1):
            Z += np.exp(K[tp - 1])

        def g(tp):
            return np.exp(K[tp - 1]) / Z

        acc = g(t) * V[t - 1]
        for tp in range(1, t):
            acc += g(tp) * V[tp - 1]
        Y[t - 1] = _sigmoid(Q[t - 1]) * acc
    return _output(Y, W_O, b_O)


def aft_full(x, W_Q, W_K, W_V, W_O=None, b_Q=None, b_K=None, b_V=None, b_O=None):
    """The seed's "AFT-full": causal AFT over the full context, §3.1, Eq. (3) with σ_k = softmax:

        Y_t = σ_q(Q'_t) ⊙ Σ_{t'=1}^{t} ( σ_k(K'_{≤t}) ⊙ V'_{≤t} )_{t'},
        σ_k(K'_{≤t})_{t'} = exp(K'_{t'}) / Σ_{t''=1}^{t} exp(K'_{t''})   (softmax along the context)

    In the seed, "AFT-full" (Table 2) is AFT-sigmoid-softmax with full contexts (§5.2: "all of
    which use full contexts"; 20M parameters, the same as AFT-local2d-hard, which has no learned
    biases). The seed has NO learned pair-wise position biases w ∈ R^{T×T}: those, and the name
    AFT-full for them, come from the published version (arXiv:2105.14103, Eq. 2), which the
    reference's `aft_full` implements (see `pair_bias_softmax`). This function therefore takes no
    position biases. It is the same function as `aft_simple`, written from Eq. (3) instead of (4).
    """
    X, Q, K, V = _qkv(x, W_Q, W_K, W_V, b_Q, b_K, b_V)
    T, d = X.shape
    Y = np.zeros((T, d))
    for t in range(1, T + 1):
        denom = np.zeros(d)
        for tpp in range(1, t + 1):
            denom += np.exp(K[tpp - 1])
        acc = np.zeros(d)
        for tp in range(1, t + 1):
            sigma_k = np.exp(K[tp - 1]) / denom
            acc += sigma_k * V[tp - 1]
        Y[t - 1] = _sigmoid(Q[t - 1]) * acc
    return _output(Y, W_O, b_O)


def aft_local(x, W_Q, W_K, W_V, u, v, s, W_O=None, b_Q=None, b_K=None, b_V=None, b_O=None):
    """Local causal AFT, AFT-local-learned, §3.2, Eq. (8) with the learned w, as printed:

        (8)  Y_t = σ_q(Q'_t) Σ_{t'=1}^{t} w_{t,t'} ( σ_k(K'_{≤t}) ⊙ V'_{≤t} )_{t'},  t = 1, …, T
             w_{t,t'} = exp( I(t − t' ≤ s) u_tᵀ v_{t'} ) / Σ_{t'=1}^{t} exp( I(t − t' ≤ s) u_tᵀ v_{t'} )

    u, v ∈ R^{T×d_u}: "two sets of low dimensional learnable position embeddings" (u[t-1] = u_t).
    Outside the window the exponent is 0 (w's numerator 1): "we maintain dense connection between
    every t, t' pair, but rather introduce learnable biases for more recent contexts".

    Ambiguities and the readings taken:
    - The denominator of w reuses t' as its own summation index; read as Σ_{t''=1}^{t}.
    - Two normalisations multiply, as printed: w_{t,·} sums to 1 over t' ≤ t, and so does
      σ_k(K'_{≤t}) (softmax along the context). The published AFT (and the reference) instead
      normalise once, jointly: exp(K'_{t'} + w_{t,t'}) / Σ exp(K'_{t''} + w_{t,t''}). The two differ.
    - Window: §3.2 prints t − t' ≤ s (s + 1 positions, lags 0 … s); Algorithm 1's comments
      (KV[i] = Σ_{k=max(0, i−2^j+1)}^{i} after log2(s) doublings) cover s positions, lags 0 … s−1,
      as the published AFT's |t − t'| < s and the reference's `window` do. This function takes
      Eq. (8) as printed (≤ s); a reference window s_ref corresponds to s = s_ref − 1 here.
    - Any band of per-(t, t') biases is a u_tᵀ v_{t'} with d_u = T (u = identity, v_{t'} = a
      column of the band), so the low-rank form loses nothing in the tests.
    """
    X, Q, K, V = _qkv(x, W_Q, W_K, W_V, b_Q, b_K, b_V)
    u, v = _f64(u), _f64(v)
    T, d = X.shape
    Y = np.zeros((T, d))
    for t in range(1, T + 1):
        def exponent(tp):
            return (1.0 if t - tp <= s else 0.0) * (u[t - 1] @ v[tp - 1])

        w_den = 0.0
        for tpp in range(1, t + 1):
            w_den += np.exp(exponent(tpp))
        k_den = np.zeros(d)
        for tpp in range(1, t + 1):
            k_den += np.exp(K[tpp - 1])
        acc = np.zeros(d)
        for tp in range(1, t + 1):
            w = np.exp(exponent(tp)) / w_den
            sigma_k = np.exp(K[tp - 1]) / k_den
            acc += w * (sigma_k * V[tp - 1])
        Y[t - 1] = _sigmoid(Q[t - 1]) * acc
    return _output(Y, W_O, b_O)


# --------------------------------------------------------------------------------------------
# Not from the seeds: DESIGN §5's AFT (the published AFT, arXiv:2105.14103, Eq. 2)
# --------------------------------------------------------------------------------------------

def pair_bias_softmax(x, W_Q, W_K, W_V, w, W_O=None, b_Q=None, b_K=None, b_V=None, b_O=None):
    """DESIGN §5's `aft_full` / `aft_local` math, naive, one joint normalisation:

        y_t = ( σ(q_t) ⊙ Σ_{j≤t} e^{k_j + w_{t,j}} ⊙ v_j / Σ_{j≤t} e^{k_j + w_{t,j}} ) W_o

    w: [T, T] pair biases, only j ≤ t read (0-based here, as DESIGN writes it). aft_simple is
    w = 0; aft_local is w_{t,j} = the learned bias for t − j < s and 0 beyond.
    Not in the seeds: used to locate a seed-paper disagreement, not to justify the reference.
    """
    X, Q, K, V = _qkv(x, W_Q, W_K, W_V, b_Q, b_K, b_V)
    w = _f64(w)
    T, d = X.shape
    Y = np.zeros((T, d))
    for t in range(T):
        num, den = np.zeros(d), np.zeros(d)
        for j in range(t + 1):
            e = np.exp(K[j] + w[t, j])
            num += e * V[j]
            den += e
        Y[t] = _sigmoid(Q[t]) * num / den
    return _output(Y, W_O, b_O)
