"""Compare a compiled partition, run by TFLM, with the quantized PyTorch program on the same input."""

from __future__ import annotations

import numpy as np
import oracles
import torch


def quantize(x: torch.Tensor, scale: float, zero_point: int) -> np.ndarray:
    """int8 the way the program's own quantize op computes it (round half to even, saturate)."""
    import torchao.quantization.pt2e  # noqa: F401  (registers the quantized_decomposed ops)

    op = torch.ops.quantized_decomposed.quantize_per_tensor
    return op(x, scale, zero_point, -128, 127, torch.int8).numpy()


def tflm_and_reference(result, inputs: tuple[torch.Tensor, ...], partition: int = 0):
    """(TFLM's int8 outputs, the quantized PyTorch program's int8 outputs) for a one-partition model whose
    partition inputs and outputs are the model's, each as (shape, array) in the .tflite's layout."""
    tflite = result.partitions[partition]
    tflite_inputs, tflite_outputs = oracles.tflite_io(tflite)
    feeds = []
    for x, (shape, _, scale, zero_point) in zip(inputs, tflite_inputs, strict=True):
        q = quantize(x, scale, zero_point)
        if q.shape != tuple(shape):  # a channels_last input: the .tflite takes NHWC bytes as they are
            q = np.ascontiguousarray(q.transpose(0, 2, 3, 1))
        feeds.append(q)
    got = oracles.run_tflm(tflite, feeds)
    reference = result.quantized.module()(*inputs)
    reference = reference if isinstance(reference, (tuple, list)) else (reference,)
    expected = []
    for y, (shape, _, scale, zero_point) in zip(reference, tflite_outputs, strict=True):
        q = quantize(y.detach(), scale, zero_point)
        if q.shape != tuple(shape):
            q = np.ascontiguousarray(q.transpose(0, 2, 3, 1))
        expected.append(q)
    return got, expected, feeds


def max_step_difference(got, expected) -> int:
    return max(int(np.abs(g.astype(np.int32) - e.astype(np.int32)).max()) for g, e in
               zip(got, expected, strict=True))
