"""Decisions int8 rounding can flip: an argmax or a softmax reading values whose int8 step is coarser than the
gaps that decide it (``report.json`` ``warnings``, an ``advice`` item, a line of the compile summary).

A deciding tensor is the input of a softmax, log_softmax, argmax or amax in the graph, or a model output whose
last dim holds 2 or more values (logits a user takes the argmax of). While calibration runs, a hook on the
observer of each deciding tensor takes the gap between the largest and the second largest value of each
decision row (each position along the other dims): no forward of its own. The tensor's int8 step is that
observer's scale once calibrated. A row whose gap is below one step can change its decision on rounding
alone: when more than ``CLOSE_SHARE`` of the rows do, the tensor is reported with the step, the share and the
remedies.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
from torch.fx import GraphModule, Node

from imxrt.quantization.observers import on_observed
from imxrt.report.names import module_of

CLOSE_SHARE = 0.02  # share of rows closer than one step above which a tensor is reported

aten = torch.ops.aten
# op -> (kind, where its deciding dim is: an argument position, or None for every dim)
_DECIDERS = {
    aten.softmax.int: ("softmax", 1),
    aten._softmax.default: ("softmax", 1),
    aten.log_softmax.int: ("log_softmax", 1),
    aten._log_softmax.default: ("log_softmax", 1),
    aten.argmax.default: ("argmax", 1),
    aten.amax.default: ("amax", 1),
}
OUTPUT = "output"


@dataclass(frozen=True)
class Decider:
    """A tensor a decision reads: the input of a ``kind`` op (``node``), or model output ``index`` (kind
    ``output``), decided along ``dims`` (``None``: the whole tensor is one decision)."""

    kind: str
    index: int
    dims: tuple[int, ...] | None
    node: str  # the node that decides (the op, or the op whose value is the output)
    module: str  # the PyTorch module it came from ("" for the model's own forward)

    @property
    def tensor(self) -> str:
        where = f" in {self.module}" if self.module else ""
        if self.kind == OUTPUT:
            return f"model output {self.index}{where}"
        return f"the input of {self.kind} {self.node}{where}"


class DecisionGaps:
    """The gap of every decision row of each deciding tensor of an observed (prepared) model, over the
    samples calibration runs; ``watch`` before calibrating, ``stop`` after."""

    def __init__(self):
        self.deciders: list[Decider] = []
        self.gaps: list[list[np.ndarray]] = []
        self.steps: list[float | None] = []
        self._observers: list[torch.nn.Module] = []
        self._handles: list = []

    def watch(self, prepared: GraphModule) -> DecisionGaps:
        """Hook the observer of every deciding tensor of ``prepared`` (none: nothing runs)."""
        modules = dict(prepared.named_modules())
        counts: dict[str, int] = {}
        for node in prepared.graph.nodes:
            if node.op != "call_function" or node.target not in _DECIDERS:
                continue
            kind, dim_at = _DECIDERS[node.target]
            counts[kind] = counts.get(kind, 0) + 1
            value = _value(node.args[0])
            dims = _dims(node.args[dim_at] if len(node.args) > dim_at else node.kwargs.get("dim"),
                         value.dim()) if isinstance(value, torch.Tensor) else None
            self._add(Decider(kind, counts[kind] - 1, dims, node.name, module_of(node).get("module", "")),
                      node.args[0], modules)
        outputs = prepared.graph.output_node().args[0]
        for index, value in enumerate(outputs if isinstance(outputs, (list, tuple)) else [outputs]):
            tensor = _value(value)
            if isinstance(tensor, torch.Tensor) and tensor.dim() >= 1 and tensor.shape[-1] >= 2:
                source = value.args[0] if value.op == "call_module" and value.args else value
                self._add(Decider(OUTPUT, index, (tensor.dim() - 1,), getattr(source, "name", value.name),
                                  module_of(source).get("module", "") if isinstance(source, Node) else ""),
                          value, modules)
        return self

    def _add(self, decider: Decider, value: object, modules: dict) -> None:
        """Follow ``decider``'s tensor to the observer that calibrates it; a float value has none."""
        observer = modules.get(value.target) if isinstance(value, Node) and value.op == "call_module" else None
        if observer is None or not hasattr(observer, "calculate_qparams"):
            return
        tensor = _value(value)
        if not isinstance(tensor, torch.Tensor) or not tensor.dtype.is_floating_point:
            return
        position = len(self.deciders)
        self.deciders.append(decider)
        self.gaps.append([])
        self._observers.append(observer)
        self._handles.append(on_observed(observer, functools.partial(self._record, position, tuple(tensor.shape))))

    def _record(self, position: int, shape: tuple, value: torch.Tensor) -> None:
        """One observation of the deciding tensor, not of another tensor sharing its observer (an amax's output
        shares its input's)."""
        if tuple(value.shape) == shape:
            self.gaps[position].append(_gaps(value, self.deciders[position].dims))

    def stop(self) -> None:
        """Remove the hooks and read each deciding tensor's int8 step off its calibrated observer."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.steps = [float(observer.calculate_qparams()[0].reshape(-1)[0]) for observer in self._observers]

    def warnings(self) -> list[dict]:
        """One entry per deciding tensor with more than ``CLOSE_SHARE`` of its rows closer than its step."""
        found = []
        for decider, gaps, step in zip(self.deciders, self.gaps, self.steps, strict=True):
            if not gaps:
                continue
            gap = np.concatenate(gaps)
            close = int(np.count_nonzero(gap < step))
            if gap.size == 0 or close / gap.size <= CLOSE_SHARE:
                continue
            found.append({
                "kind": "coarse_decision_step",
                "tensor": decider.tensor,
                "node": decider.node,
                "module": decider.module,
                "step": step,
                "rows": int(gap.size),
                "close_rows": close,
                "close_share": close / gap.size,
                "median_gap": float(f"{np.median(gap):.3g}"),
                "samples": len(gaps),
            })
        return found


def _value(node: object) -> torch.Tensor | None:
    """The value ``node`` stands for (an observer call passes on the value of what it observes)."""
    if isinstance(node, Node) and node.op == "call_module" and node.args:
        node = node.args[0]
    value = node.meta.get("val") if isinstance(node, Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _dims(dim, rank: int) -> tuple[int, ...] | None:
    if dim is None:
        return None
    dims = dim if isinstance(dim, (list, tuple)) else (dim,)
    return tuple(sorted(d % rank for d in dims)) if dims else None  # amax(dim=[]) reduces every dim


def _gaps(value: torch.Tensor, dims: tuple[int, ...] | None) -> np.ndarray:
    """Largest minus second largest along ``dims``, one per row (an empty array when a row holds one value)."""
    value = value.detach().double()
    if dims is None:
        rows = value.reshape(1, -1)
    else:
        kept = [d for d in range(value.dim()) if d not in dims]
        rows = value.permute(*kept, *dims).reshape(-1, int(np.prod([value.shape[d] for d in dims])))
    if rows.shape[1] < 2:
        return np.zeros(0)
    top = rows.topk(2, dim=1).values
    return (top[:, 0] - top[:, 1]).numpy()


def advice(warning: dict) -> dict:
    """The ``advice`` item of a warning: the tensor, its step, the share of close decisions, the remedies."""
    return {
        "kind": warning["kind"],
        "title": f"coarse int8 step on {warning['tensor']}",
        "change": "narrow the range these values are quantized over: --activation-ranges mse "
                  "(CompileOptions(activation_ranges=\"mse\")) when rare outliers stretch it; QAT "
                  "(imxrt.prepare_qat / compile_qat); or make the logits smaller, e.g. drop a wide final layer's "
                  "bias or an output scale (a temperature) that only stretches them",
        "why": _why(warning),
        "figure": f"{warning['close_share']:.1%} of decisions closer than one step",
    }


def _why(warning: dict) -> str:
    return (f"its int8 step is {warning['step']:.4g}, and {warning['close_rows']:,} of {warning['rows']:,} "
            f"calibration decisions ({warning['close_share']:.1%}) have a gap below one step (median gap "
            f"{warning['median_gap']:.4g}): rounding alone can flip them")


def warning_lines(report: dict) -> list[str]:
    """The compile summary's lines for the ``warnings`` of ``report``."""
    return [f"warning: coarse int8 step on {w['tensor']}: {_why(w)}" for w in report.get("warnings", [])
            if w["kind"] == "coarse_decision_step"]


def add_to_report(report: dict, gaps: DecisionGaps) -> None:
    """``report["warnings"]`` and their advice items (first: a wrong answer outweighs a slow one)."""
    found = gaps.warnings()
    report["warnings"] = found
    report["advice"] = [advice(w) for w in found] + report["advice"]
