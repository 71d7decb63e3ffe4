"""Parallel (training) form == recurrent (decode) form for every mixer and hybrids, in float32."""
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
                            ([], "n_layers")]:
            with self.subTest(msg=msg), self.assertRaisesRegex(ConfigError, msg):
                ModelConfig(layers=layers, **base)


if __name__ == "__main__":
    unittest.main()
