"""The host runtime on compiled (NeutronBackend-delegated) programs equals TFLM on the partition, 0 LSB.

For each bundled example and two small two-input models, one NCHW and one channels_last (one NPU
partition between the CPU's input quantizes and output dequantize):
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

RANDOM_INPUTS = 20  # beside the example's own input: the 20 random inputs the host runtime promises

try:
    import imxrt.runtime.litert  # noqa: F401
except ImportError as error:  # the LiteRT executor is the one piece a delegated program cannot do without
    pytest.skip(f"imxrt.runtime.litert (the LiteRT executor) is not importable: {error}", allow_module_level=True)

from compiled_examples import NAMES, compiled_example  # noqa: E402

import imxrt.runtime  # noqa: E402
from imxrt.npu import reference_payload  # noqa: E402
from imxrt.pipeline import CompileOptions, compile  # noqa: E402

pytestmark = pytest.mark.slow  # every test here compiles and runs the bundled examples


class Compiled:
    """A compiled program, loaded, with the inputs it was built for."""

    def __init__(self, name: str, example: tuple[torch.Tensor, ...], result) -> None:
        self.name, self.example, self.result = name, example, result
        self.program = imxrt.runtime.load(result.pte)
        self.metadata = reference_payload.unpack(self.program.file.delegate_data[0]).metadata


class ConvPair(torch.nn.Module):
    """Two inputs into one partition, a 4-D output: exercises the I/O maps and the output layout."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 5, 3, padding=1)

    def forward(self, x, y):
        return torch.relu(self.conv(x) + y)


def _small(channels_last: bool) -> Compiled:
    generator = torch.Generator().manual_seed(5)
    inputs = (torch.randn(1, 3, 6, 7, generator=generator), torch.randn(1, 5, 6, 7, generator=generator))
    model = ConvPair().eval()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(x.contiguous(memory_format=torch.channels_last) for x in inputs)
    result = compile(model, inputs, "imxrt700", [inputs], CompileOptions(show_progress=False))
    return Compiled(f"conv_pair_{'nhwc' if channels_last else 'nchw'}", inputs, result)


SMALL = {"conv_pair_nchw": lambda: _small(False), "conv_pair_nhwc": lambda: _small(True)}


@pytest.fixture(scope="module", params=[*NAMES, *SMALL])
def compiled(request) -> Compiled:
    if request.param in SMALL:
        return SMALL[request.param]()
    source, _, result = compiled_example(request.param)  # compiled once per test run, shared
    return Compiled(request.param, source.example_inputs, result)


def _tflm_like_the_program(compiled: Compiled, inputs: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    """Quantize -> TFLM on the partition -> dequantize, in the program's logical (NCHW) shapes. The
    partition's inputs are the model's, in order; a format-flag-1 tensor crosses as NHWC bytes."""
    quantize = torch.ops.quantized_decomposed.quantize_per_tensor
    dequantize = torch.ops.quantized_decomposed.dequantize_per_tensor
    tflite = compiled.result.partitions[0]
    feeds = []
    for entry in compiled.metadata["inputs"]:
        x = inputs[entry["arg"]]
        q = quantize(x.contiguous(), entry["scale"], entry["zero_point"], -128, 127, torch.int8).numpy()
        feeds.append(np.ascontiguousarray(q.transpose(0, 2, 3, 1) if entry["format_flag"] else q))
    outputs = []
    for q, entry in zip(oracles.run_tflm(tflite, feeds), compiled.metadata["outputs"], strict=True):
        real = dequantize(torch.from_numpy(q), entry["scale"], entry["zero_point"], -128, 127, torch.int8).numpy()
        outputs.append(real.transpose(0, 3, 1, 2) if entry["format_flag"] else real)
    return outputs


def _inputs(compiled: Compiled):
    yield "example", compiled.example
    generator = torch.Generator().manual_seed(1234)
    for index in range(RANDOM_INPUTS):
        yield f"random_{index}", tuple(torch.randn(x.shape, generator=generator) for x in compiled.example)


def test_program_is_one_partition_between_quantize_and_dequantize(compiled):
    plan = compiled.program.file.plan
    assert [d.id for d in plan.delegates] == ["NeutronBackend"]
    assert len(compiled.result.partitions) == 1
    assert len(compiled.metadata["inputs"]) == len(compiled.example)
    if compiled.name == "conv_pair_nhwc":  # the layout paths the small models are there to cover
        assert [e["format_flag"] for e in compiled.metadata["inputs"] + compiled.metadata["outputs"]] == [1, 1, 1]
    if compiled.name == "conv_pair_nchw":
        assert [e["format_flag"] for e in compiled.metadata["inputs"] + compiled.metadata["outputs"]] == [0, 0, 0]


def test_equals_tflm_on_the_partition_0_lsb(compiled):
    for label, inputs in _inputs(compiled):
        (got,) = compiled.program.forward(*inputs)
        (expected,) = _tflm_like_the_program(compiled, inputs)
        assert got.shape == expected.shape
        mismatched = int((got != expected).sum())
        assert mismatched == 0, f"{compiled.name} {label}: {mismatched} of {got.size} outputs differ from TFLM"


def test_plan_checking_leaves_the_outputs_unchanged(compiled):
    checked = imxrt.runtime.load(compiled.result.pte, check_plan=True)
    for _, inputs in _inputs(compiled):
        got, expected = checked.forward(*inputs), compiled.program.forward(*inputs)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
