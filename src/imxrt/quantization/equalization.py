"""Cross-layer equalization (Nagel et al., "Data-Free Quantization Through Weight Equalization and Bias
Correction", 2019, section 4.1), with each channel's activation range measured on the calibration data.

An int8 activation has one scale for all its channels. When one channel spans ±15 and another ±0.4 (the bins
of a learned spectrum: the loud low bins and the quiet high ones), the quiet channel gets a handful of levels.
Between a convolution (the producer) and the conv / linear layers reading its output (the consumers), ops
that commute with a positive per-channel scale (ReLU, leaky ReLU, PReLU, abs, max / min / add of two such
tensors, a product with a number, pooling, slicing, squeeze, a flatten into a classifier) let each channel be
scaled freely: producer output channel c times s_c, and every consumer's weights reading it divided by s_c,
compute the same function in float. The producer's weights are rounded per output channel, so its rounding
does not change; the consumers' input columns are scaled within each weight row. So s_c trades the
activation's resolution against the consumers' weights':

    s_c = r_c^(1/2) / a_c^(3/4)    (a_c: channel c's activation range, r_c: the consumers' weight range reading it)

Nagel's balance (exponents 1/2 and 1/2, with the producer's weight range for a_c) makes a_c·s_c = r_c / s_c;
here the measured activation range stands in for the producer's weights (rounded per channel either way) and
weighs more (``ACTIVATION_EXPONENT``).

A channel's negative side is never scaled past the least value of the tensor it is read in (``_scales``).

What is equalized: a producer whose output channels reach consumers only through such ops, every tensor on
the way read by nothing else. Channels two ops combine (a spectrum's real and imaginary part of one bin, by
their max) share one scale. A tensor read by anything else (a residual add of another branch, a graph output,
a sigmoid) keeps its producer as it is.

The program computes what the model computes, to float rounding: the quantized program and the ``.pte`` stay
one computation, as with any model's weights.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch.fx import GraphModule, Node

from imxrt.passes._graph import add_constant, constant_value, delete_attribute, layer_parameters

aten = torch.ops.aten

# Layers whose input channels can take the inverse scale (a constant weight): op -> the input's channel axis
# (negative: from the end).
_LAYER_INPUT_AXIS = {aten.conv2d.default: 1, aten.linear.default: -1}
# Layers whose output channels can be scaled: a convolution's weights are rounded per output channel, so a
# scaled channel rounds as before. (A linear layer's weights are rounded per tensor on this target: scaling one
# row would change the rounding of all.)
_PRODUCERS = {aten.conv2d.default}

# Ops of one chain tensor that commute with a positive per-channel scale along the channel axis.
_SCALE_FREE_UNARY = {
    aten.relu.default, aten.leaky_relu.default, aten.abs.default, aten.clone.default, aten.alias.default,
    aten.max_pool2d.default, aten.avg_pool2d.default, aten.adaptive_avg_pool2d.default,
}
# Ops of two chain tensors of the same shape (the channels they pair must share one scale).
_SCALE_FREE_BINARY = {aten.maximum.default, aten.minimum.default, aten.add.Tensor}
# Ops of one chain tensor that keep or move its channels (``_through`` says where they go).
_MOVES = _SCALE_FREE_UNARY | {
    aten.prelu.default, aten.mul.Tensor, aten.constant_pad_nd.default, aten.slice.Tensor, aten.squeeze.dims,
    aten.squeeze.dim, aten.unsqueeze.default, aten.flatten.using_ints, aten.view.default, aten.reshape.default,
}

# s = r^WEIGHT_EXPONENT / a^ACTIVATION_EXPONENT. Nagel's balance is 1/2 and 1/2; weighting the activation range
# more kept more decisions on the real-model benchmark (Silero VAD 98.53% against 98.35%, CREPE 0.40 against
# 0.46 cents of error; the others alike): one int8 scale serves all of a tensor's channels, while each weight
# row has its own.
WEIGHT_EXPONENT = 0.5
ACTIVATION_EXPONENT = 0.75
MIN_RANGE_SHARE = 1e-4  # a channel below this share of the widest one is taken as dead: left unscaled
MAX_SCALE_RATIO = 256.0  # scales kept within this ratio of one another


@dataclass
class _Chain:
    """A producer, the tensors from its output to its consumers (each with its channel axis and, per index
    along that axis, the producer channel it carries), the consumers, and which producer channels must share
    one scale."""

    producer: Node
    tensors: dict[Node, tuple[int, torch.Tensor]] = field(default_factory=dict)
    consumers: list[Node] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)

    def find(self, channel: int) -> int:
        while self.parent[channel] != channel:
            self.parent[channel] = self.parent[self.parent[channel]]
            channel = self.parent[channel]
        return channel

    def tie(self, first: torch.Tensor, second: torch.Tensor) -> None:
        for a, b in zip(first.tolist(), second.tolist(), strict=True):
            self.parent[self.find(a)] = self.find(b)

    def classes(self) -> torch.Tensor:
        return torch.tensor([self.find(c) for c in range(len(self.parent))])

    @property
    def read_tensors(self) -> list[Node]:
        """The tensors the consumers read (their ranges decide the scales)."""
        return list(dict.fromkeys(consumer.args[0] for consumer in self.consumers))


def _scalable_layer(gm: GraphModule, node: object) -> bool:
    """A conv2d / linear with a constant weight (and a constant bias or none)."""
    return isinstance(node, Node) and node.op == "call_function" and node.target in _LAYER_INPUT_AXIS \
        and layer_parameters(gm, node) is not None


def _rank(node: Node) -> int | None:
    value = node.meta.get("val")
    return value.dim() if isinstance(value, torch.Tensor) else None


def _through(node: Node, source: Node, axis: int, channels: torch.Tensor) -> tuple[int, torch.Tensor] | None:
    """Where the channels of ``source`` (along ``axis``) are in ``node``'s output when ``node`` is a
    scale-free op reading it; None when it is not one."""
    target = node.target
    if target in _SCALE_FREE_UNARY and node.args[0] is source:
        return axis, channels
    if target == aten.prelu.default and node.args[0] is source:
        return (axis, channels) if axis == 1 else None  # its slopes are per channel of dim 1
    if target == aten.mul.Tensor and len(node.args) == 2 and isinstance(node.args[1], (int, float)) \
            and node.args[0] is source:
        return axis, channels
    if target == aten.constant_pad_nd.default and node.args[0] is source and \
            (len(node.args) < 3 or node.args[2] == 0):
        padded = len(node.args[1]) // 2  # pads the last dims
        return (axis, channels) if axis < _rank(source) - padded else None
    if target == aten.slice.Tensor and node.args[0] is source:
        dim = node.args[1] % _rank(source)
        if dim != axis:
            return axis, channels
        start, end = (list(node.args[2:4]) + [None, None])[:2]
        step = node.args[4] if len(node.args) > 4 else 1
        return axis, channels[slice(start, end, step)]
    if target in (aten.squeeze.dims, aten.squeeze.dim) and node.args[0] is source:
        dims = node.args[1] if isinstance(node.args[1], (list, tuple)) else [node.args[1]]
        dims = {d % _rank(source) for d in dims}
        return None if axis in dims else (axis - sum(d < axis for d in dims), channels)
    if target in (aten.flatten.using_ints, aten.view.default, aten.reshape.default) and node.args[0] is source:
        before, after = source.meta["val"].shape, node.meta["val"].shape
        if tuple(before) == tuple(after):
            return axis, channels
        per_channel = math.prod(before[2:])  # [N, C, ...] flattened to [N, C * ...]: a classifier's input
        if axis == 1 and len(after) == 2 and after[0] == before[0] and after[1] == before[1] * per_channel:
            return 1, channels.repeat_interleave(per_channel)
        return None
    if target == aten.unsqueeze.default and node.args[0] is source:
        dim = node.args[1] % (_rank(source) + 1)
        return axis + (dim <= axis), channels
    return None


def _chain(gm: GraphModule, producer: Node) -> _Chain | None:
    """The chain from ``producer`` to its consumers, or None when a tensor on it is read by anything that
    would see the scale (or combined with a tensor not on it)."""
    reached, consumers, pending = set(), [], [producer]
    while pending:  # every reader of the producer's output, through scale-free ops
        for user in pending.pop().users:
            if user in reached or user in consumers:
                continue
            if _scalable_layer(gm, user):
                consumers.append(user)
            elif user.op == "call_function" and (user.target in _SCALE_FREE_BINARY or user.target in _MOVES):
                reached.add(user)
                pending.append(user)
            else:
                return None
    if not consumers:
        return None
    channels = constant_value(gm, producer.args[1]).shape[0]
    chain = _Chain(producer, {producer: (1, torch.arange(channels))}, parent=list(range(channels)))
    for node in gm.graph.nodes:  # in graph order: every operand on the chain is placed before its reader
        if node not in reached:
            continue
        if node.target in _SCALE_FREE_BINARY:
            if len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1 or \
                    any(arg not in chain.tensors for arg in node.args) or _rank(node.args[0]) != _rank(node.args[1]):
                return None
            (axis, first), (other_axis, second) = (chain.tensors[arg] for arg in node.args)
            if axis != other_axis or first.numel() != second.numel():
                return None
            chain.tie(first, second)
            chain.tensors[node] = (axis, first)
            continue
        source = node.args[0]
        moved = _through(node, source, *chain.tensors[source]) if source in chain.tensors else None
        if moved is None:
            return None
        chain.tensors[node] = moved
    for consumer in consumers:
        source = consumer.args[0]
        if source not in chain.tensors or any(arg in chain.tensors for arg in consumer.args[1:]) or \
                chain.tensors[source][0] != _LAYER_INPUT_AXIS[consumer.target] % _rank(source):
            return None
    chain.consumers = consumers
    return chain


def find_chains(gm: GraphModule) -> list[_Chain]:
    """Every producer whose output channels can be equalized with its consumers."""
    chains = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _PRODUCERS and _scalable_layer(gm, node):
            chain = _chain(gm, node)
            if chain is not None:
                chains.append(chain)
    return chains


class _ChannelRanges(torch.nn.Module):
    """Records the least and the largest value of each channel along ``axis`` of what it is called with."""

    def __init__(self, axis: int):
        super().__init__()
        self.axis = axis
        self.low: torch.Tensor | None = None
        self.high: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.detach().movedim(self.axis, 0).reshape(x.shape[self.axis], -1).to(torch.float64)
        low, high = flat.amin(1), flat.amax(1)
        self.low = low if self.low is None else torch.minimum(self.low, low)
        self.high = high if self.high is None else torch.maximum(self.high, high)
        return x


def _measure(gm: GraphModule, chains: list[_Chain], samples: Sequence[Sequence[torch.Tensor]],
             run: Callable) -> dict[Node, tuple[torch.Tensor, torch.Tensor]]:
    """Each read tensor's per-channel least and largest value over ``samples``, by recorders put into the
    graph and taken out."""
    recorders: dict[Node, tuple[Node, _ChannelRanges]] = {}
    for chain in chains:
        for tensor in chain.read_tensors:
            if tensor in recorders:
                continue
            name = f"_equalization_ranges_{len(recorders)}"
            recorder = _ChannelRanges(chain.tensors[tensor][0])
            gm.add_module(name, recorder)
            with gm.graph.inserting_after(tensor):
                recorders[tensor] = (gm.graph.call_module(name, (tensor,)), recorder)
    gm.recompile()
    try:
        with torch.no_grad():
            for sample in samples:
                run(gm, *(tuple(sample) if isinstance(sample, (list, tuple)) else (sample,)))
    finally:
        for node, _ in recorders.values():
            gm.graph.erase_node(node)
            delattr(gm, node.target)
        gm.recompile()
    return {tensor: (recorder.low, recorder.high) for tensor, (_, recorder) in recorders.items()
            if recorder.low is not None}


def _consumer_columns(consumer: Node, weight: torch.Tensor, carried: torch.Tensor):
    """(rows, column) of ``weight`` reading each input channel of ``consumer`` (index along ``carried``)."""
    if consumer.target == aten.linear.default:
        return [(slice(None), c) for c in range(carried.numel())]
    groups = int(consumer.args[6]) if len(consumer.args) > 6 else 1
    per_group_in, per_group_out = carried.numel() // groups, weight.shape[0] // groups
    return [(slice(c // per_group_in * per_group_out, (c // per_group_in + 1) * per_group_out), c % per_group_in)
            for c in range(carried.numel())]


def _scales(gm: GraphModule, chain: _Chain, ranges: dict[Node, tuple[torch.Tensor, torch.Tensor]]
            ) -> torch.Tensor | None:
    """s per producer channel (r^WEIGHT_EXPONENT / a^ACTIVATION_EXPONENT), one value per tied class, within
    MAX_SCALE_RATIO of one another; a dead channel takes the median. No channel's negative side is scaled
    past the least value of a tensor it is read in: after a leaky ReLU or PReLU that low end lies far closer
    to zero than the high end, so a quiet channel scaled within the widest one's |value| can still reach past
    it, and it widened the int8 range of every channel (PESTO's conv_layers.3: 7.7 -> 8.9 cents alone; with
    the bound, all its chains give 7.3)."""
    count = len(chain.parent)
    classes = chain.classes()
    activation = torch.zeros(count, dtype=torch.float64)
    weight_range = torch.zeros(count, dtype=torch.float64)
    bound = torch.full((count,), math.inf, dtype=torch.float64)  # the largest s that keeps every low end
    for tensor in chain.read_tensors:
        if tensor not in ranges:
            return None
        _, carried = chain.tensors[tensor]
        low, high = ranges[tensor]
        activation.scatter_reduce_(0, classes[carried], torch.maximum(low.abs(), high.abs()), "amax")
        within = torch.where(low < 0, low.min() / low, math.inf)
        bound.scatter_reduce_(0, classes[carried], within, "amin")
    for consumer in chain.consumers:
        weight = constant_value(gm, consumer.args[1]).detach().to(torch.float64)
        _, carried = chain.tensors[consumer.args[0]]
        for index, (rows, column) in enumerate(_consumer_columns(consumer, weight, carried)):
            cls = classes[carried[index]]
            weight_range[cls] = max(weight_range[cls], weight[rows, column].abs().max())
    live = (activation > MIN_RANGE_SHARE * activation.max()) & (weight_range > 0)
    if not live.any():
        return None
    scales = torch.ones(count, dtype=torch.float64)
    scales[live] = weight_range[live] ** WEIGHT_EXPONENT / activation[live] ** ACTIVATION_EXPONENT
    scales[live] /= scales[live].max() / MAX_SCALE_RATIO ** 0.5
    scales[live] = scales[live].clamp(min=MAX_SCALE_RATIO ** -0.5)
    scales[~live] = scales[live].median()
    scales = scales[classes]  # every channel its class's scale
    scales = scales / scales[activation.argmax()]  # the widest channel keeps its range
    return torch.minimum(scales, bound[classes])


def _scale_producer(gm: GraphModule, chain: _Chain, scales: torch.Tensor) -> None:
    producer = chain.producer
    weight = constant_value(gm, producer.args[1])
    shape = (-1,) + (1,) * (weight.dim() - 1)
    args = list(producer.args)
    args[1] = _replaced(gm, producer, args[1], (weight.to(torch.float64) * scales.reshape(shape)).to(weight.dtype))
    bias_node = args[2] if len(args) > 2 else None
    if bias_node is not None:
        bias = constant_value(gm, bias_node)
        args[2] = _replaced(gm, producer, bias_node, (bias.to(torch.float64) * scales).to(bias.dtype))
    producer.args = tuple(args)


def _scale_consumer(gm: GraphModule, chain: _Chain, consumer: Node, scales: torch.Tensor) -> None:
    weight = constant_value(gm, consumer.args[1])
    scaled = weight.detach().to(torch.float64).clone()
    _, carried = chain.tensors[consumer.args[0]]
    for index, (rows, column) in enumerate(_consumer_columns(consumer, scaled, carried)):
        scaled[rows, column] /= scales[carried[index]]
    args = list(consumer.args)
    args[1] = _replaced(gm, consumer, args[1], scaled.to(weight.dtype))
    consumer.args = tuple(args)


def _replaced(gm: GraphModule, layer: Node, old: Node, value: torch.Tensor) -> Node:
    """A new constant for ``layer`` in place of ``old`` (never written in place: the exported program shares
    the user's parameters); ``old`` goes when nothing else reads it."""
    new = add_constant(gm, layer, "equalized", value)
    if len(old.users) == 1:
        target = old.target
        layer.replace_input_with(old, new)
        gm.graph.erase_node(old)
        if not any(node.op == "get_attr" and node.target == target for node in gm.graph.nodes):
            delete_attribute(gm, target)
    return new


def equalize(gm: GraphModule, samples: Sequence[Sequence[torch.Tensor]], run: Callable = operator.call) -> int:
    """Equalize every chain of ``gm`` on the ranges ``samples`` give (each run as ``run(gm, *sample)``);
    returns how many producers were equalized."""
    chains = find_chains(gm)
    if not chains:
        return 0
    ranges = _measure(gm, chains, samples, run)
    equalized = 0
    for chain in chains:
        scales = _scales(gm, chain, ranges)
        if scales is None:
            continue
        for consumer in chain.consumers:
            _scale_consumer(gm, chain, consumer, scales)
        _scale_producer(gm, chain, scales)
        equalized += 1
    gm.recompile()  # no dead-code pass: a recurrent loop's markers have no readers
    return equalized
