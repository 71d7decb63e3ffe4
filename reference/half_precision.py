"""How far float16 / bfloat16 rounding alone moves each tests/golden fixture's logits, written into
its fixture.json as "half_precision_error" (the CUDA tests bound their f16/bf16 results by it).

  /usr/bin/python3 reference/half_precision.py [--golden tests/golden] [NAME ...]

For each format, the reference model in float32 math: with every projection's weights rounded
("<fmt>_weights": what the CUDA-core GEMMs compute from f16/bf16 weights), and with the
projections' inputs rounded too ("<fmt>_operands": the tensor cores' operands). The error is the
tests' measure: max |logits − expected| / max |expected| over a position's vocabulary, the largest
over every prefill and decode position. The expected logits are float64 math on the float32 weights.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mixserve_ref import safetensors_io  # noqa: E402
from mixserve_ref.model import Model  # noqa: E402

FORMATS = {"f16": torch.float16, "bf16": torch.bfloat16}


def rounded_logits(case_dir, tokens, dtype, operands):
    model = Model.load_dir(case_dir).float()
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for m in linears:
            m.weight.copy_(m.weight.to(dtype).float())
        head = model.head
        if hasattr(head, "weight"):
            head.weight.copy_(head.weight.to(dtype).float())
    if operands:
        for m in linears + [head]:
            m.register_forward_pre_hook(lambda _m, args: tuple(a.to(dtype).float() for a in args[:1]) + args[1:])
    if not hasattr(head, "weight"):  # tied: the head's copy of the embedding is rounded, the lookup is not
        embed_forward = head.forward
        head.forward = lambda x, w: embed_forward(x, w.to(dtype).float())
    with torch.no_grad():
        return model(tokens[None].long())[0]


def errors(case_dir):
    expected, _ = safetensors_io.load(os.path.join(case_dir, "expected.safetensors"))
    want = torch.cat([expected["prefill_logits"], expected["decode_logits"]]).double()
    tokens = expected["tokens"]
    out = {}
    for fmt, dtype in FORMATS.items():
        for operands in (False, True):
            got = rounded_logits(case_dir, tokens, dtype, operands).double()
            err = ((got - want).abs().amax(dim=1) / want.abs().amax(dim=1)).max().item()
            out[f"{fmt}_{'operands' if operands else 'weights'}"] = float(f"{err:.3g}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--golden", default=os.path.join(os.path.dirname(__file__), "..", "tests", "golden"))
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    names = args.names or sorted(n for n in os.listdir(args.golden)
                                 if os.path.exists(os.path.join(args.golden, n, "fixture.json")))
    for name in names:
        case_dir = os.path.join(args.golden, name)
        meta_path = os.path.join(case_dir, "fixture.json")
        with open(meta_path) as f:
            meta = json.load(f)
        meta["half_precision_error"] = errors(case_dir)
        with open(meta_path, "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        print(name, meta["half_precision_error"], flush=True)


if __name__ == "__main__":
    main()
