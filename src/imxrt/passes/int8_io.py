"""The program's boundary: int8 model I/O, and the description of every model input and output.

With float I/O (the default) the lowered program quantizes each float input and dequantizes each output:

    x (float) -> cortex_m.quantize_per_tensor(x, s, zp) -> ...int8... -> cortex_m.dequantize_per_tensor -> y (float)

``make_io_int8`` removes those two conversions: the placeholder becomes the quantize's int8 value (its shape
and dim order, so a channels_last input stays channels_last) and the output is the int8 value the dequantize
read. No float tensor is left for the memory plan; firmware passes the sensor's int8 bytes in directly.
The removed conversions' scale and zero point stay on the nodes (``io_qparams``) for ``io_metadata``.
"""

from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, TensorArgument
from torch.fx import Node

from imxrt.errors import BadModel
from imxrt.passes.qdq import is_index_tensor

IO_CHOICES = ("float", "int8")
_QPARAMS = "io_qparams"  # node meta: (scale, zero_point) of the conversion at this boundary


def _quantize():
    return exir_ops.edge.cortex_m.quantize_per_tensor.default


def _dequantize():
    return exir_ops.edge.cortex_m.dequantize_per_tensor.default


def _qparams(conversion: Node) -> tuple[float, int]:
    return float(conversion.args[1]), int(conversion.args[2])


def _user_inputs(program: ExportedProgram) -> list[Node]:
    names = [spec.arg.name for spec in program.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT
             and isinstance(spec.arg, TensorArgument)]
    by_name = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    return [by_name[name] for name in names]


def _outputs(program: ExportedProgram) -> list:
    outputs = program.graph.output_node().args[0]
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def make_io_int8(program: ExportedProgram) -> None:
    """Make ``program``'s (a CPU-lowered program's) inputs and outputs its int8 tensors, in place.

    Integer and boolean inputs (indices, masks) stay as they are. A float input read other than by one int8
    quantize, or an output not made by a dequantize, cannot be int8: that is a ``BadModel`` naming it."""
    graph = program.graph
    erased: list[str] = []
    for placeholder in _user_inputs(program):
        if is_index_tensor(placeholder):
            continue  # indices or a mask: never quantized, the program's input as it is
        users = list(placeholder.users)
        if not users or any(u.target != _quantize() for u in users) or \
                len({(_qparams(u), tuple(u.args[3:])) for u in users}) != 1:
            readers = ", ".join(sorted(u.name for u in users)) or "nothing"
            raise BadModel(f"--io int8: model input {placeholder.name} is read by {readers}, not by one int8 "
                           "quantize; compile with --io float", node=placeholder.name)
        placeholder.meta["val"] = users[0].meta["val"]
        placeholder.meta[_QPARAMS] = _qparams(users[0])
        for quantize in users:
            erased.append(quantize.name)
            quantize.replace_all_uses_with(placeholder)
            graph.erase_node(quantize)
    output_node = graph.output_node()
    values = _outputs(program)
    for index, value in enumerate(values):
        if not isinstance(value, Node) or value.target != _dequantize():
            name = getattr(value, "name", repr(value))
            raise BadModel(f"--io int8: model output {index} ({name}) is not a dequantized int8 tensor; "
                           "compile with --io float", node=name)
        source = value.args[0]
        source.meta.setdefault(_QPARAMS, _qparams(value))
        erased.append(value.name)
        values[index] = source
    original = output_node.args[0]
    output_node.args = (tuple(values) if isinstance(original, (list, tuple)) else values[0],)
    for node in list(graph.nodes):
        if node.name in erased and not node.users:
            graph.erase_node(node)
    for spec, value in zip(program.graph_signature.output_specs, values, strict=True):
        if isinstance(spec.arg, TensorArgument):
            spec.arg.name = value.name
    program.graph_module.recompile()


def io_metadata(program: ExportedProgram) -> dict:
    """``{"inputs": [...], "outputs": [...]}``: per model input and output its name, shape, dtype, dim order,
    and the scale and zero point that map it to the model's float values (for a float tensor: those of the
    quantize reading it or the dequantize making it; null when there is none)."""
    inputs = []
    for placeholder in _user_inputs(program):
        qparams = placeholder.meta.get(_QPARAMS)
        if qparams is None:
            quantizes = [u for u in placeholder.users if u.target == _quantize()]
            qparams = _qparams(quantizes[0]) if quantizes else None
        inputs.append(_entry(placeholder.name, placeholder.meta["val"], qparams))
    outputs = []
    for value in _outputs(program):
        qparams = None
        if isinstance(value, Node):
            qparams = _qparams(value) if value.target == _dequantize() else value.meta.get(_QPARAMS)
        outputs.append(_entry(getattr(value, "name", str(value)), getattr(value, "meta", {}).get("val"), qparams))
    return {"inputs": inputs, "outputs": outputs}


def _entry(name: str, value, qparams: tuple[float, int] | None) -> dict:
    tensor = isinstance(value, torch.Tensor)
    return {
        "name": name,
        "shape": list(value.shape) if tensor else [],
        "dtype": str(value.dtype).removeprefix("torch.") if tensor else type(value).__name__,
        "dim_order": list(value.dim_order()) if tensor else [],
        "scale": qparams[0] if qparams else None,
        "zero_point": qparams[1] if qparams else None,
    }
