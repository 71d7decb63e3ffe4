"""Write tests/golden_public/<op>/ from public code no one here wrote (issue #25).

Public code runs on random inputs and random-init weights; inputs, outputs and provenance.json
are written to tests/golden_public/<op>/. Each public repository is read from a path given here
and never copied into the project; CI checks the reference against the committed fixtures without
it (reference/tests/test_public_fixtures.py). A fixture set is written only for the repositories
given:

  /usr/bin/python3 reference/public_fixtures.py [--fla PATH [--commit SHA]]
      [--performer PATH [--performer-commit SHA]] [--aft-pytorch PATH [--aft-pytorch-commit SHA]]
      [--labml PATH [--labml-commit SHA]] [--torchscale PATH [--torchscale-commit SHA]]
      [--fla-models PATH [--fla-models-commit SHA]] [--out DIR]

  --fla          github.com/fla-org/flash-linear-attention   -> retention, linear_attn
  --performer    github.com/lucidrains/performer-pytorch     -> performer
  --aft-pytorch  github.com/rish-16/aft-pytorch              -> aft_full, aft_simple, aft_local_rish16
  --labml        github.com/labmlai/annotated_deep_learning_paper_implementations -> aft_local
  --torchscale   github.com/microsoft/torchscale  -> retnet_torchscale, retnet_torchscale_tied
  --fla-models   github.com/fla-org/flash-linear-attention (the same repository as --fla, its models)
                 -> retnet_fla, retnet_fla_tied_gqa, linear_attn_fla, linear_attn_fla_elu

A path may be an extracted snapshot without .git (`git archive | tar -x`); then give its commit.

Every public file is loaded from its path alone (not its package, whose __init__ pulls in what is
not installed). Where a file imports a missing module at the top, a stand-in module is put in
sys.modules only while that file loads, and nothing of it runs unless said here:
- fla/ops/linear_attn/naive.py imports einops for its chunked form, which Debian lacks; the
  recurrent form used here does not call it (the stand-in's rearrange raises if called).
- performer_pytorch/performer_pytorch.py imports einops, local_attention and
  axial_positional_embedding, and performer_pytorch.reversible through its package. softmax_kernel
  calls einops' `repeat(projection_matrix, 'j d -> b h j d', b=b, h=h)`: the stand-in implements
  that one pattern (a copy of the [m, d] matrix for every batch and head, as einops makes) and
  raises on any other; its rearrange raises. LocalAttention and AxialPositionalEmbedding are only
  named by classes not used here (None stand-ins); reversible.py (torch only) is loaded from its
  file under its package name.
- aft-pytorch's aft_pytorch.py and labml_nn/transformers/aft/__init__.py import only torch (and
  typing): no stand-ins.
- torchscale: the packages torchscale, torchscale.architecture, torchscale.component and
  torchscale.component.xmoe are empty stand-ins (their __init__.py hold only a licence header)
  into which the files RetNetDecoder needs are loaded from their paths under their own names, in
  import order. Debian lacks three of their imports: fairscale.nn (architecture/retnet.py:
  checkpoint_wrapper and wrap, called only with checkpoint_activations / fsdp, both false here;
  the stand-ins raise if called), timm.models.layers (component/droppath.py: drop_path, called
  only with drop_path_rate > 0, 0 here; raises) and einops (component/multihead_attention.py,
  loaded because architecture/utils.py imports it for init_bert_params, which RetNetDecoder does
  not call; its rearrange raises). xmoe's optional fairseq and tutel imports and the apex imports
  of feedforward_network.py and multihead_attention.py are guarded by torchscale's own try/except.
- fla's models (--fla-models): RetNetForCausalLM and LinearAttentionForCausalLM need transformers,
  triton, einops and a GPU. reference/fla_standins.py (next to this script; its docstring lists
  each stand-in and what of it runs) puts stand-ins in sys.modules, and the few torch >= 2 names
  fla uses on torch, only inside its `with`, in which the models are built and run: transformers'
  PretrainedConfig / PreTrainedModel (attributes, post_init = the model's own _init_weights and the
  head tie), triton's decorators (a launched kernel raises), einops' rearrange / repeat (a small
  implementation of the patterns fla uses), empty fla package __init__s, and fla.utils and a few
  fla modules that import triton; fla's four Triton launchers on these paths (layer norm, gated
  norm, rotary, swiglu) are replaced by their math in torch after fla's file loads, and the
  recurrent and chunked retention / linear-attention kernels by fla's own naive forms
  (fla/ops/simple_gla/naive.py) under fla's own wrappers. Each fixture's provenance.json lists
  fla's files and the stand-ins that ran.
"""
import argparse
import contextlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import types

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "reference"))
import fla_standins  # noqa: E402 (reference/fla_standins.py)
from mixserve_ref import safetensors_io  # noqa: E402

