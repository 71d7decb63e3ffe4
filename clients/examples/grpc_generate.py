#!/usr/bin/env python3
"""A minimal gRPC client for mixserve.v1.TextGeneration, with Debian's python3-grpcio.

  clients/examples/grpc_generate.py --target 127.0.0.1:50051 --prompt "And God said" --max-tokens 30

Generates the Python stubs from proto/ with Debian's protoc and grpc_python_plugin on first use
(into a temporary folder), then streams the completion to stdout.
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stubs():
    out = tempfile.mkdtemp(prefix="mixserve-stubs-")
    subprocess.run(["protoc", "--proto_path=" + os.path.join(ROOT, "proto"), "--python_out=" + out, "--grpc_out=" + out,
                    "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin",
                    os.path.join(ROOT, "proto", "mixserve", "v1", "generation.proto")], check=True)
    sys.path.insert(0, out)
    from mixserve.v1 import generation_pb2, generation_pb2_grpc
    return generation_pb2, generation_pb2_grpc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="127.0.0.1:50051")
    ap.add_argument("--model", default="")
    ap.add_argument("--prompt", default="And God said")
    ap.add_argument("--max-tokens", type=int, default=30)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--api-key", default="")
    args = ap.parse_args()
    import grpc
    pb, pb_grpc = stubs()
    stub = pb_grpc.TextGenerationStub(grpc.insecure_channel(args.target))
    req = pb.GenerateRequest(model=args.model, prompt=args.prompt, max_tokens=args.max_tokens,
                             temperature=args.temperature)
    if args.seed is not None:
        req.seed = args.seed
    metadata = [("authorization", "Bearer " + args.api_key)] if args.api_key else []
    sys.stdout.write(args.prompt)
    last = None
    for res in stub.Generate(req, metadata=metadata, timeout=60):
        sys.stdout.write(res.text)
        sys.stdout.flush()
        last = res
    print(flush=True)
    print(f"finish={pb.FinishReason.Name(last.finish_reason)} prompt_tokens={last.usage.prompt_tokens} "
          f"completion_tokens={last.usage.completion_tokens} ttft={last.timing.time_to_first_token_seconds * 1e3:.1f}ms",
          file=sys.stderr)


if __name__ == "__main__":
    main()
