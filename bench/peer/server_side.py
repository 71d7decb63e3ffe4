"""mixserve's server at batch 1, a side of bench/peer_decode.py: `mixserve serve` on free loopback
ports, timed by mixserve-loadgen as a gRPC client and as a REST/SSE client see it — the time a
token takes after the first (TPOT), one request at a time, the same prompt and greedy decoding as
the other sides. Set beside the bench's forward pass at batch 1, it is what the server (engine
loop, scheduler, sampler, detokenizer, the RPC or HTTP stream) adds to a token (#21: ≤ 5%)."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "clients"))
from mixserve_server import Server  # noqa: E402  (serve on free ports, its /metrics)

SIDES = ("mixserve server gRPC", "mixserve server REST")


def decode_steps(server):
    """(seconds, count) of the engine's decode steps so far (/metrics: mixserve_decode_step_seconds)."""
    return tuple(server.metric("mixserve_decode_step_seconds_" + part) for part in ("sum", "count"))


def run_server(mixserve_bin, loadgen_bin, hf, weights_args, prompt, threads, steps, requests=3):
    """Rows for SIDES at each thread count: ms_per_step_median is loadgen's median TPOT over
    `requests` requests of steps + 1 tokens each (after one warm-up request); engine_step_ms the
    mean of the engine's own decode steps meanwhile (schedule, forward, sample, emit: /metrics), so
    that TPOT over it is what the server adds outside the engine step, free of the drift between
    processes that a comparison with the bench's forward pass carries."""
    rows = []
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as prompts:
        prompts.write(prompt + "\n")
        prompts.flush()
        for t in threads:
            with Server(mixserve_bin, ROOT, "--backend", "cpu", "--log-level", "warn", *weights_args,
                        model=hf, threads=t) as server:
                for side, port, extra in ((SIDES[0], server.grpc_port, []), (SIDES[1], server.http_port, ["--rest"])):
                    sum0, count0 = decode_steps(server)
                    out = subprocess.run(
                        [loadgen_bin, "--port", str(port), *extra, "--dataset-name", "file", "--dataset-path",
                         prompts.name, "--num-prompts", str(requests), "--num-warmups", "1", "--max-concurrency", "1",
                         "--random-output-len", str(steps + 1), "--ignore-eos", "--temperature", "0",
                         "--json", "-", "--no-progress"],
                        check=True, capture_output=True, text=True).stdout
                    sum1, count1 = decode_steps(server)
                    report = json.loads(out)
                    if report["completed"] != requests or report["failed"]:
                        raise RuntimeError(f"{side}: {report['completed']} of {requests} requests completed, "
                                           f"errors {report['errors_by_status']}")
                    rows.append({"side": side, "batch": 1, "threads": t,
                                 "ms_per_step_median": report["median_tpot_ms"],
                                 "ttft_ms_median": report["median_ttft_ms"],
                                 "engine_step_ms": 1e3 * (sum1 - sum0) / max(1.0, count1 - count0)})
    return rows