SCRIPT = "reference/public_fixtures.py"


def load_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def stand_ins(modules):
    """Put the given modules in sys.modules while a public file loads; restore what was there."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def stand_in(name, **attrs):
    module = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(module, k, v)
    return module


def refuse(what):
    def call(*_, **__):
        raise RuntimeError(f"{what} is a stand-in here (see reference/public_fixtures.py): it must not run")
    return call


def commit_of(repo):
    """HEAD of repo when repo is itself a git checkout's top (not a folder inside another one)."""
    try:
        def git(*a):
            return subprocess.run(["git", "-C", repo, *a], capture_output=True, text=True, check=True).stdout.strip()
        if os.path.realpath(git("rev-parse", "--show-toplevel")) != os.path.realpath(repo):
            raise ValueError("inside another repository")
        return git("rev-parse", "HEAD")
    except Exception:  # a snapshot without .git: say so
        return "unknown (not a git checkout)"


def write(out, op, tensors, provenance, file="fixture.safetensors"):
    """tests/golden_public/<op>/: the tensors in `file` and provenance.json (a model fixture keeps
    its expected values in expected.safetensors beside its model directory)."""
    path = os.path.join(out, op)
    os.makedirs(path, exist_ok=True)
    safetensors_io.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(path, file))
    with open(os.path.join(path, "provenance.json"), "w") as f:
        json.dump(provenance, f, indent=1)
        f.write("\n")
    print(f"{op}: {', '.join(f'{k} {list(v.shape)}' for k, v in tensors.items())}")


def source(url, commit, file, function, layout, **more):
    return {"repository": url, "commit": commit, "file": file, "function": function, "layout": layout,
            **more, "script": SCRIPT, "torch": torch.__version__}


# ---- flash-linear-attention: retention, linear attention

def fla_fixtures(out, fla, commit):
    url = "https://github.com/fla-org/flash-linear-attention"
    gen = torch.Generator().manual_seed(25)
    B, H, T, D = 2, 3, 37, 16  # T past one 32-row block; three heads: three decays

    retention = load_file(os.path.join(fla, "fla/ops/retention/naive.py"), "fla_retention_naive")
    q, k, v = (torch.randn(B, H, T, D, generator=gen) for _ in range(3))
    o = retention.naive_retention(q, k, v)
    write(out, "retention", {"q": q, "k": k, "v": v, "o": o}, source(
        url, commit, "fla/ops/retention/naive.py", "naive_retention(q, k, v)",
        "q, k, v, o [B, heads, T, head_dim]; gamma_i = 1 - 2^(-5-i); q scaled by head_dim^-0.5 inside"))

    with stand_ins({"einops": stand_in("einops", rearrange=refuse("einops.rearrange"))}):
        linear = load_file(os.path.join(fla, "fla/ops/linear_attn/naive.py"), "fla_linear_attn_naive")
    # fla takes [B, T, H, D] and the features already applied; elu + 1 makes them positive as ours.
    fq, fk = (torch.nn.functional.elu(torch.randn(B, T, H, D, generator=gen)) + 1 for _ in range(2))
    lv = torch.randn(B, T, H, D, generator=gen)
    lo, _ = linear.naive_recurrent_linear_attn(fq, fk, lv, scale=1.0, normalize=True)
    write(out, "linear_attn", {"fq": fq, "fk": fk, "v": lv, "o": lo}, source(
        url, commit, "fla/ops/linear_attn/naive.py",
        "naive_recurrent_linear_attn(fq, fk, v, scale=1.0, normalize=True)",
        "fq, fk, v, o [B, T, heads, head_dim]; o_t = sum_j (fq_t.fk_j) v_j / (fq_t . sum_j fk_j + 1e-10)"))


# ---- performer-pytorch: FAVOR+ features and causal linear attention

