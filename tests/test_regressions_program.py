"""Regression tests of whole programs: their inputs (Python numbers, unbatched tensors, in-place writes), the
dim orders they serialize, internal errors, and independence from what else the process imported.

Each is a defect the conformance suite (benchmarks/conformance.py: ExecuTorch's own NXP and Cortex-M test
models) found, as the smallest model that showed it, on both targets where both apply.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from program_checks import check_case, odd_dim_orders
from regression_helpers import TARGETS, Binary
from regression_helpers import compile_seeded as _compile

import imxrt.runtime
from imxrt.pipeline import CompileOptions, compile


@pytest.mark.slow
def test_an_internal_error_is_one_compiler_bug_naming_its_stage(monkeypatch):
    """No raw Python exception escapes compile: an internal failure is an ImxrtError (one CLI line) that
    names the stage and keeps the cause chained for the bug report."""
    import imxrt.pipeline
    from imxrt.errors import CompilerBug

    def broken(*args, **kwargs):
        raise TypeError("unexpected")

    monkeypatch.setattr(imxrt.pipeline, "lower_to_cortex_m", broken)
    with pytest.raises(CompilerBug, match=r"lower stage \(TypeError: unexpected\)") as error:
        _compile(nn.Linear(4, 4), [(1, 4)], "imxrt700-cpu")
    assert isinstance(error.value.__cause__, TypeError)


_ONE_CHANNEL_POOLS = """
import hashlib, json, sys, torch
if sys.argv[1] == "executorch":
    import executorch.backends.cortex_m.passes  # noqa: F401  (ExecuTorch's cortex_m op module)
from imxrt.pipeline import CompileOptions, compile

def programs():
    out = []
    for model in (torch.nn.AvgPool2d(3, 2, padding=1, count_include_pad=True), torch.nn.MaxPool2d(2)):
        x = (torch.randn(1, 1, 4, 4, generator=torch.Generator().manual_seed(0)),)
        result = compile(model.eval(), x, "imxrt700-cpu", [x], CompileOptions(show_progress=False))
        out.append(hashlib.sha256(result.pte).hexdigest())
    return out

out = programs()
if sys.argv[1] == "executorch_after":
    import executorch.backends.cortex_m.passes  # noqa: F401
    out = programs()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_program_does_not_depend_on_executorchs_cortex_m_module_being_imported():
    """With ExecuTorch's cortex_m op module imported, its fakes traced our one-channel pad (planned as
    (1, 3, 4, 6) for a (1, 1, 6, 6) result: the runtime refused the program) and pools (dim order
    [0, 2, 1, 3]); imported after a first compile, it left stale edge ops and the second compile killed
    the process (std::bad_alloc). The same model gives the same bytes every way."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("tosa_serializer") is None:
        pytest.skip("ExecuTorch's cortex_m op module needs tosa-tools")
    modes = ("plain", "executorch", "executorch_after")
    runs = [subprocess.Popen([sys.executable, "-c", _ONE_CHANNEL_POOLS, mode], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for mode in modes]
    results = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, stderr[-3000:]
        results.append(stdout.strip().splitlines()[-1])
    assert results[0] == results[1] == results[2]


@pytest.mark.slow
def test_one_channel_values_are_serialized_contiguous():
    """A [N, 1, H, W] value laid out channels_last reads as dim order [0, 2, 1, 3] (its C and W strides tie),
    which no kernel takes; it is given the contiguous order, the same bytes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.AvgPool2d(3, 1, 1))
    for target in TARGETS:
        result, cal = _compile(model, [(1, 3, 8, 8)], target)
        assert odd_dim_orders(result.pte) == []
        check_case(result, cal[0])


class SubInPlace(nn.Module):
    def forward(self, x, y):
        return x.sub_(y)


class SqrtInPlace(nn.Module):
    def forward(self, x):
        return x.abs_().sqrt_()


class ReadAfterWrite(nn.Module):
    """A reader after the write reads the written value."""

    def forward(self, x, y):
        z = x.mul_(y)
        return z + x


