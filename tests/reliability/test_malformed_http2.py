#!/usr/bin/python3
"""Malformed HTTP/2 on the gRPC port, over raw sockets: a bad preface, garbage frames, oversized
frames, frames on the wrong stream, bad SETTINGS and WINDOW_UPDATE, broken HPACK, a CONTINUATION
flood, RST_STREAM on idle streams, and a rapid-reset storm (Generate calls opened and reset at
once, 500 per connection, three connections at once). The violations HTTP/2 makes connection
errors close the connection; a few that Debian's gRPC (1.51) ignores instead (IGNORED below: it
neither resets nor closes, and creates no state) must at least leave the server's memory bounded.
After each one the server keeps serving gRPC and REST; the storm's calls are all cancelled or never
reach the engine: every request is accounted for and nothing leaks."""
import asyncio
import os
import struct
import time

import mixserve_clients as mc

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    """A literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    def string(s):
        assert len(s) < 127
        return bytes([len(s)]) + s
    return b"\x00" + string(name) + string(value)


def generate_headers(port):
    fields = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/mixserve.v1.TextGeneration/Generate"),
              (b":authority", f"127.0.0.1:{port}".encode()), (b"content-type", b"application/grpc"), (b"te", b"trailers")]
    return b"".join(hpack_literal(n, v) for n, v in fields)


def grpc_message(max_tokens=120):
    pb, _ = mc.grpc_stubs()
    msg = pb.GenerateRequest(prompt="And God said", max_tokens=max_tokens, ignore_eos=True).SerializeToString()
    return b"\x00" + struct.pack(">I", len(msg)) + msg


async def exchange(port, payload, read_for=10.0):
    """Sends payload (in pieces, so a server may close midway), then reads until the server closes.
    Returns (closed, GOAWAY error code or None)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    received = b""
    closed = False
    try:
        for i in range(0, len(payload), 65536):
            writer.write(payload[i:i + 65536])
            await writer.drain()
        end = time.monotonic() + read_for
        while time.monotonic() < end:
            chunk = await asyncio.wait_for(reader.read(65536), end - time.monotonic())
            if not chunk:
                closed = True
                break
            received += chunk
    except (ConnectionError, asyncio.TimeoutError) as e:
        closed = not isinstance(e, asyncio.TimeoutError)
    finally:
        writer.transport.abort()
    return closed, frames_received(received)


def frames_received(data):
    """{frame type name: count} of the server's frames, and GOAWAY's error code when one came."""
    names = {DATA: "DATA", HEADERS: "HEADERS", RST_STREAM: "RST_STREAM", SETTINGS: "SETTINGS", PING: "PING",
             GOAWAY: "GOAWAY", WINDOW_UPDATE: "WINDOW_UPDATE"}
    seen, pos = {}, 0
    while pos + 9 <= len(data):
        length, kind = int.from_bytes(data[pos:pos + 3], "big"), data[pos + 3]
        name = names.get(kind, str(kind))
        if kind == GOAWAY and pos + 17 <= len(data):
            name += f"({int.from_bytes(data[pos + 13:pos + 17], 'big')})"
        seen[name] = seen.get(name, 0) + 1
        pos += 9 + length
    return seen


# Connection errors by RFC 9113 that gRPC 1.51's chttp2 transport ignores (checked 2026-11-23): no
# GOAWAY, no RST_STREAM, the connection stays open and idle. That is the library's behaviour (the
# server's code never sees these frames); the test holds the server to bounded memory for them.
IGNORED = {"DATA on stream 0", "HEADERS on stream 0", "HEADERS on an even (server) stream",
           "WINDOW_UPDATE overflowing the window", "RST_STREAM on idle streams",
           "a CONTINUATION flood (16 MB of headers)"}


# ASan's quarantine keeps freed memory resident, so RSS bounds only mean something in a release
# build (scripts/test runs this test there too).
UNDER_ASAN = "ASAN_OPTIONS" in os.environ