def einops_repeat(tensor, pattern, **sizes):
    """The one einops call softmax_kernel makes, and only that one."""
    if pattern != "j d -> b h j d" or set(sizes) != {"b", "h"}:
        raise RuntimeError(f"einops stand-in: pattern {pattern!r} {sizes} is not implemented")
    return tensor[None, None].repeat(sizes["b"], sizes["h"], 1, 1)


def performer_fixtures(out, path, commit):
    pkg = os.path.join(path, "performer_pytorch")
    package = stand_in("performer_pytorch")
    package.__path__ = []
    with stand_ins({"performer_pytorch": package}):
        reversible = load_file(os.path.join(pkg, "reversible.py"), "performer_pytorch.reversible")
    with stand_ins({"einops": stand_in("einops", repeat=einops_repeat, rearrange=refuse("einops.rearrange")),
                    "local_attention": stand_in("local_attention", LocalAttention=None),
                    "axial_positional_embedding": stand_in("axial_positional_embedding",
                                                           AxialPositionalEmbedding=None),
                    "performer_pytorch": package, "performer_pytorch.reversible": reversible}):
        pp = load_file(os.path.join(pkg, "performer_pytorch.py"), "performer_pytorch_public")

    B, H, T, D = 2, 2, 24, 16
    m = int(D * math.log(D))  # FastAttention's default nb_features: 44 = 2 full orthogonal blocks + 12 rows
    seed = 25
    torch.manual_seed(seed)  # FastAttention draws its projection from the global generator
    attn = pp.FastAttention(dim_heads=D, nb_features=m, causal=True)  # no fast_transformers: the non-CUDA form
    assert attn.causal_linear_fn is pp.causal_linear_attention_noncuda
    W = attn.projection_matrix.clone()
    gen = torch.Generator().manual_seed(26)
    q, k, v = (torch.randn(B, H, T, D, generator=gen) for _ in range(3))
    with torch.no_grad():
        o = attn(q, k, v)  # the library's defaults: kernel eps 1e-4, denominator eps 1e-6
        o_prefix = torch.stack([attn(q[:, :, :t + 1], k[:, :, :t + 1], v[:, :, :t + 1])[:, :, t]
                                for t in range(T)], 2)
        fq = pp.softmax_kernel(q, projection_matrix=W, is_query=True)
        fk = pp.softmax_kernel(k, projection_matrix=W, is_query=False)
        fq0 = pp.softmax_kernel(q, projection_matrix=W, is_query=True, eps=0.0)
        fk0 = pp.softmax_kernel(k, projection_matrix=W, is_query=False, eps=0.0)
        o0 = pp.causal_linear_attention_noncuda(fq0, fk0, v, eps=0.0)
    write(out, "performer", {"q": q, "k": k, "v": v, "projection": W, "fq": fq, "fk": fk, "o": o,
                             "o_prefix": o_prefix, "fq0": fq0, "fk0": fk0, "o0": o0}, source(
        "https://github.com/lucidrains/performer-pytorch", commit, "performer_pytorch/performer_pytorch.py",
        {"projection": f"torch.manual_seed({seed}); FastAttention(dim_heads={D}, nb_features={m}, causal=True)"
                       ".projection_matrix (gaussian_orthogonal_random_matrix, ortho_scaling=0)",
         "o": "FastAttention(...)(q, k, v): softmax_kernel (eps=1e-4) then causal_linear_attention_noncuda "
              "(eps=1e-6), the library's path without fast_transformers",
         "o_prefix": "o_prefix[:, :, t] = FastAttention(...)(q[:, :, :t+1], k[:, :, :t+1], v[:, :, :t+1])[:, :, t]",
         "fq, fk": "softmax_kernel(q | k, projection_matrix=projection, is_query=True | False)",
         "fq0, fk0": "softmax_kernel(..., eps=0.0)",
         "o0": "causal_linear_attention_noncuda(fq0, fk0, v, eps=0.0)"},
        "q, k, v, o, o_prefix, o0 [B, heads, T, head_dim]; fq, fk, fq0, fk0 [B, heads, T, m]; projection [m, head_dim]",
        stand_ins="einops.repeat('j d -> b h j d') implemented as a copy per batch and head; "
                  "other missing imports never called (see the script's docstring)"))


# ---- AFT: rish-16/aft-pytorch (full, simple, local; non-causal) and labml's AFTLocal (masked)

