#!/usr/bin/env python3
"""Checks the Dockerfile without a Docker engine (none runs on CI), as far as that goes.

Static: every stage a FROM or COPY --from names exists earlier; the targets `cpu` and `gpu`
exist and `gpu` is the default (last); COPY sources exist in the repository and are not dropped
by .dockerignore, and neither is any tracked file the build reads; every ${ARG} a stage uses is
declared in it; the final stages run as a non-root user whose uid is the Kubernetes runAsUser;
HEALTHCHECK probes /health on the image's HTTP port; ENTRYPOINT is `mixserve serve` at the path
the stage script puts it; the image's defaults are MIXSERVE_<FLAG> variables (so that flags given
to `docker run` are appended, not replacing them), each one of `mixserve serve --help`, with
--host 0.0.0.0; every CMD flag exists too.

Dynamic: runs deploy/docker/stage (what the build stages run) on the local build, checks that
the runtime package list names installed Debian packages, then starts the staged server from
the staged directory with the image's ENTRYPOINT, CMD and environment (ports replaced by free
ones) and a flag appended as `docker run IMAGE --max-batch 8` would: /health, /ready and /metrics
answer, and SIGTERM ends it with exit status 0.

usage: check_docker.py MIXSERVE_BINARY SOURCE_DIR
"""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

failures = []


def fail(msg):
    failures.append(msg)


def instructions(path):
    """(INSTRUCTION, argument text) with continuation lines joined and comments dropped."""
    out, cur = [], ""
    with open(path) as f:
        for line in f:
            s = line.rstrip("\n")
            if not cur and (not s.strip() or s.lstrip().startswith("#")):
                continue
            if s.lstrip().startswith("#"):  # a comment inside a continued instruction
                continue
            if s.endswith("\\"):
                cur += s[:-1] + " "
                continue
            cur += s
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            cur = ""
    return out


