"""mixserve's server at batch 1, a side of bench/peer_decode.py: `mixserve serve` on free loopback
ports, timed by mixserve-loadgen as a gRPC client and as a REST/SSE client see it — the time a
token takes after the first (TPOT), one request at a time, the same prompt and greedy decoding as
the other sides. Set beside the bench's forward pass at batch 1, it is what the server (engine
loop, scheduler, sampler, detokenizer, the RPC or HTTP stream) adds to a token (#21: ≤ 5%)."""
import json
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

SIDES = ("mixserve server gRPC", "mixserve server REST")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc, http_port, timeout=180):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"mixserve serve exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"mixserve serve was not ready within {timeout} s")


def decode_steps(http_port):
    """(seconds, count) of the engine's decode steps so far (/metrics: mixserve_decode_step_seconds)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    total = {}
    for line in text.splitlines():
        for part in ("sum", "count"):
            if line.startswith(f"mixserve_decode_step_seconds_{part}"):
                total[part] = total.get(part, 0.0) + float(line.rsplit(" ", 1)[1])
    return total.get("sum", 0.0), total.get("count", 0.0)


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
            grpc_port, http_port = free_port(), free_port()
            proc = subprocess.Popen([mixserve_bin, "serve", "--model", hf, "--backend", "cpu", "--threads", str(t),
                                     "--grpc-port", str(grpc_port), "--http-port", str(http_port),
                                     "--log-level", "warn"] + weights_args,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                wait_ready(proc, http_port)
                for side, port, extra in ((SIDES[0], grpc_port, []), (SIDES[1], http_port, ["--rest"])):
                    sum0, count0 = decode_steps(http_port)
                    out = subprocess.run(
                        [loadgen_bin, "--port", str(port), *extra, "--dataset-name", "file", "--dataset-path",
                         prompts.name, "--num-prompts", str(requests), "--num-warmups", "1", "--max-concurrency", "1",
                         "--random-output-len", str(steps + 1), "--ignore-eos", "--temperature", "0",
                         "--json", "-", "--no-progress"],
                        check=True, capture_output=True, text=True).stdout
                    sum1, count1 = decode_steps(http_port)
                    report = json.loads(out)
                    if report["completed"] != requests or report["failed"]:
                        raise RuntimeError(f"{side}: {report['completed']} of {requests} requests completed, "
                                           f"errors {report['errors_by_status']}")
                    rows.append({"side": side, "batch": 1, "threads": t,
                                 "ms_per_step_median": report["median_tpot_ms"],
                                 "ttft_ms_median": report["median_ttft_ms"],
                                 "engine_step_ms": 1e3 * (sum1 - sum0) / max(1.0, count1 - count0)})
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    return rows