def prefix_outputs(module, x):
    """y[:, t] = module(x[:, :t+1])[:, t]: a non-causal module run on every prefix gives the causal
    output at every position (the last row of a prefix sees exactly the tokens j <= t)."""
    with torch.no_grad():
        return torch.stack([module(x[:, :t + 1])[:, t] for t in range(x.shape[1])], 1)


def linear_tensors(prefix, layer):
    return {f"{prefix}.weight": layer.weight.detach().clone(), f"{prefix}.bias": layer.bias.detach().clone()}


def aft_pytorch_fixtures(out, path, commit):
    url, file = "https://github.com/rish-16/aft-pytorch", "aft_pytorch/aft_pytorch.py"
    aft = load_file(os.path.join(path, file), "aft_pytorch_public")
    B, T, d, s = 2, 37, 16, 5
    layout = ("x, y [B, T, d]; to_q/to_k/to_v/project: nn.Linear (weight [out, in], bias); "
              "wbias [T, T] indexed [t, j] (output position first)")
    how = ("the module is not causal (every t sees all T tokens); run on every prefix, "
           "y[:, t] = module(x[:, :t+1])[:, t]")
    for op, name, kw in (("aft_full", "AFTFull", {}), ("aft_simple", "AFTSimple", {}),
                         ("aft_local_rish16", "AFTLocal", {"s": s})):
        torch.manual_seed({"aft_full": 31, "aft_simple": 32, "aft_local_rish16": 33}[op])  # the modules' own init
        module = getattr(aft, name)(T, d, hidden_dim=d, **kw)
        x = torch.randn(B, T, d)
        tensors = {"x": x}
        for p, layer in (("to_q", module.to_q), ("to_k", module.to_k), ("to_v", module.to_v),
                         ("project", module.project)):
            tensors.update(linear_tensors(p, layer))
        if hasattr(module, "wbias"):  # as initialised (AFTLocal zeroes it outside the window itself)
            tensors["wbias"] = module.wbias.detach().clone()
        tensors["y"] = prefix_outputs(module, x)
        args = ", s=%d" % s if kw else ""
        write(out, op, tensors, source(url, commit, file,
                                       f"{name}(max_seqlen={T}, dim={d}, hidden_dim={d}{args}).forward(x)",
                                       layout, causal=how))


def labml_fixtures(out, path, commit):
    file = "labml_nn/transformers/aft/__init__.py"
    aft = load_file(os.path.join(path, file), "labml_aft_public")
    B, T, d, s = 2, 37, 16, 5
    torch.manual_seed(34)
    module = aft.AFTLocal(d_model=d, seq_len=T, local_window_size=s)  # bias=True
    with torch.no_grad():
        module.pos_bias.normal_()  # labml initialises it to zeros, which would check nothing
    x = torch.randn(B, T, d)
    xt = x.transpose(0, 1)  # labml's layout is [T, B, d]
    mask = torch.ones(T, T, dtype=torch.bool).tril()[:, :, None]  # mask[i, j, b]: i may see j
    with torch.no_grad():
        y = module(query=xt, key=xt, value=xt, mask=mask).transpose(0, 1)
    tensors = {"x": x, "pos_bias": module.pos_bias.detach().clone()}
    for p in ("query", "key", "value", "output"):
        tensors.update(linear_tensors(p, getattr(module, p)))
    tensors["y"] = y
    write(out, "aft_local", tensors, source(
        "https://github.com/labmlai/annotated_deep_learning_paper_implementations", commit, file,
        f"AFTLocal(d_model={d}, seq_len={T}, local_window_size={s}).forward(query=x, key=x, value=x, "
        "mask=causal)",
        "x, y [B, T, d] (labml's own layout [T, B, d], transposed here); query/key/value/output: nn.Linear; "
        "pos_bias [T, T] indexed [t, j]",
        causal="mask[i, j, 0] = j <= i (lower triangle) passed to forward", init="pos_bias ~ N(0, 1) "
        "(labml initialises it to zeros); the Linear layers as nn.Linear initialises them under torch.manual_seed(34)"))


# ---- torchscale: RetNetDecoder, parallel and recurrent, a whole model

