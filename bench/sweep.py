#!/usr/bin/python3
"""Request-rate sweep against a mixserve server with mixserve-loadgen: latency-throughput curves.

For each transport (gRPC, REST/SSE) and each offered request rate, runs mixserve-loadgen
(open loop, Poisson arrivals, fixed prompt/output lengths) and collects its JSON report; writes
bench/results/serving-<date>.json (every point, with the machine and the commands) and
serving-<date>.png (TTFT, TPOT, ITL and E2E latency against achieved throughput).

  /usr/bin/python3 bench/sweep.py --start-server     # starts build/release/app/mixserve itself
  /usr/bin/python3 bench/sweep.py --grpc-port 50051 --http-port 8000   # a server already running
"""
import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "clients"))
from mixserve_server import Server  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--start-server", action="store_true", help="start a server on free ports and stop it at the end")
    p.add_argument("--server-bin", default=os.path.join(ROOT, "build/release/app/mixserve"))
    p.add_argument("--model", default="models/default", help="model directory for --start-server")
    p.add_argument("--server-args", default="--threads 1",
                   help="more flags for --start-server (default leaves one of two cores to the clients)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--grpc-port", type=int, default=50051)
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--loadgen", default=os.path.join(ROOT, "build/release/clients/mixserve-loadgen"))
    p.add_argument("--modes", default="grpc,rest", help="comma-separated: grpc, rest")
    p.add_argument("--rates", default="10,20,40,60,80,100,inf", help="offered request rates (req/s); inf: all at once")
    p.add_argument("--duration", type=float, default=10, help="seconds of arrivals per finite rate")
    p.add_argument("--inf-requests", type=int, default=300, help="requests sent at once for rate inf")
    p.add_argument("--inf-concurrency", type=int, default=64, help="in-flight cap for rate inf (0: none)")
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--out-dir", default=os.path.join(ROOT, "bench/results"))
    p.add_argument("--name", default="serving-" + datetime.date.today().isoformat(), help="file name stem")
    p.add_argument("--replot", metavar="JSON", help="only redraw the PNG beside an earlier sweep's JSON")
    return p.parse_args()


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "os": platform.platform(), "host": platform.node()}


def run_point(args, mode, port, rate, out_path):
    cmd = [args.loadgen, "--port", str(port), "--request-rate", rate, "--random-input-len", str(args.input_len),
           "--random-output-len", str(args.output_len), "--ignore-eos", "--num-warmups", str(args.warmup),
           "--seed", "1", "--json", out_path, "--label", f"{mode} {rate}/s"]
    if mode == "rest":
        cmd.append("--rest")
    if rate == "inf":
        cmd += ["--num-prompts", str(args.inf_requests), "--max-concurrency", str(args.inf_concurrency)]
    else:
        cmd += ["--duration", str(args.duration)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out_path) as f:
        report = json.load(f)
    report["command"] = " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd)
    return report