def cases(port):
    start = PREFACE + frame(SETTINGS, 0, 0, b"")
    headers = generate_headers(port)
    return [
        ("HTTP/1.1 instead of the preface", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("a preface with one byte wrong", PREFACE[:-3] + b"X\r\n"),
        ("garbage after the preface", PREFACE + bytes(range(256)) * 8),
        ("a frame of 1 MB (max 16 KB)", start + frame(DATA, 0, 1, b"\0" * (1 << 20))),
        ("a frame header announcing 16 MB", start + struct.pack(">I", (1 << 24) - 1)[1:] + bytes([DATA, 0]) + b"\0\0\0\1"),
        ("DATA on stream 0", start + frame(DATA, 0, 0, b"abc")),
        ("HEADERS on stream 0", start + frame(HEADERS, END_HEADERS, 0, headers)),
        ("HEADERS on an even (server) stream", start + frame(HEADERS, END_HEADERS, 2, headers)),
        ("SETTINGS with a bad length", start + frame(SETTINGS, 0, 0, b"\0\0\0")),
        ("SETTINGS_INITIAL_WINDOW_SIZE of 2^31", start + frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 1 << 31))),
        ("SETTINGS_MAX_FRAME_SIZE below the minimum", start + frame(SETTINGS, 0, 0, struct.pack(">HI", 5, 100))),
        ("WINDOW_UPDATE of 0 on the connection", start + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0))),
        ("WINDOW_UPDATE overflowing the window", start + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", (1 << 31) - 1)) * 2),
        ("PING with a bad length", start + frame(PING, 0, 0, b"\0" * 5)),
        ("HPACK index 0", start + frame(HEADERS, END_HEADERS, 1, b"\x80")),
        ("HPACK index out of range", start + frame(HEADERS, END_HEADERS, 1, b"\xff\x7f")),
        ("RST_STREAM on idle streams", start + b"".join(frame(RST_STREAM, 0, 2 * i + 1, struct.pack(">I", 8))
                                                        for i in range(1000))),
        ("CONTINUATION without HEADERS", start + frame(CONTINUATION, END_HEADERS, 1, headers)),
        ("a CONTINUATION flood (16 MB of headers)",
         start + frame(HEADERS, 0, 1, headers) + frame(CONTINUATION, 0, 1, hpack_literal(b"x-pad", b"a" * 100) * 150) * 1100),
    ]


async def rapid_reset(port, calls):
    """Opens `calls` Generate calls on one connection and resets each at once (CVE-2023-44487)."""
    msg = grpc_message()
    headers = generate_headers(port)
    payload = PREFACE + frame(SETTINGS, 0, 0, b"")
    for i in range(calls):
        sid = 2 * i + 1
        payload += frame(HEADERS, END_HEADERS, sid, headers) + frame(DATA, END_STREAM, sid, msg)
        payload += frame(RST_STREAM, 0, sid, struct.pack(">I", 8))  # CANCEL
    return await exchange(port, payload, read_for=5)


async def main(binary):
    with mc.Server(binary, mc.ROOT, "--cache-entries", "0") as server:
        port = server.grpc_port
        completed, failures = 0, []
        # The small cases the library leaves open are sent together, each on its own connection, and
        # waited out once for 3 s (their RSS bound then covers all of them at once); the others one
        # by one, the CONTINUATION flood with the full 10 s so that its memory is measured after the
        # server has read it. Each case still gets its own `serving` check after it.
        short, rest = [], []
        for name, payload in cases(port):
            (short if name in IGNORED and len(payload) < 1 << 20 else rest).append((name, payload))
        rss0 = mc.rss_bytes(server.proc.pid)
        results = await asyncio.gather(*(exchange(port, p, read_for=3.0) for _, p in short))
        grown = mc.rss_bytes(server.proc.pid) - rss0
        for (name, _), (closed, frames) in zip(short, results):
            ok = grown < 64 << 20 or UNDER_ASAN
            print(f"{'ok ' if ok else 'BAD'} {name}: {'closed' if closed else 'left open'}, got {frames}, "
                  f"RSS of the {len(short)} together {grown / 2**20:+.1f} MiB")
            if not ok:
                failures.append(name)
            completed += await mc.serving(server)
        for name, payload in rest:
            rss0 = mc.rss_bytes(server.proc.pid)
            closed, frames = await exchange(port, payload, read_for=10.0)
            grown = mc.rss_bytes(server.proc.pid) - rss0
            ok = (closed or name in IGNORED) and (grown < 64 << 20 or UNDER_ASAN)
            print(f"{'ok ' if ok else 'BAD'} {name}: {'closed' if closed else 'left open'}, got {frames}, "
                  f"RSS {grown / 2**20:+.1f} MiB")
            if not ok:
                failures.append(name)
            completed += await mc.serving(server)
        # three connections' storms at once
        for closed, frames in await asyncio.gather(*(rapid_reset(port, 500) for _ in range(3))):
            print(f"rapid reset of 500 calls: {'closed' if closed else 'open'}, got {frames}")
        completed += await mc.serving(server)
        assert not failures, f"not closed (or the server's memory grew by 64 MiB): {failures}"
        # the storm's calls: each reached the engine or not (reset before the handler ran); every
        # one that did must be cancelled
        await mc.check_accounted(server.http_port, completed, 0, 1500)


if __name__ == "__main__":
    asyncio.run(main(mc.main_args()))
    print("PASSED")