TORCHSCALE_FILES = (  # (module name, file), in the order their imports need them
    ("torchscale.architecture.config", "torchscale/architecture/config.py"),
    ("torchscale.component.rms_norm", "torchscale/component/rms_norm.py"),
    ("torchscale.component.multiway_network", "torchscale/component/multiway_network.py"),
    ("torchscale.component.multiscale_retention", "torchscale/component/multiscale_retention.py"),
    ("torchscale.component.xmoe.global_groups", "torchscale/component/xmoe/global_groups.py"),
    ("torchscale.component.feedforward_network", "torchscale/component/feedforward_network.py"),
    ("torchscale.component.gate_linear_unit", "torchscale/component/gate_linear_unit.py"),
    ("torchscale.component.xmoe.moe_layer", "torchscale/component/xmoe/moe_layer.py"),
    ("torchscale.component.xmoe.routing", "torchscale/component/xmoe/routing.py"),
    ("torchscale.component.droppath", "torchscale/component/droppath.py"),
    ("torchscale.component.xpos_relative_position", "torchscale/component/xpos_relative_position.py"),
    ("torchscale.component.flash_attention", "torchscale/component/flash_attention.py"),
    ("torchscale.component.multihead_attention", "torchscale/component/multihead_attention.py"),
    ("torchscale.architecture.utils", "torchscale/architecture/utils.py"),
    ("torchscale.architecture.retnet", "torchscale/architecture/retnet.py"),
)


def load_torchscale(path):
    """torchscale's config.py and retnet.py modules, loaded as the docstring says."""
    packages = {}
    for name in ("torchscale", "torchscale.architecture", "torchscale.component", "torchscale.component.xmoe"):
        packages[name] = stand_in(name)
        packages[name].__path__ = []  # a package for relative imports; nothing is found in it by search
    missing = {"fairscale": stand_in("fairscale"),
               "fairscale.nn": stand_in("fairscale.nn", checkpoint_wrapper=refuse("fairscale.nn.checkpoint_wrapper"),
                                        wrap=refuse("fairscale.nn.wrap")),
               "timm": stand_in("timm"), "timm.models": stand_in("timm.models"),
               "timm.models.layers": stand_in("timm.models.layers", drop_path=refuse("timm drop_path")),
               "einops": stand_in("einops", rearrange=refuse("einops.rearrange"))}
    loaded = {}
    with stand_ins({**packages, **missing}):
        for name, file in TORCHSCALE_FILES:
            loaded[name] = sys.modules[name] = load_file(os.path.join(path, file), name)
        # the modules stay importable only while they load: drop them with the stand-ins
        for name in loaded:
            sys.modules.pop(name, None)
    return loaded["torchscale.architecture.config"], loaded["torchscale.architecture.retnet"]


def torchscale_decode(decoder, tokens, prompt_len=None):
    """Token by token through torchscale's incremental_state protocol (RetNetDecoder.forward): one
    dict, no "is_first_step", the whole prefix passed each time (forward_embedding keeps its last
    token and the position is its length − 1). Logits [T, vocab] for tokens [1, T]; with prompt_len,
    tokens after the prompt are replaced by the greedy picks (argmax of the previous row)."""
    state, rows, tokens = {}, [], tokens.clone()
    with torch.no_grad():
        for t in range(tokens.shape[1]):
            rows.append(decoder(tokens[:, :t + 1], incremental_state=state)[0][0, -1])
            if prompt_len is not None and prompt_len <= t + 1 < tokens.shape[1]:
                tokens[0, t + 1] = rows[-1].argmax()
    return torch.stack(rows), tokens


