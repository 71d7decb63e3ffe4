"""Parallel (training) form == recurrent (decode) form for every mixer and hybrids, in float32."""
import math
import os
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mixserve_ref.config import MIXERS, ConfigError, ModelConfig  # noqa: E402
from mixserve_ref.model import Model  # noqa: E402
from mixserve_ref.testing import random_config, randomize  # noqa: E402

torch.set_num_threads(2)
TOL = 1e-5


def run_both(model, tokens):
    with torch.no_grad():
        par = model(tokens)
        states = model.init_state(tokens.shape[0])
        rec = torch.stack([model.step(tokens[:, t], t, states) for t in range(tokens.shape[1])], 1)
    return par, rec, states


def make(kinds, seed, **kw):
    gen = torch.Generator().manual_seed(seed)
    cfg = random_config(kinds, gen, **kw)
    torch.manual_seed(seed)
    return randomize(Model(cfg), gen), gen


class ParallelEqualsRecurrent(unittest.TestCase):
    def check(self, kinds, seed, T=30, **kw):
        model, gen = make(kinds, seed, **kw)
        tokens = torch.randint(0, model.cfg.vocab_size, (3, T), generator=gen)
        par, rec, _ = run_both(model, tokens)
        # 1e-5 of the logits' scale (max |logit|, at least 1): float32 rounding scales with the
        # values, and which rounding a matmul gets depends on the CPU's BLAS kernels (AVX2 or
        # AVX-512): retnet seed 1 differs by 1.4e-5 on logits up to 4.2 on an AVX-512 host.
        err = (par - rec).abs().max().item()
        scale = max(1.0, par.abs().max().item())
        self.assertLess(err, TOL * scale, f"{kinds} seed {seed}: max |parallel - recurrent| = {err:g}, "
                        f"logits up to {scale:g}")
        self.assertGreater(par.std().item(), 0.1, "logits must not be degenerate")

    def test_every_mixer(self):
        # T = 30 runs past every window (FIR W ≤ 8, aft_local s ≤ 6)
        for kind in MIXERS:
            for seed in range(3):
                with self.subTest(kind=kind, seed=seed):
                    self.check([kind, kind], seed)

    def test_every_mixer_wider(self):
        for kind in MIXERS:
            with self.subTest(kind=kind):
                self.check([kind], 100, d=32, T=24, position="sinusoidal", activation="gelu_tanh",
                           bias=False, tie_embeddings=False)

    def test_exact_in_float64(self):
        """The two forms are the same function: in float64 they agree to rounding at many seeds.
        (In float32, retention's output group norm amplifies rounding when o is the small sum of
        cancelling terms; the float32 checks above use fixed seeds.)"""
        for kind in MIXERS:
            for seed in range(10, 20):
                model, gen = make([kind, kind], seed)
                model = model.double()
                tokens = torch.randint(0, model.cfg.vocab_size, (2, 20), generator=gen)
                with torch.no_grad():
                    par = model(tokens)
                    states = model.init_state(2)
                    rec = torch.stack([model.step(tokens[:, t], t, states) for t in range(20)], 1)
                self.assertLess((par - rec).abs().max().item(), 1e-9, f"{kind} seed {seed}")

    def test_hybrids(self):
        self.check(["she", "attention", "rwkv", "me"], 7)
        self.check(["retnet", "aft_local", "performer", "we", "linear", "he", "aft_full", "aft_simple"], 8,
                   position="none", embed_norm=True)

    def test_history_matters(self):
        """Changing an earlier token inside the window changes the last logits (no mixer ignores
        its past), and beyond a FIR window it does not (the window is honoured)."""
        for kind in MIXERS:
            with self.subTest(kind=kind):
                model, gen = make([kind], 3)
                tokens = torch.randint(0, model.cfg.vocab_size, (1, 12), generator=gen)
                other = tokens.clone()
                other[0, 10] = (other[0, 10] + 1) % model.cfg.vocab_size
                with torch.no_grad():
                    diff = (model(tokens)[0, -1] - model(other)[0, -1]).abs().max().item()
                self.assertGreater(diff, 1e-4)
        model, gen = make(["me"], 4, position="none")
        W = model.cfg.layers[0]["window"]
        tokens = torch.randint(0, model.cfg.vocab_size, (1, 20), generator=gen)
        other = tokens.clone()
        other[0, 19 - W] = (other[0, 19 - W] + 1) % model.cfg.vocab_size
        with torch.no_grad():
            self.assertEqual((model(tokens)[0, -1] - model(other)[0, -1]).abs().max().item(), 0.0)


