#!/usr/bin/python3
"""Clients that vanish at random points, all at once against one server: REST clients that leave
before their headers are complete, in the middle of the body, right after sending the request,
right after the first token or mid-stream (half with FIN, half with RST), and gRPC calls cancelled
before any response, after the first token, mid-stream, or by closing their channel. Beside them
ordinary clients finish. Then every request is accounted for and nothing leaks."""
import asyncio
import json
import random
import socket
import struct
import sys

import mixserve_clients as mc

REQUEST = {"prompt": "And God said", "max_tokens": 120, "ignore_eos": True, "temperature": 0.8}


class Tally:
    def __init__(self):
        self.completed = 0
        self.vanished_sure = 0   # left after the engine had the request (a token or the header came)
        self.vanished_maybe = 0  # left after sending the whole request, before any answer
        self.points = {}

    def count(self, point):
        self.points[point] = self.points.get(point, 0) + 1


async def rest_client(port, point, rng, tally):
    if point == "complete":
        finish, toks, _ = await mc.rest_stream(port, dict(REQUEST, seed=rng.randrange(1000)))
        assert finish == "length" and len(toks) == REQUEST["max_tokens"], (finish, len(toks))
        tally.completed += 1
        return tally.count("rest complete")
    body = json.dumps(dict(REQUEST, stream=True, seed=rng.randrange(1000))).encode()
    raw = mc.http_request("POST", "/v1/completions", body)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if rng.random() < 0.5:  # leave with a reset instead of a FIN
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    head_end = raw.index(b"\r\n\r\n") + 4
    try:
        if point == "mid_headers":
            writer.write(raw[:rng.randrange(1, head_end - 2)])
        elif point == "mid_body":
            writer.write(raw[:head_end + rng.randrange(0, len(body) - 1)])
        elif point == "after_request":
            writer.write(raw)
            tally.vanished_maybe += 1
        else:
            writer.write(raw)
            data = b""
            events = 1 if point == "after_first_token" else rng.randrange(2, 40)
            while data.count(b"data: ") < events:
                chunk = await asyncio.wait_for(reader.read(4096), 120)
                if not chunk:
                    raise AssertionError(f"{point}: the server closed the stream early: {data[-300:]!r}")
                data += chunk
            tally.vanished_sure += 1
        await writer.drain()
    finally:
        writer.close()
    tally.count("rest " + point)


async def grpc_client(channel_target, point, rng, tally):
    import grpc
    pb, pb_grpc = mc.grpc_stubs()
    channel = grpc.aio.insecure_channel(channel_target, options=[("grpc.use_local_subchannel_pool", 1)])
    stub = pb_grpc.TextGenerationStub(channel)
    call = stub.Generate(pb.GenerateRequest(**REQUEST, seed=rng.randrange(1000)), timeout=120)
    try:
        if point == "before_response":
            await asyncio.sleep(rng.random() * 0.01)
            call.cancel()
            tally.vanished_maybe += 1
        elif point == "complete":
            ids, finish = [], None
            async for r in call:
                ids += r.token_ids
                finish = r.finish_reason or finish
            assert finish == 2 and len(ids) == REQUEST["max_tokens"], (finish, len(ids))
            tally.completed += 1
        else:
            wanted = 1 if point == "after_first_token" else rng.randrange(2, 40)
            got = 0
            async for r in call:
                got += len(r.token_ids)
                if got >= wanted:
                    break
            assert got >= wanted, f"{point}: the stream ended after {got} tokens"
            call.cancel()
            tally.vanished_sure += 1
    finally:
        await channel.close()
    tally.count("grpc " + point)


async def killed_process_client(cli, port, tally):
    """A client process killed mid-stream: the kernel closes its connection, nothing is said.
    (grpc.aio's channel.close() is no such test: it leaves the connection open, streams and all.)"""
    proc = await asyncio.create_subprocess_exec(
        cli, "--port", str(port), "--max-tokens", "120", "--ignore-eos", "--temperature", "0.8", "And God said",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    first = await asyncio.wait_for(proc.stdout.read(1), 60)
    assert first, "the CLI printed nothing before it was killed"
    try:
        proc.kill()
    except ProcessLookupError:  # it streamed all 120 tokens before the kill landed: a completion
        assert await proc.wait() == 0, "the CLI failed"
        tally.completed += 1
        tally.count("grpc process_finished_before_the_kill")
        return
    await proc.wait()
    tally.vanished_sure += 1
    tally.count("grpc process_killed")


async def main(binary, cli):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    rest_points = ["mid_headers", "mid_body", "after_request", "after_first_token", "mid_stream", "complete"]
    grpc_points = ["before_response", "after_first_token", "mid_stream", "complete"]
    with mc.Server(binary, mc.ROOT, "--cache-entries", "0") as server:
        tally = Tally()
        clients = [rest_client(server.http_port, rest_points[i % len(rest_points)], rng, tally) for i in range(72)]
        clients += [grpc_client(f"127.0.0.1:{server.grpc_port}", grpc_points[i % len(grpc_points)], rng, tally)
                    for i in range(48)]
        clients += [killed_process_client(cli, server.grpc_port, tally) for _ in range(8)]
        rng.shuffle(clients)
        results = await asyncio.gather(*clients, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for e in errors:
            print("client failed:", repr(e))
        assert not errors, f"{len(errors)} clients failed"
        print("vanish points:", tally.points)
        completed = tally.completed + await mc.serving(server)
        await mc.check_accounted(server.http_port, completed, tally.vanished_sure,
                                 tally.vanished_sure + tally.vanished_maybe)
        assert "stopped" in server.output() or server.proc.poll() is None


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} path/to/mixserve path/to/mixserve-cli")
    asyncio.run(main(sys.argv[1], sys.argv[2]))
    print("PASSED")
