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
        # H and W regroup under each channel: in NHWC the channels stay innermost, so no element moves
        ((1, 2, 16, 8), (1, 2, 8, 16), [Reshape((1, 8, 16, 2))]),
        # the two halves of H become channels: one transpose of [H·W halves, channels] instead of two
        ((1, 2, 16, 8), (1, 4, 8, 8), [Reshape((2, 128)), Transpose((1, 0)), Reshape((1, 8, 8, 4))]),
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


def _apply(array: np.ndarray, steps) -> np.ndarray:
    for step in steps:
        array = array.transpose(step.perm) if isinstance(step, Transpose) else array.reshape(step.shape)
    return array


def test_a_channel_shuffle_between_nhwc_tensors_is_one_transpose():
    """ShuffleNetV2's shuffle (NHWC -> NCHW, view [N, g, C/g, H, W], transpose(1, 2), view back, NHWC) was
    three TRANSPOSEs per block: it is one of [N·H·W, g, C/g]."""
    shape = (1, 12, 12, 48)
    steps = [Transpose((0, 3, 1, 2)), Reshape((1, 2, 24, 12, 12)), Transpose((0, 2, 1, 3, 4)),
             Reshape((1, 48, 12, 12)), Transpose((0, 2, 3, 1))]
    simplified = layout.simplify(shape, steps)
    assert simplified == [Reshape((144, 2, 24)), Transpose((0, 2, 1)), Reshape((1, 12, 12, 48))]
    source = np.arange(np.prod(shape)).reshape(shape)
    assert np.array_equal(_apply(source, simplified), _apply(source, steps))


def test_simplified_chains_move_every_element_as_the_chain_does():
    """Seeded fuzzing over random chains of transposes and reshapes (unit dims included): the simplified
    plan never has more TRANSPOSEs, and moves every element to the same place."""
    rng = np.random.default_rng(0)
    checked_forms = 0
    for _ in range(2000):
        shape = tuple(int(d) for d in rng.choice([1, 2, 3, 4, 6], size=rng.integers(1, 5)))
        steps, current = [], shape
        for _ in range(rng.integers(1, 6)):
            if rng.random() < 0.5:
                perm = tuple(int(p) for p in rng.permutation(len(current)))
                steps.append(Transpose(perm))
                current = tuple(current[p] for p in perm)
                continue
            n, dims = int(np.prod(current)), []
            while n > 1 and len(dims) < 4:
                factor = int(rng.choice([d for d in range(2, n + 1) if n % d == 0]))
                dims.append(factor)
                n //= factor
            dims += [n] if n > 1 else []
            if rng.random() < 0.3:
                dims.insert(int(rng.integers(0, len(dims) + 1)), 1)
            current = tuple(dims) or (1,)
            steps.append(Reshape(current))
        simplified = layout.simplify(shape, steps)
        source = np.arange(np.prod(shape)).reshape(shape)
        assert np.array_equal(_apply(source, simplified), _apply(source, steps)), (shape, steps, simplified)
        count = sum(isinstance(s, Transpose) for s in simplified)
        assert count <= sum(isinstance(s, Transpose) for s in steps)
        # the form a transpose sunk past a CONCATENATION takes: one reshape, then one transpose
        form = layout.as_reshape_then_transpose(shape, steps)
        if form is not None:
            moved = _apply(source, [Reshape(form[0]), Transpose(form[1])])
            assert np.array_equal(moved, _apply(source, steps)), (shape, steps, form)
            checked_forms += 1
    assert checked_forms > 200
