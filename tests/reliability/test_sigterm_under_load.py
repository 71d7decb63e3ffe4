#!/usr/bin/python3
"""SIGTERM under load, twice:
- with a grace period long enough (--drain-seconds 120; a release build needs ~10 s, ASan more): 120 requests in flight (gRPC streams, REST
  streams, REST non-streamed, one REST reader that reads slowly) all finish with every promised
  token; requests sent while draining get 503 / UNAVAILABLE; the process exits 0 soon after the
  last request ends;
- with a grace period too short (--drain-seconds 1) for 600 long requests (60,000 tokens: several
  seconds even for a release build on a quiet machine, where 200 finished within the second): each one either
  finishes with every promised token or ends with a clear status (gRPC status with a message, REST
  an error object or error event) — never a stream cut off without a word — and the process exits 0
  within the grace period plus its 2 s shutdown allowance."""
import asyncio
import json
import random
import signal
import time

import grpc

import mixserve_clients as mc

MAX_TOKENS = 100


def request(rng):
    return {"prompt": "And God said", "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 0.8,
            "seed": rng.randrange(1000)}


async def grpc_client(stub, rng, started):
    pb, _ = mc.grpc_stubs()
    call = stub.Generate(pb.GenerateRequest(**request(rng)), timeout=120)
    ids, finish = [], None
    try:
        async for r in call:
            if not ids:
                started.append(1)
            ids += r.token_ids
            finish = r.finish_reason or finish
    except grpc.aio.AioRpcError as e:
        assert e.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE) and e.details(), (e.code(), e.details())
        return "grpc " + e.code().name
    assert finish == 2 and len(ids) == MAX_TOKENS, f"grpc stream ended {finish} after {len(ids)} tokens"
    return "complete"


async def rest_client(port, rng, stream, started, slow=False):
    body = dict(request(rng), stream=stream)
    if stream:
        body.update(logprobs=0, stream_options={"include_usage": True})
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(mc.http_request("POST", "/v1/completions", json.dumps(body).encode()))
    await writer.drain()
    data = b""
    while True:
        chunk = await asyncio.wait_for(reader.read(256 if slow else 65536), 120)
        if not chunk:
            break
        if not data:
            started.append(1)
        data += chunk
        if slow:
            await asyncio.sleep(0.01)
    writer.close()
    status, _, payload, complete = mc.parse_response(data)
    if not stream:
        assert complete, f"a REST response was cut off: {data[-200:]!r}"
        reply = json.loads(payload)
        if status != 200:
            assert "error" in reply and reply["error"]["message"], reply
            return f"rest {status}"
        assert reply["usage"]["completion_tokens"] == MAX_TOKENS, reply
        return "complete"
    assert status == 200 and complete, f"a REST stream was cut off without a word: {data[-300:]!r}"
    events, done = mc.sse_events(payload)
    errors = [e["error"] for e in events if "error" in e]
    if errors:
        assert done and errors[0]["message"], errors
        return f"rest stream error {errors[0]['type']}"
    finish, tokens, _ = mc.check_rest_stream(status, payload, complete)
    assert finish == "length" and len(tokens) == MAX_TOKENS, (finish, len(tokens))
    return "complete"


async def late_requests(server):
    """While draining: REST 503, gRPC UNAVAILABLE (or the port already closed)."""
    try:
        status, _, body, _ = await mc.http_exchange(server.http_port, mc.http_request(
            "POST", "/v1/completions", json.dumps({"prompt": "late", "max_tokens": 2}).encode()), timeout=10)
        assert status == 503 and b"server_error" in body, (status, body)
    except ConnectionError:
        pass
    pb, pb_grpc = mc.grpc_stubs()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        try:
            async for _ in pb_grpc.TextGenerationStub(ch).Generate(pb.GenerateRequest(prompt="late", max_tokens=2), timeout=10):
                pass
            raise AssertionError("a request sent while draining was served")
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, (e.code(), e.details())


async def under_sigterm(binary, drain_seconds, n, rng):
    with mc.Server(binary, mc.ROOT, "--cache-entries", "0", "--drain-seconds", str(drain_seconds)) as server:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        stub = mc.grpc_stubs()[1].TextGenerationStub(channel)
        started = []
        clients = [asyncio.ensure_future(rest_client(server.http_port, rng, True, started, slow=True))]
        for i in range(n - 1):
            kind = i % 3
            clients.append(asyncio.ensure_future(grpc_client(stub, rng, started) if kind == 0 else
                                                 rest_client(server.http_port, rng, kind == 1, started)))
        # SIGTERM once every request is in the engine and some have begun streaming
        end = time.monotonic() + 60
        while time.monotonic() < end:
            m = await mc.metrics(server.http_port)
            if mc.metric_sum(m, "mixserve_requests_running") + mc.metric_sum(m, "mixserve_requests_waiting") + \
                    sum(mc.finished_by_reason(m).values()) >= n and started:
                break
            await asyncio.sleep(0.02)
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.1)
        if drain_seconds > 5:
            await late_requests(server)
        results = await asyncio.gather(*clients, return_exceptions=True)
        await channel.close()
        code = await asyncio.get_running_loop().run_in_executor(None, lambda: server.proc.wait(drain_seconds + 15))
        took = time.monotonic() - t0
    outcomes = {}
    for r in results:
        key = r if isinstance(r, str) else f"FAILED: {str(r)[:60]}"
        outcomes[key] = outcomes.get(key, 0) + 1
    print(f"--drain-seconds {drain_seconds}, {n} requests in flight: exit {code} after {took:.2f} s; {outcomes}")
    print(server.output().strip().splitlines()[-1])
    failed = [r for r in results if not isinstance(r, str)]
    assert not failed, f"{len(failed)} requests ended badly, e.g. {failed[0]!r}"
    assert code == 0, f"exit status {code}"
    return outcomes, took


async def main(binary):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    outcomes, took = await under_sigterm(binary, 120, 120, rng)
    assert outcomes == {"complete": 120}, "with time enough, every request finishes"
    assert took < 120
    outcomes, took = await under_sigterm(binary, 1, 600, rng)
    assert outcomes.get("complete", 0) < 600, "the grace period was long enough: this tests nothing"
    assert took < 1 + 2 + 3, f"exit took {took:.2f} s with --drain-seconds 1"


if __name__ == "__main__":
    asyncio.run(main(mc.main_args()))
    print("PASSED")
