#!/usr/bin/python3
"""Malformed HTTP/1.1 on the REST port, each on its own connection: bad request lines, bad and
duplicate Content-Length, Transfer-Encoding tricks, a huge header and too many headers, bad
chunks, non-UTF-8 and broken JSON, a truncated body. Each is answered 4xx (a truncated body may
instead be closed without an answer), no engine request is made of it, and the server keeps
serving: an ordinary request after each one completes. Also: a client that keeps sending bytes
while its stream runs does not make the server buffer them without bound."""
import asyncio
import json
import time

import mixserve_clients as mc

GOOD_BODY = json.dumps({"prompt": "And God said", "max_tokens": 2}).encode()


def post(headers, body, path="/v1/completions", version="HTTP/1.1"):
    return (f"POST {path} {version}\r\nHost: x\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode() + body


CASES = [
    # (name, raw bytes, allowed statuses; 0 = closed without an answer)
    ("garbage request line", b"GARBAGE\r\n\r\n", {400}),
    ("unknown HTTP version", b"GET /health HTTP/9.9\r\n\r\n", {400, 505}),
    ("two spaces in the request line", b"GET  /health HTTP/1.1\r\n\r\n", {400}),
    ("request line without version", b"GET /health\r\n\r\n", {400}),
    ("NUL in the target", b"GET /hea\x00lth HTTP/1.1\r\n\r\n", {400}),
    ("10 KB method", b"P" * 10000 + b" /v1/completions HTTP/1.1\r\n\r\n", {400, 405, 431}),
    ("header without a colon", post(["Content-Length: 2", "NoColonHere"], b"{}"), {400}),
    ("Content-Length not a number", post(["Content-Length: abc"], b"{}"), {400}),
    ("negative Content-Length", post(["Content-Length: -1"], b"{}"), {400}),
    ("Content-Length beyond 64 bits", post(["Content-Length: 99999999999999999999999"], b"{}"), {400, 413}),
    ("Content-Length over the body limit", post(["Content-Length: 100000000"], b"{}"), {413}),
    ("two different Content-Lengths", post(["Content-Length: 2", "Content-Length: 3"], b"{}x"), {400}),
    ("Content-Length list", post(["Content-Length: 2, 3"], b"{}x"), {400}),
    ("Content-Length with Transfer-Encoding", post(["Content-Length: 5", "Transfer-Encoding: chunked"],
                                                   b"0\r\n\r\n"), {400}),
    ("bad chunk size", post(["Transfer-Encoding: chunked"], b"zz\r\n{}\r\n0\r\n\r\n"), {400}),
    ("chunk size beyond 64 bits", post(["Transfer-Encoding: chunked"], b"fffffffffffffffffffff\r\n{}\r\n0\r\n\r\n"),
     {400, 413}),
    ("chunk longer than announced", post(["Transfer-Encoding: chunked"], b"1\r\n{}\r\n0\r\n\r\n"), {400}),
    ("huge header", post(["Content-Length: 2", "X-Big: " + "a" * 200000], b"{}"), {431, 400}),
    ("ten thousand headers", post(["Content-Length: 2"] + [f"X-H{i}: v" for i in range(10000)], b"{}"), {431, 400}),
    ("non-UTF-8 JSON", post(["Content-Length: 26"], b'{"prompt": "ab\xff\xfe\xc3", "x":1}'[:26]), {400}),
    ("lone surrogate escape", post(["Content-Length: 21"], b'{"prompt": "\\ud800"}\n'[:21]), {400}),
    ("JSON that is not an object", post(["Content-Length: 7"], b"[1,2,3]"), {400}),
    ("truncated JSON", post([f"Content-Length: {len(GOOD_BODY) - 5}"], GOOD_BODY[:-5]), {400}),
    ("deeply nested JSON", post([f"Content-Length: {20000}"], b"[" * 10000 + b"]" * 10000), {400}),
]


SMUGGLED = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
# A body the server cannot delimit must not be read as the next request: one 4xx, then the
# connection closes, and the request hidden in the body is never answered.
SMUGGLING = [
    ("Transfer-Encoding not ending in chunked", post(["Transfer-Encoding: chunked, gzip"], SMUGGLED)),
    ("unknown Transfer-Encoding", post(["Transfer-Encoding: bogus"], SMUGGLED)),
    ("Transfer-Encoding identity", post(["Transfer-Encoding: identity"], SMUGGLED)),
]


async def smuggling(port, name, raw):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    data = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), 5):
            data += chunk
        closed = True
    except (asyncio.TimeoutError, ConnectionError):
        closed = False
    writer.close()
    ok = closed and data.count(b"HTTP/1.1 ") == 1 and data.startswith(b"HTTP/1.1 4") and b'"mixers"' not in data
    print(f"{'ok ' if ok else 'BAD'} {name}: {'closed' if closed else 'left open'}, "
          f"{data.count(b'HTTP/1.1 ')} responses {data[:12]!r}")
    return ok


