"""What TFLM's int8 kernels require of an operator's quantization when the interpreter prepares it.

TFLM checks these with ``TFLITE_CHECK``, which aborts the process (on the host and on a board running
TFLM), and our partitions must mean what TFLM computes. The lowering refuses an operator that fails one
(``LoweringContext.emit``), so its node stays on the CPU, whose CMSIS-NN kernel takes any multiplier, and
every ``.tflite`` we write prepares. One row per builtin whose prepare can fail on valid qparams.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np  # the flatbuffer stores scales as float32: TFLM computes from those

from imxrt.kernels.elementwise import ADD_LEFT_SHIFT
from imxrt.npu.litert.ir import PerTensor, Tensor


def _scale(tensor: Tensor | None) -> float | None:
    if tensor is None or tensor.dtype != np.int8 or not isinstance(tensor.quantization, PerTensor):
        return None
    return tensor.quantization.scale


def add_sub_multiplier(input_scales: Sequence[float], output_scale: float) -> float:
    """TFLM's int8 ADD / SUB output multiplier (add_common.cc, sub_common.cc): 2 * max(s1, s2) / (2^20 * s_out),
    which ``QuantizeMultiplierSmallerThanOneExp`` requires below 1."""
    as_stored = [float(np.float32(s)) for s in (*input_scales, output_scale)]
    return 2 * max(as_stored[:-1]) / ((1 << ADD_LEFT_SHIFT) * as_stored[-1])


def add_sub_output_multiplier(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]) -> str | None:
    """ADD / SUB: the output scale must exceed the larger input scale / 2^19 (``add_sub_multiplier`` below 1)."""
    scales = [_scale(t) for t in (*inputs[:2], outputs[0])]
    if None in scales:
        return None
    multiplier = add_sub_multiplier(scales[:-1], scales[-1])
    if multiplier < 1:
        return None
    return (f"TFLM's int8 {builtin} needs an output scale above {max(scales[:-1]) / (1 << (ADD_LEFT_SHIFT - 1)):.3g} "
            f"(the larger input scale / 2^{ADD_LEFT_SHIFT - 1}); calibration gave {scales[-1]:.3g}, an output "
            f"range {multiplier:.3g}x too narrow")


PREPARE_CHECKS: dict[str, Callable[[str, Sequence[Tensor | None], Sequence[Tensor]], str | None]] = {
    "ADD": add_sub_output_multiplier,
    "SUB": add_sub_output_multiplier,
}


def problem(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]) -> str | None:
    """Why TFLM would refuse to prepare this operator, or None."""
    check = PREPARE_CHECKS.get(builtin)
    return check(builtin, inputs, outputs) if check else None
