"""A sealed file's argument values against the kernels' preconditions (``imxrt.runtime.preconditions``).

A seal anyone can compute proves nothing, so each program here is sealed: the checks behind the seal must
hold alone. Each case used to end the process (ExecuTorch's C++ quantize kernel's ``abort()``, a torch kernel's
segmentation fault) or allocate gigabytes; it is run in a forked child under an address-space cap, so a
failure is reported as a test failure instead of ending the test run.
"""

from __future__ import annotations

import math
import os
import re
import resource
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from executorch.exir import schema

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _argument_sweep import OneCallProgram  # noqa: E402

import imxrt.runtime  # noqa: E402
from imxrt.errors import ImxrtError  # noqa: E402

_CHILD_CAP = 3 << 30  # bytes of address space: torch's own mappings take about 1.5 GiB


def _outcome(data: bytes) -> str:
    """What loading and running ``data`` ends in, in a forked child: 'ran', the one-line error, or how the
    child died."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one line, then leave without running the parent's atexit handlers
        os.close(read)
        resource.setrlimit(resource.RLIMIT_AS, (_CHILD_CAP, _CHILD_CAP))
        try:
            imxrt.runtime.load(data).forward()
            message = "ran"
        except ImxrtError as e:
            message = "error: " + str(e)
        except MemoryError:
            message = "MemoryError"
        except BaseException as e:  # noqa: BLE001 - anything else is what the test looks for
            message = f"{type(e).__name__}: {e}"
        os.write(write, message.encode()[:4000])
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        message = stream.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"died by {signal.Signals(os.WTERMSIG(status)).name}"
    return message


def _quantize_program(name: str, *, input_dtype=None, dtype=torch.int8, out_dtype=None, quant=(-128, 127),
                      scale=0.1, zero_point=0, out_shape=(2, 3), channels=3, axis=1) -> bytes:
    """One call of quantized_decomposed ``name`` on a [2, 3] tensor, its arguments as given."""
    program = OneCallProgram()
    quantize = "::quantize" in name
    source = input_dtype or (torch.float32 if quantize else dtype)
    values = program.tensor([2, 3], source, bytes(6 * source.itemsize))
    target = (dtype if quantize else torch.float32) if out_dtype is None else out_dtype
    out = program.tensor(list(out_shape), target)
    args = [values]
    if "per_channel" in name:
        scales = program.tensor([channels], torch.float64, np.full(channels, scale, np.float64).tobytes())
        zero_points = program.tensor([channels], torch.int64, np.full(channels, zero_point, np.int64).tobytes())
        args += [scales, zero_points, program.add(schema.Int(axis))]
    elif "Tensor_out" in name:
        args += [program.tensor([1], torch.float64, np.float64(scale).tobytes()),
                 program.tensor([1], torch.int64, np.int64(zero_point).tobytes())]
    else:
        args += [program.add(schema.Double(scale)), program.add(schema.Int(zero_point))]
    args += [program.add(schema.Int(quant[0])), program.add(schema.Int(quant[1])),
             program.add(schema.Int(_scalar_type(dtype)))]
    if not quantize:
        args.append(program.add(schema.Null()))  # out_dtype
    return program.sealed(name, [*args, out, out], outputs=[out])


def _scalar_type(dtype: torch.dtype) -> int:
    from imxrt.pte.reader import TORCH_DTYPES

    return next(int(key) for key, value in TORCH_DTYPES.items() if value == dtype)


_QUANTIZE = "quantized_decomposed::quantize_per_tensor.out"
_QUANTIZE_TENSORS = "quantized_decomposed::quantize_per_tensor.Tensor_out"
_QUANTIZE_CHANNELS = "quantized_decomposed::quantize_per_channel.out"
_DEQUANTIZE = "quantized_decomposed::dequantize_per_tensor.out"
_DEQUANTIZE_TENSORS = "quantized_decomposed::dequantize_per_tensor.Tensor_out"
_DEQUANTIZE_CHANNELS = "quantized_decomposed::dequantize_per_channel.out"

# (operator, arguments, the refusal's words): one row per check of op_quantize.cpp / op_dequantize.cpp.
_QUANTIZED_CASES = {
    "dtype_not_out_dtype": (_QUANTIZE, {"dtype": torch.int32, "out_dtype": torch.int8},
                            "dtype argument int32 is not the out tensor's int8"),
    "tensor_args_dtype_not_out_dtype": (_QUANTIZE_TENSORS, {"dtype": torch.int32, "out_dtype": torch.int8},
                                        "dtype argument int32 is not the out tensor's int8"),
    "per_channel_dtype_not_out_dtype": (_QUANTIZE_CHANNELS, {"dtype": torch.int32, "out_dtype": torch.int8},
                                        "dtype argument int32 is not the out tensor's int8"),
    "quant_min_below_dtype": (_QUANTIZE, {"quant": (-129, 127)}, r"quant range \[-129, 127\] is not"),
    "quant_max_above_dtype": (_QUANTIZE, {"quant": (-128, 128)}, r"quant range \[-128, 128\] is not"),
    "unsupported_dtype": (_QUANTIZE, {"dtype": torch.int64}, "dtype int64 is not one it writes"),
    "integer_input": (_QUANTIZE, {"input_dtype": torch.int32}, "quantizes a int32 input"),
    "out_of_another_shape": (_QUANTIZE, {"out_shape": (3, 2)}, r"out is \(3, 2\), the input \(2, 3\)"),
    "scale_zero": (_QUANTIZE, {"scale": 0.0}, "scale 0.0 is not a finite positive number"),
    "scale_nan": (_QUANTIZE_TENSORS, {"scale": math.nan}, "scale nan is not a finite positive number"),
    "zero_point_2_40": (_QUANTIZE, {"zero_point": 1 << 40}, "zero point 1099511627776 lies outside"),
    "per_channel_scale_count": (_QUANTIZE_CHANNELS, {"channels": 8}, r"scales must be 3 float64 values"),
    "per_channel_axis": (_QUANTIZE_CHANNELS, {"axis": 2}, "axis 2 is not a dimension"),
    "well_formed_quantize_runs": (_QUANTIZE, {}, None),
    "well_formed_dequantize_runs": (_DEQUANTIZE_CHANNELS, {}, None),
    "dequantize_dtype_not_input": (_DEQUANTIZE, {"input_dtype": torch.int16}, "dtype argument int8 is not the input's"),
    "dequantize_int_out": (_DEQUANTIZE, {"out_dtype": torch.int32}, "writes a int32 out tensor"),
    "dequantize_tensor_args_shape": (_DEQUANTIZE_TENSORS, {"out_shape": (6,)}, r"out is \(6,\), the input"),
    "dequantize_per_channel_zero_point": (_DEQUANTIZE_CHANNELS, {"zero_point": 200}, "zero point 200 lies outside"),
}


@pytest.mark.parametrize("case", _QUANTIZED_CASES)
def test_executorch_quantize_kernels_never_reach_a_failing_check(case):
    """Each ET_CHECK of ExecuTorch's quantize / dequantize kernels called ``abort()``: the whole process died
    with SIGABRT (exit 134) for a 6.5 KB sealed file, and an application loading programs in-process with it."""
    name, arguments, words = _QUANTIZED_CASES[case]
    outcome = _outcome(_quantize_program(name, **arguments))
    if words is None:
        assert outcome == "ran"
    else:
        assert outcome.startswith("error: ") and "the file is not a program the compiler writes" in outcome, outcome
        assert re.search(words, outcome), outcome


def _call(name: str, build) -> bytes:
    program = OneCallProgram()
    args, out = build(program)
    return program.sealed(name, [*args, out, out], outputs=[out])


def _conv(padding: int, stride: int, out_hw: int):
    def build(program):
        x = program.tensor([1, 3, 8, 8], torch.float32, np.ones(3 * 64, np.float32).tobytes())
        weight = program.tensor([2, 3, 3, 3], torch.float32, np.ones(54, np.float32).tobytes())
        ints = [program.add(schema.Int(v)) for v in (stride, stride, padding, padding, 1, 1, 0, 0)]
        lists = [program.add(schema.IntList(ints[i:i + 2])) for i in range(0, 8, 2)]
        args = [x, weight, program.add(schema.Null()), lists[0], lists[1], lists[2], program.add(schema.Bool(False)),
                lists[3], program.add(schema.Int(1))]
        return args, program.tensor([1, 2, out_hw, out_hw], torch.float32)
    return build


def test_a_convolution_whose_padding_would_outgrow_its_planned_result_is_refused():
    """Padding 8,000 around an 8 x 8 image ran to exit 0 after 3.4 GB of RSS (padding 40,000 asked for 77 GB)."""
    outcome = _outcome(_call("aten::convolution.out", _conv(padding=8000, stride=1, out_hw=6)))
    assert outcome.startswith("error: ") and "its result would be (1, 2, 16006, 16006) float32" in outcome, outcome


def test_a_convolution_padded_past_its_image_runs_without_building_the_padding():
    """Padding 40,000 and a stride of 80,000: a 2 x 2 result the plan holds, from a padded image of 77 GB."""
    assert _outcome(_call("aten::convolution.out", _conv(padding=40000, stride=80000, out_hw=2))) == "ran"


def _repeat(program):
    x = program.tensor([2, 2], torch.float32, bytes(16))
    repeats = program.add(schema.IntList([program.add(schema.Int(v)) for v in (20000, 20000)]))
    return [x, repeats], program.tensor([2, 2], torch.float32)


def _constant_pad(program):
    x = program.tensor([1, 2, 2], torch.float32, bytes(16))
    pad = program.add(schema.IntList([program.add(schema.Int(v)) for v in (50000, 50000, 50000, 50000)]))
    return [x, pad, program.add(schema.Double(0.0))], program.tensor([1, 2, 2], torch.float32)


@pytest.mark.parametrize("name, build, shape", [
    ("aten::repeat.out", _repeat, "(40000, 40000)"),
    ("aten::constant_pad_nd.out", _constant_pad, "(1, 100002, 100002)"),
])
def test_a_result_larger_than_its_planned_tensor_is_refused_before_anything_runs(name, build, shape):
    """repeat filled 3.4 GB before failing; constant_pad_nd asked for 25 GB."""
    outcome = _outcome(_call(name, build))
    assert outcome.startswith("error: ") and f"its result would be {shape}" in outcome, outcome


def test_an_enum_argument_outside_its_enum_is_refused():
    """torch's binding casts any int to its C++ enum: aten::clone.out with memory_format -1 was a segmentation
    fault (found by the argument sweep)."""
    def build(program):
        return [program.tensor([2, 3], torch.float32), program.add(schema.Int(-1))], program.tensor(
            [2, 3], torch.float32)
    outcome = _outcome(_call("aten::clone.out", build))
    assert outcome.startswith("error: ") and "argument 'memory_format': -1 is not a memory format" in outcome, outcome


def test_pdist_takes_a_matrix():
    """torch's _pdist_forward kernel reads a tensor of another rank out of bounds, a segmentation fault (found
    by the argument sweep); the portable kernel's check_pdist_args refuses it."""
    def build(program):
        return [program.tensor([4, 2, 5, 0], torch.float32), program.add(schema.Double(0.5))], program.tensor(
            [6], torch.float32)
    outcome = _outcome(_call("aten::_pdist_forward.out", build))
    assert outcome.startswith("error: ") and "takes a contiguous 2-D input, got (4, 2, 5, 0)" in outcome, outcome