TORCHSCALE_RETNET = {"mixer": "retnet", "heads": 2, "value_dim": 24, "rope_style": "torchscale",
                     "group_norm": "rmsnorm", "decay_normalize": True, "gn_eps": 1e-6}


def small_random_model(layers, seed=0, **kw):
    """A float64 model of these layers (d 16, vocab 23) with randomize()'s weights, and its generator."""
    gen = torch.Generator().manual_seed(seed)
    cfg = ModelConfig(vocab_size=23, d_model=16, n_layers=len(layers), ffn_dim=20, max_seq_len=24,
                      layers=layers, **kw)
    torch.manual_seed(seed)
    return randomize(Model(cfg), gen).double(), gen


class TorchscaleConventions(unittest.TestCase):
    """The switches of docs/mixers.md ("RetNet as torchscale writes it"): each form agrees with the
    other, and each switch computes the formula docs/model-format.md gives."""

    def model(self, layers, seed=0, **kw):
        return small_random_model(layers, seed, **kw)

    def test_parallel_equals_recurrent_in_float64(self):
        for i, (layers, kw) in enumerate([
                ([TORCHSCALE_RETNET] * 2, dict(norm="rmsnorm", ffn="glu", activation="gelu", bias=False,
                                               position="none", tie_embeddings=False)),
                ([{"mixer": "attention", "heads": 2}, {"mixer": "retnet", "heads": 4, "group_norm": "rmsnorm"}],
                 dict(norm="rmsnorm", ffn="glu", activation="silu", embed_norm=True)),
                ([{"mixer": "retnet", "heads": 1, "value_dim": 8, "decay_normalize": True}], dict(activation="gelu"))]):
            model, gen = self.model(layers, seed=i)
            tokens = torch.randint(0, 23, (2, 20), generator=gen)
            par, rec, states = run_both(model, tokens)
            self.assertLess((par - rec).abs().max().item(), 1e-9, layers)
            self.assertGreater(par.std().item(), 0.1)
            last = layers[-1]
            if last.get("value_dim"):  # S is [B, n, h, m]: keys h = d/n, values m = value_dim/n
                n = last["heads"]
                self.assertEqual(tuple(states[-1]["mixer"]["S"].shape), (2, n, 16 // n, last["value_dim"] // n))

    def test_torchscale_rope_rotates_pairs(self):
        from mixserve_ref.mixers.common import apply_rope, rope_angles
        h, base = 8, 10000.0
        x = torch.randn(3, 5, h, dtype=torch.float64)
        pos = torch.arange(3)
        cos, sin = rope_angles(pos, h, base, "torchscale")
        got = apply_rope(x, cos.double()[:, None], sin.double()[:, None], "torchscale").transpose(0, 1)
        theta = [base ** (-i / (h // 2 - 1)) for i in range(h // 2)]
        for p in range(3):
            for i in range(h // 2):
                a = p * theta[i]
                c, s = math.cos(a), math.sin(a)
                x0, x1 = x[p, :, 2 * i], x[p, :, 2 * i + 1]
                torch.testing.assert_close(got[:, p, 2 * i], x0 * c - x1 * s, atol=1e-6, rtol=0)
                torch.testing.assert_close(got[:, p, 2 * i + 1], x1 * c + x0 * s, atol=1e-6, rtol=0)
        cos, sin = rope_angles(torch.tensor([5]), 2, base, "torchscale")  # one pair: θ = 1
        torch.testing.assert_close(cos, torch.full((1, 2), math.cos(5.0)))

    def test_rmsnorm_and_glu(self):
        model, gen = self.model([{"mixer": "retnet", "heads": 2}], norm="rmsnorm", ffn="glu", activation="silu",
                                embed_norm=True)
        names = set(model.state_dict())
        for norm in ("layers.0.ln1", "layers.0.ln2", "norm_f", "embed_norm"):
            self.assertIn(norm + ".weight", names)
            self.assertNotIn(norm + ".bias", names)
        self.assertEqual({n for n in names if ".ffn." in n}, {f"layers.0.ffn.{p}.{w}" for p in ("fc1", "gate", "fc2")
                                                              for w in ("weight", "bias")})
        x = torch.randn(4, 16, dtype=torch.float64, generator=gen)
        ln = model.layers[0].ln1
        torch.testing.assert_close(ln(x), x / (x.pow(2).mean(-1, keepdim=True) + model.cfg.norm_eps).sqrt() * ln.weight)
        f = model.layers[0].ffn
        silu = lambda z: z * torch.sigmoid(z)  # noqa: E731
        torch.testing.assert_close(f(x), f.fc2(silu(f.fc1(x)) * f.gate(x)))
        self.assertGreater((ln.weight - 1).abs().min().item(), 0)  # randomize gives the gains values
        self.assertGreater(f.gate.bias.abs().min().item(), 0)

    def test_decay_normalize_divides_o_before_the_group_norm(self):
        """With gn_eps 0 the RMS group norm undoes any positive scale of a head's o: the switch
        then changes nothing; with the eps it does, and exactly as o ÷ √(Σ_{j≤t} γ^j) would."""
        layer = dict(TORCHSCALE_RETNET, gn_eps=0.0)
        on, gen = self.model([layer], seed=3)
        off, _ = self.model([dict(layer, decay_normalize=False)], seed=3)
        tokens = torch.randint(0, 23, (1, 20), generator=gen)
        with torch.no_grad():
            self.assertLess((on(tokens) - off(tokens)).abs().max().item(), 1e-9)
        layer = dict(TORCHSCALE_RETNET, gn_eps=1e-2)
        on, _ = self.model([layer], seed=3)
        off, _ = self.model([dict(layer, decay_normalize=False)], seed=3)
        with torch.no_grad():
            self.assertGreater((on(tokens) - off(tokens)).abs().max().item(), 1e-4)
            mixer, x = on.layers[0].mixer, torch.randn(1, 20, 16, dtype=torch.float64, generator=gen)
            from mixserve_ref.mixers.retnet import retention
            q, k, v = mixer._qkv(x, torch.arange(20))
            o = retention(q, k, v, mixer.gamma)
            gamma = mixer.gamma[:, None]
            scale = torch.stack([(gamma ** torch.arange(t + 1)).sum(-1) for t in range(20)], -1)  # [n, T]
            o = o / scale.sqrt()[None, :, :, None]
            o = o / (o.pow(2).mean(-1, keepdim=True) + 1e-2).sqrt()
            want = mixer.o(torch.nn.functional.silu(mixer.g(x)) * o.transpose(1, 2).reshape(1, 20, 24))
            torch.testing.assert_close(mixer(x), want)

    def test_new_keys_are_written_only_when_set(self):
        """Models written before value_dim, rope_style, group_norm, decay_normalize existed are
        written byte for byte as before; set, they are written and read back."""
        base = dict(vocab_size=10, d_model=8, n_layers=1, ffn_dim=16, max_seq_len=8)
        plain = ModelConfig(layers=[{"mixer": "retnet", "heads": 2}], **base).to_dict()["layers"][0]
        self.assertEqual(plain, {"mixer": "retnet", "heads": 2, "rope_base": 10000.0, "gn_eps": 1e-5})
        cfg = ModelConfig(layers=[dict(TORCHSCALE_RETNET, value_dim=4)], **base)
        self.assertEqual(ModelConfig.from_dict(cfg.to_dict()), cfg)
        self.assertEqual(cfg.to_dict()["layers"][0]["rope_style"], "torchscale")


FLA_LINEAR = {"mixer": "linear", "heads": 2, "feature_map": "elementwise_product", "q_scale": True,
              "normalize": False, "group_norm": "rmsnorm", "gn_weight": True, "gn_eps": 1e-2}


class FlaConventions(unittest.TestCase):
    """flash-linear-attention's switches (docs/model-format.md): RetNet's gn_weight; linear's
    feature_map, q_scale, normalize, group_norm, gn_eps, gn_weight. Each form agrees with the other,
    and each switch computes the formula docs/model-format.md gives."""

    def model(self, layers, seed=0, **kw):
        return small_random_model(layers, seed, **kw)

    def test_parallel_equals_recurrent_in_float64(self):
        linear = [dict(FLA_LINEAR, feature_map=f, q_scale=q, normalize=nz, group_norm=g, gn_weight=w)
                  for f, q, nz, g, w in (("elementwise_product", True, False, "rmsnorm", True),
                                         ("elementwise_product", False, True, "layernorm", False),
                                         ("elu", True, True, "rmsnorm", True), ("relu", False, False, "none", True),
                                         ("identity", True, False, "layernorm", True), ("elu", False, True, "none", False))]
        retnet = {"mixer": "retnet", "heads": 2, "value_dim": 24, "group_norm": "rmsnorm", "gn_weight": True}
        for i, layers in enumerate([linear[:3], linear[3:], [retnet, dict(retnet, group_norm="layernorm", heads=4)]]):
            model, gen = self.model(layers, seed=i, norm="rmsnorm", ffn="glu", activation="silu", bias=False)
            tokens = torch.randint(0, 23, (2, 20), generator=gen)
            par, rec, states = run_both(model, tokens)
            self.assertLess((par - rec).abs().max().item(), 1e-9, layers)
            self.assertGreater(par.std().item(), 0.1)

    def test_tensors(self):
        model, _ = self.model([FLA_LINEAR, {"mixer": "retnet", "heads": 4, "value_dim": 32, "gn_weight": True},
                               {"mixer": "linear", "heads": 2}], bias=False)
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items() if ".mixer." in k}
        self.assertEqual({k: v for k, v in shapes.items() if k.startswith("layers.0.")},
                         {**{f"layers.0.mixer.{p}.weight": (16, 16) for p in "qkvo"},
                          **{f"layers.0.mixer.{f}.weight": (8, 8) for f in ("fq1", "fq2", "fk1", "fk2")},
                          **{f"layers.0.mixer.{f}.bias": (8,) for f in ("fq1", "fq2", "fk1", "fk2")},
                          "layers.0.mixer.gn.weight": (8,)})  # the maps' biases whatever `bias` says
        self.assertEqual(shapes["layers.1.mixer.gn.weight"], (8,))  # value_dim / heads
        self.assertEqual({k for k in shapes if k.startswith("layers.2.")}, {f"layers.2.mixer.{p}.weight" for p in "qkvo"})
        fresh = Model(model.cfg)  # the paper's initialisation: the group norms' weights start at 1
        self.assertTrue(torch.equal(fresh.layers[0].mixer.gn.weight, torch.ones(8)))
        self.assertGreater((model.layers[0].mixer.gn.weight - 1).abs().min().item(), 0)  # randomize changes them

    def test_linear_switches_compute_the_formula(self):
        for layer in (FLA_LINEAR, dict(FLA_LINEAR, feature_map="elu", normalize=True, eps=1e-10),
                      dict(FLA_LINEAR, feature_map="relu", q_scale=False, group_norm="layernorm"),
                      dict(FLA_LINEAR, feature_map="identity", group_norm="none", gn_weight=False)):
            model, gen = self.model([layer], seed=5, bias=False)
            mixer, x = model.layers[0].mixer, torch.randn(1, 20, 16, dtype=torch.float64, generator=gen)
            heads = lambda t: t.view(1, 20, 2, 8).transpose(1, 2)  # noqa: E731 [1, n, T, h]
            q, k, v = heads(mixer.q(x)), heads(mixer.k(x)), heads(mixer.v(x))
            phi = {"elu": lambda t, _: torch.nn.functional.elu(t) + 1, "relu": lambda t, _: torch.relu(t),
                   "identity": lambda t, _: t,
                   "elementwise_product": lambda t, w: (getattr(mixer, w + "1")(t) * getattr(mixer, w + "2")(t))}
            fq, fk = phi[layer["feature_map"]](q, "fq"), phi[layer["feature_map"]](k, "fk")
            if layer["q_scale"]:
                fq = fq / math.sqrt(8)
            a = (fq @ fk.transpose(-1, -2)).tril()
            o = a @ v
            if layer["normalize"]:
                o = o / (a.sum(-1, keepdim=True) + layer.get("eps", 1e-6))
            if layer["group_norm"] == "rmsnorm":
                o = o / (o.pow(2).mean(-1, keepdim=True) + 1e-2).sqrt()
            elif layer["group_norm"] == "layernorm":
                o = (o - o.mean(-1, keepdim=True)) / (o.var(-1, unbiased=False, keepdim=True) + 1e-2).sqrt()
            if layer["gn_weight"]:
                o = o * mixer.gn.weight
            with torch.no_grad():
                torch.testing.assert_close(mixer(x), mixer.o(o.transpose(1, 2).reshape(1, 20, 16)))

    def test_retnet_gn_weight_multiplies_after_the_group_norm(self):
        layer = {"mixer": "retnet", "heads": 2, "value_dim": 24, "group_norm": "rmsnorm", "gn_weight": True,
                 "gn_eps": 1e-6}
        model, gen = self.model([layer], seed=3)
        mixer, x = model.layers[0].mixer, torch.randn(1, 20, 16, dtype=torch.float64, generator=gen)
        from mixserve_ref.mixers.retnet import retention
        with torch.no_grad():
            q, k, v = mixer._qkv(x, torch.arange(20))
            o = retention(q, k, v, mixer.gamma)
            o = o / (o.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * mixer.gn.weight  # [12] shared by both heads
            want = mixer.o(torch.nn.functional.silu(mixer.g(x)) * o.transpose(1, 2).reshape(1, 20, 24))
            torch.testing.assert_close(mixer(x), want)

    def test_new_keys_are_written_only_when_set(self):
        base = dict(vocab_size=10, d_model=8, n_layers=1, ffn_dim=16, max_seq_len=8)
        plain = ModelConfig(layers=[{"mixer": "linear", "heads": 2}], **base).to_dict()["layers"][0]
        self.assertEqual(plain, {"mixer": "linear", "heads": 2, "eps": 1e-6})
        plain = ModelConfig(layers=[{"mixer": "retnet", "heads": 2}], **base).to_dict()["layers"][0]
        self.assertEqual(plain, {"mixer": "retnet", "heads": 2, "rope_base": 10000.0, "gn_eps": 1e-5})
        cfg = ModelConfig(layers=[FLA_LINEAR], **base)
        self.assertEqual(ModelConfig.from_dict(cfg.to_dict()), cfg)
        self.assertEqual(cfg.to_dict()["layers"][0], FLA_LINEAR | {"eps": 1e-6})
        with self.assertRaisesRegex(ConfigError, "unknown keys"):  # not a performer switch
            ModelConfig(layers=[{"mixer": "performer", "feature_map": "elu"}], **base)


class Format(unittest.TestCase):
    def test_save_load_roundtrip(self):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            model, gen = make(["she", "rwkv", "performer", "aft_local"], 5, tie_embeddings=False)
            tokens = torch.randint(0, model.cfg.vocab_size, (2, 9), generator=gen)
            with tempfile.TemporaryDirectory() as d:
                model.save_dir(d, dtype=dtype)
                back = Model.load_dir(d)
                with torch.no_grad():
                    ref = model.to(dtype).float()(tokens)
                    self.assertTrue(torch.equal(ref, back(tokens)), dtype)

    def test_load_rejects_wrong_tensors(self):
        model, _ = make(["attention"], 1)
        with tempfile.TemporaryDirectory() as d:
            model.save_dir(d)
            from mixserve_ref import safetensors_io
            t, _ = safetensors_io.load(os.path.join(d, "model.safetensors"))
            t["layers.0.mixer.q.weight"] = t["layers.0.mixer.q.weight"][:, :-1]
            safetensors_io.save(t, os.path.join(d, "model.safetensors"))
            with self.assertRaisesRegex(ValueError, "layers.0.mixer.q.weight"):
                Model.load_dir(d)

    def test_config_errors(self):
        base = dict(vocab_size=10, d_model=8, n_layers=1, ffn_dim=16, max_seq_len=8)
        for layers, msg in [([{"mixer": "nope"}], "unknown mixer"),
                            ([{"mixer": "attention", "heads": 3}], "must divide"),
                            ([{"mixer": "she", "window": 9}], "window"),
                            ([{"mixer": "me", "typo": 1}], "unknown keys"),
                            ([{"mixer": "retnet", "heads": 2, "value_dim": 5}], "value_dim"),
                            ([{"mixer": "retnet", "value_dim": 0}], "value_dim"),
                            ([{"mixer": "retnet", "rope_style": "pairs"}], "rope_style"),
                            ([{"mixer": "retnet", "group_norm": "batchnorm"}], "group_norm"),
                            ([{"mixer": "retnet", "decay_normalize": 1}], "decay_normalize"),
                            ([{"mixer": "retnet", "gn_weight": 1}], "gn_weight"),
                            ([{"mixer": "linear", "feature_map": "hedgehog"}], "feature_map"),
                            ([{"mixer": "linear", "group_norm": "groupnorm"}], "group_norm"),
                            ([{"mixer": "linear", "q_scale": "yes"}], "q_scale"),
                            ([{"mixer": "linear", "normalize": 0}], "normalize"),
                            ([{"mixer": "linear", "gn_weight": None}], "gn_weight"),
                            ([], "n_layers")]:
            with self.subTest(msg=msg), self.assertRaisesRegex(ConfigError, msg):
                ModelConfig(layers=layers, **base)
        for key, value in (("norm", "batchnorm"), ("activation", "tanh"), ("ffn", "swiglu")):
            with self.subTest(key=key), self.assertRaisesRegex(ConfigError, key):
                ModelConfig(layers=[{"mixer": "me"}], **base, **{key: value})


if __name__ == "__main__":
    unittest.main()
