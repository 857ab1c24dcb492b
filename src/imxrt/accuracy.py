"""Accuracy report: the float model against the compiled int8 program on the user's labelled data.

Top-1 (or a user metric) for both, how often their top-1 agree, the SQNR of each model output, and
(best effort) the SQNR of each layer's int8 activation, from the fake-quantized program, so a user sees
where precision is lost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.export import ExportedProgram

from imxrt.errors import BadInput, BadModel
from imxrt.model_checks import called_exit, read_samples

Metric = Callable[[torch.Tensor, object], float]  # (first model output, label) -> score of one sample


@dataclass
class AccuracyReport:
    samples: int
    metric: str
    float_score: float
    int8_score: float
    agreement: float  # fraction of samples whose float and int8 top-1 class agree
    output_sqnr_db: list[float]  # per model output, int8 program vs float model
    layer_sqnr_db: dict[str, float] = field(default_factory=dict)  # module path -> int8 activation SQNR

    def as_dict(self) -> dict:
        """The ``accuracy`` entry of report.json (SQNR as null where the int8 output equals the float one)."""
        finite = lambda v: v if math.isfinite(v) else None  # noqa: E731  JSON has no infinity
        return {"samples": self.samples, "metric": self.metric, "float": self.float_score, "int8": self.int8_score,
                "agreement": self.agreement, "output_sqnr_db": [finite(v) for v in self.output_sqnr_db],
                "layer_sqnr_db": {k: finite(v) for k, v in self.layer_sqnr_db.items()}}

    def lines(self) -> list[str]:
        text = [f"accuracy ({self.samples} samples, {self.metric}): float {self.float_score:.2%}, "
                f"int8 {self.int8_score:.2%} ({(self.int8_score - self.float_score) * 100:+.2f} points), "
                f"top-1 agreement {self.agreement:.2%}",
                "output SQNR: " + ", ".join(f"output {i} {v:.1f} dB" for i, v in enumerate(self.output_sqnr_db))]
        if self.layer_sqnr_db:
            worst = sorted(self.layer_sqnr_db.items(), key=lambda kv: kv[1])[:3]
            text.append("lowest layer SQNR: " + ", ".join(f"{k} {v:.1f} dB" for k, v in worst))
        return text


class _Sqnr:
    """Signal and noise energy summed over every sample: SQNR of the whole evaluation set."""

    def __init__(self):
        self.signal = 0.0
        self.noise = 0.0

    def add(self, reference: torch.Tensor, approximate: torch.Tensor) -> None:
        reference = reference.detach().double()
        self.signal += float(reference.square().sum())
        self.noise += float((reference - approximate.detach().double()).square().sum())

    @property
    def db(self) -> float:
        if self.noise == 0.0:
            return math.inf
        return 10 * math.log10(max(self.signal, 1e-30) / self.noise)


def top1(output: torch.Tensor, label) -> float:
    return float(int(output.reshape(-1).argmax()) == int(label))


def evaluate(model: torch.nn.Module, program, data: Iterable[tuple[Sequence[torch.Tensor], object]],
             example_inputs: Sequence[torch.Tensor], metric: Metric | None = None,
             quantized: ExportedProgram | None = None) -> AccuracyReport:
    """Run ``model`` (float) and ``program`` (an ``imxrt.runtime`` program) on every ``(inputs, label)`` of
    ``data``; with ``quantized`` (``CompileResult.quantized``), also each layer's SQNR.

    Inputs must have the example inputs' shapes; for top-1, a label is a class index below the model's
    output size."""
    model = model.eval()
    shapes = [tuple(x.shape) for x in example_inputs]
    layers = _LayerSqnr(model, quantized) if quantized is not None else None
    float_total = int8_total = agree = 0.0
    outputs_sqnr: list[_Sqnr] = []
    count = 0
    for index, sample in read_samples(data, "evaluation"):
        inputs, label = _checked_sample(index, sample, shapes)
        with torch.no_grad():
            try:
                reference = _as_list(model(*inputs))
            except SystemExit as e:  # not an Exception: it would end imxrt silently, with the user's status
                raise BadModel(f"model(...) {called_exit(e)} while evaluating on evaluation sample {index}; "
                               "forward() must return its outputs, not exit the process") from None
        actual = [torch.as_tensor(np.asarray(a)).to(torch.float32) for a in program.forward(*inputs)]
        if metric is None:
            _check_label(index, label, reference[0])
        score = metric or top1
        float_total += score(reference[0], label)
        int8_total += score(actual[0], label)
        agree += float(int(reference[0].reshape(-1).argmax()) == int(actual[0].reshape(-1).argmax()))
        if not outputs_sqnr:
            outputs_sqnr = [_Sqnr() for _ in reference]
        for sqnr, ref, act in zip(outputs_sqnr, reference, actual, strict=True):
            sqnr.add(ref, act.reshape(ref.shape))
        if layers is not None:
            layers.add(inputs)
        count += 1
    if count == 0:
        raise BadInput("the evaluation data is empty; give at least one (inputs, label) pair")
    return AccuracyReport(samples=count, metric=getattr(metric, "__name__", "metric") if metric else "top-1",
                          float_score=float_total / count, int8_score=int8_total / count, agreement=agree / count,
                          output_sqnr_db=[s.db for s in outputs_sqnr],
                          layer_sqnr_db=layers.result() if layers is not None else {})


def _as_list(output) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    return [o for o in output if isinstance(o, torch.Tensor)]


def _checked_sample(index: int, sample, shapes: list[tuple[int, ...]]) -> tuple[tuple[torch.Tensor, ...], object]:
    if not isinstance(sample, (tuple, list)) or len(sample) != 2:
        raise BadInput(f"evaluation sample {index} is not an (inputs, label) pair")
    inputs, label = sample
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    got = [tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__ for x in inputs]
    if got != shapes:
        raise BadInput(f"evaluation sample {index}: inputs of shape {got}, the model takes {shapes} (the example "
                       "inputs' shapes, batch included)")
    return tuple(x.to(torch.float32) for x in inputs), label


def _check_label(index: int, label, output: torch.Tensor) -> None:
    classes = output.numel()
    try:
        value = int(label)
    except (TypeError, ValueError):
        value = None
    if value is None or value != label or not 0 <= value < classes:
        raise BadInput(f"evaluation sample {index}: label {label!r} is not a class index in [0, {classes}) "
                       "(top-1 needs one integer label per sample; pass metric= for other labels)")


def _module_paths(node: torch.fx.Node) -> list[str]:
    stack = node.meta.get("nn_module_stack") if node.op == "call_function" else None
    return [path for path, _ in stack.values()] if stack else []


def _leaves_module(quantize: torch.fx.Node, path: str) -> bool:
    """Whether the value ``quantize`` rounds is read outside the module ``path``: it is that module's output,
    not a value inside it (a transformer layer's attention scores are not the layer's output)."""
    readers = [user for dq in quantize.users for user in dq.users] + list(quantize.users)
    return any(r.op == "output" or (r.op == "call_function" and "dequantize" not in str(r.target)
                                    and path not in _module_paths(r)) for r in readers)


class _LayerSqnr:
    """SQNR of each module's int8 output, the activation the fake-quantized program rounds where the value
    leaves the module, against the float model's output of the same module (matched by module path; a
    module whose output a folded batch norm rewrites is skipped: the float model has no tensor to compare
    with)."""

    def __init__(self, model: torch.nn.Module, quantized: ExportedProgram):
        self.model = model
        self.graph_module = quantized.module(check_guards=False)
        self.producers: dict[str, str] = {}  # quantize node name -> module path whose output it rounds
        for node in self.graph_module.graph.nodes:
            if node.op == "call_function" and "quantize_per_tensor" in str(node.target) and \
                    "dequantize" not in str(node.target):
                paths = _module_paths(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else []
                if paths and _leaves_module(node, paths[-1]):
                    self.producers[node.name] = paths[-1]
        self.sqnr: dict[str, _Sqnr] = {}

    def add(self, inputs: tuple[torch.Tensor, ...]) -> None:
        floats: dict[str, torch.Tensor] = {}
        folded: set[str] = set()
        by_id: dict[int, str] = {}
        handles = []
        for name, module in self.model.named_modules():
            if not name:
                continue

            def hook(module, args, output, name=name):
                if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and args and id(args[0]) in by_id:
                    folded.add(by_id[id(args[0])])
                if isinstance(output, torch.Tensor):
                    floats[name] = output
                    by_id[id(output)] = name
            handles.append(module.register_forward_hook(hook))
        try:
            with torch.no_grad():
                self.model(*inputs)
        finally:
            for handle in handles:
                handle.remove()
        rounded = _run_capturing(self.graph_module, inputs, set(self.producers))
        for node_name, value in rounded.items():
            path = self.producers[node_name]
            reference = floats.get(path)
            if path in folded or reference is None or tuple(reference.shape) != tuple(value.shape):
                continue
            self.sqnr.setdefault(path, _Sqnr()).add(reference, value)

    def result(self) -> dict[str, float]:
        return {path: sqnr.db for path, sqnr in self.sqnr.items()}


def _run_capturing(graph_module: torch.fx.GraphModule, inputs, names: set[str]) -> dict[str, torch.Tensor]:
    """The dequantized value of each quantize node in ``names``: what the int8 tensor stands for."""
    captured: dict[str, torch.Tensor] = {}

    class Capture(torch.fx.Interpreter):
        def run_node(self, node):
            value = super().run_node(node)
            if node.name in names:
                scale, zero_point = node.args[1], node.args[2]
                captured[node.name] = (value.to(torch.float32) - zero_point) * scale
            return value

    with torch.no_grad():
        Capture(graph_module).run(*inputs)
    return captured
