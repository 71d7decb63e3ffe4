"""Run flash-linear-attention's (fla) own RetNet and linear-attention MODEL code on a CPU with
Debian's torch 1.13, without transformers, triton or einops: for reference/public_fixtures.py
--fla-models. fla itself is read from the path given there, never copied into the project.

    with fla_standins.loaded(root) as fla:   # root: a checkout or snapshot of fla
        model = fla["modeling_retnet"].RetNetForCausalLM(fla["configuration_retnet"].RetNetConfig(...))

Every stand-in exists only inside the `with`: sys.modules and the few torch attributes patched are
restored on exit. `USED` lists the stand-ins that actually ran (public_fixtures.py writes it into
provenance.json). What is stood in, and why; everything not listed is fla's own file, loaded from
its path under its own module name:

(a) Modules Debian lacks.
- triton, triton.language: `jit`, `autotune`, `heuristics` wrap a kernel into an object that raises
  when launched (every launcher fla reaches is replaced under (d)); the rest are inert names read
  at decoration time (Config, cdiv, next_power_of_2, tl.*).
- einops: `rearrange` and `repeat` by a small implementation (mini_rearrange / mini_repeat below:
  plain axis names, numeric literals, one level of parentheses, '...' outside parentheses; anything
  else raises). fla's RetNet / linear-attention paths and its naive kernels use only such patterns.
- transformers: PretrainedConfig (keyword arguments become attributes; `to_dict` returns them with
  model_type, as `save_pretrained`'s diff dict has them: the generic output_attentions,
  output_hidden_states, use_return_dict are class attributes, not written), PreTrainedModel
  (`post_init` applies the model's own `_init_weights` to every module, then ties lm_head to the
  embedding when tie_word_embeddings, as transformers does), ModelOutput (a dict with attributes),
  logging (silent), deprecate_kwarg (identity), ACT2FN (swish/silu, relu, sigmoid, tanh, gelu as
  torch's modules). transformers.modeling_layers is left missing on purpose: the models then use
  fla's own fla/models/modeling_layers.py (their try/except ImportError).

(b) torch >= 2 names missing from torch 1.13: nn.RMSNorm (torch 2.4's formula, only reached with
fuse_norm false), torch.compiler.disable and torch.compile (identity decorators: eager semantics),
torch.distributed.DeviceMesh, torch.distributed.tensor(.parallel) (names imported by
fla/modules/layernorm.py and mlp.py for tensor parallelism, never called).

(c) fla package __init__s (each would import every model and kernel) are empty packages, and fla
modules whose import needs triton or a GPU are replaced:
- fla.utils: input_guard (makes tensor arguments contiguous), identity decorators (tensor_cache,
  checkpoint, autocast_custom_fwd/bwd), constants; fla.modules.backends.dispatch (identity).
- fla.ops.utils.op (exp, log = torch's), fla.ops.utils.index (the two mask helpers, as torch
  ops), fla.ops.utils.cumsum.chunk_global_cumsum (torch.cumsum in float32: used by linear
  attention's normalize), prepare_chunk_indices (varlen only; raises).
- the kernels under fla's RetNet / linear-attention wrappers: fla.ops.common.fused_recurrent's
  `fused_recurrent` -> fla's own naive_recurrent_simple_gla (fla/ops/simple_gla/naive.py), and
  fla.ops.simple_gla.chunk's `chunk_simple_gla` (and fused_chunk_simple_gla) -> fla's own
  naive_chunk_simple_gla with the same chunk size (64), both with the arguments the wrappers pass
  (g or g_gamma, scale). fla's own wrappers run on top: chunk_retention, fused_recurrent_retention
  (the decays log(1 − 2^(−5−i)), the scale), chunk_linear_attn, fused_chunk_linear_attn,
  fused_recurrent_linear_attn (the scale, normalize_with_z_state).
- modules only reached with settings the fixtures do not use raise if called: fla.ops.attnres,
  fla.layers.attn (hybrid layers), ShortConvolution, the fused cross-entropy losses, fla.models.utils'
  Cache (so the models run with use_cache=False; FLAUnsupportedCacheGenerationMixin is an empty class).

(d) Triton launchers inside fla's real module files, replaced after the file loads (the rest of the
file, its classes, autograd Functions and reshapes, is fla's): layer_norm_fwd
(fla/modules/layernorm.py: RMSNorm / LayerNorm with optional residual, in float32),
layer_norm_gated_fwd (fla/modules/fused_norm_gate.py: the norm, then · g·σ(g)),
rotary_embedding_fwdbwd (fla/modules/rotary.py: fla's own rotary_embedding_ref on the rows
[offset, offset + T) of the cos/sin tables), swiglu_fwd (fla/modules/activations.py: x·σ(x)·y in
float32); powglu_fwd raises.

Prepared from a study of fla commit bc3b101 (RetNet / linear-attention layers against the written-
out formulas in float64, 1e-6 of max |y|, T 12 and 80, GQA, fuse_norm false, no affine, no gate).
"""
import contextlib
import importlib
import importlib.util
import math
import os
import re
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

