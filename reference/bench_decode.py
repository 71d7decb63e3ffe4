"""The PyTorch reference as a fair decode baseline: the reference models' recurrent step written for
speed (reference/fast_step.py: fused projections, state updated in place), timed.

  /usr/bin/python3 reference/bench_decode.py --model DIR [--model DIR ...] --batches 1,8,64 --threads 1,2

At start-up, for each model, FastModel.step is checked against mixserve_ref's Model.step over the
positions timed (logits within 1e-5 of the largest). Then per batch size B and thread count:
prefill B random prompts of --prompt tokens through the step (untimed), time the decode steps at
positions prompt … prompt+steps−1 (all B together, torch.inference_mode, float32,
time.perf_counter_ns per step), and repeat that pass until at least --min-steps steps and
--min-seconds are timed (or --max-seconds of wall time have passed, for slow steps on a busy
host; prefills run on one thread). One JSON line per (model, batch): the best thread count's
median step as ms_per_step_median, with every thread count's figures under by_threads.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fast_step import FastModel, check_against_reference  # noqa: E402
from mixserve_ref.model import Model  # noqa: E402


def time_steps(fast, batch, threads, prompt, steps, min_steps, min_seconds, max_seconds, g):
    """Per-step nanoseconds at `threads` over passes of positions prompt … prompt+steps−1: until at
    least min_steps steps and min_seconds are timed, or max_seconds of wall time have passed
    (prefills included; a slow step on a busy host). Prefills run on one thread: a thread count
    that a busy host makes pathological should not also cost the untimed steps."""
    vocab = fast.cfg.vocab_size
    deadline = time.perf_counter_ns() + max_seconds * 1e9
    times = []
    while len(times) < min_steps or sum(times) < min_seconds * 1e9:
        torch.set_num_threads(1)
        states = fast.init_state(batch)
        for pos in range(prompt):
            fast.step(torch.randint(0, vocab, (batch,), generator=g), pos, states)
        torch.set_num_threads(threads)
        for pos in range(prompt, prompt + steps):
            tokens = torch.randint(0, vocab, (batch,), generator=g)
            t0 = time.perf_counter_ns()
            fast.step(tokens, pos, states)
            times.append(time.perf_counter_ns() - t0)
            if t0 > deadline:
                return times
    return times


def figures(times_ns, batch):
    median = statistics.median(times_ns) / 1e6
    return {"ms_per_step_median": median, "ms_per_step_mean": statistics.fmean(times_ns) / 1e6,
            "ms_per_step_min": min(times_ns) / 1e6, "steps_timed": len(times_ns), "tok_s": batch / (median / 1e3)}


@torch.inference_mode()
def bench(model_dir, batches, thread_counts, steps, prompt, min_steps, min_seconds, max_seconds):
    model = Model.load_dir(model_dir)
    if prompt + steps > model.cfg.max_seq_len:
        raise ValueError(f"{model_dir}: prompt + steps exceed max_seq_len {model.cfg.max_seq_len}")
    fast = FastModel(model)
    torch.set_num_threads(1)
    check_diff = check_against_reference(model, fast, positions=prompt + steps)  # the positions timed
    mixers = "+".join(dict.fromkeys(l["mixer"] for l in model.cfg.layers))
    rows = []
    for batch in batches:
        by_threads = {}
        for threads in thread_counts:
            g = torch.Generator().manual_seed(1)
            times = time_steps(fast, batch, threads, prompt, steps, min_steps, min_seconds, max_seconds, g)
            by_threads[threads] = figures(times, batch)
        best = min(by_threads, key=lambda t: by_threads[t]["ms_per_step_median"])
        rows.append({"model": model_dir, "mixer": mixers, "batch": batch, "threads": best, "steps": steps,
                     "prompt": prompt, **by_threads[best], "by_threads": by_threads,
                     "self_check_max_rel_diff": check_diff, "loop": "fast_step", "torch": torch.__version__})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--threads", default="1,2", help="thread counts to try; the best one's median is reported")
    ap.add_argument("--steps", type=int, default=24, help="decode positions per pass (after the prompt)")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--min-steps", type=int, default=64, help="timed steps at least, over repeated passes")
    ap.add_argument("--min-seconds", type=float, default=1.0, help="timed seconds at least, per figure")
    ap.add_argument("--max-seconds", type=float, default=5.0,
                    help="stop timing after this many seconds of wall time a figure, even short of --min-steps")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    thread_counts = [int(t) for t in args.threads.split(",")]
    for m in args.model:
        for row in bench(m, batches, thread_counts, args.steps, args.prompt, args.min_steps, args.min_seconds,
                         args.max_seconds):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
