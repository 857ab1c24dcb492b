"""Seeded random small CNNs for `random_models.py`: a chain of 2-7 steps drawn from `STEPS` on an image input.

A model is data (`Recipe`: input shape, steps, head) turned into an `nn.Module` by `build(seed)`; the same
seed gives the same recipe and weights. Steps reach the corners quantization and lowering meet in real
models and rarely in hand-written tests: weights and activations scaled by powers of ten, gates, skips
(binary ops and concatenations with earlier values), shuffles, slices, pools with ceil mode and padding,
upsampling, pads, and heads of up to a few thousand values.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

Shape = tuple[int, int, int]  # C, H, W of a [1, C, H, W] value

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu, "relu6": F.relu6, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid, "silu": F.silu, "gelu": F.gelu, "abs": torch.abs, "neg": torch.neg,
    "elu": F.elu, "leaky_relu": lambda x: F.leaky_relu(x, 0.1), "hardtanh": lambda x: F.hardtanh(x, -0.5, 2.0),
}
BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum, "minimum": torch.minimum,
}


@dataclass
class Step:
    kind: str
    source: int  # index of the value it reads (0: the model input)
    args: tuple = ()
    module: nn.Module | None = None


@dataclass
class Recipe:
    shape: tuple[int, int, int, int]
    steps: list[Step] = field(default_factory=list)
    head: str = "none"

    def describe(self) -> str:
        parts = [f"{s.kind}({', '.join(map(_short, s.args))})" if s.args else s.kind for s in self.steps]
        return f"{list(self.shape)}: " + " -> ".join(parts) + f" -> head {self.head}"


def _short(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _conv(rnd: random.Random, shape: Shape, depthwise: bool) -> tuple[tuple, nn.Module, Shape] | None:
    c, h, w = shape
    k = rnd.choice([k for k in (1, 3, 5) if k <= min(h, w) + 2])
    stride, dilation = rnd.choice([1, 1, 2]), rnd.choice([1, 1, 2]) if k > 1 else 1
    padding = rnd.choice([0, (k - 1) // 2 * dilation])
    span = dilation * (k - 1) + 1
    if min(h, w) + 2 * padding < span:
        return None
    out = (c * rnd.choice([1, 2])) if depthwise else rnd.choice([1, 2, 4, 8, 12, 16])
    conv = nn.Conv2d(c, out, k, stride, padding, dilation=dilation, groups=c if depthwise else 1,
                     bias=rnd.random() < 0.8)
    with torch.no_grad():
        conv.weight.mul_(10 ** rnd.uniform(-1.5, 1))
    size = lambda d: (d + 2 * padding - span) // stride + 1  # noqa: E731
    return (k, stride, padding, dilation), conv, (out, size(h), size(w))


def _pool_size(d: int, k: int, s: int, padding: int, ceil: bool) -> int:
    """PyTorch's pooled size, ceil mode's last window starting inside the input or its left padding."""
    out = (d + 2 * padding - k + (s - 1 if ceil else 0)) // s + 1
    return out - 1 if ceil and (out - 1) * s >= d + padding else out


def _draw(rnd: random.Random, values: list[Shape], source: int) -> tuple[Step, Shape] | None:
    """One step reading ``values[source]``, or None when the drawn kind does not fit its shape."""
    c, h, w = values[source]
    kind = rnd.choice(["conv", "conv", "depthwise", "batch_norm", "activation", "activation", "scale", "constant",
                       "binary", "gate", "pool", "cat", "upsample", "pad", "slice", "shuffle", "mean"])
    if kind in ("conv", "depthwise"):
        drawn = _conv(rnd, (c, h, w), kind == "depthwise")
        return None if drawn is None else (Step(kind, source, drawn[0], drawn[1]), drawn[2])
    if kind == "batch_norm":
        norm = nn.BatchNorm2d(c)
        with torch.no_grad():
            norm.running_mean.uniform_(-1, 1), norm.running_var.uniform_(0.1, 3)
            norm.weight.uniform_(-2, 2), norm.bias.uniform_(-1, 1)
        return Step(kind, source, (), norm), (c, h, w)
    if kind == "activation":
        return Step(kind, source, (rnd.choice(sorted(ACTIVATIONS)),)), (c, h, w)
    if kind == "scale":  # a range far from 1: the quantizer's and the kernels' multipliers at their extremes
        return Step(kind, source, (10 ** rnd.uniform(-4, 3),)), (c, h, w)
    if kind == "constant":
        return Step(kind, source, (rnd.choice(["add", "sub", "mul", "rsub"]), rnd.uniform(-3, 3))), (c, h, w)
    if kind == "binary":
        others = [i for i, s in enumerate(values) if s == (c, h, w)]
        return Step(kind, source, (rnd.choice(sorted(BINARY)), rnd.choice(others))), (c, h, w)
    if kind == "gate":  # squeeze-excite without the layers: x * f(mean(x))
        return Step(kind, source, (rnd.choice(["sigmoid", "hardsigmoid", "identity"]),)), (c, h, w)
    if kind == "pool":
        k = rnd.choice([2, 3])
        if min(h, w) < k:
            return None
        if rnd.random() < 0.2:
            return Step("global_pool", source), (c, 1, 1)
        s, ceil, padding = rnd.choice([1, 2, k]), rnd.random() < 0.4, rnd.choice([0, k // 2])
        mode = rnd.choice(["max", "avg", "avg_excluding_padding"])
        return Step("pool", source, (mode, k, s, padding, ceil)), (c, *(_pool_size(d, k, s, padding, ceil)
                                                                         for d in (h, w)))
    if kind == "cat":
        others = [i for i, s in enumerate(values) if s[1:] == (h, w)]
        other = rnd.choice(others)
        return Step(kind, source, (other,)), (c + values[other][0], h, w)
    if kind == "upsample" and h * w <= 200:
        return Step(kind, source, (rnd.choice(["nearest", "bilinear"]),)), (c, 2 * h, 2 * w)
    if kind == "pad":
        p = rnd.randint(1, 2)
        mode = rnd.choice(["constant", "reflect"]) if min(h, w) > p else "constant"
        return Step(kind, source, (p, mode)), (c, h + 2 * p, w + 2 * p)
    if kind == "slice" and c >= 2:
        return Step(kind, source, (c // 2,)), (c - c // 2, h, w)
    if kind == "shuffle" and c % 2 == 0:
        return Step(kind, source), (c, h, w)
    if kind == "mean":
        return Step(kind, source), (c, 1, 1)
    return None


def draw_chain(rnd: random.Random, recipe: Recipe, values: list, draw: Callable, most: int) -> None:
    """Append 2 to ``most`` drawn steps, each reading the last value, to ``recipe`` and their values' shapes to
    ``values``; a drawn kind that does not fit its value (``draw`` gives None) is left out."""
    for _ in range(rnd.randint(2, most)):
        drawn = draw(rnd, values, len(values) - 1)
        if drawn is not None:
            recipe.steps.append(drawn[0])
            values.append(drawn[1])


class ChainModel(nn.Module):
    """A recipe's steps run in order: ``apply(step, values)`` computes a step from the values before it (the
    input first); a subclass's ``forward`` reads its head from them."""

    def __init__(self, recipe: Recipe, head: nn.Module | None,
                 apply: Callable[[Step, list[torch.Tensor]], torch.Tensor]):
        super().__init__()
        self.recipe, self.apply_step = recipe, apply
        self.layers = nn.ModuleList(s.module for s in recipe.steps if s.module is not None)
        self.head = head

    def values(self, x: torch.Tensor) -> list[torch.Tensor]:
        values = [x]
        for step in self.recipe.steps:
            values.append(self.apply_step(step, values))
        return values