def torchscale_fixtures(out, path, commit):
    config_py, retnet_py = load_torchscale(path)
    prompt_len, n_greedy, vocab, d = 12, 8, 97, 32
    base = dict(decoder_embed_dim=d, decoder_value_embed_dim=64, decoder_retention_heads=4, decoder_ffn_embed_dim=64,
                decoder_layers=2, vocab_size=vocab, max_target_positions=64, activation_fn="gelu", dropout=0.0)
    # The tied case also scales q_proj and k_proj by 4: with torchscale's initialisation every row of
    # |scores| sums to < 0.25, so parallel_forward's clamp(min=1) never divides; ×4 makes it divide.
    cases = (("retnet_torchscale", 41, base, 1.0),
             ("retnet_torchscale_tied", 42, {**base, "activation_fn": "swish", "share_decoder_input_output_embed": True,
                                             "layernorm_embedding": True, "no_scale_embedding": False}, 4.0))
    for op, seed, kwargs, qk_gain in cases:
        torch.manual_seed(seed)  # the modules' own initialisation (reset_parameters, nn.Linear, nn.Embedding)
        decoder = retnet_py.RetNetDecoder(config_py.RetNetConfig(**kwargs), embed_tokens=torch.nn.Embedding(vocab, d))
        decoder.eval()
        with torch.no_grad():  # RMSNorm starts at ones, which would check nothing of its weights
            for name, p in decoder.named_parameters():
                if name.endswith(("layer_norm.weight", "layernorm_embedding.weight")):
                    p.copy_(1.0 + 0.2 * torch.randn(p.shape))
                elif name.endswith(("q_proj.weight", "k_proj.weight")):
                    p.mul_(qk_gain)
        gen = torch.Generator().manual_seed(seed)
        tokens = torch.zeros(1, prompt_len + n_greedy, dtype=torch.long)
        tokens[0, :prompt_len] = torch.randint(0, vocab, (prompt_len,), generator=gen)
        logits_recurrent, tokens = torchscale_decode(decoder, tokens, prompt_len)
        with torch.no_grad():
            logits_parallel = decoder(tokens)[0][0]
        model_dir = os.path.join(out, op, "model")
        os.makedirs(model_dir, exist_ok=True)
        with open(os.path.join(model_dir, "config.json"), "w") as f:
            json.dump(kwargs, f, indent=1)
            f.write("\n")
        state = {k: v.detach().float().contiguous() for k, v in decoder.state_dict().items()}
        safetensors_io.save(state, os.path.join(model_dir, "model.safetensors"))
        expected = {"tokens": tokens[0].to(torch.int32), "logits_parallel": logits_parallel,
                    "logits_recurrent": logits_recurrent, "greedy": tokens[0, prompt_len:].to(torch.int32)}
        gap = (logits_parallel - logits_recurrent).abs().max().item() / logits_recurrent.abs().max().item()
        files = [file for _, file in TORCHSCALE_FILES]
        write(out, op, expected, source(
            "https://github.com/microsoft/torchscale", commit, files[-1], {
                "model": f"torch.manual_seed({seed}); RetNetDecoder(RetNetConfig(**model/config.json), "
                         f"embed_tokens=nn.Embedding({vocab}, {d})).eval(); then every RMSNorm weight = "
                         "1 + 0.2 N(0, 1) (global generator, in named_parameters order)"
                         + (f", q_proj and k_proj weights × {qk_gain:g}" if qk_gain != 1 else ""),
                "tokens": f"{prompt_len} ids from torch.Generator().manual_seed({seed}).randint, then the "
                          f"{n_greedy} greedy ids",
                "logits_recurrent": "row t = decoder(tokens[:, :t+1], incremental_state=state)[0][0, -1], one "
                                    "state dict from {} (recurrent_forward)",
                "greedy": f"greedy[i] = argmax logits_recurrent[{prompt_len - 1} + i], fed back as the next token",
                "logits_parallel": "decoder(tokens)[0][0] (parallel_forward, incremental_state None)"},
            "model/model.safetensors: decoder.state_dict() under torchscale's names, F32, buffers "
            "(retnet_rel_pos.angle, .decay) included; tokens, greedy I32; logits_* [T, vocab]",
            files=files, config=kwargs, parallel_vs_recurrent=f"max |diff| / max |logit| = {gap:.3g}",
            stand_ins="fairscale.nn, timm.models.layers, einops: never called (see the script's docstring)"),
            file="expected.safetensors")
        print(f"{op}: parallel vs recurrent: max |diff| / max |logit| = {gap:.3g}")


# ---- flash-linear-attention's models: RetNet and linear attention, whole models

