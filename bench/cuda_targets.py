#!/usr/bin/env python3
"""#24's four targets, read off one GPU run's files (scripts/gpu-check's out/gpu-check/, or a copy
under bench/results/cuda-raw-*): for each, what the defaults reached, the best option measured in
the same run, and whether the target holds. Only what the files hold is reported; a target whose
files are missing says so.

  1. batch-1 step ≤ 100 µs for every mixer            (device µs a step, cuda-bench*.json)
  2. ≥ 1M tok/s at batch 256 for aft_simple and retnet (device tok/s)
  3. ≥ 3× the CUDA-graph PyTorch peer, every mixer and batch (the fastest peer of peer*.json,
     whose steps are graph replays with the argmax fed back on the device and no sync between
     them, against mixserve's device step)
Beside each device figure, the bench's end-to-end one: the step as forward() returns it, host work,
upload and launch included and every logit copied back — more than a server's step, which copies
tokens back (device sampling; at batch 256 the 5 MB of logits are most of the difference) — and,
where the run has cuda-bench-sampling-full.json (--device-sampling), the greedy step with tokens
back: the end-to-end step of a greedy server and of the peers. Shown, not judged: the verdicts are
on device time, as the peers' are.
  4. the large config's batch-1 step reading its weights at ≥ 60% of HBM bandwidth
     (cuda-bench-large*.json's weight GB/s against cuda-sync.json's measured streaming bandwidth,
     and against the GPU's rating)

  python3 bench/cuda_targets.py DIR [--out FILE.json]
"""
import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import fastest_peer, load_peers  # noqa: E402

