"""Decisions int8 rounding can flip: an argmax or a softmax reading values whose int8 step is coarser than the
gaps that decide it (``report.json`` ``warnings``, an ``advice`` item, a line of the compile summary).

A deciding tensor is the input of a softmax, log_softmax, argmax or amax in the graph, or a model output whose
last dim holds 2 or more values (logits a user takes the argmax of). On every calibration sample the float
program gives the gap between the largest and the second largest value of each decision row (each position
along the other dims); the tensor's int8 step is its scale in the quantized program. A row whose gap is below
one step can change its decision on rounding alone: when more than ``CLOSE_SHARE`` of the rows do, the
tensor is reported with the step, the share and the remedies.

The float program runs once per calibration sample, only for models that have a deciding tensor, as the
samples pass on to calibration (a generator of samples is read once).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind

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
    """A tensor a decision reads: the input of the ``index``-th ``kind`` op of the graph, or model output
    ``index`` (kind ``output``), decided along ``dims`` (``None``: the whole tensor is one decision)."""

    kind: str
    index: int
    dims: tuple[int, ...] | None
    node: str  # the float program's node that decides
    module: str  # the PyTorch module it came from ("" for the model's own forward)

    @property
    def tensor(self) -> str:
        where = f" in {self.module}" if self.module else ""
        if self.kind == OUTPUT:
            return f"model output {self.index}{where}"
        return f"the input of {self.kind} {self.node}{where}"


class DecisionGaps:
    """The gap of every decision row of each deciding tensor on the samples ``record`` was given."""

    def __init__(self, exported: ExportedProgram, deciders: list[Decider], values: list[torch.fx.Node],
                 counts: dict[str, int]):
        self.deciders = deciders
        self.counts = counts  # ops of each deciding kind in the float program
        self.gaps: list[list[np.ndarray]] = [[] for _ in deciders]
        self.samples = 0
        start = time.perf_counter()
        graph_module = exported.module(check_guards=False)
        graph = copy.deepcopy(graph_module.graph)
        graph._codegen = torch.fx.graph.CodeGen()  # flat inputs and outputs
        by_name = {node.name: node for node in graph.nodes}
        graph.output_node().args = (tuple(by_name[node.name] for node in values),)
        graph.eliminate_dead_code()
        # its own weights: calibration casts the parameters it shares with the exported program to float64
        self.module = copy.deepcopy(torch.fx.GraphModule(graph_module, graph))
        self.seconds = time.perf_counter() - start  # this and the float runs: the whole cost of the check

    @classmethod
    def of(cls, exported: ExportedProgram) -> DecisionGaps | None:
        """The deciding tensors of the float ``exported`` program; ``None`` when it has none (then nothing runs)."""
        deciders, values = [], []
        counts: dict[str, int] = {}
        for node in exported.graph.nodes:
            if node.op != "call_function" or node.target not in _DECIDERS or not isinstance(node.args[0],
                                                                                            torch.fx.Node):
                continue
            kind, dim_at = _DECIDERS[node.target]
            index = counts.get(kind, 0)
            counts[kind] = index + 1
            value = node.args[0].meta.get("val")
            if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point:
                continue
            dims = _dims(node.args[dim_at] if len(node.args) > dim_at else node.kwargs.get("dim"), value.dim())
            deciders.append(Decider(kind, index, dims, node.name, module_of(node).get("module", "")))
            values.append(node.args[0])
        for index, node in enumerate(_user_outputs(exported)):
            value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
            if isinstance(value, torch.Tensor) and value.dtype.is_floating_point and value.dim() >= 1 \
                    and value.shape[-1] >= 2:
                deciders.append(Decider(OUTPUT, index, (value.dim() - 1,), node.name,
                                        module_of(node).get("module", "")))
                values.append(node)
        return cls(exported, deciders, values, counts) if deciders else None

    def watching(self, samples: Iterable) -> Iterator:
        """``samples`` as they are, each recorded on its way (before it is passed on: a reader may stop early)."""
        for sample in samples:
            self.record(sample)
            yield sample

    def record(self, sample) -> None:
        """The decision gaps of one sample; a sample the model cannot take is left to calibration to refuse."""
        inputs = tuple(sample) if isinstance(sample, (list, tuple)) else (sample,)
        if not all(isinstance(x, torch.Tensor) for x in inputs):
            return
        start = time.perf_counter()
        try:
            values = self._run(inputs)
        except Exception:  # noqa: BLE001  calibration runs the same sample and says what is wrong with it
            return
        for gaps, decider, value in zip(self.gaps, self.deciders, values, strict=True):
            gaps.append(_gaps(value, decider.dims))
        self.samples += 1
        self.seconds += time.perf_counter() - start

    def _run(self, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        # float32, as exported: float64 convolutions ran 500x slower (no vectorised kernel), seconds a sample
        with torch.no_grad():
            return list(self.module(*inputs))

    def warnings(self, quantized: ExportedProgram) -> list[dict]:
        """One entry per deciding tensor with more than ``CLOSE_SHARE`` of its rows closer than its int8 step
        in ``quantized`` (a tensor the program keeps in float has no step and is not reported)."""
        steps = _steps(quantized, self.counts)
        found = []
        for decider, gaps in zip(self.deciders, self.gaps, strict=True):
            step = steps.get((decider.kind, decider.index))
            if step is None or not gaps:
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
                # 3 digits: a float32 sum's last bits move with the thread count, the report must not
                "median_gap": float(f"{np.median(gap):.3g}"),
                "samples": self.samples,
            })
        return found


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


def _user_outputs(program: ExportedProgram) -> list:
    outputs = program.graph.output_node().args[0]
    kinds = [spec.kind for spec in program.graph_signature.output_specs]
    return [node for node, kind in zip(outputs, kinds, strict=True) if kind == OutputKind.USER_OUTPUT]


def _steps(quantized: ExportedProgram, counts: dict[str, int]) -> dict[tuple[str, int], float]:
    """The int8 step of each deciding tensor of the quantized program, keyed as the float program's deciders:
    the scale of the dequantize it is read from. The quantized program's passes keep these ops in order; a
    kind whose count changed is left unmatched rather than matched wrongly."""
    steps: dict[tuple[str, int], float] = {}
    by_kind: dict[str, list[torch.fx.Node]] = {}
    for node in quantized.graph.nodes:
        if node.op == "call_function" and node.target in _DECIDERS:
            by_kind.setdefault(_DECIDERS[node.target][0], []).append(node)
    for kind, nodes in by_kind.items():
        if len(nodes) != counts.get(kind, 0):
            continue
        for index, node in enumerate(nodes):
            if _is_dequantize_per_tensor(node.args[0]):
                steps[(kind, index)] = float(node.args[0].args[1])
    for index, node in enumerate(_user_outputs(quantized)):
        if _is_dequantize_per_tensor(node):
            steps[(OUTPUT, index)] = float(node.args[1])
    return steps


def _is_dequantize_per_tensor(node) -> bool:
    """A per-tensor dequantize of the quantized (aten) program, whose scale is the tensor's int8 step."""
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and \
        node.target is torch.ops.quantized_decomposed.dequantize_per_tensor.default and \
        not isinstance(node.args[1], torch.fx.Node)


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


def add_to_report(report: dict, gaps: DecisionGaps, quantized: ExportedProgram,
                  example_inputs: tuple[torch.Tensor, ...]) -> None:
    """``report["warnings"]`` and their advice items (first: a wrong answer outweighs a slow one). Calibrated
    on the example inputs (no calibration data), the gaps are measured on those."""
    if gaps.samples == 0:
        gaps.record(example_inputs)
    found = gaps.warnings(quantized)
    report["warnings"] = found
    report["advice"] = [advice(w) for w in found] + report["advice"]