FLA_PROMPT, FLA_GREEDY = 72, 8  # 80 tokens: past fla's 64-token switch to its recurrent kernel
FLA_MODELS = (
    # name, model type, seed, config keywords (besides vocab 97, hidden 32, 2 layers, 4 heads), what it covers
    ("retnet_fla", "retnet", 51, {},
     "RetNet with fla's defaults: expand_v 2, the fused norm and gate, GatedMLP width from hidden_ratio 2"),
    ("retnet_fla_tied_gqa", "retnet", 52, {"num_kv_heads": 2, "tie_word_embeddings": True, "fuse_norm": False,
                                           "intermediate_size": 64},
     "RetNet, 2 kv heads for 4 query heads, tied lm_head (not saved), fuse_norm false (attn.g_norm.weight)"),
    ("linear_attn_fla", "linear_attn", 53, {"norm_eps": 1e-2},
     "linear attention with fla's defaults: the elementwise_product (Hadamard) feature maps, no normalize, "
     "GatedMLP width from hidden_ratio 4"),
    ("linear_attn_fla_elu", "linear_attn", 54, {"norm_eps": 1e-2, "feature_map": "elu", "norm_feature_map": True,
                                                "num_kv_heads": 2, "tie_word_embeddings": True,
                                                "intermediate_size": 64},
     "linear attention, elu + 1 features, normalize, 2 kv heads for 4 query heads, tied lm_head (not saved)"),
)


