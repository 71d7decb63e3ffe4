#!/usr/bin/env python3
"""Streams a completion from mixserve's OpenAI-compatible REST API with the standard library only.

  clients/examples/rest_stream.py --url http://127.0.0.1:8000 --prompt "And God said" --max-tokens 30

Reads the server-sent events of POST /v1/completions (stream: true) line by line, prints each
text delta as it arrives, then the usage from the final chunk (stream_options.include_usage).
"""
import argparse
import json
import sys
import time
import urllib.error
import urllib.request


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--prompt", default="And God said")
    ap.add_argument("--max-tokens", type=int, default=30)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--api-key", help="sent as Authorization: Bearer KEY")
    args = ap.parse_args()
    body = {"prompt": args.prompt, "max_tokens": args.max_tokens, "temperature": args.temperature,
            "stream": True, "stream_options": {"include_usage": True}}
    if args.seed is not None:
        body["seed"] = args.seed
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = "Bearer " + args.api_key
    req = urllib.request.Request(args.url + "/v1/completions", json.dumps(body).encode(), headers)
    start, first = time.perf_counter(), None
    try:
        with urllib.request.urlopen(req) as res:
            for raw in res:  # one SSE line at a time, as the server sends them
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    sys.exit("error: " + chunk["error"]["message"])
                for choice in chunk["choices"]:
                    first = first or time.perf_counter()
                    print(choice["text"], end="", flush=True)
                if chunk.get("usage"):
                    u = chunk["usage"]
                    print(f"\n[{u['prompt_tokens']} prompt + {u['completion_tokens']} completion tokens, "
                          f"TTFT {(first - start) * 1e3:.1f} ms, total {(time.perf_counter() - start) * 1e3:.1f} ms]",
                          file=sys.stderr)
    except urllib.error.HTTPError as e:
        sys.exit(f"error: HTTP {e.code}: {json.loads(e.read()).get('error', {}).get('message', '')}")


if __name__ == "__main__":
    main()
