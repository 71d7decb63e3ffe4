"""Writes tests/torch_checkpoint/: files torch.save wrote, for the engine's reader of them
(engine/torch_checkpoint.cc). One command: /usr/bin/python3 reference/torch_checkpoints.py

- tensors.pt: a dict of tensors of every kind the reader must take — float32, float16, bfloat16,
  float64, int64, bool; a 0-d scalar, an empty tensor, a transposed (strided) view, views at an
  offset into a shared storage, a parameter — and tensors.safetensors, the same tensors made
  contiguous, which the C++ test compares them with.
- fairseq_retnet/: tests/golden_public/retnet_torchscale's model as fairseq saves a torchscale
  RetNet: checkpoint.pt holding {"model": the state dict under "decoder.", "args": an
  argparse.Namespace, "cfg": nested dicts, "optimizer_history": [...], "extra_state": {...}}, and
  its config.json; it must give the same logits as the safetensors directory.
- objects.pt: a small checkpoint whose other entries hold what fairseq's do besides tensors
  (a Namespace with None and lists, nested dicts and tuples, a set, a frozenset, floats), the
  state dict under "model"; also the fuzz target's seed (fuzz/corpus/torch_checkpoint).
- broadcast.pt: a stride-0 view of 1000 elements over a storage of one, which the reader refuses
  (gathering it would take more memory than the file justifies).
"""
import argparse
import os
import shutil
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "reference"))
from mixserve_ref import safetensors_io  # noqa: E402

OUT = os.path.join(ROOT, "tests", "torch_checkpoint")


def tensors():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 5, generator=g)
    shared = torch.arange(24, dtype=torch.float32)
    return {
        "f32": torch.randn(3, 4, generator=g),
        "f16": torch.randn(2, 3, generator=g).half(),
        "bf16": torch.randn(5, generator=g).bfloat16(),
        "f64": torch.randn(2, 2, generator=g).double(),
        "i64": torch.arange(7),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
        "transposed": base.t(),                    # strides (1, 5): gathered
        "row_of_shared": shared.view(4, 6)[2],     # offset 12 into a shared storage
        "slab_of_shared": shared.view(4, 6)[1:3],  # offset 6, contiguous
        "column_of_shared": shared.view(4, 6)[:, 1],  # offset 1, stride 6
        "parameter": torch.nn.Parameter(torch.randn(2, 2, generator=g)),
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    t = tensors()
    torch.save(t, os.path.join(OUT, "tensors.pt"))
    safetensors_io.save({k: v.detach().contiguous() for k, v in t.items()}, os.path.join(OUT, "tensors.safetensors"))

    src = os.path.join(ROOT, "tests", "golden_public", "retnet_torchscale", "model")
    dst = os.path.join(OUT, "fairseq_retnet")
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src, "config.json"), os.path.join(dst, "config.json"))
    state, _ = safetensors_io.load(os.path.join(src, "model.safetensors"))
    checkpoint = {
        "args": argparse.Namespace(arch="retnet_base", lr=[0.0003], dropout=0.0, seed=1, fp16=False,
                                   tokens_per_sample=64, save_dir=None),
        "cfg": {"common": {"seed": 1, "fp16": False}, "model": {"_name": "retnet_base", "dropout": 0.0},
                "optimization": {"lr": [0.0003], "max_update": 1000}},
        "model": {"decoder." + k: v for k, v in state.items()},
        "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "num_updates": 10,
                               "optimizer_name": "FairseqAdam", "lr_scheduler_state": {"best": None}}],
        "extra_state": {"epoch": 1, "train_iterator": {"epoch": 1, "iterations_in_epoch": 10},
                        "metrics": {}, "previous_training_time": 12.5},
        "last_optimizer_state": {"state": {0: {"step": 10, "exp_avg": torch.zeros(3)}}, "param_groups": []},
    }
    torch.save(checkpoint, os.path.join(dst, "checkpoint.pt"))
    objects = {"model": {"decoder.w": torch.arange(6, dtype=torch.float32).view(2, 3),
                         "decoder.b": torch.ones(3).half()},
               "args": argparse.Namespace(arch="x", lr=[0.1], fp16=False, n=None),
               "cfg": {"a": {"b": 1.5, "c": [1, 2, (3, 4)]}},
               "extra_state": {"epoch": 1, "s": {1, 2}, "f": frozenset([3]), "big": 2 ** 40, "neg": -7}}
    torch.save(objects, os.path.join(OUT, "objects.pt"))
    torch.save({"broadcast": torch.zeros(1).expand(1000)}, os.path.join(OUT, "broadcast.pt"))
    shutil.copy(os.path.join(OUT, "objects.pt"), os.path.join(ROOT, "fuzz", "corpus", "torch_checkpoint", "objects.pt"))
    shutil.copy(os.path.join(OUT, "tensors.pt"), os.path.join(ROOT, "fuzz", "corpus", "torch_checkpoint", "tensors.pt"))
    print(f"wrote {OUT}: tensors.pt ({len(t)} tensors), fairseq_retnet/checkpoint.pt, objects.pt")


if __name__ == "__main__":
    main()
