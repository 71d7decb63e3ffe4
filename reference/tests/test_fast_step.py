"""reference/fast_step.py (the PyTorch baseline that bench_decode.py times) == Model.step, for every
mixer with every term randomised (pos_bias, biases, RoPE on and off), past every ring's window."""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from fast_step import FastModel, check_against_reference  # noqa: E402
from mixserve_ref.config import MIXERS  # noqa: E402
from mixserve_ref.model import Model  # noqa: E402
from mixserve_ref.testing import random_config, randomize  # noqa: E402

torch.set_num_threads(2)


def make(kinds, seed, **kw):
    gen = torch.Generator().manual_seed(seed)
    cfg = random_config(kinds, gen, **kw)
    torch.manual_seed(seed)
    return randomize(Model(cfg), gen).eval()


class FastStepEqualsStep(unittest.TestCase):
    """The cases every tuned step must pass; test_graph_step.py runs them for graph_step.py's."""

    step_model = FastModel  # the step under test, made from the reference model
    position = int  # how it takes the position

    def check(self, kinds, seed, batch=3, **kw):
        with torch.inference_mode():
            model = make(kinds, seed, **kw)
            # T = 30 runs past every window (FIR W ≤ 8, aft_local s ≤ 6); the tolerance is 1e-5
            # of the largest logit
            worst = check_against_reference(model, type(self).step_model(model), batch=batch, positions=30,
                                            seed=seed, position=type(self).position)
        self.assertLessEqual(worst, 1e-5, kinds)

    def test_every_mixer(self):
        for kind in MIXERS:
            for seed in range(3):
                with self.subTest(kind=kind, seed=seed):
                    self.check([kind], seed)

    def test_every_mixer_other_options(self):
        for kind in MIXERS:
            with self.subTest(kind=kind):
                self.check([kind], 100, d=32, position="sinusoidal", activation="gelu_tanh", bias=False,
                           tie_embeddings=False)

    def test_torchscale_conventions(self):
        """RetNet's value_dim, pair RoPE, RMS group norm and decay scale; RMS norms; the GLU."""
        retnet = {"mixer": "retnet", "heads": 4, "value_dim": 64, "rope_style": "torchscale", "group_norm": "rmsnorm",
                  "decay_normalize": True, "gn_eps": 1e-6}
        for activation in ("gelu", "silu"):
            with self.subTest(activation=activation):
                self.check(["retnet", "attention"], 5, d=32, layers=[retnet, {"mixer": "attention", "heads": 2}],
                           norm="rmsnorm", norm_eps=1e-6, ffn="glu", activation=activation, embed_norm=True)
        self.check(["retnet"], 6, layers=[{"mixer": "retnet", "heads": 2, "value_dim": 8}], activation="gelu")

    def test_fla_conventions(self):
        """RetNet's group-norm weight; linear attention's feature maps, q scale, normalize, group norms."""
        layers = [{"mixer": "retnet", "heads": 4, "value_dim": 64, "group_norm": "rmsnorm", "gn_weight": True,
                   "gn_eps": 1e-6},
                  {"mixer": "linear", "heads": 2, "feature_map": "elementwise_product", "q_scale": True,
                   "normalize": False, "group_norm": "rmsnorm", "gn_weight": True, "gn_eps": 1e-2},
                  {"mixer": "linear", "heads": 4, "feature_map": "elu", "q_scale": True, "eps": 1e-10,
                   "group_norm": "layernorm", "gn_weight": True},
                  {"mixer": "linear", "heads": 2, "feature_map": "relu", "group_norm": "rmsnorm"},
                  {"mixer": "linear", "heads": 1, "feature_map": "identity", "normalize": False, "gn_weight": True}]
        self.check(["retnet", "linear", "linear", "linear", "linear"], 8, d=32, layers=layers, norm="rmsnorm",
                   ffn="glu", activation="silu", bias=False, position="none")

    def test_hybrid_batch_one(self):
        self.check(["attention", "aft_local", "she", "rwkv", "performer"], 7, batch=1, position="none",
                   embed_norm=True)


class FastStepOnly(unittest.TestCase):
    def test_a_mixer_without_a_tuned_class_runs_the_reference_step(self):
        import fast_step
        with torch.inference_mode():
            model = make(["retnet", "she"], 3)
            saved = fast_step.MIXERS.pop("retnet")
            try:
                fast = FastModel(model)
                self.assertIsInstance(fast.mixers[0], fast_step._ReferenceStep)
                self.assertLessEqual(check_against_reference(model, fast, positions=12), 1e-5)
            finally:
                fast_step.MIXERS["retnet"] = saved

    def test_a_wrong_step_is_caught(self):
        with torch.inference_mode():
            model = make(["aft_local"], 1)
            fast = FastModel(model)
            fast.mixers[0].slots = [s.flip(0) for s in fast.mixers[0].slots]  # lags in the wrong order
            with self.assertRaises(AssertionError):
                check_against_reference(model, fast, positions=30)


if __name__ == "__main__":
    unittest.main()