async def send_case(port, raw, half_close_after=False):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        if half_close_after:
            writer.write_eof()
        answer = b""
        while True:  # until one whole response came, or the server closed (kept-alive: no EOF)
            chunk = await asyncio.wait_for(reader.read(65536), 15)
            answer += chunk
            if not chunk or mc.parse_response(answer)[3]:
                break
    except ConnectionResetError:
        answer = b""
    finally:
        writer.close()
    return mc.parse_response(answer)[0] if answer else 0, answer


async def flood_during_stream(server):
    """Sends 64 MB of bytes on a connection whose stream is running; the server's RSS must not
    grow by anything like that (it may read and drop them, or stop reading, or close)."""
    port = server.http_port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # large events (logprobs) it never reads: the response stays pending as long as the flood lasts
    body = json.dumps({"prompt": "And God said", "max_tokens": 120, "ignore_eos": True, "stream": True,
                       "logprobs": 20}).encode()
    writer.write(mc.http_request("POST", "/v1/completions", body).replace(b"Connection: close\r\n", b""))
    await writer.drain()
    rss0 = mc.rss_bytes(server.proc.pid)
    sent, block = 0, b"x" * 65536
    t0 = time.monotonic()
    try:
        while sent < 64 << 20 and time.monotonic() - t0 < 20:
            writer.write(block)
            await asyncio.wait_for(writer.drain(), 2)
            sent += len(block)
    except (asyncio.TimeoutError, ConnectionError):
        pass  # the server stopped reading or closed: both bound what it holds
    grown = mc.rss_bytes(server.proc.pid) - rss0
    writer.transport.abort()
    ok = grown < 16 << 20
    print(f"{'ok ' if ok else 'BAD'} flood during a stream: {sent >> 20} MiB sent, server RSS grew {grown / 2**20:.1f} MiB")
    return ok


async def pipelined(port):
    """Three requests in one write on a kept-alive connection are all answered, in order, without
    the client sending anything more."""
    body = json.dumps({"prompt": "And God said", "max_tokens": 3}).encode()
    raw = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
           + post([f"Content-Length: {len(body)}"], body)
           + b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    data = b""
    try:
        while data.count(b"HTTP/1.1 200") < 3:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            if not chunk:
                break
            data += chunk
    except asyncio.TimeoutError:
        pass
    writer.close()
    answered = data.count(b"HTTP/1.1 200")
    in_order = answered == 3 and data.index(b'"status"') < data.index(b'"text_completion"') < data.index(b'"mixers"')
    print(f"{'ok ' if in_order else 'BAD'} pipelined: {answered} of 3 requests answered{' in order' if in_order else ''}")
    return in_order


async def main(binary):
    with mc.Server(binary, mc.ROOT, "--cache-entries", "0", "--body-timeout", "3", "--header-timeout", "3") as server:
        port = server.http_port
        completed = 0
        failures = []
        for name, raw, allowed in CASES:
            status, answer = await send_case(port, raw)
            ok = status in allowed
            if ok and status:
                ok = b'"error"' in answer  # the API's error shape
            print(f"{'ok ' if ok else 'BAD'} {name}: {status} {answer.split(b'{', 1)[-1][:100]!r}")
            if not ok:
                failures.append(f"{name}: {status} (allowed {sorted(allowed)}) {answer[:200]!r}")
            completed += await mc.serving(server, grpc_too=False)
        for name, raw in SMUGGLING:
            if not await smuggling(port, name, raw):
                failures.append(name)
            completed += await mc.serving(server, grpc_too=False)
        status, answer = await send_case(port, post([f"Content-Length: {len(GOOD_BODY)}"], GOOD_BODY[:10]), True)
        print(f"truncated body, then the client half-closes: {status} {answer[:100]!r}")
        if status not in (0, 400, 408):
            failures.append(f"truncated body: {status} {answer[:200]!r}")
        if not await pipelined(port):
            failures.append("pipelined requests")
        if not await flood_during_stream(server):
            failures.append("flood during a stream")
        completed += 1 + await mc.serving(server)
        assert not failures, "\n".join(failures)
        # the flooding client's stream: cancelled when its connection went, or finished first
        await mc.check_accounted(port, completed, 0, 1)


if __name__ == "__main__":
    asyncio.run(main(mc.main_args()))
    print("PASSED")
