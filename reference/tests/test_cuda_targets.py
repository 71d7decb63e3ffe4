"""bench/cuda_targets.py (#24's targets read off a GPU run's files) on made-up files: which run is the
defaults and which are options, the best of them, each target's verdict, and what it leaves out (the
base commit's bench, sampled steps, other weight types)."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import cuda_targets  # noqa: E402


def result(mixer, batch, device_us, e2e_us=None):
    return {"mixer": mixer, "batch": batch, "device_us_per_step_median": device_us,
            "device_tok_s": batch / device_us * 1e6, "us_per_step_median": e2e_us or device_us + 10,
            "tok_s": batch / (e2e_us or device_us + 10) * 1e6}


def bench(results, weights="f16", d=128, **extra):
    return {"device": "NVIDIA H200", "date": "2026-11-29", "commit": "abc", "weights": weights,
            "config": {"d": d}, "results": results, **extra}


class CudaTargets(unittest.TestCase):
    def write(self, d, name, data):
        with open(os.path.join(d, name), "w") as f:
            json.dump(data, f)

    def test_verdicts(self):
        with tempfile.TemporaryDirectory() as d:
            self.write(d, "cuda-bench.json", bench([result("aft_simple", 1, 300), result("retnet", 1, 120),
                                                    result("aft_simple", 256, 300), result("retnet", 256, 300)]))
            # an option that brings batch 1 under 100 µs on the device for both, and aft_simple's batch
            # 256 over 1M tok/s end to end
            self.write(d, "cuda-bench-sequence-blocks.json",
                       bench([result("aft_simple", 1, 90), result("retnet", 1, 95), result("aft_simple", 256, 240),
                              result("retnet", 256, 400)]))
            # the greedy steps with tokens back, shown beside (not an option)
            self.write(d, "cuda-bench-sampling-full.json",
                       bench([dict(result("aft_simple", 1, 10), greedy_device_us_per_step_median=320.0,
                                   overlap_greedy_us_per_step=300.0),
                              dict(result("aft_simple", 256, 10), greedy_device_tok_s=700000.0,
                                   overlap_greedy_tok_s=750000.0)]))
            # left out: the base commit's, sampled steps, int8 weights (all "faster")
            for name, w in (("cuda-bench-base.json", "f16"), ("cuda-bench-sample-candidates.json", "f16"),
                            ("cuda-bench-int8.json", "int8")):
                self.write(d, name, bench([result("aft_simple", 256, 10), result("retnet", 256, 10)], weights=w))
            self.write(d, "peer-tuned.json", {"tuned_cudagraph_aft_simple/B1": {"ms_per_step": 0.3},
                                              "tuned_eager_aft_simple/B1": {"ms_per_step": 0.9},
                                              "tuned_cudagraph_retnet/B1": {"ms_per_step": 0.2}})
            self.write(d, "cuda-bench-large.json",
                       bench([dict(result("aft_simple", 1, 1000), weight_GBps=2000.0)], d=1024))
            self.write(d, "cuda-sync.json", {"results": [{"what": "ring streaming from HBM (1 GiB)", "gb_per_s": 4000.0}]})
            t = cuda_targets.targets(d)
        one, many, peer, hbm = t["targets"]
        # on the device (end to end, device + 10 µs here, beside it: 100 and 105 µs)
        self.assertEqual([(r["mixer"], r["best_option"], r["best_option_us"], r["best_option_e2e_us"])
                          for r in one["rows"]],
                         [("aft_simple", "sequence-blocks", 90, 100), ("retnet", "sequence-blocks", 95, 105)])
        self.assertTrue(one["holds"])
        self.assertEqual(one["rows"][0]["defaults_greedy_e2e_us"], 320.0)
        self.assertEqual(one["rows"][0]["defaults_overlap_us"], 300.0)
        self.assertIsNone(one["rows"][1]["defaults_greedy_e2e_us"])  # retnet: not in the sampled run
        rows = {r["mixer"]: r for r in many["rows"]}
        self.assertTrue(rows["aft_simple"]["holds"])  # 256 / 240 µs = 1.07M tok/s: the option's
        self.assertEqual(rows["aft_simple"]["best_option"], "sequence-blocks")
        self.assertFalse(rows["retnet"]["holds"])  # 256 / 300 µs = 0.85M; the option is slower
        self.assertLess(rows["aft_simple"]["best_option_e2e_tok_s"], 1.03e6)  # 256 / 250 µs: shown
        self.assertFalse(many["holds"])
        self.assertEqual(rows["aft_simple"]["defaults_greedy_e2e_tok_s"], 700000.0)
        self.assertEqual(rows["aft_simple"]["defaults_overlap_tok_s"], 750000.0)
        prow = {(r["mixer"], r["batch"]): r for r in peer["rows"]}
        self.assertEqual(prow[("aft_simple", 1)]["peer"], "tuned_cudagraph_aft_simple")  # the fastest
        self.assertAlmostEqual(prow[("aft_simple", 1)]["defaults_x"], 300 / 300)
        self.assertAlmostEqual(prow[("aft_simple", 1)]["defaults_e2e_x"], 300 / 310)
        self.assertTrue(prow[("aft_simple", 1)]["holds"])  # 300 µs / the option's 90 µs = 3.3
        self.assertFalse(prow[("retnet", 1)]["holds"])  # 200 / 95 µs
        self.assertIsNone(prow[("aft_simple", 256)]["peer"])  # no peer there: not held
        self.assertFalse(peer["holds"])
        self.assertEqual(hbm["measured_hbm_GBps"], 4000.0)
        self.assertAlmostEqual(hbm["rows"][0]["of_measured"], 0.5)
        self.assertFalse(hbm["holds"])

    def test_only_runs_like_the_defaults_compete(self):
        defaults_options = {"sequence_blocks": False}
        with tempfile.TemporaryDirectory() as d:
            def opts(rs, **o):
                return [dict(r, prompt=16, options=dict(defaults_options, **o)) for r in rs]
            self.write(d, "cuda-bench.json", bench(opts([result("retnet", 1, 300), result("retnet", 64, 400)])))
            # the defaults again at batches the defaults' file lacks (ordered's many-rows): cells
            # for the defaults, not an option
            self.write(d, "cuda-bench-many-rows.json",
                       bench(opts([result("retnet", 64, 350), result("retnet", 256, 200)])))
            # another context (quick-more's long-lists: l = 512, 400-token prompts), faster: no option
            self.write(d, "cuda-bench-long-lists.json",
                       bench([dict(r, prompt=400, options=defaults_options) for r in [result("retnet", 64, 100)]],
                             config={"d": 128, "l": 512}))
            self.write(d, "cuda-bench-sequence-blocks.json",
                       bench(opts([result("retnet", 1, 250), result("retnet", 64, 390)], sequence_blocks=True)))
            with open(os.path.join(d, "peer-tuned.json"), "w") as f:
                f.write('{"tuned_eager_retnet/B1": {"ms_')  # a peer run cut off while it wrote
            self.write(d, "peer.json", {"torch_cudagraph_retnet/B64": {"ms_per_step": 1.2}})
            t = cuda_targets.targets(d)
        self.assertEqual(t["defaults_also_from"], ["many-rows"])
        one, many, peer, _ = t["targets"]
        self.assertEqual([(r["best_option"], r["best_option_us"]) for r in one["rows"]], [("sequence-blocks", 250)])
        rows = {r["mixer"]: r for r in many["rows"]}
        self.assertEqual(rows["retnet"]["defaults_tok_s"], 256 / 200 * 1e6)  # many-rows' cell
        self.assertIsNone(rows["retnet"]["best_option"])
        self.assertIn("peer-tuned.json", peer["missing"])  # unreadable, and said so
        prow = {(r["mixer"], r["batch"]): r for r in peer["rows"]}
        self.assertEqual(prow[("retnet", 64)]["best_option"], "sequence-blocks")  # not long-lists
        self.assertAlmostEqual(prow[("retnet", 64)]["best_option_x"], 1200 / 390)
        self.assertFalse(peer["holds"])


if __name__ == "__main__":
    unittest.main()
