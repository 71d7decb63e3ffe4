#!/usr/bin/env python3
"""Checks deploy/compose and the Grafana provisioning and dashboards, offline.

The compose files (alone and with the GPU override) are validated against the Compose schema by
Debian's docker-compose (`config -q` needs no engine). Then the pieces must fit together: the
build target is a Dockerfile stage, every bind-mounted path exists, every mixserve flag is
known to `mixserve serve --help`, Prometheus scrapes the mixserve service on its --http-port,
stop_grace_period exceeds --drain-seconds, Grafana's data source points at the prometheus
service and its dashboard provider at the mounted deploy/grafana, and each dashboard is
well-formed (unique panel ids, panels on the 24-column grid, every query on the ${datasource}
variable, the $model variable defined).

usage: check_compose.py MIXSERVE_BINARY SOURCE_DIR
"""
import glob
import json
import os
import re
import subprocess
import sys

import yaml

failures = []


def fail(msg):
    failures.append(msg)


def seconds(text):
    m = re.fullmatch(r"(\d+)(s|m)", str(text))
    return int(m.group(1)) * (60 if m.group(2) == "m" else 1)


def main():
    binary, root = sys.argv[1], os.path.abspath(sys.argv[2])
    cdir = f"{root}/deploy/compose"
    base = ["docker-compose", "--project-directory", cdir, "-f", f"{cdir}/docker-compose.yml"]
    for files in ([], ["-f", f"{cdir}/docker-compose.gpu.yml"]):
        r = subprocess.run(base + files + ["config"], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"docker-compose config {' '.join(files[1:])}: {r.stderr.strip()}")
            continue
        cfg = yaml.safe_load(r.stdout)  # merged and normalised: paths absolute
        svc = cfg["services"]
        for name in ("mixserve", "prometheus", "grafana"):
            if name not in svc:
                fail(f"compose: no service {name}")
        m = svc["mixserve"]
        with open(f"{root}/Dockerfile") as f:
            stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", f.read(), re.M | re.I)
        if m["build"]["target"] not in stages:
            fail(f"compose: build target {m['build']['target']} is not a Dockerfile stage")
        if os.path.realpath(m["build"]["context"]) != root:
            fail("compose: the build context is not the repository root")
        help_text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, check=True).stdout
        flags = {}
        for i, a in enumerate(m["command"]):
            if a.startswith("--"):
                flags[a[2:]] = m["command"][i + 1]
                if f"--{a[2:]}" not in help_text:
                    fail(f"compose: mixserve has no flag {a}")
        if seconds(m["stop_grace_period"]) <= float(flags.get("drain-seconds", 30)):
            fail("compose: stop_grace_period does not exceed --drain-seconds")
        published = {str(p["target"]) for p in m["ports"]}
        for f in ("http-port", "grpc-port"):
            if flags[f] not in published:
                fail(f"compose: --{f} {flags[f]} is not published")
        for name, s in svc.items():
            for v in s.get("volumes", []):
                src = v.split(":")[0] if isinstance(v, str) else v.get("source", "")
                if src.startswith("/") and not os.path.exists(src):
                    fail(f"compose: {name} mounts {src}, which does not exist")
        if failures:  # the checks below read the mounted files
            break
        # Prometheus scrapes the mixserve service on its REST port
        mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["prometheus"]["volumes"] if v.startswith("/")}
        with open(f"{mounts['/etc/prometheus']}/prometheus.yml") as f:
            prom = yaml.safe_load(f)
        targets = [t for j in prom["scrape_configs"] for sc in j["static_configs"] for t in sc["targets"]]
        if f"mixserve:{flags['http-port']}" not in targets:
            fail(f"prometheus.yml scrapes {targets}, not mixserve:{flags['http-port']}")
        # Grafana: data source -> prometheus service, provider path -> mounted dashboards
        gm = {v.split(":")[1]: v.split(":")[0] for v in svc["grafana"]["volumes"] if v.startswith("/")}
        prov = gm["/etc/grafana/provisioning"]
        for path in glob.glob(f"{prov}/datasources/*.yml"):
            with open(path) as f:
                for ds in yaml.safe_load(f)["datasources"]:
                    if ds["url"] != "http://prometheus:9090":
                        fail(f"{path}: data source url {ds['url']} is not the prometheus service")
                    if ds["jsonData"]["timeInterval"] != prom["global"]["scrape_interval"]:
                        fail(f"{path}: timeInterval differs from Prometheus' scrape_interval")
        for path in glob.glob(f"{prov}/dashboards/*.yml"):
            with open(path) as f:
                for p in yaml.safe_load(f)["providers"]:
                    if p["options"]["path"] not in gm:
                        fail(f"{path}: provider path {p['options']['path']} is not mounted")
                    elif not glob.glob(f"{gm[p['options']['path']]}/*.json"):
                        fail(f"{path}: no dashboards in {gm[p['options']['path']]}")
        home = svc["grafana"]["environment"].get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
        if home and not any(home.startswith(t + "/") and os.path.exists(s + home[len(t):]) for t, s in gm.items()):
            fail(f"compose: home dashboard {home} is not a mounted file")
    print("compose: validated by docker-compose, cross-references checked")

    # ---- dashboards
    for path in glob.glob(f"{root}/deploy/grafana/*.json"):
        with open(path) as f:
            d = json.load(f)
        name = os.path.basename(path)
        variables = {v["name"]: v for v in d["templating"]["list"]}
        if variables.get("datasource", {}).get("type") != "datasource":
            fail(f"{name}: no datasource variable")
        if "model" not in variables:
            fail(f"{name}: no model variable")
        if not d.get("uid"):
            fail(f"{name}: no uid (links and provisioning need a stable one)")
        ids = set()
        def walk(panels):
            for p in panels:
                if p["id"] in ids:
                    fail(f"{name}: panel id {p['id']} is used twice")
                ids.add(p["id"])
                g = p["gridPos"]
                if g["x"] < 0 or g["x"] + g["w"] > 24:
                    fail(f"{name}: panel '{p['title']}' is off the 24-column grid")
                if p["type"] != "row":
                    if p.get("datasource", {}).get("uid") != "${datasource}":
                        fail(f"{name}: panel '{p['title']}' does not use the datasource variable")
                    for t in p.get("targets", []):
                        if t.get("datasource", {}).get("uid") != "${datasource}":
                            fail(f"{name}: a query of '{p['title']}' does not use the datasource variable")
                        if "mixserve_" in t["expr"] and "$model" not in t["expr"] and "http_responses" not in t["expr"]:
                            fail(f"{name}: a query of '{p['title']}' ignores $model")
                walk(p.get("panels", []))
        walk(d["panels"])
        print(f"{name}: {len(ids)} panels well-formed")

    if failures:
        print("\n".join(["FAILED:"] + failures))
        return 1
    print("compose and Grafana: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
