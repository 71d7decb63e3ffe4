"""The PyTorch reference's own decode loop, timed: what a user could write with this reference.

  /usr/bin/python3 reference/bench_decode.py --model DIR [--model DIR ...] --batches 1,8,64 --threads 2

Prefills B sequences with random prompts through the recurrent step, then times decode steps of
all B together (torch.no_grad, float32, the given thread count). JSON lines on stdout.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mixserve_ref.model import Model  # noqa: E402


@torch.no_grad()
def bench(model_dir, batch, steps, prompt, threads):
    torch.set_num_threads(threads)
    model = Model.load_dir(model_dir)
    g = torch.Generator().manual_seed(1)
    states = model.init_state(batch)
    for pos in range(prompt):
        model.step(torch.randint(0, model.cfg.vocab_size, (batch,), generator=g), pos, states)
    times = []
    for i in range(steps):
        tok = torch.randint(0, model.cfg.vocab_size, (batch,), generator=g)
        t0 = time.perf_counter()
        model.step(tok, prompt + i, states)
        times.append(time.perf_counter() - t0)
    times.sort()
    median = times[len(times) // 2]
    mixers = "+".join(dict.fromkeys(l["mixer"] for l in model.cfg.layers))
    return {"model": model_dir, "mixer": mixers, "batch": batch, "threads": threads, "steps": steps,
            "prompt": prompt, "ms_per_step_median": median * 1e3, "ms_per_step_mean": sum(times) / len(times) * 1e3,
            "tok_s": batch / median, "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    for m in args.model:
        for b in map(int, args.batches.split(",")):
            print(json.dumps(bench(m, b, args.steps, args.prompt, args.threads)), flush=True)


if __name__ == "__main__":
    main()
