"""The host runtime on compiled (NeutronBackend-delegated) programs equals TFLM on the partition, 0 LSB.

For each bundled example (one NPU partition between the CPU's input quantize and output dequantize):
the runtime runs the whole `.pte` in its planned arena; the oracle quantizes the same input with the
partition's input qparams, runs the partition's `.tflite` in TFLM (tflite-micro, CMSIS-NN rounding) and
dequantizes TFLM's int8 output with the partition's output qparams, as the program's own dequantize does.
Dequantizing is one-to-one on int8 (scale > 0), so equal floats mean equal int8 values: 0 LSB.
"""

from __future__ import annotations

import numpy as np
import oracles
import pytest
import torch

RANDOM_INPUTS = 3  # beside the example's own input; benchmarks and longer runs take more

try:
    import imxrt.runtime.litert  # noqa: F401
except ImportError as error:  # the LiteRT executor is the one piece a delegated program cannot do without
    pytest.skip(f"imxrt.runtime.litert (the LiteRT executor) is not importable: {error}", allow_module_level=True)

from compiled_examples import NAMES, compiled_example  # noqa: E402

import imxrt.runtime  # noqa: E402


class Compiled:
    def __init__(self, name: str) -> None:
        source, _, self.result = compiled_example(name)  # compiled once per test run, shared
        self.name, self.example = name, source.example_inputs
        self.program = imxrt.runtime.load(self.result.pte)


@pytest.fixture(scope="module", params=NAMES)
def compiled(request) -> Compiled:
    return Compiled(request.param)


def _tflm_like_the_program(tflite: bytes, inputs: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    """Quantize -> TFLM on the partition -> dequantize, in the program's logical (NCHW) shapes."""
    quantize = torch.ops.quantized_decomposed.quantize_per_tensor
    dequantize = torch.ops.quantized_decomposed.dequantize_per_tensor
    tflite_inputs, tflite_outputs = oracles.tflite_io(tflite)
    feeds = []
    for x, (shape, _, scale, zero_point) in zip(inputs, tflite_inputs, strict=True):
        q = quantize(x.contiguous(), scale, zero_point, -128, 127, torch.int8).numpy()
        if q.shape != shape:  # a channels_last input: the .tflite takes its NHWC bytes
            q = q.transpose(0, 2, 3, 1)
        feeds.append(np.ascontiguousarray(q))
    return [dequantize(torch.from_numpy(q), scale, zero_point, -128, 127, torch.int8).numpy()
            for q, (_, _, scale, zero_point) in zip(oracles.run_tflm(tflite, feeds), tflite_outputs, strict=True)]


def _inputs(compiled: Compiled):
    yield "example", compiled.example
    generator = torch.Generator().manual_seed(1234)
    for index in range(RANDOM_INPUTS):
        yield f"random_{index}", tuple(torch.randn(x.shape, generator=generator) for x in compiled.example)


def test_program_is_one_partition_between_quantize_and_dequantize(compiled):
    plan = compiled.program.file.plan
    assert [d.id for d in plan.delegates] == ["NeutronBackend"]
    assert len(compiled.result.partitions) == 1


def test_equals_tflm_on_the_partition_0_lsb(compiled):
    tflite = compiled.result.partitions[0]
    for label, inputs in _inputs(compiled):
        (got,) = compiled.program.forward(*inputs)
        (expected,) = _tflm_like_the_program(tflite, inputs)
        if got.ndim == 4 and expected.shape != got.shape:  # an NHWC partition output, NCHW program output
            expected = expected.transpose(0, 3, 1, 2)
        assert got.shape == expected.shape
        mismatched = int((got != expected).sum())
        assert mismatched == 0, f"{compiled.name} {label}: {mismatched} of {got.size} outputs differ from TFLM"


def test_plan_checking_leaves_the_outputs_unchanged(compiled):
    checked = imxrt.runtime.load(compiled.result.pte, check_plan=True)
    for _, inputs in _inputs(compiled):
        got, expected = checked.forward(*inputs), compiled.program.forward(*inputs)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