USED = []  # the stand-ins that actually ran, in order of first use


def note(name):
    if name not in USED:
        USED.append(name)


def refuse(what):
    def call(*_, **__):
        raise RuntimeError(f"{what} is a stand-in here (reference/fla_standins.py): it must not run")
    return call


# ---------------------------------------------------------------------------------------------
# einops' rearrange / repeat, the patterns fla's paths use

def _parse(side):
    groups, i, toks = [], 0, re.findall(r"\.\.\.|\(|\)|[A-Za-z_][A-Za-z0-9_]*|\d+", side)
    while i < len(toks):
        t = toks[i]
        if t == "(":
            j = toks.index(")", i)
            inner = toks[i + 1:j]
            if "..." in inner:
                raise NotImplementedError(f"einops stand-in: '...' inside parentheses: {side!r}")
            groups.append(inner)
            i = j + 1
        elif t == ")":
            raise ValueError(side)
        else:
            groups.append([t] if t != "..." else "...")
            i += 1
    return groups


def _expand_ellipsis(groups, n_ell):
    out = []
    for g in groups:
        if g == "...":
            out.extend([[f"…{j}"] for j in range(n_ell)])
        else:
            out.append(g)
    return out


def _transform(x, pattern, sizes, allow_new):
    left, right = (s.strip() for s in pattern.split("->"))
    lg, rg = _parse(left), _parse(right)
    n_fixed = sum(1 for g in lg if g != "...")
    n_ell = x.ndim - n_fixed if "..." in lg else 0
    ell_start = lg.index("...") if "..." in lg else 0
    if n_ell < 0 or ("..." not in lg and n_fixed != x.ndim):
        raise ValueError(f"einops stand-in: {pattern!r} does not fit shape {tuple(x.shape)}")
    lg, rg = _expand_ellipsis(lg, n_ell), _expand_ellipsis(rg, n_ell)
    known = dict(sizes)
    for j in range(n_ell):
        known[f"…{j}"] = x.shape[ell_start + j]
    elems, elem_sizes = [], []  # the left side's axes, decomposed
    for g, dim in zip(lg, x.shape):
        unknown = [a for a in g if not a.isdigit() and a not in known]
        prod = math.prod(int(a) if a.isdigit() else known.get(a, 1) for a in g)
        if len(unknown) > 1:
            raise ValueError(f"einops stand-in: cannot infer {unknown} in {pattern!r}")
        if unknown:
            known[unknown[0]] = dim // prod
        elif prod != dim:
            raise ValueError(f"einops stand-in: group {g} is {prod}, dimension is {dim} in {pattern!r}")
        for a in g:
            if a.isdigit():
                if a != "1":
                    raise NotImplementedError(f"einops stand-in: literal {a} on the left of {pattern!r}")
                continue  # a size-1 axis, dropped
            elems.append(a)
            elem_sizes.append(known[a])
    x = x.reshape(elem_sizes) if elem_sizes else x.reshape(())
    right_elems = [a for g in rg for a in g]
    kept = [a for a in right_elems if a in elems]
    if sorted(kept) != sorted(elems):
        raise ValueError(f"einops stand-in: axes {set(elems) - set(kept)} vanish in {pattern!r}")
    x = x.permute([elems.index(a) for a in kept])
    shape_new = []  # new axes (repeat) and literals on the right
    for a in right_elems:
        if a in elems:
            shape_new.append(None)
        else:
            if not (allow_new or a == "1"):
                raise ValueError(f"einops stand-in: new axis {a} in rearrange {pattern!r}")
            shape_new.append(int(a) if a.isdigit() else sizes[a])
    for pos, s in enumerate(shape_new):
        if s is not None:
            x = x.unsqueeze(pos)
    target = [x.shape[pos] if s is None else s for pos, s in enumerate(shape_new)]
    x = x.expand(target)
    out_shape, pos = [], 0
    for g in rg:
        out_shape.append(math.prod(target[pos:pos + len(g)]))
        pos += len(g)
    return x.reshape(out_shape)