def fla_randomize(model, gen):
    """After fla's own initialisation (std 0.02 projections; norm weights 1; Hadamard maps' biases
    0): every norm weight (block norms, the final norm, RetNet's group norm, linear attention's
    output norm) 1 + 0.2 N(0, 1), so that a loader dropping one fails; the Hadamard feature maps'
    Linears N(0, 1/h) weights and 0.5 N(0, 1) biases, so that the features are not ~1e-5 and the
    output norm's eps does not hide the layer."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("norm_swish_gate.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif ".feature_map_" in name:
                scale = p.shape[-1] ** -0.5 if name.endswith(".weight") else 0.5
                p.copy_(scale * torch.randn(p.shape, generator=gen))


def fla_models_fixtures(out, path, commit):
    url = "https://github.com/fla-org/flash-linear-attention"
    vocab = 97
    with fla_standins.loaded(path) as fla:
        for op, kind, seed, extra, covers in FLA_MODELS:
            fla_standins.USED.clear()
            if kind == "retnet":
                conf_cls, model_cls, arch = (fla["configuration_retnet"].RetNetConfig,
                                             fla["modeling_retnet"].RetNetForCausalLM, "RetNetForCausalLM")
            else:
                conf_cls, model_cls, arch = (fla["configuration_linear_attn"].LinearAttentionConfig,
                                             fla["modeling_linear_attn"].LinearAttentionForCausalLM,
                                             "LinearAttentionForCausalLM")
            kwargs = dict(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_heads=4, **extra)
            torch.manual_seed(seed)  # fla's own initialisation (post_init -> _init_weights)
            model = model_cls(conf_cls(**kwargs)).eval()
            gen = torch.Generator().manual_seed(seed)
            fla_randomize(model, gen)
            tokens = torch.randint(0, vocab, (1, FLA_PROMPT), generator=gen)
            margins = []
            with torch.no_grad():
                for _ in range(FLA_GREEDY):  # fla's forward on the prefix (its default kernel past 64 tokens)
                    last = model(input_ids=tokens, use_cache=False).logits[0, -1]
                    top = last.topk(2).values
                    margins.append((top[0] - top[1]).item())
                    tokens = torch.cat([tokens, last.argmax().view(1, 1)], 1)
                logits_parallel = model(input_ids=tokens, use_cache=False).logits[0]
                modes = {layer.attn.mode for layer in model.model.layers}
                for layer in model.model.layers:
                    layer.attn.mode = "fused_recurrent"
                logits_recurrent = model(input_ids=tokens, use_cache=False).logits[0]
            greedy = tokens[0, FLA_PROMPT:]
            for logits in (logits_parallel, logits_recurrent):
                assert torch.equal(logits[FLA_PROMPT - 1:-1].argmax(-1), greedy), op
            model_dir = os.path.join(out, op, "model")
            os.makedirs(model_dir, exist_ok=True)
            config = model.config.to_dict()
            if config.get("pad_token_id") is None:  # save_pretrained's diff leaves the default out
                config.pop("pad_token_id", None)
            config["architectures"] = [arch]
            with open(os.path.join(model_dir, "config.json"), "w") as f:
                json.dump(config, f, indent=2, sort_keys=True)
                f.write("\n")
            state = {k: v.detach().float().contiguous() for k, v in model.state_dict().items()}
            if config["tie_word_embeddings"]:
                assert model.lm_head.weight is model.model.embeddings.weight
                del state["lm_head.weight"]  # as transformers' save_pretrained leaves a tied weight out
            safetensors_io.save(state, os.path.join(model_dir, "model.safetensors"), {"format": "pt"})
            expected = {"tokens": tokens[0].to(torch.int32), "greedy": greedy.to(torch.int32),
                        "logits_parallel": logits_parallel.contiguous(),
                        "logits_recurrent": logits_recurrent.contiguous()}
            gap = (logits_parallel - logits_recurrent).abs().max().item() / logits_recurrent.abs().max().item()
            model_file = f"fla/models/{kind}/modeling_{kind}.py"
            write(out, op, expected, source(
                url, commit, model_file, {
                    "model": f"torch.manual_seed({seed}); {arch}({conf_cls.__name__}(**model/config.json)).eval() "
                             "(fla's _init_weights: projections N(0, 0.02), norm weights 1), then "
                             "public_fixtures.fla_randomize with torch.Generator().manual_seed"
                             f"({seed}): every norm weight 1 + 0.2 N(0, 1)"
                             + ("; the feature maps' Linears N(0, 1/h) weights, 0.5 N(0, 1) biases"
                                if kind == "linear_attn" and config["feature_map"] == "elementwise_product" else ""),
                    "tokens": f"{FLA_PROMPT} ids from the same generator's randint, then the {FLA_GREEDY} greedy ids",
                    "greedy": f"greedy[i] = argmax model(input_ids=tokens[:, :{FLA_PROMPT} + i], "
                              "use_cache=False).logits[0, -1] (its attn_mode kernel), fed back",
                    "logits_parallel": f"model(input_ids=tokens, use_cache=False).logits[0] with attn_mode "
                                       f"{sorted(modes)[0]} (the config's; chunked, 64-token chunks)",
                    "logits_recurrent": "the same with every layer's attn.mode = 'fused_recurrent' (token by token)"},
                "model/config.json: the config's to_dict() as save_pretrained writes it (architectures added, "
                "pad_token_id null left out); model/model.safetensors: model.state_dict() under fla's names, F32"
                + (", lm_head.weight left out (tied)" if config["tie_word_embeddings"] else "")
                + "; tokens, greedy I32 [T], [8]; logits_* F32 [T, vocab], T = 80",
                covers=covers, config=kwargs, files=[rel for _, rel in fla_standins.FILES],
                parallel_vs_recurrent=f"max |diff| / max |logit| = {gap:.3g}",
                greedy_top2_margins=[round(m, 6) for m in margins],
                max_abs_logit=round(logits_recurrent.abs().max().item(), 6),
                stand_ins="reference/fla_standins.py (its docstring says what each replaces); called here: "
                          + "; ".join(fla_standins.USED)),
                file="expected.safetensors")
            print(f"{op}: parallel vs recurrent {gap:.3g}; greedy margins min {min(margins):.3g}")


REPOS = (  # option, what to clone, what it writes
    ("fla", "commit", "github.com/fla-org/flash-linear-attention", fla_fixtures),
    ("performer", "performer_commit", "github.com/lucidrains/performer-pytorch", performer_fixtures),
    ("aft_pytorch", "aft_pytorch_commit", "github.com/rish-16/aft-pytorch", aft_pytorch_fixtures),
    ("labml", "labml_commit", "github.com/labmlai/annotated_deep_learning_paper_implementations", labml_fixtures),
    ("torchscale", "torchscale_commit", "github.com/microsoft/torchscale", torchscale_fixtures),
    ("fla_models", "fla_models_commit", "github.com/fla-org/flash-linear-attention", fla_models_fixtures),
)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="Fixtures are written only for the repositories given.")
    for opt, commit_opt, url, _ in REPOS:
        flag = "--" + opt.replace("_", "-")
        ap.add_argument(flag, help=f"a checkout or extracted snapshot of {url}")
        ap.add_argument("--" + commit_opt.replace("_", "-"), dest=commit_opt,
                        help=f"the commit of {flag}'s snapshot, when it is not a git checkout")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "golden_public"))
    args = ap.parse_args()
    given = [(getattr(args, opt), getattr(args, c), make) for opt, c, _, make in REPOS if getattr(args, opt)]
    if not given:
        flags = ", ".join("--" + r[0].replace("_", "-") for r in REPOS)
        ap.error(f"give at least one public repository ({flags})")
    for path, commit, make in given:
        path = os.path.abspath(path)
        make(args.out, path, commit or commit_of(path))


if __name__ == "__main__":
    main()
