"""Empirical bias correction (Nagel et al., "Data-Free Quantization Through Weight Equalization and Bias
Correction", 2019, section 4.2): int8 weight rounding moves each output channel's mean by ΔW · E[x]; the bias
takes that shift back.

While calibration runs, each conv / linear layer's input observer also sums its input per channel (``E[x]``,
over every calibration sample and position). After calibration, for each layer with a bias, the weights are
rounded as ``convert`` will round them (the weight observer's scales, symmetric [-127, 127]) and the bias
becomes ``b - ΔW · E[x]`` (a convolution's taps summed: the mean input is taken as the same at every position,
so a padded border is corrected as the interior). The corrected bias is then quantized as any bias is, so the
program and the quantized program stay one computation. Layers without a bias are left as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.fx import GraphModule, Node

from imxrt.passes._graph import constant_value
from imxrt.quantization.calibration import range_observer
from imxrt.quantization.observers import on_observed

aten = torch.ops.aten
_CHANNEL_AXIS = {aten.conv2d.default: 1, aten.conv2d.padding: 1, aten.linear.default: -1}


@dataclass
class _InputMean:
    """The per-channel sum of the values an observer passed on, along one axis."""

    axis: int
    total: torch.Tensor | None = None
    count: int = 0

    def add(self, value: torch.Tensor) -> None:
        moved = value.detach().to(torch.float64).movedim(self.axis, -1)
        flat = moved.reshape(-1, moved.shape[-1])
        self.total = flat.sum(0) if self.total is None else self.total + flat.sum(0)
        self.count += flat.shape[0]

    @property
    def mean(self) -> torch.Tensor:
        return self.total / self.count


@dataclass
class BiasCorrection:
    """Hooks on the input observers of ``prepared``'s conv / linear layers for the calibration that follows;
    ``apply`` then corrects their biases in place."""

    prepared: GraphModule
    layers: list[tuple[Node, _InputMean]] = field(default_factory=list)
    _handles: list = field(default_factory=list)

    def __post_init__(self):
        modules = dict(self.prepared.named_modules())
        means: dict[tuple[str, int], _InputMean] = {}
        for node in self.prepared.graph.nodes:
            axis = _CHANNEL_AXIS.get(node.target) if node.op == "call_function" else None
            observer = range_observer(node.args[0], modules) if axis is not None else None
            if observer is None or _bias(node) is None or _weight_observer(node, modules) is None:
                continue
            key = (node.args[0].target, axis)
            if key not in means:
                means[key] = _InputMean(axis)
                self._handles.append(on_observed(observer, means[key].add))
            self.layers.append((node, means[key]))

    def apply(self) -> int:
        """Remove the hooks and correct every layer calibration reached; returns how many were corrected."""
        for handle in self._handles:
            handle.remove()
        modules = dict(self.prepared.named_modules())
        corrected = 0
        for node, mean in self.layers:
            if mean.count == 0:
                continue
            weight = constant_value(self.prepared, node.args[1].args[0])
            bias_node = _bias(node)
            bias = constant_value(self.prepared, bias_node)
            shift = _output_shift(node, weight, _weight_observer(node, modules), mean.mean)
            # a new tensor, not one written in place: the exported program shares the user's parameters
            owner, _, name = bias_node.target.rpartition(".")
            setattr(self.prepared.get_submodule(owner), name,
                    torch.nn.Parameter((bias.detach().to(torch.float64) - shift).to(bias.dtype), requires_grad=False))
            corrected += 1
        return corrected


def _output_shift(node: Node, weight: torch.Tensor, observer, mean: torch.Tensor) -> torch.Tensor:
    """ΔW · E[x] per output channel: what int8 weight rounding adds to each output on average."""
    scale, _ = observer.calculate_qparams()
    scale = scale.to(torch.float64).reshape(-1, *([1] * (weight.dim() - 1)))
    w = weight.detach().to(torch.float64)
    delta = (w / scale).round().clamp(-127, 127) * scale - w
    if node.target == aten.linear.default:
        return delta @ mean
    groups = int(node.args[6]) if len(node.args) > 6 else 1
    taps = delta.sum(dim=(2, 3))  # [out, in / groups]
    per_group = mean.reshape(groups, -1)  # [groups, in / groups]
    outputs_per_group = taps.shape[0] // groups
    return (taps * per_group.repeat_interleave(outputs_per_group, dim=0)).sum(1)


def _weight_observer(node: Node, modules: dict) -> torch.nn.Module | None:
    """The observer of the layer's weight (a parameter), else None."""
    weight = node.args[1] if len(node.args) > 1 else None
    if not isinstance(weight, Node) or weight.op != "call_module" or not isinstance(weight.args[0], Node) or \
            weight.args[0].op != "get_attr":
        return None
    return modules.get(weight.target)


def _bias(node: Node) -> Node | None:
    """The parameter holding the layer's bias (read through the observer prepare put on it), else None."""
    bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    if isinstance(bias, Node) and bias.op == "call_module" and bias.args and isinstance(bias.args[0], Node):
        bias = bias.args[0]
    return bias if isinstance(bias, Node) and bias.op == "get_attr" else None

