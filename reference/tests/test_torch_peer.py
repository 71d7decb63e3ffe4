"""bench/torch_peer.py, the GPU peer of every mixer, runs on the CPU (float32, no graph) for every
mixer at two batch sizes with a small paper-shaped config: each case gives a time and no error."""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import torch_peer  # noqa: E402
from mixserve_ref.config import MIXERS  # noqa: E402

torch.set_num_threads(2)


class TorchPeerRuns(unittest.TestCase):
    def test_every_mixer_and_mode(self):
        res = torch_peer.main(["--device", "cpu", "--batches", "1,2", "--steps", "2", "--rounds", "1",
                               "--layers", "2", "--d", "16", "--ffn", "32", "--vocab", "50", "--ctx", "40",
                               "--heads", "2", "--window", "8"])
        self.assertEqual(res["device"], "cpu")
        for kind in MIXERS:
            for mode in ("eager", "cudagraph"):
                for B in (1, 2):
                    case = res[f"tuned_{mode}_{kind}/B{B}"]
                    self.assertNotIn("error", case, (kind, mode, B))
                    self.assertGreater(case["ms_per_step"], 0)
                    self.assertAlmostEqual(case["tok_s"] * case["ms_per_step"] / 1e3 / B, 1, delta=0.01,
                                           msg=(kind, mode, B, case))


if __name__ == "__main__":
    unittest.main()