def mini_rearrange(x, pattern, **sizes):
    if isinstance(x, (list, tuple)):
        x = torch.stack(list(x))
    return _transform(x, pattern, sizes, allow_new=False)


def mini_repeat(x, pattern, **sizes):
    return _transform(x, pattern, sizes, allow_new=True)


# ---------------------------------------------------------------------------------------------
# the sys.modules / torch bookkeeping

class _Session:
    def __init__(self, root):
        self.root = root
        self.patched = []  # (object, attribute, previous value or _MISSING)

    def module(self, name, package=False, path=None, **attrs):
        m = types.ModuleType(name)
        if package:
            m.__path__ = [path] if path else []
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    def load(self, rel, name):
        """fla's file `rel`, loaded from its path under its own module name."""
        spec = importlib.util.spec_from_file_location(name, os.path.join(self.root, rel))
        m = importlib.util.module_from_spec(spec)
        sys.modules[name] = m
        spec.loader.exec_module(m)
        parent, _, leaf = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], leaf, m)
        return m

    def patch(self, obj, attr, value):
        self.patched.append((obj, attr, getattr(obj, attr, _MISSING)))
        setattr(obj, attr, value)

    def restore(self):
        for obj, attr, old in reversed(self.patched):
            if old is _MISSING:
                delattr(obj, attr)
            else:
                setattr(obj, attr, old)


_MISSING = object()


# ---------------------------------------------------------------------------------------------
# (a) modules Debian lacks

class _Anything:
    """triton.language's names, only ever touched at decoration / annotation time."""

    def __getattr__(self, k):
        return _Anything()

    def __call__(self, *a, **k):
        return _Anything()


class _Kernel:
    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")

    def __getitem__(self, grid):
        raise RuntimeError(f"triton kernel {self.__name__} launched: its launcher was not stood in")


def _decorator_factory(*a, **k):
    if len(a) == 1 and callable(a[0]) and not k:
        return a[0] if isinstance(a[0], _Kernel) else _Kernel(a[0])
    return lambda fn: fn if isinstance(fn, _Kernel) else _Kernel(fn)


class PretrainedConfig:
    model_type = ""
    # transformers' generic settings the models read: class attributes, so not in to_dict()
    output_attentions = False
    output_hidden_states = False
    use_return_dict = True

    def __init__(self, pad_token_id=None, bos_token_id=None, eos_token_id=None, tie_word_embeddings=True, **kwargs):
        self.pad_token_id, self.bos_token_id, self.eos_token_id = pad_token_id, bos_token_id, eos_token_id
        self.tie_word_embeddings = tie_word_embeddings
        for k, v in kwargs.items():
            setattr(self, k, v)

    def to_dict(self):
        d = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        d["model_type"] = self.model_type
        return d


class PreTrainedModel(nn.Module):
    config_class = None
    base_model_prefix = ""

    def __init__(self, config, *inputs, **kwargs):
        super().__init__()
        self.config = config

    def post_init(self):
        note("transformers.PreTrainedModel.post_init (the model's _init_weights on every module, then the tie)")
        self.apply(self._init_weights)
        if getattr(self.config, "tie_word_embeddings", False) and hasattr(self, "get_output_embeddings"):
            out, inp = self.get_output_embeddings(), self.get_input_embeddings()
            if out is not None:
                out.weight = inp.weight


