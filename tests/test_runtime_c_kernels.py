"""ExecuTorch's C++ quantize/dequantize kernels, as the host runtime binds them, on every dim order a program
may hold: the result equals the contiguous call's, and the process survives.

Each call runs in a child process: a kernel that writes out of bounds corrupts the heap and kills the
process (``double free or corruption``), which here is a failing test, not the end of the run."""

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # every test here compiles models

# (op, overload, builder of the schema-ordered arguments; the last is ``out``)
_CASES = {
    "quantize_per_tensor": "lambda x, q, out_q, out_f: [x, 0.05, 3, -128, 127, CHAR, out_q]",
    "dequantize_per_tensor": "lambda x, q, out_q, out_f: [q, 0.05, 3, -128, 127, CHAR, None, out_f]",
    "quantize_per_channel": "lambda x, q, out_q, out_f: [x, torch.full((4,), 0.05, dtype=torch.float64), "
                            "torch.zeros(4, dtype=torch.int64), 0, -128, 127, CHAR, out_q]",
    "dequantize_per_channel": "lambda x, q, out_q, out_f: [q, torch.full((4,), 0.05), "
                              "torch.zeros(4, dtype=torch.int64), 0, -128, 127, CHAR, None, out_f]",
}

_PROGRAM = """
import torch
from executorch.exir import schema
from imxrt.runtime.ops import resolve
CHAR = int(schema.ScalarType.CHAR)
kernel = resolve(schema.Operator(name="quantized_decomposed::{op}", overload="out"), "test.pte")
build = {build}
torch.manual_seed(0)
x_dense = torch.randn(4, 1, 3, 3)
q_dense = torch.randint(-128, 128, (4, 1, 3, 3), dtype=torch.int8)
expected = kernel.call(build(x_dense, q_dense, torch.empty_like(q_dense), torch.empty_like(x_dense))).clone()

def restrided(t, strides):
    return torch.empty_strided(t.shape, strides, dtype=t.dtype).copy_(t)

# [1, 0, 2, 3]: the size-1 dimension's stride is free; channels_last; and a real transposed layout
for strides in [(9, 36, 3, 1), (9, 1, 3, 1), (1, 36, 12, 4)]:
    for inputs_too in (False, True):
        x = restrided(x_dense, strides) if inputs_too else x_dense
        q = restrided(q_dense, strides) if inputs_too else q_dense
        out_q, out_f = restrided(torch.zeros_like(q_dense), strides), restrided(torch.zeros_like(x_dense), strides)
        for _ in range(20):
            got = kernel.call(build(x, q, out_q, out_f))
        assert torch.equal(got, expected), strides
print("ok")
"""


@pytest.mark.parametrize("op", sorted(_CASES))
def test_cpp_kernel_takes_every_dim_order(op):
    program = textwrap.dedent(_PROGRAM).format(op=op, build=_CASES[op])
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]