class RandomModel(ChainModel):
    def __init__(self, recipe: Recipe, head: nn.Module | None):
        super().__init__(recipe, head, _apply)

    def forward(self, x):
        values = self.values(x)
        y = values[-1]
        if self.recipe.head == "linear":
            return self.head(y.flatten(1))
        if self.recipe.head == "softmax":
            return torch.softmax(y.flatten(1), -1)
        if self.recipe.head == "two outputs":
            return y, values[len(values) // 2]
        return y


def _apply(step: Step, values: list[torch.Tensor]) -> torch.Tensor:
    x, args = values[step.source], step.args
    if step.module is not None:
        return step.module(x)
    if step.kind == "activation":
        return ACTIVATIONS[args[0]](x)
    if step.kind == "scale":
        return x * args[0]
    if step.kind == "constant":
        op, value = args
        return {"add": x + value, "sub": x - value, "mul": x * value, "rsub": value - x}[op]
    if step.kind == "binary":
        return BINARY[args[0]](x, values[args[1]])
    if step.kind == "gate":
        gate = x.mean((2, 3), keepdim=True)
        return x * {"sigmoid": torch.sigmoid, "hardsigmoid": F.hardsigmoid, "identity": lambda g: g}[args[0]](gate)
    if step.kind == "global_pool":
        return F.adaptive_avg_pool2d(x, 1)
    if step.kind == "pool":
        mode, k, s, padding, ceil = args
        if mode == "max":
            return F.max_pool2d(x, k, s, padding, ceil_mode=ceil)
        return F.avg_pool2d(x, k, s, padding, ceil_mode=ceil, count_include_pad=mode == "avg")
    if step.kind == "cat":
        return torch.cat([x, values[args[0]]], 1)
    if step.kind == "upsample":
        return F.interpolate(x, scale_factor=2, mode=args[0])
    if step.kind == "pad":
        return F.pad(x, [args[0]] * 4, mode=args[1])
    if step.kind == "slice":
        return x[:, args[0]:]
    if step.kind == "shuffle":
        n, c, h, w = x.shape
        return x.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
    if step.kind == "mean":
        return x.mean((2, 3), keepdim=True)
    raise ValueError(step.kind)


def build(seed: int) -> tuple[RandomModel, Recipe]:
    """The model of ``seed`` in eval mode, and its recipe."""
    rnd = random.Random(seed)
    torch.manual_seed(seed)
    c = rnd.choice([1, 2, 3, 4, 6, 8, 16])
    h = rnd.randint(4, 14)
    w = rnd.choice([h, rnd.randint(3, 14)])
    recipe = Recipe((1, c, h, w))
    values: list[Shape] = [(c, h, w)]
    draw_chain(rnd, recipe, values, _draw, 7)
    recipe.head = rnd.choice(["none", "linear", "softmax", "two outputs"])
    features = values[-1][0] * values[-1][1] * values[-1][2]
    if recipe.head == "linear" and features > 4096:
        recipe.head = "none"
    head = nn.Linear(features, rnd.choice([1, 4, 10])) if recipe.head == "linear" else None
    return RandomModel(recipe, head).eval(), recipe
