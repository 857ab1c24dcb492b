"""Checks every compiled test case must pass: the ``.pte`` on the host runtime against the quantized program.

``CompileResult.quantized`` is the int8 program as PyTorch runs it (fake quantization in float); the ``.pte``
runs the same program in integers (TFLM / CMSIS-NN requantization). The two differ only by rounding, which
README.md bounds as ``QUANTIZED_ROUNDING_LSB`` units of each output's scale. A larger difference means the two
programs are not the same program (a constant at the wrong scale, a wrong layout, a dropped op).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch

import imxrt.runtime

QUANTIZED_ROUNDING_LSB = 2  # README.md, "The .pte and the quantized program"
# Both sides dequantize in float32: q * scale carries a relative error of 2^-24, up to about 1e-5 of one step
# at |q| = 128, so a difference of exactly 2 steps can read 2.000008.
_FLOAT32_STEPS = 1e-4


def program_sqnr_db(model, result, samples) -> float:
    """SQNR in dB of the ``.pte``'s first output (on the host runtime) against the float model's, over every
    sample (signal and noise energies summed in float64)."""
    program = imxrt.runtime.load(result.pte)
    signal = noise = 0.0
    for inputs in samples:
        with torch.no_grad():
            reference = model(*inputs).double().numpy()
        difference = reference - program.forward(*inputs)[0].astype(np.float64)
        signal += float((reference ** 2).sum())
        noise += float((difference ** 2).sum())
    return 10 * np.log10(signal / noise)


def program_digest(result) -> str:
    """SHA-256 over the ``.pte`` and every partition's LiteRT subgraph: what a byte-identity check compares
    (``IMXRT_FINGERPRINTS`` in conftest.py, ``benchmarks/conformance.py --json``)."""
    digest = hashlib.sha256(result.pte)
    for tflite in result.partitions:
        digest.update(hashlib.sha256(tflite).digest())
    return digest.hexdigest()


def within_rounding_bound(lsb: float) -> bool:
    return lsb <= QUANTIZED_ROUNDING_LSB + _FLOAT32_STEPS


def _operand_scale_ratios(quantized) -> list[float]:
    """Per output of the quantized program: the coarsest scale among the int8 operands of the op that
    computes it, in units of the output's scale (1 where none is coarser). A rounding step on such an
    operand is that many steps of the output (README: the bound is in the coarser scale's units)."""
    from torch.fx import Node

    def scale_of(node) -> float | None:
        if isinstance(node, Node) and "dequantize_per_tensor" in str(node.target):
            return float(node.args[1])
        return None

    def op_ratio(op, s_out) -> float:
        return max([1.0, *(scale_of(a) / s_out for a in op.all_input_nodes if scale_of(a) is not None)])

    def loop_ratio(node) -> float:
        """A recurrent loop's output (a getitem of a scan, or its dequantize): rounding inside a step carries
        on to the next, so a state may be off by the coarsest operand-to-result scale ratio among the body's
        ops that write a carry or a stacked output (1 for any other value)."""
        import operator

        while isinstance(node, Node) and "quantize_per_tensor" in str(node.target):  # through q / dq
            node = node.args[0]
        if not isinstance(node, Node) or node.target is not operator.getitem or "scan" not in str(node.args[0].target):
            return 1.0
        body = getattr(quantized.graph_module, node.args[0].args[0].target)
        (body_output,) = [n for n in body.graph.nodes if n.op == "output"]
        ratio = 1.0
        for value in body_output.args[0]:
            if "quantize_per_tensor" in str(value.target) and "dequantize" not in str(value.target):
                ratio = max(ratio, op_ratio(value.args[0], float(value.args[1])))
        return ratio

    ratios = []
    (output,) = [n for n in quantized.graph.nodes if n.op == "output"]
    for arg in output.args[0]:
        ratio, s_out = 1.0, scale_of(arg)
        quantize = arg.args[0] if s_out is not None and isinstance(arg.args[0], Node) else None
        op = quantize.args[0] if quantize is not None and isinstance(quantize.args[0], Node) else None
        if op is not None:
            ratio = max(loop_ratio(op), op_ratio(op, s_out) * max([1.0, *map(loop_ratio, op.all_input_nodes)]))
        ratios.append(ratio)
    return ratios


def _outputs(function, inputs: Sequence[torch.Tensor]) -> tuple:
    with torch.no_grad():
        outputs = function(*torch.utils._pytree.tree_map(torch.clone, tuple(inputs)))
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


class _AsDeployed(torch.fx.Interpreter):
    """The quantized program with the deployed kernels' answer where PyTorch's float arithmetic has none an
    int8 kernel could give: a division by an int8 divisor at its zero point is 0 (``cortex_m::quantized_div``;
    PyTorch's ±inf would saturate); a leaky ReLU of 0 is 0 whatever its slope (TFLM's LEAKY_RELU; PyTorch's
    0 * inf is NaN). README: "The .pte and the quantized program"."""

    def call_function(self, target, args, kwargs):
        if target is torch.ops.aten.div.Tensor and not kwargs and isinstance(args[1], torch.Tensor):
            numerator, divisor = args
            return torch.where(divisor == 0, torch.zeros(()), numerator / divisor)
        if target is torch.ops.aten.leaky_relu.default:
            x = args[0]
            return torch.where(x == 0, torch.zeros(()), super().call_function(target, args, kwargs))
        return super().call_function(target, args, kwargs)


def _quantized_outputs(result, inputs: Sequence[torch.Tensor]) -> tuple:
    module = result.quantized.module()
    with torch.no_grad():
        # the graph's placeholders: the inputs flattened (an argument may be a tuple of tensors)
        outputs = _AsDeployed(module).run(*[t.clone() for t in torch.utils._pytree.tree_leaves(tuple(inputs))])
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def output_differences_lsb(result, inputs: Sequence[torch.Tensor], model=None) -> list[float]:
    """Per model output: max |pte - quantized| in LSB of the output's scale, or of its last op's operand
    where that is coarser (``_operand_scale_ratios``). With the float ``model``, the
    elements where it has no finite value (log of a negative input) are left out: there the quantized
    program's float arithmetic has no defined int8 answer either (TFLM's, checked per partition, rules)."""
    program = imxrt.runtime.load(result.pte)
    ours = program.forward(*inputs)
    theirs = _quantized_outputs(result, inputs)
    undefined = [None] * len(theirs)
    if model is not None:
        undefined = [~np.isfinite(o.detach().numpy()) if o.shape == t.shape else None
                     for o, t in zip(_outputs(model, inputs), theirs, strict=False)]
    assert len(ours) == len(theirs), f".pte has {len(ours)} outputs, the quantized program {len(theirs)}"
    differences = []
    ratios = _operand_scale_ratios(result.quantized)
    for out, ref, io, skip, ratio in zip(ours, theirs, result.io["outputs"], undefined, ratios, strict=True):
        ref = ref.detach().numpy()
        assert out.shape == ref.shape, f"output {io['name']}: shape {out.shape} != {ref.shape}"
        scale = io["scale"] * ratio if io["scale"] else 1.0
        out, ref = out.astype(np.float64), ref.astype(np.float64)
        if skip is not None:
            out, ref = out[~skip], ref[~skip]
        nan = np.isnan(ref)  # a float op's NaN (sqrt of a negative value) is the answer in both programs
        if (np.isnan(out) != nan).any():
            differences.append(float("inf"))
            continue
        gap = np.where(out[~nan] == ref[~nan], 0.0, np.abs(out[~nan] - ref[~nan]))  # equal infinities too
        differences.append(float(gap.max() / scale) if gap.size else 0.0)
    return differences


def assert_pte_matches_quantized(result, inputs: Sequence[torch.Tensor], model=None) -> None:
    differences = output_differences_lsb(result, inputs, model)
    assert within_rounding_bound(max(differences)), \
        f"the .pte differs from the quantized program by {differences} LSB (bound {QUANTIZED_ROUNDING_LSB})"


def odd_dim_orders(pte: bytes) -> list[tuple[int, list[int], list[int]]]:
    """(value index, sizes, dim order) of every tensor in the program whose dim order is neither the
    contiguous one nor channels_last: the orders ExecuTorch's kernels take."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    plan = deserialize_pte_binary(pte).program.execution_plan[0]
    odd = []
    for index, value in enumerate(plan.values):
        tensor = value.val
        order = list(getattr(tensor, "dim_order", None) or [])
        if order and order != list(range(len(order))) and order != [0, 2, 3, 1]:
            odd.append((index, list(tensor.sizes), order))
    return odd


def partition_mismatches(result, inputs: Sequence[torch.Tensor]) -> list[str]:
    """Run the ``.pte`` on the host runtime, recording the int8 tensors every NPU partition received and
    returned; run each partition's ``.tflite`` in TFLM (LiteRT's reference kernels for the ops TFLM has no
    int8 kernel for) on the same tensors. Returns one line per partition
    call whose outputs differ from TFLM's (empty: bit-exact)."""
    from unittest import mock

    import oracles

    from imxrt.runtime.litert import LiteRTRunner

    calls = []
    from_bytes, run_checked = LiteRTRunner.from_bytes.__func__, LiteRTRunner.run_checked

    def recording_from_bytes(cls, tflite):
        runner = from_bytes(cls, tflite)
        runner.recorded_tflite = bytes(tflite)
        return runner

    def recording_run(self, arrays):
        results = run_checked(self, arrays)
        calls.append((self.recorded_tflite, [np.array(a) for a in arrays], [np.array(r) for r in results]))
        return results

    with mock.patch.object(LiteRTRunner, "from_bytes", classmethod(recording_from_bytes)), \
            mock.patch.object(LiteRTRunner, "run_checked", recording_run):
        imxrt.runtime.load(result.pte).forward(*inputs)
    # a partition in a recurrent layer's loop runs once per step: every call is checked
    assert len(calls) >= len(result.partitions), f"{len(calls)} partition calls for {len(result.partitions)}"
    mismatches = []
    for index, (tflite, arrays, ours) in enumerate(calls):
        assert tflite in result.partitions, f"partition call {index} ran a subgraph the compile did not write"
        declared, _ = oracles.tflite_io(tflite)  # the bytes as the .tflite declares them (a scalar is rank 0)
        arrays = [a.reshape(info[0]) for a, info in zip(arrays, declared, strict=True)]
        oracles.run_litert(tflite, arrays)  # LiteRT must prepare and run it too (its values may round apart)
        theirs = oracles.run_reference(tflite, arrays)
        for position, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            if not np.array_equal(a.reshape(b.shape), b):
                differing = int(np.count_nonzero(a.reshape(b.shape) != b))
                mismatches.append(f"partition call {index} output {position}: {differing} of {b.size} values "
                                  f"differ from TFLM (max {int(np.abs(a.reshape(b.shape).astype(int) - b).max())})")
    return mismatches


def check_case(result, inputs: Sequence[torch.Tensor], model=None) -> None:
    """The checks every compiled case passes: TFLM's numbers on every partition, the quantized program's
    numbers within the rounding bound, and only dim orders ExecuTorch's kernels take."""
    assert partition_mismatches(result, inputs) == []
    assert_pte_matches_quantized(result, inputs, model)
    assert odd_dim_orders(result.pte) == []
