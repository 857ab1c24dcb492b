"""The NHWC layout rule: stored shapes, axes and permutations, and the data movement a view needs."""

from __future__ import annotations

import numpy as np
import pytest

from imxrt.npu.litert import layout
from imxrt.npu.litert.layout import Reshape, Transpose


def test_rank4_is_stored_nhwc_other_ranks_as_they_are():
    assert layout.stored_shape((1, 3, 5, 7)) == (1, 5, 7, 3)
    assert layout.stored_shape((2, 3, 5)) == (2, 3, 5)
    assert [layout.stored_axis(d, 4) for d in (0, 1, 2, 3, -1)] == [0, 3, 1, 2, 2]
    assert layout.stored_axis(-1, 2) == 1


def test_stored_permutation_matches_numpy():
    """Permuting the edge array then storing it equals storing it then applying the stored perm."""
    edge = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    for perm in [(0, 2, 1, 3), (0, 3, 2, 1), (1, 0, 3, 2), (0, 1, 2, 3)]:
        expected = layout.stored_array(edge.transpose(perm))
        stored_perm = layout.stored_permutation(perm)
        assert np.array_equal(layout.stored_array(edge).transpose(stored_perm), expected)
    assert layout.stored_permutation((0, 1, 2, 3)) == (0, 1, 2, 3)


@pytest.mark.parametrize(
    "in_shape, out_shape, steps",
    [
        ((1, 8, 1, 1), (1, 8), [Reshape((1, 8))]),  # H*W == 1: NHWC order is NCHW order
        ((1, 1, 49, 10), (1, 49, 10), [Reshape((1, 49, 10))]),  # C == 1
        ((1, 8, 4, 4), (1, 128), [Transpose((0, 3, 1, 2)), Reshape((1, 128))]),
        ((1, 8), (1, 8, 1, 1), [Reshape((1, 1, 1, 8))]),
        ((1, 2, 16, 8), (1, 2, 16, 8), []),
        (
            (1, 2, 16, 8),
            (1, 2, 8, 16),
            [Transpose((0, 3, 1, 2)), Reshape((1, 2, 8, 16)), Transpose((0, 2, 3, 1))],
        ),
    ],
)
def test_view_moves_data_only_where_the_order_changes(in_shape, out_shape, steps):
    assert layout.view_steps(in_shape, out_shape) == steps


@pytest.mark.parametrize(
    "in_shape, out_shape",
    [
        ((1, 8, 4, 4), (1, 128)),
        ((2, 3, 4, 5), (6, 20)),
        ((6, 20), (2, 3, 4, 5)),
        ((1, 4, 2, 6), (1, 2, 4, 6)),
    ],
)
def test_view_steps_reproduce_the_edge_view(in_shape, out_shape):
    """Running the steps on the stored input gives the stored form of the edge reshape."""
    edge = np.arange(np.prod(in_shape)).reshape(in_shape)
    stored = layout.stored_array(edge)
    for step in layout.view_steps(in_shape, out_shape):
        stored = stored.transpose(step.perm) if isinstance(step, Transpose) else stored.reshape(step.shape)
    assert np.array_equal(stored, layout.stored_array(edge.reshape(out_shape)))


def test_transpose_of_unit_dims_becomes_a_reshape():
    assert layout.permute_steps((1, 1, 49, 10), (0, 2, 3, 1)) == [Reshape((1, 49, 10, 1))]
    assert layout.permute_steps((1, 3, 4, 5), (0, 2, 3, 1)) == [Transpose((0, 2, 3, 1))]
    assert layout.simplify((1, 3, 4, 5), [Transpose((0, 2, 3, 1)), Transpose((0, 3, 1, 2))]) == []
