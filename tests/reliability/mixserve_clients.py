"""Real clients for the reliability tests and the soak: REST/SSE over raw asyncio sockets (so a
test controls every byte and can vanish at any point), gRPC through grpc.aio with stubs made by
Debian's protoc, and the server's /metrics and /proc figures."""
import asyncio
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "clients"))
import mixserve_server  # noqa: E402


class Server(mixserve_server.Server):
    """tests/clients' server, which must also exit 0 on the SIGTERM that stops it: under ASan a
    leak, and under any build a crash while draining, fails the test that started it."""

    def __exit__(self, kind, value, tb):
        self.stop()
        if kind is None and self.proc.returncode != 0:
            raise AssertionError(f"the server exited {self.proc.returncode} when stopped:\n" + self.output()[-3000:])

_stubs = None


def grpc_stubs():
    """(generation_pb2, generation_pb2_grpc), generated once per process into a temp folder."""
    global _stubs
    if _stubs is None:
        out = tempfile.mkdtemp(prefix="mixserve-stubs-")
        subprocess.run(["protoc", "--proto_path=" + os.path.join(ROOT, "proto"), "--python_out=" + out,
                        "--grpc_out=" + out, "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin",
                        os.path.join(ROOT, "proto", "mixserve", "v1", "generation.proto")], check=True)
        sys.path.insert(0, out)
        from mixserve.v1 import generation_pb2, generation_pb2_grpc
        _stubs = generation_pb2, generation_pb2_grpc
    return _stubs


def http_request(method, path, body=b"", headers=()):
    """The bytes of one HTTP/1.1 request that asks the server to close the connection after it."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if body or method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += list(headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def dechunk(data):
    """Decodes a chunked body; returns (body, complete) where complete means the 0-chunk came."""
    out, pos = bytearray(), 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            return bytes(out), False
        size = int(data[pos:end].split(b";")[0] or b"0", 16)
        if size == 0:
            return bytes(out), True
        if end + 2 + size > len(data):
            return bytes(out), False
        out += data[end + 2:end + 2 + size]
        pos = end + 4 + size


def parse_response(raw):
    """(status, lower-case headers, body, complete) of a whole HTTP/1.1 response read to EOF."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        return 0, {}, b"", False
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body, complete = dechunk(rest)
    else:
        length = int(headers.get("content-length", len(rest)))
        body, complete = rest[:length], len(rest) >= length
    return status, headers, body, complete


async def http_exchange(port, raw_request, timeout=60):
    """Sends raw bytes, reads to EOF; returns parse_response's tuple."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw_request)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    return parse_response(raw)


def sse_events(body):
    """The JSON payloads of an SSE body and whether it ended with data: [DONE]."""
    events, done = [], False
    for block in body.decode().split("\n\n"):
        if not block.startswith("data: "):
            continue
        data = block[len("data: "):]
        if data == "[DONE]":
            done = True
        else:
            events.append(json.loads(data))
    return events, done


def check_rest_stream(status, body, complete):
    """Checks one REST stream that asked for logprobs (so every chunk says which tokens it carries)
    and include_usage. Returns (finish_reason, token texts, usage) or raises ValueError saying what
    is wrong: an error event, no finish, no [DONE], or fewer/more tokens than the usage says."""
    if status != 200:
        raise ValueError(f"http {status}: {body[:200]!r}")
    if not complete:
        raise ValueError("truncated: the chunked body never ended")
    events, done = sse_events(body)
    tokens, finish, usage = [], None, None
    for e in events:
        if "error" in e:
            raise ValueError(f"error event: {e['error']}")
        if e.get("usage"):
            usage = e["usage"]
        for c in e.get("choices", []):
            if c.get("logprobs"):
                tokens += c["logprobs"]["tokens"]
            if c.get("finish_reason"):
                finish = c["finish_reason"]
    if not done:
        raise ValueError("truncated: no data: [DONE]")
    if finish is None or usage is None:
        raise ValueError(f"truncated: finish {finish}, usage {usage}")
    if len(tokens) != usage["completion_tokens"]:
        raise ValueError(f"truncated: {len(tokens)} tokens streamed, usage says {usage['completion_tokens']}")
    return finish, tokens, usage


async def rest_stream(port, request, timeout=300):
    """One streamed completion over REST; returns check_rest_stream's tuple."""
    body = dict(request, stream=True, logprobs=0, stream_options={"include_usage": True})
    status, _, data, complete = await http_exchange(
        port, http_request("POST", "/v1/completions", json.dumps(body).encode()), timeout)
    return check_rest_stream(status, data, complete)


GRPC_FINISH = {1: "stop", 2: "length", 3: "cancelled", 4: "deadline", 5: "error"}


async def grpc_stream(stub, request, timeout=300):
    """One Generate call; returns (finish_reason, token ids, usage dict) or raises ValueError."""
    import grpc
    pb, _ = grpc_stubs()
    req = pb.GenerateRequest(**request)
    ids, finish, usage = [], None, None
    call = stub.Generate(req, timeout=timeout)
    try:
        async for r in call:
            ids += list(r.token_ids)
            if r.finish_reason:
                finish = GRPC_FINISH.get(r.finish_reason, str(r.finish_reason))
                usage = {"prompt_tokens": r.usage.prompt_tokens, "completion_tokens": r.usage.completion_tokens}
    except grpc.aio.AioRpcError as e:
        raise ValueError(f"grpc {e.code().name}: {e.details()}") from None
    if finish is None:
        raise ValueError("truncated: the stream ended without a finish reason")
    if len(ids) != usage["completion_tokens"]:
        raise ValueError(f"truncated: {len(ids)} tokens streamed, usage says {usage['completion_tokens']}")
    return finish, ids, usage