IN_PLACE = {"sub_": (SubInPlace, [(1, 8), (1, 8)]), "sqrt_": (SqrtInPlace, [(1, 16)]),
            "read_after_write": (ReadAfterWrite, [(1, 8), (1, 8)]),
            "silu_inplace": (lambda: nn.SiLU(inplace=True), [(2, 8)])}


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(IN_PLACE))
def test_a_write_into_an_input_gives_the_models_outputs_and_leaves_the_inputs_alone(case, target):
    """x.sub_(y) returned the mutated input as a second output on imxrt700-cpu; x.sqrt_() (ExecuTorch's
    sqrt_inplace) failed to serialize (the planner was asked to overlap the live input with the output);
    calibration modified the caller's samples."""
    factory, shapes = IN_PLACE[case]
    generator = torch.Generator().manual_seed(0)
    cal = [tuple(torch.randn(s, generator=generator) for s in shapes) for _ in range(8)]
    kept = [tuple(t.clone() for t in sample) for sample in cal]
    result = compile(factory().eval(), cal[0], target, cal, CompileOptions(show_progress=False))
    assert all(torch.equal(a, b) for sample, copy in zip(cal, kept, strict=True)
               for a, b in zip(sample, copy, strict=True)), "calibration wrote into the caller's samples"
    program = imxrt.runtime.load(result.pte)
    for inputs in kept[:3]:
        before = [t.clone() for t in inputs]
        outputs = program.forward(*inputs)
        assert len(outputs) == 1
        assert all(torch.equal(a, b) for a, b in zip(inputs, before, strict=True))
        check_case(result, inputs)
        expected = factory().eval()(*[t.clone() for t in inputs]).detach().numpy()
        assert np.abs(outputs[0] - expected).max() <= 0.05 * np.abs(expected).max()


def test_a_python_number_as_an_input_is_refused_naming_it():
    """ExecuTorch's scalar_tensor / tensor_scalar cases pass a Python float as an input: a program's inputs
    are tensors, so that is refused, with which input and what to do instead."""
    from imxrt.errors import BadModel

    with pytest.raises(BadModel, match=r"example input 1 is a float, not a tensor.*constant of the model"):
        compile(Binary(torch.add).eval(), (torch.randn(3), 2.0), "imxrt700-cpu", None,
                CompileOptions(show_progress=False))


UNBATCHED = {  # ExecuTorch's implicit-batch conv cases, and the other ops that take an unbatched input
    "conv2d": (lambda: nn.Conv2d(4, 6, 3, stride=2), [(4, 7, 9)]),
    "conv_transpose2d": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2), [(4, 5, 7)]),
    "conv1d": (lambda: nn.Conv1d(4, 6, 3), [(4, 12)]),
    "max_pool2d": (lambda: nn.MaxPool2d(2), [(3, 6, 8)]),
    "avg_pool1d": (lambda: nn.AvgPool1d(2), [(3, 8)]),
}


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", UNBATCHED)
def test_an_unbatched_input_is_a_batch_of_one(name, target):
    """nn.Conv2d on a [C, H, W] input ran in float on both targets (to_edge added the batch dimension after
    quantization, between the conv and its Q/DQ): the batch dimension is made explicit before quantization."""
    make, shapes = UNBATCHED[name]
    result, cal = _compile(make(), shapes, target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    if target == "imxrt700":
        assert result.report["summary"]["partitions"] == 1
    for inputs in cal[:2]:
        check_case(result, inputs)


class _FramedConv(nn.Module):
    """A streaming audio front end: a frame [1, L] as a 1-D convolution's one-channel input."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 16, stride=8)

    def forward(self, frame):
        return torch.relu(self.conv(frame.unsqueeze(1)))


@pytest.mark.parametrize("target", TARGETS)
def test_an_example_input_with_a_free_stride_compiles(target):
    """numpy's ``frame[None]`` gives the size-1 batch dimension stride 0; torch.export kept the example's
    strides in the program and the CPU lowering stopped on them ("0 in strides", an internal error, with
    ExecuTorch's Silero VAD example and a frame taken from a waveform this way)."""
    waveform = np.random.default_rng(0).standard_normal(576).astype(np.float32)
    frame = torch.from_numpy(waveform[None])
    assert 0 in frame.stride()
    calibration = [(torch.from_numpy(np.roll(waveform, k)[None]),) for k in range(4)]
    result = compile(_FramedConv().eval(), (frame,), target, calibration, CompileOptions(show_progress=False))
    check_case(result, (frame.contiguous(),))
