"""Seeded random small sequence models for `random_models.py --family sequence`: a chain of 2-6 steps on a
`[1, T, F]` input, as keyword spotters and small transformers are built.

Steps: token-wise linear layers, activations, layer norms, scales by powers of ten, residual adds and
products, GRU / LSTM / Elman RNN layers (1 or 2 layers, uni- or bidirectional, the whole output sequence),
self-attention (`nn.MultiheadAttention` or hand-written with heads), softmax over features, a 1-D
convolution over time, token means, the last step, a transpose that puts time last (so a linear layer then
mixes time steps) and concatenations of features. Heads: none, a linear layer on the flattened value or
on the last step, or a softmax. Like `_random_models`, a recipe is data and the same seed gives the same
model and weights.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from _random_models import ACTIVATIONS, ChainModel, Recipe, Step, draw_chain
from torch import nn

Shape = tuple[int, int]  # T, F of a [1, T, F] value

RECURRENT = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}


class HandAttention(nn.Module):
    """q @ k^T / sqrt(d), softmax over the last dim, @ v, over ``heads`` heads, then an output projection."""

    def __init__(self, features: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(features, 3 * features)
        self.out = nn.Linear(features, features)

    def forward(self, x):
        b, t, f = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, f // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.softmax(q @ k.transpose(-2, -1) / (f // self.heads) ** 0.5, dim=-1)
        return self.out((scores @ v).transpose(1, 2).reshape(b, t, f))


class MhaAttention(nn.Module):
    def __init__(self, features: int, heads: int):
        super().__init__()
        self.attention = nn.MultiheadAttention(features, heads, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]


class Recurrent(nn.Module):
    def __init__(self, kind: str, features: int, hidden: int, layers: int, bidirectional: bool):
        super().__init__()
        self.rnn = RECURRENT[kind](features, hidden, num_layers=layers, batch_first=True,
                                   bidirectional=bidirectional)

    def forward(self, x):
        return self.rnn(x)[0]


class Conv1dOverTime(nn.Module):
    def __init__(self, features: int, out: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv1d(features, out, kernel, padding=kernel // 2)

    def forward(self, x):
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


def _scaled(module: nn.Module, rnd: random.Random) -> nn.Module:
    """Every weight of ``module`` times one power of ten: the multipliers at their extremes."""
    factor = 10 ** rnd.uniform(-1.5, 1)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if "weight" in name:
                parameter.mul_(factor)
    return module


def _draw(rnd: random.Random, values: list[Shape], source: int) -> tuple[Step, Shape] | None:
    """One step reading ``values[source]``, or None when the drawn kind does not fit its shape."""
    t, f = values[source]
    kind = rnd.choice(["linear", "linear", "activation", "layer_norm", "scale", "residual", "recurrent",
                       "recurrent", "attention", "softmax", "conv1d", "mean", "last", "transpose", "cat"])
    if kind == "linear":
        out = rnd.choice([1, 4, 8, 16, 32])
        return Step(kind, source, (out,), _scaled(nn.Linear(f, out, bias=rnd.random() < 0.8), rnd)), (t, out)
    if kind == "activation":
        return Step(kind, source, (rnd.choice(sorted(ACTIVATIONS)),)), (t, f)
    if kind == "layer_norm" and f > 1:
        norm = nn.LayerNorm(f)
        with torch.no_grad():
            norm.weight.uniform_(-2, 2), norm.bias.uniform_(-1, 1)
        return Step(kind, source, (), norm), (t, f)
    if kind == "scale":
        return Step(kind, source, (10 ** rnd.uniform(-4, 3),)), (t, f)
    if kind == "residual":
        others = [i for i, s in enumerate(values) if s == (t, f)]
        return Step(kind, source, (rnd.choice(["add", "mul"]), rnd.choice(others))), (t, f)
    if kind == "recurrent":
        cell, hidden = rnd.choice(sorted(RECURRENT)), rnd.choice([4, 8, 16])
        layers, bidirectional = rnd.choice([1, 1, 2]), rnd.random() < 0.3
        module = _scaled(Recurrent(cell, f, hidden, layers, bidirectional), rnd)
        return Step(kind, source, (cell, hidden, layers, bidirectional), module), (t, hidden * (1 + bidirectional))
    if kind == "attention":
        heads = rnd.choice([h for h in (1, 2, 4) if f % h == 0])
        form = rnd.choice(["mha", "matmul"])
        module = (MhaAttention if form == "mha" else HandAttention)(f, heads)
        return Step(kind, source, (form, heads), _scaled(module, rnd)), (t, f)
    if kind == "softmax":
        return Step(kind, source), (t, f)
    if kind == "conv1d":
        out, kernel = rnd.choice([4, 8, 16]), rnd.choice([1, 3, 5])
        return Step(kind, source, (out, kernel), _scaled(Conv1dOverTime(f, out, kernel), rnd)), (t, out)
    if kind == "mean" and t > 1:
        return Step(kind, source), (1, f)
    if kind == "last" and t > 1:
        return Step(kind, source), (1, f)
    if kind == "transpose":
        return Step(kind, source), (f, t)
    if kind == "cat":
        others = [i for i, s in enumerate(values) if s[0] == t]
        other = rnd.choice(others)
        return Step(kind, source, (other,)), (t, f + values[other][1])
    return None


class RandomSequenceModel(ChainModel):
    def __init__(self, recipe: Recipe, head: nn.Module | None):
        super().__init__(recipe, head, _apply)

    def forward(self, x):
        y = self.values(x)[-1]
        if self.recipe.head == "linear":
            return self.head(y.flatten(1))
        if self.recipe.head == "last linear":
            return self.head(y[:, -1])
        if self.recipe.head == "softmax":
            return torch.softmax(y, -1)
        return y


def _apply(step: Step, values: list[torch.Tensor]) -> torch.Tensor:
    x, args = values[step.source], step.args
    if step.module is not None:
        return step.module(x)
    if step.kind == "activation":
        return ACTIVATIONS[args[0]](x)
    if step.kind == "scale":
        return x * args[0]
    if step.kind == "residual":
        other = values[args[1]]
        return x + other if args[0] == "add" else x * other
    if step.kind == "softmax":
        return F.softmax(x, -1)
    if step.kind == "mean":
        return x.mean(1, keepdim=True)
    if step.kind == "last":
        return x[:, -1:]
    if step.kind == "transpose":
        return x.transpose(1, 2)
    if step.kind == "cat":
        return torch.cat([x, values[args[0]]], -1)
    raise ValueError(step.kind)


def build(seed: int) -> tuple[RandomSequenceModel, Recipe]:
    """The model of ``seed`` in eval mode, and its recipe (``shape`` is the [1, T, F] input's)."""
    rnd = random.Random(seed)
    torch.manual_seed(seed)
    t, f = rnd.randint(1, 12), rnd.choice([1, 2, 4, 8, 10, 16])
    recipe = Recipe((1, t, f))
    values: list[Shape] = [(t, f)]
    draw_chain(rnd, recipe, values, _draw, 6)
    recipe.head = rnd.choice(["none", "linear", "last linear", "softmax"])
    t, f = values[-1]
    if recipe.head == "linear" and t * f > 4096:
        recipe.head = "none"
    classes = rnd.choice([1, 4, 10])
    head = nn.Linear(t * f if recipe.head == "linear" else f, classes) if "linear" in recipe.head else None
    return RandomSequenceModel(recipe, head).eval(), recipe

