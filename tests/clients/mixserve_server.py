"""Starts a real `mixserve serve` on free loopback ports for the client tests, and stops it."""
import os
import re
import select
import signal
import subprocess
import threading
import time
import urllib.request


class Server:
    """`with Server(binary, source_dir) as s:` gives s.grpc_port, s.http_port and s.output()."""

    def __init__(self, binary, source_dir, *extra_args, model="models/default", threads=1):
        self.args = [binary, "serve", "--model", model, "--grpc-port", "0", "--http-port", "0",
                     "--threads", str(threads), *extra_args]
        self.source_dir = source_dir
        self.lines = []
        self.grpc_port = self.http_port = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.args, cwd=self.source_dir, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 30
        while self.grpc_port is None:
            left = deadline - time.time()
            if left <= 0 or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("the server did not start:\n" + self.output())
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            line = self.proc.stdout.readline()
            self.lines.append(line)
            m = re.search(r"listening: grpc [^:]+:(\d+).*, https? [^:]+:(\d+)", line)
            if m:
                self.grpc_port, self.http_port = int(m.group(1)), int(m.group(2))
        # Keep reading so that the server never blocks on a full pipe.
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def output(self):
        return "".join(self.lines)

    def metric(self, name):
        """Sum of a metric's samples in /metrics (all label sets)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total


def run(args, timeout=60, stdin=None):
    """Runs a client; returns CompletedProcess with text output."""
    return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=timeout)


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def source_dir_of(path):
    return os.path.abspath(os.path.join(os.path.dirname(path), "..", ".."))
