"""mixserve-cli against a real server, over gRPC and REST: streaming, usage, every kind of flag,
sessions, errors, and an API key over TLS. Usage: test_cli.py SERVER_BINARY CLI_BINARY"""
import json
import os
import subprocess
import sys
import tempfile

from mixserve_server import Server, check, run, source_dir_of

server_bin, cli = sys.argv[1], sys.argv[2]
source_dir = source_dir_of(__file__)


def complete(port, *args, rest=False, json_out=True):
    cmd = [cli, "--port", str(port), *(["--rest"] if rest else []), *(["--json"] if json_out else []), *args]
    p = run(cmd)
    if not json_out:
        return p
    check(p.returncode == 0, f"{cmd} failed ({p.returncode}): {p.stderr}")
    return json.loads(p.stdout)


def test_plain_server(s):
    ports = {"grpc": s.grpc_port, "rest": s.http_port}
    texts = {}
    for mode, port in ports.items():
        rest = mode == "rest"
        # models: every layer's mixer
        p = run([cli, "--port", str(port), *(["--rest"] if rest else []), "models"])
        check(p.returncode == 0 and "layer 0: aft_full" in p.stdout, f"{mode} models: {p.stdout} {p.stderr}")

        # a seeded completion: the usage is the server's and the streamed tokens agree with it
        r = complete(port, "--max-tokens", "16", "--seed", "7", "--ignore-eos", "In the beginning", rest=rest)
        check(r["ok"] and r["finish_reason"] == "length", f"{mode}: {r}")
        check(r["usage"]["completion_tokens"] == 16 and r["usage"]["prompt_tokens"] > 0, f"{mode} usage: {r}")
        check(r["streamed_tokens"] == 16 and r["token_events"] == 16, f"{mode} events: {r}")
        check(r["ttft_ms"] > 0 and r["e2e_ms"] >= r["ttft_ms"] and r["overall_tokens_per_s"] > 0, f"{mode} timing: {r}")
        check(r["text"], f"{mode}: empty text")
        texts[mode] = r["text"]
        if not rest:
            check(r["server_timing"]["ttft_ms"] > 0, f"gRPC carries the server's timing: {r}")

        # streaming to the terminal: the text on stdout, usage and timing on stderr
        p = complete(port, "--max-tokens", "16", "--seed", "7", "--ignore-eos", "In the beginning", rest=rest,
                     json_out=False)
        check(p.returncode == 0 and p.stdout == texts[mode], f"{mode} streamed {p.stdout!r} vs {texts[mode]!r}")
        for word in ("TTFT", "tokens/s", "cached", "completion 16 tokens"):
            check(word in p.stderr, f"{mode} stats lack {word!r}: {p.stderr}")

        # sampling flags reach the server: greedy is repeatable, a stop string cuts the text there
        greedy = complete(port, "--max-tokens", "24", "--temperature", "0", "--ignore-eos", "And God said", rest=rest)
        again = complete(port, "--max-tokens", "24", "--temperature", "0", "--top-k", "5", "--top-p", "0.9",
                         "--min-p", "0.01", "--ignore-eos", "And God said", rest=rest)
        check(greedy["text"] == again["text"], f"{mode} greedy differs: {greedy['text']!r} {again['text']!r}")
        stop = greedy["text"][6:10]
        stopped = complete(port, "--max-tokens", "24", "--temperature", "0", "--stop", stop, "And God said", rest=rest)
        check(stopped["finish_reason"] == "stop" and stopped["text"] == greedy["text"][:greedy["text"].index(stop)],
              f"{mode} stop {stop!r}: {stopped}")
        penalised = complete(port, "--max-tokens", "8", "--repetition-penalty", "1.3", "--presence-penalty", "0.5",
                             "--frequency-penalty", "0.5", "--priority", "1", "--stop-token-id", "2",
                             "--timeout", "20", "And God said", rest=rest)
        check(penalised["ok"], f"{mode} penalties: {penalised}")
        lp = complete(port, "--max-tokens", "5", "--logprobs", "2", "--ignore-eos", "--seed", "1", "And", rest=rest)
        check(len(lp["logprobs"]) == 5 and all(x["logprob"] <= 0 for x in lp["logprobs"]), f"{mode} logprobs: {lp}")
        ids = complete(port, "--max-tokens", "4", "--prompt-ids", "5,6,7,8", "--ignore-eos", rest=rest)
        check(ids["usage"]["prompt_tokens"] == 4, f"{mode} prompt ids: {ids}")

        # multi-turn: the second turn resends the transcript under the same session and is cached
        p = run([cli, "--port", str(port), *(["--rest"] if rest else []), "--interactive", "--max-tokens", "8",
                 "--seed", "3", "--session", f"test-{mode}"], stdin="And God said\nLet there be light\n")
        check(p.returncode == 0, f"{mode} interactive: {p.stderr}")
        turns = [line for line in p.stderr.splitlines() if line.startswith("[")]
        check(len(turns) == 2, f"{mode} interactive turns: {p.stderr}")
        cached = int(turns[1].split("(")[1].split(" ")[0])
        check(cached > 0, f"{mode}: the second turn reused no state: {turns[1]}")

        # errors: a clear message and a non-zero exit
        p = complete(port, "--model", "nope", "hi", rest=rest, json_out=False)
        check(p.returncode == 1 and "does not exist" in p.stderr, f"{mode} unknown model: {p.returncode} {p.stderr}")
        p = complete(port, "--max-tokens", "1000", "hi", rest=rest, json_out=False)
        check(p.returncode == 1 and "128" in p.stderr, f"{mode} too long: {p.stderr}")

    check(texts["grpc"] == texts["rest"], f"same seed, same text: {texts}")
    p = run([cli, "--port", str(s.grpc_port), "tokenize", "And", "God", "said"])
    check(p.returncode == 0 and p.stdout.strip().endswith("3 tokens"), f"tokenize: {p.stdout} {p.stderr}")
    p = run([cli, "--no-such-flag"])
    check(p.returncode == 2 and "unknown flag" in p.stderr, f"bad flag: {p.stderr}")


def test_tls_and_key(tmp):
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days",
                    "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    with Server(server_bin, source_dir, "--api-key", "sekret", "--tls-cert", cert, "--tls-key", key) as s:
        for rest, port in ((False, s.grpc_port), (True, s.http_port)):
            mode = "rest" if rest else "grpc"
            r = complete(port, "--tls", "--ca-cert", cert, "--api-key", "sekret", "--max-tokens", "4", "hi", rest=rest)
            check(r["ok"] and r["usage"]["completion_tokens"] >= 1, f"{mode} over TLS: {r}")
            p = complete(port, "--ca-cert", cert, "--max-tokens", "4", "hi", rest=rest, json_out=False)
            check(p.returncode == 1 and ("401" in p.stderr or "UNAUTHENTICATED" in p.stderr), f"{mode} no key: {p.stderr}")
        env_run = subprocess.run([cli, "--port", str(s.http_port), "--rest", "--tls", "--ca-cert", cert, "--json",
                                  "--max-tokens", "2", "hi"], capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "MIXSERVE_API_KEY": "sekret"})
        check(env_run.returncode == 0, f"key from MIXSERVE_API_KEY: {env_run.stderr}")


with Server(server_bin, source_dir) as server:
    test_plain_server(server)
with tempfile.TemporaryDirectory() as tmp:
    test_tls_and_key(tmp)
print("mixserve-cli: all checks passed")
