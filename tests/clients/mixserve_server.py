"""Starts a real `mixserve serve` on free loopback ports for the client tests, and stops it."""
import os
import queue
import re
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
        # One thread reads every line from the start (so the server never blocks on a full pipe)
        # and hands over the ports. (select() on the pipe beside readline() could miss the
        # "listening" line when both lines arrived in one read: it sat in Python's buffer while
        # select() waited on an empty pipe until the deadline — "the server did not start".)
        started = queue.Queue()

        def read():
            for line in self.proc.stdout:
                self.lines.append(line)
                m = re.search(r"listening: grpc [^:]+:(\d+).*, https? [^:]+:(\d+)", line)
                if m:
                    started.put((int(m.group(1)), int(m.group(2))))
            started.put(None)  # the server's output ended: it exited

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        try:
            ports = started.get(timeout=30)
        except queue.Empty:
            ports = None
        if ports is None:
            self.stop()
            raise RuntimeError("the server did not start:\n" + self.output())
        self.grpc_port, self.http_port = ports
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
