#!/usr/bin/python3
"""Pool exhaustion and preemption storms: a state pool of 1 MB (1953 pages of 512 bytes; one
123-token request of models/default holds about 770) and 24 long seeded requests at once over gRPC
and REST, so the engine must preempt again and again. Every request completes with all its tokens,
and they equal what the same seeded request gives run alone on the idle server afterwards. Then
every request is accounted for and nothing leaks."""
import asyncio
import random

import grpc

import mixserve_clients as mc

MAX_TOKENS = 120


def request(seed, i):
    prompts = ["And God said", "In the beginning", "And it came to pass", "The LORD is my shepherd"]
    return {"prompt": prompts[i % len(prompts)], "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 0.9,
            "seed": seed + i}


async def run(server, stub, req, transport):
    if transport == "grpc":
        finish, ids, usage = await mc.grpc_stream(stub, req, timeout=240)
        tokens = ids
    else:
        finish, tokens, usage = await mc.rest_stream(server.http_port, req, timeout=240)
    assert finish == "length" and len(tokens) == MAX_TOKENS, (finish, len(tokens))
    return tokens


async def main(binary):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    with mc.Server(binary, mc.ROOT, "--cache-entries", "0", "--pool-bytes", "1000000") as server:
        _, pb_grpc = mc.grpc_stubs()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        stub = pb_grpc.TextGenerationStub(channel)
        requests = [(request(seed, i), "grpc" if i % 2 else "rest") for i in range(24)]
        before = mc.metric_sum(await mc.metrics(server.http_port), "mixserve_preemptions_total")
        together = await asyncio.gather(*[run(server, stub, r, t) for r, t in requests])
        preempted = mc.metric_sum(await mc.metrics(server.http_port), "mixserve_preemptions_total") - before
        print(f"24 requests at once: {preempted:.0f} preemptions")
        assert preempted >= 10, "the pool did not run out: this test tests nothing"
        await mc.wait_idle(server.http_port)
        differ = 0
        for (req, transport), got in zip(requests, together):
            alone = await run(server, stub, req, transport)
            if alone != got:
                differ += 1
                print(f"{transport} {req}: differs under preemption at token "
                      f"{next(i for i, (a, b) in enumerate(zip(alone, got)) if a != b)}")
        assert differ == 0, f"{differ} of 24 requests gave other tokens under preemption than alone"
        print("every request gave the same tokens under preemption as alone")
        completed = 2 * len(requests) + await mc.serving(server)
        await channel.close()
        await mc.check_accounted(server.http_port, completed, 0, 0)


if __name__ == "__main__":
    asyncio.run(main(mc.main_args()))
    print("PASSED")
