"""Export stage: the user's model captured with ``torch.export`` (static shapes only), in eval mode or, for QAT,
in training mode on a copy; a model it cannot capture is a ``BadModel`` naming the cause."""

from __future__ import annotations

import copy
import sys
from contextlib import contextmanager, redirect_stderr
from io import StringIO

import torch
import torch.utils._pytree as pytree
from torch._C import DispatchKey
from torch._subclasses.fake_tensor import FakeTensor
from torch.export import ExportedProgram

from imxrt.errors import BadModel
from imxrt.model_checks import INDEX_DTYPES, called_exit

aten = torch.ops.aten


def export(model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...], training: bool = False
           ) -> ExportedProgram:
    """Capture the model with ``torch.export`` (``training``: in training mode, for QAT); a model it cannot
    capture, or one with dynamic shapes, is a ``BadModel`` naming the cause."""
    model = model.train() if training else model.eval()
    try:
        exported = _export_without_partial_graph(model, example_inputs)
    except SystemExit as e:  # not an Exception: it would end imxrt silently, with the user's status
        raise BadModel(f"model(...) {called_exit(e)} while torch.export ran forward() on the example inputs; "
                       "forward() must return its outputs, not exit the process") from None
    except Exception as e:  # torch.export raises many types; the first line names the cause
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BadModel(f"torch.export could not capture the model ({type(e).__name__}: {first}); "
                       f"{_advice(example_inputs)}") from e
    for node in exported.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and any(not isinstance(d, int) for d in value.shape):
            raise BadModel("dynamic shapes are not supported: the NPU and the memory plan need static "
                           f"shapes (symbolic shape {tuple(value.shape)})", node=node.name)
        if node.op == "call_function" and node.target in _WITHOUT_KERNEL:
            raise BadModel(_WITHOUT_KERNEL[node.target](node), node=node.name)
        if node.op == "call_function" and isinstance(value, torch.Tensor) and value.dtype.is_floating_point \
                and value.dtype != torch.float32:
            raise BadModel(f"{node.target} makes a {value.dtype} tensor; an int8 program carries int8, float32 and "
                           "index tensors (neither the NPU, CMSIS-NN nor the stock runtime's kernels compute in "
                           f"{value.dtype}): compute in float32 (drop the dtype= argument or the cast)",
                           node=node.name)
    signature = exported.module_call_graph[0].signature
    signature.out_spec = _as_plain_tuples(signature.out_spec)
    return exported


def _advice(example_inputs: tuple[torch.Tensor, ...]) -> str:
    """What to change when forward() does not run: an integer or boolean input read as data is the likely
    cause when there is one."""
    for index, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and x.dtype in INDEX_DTYPES:
            return (f"example input {index} is {x.dtype}, which the program takes as indices or a mask (for "
                    "embedding, index_select, masked_fill); give float32 data for anything else")
    return "remove data-dependent control flow or shapes from forward()"


def _sort(node) -> str:
    """sort: no kernel anywhere; ``torch.topk`` of every value (a portable kernel) gives the same values."""
    x = node.args[0].meta["val"]
    dim = int(node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else -1)) % max(x.dim(), 1)
    descending = bool(node.kwargs.get("descending", node.args[2] if len(node.args) > 2 else False))
    return ("sort has no kernel in the stock runtime (neither the NPU, CMSIS-NN nor ExecuTorch's portable "
            "kernels); torch.topk has a portable kernel and gives the same values: write "
            f"torch.topk(x, {x.shape[dim] if x.dim() else 1}, dim={dim}, largest={descending})")


# Ops no kernel of the stock runtime runs, refused by name with what to write instead.
_WITHOUT_KERNEL = {aten.sort.default: _sort, aten.sort.stable: _sort}


def _as_plain_tuples(spec: pytree.TreeSpec) -> pytree.TreeSpec:
    """The output structure with every named tuple a plain tuple: ``torch.max(x, dim)`` returns a
    ``torch.return_types.max``, whose type the program's output description cannot name; the program returns
    the same tensors in the same order (values, then indices)."""
    if spec.is_leaf():
        return spec
    children = [_as_plain_tuples(child) for child in spec.children()]
    if pytree.is_structseq_class(spec.type) or pytree.is_namedtuple_class(spec.type):
        return pytree.TreeSpec(tuple, None, children)
    return pytree.TreeSpec(spec.type, spec.context, children)


def _export_without_partial_graph(model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...]
                                  ) -> ExportedProgram:
    """``torch.export.export``, without the graph it prints to stderr before raising on data-dependent control
    flow (``partial_fx_graph``: some twenty lines, twice, before the one line that names the problem; the
    exception still carries it). Whatever else is written to stderr meanwhile (the model's own prints) is
    passed on after."""
    written = StringIO()
    graph = None
    try:
        with redirect_stderr(written), _recurrent_layers_sized_by_shape():
            return torch.export.export(model, example_inputs, strict=False)
    except BaseException as e:
        graph = getattr(e, "partial_fx_graph", None)
        raise
    finally:
        text = written.getvalue()
        sys.stderr.write(text.replace(f"{graph}\n", "") if graph is not None else text)


# A recurrent layer stays one node in the exported graph (``aten.lstm.input``), but torch.export finds its
# output sizes by running its Python decomposition on fake tensors, every op of every time step: 5 s for a
# 3-layer LSTM over 400 steps, 0.4 s over 40. The sizes follow from the arguments' alone.
_RECURRENT_LAYERS = {aten.lstm.input: "lstm", aten.gru.input: "gru", aten.rnn_tanh.input: "rnn",
                     aten.rnn_relu.input: "rnn"}


@contextmanager
def _recurrent_layers_sized_by_shape():
    """While torch.export runs: a recurrent layer called on fake tensors returns empty results of its output
    sizes instead of tracing its steps (real tensors still take torch's own implementation)."""
    saved = {op: op.py_kernels[DispatchKey.CompositeImplicitAutograd] for op in _RECURRENT_LAYERS
             if DispatchKey.CompositeImplicitAutograd in op.py_kernels}
    for op, original in saved.items():
        op.py_kernels[DispatchKey.CompositeImplicitAutograd] = _sized_by_shape(_RECURRENT_LAYERS[op], original)
        op._dispatch_cache.clear()
    try:
        yield
    finally:
        for op, original in saved.items():
            op.py_kernels[DispatchKey.CompositeImplicitAutograd] = original
            op._dispatch_cache.clear()


def _sized_by_shape(kind: str, original):
    def layer(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):  # noqa: A002
        if not isinstance(input, FakeTensor):
            return original(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        h = hx[0] if kind == "lstm" else hx  # [layers x directions, batch, hidden (or projection)]
        output = input.new_empty(input.shape[0], input.shape[1], (2 if bidirectional else 1) * h.shape[-1])
        if kind == "lstm":
            return output, hx[0].new_empty(hx[0].shape), hx[1].new_empty(hx[1].shape)
        return output, hx.new_empty(hx.shape)
    return layer


def export_for_qat(model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...]) -> ExportedProgram:
    """``export`` in training mode of a copy of ``model``: the exported program shares its parameters with the
    module it traced, and QAT trains them, so the user's float model (their reference for accuracy) stays as it
    was, weights and mode."""
    try:
        model = copy.deepcopy(model)
    except Exception as e:  # a module holding an uncopyable object (a file, a lock)
        raise BadModel(f"QAT trains a copy of the model, and copy.deepcopy(model) failed ({type(e).__name__}: "
                       f"{e}); keep objects that cannot be copied out of the module") from e
    return export(model, example_inputs, training=True)
