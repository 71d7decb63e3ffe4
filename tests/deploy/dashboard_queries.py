#!/usr/bin/env python3
"""Every Grafana panel's PromQL returns data, from a real Prometheus scraping a real mixserve.

Starts `mixserve serve` (models/default plus tests/golden/hybrid_b, so many mixer kinds report)
on free ports, starts Debian's `prometheus` with deploy/prometheus/prometheus.yml (scrape target
and intervals replaced, alerts.yml loaded), drives traffic with curl that exercises every series
the dashboard shows (prefix-cache hits, preemptions from a tiny pool, 429s from a tiny queue, a
504 from a request's own timeout), then runs each panel's expressions through /api/v1/query.
Fails naming every panel whose result is empty or only NaN, and every alert rule Prometheus
could not evaluate.

usage: dashboard_queries.py MIXSERVE_BINARY SOURCE_DIR
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import yaml

# What Grafana would put in; the window spans the whole traffic phase (it lasts ~10 s).
SUBSTITUTIONS = {"$__rate_interval": "1m", "$model": ".*"}
# A repeated prompt of >= 16 tokens: the prefix cache snapshots from 16 tokens up.
LONG_PROMPT = ("In the beginning God created the heaven and the earth. And the earth was without form, "
               "and void; and darkness was upon the face of the deep.")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"FAIL: timed out waiting for {what}")


def start_server(binary, root, log):
    # Small pool and queue on purpose: bursts then preempt and get 429s, so those panels have data.
    cmd = [binary, "serve", "--model", f"{root}/models/default", "--model", f"{root}/tests/golden/hybrid_b",
           "--host", "127.0.0.1", "--grpc-port", "0", "--http-port", "0", "--pool-bytes", "600000",
           "--max-batch", "8", "--max-queue", "4", "--threads", "1", "--static-dir", ""]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    found = {}

    def read():  # keep draining stdout so the server never blocks on a full pipe
        for line in proc.stdout:
            log.write(line)
            m = re.search(r"listening: grpc (\S+):(\d+).*, https? (\S+):(\d+)", line)
            if m:
                found["http"] = int(m.group(4))
    threading.Thread(target=read, daemon=True).start()
    wait_until(lambda: "http" in found or proc.poll() is not None, 30, "the server's listening line")
    if "http" not in found:
        raise SystemExit(f"FAIL: mixserve exited with {proc.returncode}; log in {log.name}")
    return proc, found["http"]


def curl(url, body=None):
    """POST body (JSON) or GET; returns the HTTP status."""
    cmd = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "60", url]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    return int(subprocess.run(cmd, capture_output=True, text=True).stdout or 0)


def traffic(http):
    url = f"http://127.0.0.1:{http}/v1/completions"
    statuses = []
    # prefix cache: the same >= 16-token prompt again, on both models
    for _ in range(2):
        statuses.append(curl(url, {"model": "default", "prompt": LONG_PROMPT, "max_tokens": 8}))
        statuses.append(curl(url, {"model": "hybrid_b", "prompt": list(range(3, 23)), "max_tokens": 8}))
    statuses.append(curl(url, {"prompt": "And God said", "max_tokens": 8, "stream": True}))
    # a burst longer than --max-queue whose states outgrow the pool: 429s and preemptions
    burst = [None] * 16
    def one(i):
        burst[i] = curl(url, {"prompt": f"And it came to pass {i}", "max_tokens": 100, "ignore_eos": True})
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(burst))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses += burst
    # a 5xx: the request's own timeout passes (504, finish_reason=deadline). 100 tokens can take
    # under 10 ms on a quiet machine, so shorter timeouts follow until one passes first.
    for timeout in (0.01, 0.002, 0.0005, 0.0001):
        statuses.append(curl(url, {"prompt": "And it came to pass", "max_tokens": 100, "ignore_eos": True,
                                   "timeout": timeout}))
        if statuses[-1] == 504:
            break
    return statuses


class Prometheus:
    def __init__(self, root, http, tmp):
        with open(f"{root}/deploy/prometheus/prometheus.yml") as f:
            cfg = yaml.safe_load(f)
        cfg["global"].update(scrape_interval="1s", evaluation_interval="1s")
        cfg["rule_files"] = [os.path.join(f"{root}/deploy/prometheus", r) for r in cfg["rule_files"]]
        job = next(j for j in cfg["scrape_configs"] if j["job_name"] == "mixserve")
        job["static_configs"] = [{"targets": [f"127.0.0.1:{http}"]}]
        with open(f"{tmp}/prometheus.yml", "w") as f:
            yaml.safe_dump(cfg, f)
        self.port = free_port()
        self.log = open(f"{tmp}/prometheus.log", "w")
        self.proc = subprocess.Popen(["prometheus", f"--config.file={tmp}/prometheus.yml",
                                      f"--storage.tsdb.path={tmp}/data",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)["data"]

    def query(self, promql):
        return self.api("query", query=promql)["result"]


def panel_queries(dashboard):
    """(panel title, legend, expr) of every target of every panel, rows' nested panels included."""
    out = []
    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                expr = t["expr"]
                for k, v in SUBSTITUTIONS.items():
                    expr = expr.replace(k, v)
                out.append((p["title"], t.get("legendFormat", ""), expr))
    walk(dashboard["panels"])
    return out