def plot(points, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("ttft", "time to first token (ms)", "request_throughput", "achieved requests/s"),
              ("tpot", "time per output token (ms)", "output_throughput", "achieved output tokens/s"),
              ("itl", "inter-token latency (ms)", "output_throughput", "achieved output tokens/s"),
              ("e2el", "end-to-end latency (ms)", "request_throughput", "achieved requests/s"),
              ("ttft", "time to first token (ms)", "offered", "offered requests/s")]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    colors = {"grpc": "tab:blue", "rest": "tab:orange"}
    modes = sorted({p["mode"] for p in points})
    for ax, (metric, ylabel, x_field, xlabel) in zip(axes.flat, panels):
        for mode in modes:
            # Finite rates make the curve; rate inf (a capped closed loop) is a separate star.
            finite = [p for p in points if p["mode"] == mode and p["offered_rate"] != "inf"]
            closed = [p for p in points if p["mode"] == mode and p["offered_rate"] == "inf"]
            x_of = (lambda p: float(p["offered_rate"])) if x_field == "offered" else (lambda p: p[x_field])
            for pct, style in (("p50", "-o"), ("p99", "--^")):
                ax.plot([x_of(p) for p in finite], [p[f"{pct}_{metric}_ms"] for p in finite], style,
                        color=colors.get(mode), ms=4, label=f"{mode} {pct}")
                if x_field != "offered":
                    for p in closed:
                        ax.plot([x_of(p)], [p[f"{pct}_{metric}_ms"]], "*", color=colors.get(mode), ms=10,
                                label=f"{mode} closed loop of {p.get('max_concurrency')} (p50, p99)" if pct == "p50" else None)
            if metric == "ttft" and x_field != "offered":  # which offered rate each point is
                for p in finite:
                    ax.annotate(p["offered_rate"], (x_of(p), p["p50_ttft_ms"]), fontsize=7, xytext=(3, -9),
                                textcoords="offset points")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    ax = axes.flat[5]  # achieved against offered: where the server stops keeping up
    for mode in modes:
        finite = [p for p in points if p["mode"] == mode and p["offered_rate"] != "inf"]
        ax.plot([float(p["offered_rate"]) for p in finite], [p["request_throughput"] for p in finite], "-o",
                color=colors.get(mode), ms=4, label=mode)
    top = max(float(p["offered_rate"]) for p in points if p["offered_rate"] != "inf")
    ax.plot([0, top], [0, top], ":", color="gray", label="achieved = offered")
    ax.set_xlabel("offered requests/s")
    ax.set_ylabel("achieved requests/s")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def title_of(result):
    s, w, m = result["server"], result["workload"], result["machine"]
    return (f"mixserve {s['model']} ({'/'.join(sorted(set(s['mixers'] or [])))}, {s['backend']} backend), "
            f"{w['input_len']} in / {w['output_len']} out tokens, Poisson arrivals, {w['duration_per_rate_s']:g} s per rate\n"
            f"{m['cpu']}, {m['cores']} cores, server and loadgen on the same machine, {result['date'][:10]}")


def main():
    args = parse_args()
    if args.replot:
        with open(args.replot) as f:
            result = json.load(f)
        plot(result["points"], os.path.splitext(args.replot)[0] + ".png", title_of(result))
        return
    modes = [m for m in args.modes.split(",") if m]
    rates = [r.strip() for r in args.rates.split(",") if r.strip()]
    for path in (args.loadgen, *([args.server_bin] if args.start_server else [])):
        if not os.path.exists(path):
            sys.exit(f"{path} does not exist: build first (cmake --preset release && ninja -C build/release -j2)")
    os.makedirs(args.out_dir, exist_ok=True)
    points, models = [], None
    # tests/clients' Server: free ports, its output read from the start, SIGTERM at the end.
    server = (Server(args.server_bin, ROOT, *args.server_args.split(), model=args.model)
              if args.start_server else None)
    with (server or contextlib.nullcontext()), tempfile.TemporaryDirectory() as tmp:
        grpc_port = server.grpc_port if server else args.grpc_port
        http_port = server.http_port if server else args.http_port
        for mode in modes:
            for rate in rates:
                report = run_point(args, mode, http_port if mode == "rest" else grpc_port, rate,
                                   os.path.join(tmp, f"{mode}-{rate}.json"))
                report["mode"] = mode
                report["offered_rate"] = rate
                points.append(report)
                models = report.get("model_id"), report.get("mixers"), report.get("server_backend")
                print(f"{mode:4} rate {rate:>5}: {report['request_throughput']:6.1f} req/s "
                      f"{report['output_throughput']:7.0f} tok/s  TTFT p50 {report['p50_ttft_ms']:7.2f} "
                      f"p99 {report['p99_ttft_ms']:7.2f} ms  TPOT p50 {report['p50_tpot_ms']:6.3f} ms  "
                      f"errors {report['failed']}", flush=True)
    info = machine()
    result = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": info,
        "server": {"model": models[0], "mixers": models[1], "backend": models[2],
                   "command": " ".join(server.args[1:]) if server else f"external {args.host}"},
        "workload": {"input_len": args.input_len, "output_len": args.output_len, "ignore_eos": True,
                     "arrivals": "Poisson", "duration_per_rate_s": args.duration, "warmup": args.warmup,
                     "inf_rate": {"requests": args.inf_requests, "max_concurrency": args.inf_concurrency}},
        "points": points,
    }
    json_path = os.path.join(args.out_dir, args.name + ".json")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    plot(points, os.path.join(args.out_dir, args.name + ".png"), title_of(result))
    print(f"wrote {json_path} and {args.name}.png")


if __name__ == "__main__":
    main()