class ModelOutput(dict):
    def __init__(self, **kw):
        super().__init__({k: v for k, v in kw.items() if v is not None})
        self.__dict__.update(kw)

    def __getitem__(self, k):
        return list(self.values())[k] if isinstance(k, int) else super().__getitem__(k)


class _Logger:
    def __getattr__(self, k):
        return lambda *a, **kw: None


def _install_third_party(s):
    tl = s.module("triton.language", __getattr__=lambda k: _Anything())
    s.module("triton", package=True, __version__="3.4.0", jit=_decorator_factory, autotune=_decorator_factory,
             heuristics=_decorator_factory, Config=lambda *a, **k: None, language=tl,
             cdiv=lambda a, b: -(-a // b), next_power_of_2=lambda n: 1 << (n - 1).bit_length(), runtime=_Anything())
    s.module("einops", rearrange=mini_rearrange, repeat=mini_repeat)
    act2fn = {"swish": nn.SiLU(), "silu": nn.SiLU(), "relu": nn.ReLU(), "sigmoid": nn.Sigmoid(), "tanh": nn.Tanh(),
              "gelu": nn.GELU()}
    s.module("transformers", package=True)
    s.module("transformers.configuration_utils", PretrainedConfig=PretrainedConfig)
    s.module("transformers.modeling_utils", PreTrainedModel=PreTrainedModel)
    s.module("transformers.modeling_outputs", BaseModelOutputWithPast=ModelOutput, CausalLMOutputWithPast=ModelOutput)
    s.module("transformers.utils", package=True, logging=types.SimpleNamespace(get_logger=lambda n: _Logger()))
    s.module("transformers.utils.deprecation", deprecate_kwarg=lambda *a, **k: (lambda fn: fn))
    s.module("transformers.activations", ACT2FN=act2fn)


# ---------------------------------------------------------------------------------------------
# (b) torch >= 2 names

class _RMSNorm(nn.Module):
    """torch.nn.RMSNorm (torch 2.4): y = x / sqrt(mean(x²) + eps) * weight (eps None: finfo.eps)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(self.normalized_shape)) if elementwise_affine else None

    def forward(self, x):
        note("torch.nn.RMSNorm (torch 2.4 API)")
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        dims = tuple(range(-len(self.normalized_shape), 0))
        y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
        return y * self.weight if self.weight is not None else y


def _install_torch_compat(s):
    import torch.distributed as dist
    identity = lambda fn=None, **k: fn if fn is not None else (lambda f: f)  # noqa: E731
    if not hasattr(nn, "RMSNorm"):
        s.patch(nn, "RMSNorm", _RMSNorm)
    if not hasattr(torch, "compiler"):
        s.patch(torch, "compiler", types.SimpleNamespace(disable=identity))
    if not hasattr(torch, "compile"):
        s.patch(torch, "compile", identity)
    if not hasattr(dist, "DeviceMesh"):
        s.patch(dist, "DeviceMesh", object)
    try:
        importlib.import_module("torch.distributed.tensor")
    except ImportError:
        class _Placement:
            def __init__(self, *a, **k):
                pass
        s.module("torch.distributed.tensor", package=True, Placement=_Placement, Replicate=_Placement,
                 Shard=_Placement, DTensor=None, distribute_module=refuse("distribute_module"))
        s.module("torch.distributed.tensor.parallel", ParallelStyle=_Placement)


# ---------------------------------------------------------------------------------------------
# (c) fla's package shell and the modules that need triton / a GPU

def _input_guard(fn=None, *, no_guard_contiguous=False):
    """fla.utils.input_guard: makes tensor arguments contiguous (and sets the CUDA device)."""
    def deco(f):
        def wrapper(*args, **kwargs):
            c = lambda v: v.contiguous() if isinstance(v, torch.Tensor) and not no_guard_contiguous else v  # noqa
            return f(*[c(a) for a in args], **{k: c(v) for k, v in kwargs.items()})
        wrapper.__name__ = f.__name__
        return wrapper
    return deco(fn) if fn is not None else deco


PACKAGES = ("fla", "fla.ops", "fla.ops.utils", "fla.ops.common", "fla.ops.simple_gla", "fla.ops.retention",
            "fla.ops.linear_attn", "fla.modules", "fla.layers", "fla.models", "fla.models.retnet",
            "fla.models.linear_attn")


def _chunk_global_cumsum(s, reverse=False, cu_seqlens=None, output_dtype=None, **k):
    note("fla.ops.utils.cumsum.chunk_global_cumsum -> torch.cumsum")
    if cu_seqlens is not None:
        raise RuntimeError("chunk_global_cumsum stand-in: no varlen")
    x = s.float()
    y = x.flip(1).cumsum(1).flip(1) if reverse else x.cumsum(1)
    return y.to(output_dtype or s.dtype)


class _Cache:
    @classmethod
    def from_legacy_cache(cls, *a, **k):
        raise RuntimeError("fla.models.utils.Cache is a stand-in here: run the model with use_cache=False")


def _install_fla_shell(s):
    for name in PACKAGES:
        s.module(name, package=True, path=os.path.join(s.root, *name.split(".")))
    sys.modules["fla"].__version__ = "stand-in package (reference/fla_standins.py)"
    identity = lambda f=None, **k: f if f is not None else (lambda g: g)  # noqa: E731
    s.module("fla.utils", input_guard=_input_guard, tensor_cache=lambda f: f, checkpoint=lambda f: f,
             autocast_custom_fwd=identity, autocast_custom_bwd=identity, autotune_cache_kwargs={}, IS_AMD=False,
             get_multiprocessor_count=lambda *a, **k: 1, find_spec_cached=lambda n: None)
    s.module("fla.modules.backends", dispatch=lambda op: (lambda f: f))
    s.module("fla.ops.utils.op", exp=torch.exp, log=torch.log)
    sys.modules["fla.ops.utils"].prepare_chunk_indices = refuse("prepare_chunk_indices (varlen only)")
    s.module("fla.ops.utils.index",
             prepare_lens_from_mask=lambda mask: mask.sum(-1, dtype=torch.int32),
             prepare_cu_seqlens_from_mask=lambda mask, dtype=torch.int32: F.pad(
                 mask.sum(-1, dtype=dtype).cumsum(0, dtype=dtype), (1, 0)))
    s.module("fla.ops.utils.cumsum", chunk_global_cumsum=_chunk_global_cumsum)
    s.module("fla.ops.attnres", fused_attnres=refuse("fla.ops.attnres.fused_attnres"))
    s.module("fla.layers.attn", Attention=refuse("fla.layers.attn.Attention (hybrid layers)"))
    s.module("fla.modules.convolution", ShortConvolution=refuse("fla.modules.convolution.ShortConvolution"))
    s.module("fla.modules.fused_cross_entropy", FusedCrossEntropyLoss=refuse("FusedCrossEntropyLoss"))
    s.module("fla.modules.fused_linear_cross_entropy", FusedLinearCrossEntropyLoss=refuse("FusedLinearCrossEntropyLoss"))
    s.module("fla.models.utils", Cache=_Cache, FLAUnsupportedCacheGenerationMixin=type(
        "FLAUnsupportedCacheGenerationMixin", (), {}))


def _install_fla_recurrences(s):
    naive = s.load("fla/ops/simple_gla/naive.py", "fla.ops.simple_gla.naive")

    def fused_recurrent(q, k, v, g=None, g_gamma=None, gk=None, gv=None, scale=None, initial_state=None,
                        output_final_state=False, reverse=False, state_v_first=False, cu_seqlens=None, **kw):
        note("fla.ops.common.fused_recurrent.fused_recurrent -> fla's naive_recurrent_simple_gla")
        if gk is not None or gv is not None or reverse or state_v_first or cu_seqlens is not None or kw:
            raise RuntimeError("fused_recurrent stand-in: only g / g_gamma, forward, a [K, V] state, no varlen")
        B, T, H, K = q.shape
        if g is None:
            g = g_gamma.float() if g_gamma is not None else q.new_zeros(H, dtype=torch.float)
            g = g.view(1, 1, H).expand(B, T, H)
        return naive.naive_recurrent_simple_gla(q, k, v, g, scale=scale, initial_state=initial_state,
                                                output_final_state=output_final_state)
    s.module("fla.ops.common.fused_recurrent", fused_recurrent=fused_recurrent)

    def chunk_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None, output_final_state=False,
                         cu_seqlens=None, chunk_size=None, **kw):
        note("fla.ops.simple_gla.chunk.chunk_simple_gla -> fla's naive_chunk_simple_gla")
        if cu_seqlens is not None:
            raise RuntimeError("chunk_simple_gla stand-in: no varlen")
        B, T, H, K = q.shape
        if g is None:
            g = g_gamma.float() if g_gamma is not None else q.new_zeros(H, dtype=torch.float)
            g = g.view(1, 1, H).expand(B, T, H).contiguous()
        o, S = naive.naive_chunk_simple_gla(q, k, v, g, initial_state=initial_state,
                                            output_final_state=output_final_state, chunk_size=chunk_size or 64,
                                            scale=scale)
        return o.to(q.dtype), S

    def fused_chunk_simple_gla(*a, **k):
        note("fla.ops.simple_gla.fused_chunk_simple_gla -> the chunk_simple_gla stand-in")
        return chunk_simple_gla(*a, **k)
    s.module("fla.ops.simple_gla.chunk", chunk_simple_gla=chunk_simple_gla)
    sg = sys.modules["fla.ops.simple_gla"]
    sg.chunk_simple_gla, sg.fused_chunk_simple_gla = chunk_simple_gla, fused_chunk_simple_gla
    sg.fused_recurrent_simple_gla = s.load("fla/ops/simple_gla/fused_recurrent.py",
                                           "fla.ops.simple_gla.fused_recurrent").fused_recurrent_simple_gla
    ret = sys.modules["fla.ops.retention"]
    ret.chunk_retention = s.load("fla/ops/retention/chunk.py", "fla.ops.retention.chunk").chunk_retention
    ret.fused_recurrent_retention = s.load("fla/ops/retention/fused_recurrent.py",
                                           "fla.ops.retention.fused_recurrent").fused_recurrent_retention
    ret.fused_chunk_retention = refuse("fused_chunk_retention")
    ret.parallel_retention = refuse("parallel_retention")
    la = sys.modules["fla.ops.linear_attn"]
    s.load("fla/ops/linear_attn/utils.py", "fla.ops.linear_attn.utils")
    la.chunk_linear_attn = s.load("fla/ops/linear_attn/chunk.py", "fla.ops.linear_attn.chunk").chunk_linear_attn
    la.fused_chunk_linear_attn = s.load("fla/ops/linear_attn/fused_chunk.py",
                                        "fla.ops.linear_attn.fused_chunk").fused_chunk_linear_attn
    la.fused_recurrent_linear_attn = s.load("fla/ops/linear_attn/fused_recurrent.py",
                                            "fla.ops.linear_attn.fused_recurrent").fused_recurrent_linear_attn


# ---------------------------------------------------------------------------------------------
# (d) fla's module files with their triton launchers replaced

def _layer_norm_fwd(x, weight, bias, eps=1e-5, residual=None, out_dtype=None, residual_dtype=None,
                    is_rms_norm=False, num_groups=1):
    """layer_norm_fwd_kernel's math (fla/modules/layernorm.py): float32, x (+ residual), row mean and
    variance, rstd = 1/sqrt(var + eps), the weight/bias of group (row % G)."""
    note("fla.modules.layernorm.layer_norm_fwd (triton launcher) -> torch")
    if residual is not None:
        residual_dtype = residual.dtype
    T, D = x.shape
    xf = x.float() + (residual.float() if residual is not None else 0)
    res_out = xf.to(residual_dtype) if (residual is not None or (residual_dtype is not None
                                                                 and residual_dtype != x.dtype)) else None
    mean = None if is_rms_norm else xf.mean(-1)
    xbar = xf if is_rms_norm else xf - mean[:, None]
    rstd = 1 / torch.sqrt((xbar * xbar).mean(-1) + eps)
    y = xbar * rstd[:, None]
    group = torch.arange(T) % num_groups
    if weight is not None:
        y = y * weight.float().view(num_groups, D)[group]
    if bias is not None:
        y = y + bias.float().view(num_groups, D)[group]
    y = y.to(x.dtype if out_dtype is None else out_dtype)
    return y, mean, rstd, res_out if res_out is not None else x


def _layer_norm_gated_fwd(x, g, weight, bias, activation="swish", eps=1e-5, residual=None, out_dtype=None,
                          residual_dtype=None, is_rms_norm=False):
    """layer_norm_gated_fwd_kernel's math (fla/modules/fused_norm_gate.py): the norm as above with
    one weight/bias [D], then y · g·σ(g) (swish/silu) or y · σ(g) (sigmoid), in float32."""
    note("fla.modules.fused_norm_gate.layer_norm_gated_fwd (triton launcher) -> torch")
    y, mean, rstd, res = _layer_norm_fwd(x, weight, bias, eps, residual, torch.float32, residual_dtype,
                                         is_rms_norm, 1)
    gf = g.float()
    if activation in ("swish", "silu"):
        y = y * gf * torch.sigmoid(gf)
    elif activation == "sigmoid":
        y = y * torch.sigmoid(gf)
    else:
        raise RuntimeError(f"layer_norm_gated_fwd stand-in: activation {activation!r}")
    return y.to(x.dtype if out_dtype is None else out_dtype), mean, rstd, res


def _make_rotary_fwdbwd(rotary):
    def rotary_embedding_fwdbwd(x, cos, sin, seqlen_offsets=0, cu_seqlens=None, interleaved=False,
                                inplace=False, conjugate=False, chunk_indices=None):
        """rotary_embedding_kernel via fla's own rotary_embedding_ref on the rows [offset, offset + T)
        of the cos/sin tables (the kernel's o_cs = o_t + seq_offsets)."""
        note("fla.modules.rotary.rotary_embedding_fwdbwd (triton launcher) -> fla's rotary_embedding_ref")
        if cu_seqlens is not None or not isinstance(seqlen_offsets, int):
            raise RuntimeError("rotary stand-in: integer offsets, no varlen")
        T = x.shape[1]
        c, s = cos[seqlen_offsets:seqlen_offsets + T], sin[seqlen_offsets:seqlen_offsets + T]
        if conjugate:
            s = -s
        y = rotary.rotary_embedding_ref(x.float(), c.float(), s.float(), interleaved).to(x.dtype)
        if inplace:
            x.copy_(y)
            return x
        return y
    return rotary_embedding_fwdbwd


def _swiglu_fwd(x, y, output_contiguous=False):
    """swiglu_fwd_kernel's math (fla/modules/activations.py): x·σ(x)·y in float32."""
    note("fla.modules.activations.swiglu_fwd (triton launcher) -> torch")
    xf = x.float()
    return (xf * torch.sigmoid(xf) * y.float()).to(x.dtype)


def _install_fla_modules(s):
    ln = s.load("fla/modules/layernorm.py", "fla.modules.layernorm")
    ln.layer_norm_fwd = _layer_norm_fwd
    fng = s.load("fla/modules/fused_norm_gate.py", "fla.modules.fused_norm_gate")
    fng.layer_norm_gated_fwd = _layer_norm_gated_fwd
    rot = s.load("fla/modules/rotary.py", "fla.modules.rotary")
    rot.rotary_embedding_fwdbwd = _make_rotary_fwdbwd(rot)
    act = s.load("fla/modules/activations.py", "fla.modules.activations")
    act.swiglu_fwd = _swiglu_fwd
    act.powglu_fwd = refuse("powglu_fwd")
    mlp = s.load("fla/modules/mlp.py", "fla.modules.mlp")
    s.load("fla/modules/feature_map.py", "fla.modules.feature_map")
    s.load("fla/modules/l2warp.py", "fla.modules.l2warp")
    sys.modules["fla.modules"].__dict__.update(
        RMSNorm=ln.RMSNorm, LayerNorm=ln.LayerNorm, GroupNorm=ln.GroupNorm, FusedRMSNormGated=fng.FusedRMSNormGated,
        FusedRMSNormSwishGate=fng.FusedRMSNormSwishGate, FusedLayerNormGated=fng.FusedLayerNormGated,
        RotaryEmbedding=rot.RotaryEmbedding, GatedMLP=mlp.GatedMLP,
        ShortConvolution=sys.modules["fla.modules.convolution"].ShortConvolution,
        FusedCrossEntropyLoss=sys.modules["fla.modules.fused_cross_entropy"].FusedCrossEntropyLoss,
        FusedLinearCrossEntropyLoss=sys.modules["fla.modules.fused_linear_cross_entropy"].FusedLinearCrossEntropyLoss)


# fla's own files, in the order they are loaded (after the stand-ins above), as provenance lists them
FILES = (
    ("fla.ops.simple_gla.naive", "fla/ops/simple_gla/naive.py"),
    ("fla.ops.simple_gla.fused_recurrent", "fla/ops/simple_gla/fused_recurrent.py"),
    ("fla.ops.retention.chunk", "fla/ops/retention/chunk.py"),
    ("fla.ops.retention.fused_recurrent", "fla/ops/retention/fused_recurrent.py"),
    ("fla.ops.linear_attn.utils", "fla/ops/linear_attn/utils.py"),
    ("fla.ops.linear_attn.chunk", "fla/ops/linear_attn/chunk.py"),
    ("fla.ops.linear_attn.fused_chunk", "fla/ops/linear_attn/fused_chunk.py"),
    ("fla.ops.linear_attn.fused_recurrent", "fla/ops/linear_attn/fused_recurrent.py"),
    ("fla.modules.layernorm", "fla/modules/layernorm.py"),
    ("fla.modules.fused_norm_gate", "fla/modules/fused_norm_gate.py"),
    ("fla.modules.rotary", "fla/modules/rotary.py"),
    ("fla.modules.activations", "fla/modules/activations.py"),
    ("fla.modules.mlp", "fla/modules/mlp.py"),
    ("fla.modules.feature_map", "fla/modules/feature_map.py"),
    ("fla.modules.l2warp", "fla/modules/l2warp.py"),
    ("fla.models.hybrid", "fla/models/hybrid.py"),
    ("fla.models.modeling_layers", "fla/models/modeling_layers.py"),
    ("fla.layers.utils", "fla/layers/utils.py"),
    ("fla.layers.multiscale_retention", "fla/layers/multiscale_retention.py"),
    ("fla.layers.linear_attn", "fla/layers/linear_attn.py"),
    ("fla.models.retnet.configuration_retnet", "fla/models/retnet/configuration_retnet.py"),
    ("fla.models.retnet.modeling_retnet", "fla/models/retnet/modeling_retnet.py"),
    ("fla.models.linear_attn.configuration_linear_attn", "fla/models/linear_attn/configuration_linear_attn.py"),
    ("fla.models.linear_attn.modeling_linear_attn", "fla/models/linear_attn/modeling_linear_attn.py"),
)
LATE = FILES[15:]  # loaded after the modules and kernels


@contextlib.contextmanager
def loaded(root):
    """fla's modules from `root` with the stand-ins in place, for the `with` only. Yields a dict:
    configuration_retnet, modeling_retnet, configuration_linear_attn, modeling_linear_attn,
    multiscale_retention, linear_attn_layer (module objects)."""
    saved = dict(sys.modules)
    s = _Session(root)
    try:
        _install_third_party(s)
        _install_torch_compat(s)
        _install_fla_shell(s)
        _install_fla_recurrences(s)
        _install_fla_modules(s)
        mods = {name: s.load(rel, name) for name, rel in LATE}
        yield {"configuration_retnet": mods["fla.models.retnet.configuration_retnet"],
               "modeling_retnet": mods["fla.models.retnet.modeling_retnet"],
               "configuration_linear_attn": mods["fla.models.linear_attn.configuration_linear_attn"],
               "modeling_linear_attn": mods["fla.models.linear_attn.modeling_linear_attn"],
               "multiscale_retention": mods["fla.layers.multiscale_retention"],
               "linear_attn_layer": mods["fla.layers.linear_attn"]}
    finally:
        s.restore()
        for name in list(sys.modules):
            if name not in saved:
                del sys.modules[name]
        sys.modules.update(saved)
