"""reference/graph_step.py (the static-shape step bench/torch_peer.py captures in a CUDA graph) ==
Model.step for every mixer past every ring's window, with its position a tensor that refuses to be
read on the host — what a captured graph could not replay (a slice or an `if` by the position, an
.item(), a data-dependent shape)."""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import test_fast_step  # noqa: E402
from fast_step import check_against_reference  # noqa: E402
from graph_step import GraphModel  # noqa: E402
from test_fast_step import make  # noqa: E402

torch.set_num_threads(2)


class HostReadError(AssertionError):
    pass


class DeviceOnly(torch.Tensor):
    """A tensor, and every tensor computed from it, whose value may not reach the host."""

    DENIED = {torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__index__,
              torch.Tensor.__float__, torch.Tensor.tolist, torch.Tensor.numpy, torch.nonzero,
              torch.Tensor.nonzero, torch.masked_select, torch.Tensor.masked_select, torch.unique,
              torch.Tensor.unique, torch.Tensor.repeat_interleave, torch.repeat_interleave}

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in cls.DENIED:
            raise HostReadError(f"reads a device value on the host: {getattr(func, '__name__', func)}")
        if func is torch.Tensor.__getitem__:  # a mask's result has as many rows as it has Trues
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            if any(isinstance(i, DeviceOnly) and i.dtype == torch.bool for i in index):
                raise HostReadError("indexes by a mask: a shape the values decide")
        return super().__torch_function__(func, types, args, kwargs or {})


def device_only(pos):
    return torch.tensor(pos).as_subclass(DeviceOnly)


class TheGuardCatchesHostReads(unittest.TestCase):
    """What DeviceOnly must refuse, so that the tests below can fail."""

    def test_host_reads(self):
        pos, table = device_only(3), torch.arange(10.0)
        for read in (lambda: pos.item(), lambda: int(pos), lambda: bool(pos >= 2), lambda: table[: pos + 1],
                     lambda: table[pos - 1 : 5], lambda: [0, 1, 2, 3, 4][pos], lambda: (table > pos).nonzero(),
                     lambda: table[table > pos], lambda: float(pos * 2)):
            with self.assertRaises(HostReadError):
                read()

    def test_device_work_passes(self):
        pos, table = device_only(3), torch.arange(10.0)
        self.assertEqual(table.index_select(0, pos.view(1)).as_subclass(torch.Tensor).tolist(), [3.0])
        torch.where(pos >= 2, table, -table)
        table.masked_fill(torch.arange(10) > pos, 0.0)


class GraphStepEqualsStep(test_fast_step.FastStepEqualsStep):
    """fast_step's cases (every mixer, other options, RetNet's and linear attention's conventions, a
    hybrid at batch 1), for the graph step with a position that may not reach the host."""

    step_model = GraphModel
    position = staticmethod(device_only)


class GraphStepOnly(unittest.TestCase):
    def test_a_slice_by_the_position_fails_the_check(self):
        """FastModel's own step slices its K/V cache by the position: refused."""
        from fast_step import FastModel
        with torch.inference_mode():
            model = make(["attention"], 1)
            with self.assertRaises(HostReadError):
                check_against_reference(model, FastModel(model), positions=2, position=device_only)

    def test_a_mixer_without_a_graph_step_is_refused(self):
        import graph_step
        with torch.inference_mode():
            model = make(["rwkv"], 3)
            saved = graph_step.MIXERS.pop("rwkv")
            try:
                with self.assertRaises(ValueError):
                    GraphModel(model)
            finally:
                graph_step.MIXERS["rwkv"] = saved


if __name__ == "__main__":
    unittest.main()