def ignored(path, patterns):
    """.dockerignore semantics: patterns are anchored at the context root (Go's filepath.Match,
    plus `**` for any number of directories); a match on the path or on a parent directory
    excludes it, `!` re-includes, the last matching pattern wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    result = False
    for p in patterns:
        neg = p.startswith("!")
        pat = (p[1:] if neg else p).strip("/")
        rx = re.escape(pat).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
        rx = rx.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        if any(re.fullmatch(rx, x) for x in prefixes):
            result = not neg
    return result


def main():
    binary, root = sys.argv[1], os.path.abspath(sys.argv[2])
    ins = instructions(f"{root}/Dockerfile")
    with open(f"{root}/.dockerignore") as f:
        patterns = [l.strip() for l in f if l.strip() and not l.startswith("#")]

    # ---- stages
    global_args = set()
    stages = []  # dicts: name, base, args, envs, lines
    for word, rest in ins:
        if word == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            base, name = m.group(1), m.group(2)
            for var in re.findall(r"\$\{?(\w+)", base):
                if var not in global_args:
                    fail(f"FROM {base}: ARG {var} is not declared before the first FROM")
            names = [s["name"] for s in stages]
            if name in names:
                fail(f"stage {name} is defined twice")
            stages.append({"name": name, "base": base, "args": set(), "env": set(), "lines": [],
                           "parent": next((s for s in stages if s["name"] == base), None)})
            continue
        if not stages:
            if word == "ARG":
                global_args.add(rest.split("=")[0])
            continue
        st = stages[-1]
        st["lines"].append((word, rest))
        if word == "ARG":
            st["args"].add(rest.split("=")[0])
        if word == "ENV":
            st["env"].update(re.findall(r"(\w+)=", rest))
    names = [s["name"] for s in stages]
    print("stages: " + ", ".join(f"{s['name']} (from {s['base']})" for s in stages))
    for s in stages:
        def visible(var, st=s):
            while st:
                if var in st["env"]:
                    return True
                st = st["parent"]
            return var in s["args"]
        for word, rest in s["lines"]:
            if word in ("RUN", "ENV", "COPY", "WORKDIR", "USER"):
                for var in re.findall(r"\$\{(\w+)\}", rest):
                    if not visible(var):
                        fail(f"stage {s['name']}: ${{{var}}} is neither an ARG of the stage nor an ENV")
            if word == "COPY":
                args = rest.split()
                src_from = [a.split("=", 1)[1] for a in args if a.startswith("--from=")]
                srcs = [a for a in args if not a.startswith("--")][:-1]
                if src_from:
                    if src_from[0] not in names[:names.index(s["name"])]:
                        fail(f"stage {s['name']}: COPY --from={src_from[0]} names no earlier stage")
                    continue
                for src in srcs:
                    if not os.path.exists(f"{root}/{src}"):
                        fail(f"stage {s['name']}: COPY source {src} does not exist")
                    elif src != "." and ignored(src.rstrip("/"), patterns):
                        fail(f"stage {s['name']}: COPY source {src} is excluded by .dockerignore")
            if word == "RUN":
                for script in re.findall(r"(?:^|\s|&&\s*)((?:deploy|scripts)/[\w/.-]+)", rest):
                    if not os.access(f"{root}/{script}", os.X_OK):
                        fail(f"stage {s['name']}: RUN uses {script}, which is not an executable in the repo")
                    elif ignored(script, patterns):
                        fail(f"stage {s['name']}: {script} is excluded by .dockerignore")
    for target in ("cpu", "gpu"):
        if target not in names:
            fail(f"no stage named {target} (docker build --target {target})")
    if names[-1] != "gpu":
        fail("the last stage (docker build's default target) is not gpu")
    base_of = {s["name"]: s for s in stages}
    root_image = base_of["cpu"]
    while root_image["parent"]:
        root_image = root_image["parent"]
    if not root_image["base"].startswith("debian:12"):
        fail(f"the cpu target is based on {root_image['base']}, not Debian 12")

    # ---- the build context: nothing the build reads is dropped by .dockerignore
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    needed = ("CMakeLists.txt", "CMakePresets.json", "engine/", "kernels/", "server/", "clients/", "proto/",
              "tests/", "bench/", "models/", "scripts/install-deps", "deploy/docker/")
    sent = [t for t in tracked if not ignored(t, patterns)]
    for t in tracked:
        if t.startswith(needed) and ignored(t, patterns):
            fail(f".dockerignore drops {t}, which the build needs")
    size = sum(os.path.getsize(f"{root}/{t}") for t in sent if os.path.isfile(f"{root}/{t}"))
    print(f"build context: {len(sent)} of {len(tracked)} tracked files, {size / 1e6:.1f} MB")

    # ---- runtime settings (inherited by cpu and gpu from their parents)
    def collect(stage, word):
        out = []
        st = base_of[stage]
        chain = []
        while st:
            chain.insert(0, st)
            st = st["parent"]
        for st in chain:
            out += [r for w, r in st["lines"] if w == word]
        return out
    entry = cmd = None
    for target in ("cpu", "gpu"):
        user = collect(target, "USER")
        if not user or user[-1].split(":")[0] in ("root", "0"):
            fail(f"target {target} runs as root")
        elif not user[-1].split(":")[0].isdigit():
            fail(f"target {target}: USER {user[-1]} is not numeric (Kubernetes cannot check runAsNonRoot)")
        entry = json.loads(collect(target, "ENTRYPOINT")[-1])
        cmd = json.loads(collect(target, "CMD")[-1])
        health = collect(target, "HEALTHCHECK")
        if not health or "/health" not in health[-1]:
            fail(f"target {target} has no HEALTHCHECK on /health")
    if entry[1:] != ["serve"] or not entry[0].endswith("/mixserve"):
        fail(f"ENTRYPOINT {entry} is not `mixserve serve`")
    if entry[0] != "/opt/mixserve/bin/mixserve":
        fail(f"ENTRYPOINT {entry[0]} is not where deploy/docker/stage puts the binary")
    flags = {}
    for i, a in enumerate(cmd):
        if a.startswith("--"):
            flags[a[2:]] = cmd[i + 1]
    help_text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    for f in flags:
        if f"--{f}" not in help_text:
            fail(f"CMD flag --{f} is not a flag of mixserve serve")
    # The defaults as environment variables: MIXSERVE_HTTP_PORT=8000 is --http-port 8000.
    env = {}
    for word, rest in [l for st in stages if st["name"] == "runtime" for l in st["lines"]]:
        if word == "ENV":
            env.update(dict(re.findall(r"(MIXSERVE_\w+)=(\S+)", rest)))
    for var, value in env.items():
        if f"(env {var})" not in help_text:
            fail(f"ENV {var} is not the variable of a mixserve serve flag")
        flags.setdefault(var[len("MIXSERVE_"):].lower().replace("_", "-"), value)
    if flags.get("host") != "0.0.0.0":
        fail(f"the image listens on {flags.get('host')}, not 0.0.0.0")
    if any(a.startswith("--") for a in cmd):
        fail(f"CMD {cmd} sets flags: `docker run IMAGE --flag` would replace them all")
    health = collect("gpu", "HEALTHCHECK")[-1]
    if f":{flags.get('http-port', '8000')}/health" not in health:
        fail("HEALTHCHECK does not probe the CMD's --http-port")
    exposed = " ".join(collect("gpu", "EXPOSE")).split()
    for f in ("grpc-port", "http-port"):
        if flags.get(f) not in exposed:
            fail(f"--{f} {flags.get(f)} is not EXPOSEd")
    useradd = " ".join(collect("gpu", "RUN"))
    uid = re.search(r"useradd [^&]*--uid (\d+)", useradd)
    with open(f"{root}/deploy/k8s/deployment.yaml") as f:
        k8s_uid = yaml.safe_load(f)["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    if not uid or int(uid.group(1)) != k8s_uid:
        fail(f"the image's uid {uid and uid.group(1)} is not deploy/k8s's runAsUser {k8s_uid}")
    for target in ("cpu", "gpu"):
        if collect(target, "USER")[-1].split(":")[0] != str(k8s_uid):
            fail(f"target {target}: USER is not uid {k8s_uid}")

    # ---- the staged files, run as the image would run them
    tmp = tempfile.mkdtemp(prefix="mixserve-stage-")
    r = subprocess.run([f"{root}/deploy/docker/stage", binary, tmp], capture_output=True, text=True)
    print(r.stdout.strip(), r.stderr.strip())
    if r.returncode != 0:
        fail(f"deploy/docker/stage failed: {r.stderr.strip()}")
    else:
        app = f"{tmp}/opt/mixserve"
        with open(f"{app}/runtime-packages.txt") as f:
            pkgs = f.read().split()
        for p in pkgs:
            if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0:
                fail(f"runtime package {p} is not an installed Debian package")
        if not any(p.startswith("libgrpc") for p in pkgs):
            fail(f"runtime packages lack gRPC: {pkgs}")
        run_cmd = [f"{tmp}{entry[0]}"] + entry[1:] + [
            a.replace("/opt/mixserve", app) for a in cmd] + ["--max-batch", "8"]
        run_env = dict(os.environ)
        run_env.update(env)
        run_env.update({"MIXSERVE_GRPC_PORT": "0", "MIXSERVE_HTTP_PORT": "0"})
        print("running:", shlex.join(run_cmd), f"(in {app}, with {env} and free ports)")
        proc = subprocess.Popen(run_cmd, cwd=app, env=run_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        port = None
        deadline = time.time() + 30
        lines = []
        while time.time() < deadline and port is None:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"http (\S+):(\d+)", line)
            if line.startswith("listening:") and m:
                port = int(m.group(2))
                if m.group(1) != env.get("MIXSERVE_HOST"):
                    fail(f"the staged server listens on {m.group(1)}, not the image's host")
        if port is None:
            fail("the staged server did not start: " + "".join(lines))
            proc.kill()
        else:
            for path in ("/health", "/ready", "/metrics"):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
                        if resp.status != 200:
                            fail(f"staged server: {path} answered {resp.status}")
                except OSError as e:
                    fail(f"staged server: {path}: {e}")
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(40)
                if code != 0:
                    fail(f"staged server exited with {code} on SIGTERM")
            except subprocess.TimeoutExpired:
                proc.kill()
                fail("staged server did not exit on SIGTERM")
        subprocess.run(["rm", "-rf", tmp])

    if failures:
        print("\n".join(["FAILED:"] + failures))
        return 1
    print("Dockerfile: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
