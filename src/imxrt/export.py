"""Export stage: the user's model captured with ``torch.export`` (static shapes only), in eval mode or, for QAT,
in training mode on a copy; a model it cannot capture is a ``BadModel`` naming the cause."""

from __future__ import annotations

import copy
import sys
from contextlib import redirect_stderr
from io import StringIO

import torch
from torch.export import ExportedProgram

from imxrt.errors import BadModel
from imxrt.model_checks import called_exit


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
                       "remove data-dependent control flow or shapes from forward()") from e
    for node in exported.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and any(not isinstance(d, int) for d in value.shape):
            raise BadModel("dynamic shapes are not supported: the NPU and the memory plan need static "
                           f"shapes (symbolic shape {tuple(value.shape)})", node=node.name)
    return exported


def _export_without_partial_graph(model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...]
                                  ) -> ExportedProgram:
    """``torch.export.export``, without the graph it prints to stderr before raising on data-dependent control
    flow (``partial_fx_graph``: some twenty lines, twice, before the one line that names the problem; the
    exception still carries it). Whatever else is written to stderr meanwhile (the model's own prints) is
    passed on after."""
    written = StringIO()
    graph = None
    try:
        with redirect_stderr(written):
            return torch.export.export(model, example_inputs, strict=False)
    except BaseException as e:
        graph = getattr(e, "partial_fx_graph", None)
        raise
    finally:
        text = written.getvalue()
        sys.stderr.write(text.replace(f"{graph}\n", "") if graph is not None else text)


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
