"""The quantize / dequantize nodes of a partition program and the int8 facts they carry."""

from __future__ import annotations

import numpy as np
import torch
from torch.fx import Node

from imxrt.npu.litert.ir import PerTensor
from imxrt.passes.qdq import DEQUANTIZE_PER_CHANNEL, DEQUANTIZE_PER_TENSOR, is_quantize

# is_quantize is the partitioner's own predicate, re-exported so converters read Q/DQ facts from one module
__all__ = ["INT8_MAX", "INT8_MIN", "as_numpy", "int8_range", "is_dequantize", "is_dequantize_per_channel",
           "is_quantize", "per_tensor_qparams", "quantize_values", "symmetric_qparams"]

INT8_MIN, INT8_MAX = -128, 127


def is_dequantize(node: object) -> bool:
    """A per-tensor dequantize: an int8 activation (unlike ``passes.qdq.is_dequantize``, which also
    takes the per-channel weight dequantize)."""
    return isinstance(node, Node) and node.op == "call_function" and node.target == DEQUANTIZE_PER_TENSOR


def is_dequantize_per_channel(node: object) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target == DEQUANTIZE_PER_CHANNEL


def per_tensor_qparams(node: Node) -> PerTensor:
    """The qparams of a quantize_per_tensor / dequantize_per_tensor node (scale, zp are args 1, 2)."""
    return PerTensor(scale=float(node.args[1]), zero_point=int(node.args[2]))


def int8_range(node: Node) -> tuple[int, int]:
    return int(node.args[3]), int(node.args[4])


def quantize_values(values: np.ndarray, qparams: PerTensor) -> np.ndarray:
    """int8 q = clamp(round(r / scale) + zp), as quantize_per_tensor does it (round half to even)."""
    q = np.round(values.astype(np.float32) / np.float32(qparams.scale)) + qparams.zero_point
    return np.clip(q, INT8_MIN, INT8_MAX).astype(np.int8)


def symmetric_qparams(values: np.ndarray) -> PerTensor:
    """Qparams for a float constant the quantizer left float: symmetric, the largest |value| maps to 127
    (so a scalar c becomes q = +-127 exactly); an all-zero constant gets scale 1."""
    largest = float(np.abs(values).max(initial=0.0))
    return PerTensor(scale=largest / INT8_MAX if largest > 0 else 1.0, zero_point=0)


def as_numpy(value: torch.Tensor) -> np.ndarray:
    return value.detach().cpu().contiguous().numpy()