def parse_metrics(text):
    """{'name{labels}': value} of every sample line."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


async def metrics(port):
    status, _, body, _ = await http_exchange(port, http_request("GET", "/metrics"), timeout=30)
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    return parse_metrics(body.decode())


def metric_sum(samples, name, **labels):
    """Sum of name's samples whose labels include every given label."""
    total = 0.0
    for key, v in samples.items():
        n, _, rest = key.partition("{")
        if n == name and all(f'{k}="{val}"' in rest for k, val in labels.items()):
            total += v
    return total


def finished_by_reason(samples):
    reasons = {}
    for key, v in samples.items():
        if key.startswith("mixserve_requests_total{"):
            reason = key.split('finish_reason="')[1].split('"')[0]
            reasons[reason] = reasons.get(reason, 0) + v
    return reasons


def proc_status(pid, field):
    """A number from /proc/PID/status (kB fields in bytes)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                parts = line.split()
                return int(parts[1]) * (1024 if parts[-1] == "kB" else 1)
    return 0


def rss_bytes(pid):
    return proc_status(pid, "VmRSS")


def mapping_rss_bytes(pid, min_size):
    """Resident bytes of the process's anonymous mappings of at least min_size bytes (from
    /proc/PID/smaps): the server's state pool is one such mapping, touched as pages are first used."""
    total, size, anonymous = 0, 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):  # a mapping's first line
                anonymous = len(head) == 5  # no path: not a file, the heap or the stack
                size = 0
            elif head[0] == "Size:":
                size = int(head[1]) * 1024
            elif head[0] == "Rss:" and anonymous and size >= min_size:
                total += int(head[1]) * 1024
    return total


def raise_fd_limit():
    """Soft fd limit up to the hard one, for this process and the server it starts."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def wait_idle(port, timeout=20):
    """Polls /metrics until nothing runs or waits and no state-pool page is used (the server must
    run with --cache-entries 0, or cached prefixes hold pages); returns the last samples."""
    end = asyncio.get_running_loop().time() + timeout
    while True:
        m = await metrics(port)
        idle = (metric_sum(m, "mixserve_requests_running") == 0 and metric_sum(m, "mixserve_requests_waiting") == 0
                and metric_sum(m, "mixserve_state_pool_pages_used") == 0)
        if idle or asyncio.get_running_loop().time() > end:
            return m
        await asyncio.sleep(0.1)


async def check_accounted(port, completed, vanished_min, vanished_max, early_reasons=("cancelled",)):
    """Every request accounted for, nothing leaks. `completed`: completions the clients received
    in full; vanished_min..vanished_max: how many requests the clients abandoned may have reached
    the engine (at least those abandoned after a token or the response header, at most every one
    whose whole request was sent). The server's stop+length finishes cover every received
    completion, its finishes in all add up to completed + the abandoned ones it got, nothing ended
    for another reason than early_reasons, and running, waiting and pool pages are back to 0."""
    m = await wait_idle(port)
    reasons = finished_by_reason(m)
    done = reasons.get("stop", 0) + reasons.get("length", 0)
    early = sum(reasons.get(r, 0) for r in early_reasons)
    others = {r: v for r, v in reasons.items() if v and r not in ("stop", "length", *early_reasons)}
    problems = []
    if done < completed:
        problems.append(f"the server finished {done} requests, the clients received {completed} completions")
    if not vanished_min <= done + early - completed <= vanished_max:
        problems.append(f"{done + early - completed} abandoned requests reached the engine, expected "
                        f"{vanished_min}..{vanished_max}")
    if others:
        problems.append(f"unexpected finish reasons {others}")
    for g in ("mixserve_requests_running", "mixserve_requests_waiting", "mixserve_state_pool_pages_used"):
        if metric_sum(m, g) != 0:
            problems.append(f"{g} = {metric_sum(m, g)} at the end")
    if problems:
        raise AssertionError("; ".join(problems) + f" (finish reasons {reasons})")
    print(f"accounted for: {completed} completions received, {done + early - completed:.0f} abandoned requests reached "
          f"the engine ({vanished_min}..{vanished_max}), finish reasons {dict((k, v) for k, v in reasons.items() if v)}; "
          "running, waiting and pool pages 0")
    return reasons


async def serving(server, grpc_too=True):
    """A request on each port still completes: the server keeps serving."""
    finish, toks, _ = await rest_stream(server.http_port, {"prompt": "And God said", "max_tokens": 4, "ignore_eos": True})
    assert finish == "length" and len(toks) == 4, (finish, toks)
    if grpc_too:
        import grpc
        _, pb_grpc = grpc_stubs()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
            finish, ids, _ = await grpc_stream(pb_grpc.TextGenerationStub(ch),
                                               {"prompt": "And God said", "max_tokens": 4, "ignore_eos": True}, timeout=30)
            assert finish == "length" and len(ids) == 4, (finish, ids)
    return 2 if grpc_too else 1


def main_args():
    """argv of every reliability test: the mixserve binary (then mixserve-cli, used by some)."""
    if len(sys.argv) not in (2, 3):
        sys.exit(f"usage: {sys.argv[0]} path/to/mixserve [path/to/mixserve-cli]")
    return sys.argv[1]
