"""mixserve-loadgen against a real server at small scale, in one mode (grpc or rest): every request
completes, token counts are the server's (its usage and its /metrics counters), one ITL sample per
token, ordered percentiles, no errors; then a closed loop for a duration on KJV prompts.
Usage: test_loadgen.py SERVER_BINARY LOADGEN_BINARY grpc|rest"""
import csv
import json
import os
import sys
import tempfile

from mixserve_server import Server, check, run, source_dir_of

server_bin, loadgen, mode = sys.argv[1], sys.argv[2], sys.argv[3]
source_dir = source_dir_of(__file__)


def loadgen_run(server, out_dir, name, *args):
    port = server.http_port if mode == "rest" else server.grpc_port
    json_path, csv_path = os.path.join(out_dir, name + ".json"), os.path.join(out_dir, name + ".csv")
    cmd = [loadgen, "--port", str(port), *(["--rest"] if mode == "rest" else []), "--json", json_path, "--csv",
           csv_path, "--save-detailed", *args]
    p = run(cmd, timeout=120)
    check(p.returncode == 0, f"{cmd} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    check("Serving Benchmark Result" in p.stdout, f"no report table:\n{p.stdout}")
    with open(json_path) as f:
        report = json.load(f)
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    return report, rows


def check_common(report, rows, name):
    check(report["failed"] == 0 and report["errors_by_status"] == {}, f"{name}: errors {report['errors_by_status']}")
    check(report["completed"] == len(rows) > 0, f"{name}: {report['completed']} completed, {len(rows)} CSV rows")
    check(all(r["ok"] == "1" for r in rows), f"{name}: a CSV row is not ok")
    check(report["token_count_mismatches"] == 0 and report["requests_without_usage"] == 0,
          f"{name}: streamed tokens differ from usage in {report['token_count_mismatches']} requests")
    # Every SSE chunk carried one token (or, with --rest-logprobs, said how many it carried).
    check(report["requests_with_merged_chunks"] == 0, f"{name}: chunks carrying several tokens")
    # One ITL sample per generated token after each request's first.
    check(report["itl_samples"] == report["total_output_tokens"] - report["completed"],
          f"{name}: {report['itl_samples']} ITL samples for {report['total_output_tokens']} tokens")
    check(sum(len(x) for x in report["itls"]) == report["itl_samples"], f"{name}: per-request ITLs")
    check(sum(report["output_lens"]) == report["total_output_tokens"], f"{name}: output lens")
    check(sum(int(r["completion_tokens"]) for r in rows) == report["total_output_tokens"], f"{name}: CSV tokens")
    for metric in ("ttft", "tpot", "itl", "e2el"):
        p50, p90, p99 = (report[f"p{p}_{metric}_ms"] for p in (50, 90, 99))
        check(0 <= p50 <= p90 <= p99, f"{name}: {metric} percentiles out of order: {p50} {p90} {p99}")
        check(report[f"median_{metric}_ms"] == p50, f"{name}: {metric} median")
        check(report[f"mean_{metric}_ms"] >= 0 and report[f"std_{metric}_ms"] >= 0, f"{name}: {metric} mean/std")
    check(report["p50_ttft_ms"] > 0 and report["p50_e2el_ms"] >= report["p50_ttft_ms"], f"{name}: ttft vs e2el")
    check(report["request_throughput"] > 0 and report["output_throughput"] > 0, f"{name}: throughput")


with Server(server_bin, source_dir) as server, tempfile.TemporaryDirectory() as tmp:
    # Open loop, Poisson arrivals, exact lengths: token ids in, ignore_eos out.
    tokens_before = server.metric("mixserve_generation_tokens_total")
    prompts_before = server.metric("mixserve_prompt_tokens_total")
    report, rows = loadgen_run(server, tmp, "open", "--num-prompts", "40", "--request-rate", "40", "--rest-logprobs",
                               "--random-input-len", "24", "--random-output-len", "20", "--ignore-eos",
                               "--goodput", "ttft:10000", "--goodput", "tpot:10000", "--seed", "1")
    check_common(report, rows, "open loop")
    check(report["completed"] == 40, f"open loop: {report['completed']} of 40 completed")
    check(report["total_input_tokens"] == 40 * 24 and report["total_output_tokens"] == 40 * 20,
          f"open loop: {report['total_input_tokens']} in, {report['total_output_tokens']} out")
    check(report["finish_reasons"] == {"length": 40}, f"open loop: {report['finish_reasons']}")
    check(abs(report["request_goodput"] - report["request_throughput"]) < 1e-9, "every request meets loose SLOs")
    # The server's own counters saw exactly the tokens the report counts.
    check(server.metric("mixserve_generation_tokens_total") - tokens_before == report["total_output_tokens"],
          "the server's generated-token counter disagrees with the report")
    check(server.metric("mixserve_prompt_tokens_total") - prompts_before == report["total_input_tokens"],
          "the server's prompt-token counter disagrees with the report")

    # Closed loop of 4 clients for 3 s on KJV passages with varied lengths, after a warmup.
    report, rows = loadgen_run(server, tmp, "closed", "--duration", "3", "--max-concurrency", "4",
                               "--dataset-name", "kjv", "--random-input-len", "40", "--random-output-len", "24",
                               "--random-range-ratio", "0.5", "--num-warmups", "4", "--temperature", "0.8",
                               "--sampling-seed", "5")  # sampling fixed too: the same tokens every run
    check_common(report, rows, "closed loop")
    check(report["completed"] >= 4 and report["max_concurrency"] == 4, f"closed loop: {report['completed']} completed")
    check(2.5 <= report["duration"] <= 30, f"closed loop duration {report['duration']}")
    check(all(int(r["completion_tokens"]) <= 36 for r in rows), "max_tokens within the drawn range")
print(f"mixserve-loadgen ({mode}): all checks passed")
