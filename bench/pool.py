"""State-pool benchmarks (issue P0-3) on the CPU backend, written to bench/results/:
  - host scheduling overhead per step at 256 running requests (null backend), with request
    turnover and decode only (bench/scheduler_ab.py compares two builds of it side by side)
  - TTFT of a repeated 512-token prompt with and without the prefix cache
  - pool efficiency (live / allocated state) for a hybrid model mix

  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 /usr/bin/python3 bench/pool.py   # malloc as scripts/serve runs it
"""
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "reference"))
BIN = os.path.join(ROOT, "build", "release", "bench")


def hybrid_model(path):
    """A 6-layer hybrid with a 1024-token context: every kind of state in one model."""
    import torch
    from mixserve_ref.config import ModelConfig
    from mixserve_ref.model import Model
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return path
    layers = [{"mixer": "attention", "heads": 4}, {"mixer": "she", "window": 64}, {"mixer": "retnet", "heads": 4},
              {"mixer": "aft_local", "window": 32}, {"mixer": "rwkv"}, {"mixer": "performer", "heads": 4, "features": 32}]
    cfg = ModelConfig(vocab_size=5000, d_model=128, n_layers=6, ffn_dim=512, max_seq_len=1024, embed_scale=128 ** 0.5,
                      layers=layers)
    torch.manual_seed(0)
    Model(cfg).save_dir(path, dtype=torch.float16)
    return path


def main():
    model = hybrid_model("/tmp/mixserve-bench-models/hybrid-1024")
    sched = {}
    for i, (mode, max_tokens) in enumerate([("turnover", "128"), ("decode_only", "1000000")]):
        print(f"[{i + 1}/3] scheduler overhead, null backend, 256 running, {mode}", flush=True)
        sched[mode] = json.loads(subprocess.run([os.path.join(BIN, "mixserve-sched-bench"), "--max-tokens", max_tokens],
                                                check=True, capture_output=True, text=True).stdout)
        print(json.dumps(sched[mode], indent=1))
    print("[3/3] prefix-cache TTFT and pool efficiency, CPU backend", flush=True)
    pool = json.loads(subprocess.run([os.path.join(BIN, "mixserve-pool-bench"), "--model", model, "--threads", "2"],
                                     check=True, capture_output=True, text=True).stdout)
    print(json.dumps(pool, indent=1))
    date = datetime.date.today().isoformat()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    result = {"benchmark": "state-pool", "date": date, "cpu": cpu, "cores": os.cpu_count(),
              "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""), "scheduler": sched, "prefix_cache_and_pool": pool,
              "targets": {"scheduling_us_at_256": 10, "ttft_speedup": 10, "pool_efficiency": 0.95}}
    path = os.path.join(ROOT, "bench", "results", f"state-pool-{date}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