RATED_TBPS = {"H100": 3.35, "H200": 4.8}  # the GPUs' rated HBM bandwidth (TB/s), for reference


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def runs(d):
    """{label: results} of the bench files cuda-bench*.json; the label is the option's name (the
    file name's rest), "defaults" for cuda-bench.json. Left out, as not the defaults' config with an
    option: the base commit's bench (…base…), whole steps sampled (…sampling…, …candidates…), and
    other weight types than the defaults' (int8, int4)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "cuda-bench*.json"))):
        label = os.path.basename(path)[len("cuda-bench"):-len(".json")].lstrip("-") or "defaults"
        words = label.split("-")
        if "base" in words or "sampling" in words or "candidates" in words:
            continue
        data = load(path)
        if data and data.get("results"):
            out[label] = data
    weights = out["defaults"].get("weights") if "defaults" in out else None
    return {k: v for k, v in out.items() if v.get("weights") == weights}


def cell(data, mixer, batch, key):
    for r in data["results"]:
        if r["mixer"] == mixer and r["batch"] == batch and r.get(key):
            return r[key]
    return None


def best_option(rs, mixer, batch, key, lower_is_better=True):
    """(label, value) of the best non-default run at (mixer, batch), or (None, None)."""
    best = (None, None)
    for label, data in rs.items():
        if label == "defaults":
            continue
        v = cell(data, mixer, batch, key)
        if v is not None and (best[1] is None or (v < best[1] if lower_is_better else v > best[1])):
            best = (label, v)
    return best


def paper_runs(rs):
    """({label: results}, [labels]) of the runs comparable with the defaults: the same config and
    prompt (not the large config, not long-context runs such as quick-more's long-lists). A run whose
    options are the defaults' (ordered's many-rows: the defaults at batches 64 and 256) is no
    option: its cells fill those the defaults lack, and its label is listed second."""
    defaults = rs.get("defaults")
    if not defaults or not defaults.get("results"):
        return {}, []
    first = defaults["results"][0]
    config, prompt, options = defaults.get("config"), first.get("prompt"), first.get("options")
    have = {(r["mixer"], r["batch"]) for r in defaults["results"]}
    paper, merged = {}, []
    for label, data in sorted(rs.items()):
        if label == "defaults" or data.get("config") != config:
            continue
        results = [r for r in data["results"] if r.get("prompt") == prompt]
        if not results:
            continue
        if options is not None and all(r.get("options") == options for r in results):
            extra = [r for r in results if (r["mixer"], r["batch"]) not in have]
            have |= {(r["mixer"], r["batch"]) for r in extra}
            defaults = dict(defaults, results=defaults["results"] + extra)
            merged.append(label)
            continue
        paper[label] = dict(data, results=results)
    paper["defaults"] = defaults
    return paper, merged


def targets(d):
    rs = runs(d)
    sampled = load(os.path.join(d, "cuda-bench-sampling-full.json"))
    paper, merged = paper_runs(rs)
    out = {"dir": d, "targets": [], "defaults_also_from": merged}
    defaults = paper.get("defaults")
    if defaults:
        out.update(device=defaults.get("device"), date=defaults.get("date"), commit=defaults.get("commit"))
    mixers = sorted({r["mixer"] for r in defaults["results"]}) if defaults else []

    # 1. batch 1
    rows = []
    for m in mixers:
        us = cell(defaults, m, 1, "device_us_per_step_median")
        opt, opt_us = best_option(paper, m, 1, "device_us_per_step_median")
        best = min(v for v in (us, opt_us) if v is not None) if (us or opt_us) else None
        rows.append(dict(mixer=m, defaults_us=us, defaults_e2e_us=cell(defaults, m, 1, "us_per_step_median"),
                         defaults_greedy_e2e_us=cell(sampled, m, 1, "greedy_device_us_per_step_median")
                         if sampled else None,
                         defaults_overlap_us=cell(sampled, m, 1, "overlap_greedy_us_per_step") if sampled else None,
                         best_option=opt, best_option_us=opt_us,
                         best_option_e2e_us=cell(paper[opt], m, 1, "us_per_step_median") if opt else None,
                         holds=best is not None and best <= 100.0))
    out["targets"].append(dict(target="batch-1 step ≤ 100 µs, every mixer (device µs)", rows=rows,
                               holds=bool(rows) and all(r["holds"] for r in rows)))

    # 2. batch 256
    rows = []
    for m in ("aft_simple", "retnet"):
        if not defaults:
            break
        tok = cell(defaults, m, 256, "device_tok_s")
        opt, opt_tok = best_option(paper, m, 256, "device_tok_s", lower_is_better=False)
        best = max(v for v in (tok, opt_tok) if v is not None) if (tok or opt_tok) else None
        rows.append(dict(mixer=m, defaults_tok_s=tok, defaults_e2e_tok_s=cell(defaults, m, 256, "tok_s"),
                         defaults_greedy_e2e_tok_s=cell(sampled, m, 256, "greedy_device_tok_s") if sampled else None,
                         defaults_overlap_tok_s=cell(sampled, m, 256, "overlap_greedy_tok_s") if sampled else None,
                         best_option=opt, best_option_tok_s=opt_tok,
                         best_option_e2e_tok_s=cell(paper[opt], m, 256, "tok_s") if opt else None,
                         holds=best is not None and best >= 1e6))
    out["targets"].append(dict(target="≥ 1M tok/s at batch 256, aft_simple and retnet (device tok/s)", rows=rows,
                               holds=bool(rows) and all(r["holds"] for r in rows)))

    # 3. the peers
    peer, sources = load_peers(sorted(glob.glob(os.path.join(d, "peer*.json"))))
    unread = [f"{os.path.basename(p)}: {s['error']}" for p, s in sources.items() if "error" in s]
    rows = []
    for r in (defaults["results"] if defaults and peer else []):
        p, name = fastest_peer(peer, r["mixer"], r["batch"])
        if p is None:
            rows.append(dict(mixer=r["mixer"], batch=r["batch"], peer=None, holds=False))
            continue
        ours = r["device_us_per_step_median"]
        opt, opt_us = best_option(paper, r["mixer"], r["batch"], "device_us_per_step_median")
        best = min(v for v in (ours, opt_us) if v is not None)
        rows.append(dict(mixer=r["mixer"], batch=r["batch"], peer=name, peer_us=p, defaults_us=ours,
                         defaults_x=p / ours, defaults_e2e_x=p / r["us_per_step_median"], best_option=opt,
                         best_option_x=p / opt_us if opt_us else None, holds=p / best >= 3.0))
    out["targets"].append(dict(target="≥ 3× the fastest PyTorch peer, every mixer and batch (device µs)",
                               rows=rows, holds=bool(rows) and all(r["holds"] for r in rows),
                               missing="; ".join(unread) if unread else None if peer else "no peer*.json"))

    # 4. the large config's bandwidth
    sync = load(os.path.join(d, "cuda-sync.json")) or {}
    hbm = next((r["gb_per_s"] for r in sync.get("results", []) if "from HBM" in r.get("what", "")), None)
    device = (defaults or sync or {}).get("device") or ""
    rated = next((tb * 1e3 for gpu, tb in RATED_TBPS.items() if gpu in device), None)
    rows = []
    for label, data in sorted(rs.items()):
        if data.get("config", {}).get("d") != 1024:
            continue
        for r in data["results"]:
            if r["batch"] != 1 or not r.get("weight_GBps"):
                continue
            gbps = r["weight_GBps"]
            rows.append(dict(run=label, mixer=r["mixer"], weight_GBps=gbps,
                             of_measured=gbps / hbm if hbm else None, of_rated=gbps / rated if rated else None,
                             holds=bool(hbm) and gbps / hbm >= 0.6))
    out["targets"].append(dict(target="large config, batch 1: weights at ≥ 60% of HBM bandwidth",
                               measured_hbm_GBps=hbm, rated_GBps=rated, rows=rows,
                               holds=bool(rows) and any(r["holds"] for r in rows if r["mixer"] == "aft_simple")))
    return out


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def show(t):
    print(f"#24 targets: {t.get('device')}, {t.get('date')}, commit {t.get('commit')}")
    for g in t["targets"]:
        print(f"\n{g['target']}: {'HOLDS' if g['holds'] else 'not reached'}"
              + (f" ({g['missing']})" if g.get("missing") else ""))
        for r in g["rows"]:
            if "weight_GBps" in r:
                print(f"  {r['run']:<16} {r['mixer']:<11} {fmt(r['weight_GBps'], '8.0f')} GB/s"
                      f"  {fmt(r['of_measured'], '6.1%')} of measured {fmt(g['measured_hbm_GBps'], '.0f')} GB/s"
                      f"  {fmt(r['of_rated'], '6.1%')} of rated")
            elif "peer" in r:
                print(f"  {r['mixer']:<11} B={r['batch']:<4} peer {r['peer'] or '-':<26} {fmt(r.get('peer_us'), '8.0f')} µs"
                      f"  defaults {fmt(r.get('defaults_x'), '5.2f')}× (end to end {fmt(r.get('defaults_e2e_x'), '.2f')}×)"
                      f"  best option {r.get('best_option') or '-'} {fmt(r.get('best_option_x'), '5.2f')}×")
            elif "defaults_tok_s" in r:
                print(f"  {r['mixer']:<11} defaults {fmt(r['defaults_tok_s'], '9.0f')} tok/s"
                      f" (end to end {fmt(r['defaults_e2e_tok_s'], '.0f')}, greedy tokens back"
                      f" {fmt(r['defaults_greedy_e2e_tok_s'], '.0f')}, overlapped"
                      f" {fmt(r.get('defaults_overlap_tok_s'), '.0f')})  best option"
                      f" {r['best_option'] or '-'} {fmt(r['best_option_tok_s'], '.0f')}"
                      f" (end to end {fmt(r['best_option_e2e_tok_s'], '.0f')})")
            else:
                print(f"  {r['mixer']:<11} defaults {fmt(r['defaults_us'], '7.0f')} µs"
                      f" (end to end {fmt(r['defaults_e2e_us'], '.0f')}, greedy tokens back"
                      f" {fmt(r['defaults_greedy_e2e_us'], '.0f')}, overlapped"
                      f" {fmt(r.get('defaults_overlap_us'), '.0f')})  best option"
                      f" {r['best_option'] or '-'} {fmt(r['best_option_us'], '.0f')} µs"
                      f" (end to end {fmt(r['best_option_e2e_us'], '.0f')})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    t = targets(a.dir)
    show(t)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(t, f, indent=1)
    return t


if __name__ == "__main__":
    main()
    sys.exit(0)
