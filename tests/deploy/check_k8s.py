#!/usr/bin/env python3
"""Validates deploy/k8s offline.

Schema: every object is checked field by field against the model classes of Debian's
python3-kubernetes (22.6, generated from the Kubernetes 1.22 OpenAPI spec): unknown fields
(typos), wrong types and missing required fields fail, as `kubeconform -strict` would. Kubernetes
1.22 predates autoscaling/v2, so a HorizontalPodAutoscaler is checked against autoscaling/v2beta2,
whose schema autoscaling/v2 took over unchanged. kubeconform itself is not packaged by Debian
and the npm validators found do not reject unknown fields (docs/deploy.md).

Semantics: probes on /ready and /health, the GPU limit, the grace period covering preStop plus
--drain-seconds, named ports, selectors, the HPA's target and metric (the adapter rule's name),
and every server flag known to `mixserve serve --help`.

usage: check_k8s.py MIXSERVE_BINARY SOURCE_DIR
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

import yaml
from kubernetes import client

failures = []


def fail(msg):
    failures.append(msg)


PRIMITIVES = {"str": str, "bool": bool, "int": int, "float": (int, float), "object": object, "datetime": str}


def check(value, type_name, path):
    """Checks value against a python3-kubernetes type name such as 'list[V1Container]'."""
    if value is None:
        return
    m = re.fullmatch(r"list\[(.+)\]", type_name)
    if m:
        if not isinstance(value, list):
            return fail(f"{path}: expected a list")
        for i, v in enumerate(value):
            check(v, m.group(1), f"{path}[{i}]")
        return
    m = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if m:
        if not isinstance(value, dict):
            return fail(f"{path}: expected a map")
        for k, v in value.items():
            check(v, m.group(1), f"{path}.{k}")
        return
    if type_name in PRIMITIVES:
        ok = isinstance(value, PRIMITIVES[type_name]) and not (type_name in ("int", "float") and isinstance(value, bool))
        if not ok:
            fail(f"{path}: expected {type_name}, got {value!r}")
        return
    cls = getattr(client, type_name)
    if not isinstance(value, dict):
        return fail(f"{path}: expected an object ({type_name})")
    by_json = {j: a for a, j in cls.attribute_map.items()}
    for key in value:
        if key not in by_json:
            fail(f"{path}: unknown field '{key}' in {type_name}")
    known = {by_json[k]: v for k, v in value.items() if k in by_json}
    try:  # the generated setters refuse None for required fields
        cls(**known)
    except ValueError as e:
        fail(f"{path}: {e}")
    for attr, v in known.items():
        check(v, cls.openapi_types[attr], f"{path}.{cls.attribute_map[attr]}")


def model_class(api_version, kind):
    version = api_version.split("/")[-1]
    if api_version == "autoscaling/v2":
        version = "v2beta2"  # same schema; see the module docstring
    return version[0].upper() + version[1:] + kind


def serve_flags(binary):
    text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"--([a-z0-9-]+)", text))


def flag_values(args):
    out = {}
    for a in args:
        name, _, value = a[2:].partition("=")
        out[name] = value
    return out


def main():
    binary, root = sys.argv[1], os.path.abspath(sys.argv[2])
    objects = {}
    files = sorted(glob.glob(f"{root}/deploy/k8s/*.yaml"))
    for path in files:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if not doc:
                    continue
                name = f"{os.path.basename(path)}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
                if doc["kind"] == "Kustomization":
                    for r in doc["resources"]:
                        if not os.path.exists(f"{root}/deploy/k8s/{r}"):
                            fail(f"{name}: resource {r} does not exist")
                    continue
                cls = model_class(doc["apiVersion"], doc["kind"])
                if not hasattr(client, cls):
                    fail(f"{name}: no schema for {doc['apiVersion']} {doc['kind']}")
                    continue
                check(doc, cls, name)
                objects[(doc["kind"], doc["metadata"]["name"])] = doc
    print(f"schema-checked {len(objects)} objects in {len(files)} files")
    if failures:  # the checks below read fields the schema check found wrong or missing
        print("\n".join(["FAILED:"] + failures))
        return 1

    dep = objects[("Deployment", "mixserve")]
    pod = dep["spec"]["template"]["spec"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in dep["spec"]["selector"]["matchLabels"].items()):
        fail("Deployment: selector does not match the pod labels")
    c = pod["containers"][0]
    if c["resources"]["limits"].get("nvidia.com/gpu") in (None, "0", 0):
        fail("Deployment: no nvidia.com/gpu limit")
    if c["readinessProbe"]["httpGet"]["path"] != "/ready":
        fail("Deployment: readiness probe is not /ready")
    for probe in ("livenessProbe", "startupProbe"):
        if c[probe]["httpGet"]["path"] != "/health":
            fail(f"Deployment: {probe} is not /health")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if c[probe]["httpGet"]["port"] not in ports:
            fail(f"Deployment: {probe} names an unknown port")
    flags = flag_values(c["args"])
    known = serve_flags(binary)
    for f in flags:
        if f not in known:
            fail(f"Deployment: mixserve serve has no flag --{f}")
    if ports.get("http") != int(flags.get("http-port", 8000)) or ports.get("grpc") != int(flags.get("grpc-port", 50051)):
        fail("Deployment: container ports differ from --http-port / --grpc-port")
    drain = float(flags.get("drain-seconds", 30))
    cmd = c["lifecycle"]["preStop"]["exec"]["command"]
    pre_stop = float(cmd[1]) if cmd[0] == "sleep" else 0
    grace = pod["terminationGracePeriodSeconds"]
    if grace < pre_stop + drain + 5:
        fail(f"Deployment: terminationGracePeriodSeconds {grace} < preStop {pre_stop:g} + drain {drain:g} + 5")
    print(f"grace period {grace} s = preStop {pre_stop:g} s + --drain-seconds {drain:g} s + margin")

    for (kind, name), o in objects.items():
        if kind == "Service":
            if any(labels.get(k) != v for k, v in o["spec"]["selector"].items()):
                fail(f"Service {name}: selector does not match the pods")
            for p in o["spec"]["ports"]:
                if p["targetPort"] not in ports:
                    fail(f"Service {name}: targetPort {p['targetPort']} is not a container port")
            if {p["name"] for p in o["spec"]["ports"]} != {"grpc", "http"}:
                fail(f"Service {name}: expected a grpc and an http port")
        if kind == "PodDisruptionBudget":
            if o["spec"]["selector"]["matchLabels"] != dep["spec"]["selector"]["matchLabels"]:
                fail(f"PodDisruptionBudget {name}: selector differs from the Deployment's")
    hpa = objects[("HorizontalPodAutoscaler", "mixserve")]["spec"]
    if hpa["scaleTargetRef"] != {"apiVersion": "apps/v1", "kind": "Deployment", "name": "mixserve"}:
        fail("HPA: scaleTargetRef is not the Deployment")
    adapter = yaml.safe_load(objects[("ConfigMap", "prometheus-adapter-mixserve")]["data"]["config.yaml"])
    served = {r["name"]["as"] for r in adapter["rules"]}
    for m in hpa["metrics"]:
        if m["type"] == "Pods" and m["pods"]["metric"]["name"] not in served:
            fail(f"HPA: metric {m['pods']['metric']['name']} is not served by the adapter rule")
        if m["type"] == "Pods" and not m["pods"]["metric"]["name"].startswith("mixserve_"):
            fail("HPA: metric is not a mixserve series")

    # deploy/prometheus/prometheus-kubernetes.yml: Debian's Prometheus is built without
    # Kubernetes discovery, so promtool checks it with the discovery block swapped for a static
    # target; what ties it to the manifests and the adapter rule is checked here.
    with open(f"{root}/deploy/prometheus/prometheus-kubernetes.yml") as f:
        prom = yaml.safe_load(f)
    job = next((j for j in prom["scrape_configs"] if j["job_name"] == "mixserve"), None)
    if job is None:
        fail("prometheus-kubernetes.yml: no job `mixserve` (alerts.yml and the dashboard expect it)")
    else:
        relabel = job["relabel_configs"]
        keeps = {r["source_labels"][0]: r["regex"] for r in relabel if r.get("action") == "keep"}
        if keeps.get("__meta_kubernetes_pod_label_app_kubernetes_io_name") != labels["app.kubernetes.io/name"]:
            fail("prometheus-kubernetes.yml does not keep the Deployment's pods")
        if keeps.get("__meta_kubernetes_pod_container_port_name") != "http":
            fail("prometheus-kubernetes.yml does not scrape the port named http")
        targets = {r.get("target_label") for r in relabel}
        for rule in adapter["rules"]:
            for label in rule["resources"]["overrides"]:
                if label not in targets:
                    fail(f"prometheus-kubernetes.yml does not set the label {label} the adapter rule maps")
        job.pop("kubernetes_sd_configs")
        job["static_configs"] = [{"targets": ["127.0.0.1:8000"]}]
        prom["rule_files"] = [f"{root}/deploy/prometheus/{r}" for r in prom["rule_files"]]
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as tmp:
            yaml.safe_dump(prom, tmp)
            tmp.flush()
            r = subprocess.run(["promtool", "check", "config", tmp.name], capture_output=True, text=True)
            if r.returncode != 0:
                fail(f"prometheus-kubernetes.yml: promtool: {r.stdout} {r.stderr}")

    # the Envoy example (deploy/envoy): routes name defined clusters, which resolve the headless
    # Service on its ports, gRPC over HTTP/2 with gRPC health, REST with /ready
    with open(f"{root}/deploy/envoy/envoy.yaml") as f:
        envoy = yaml.safe_load(f)["static_resources"]
    clusters = {c["name"]: c for c in envoy["clusters"]}
    headless = objects[("Service", "mixserve-pods")]
    if headless["spec"].get("clusterIP") != "None":
        fail("Service mixserve-pods is not headless")
    svc_ports = {p["port"] for p in headless["spec"]["ports"]}
    for listener in envoy["listeners"]:
        hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
        for vh in hcm["route_config"]["virtual_hosts"]:
            for route in vh["routes"]:
                name = route["route"]["cluster"]
                if name not in clusters:
                    fail(f"envoy: route to unknown cluster {name}")
                elif "hash_policy" in route["route"] and clusters[name]["lb_policy"] not in ("MAGLEV", "RING_HASH"):
                    fail(f"envoy: cluster {name} ignores the route's hash_policy")
    for name, cl in clusters.items():
        addr = cl["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
        if not addr["address"].startswith("mixserve-pods.") or addr["port_value"] not in svc_ports:
            fail(f"envoy: cluster {name} does not point at the headless Service")
        grpc = addr["port_value"] == ports["grpc"]
        if grpc != ("typed_extension_protocol_options" in cl):
            fail(f"envoy: cluster {name}: HTTP/2 upstream must go with the gRPC port")
        hc = cl["health_checks"][0]
        if grpc and "grpc_health_check" not in hc or not grpc and hc.get("http_health_check", {}).get("path") != "/ready":
            fail(f"envoy: cluster {name}: health check must be gRPC health or /ready")

    if failures:
        print("\n".join(["FAILED:"] + failures))
        return 1
    print("deploy/k8s and deploy/envoy: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