def has_data(result):
    return any(r["value"][1] != "NaN" for r in result)


def main():
    binary, root = sys.argv[1], os.path.abspath(sys.argv[2])
    tmp = tempfile.mkdtemp(prefix="mixserve-deploy-")
    log = open(f"{tmp}/mixserve.log", "w")
    server, http = start_server(binary, root, log)
    prom = None
    try:
        prom = Prometheus(root, http, tmp)
        wait_until(lambda: any(r["value"][1] == "1" for r in prom.query('up{job="mixserve"}')), 60,
                   "Prometheus to scrape mixserve")
        start = time.time()
        statuses = []
        for _ in range(3):  # rounds across several scrapes, so rate() has points on both sides
            statuses += traffic(http)
            time.sleep(1.1)
        print(f"traffic: {len(statuses)} requests in {time.time() - start:.1f} s, statuses "
              f"{ {s: statuses.count(s) for s in sorted(set(statuses))} }")
        time.sleep(2.5)  # the last scrape after the traffic

        with open(f"{root}/deploy/grafana/mixserve.json") as f:
            dashboard = json.load(f)
        failures = []
        queries = panel_queries(dashboard)
        for title, legend, expr in queries:
            result = prom.query(expr)
            ok = has_data(result)
            print(f"{'ok  ' if ok else 'FAIL'} {title} [{legend}]: {len(result)} series")
            if not ok:
                failures.append(f"panel '{title}' [{legend}] returned no data: {expr}")
        # panels without a query would pass silently
        for p in dashboard["panels"]:
            if p["type"] != "row" and not p.get("targets"):
                failures.append(f"panel '{p['title']}' has no query")
        # the traffic did what it is for, so those panels show more than zeros
        for what in ("mixserve_prefix_cache_hits_total", "mixserve_preemptions_total",
                     "mixserve_requests_rejected_total"):
            total = sum(float(r["value"][1]) for r in prom.query(f"sum({what})"))
            print(f"{what}: {total:g}")
            if total <= 0:
                failures.append(f"the traffic caused no {what}")
        # the $model variable's values (Grafana's label_values(mixserve_requests_running, model))
        models = prom.api("label/model/values", **{"match[]": "mixserve_requests_running"})
        print(f"$model values: {models}")
        if sorted(models) != ["default", "hybrid_b"]:
            failures.append(f"$model variable: got {models}")

        # every alert rule evaluates without error against the real series
        def evaluated():
            rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
            return rules and all(r["health"] != "unknown" for r in rules)
        wait_until(evaluated, 30, "the alert rules to be evaluated")
        rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
        for r in rules:
            if r["health"] != "ok":
                failures.append(f"rule {r['name']}: {r['health']} {r.get('lastError', '')}")
        print(f"{len(rules)} alert and recording rules evaluated")

        if failures:
            print("\n".join(["FAILED:"] + failures))
            print(f"logs in {tmp}")
            return 1
        print(f"all {len(queries)} panel queries of {len(dashboard['panels'])} panels returned data")
        shutil.rmtree(tmp, ignore_errors=True)
        return 0
    finally:
        for p in (prom.proc if prom else None, server):
            if p and p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    sys.exit(main())
