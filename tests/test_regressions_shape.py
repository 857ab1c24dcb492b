"""Regression tests of data movement: cat, slices, views, transposes, channel shuffles and dropout removal.

Each is a defect the conformance suite (benchmarks/conformance.py: ExecuTorch's own NXP and Cortex-M test
models) found, as the smallest model that showed it, on both targets where both apply.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from program_checks import check_case
from regression_helpers import TARGETS
from regression_helpers import compile_seeded as _compile


class CatWithItsOwnSlice(nn.Module):
    def forward(self, x):
        return torch.cat([x[:, 4:], x], 1).mean((2, 3))


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_a_cat_of_a_tensor_and_its_own_slice_quantizes(target):
    """cat([x[:, 4:], x]): the slice shares x's qparams and the cat shares its first input's; pt2e's
    union-find recursed until Python's limit resolving the chain (an internal error in the quantize stage).
    Every shared spec now names the concrete one its chain ends in."""
    result, cal = _compile(CatWithItsOwnSlice(), [(1, 8, 4, 4)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


class ShuffleBlock(nn.Module):
    """ShuffleNetV2's channel shuffle between two convolutions, after an in-place dropout."""

    def __init__(self, groups=2):
        super().__init__()
        self.groups = groups
        self.a, self.b = nn.Conv2d(4, 8, 1), nn.Conv2d(8, 8, 1)
        self.drop = nn.Dropout(0.2, inplace=True)

    def forward(self, x):
        x = self.drop(torch.relu(self.a(x)))
        b, c, h, w = x.shape
        x = x.view(b, self.groups, c // self.groups, h, w).transpose(1, 2).contiguous().view(b, c, h, w)
        return self.b(x)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_channel_shuffle_and_in_place_dropout_compile_to_one_int8_program(target):
    """Dropping the ``contiguous()`` left a ``view`` of transposed strides that failed at calibration ("view
    size is not compatible"); ``nn.Dropout(inplace=True)`` (``aten.dropout_``) stayed in the graph, a
    dequantize/quantize pair that split the partition."""
    torch.manual_seed(0)
    result, cal = _compile(ShuffleBlock(), [(1, 4, 5, 5)], target)
    summary = result.report["summary"]
    assert summary["ops_cpu_float"] == 0
    if target == "imxrt700":
        assert summary["partitions"] == 1
    for inputs in cal[:3]:
        check_case(result, inputs)


def test_a_training_mode_dropout_is_kept():
    """Only an inference-mode dropout is a no-op (every dropout form, in place or not)."""
    from imxrt.passes.remove_noops import _DROPOUTS, RemoveNoOpsPass

    for op in sorted(_DROPOUTS, key=str):
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        x.meta["val"] = torch.empty(1, 4)
        kept, dropped = graph.call_function(op, (x, 0.5, True)), graph.call_function(op, (x, 0.5, False))
        for node in (kept, dropped):
            node.meta["val"] = torch.empty(1, 4)
        graph.output((kept, dropped))
        gm = RemoveNoOpsPass()(torch.fx.GraphModule(torch.nn.Module(), graph)).graph_module
        assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [op], op


def test_a_collapsed_permutation_moves_the_same_bytes():
    """Seeded: any shape (with size-1 dimensions) and permutation, the collapsed transpose of the reshaped
    tensor reads the same elements in the same order."""
    from imxrt.cpu.lowering_rules.shape import collapsed_permutation

    rng = np.random.default_rng(0)
    for _ in range(2000):
        rank = int(rng.integers(1, 7))
        shape = [int(rng.choice([1, 1, 2, 3])) for _ in range(rank)]
        perm = [int(d) for d in rng.permutation(rank)]
        x = np.arange(int(np.prod(shape))).reshape(shape)
        small_shape, small_perm = collapsed_permutation(shape, perm)
        assert len(small_shape) <= rank
        assert (x.transpose(perm).ravel() == x.reshape(small_shape).transpose(small_perm).ravel()).all()


class Transposed(nn.Module):
    def forward(self, x):
        return torch.relu(x).t()


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_t_is_int8_data_movement(target):
    """x.t() (ExecuTorch's t_operator case) had no int8 rule and ran in float on both targets."""
    result, cal = _compile(Transposed(), [(4, 3)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)
