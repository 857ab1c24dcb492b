"""Cross-layer equalization (``CompileOptions(equalization=True)``, ``--equalize``): a conv / linear layer's output
channels scaled to even out their int8 activation ranges, the layers reading them taking the inverse."""

import numpy as np
import pytest
import torch
import torch.nn as nn
from program_checks import check_case, program_sqnr_db

import imxrt.runtime
from imxrt.export import export
from imxrt.passes import run_aten_passes
from imxrt.pipeline import CompileOptions, compile
from imxrt.quantization import rules
from imxrt.quantization.equalization import equalize, find_chains

CHANNEL_SPREAD = torch.logspace(-2, 0, 8)  # output channels 100x apart in range


def _uneven_convs(activation: nn.Module | None = None) -> nn.Module:
    """conv → activation (ReLU) → conv, the first conv's output channels spanning 100x in range."""
    torch.manual_seed(0)
    first, second = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 3)
    with torch.no_grad():
        first.weight.mul_(CHANNEL_SPREAD.reshape(-1, 1, 1, 1))
        first.bias.mul_(CHANNEL_SPREAD)
        second.weight.div_(CHANNEL_SPREAD.reshape(1, -1, 1, 1))  # every channel matters to the output alike
    return nn.Sequential(first, activation or nn.ReLU(), second).eval()


def _samples(count: int, seed: int, shape=(1, 3, 8, 8)) -> list[tuple[torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=generator),) for _ in range(count)]


def _graph(model: nn.Module, example: tuple) -> torch.fx.GraphModule:
    return run_aten_passes(export(model, example).module(check_guards=False), npu=True,
                           qparam_flow=rules.qparam_flow(rules.devices_of(None)), rolled=True)


class _Values(torch.fx.Interpreter):
    """Runs a graph and keeps the value of every node."""

    def values_of(self, node, sample):
        self.seen = {}
        self.run(*sample)
        return self.seen[node]

    def run_node(self, node):
        self.seen[node] = super().run_node(node)
        return self.seen[node]


@pytest.mark.parametrize("activation", [nn.ReLU(), nn.LeakyReLU(0.1), nn.PReLU(8, 0.25)],
                         ids=["relu", "leaky-relu", "prelu"])
def test_the_equalized_graph_computes_the_same_with_even_channel_ranges(activation):
    model = _uneven_convs(activation)
    samples = _samples(8, 1)
    graph = _graph(model, samples[0])
    reference = [graph(*sample)[0] for sample in samples]
    (chain,) = find_chains(graph)
    assert equalize(graph, samples) == 1
    for sample, expected in zip(samples, reference, strict=True):
        torch.testing.assert_close(graph(*sample)[0], expected, rtol=1e-5, atol=1e-5)
    second = [node for node in graph.graph.nodes if node.target == torch.ops.aten.conv2d.default][1]
    ranges = _Values(graph).values_of(second.args[0], samples[0]).abs().amax(dim=(0, 2, 3))
    assert ranges.max() / ranges.min() < 10  # from 100x apart
    assert chain.producer.target == torch.ops.aten.conv2d.default


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_equalized_channels_keep_the_quiet_ones(target):
    model = _uneven_convs()
    weights = [p.detach().clone() for p in model.parameters()]
    calibration, evaluation = _samples(16, 1), _samples(16, 2)
    plain = compile(model, calibration[0], target, calibration, CompileOptions(show_progress=False))
    equalized = compile(model, calibration[0], target, calibration,
                        CompileOptions(show_progress=False, equalization=True))
    assert program_sqnr_db(model, equalized, evaluation) > program_sqnr_db(model, plain, evaluation) + 6
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights, strict=True))  # the user's model
    check_case(equalized, evaluation[0])


class _Spectrum(nn.Module):
    """A learned transform's magnitude (real and imaginary rows, bins 100x apart) read by a conv."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.transform = nn.Conv1d(1, 16, 16, stride=8, bias=False)
        self.encoder = nn.Conv1d(8, 4, 3)
        with torch.no_grad():
            self.transform.weight.mul_(torch.cat([CHANNEL_SPREAD, CHANNEL_SPREAD]).reshape(-1, 1, 1))

    def forward(self, x):
        spectrum = self.transform(x)
        re, im = spectrum[:, :8], spectrum[:, 8:]
        return self.encoder((re ** 2 + im ** 2).sqrt())


def test_a_magnitude_ties_each_bins_real_and_imaginary_part():
    model = _Spectrum().eval()
    samples = _samples(8, 1, shape=(1, 1, 128))
    graph = _graph(model, samples[0])
    (chain,) = find_chains(graph)
    classes = chain.classes()
    assert len(set(classes.tolist())) == 8 and torch.equal(classes[:8], classes[8:])
    reference = [graph(*sample)[0] for sample in samples]
    equalize(graph, samples)
    for sample, expected in zip(samples, reference, strict=True):
        torch.testing.assert_close(graph(*sample)[0], expected, rtol=1e-4, atol=1e-5)


class _Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Conv2d(3, 3, 3, padding=1), nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)) + x)


class _ReadTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Conv2d(3, 3, 3, padding=1), nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        hidden = torch.relu(self.first(x))
        return self.second(hidden), hidden


@pytest.mark.parametrize("model", [_Residual(), _ReadTwice(), nn.Sequential(nn.Conv2d(3, 3, 3), nn.Sigmoid(),
                                                                          nn.Conv2d(3, 3, 3))],
                         ids=["residual", "also-an-output", "sigmoid"])
def test_a_tensor_anything_else_reads_is_not_scaled(model):
    samples = _samples(2, 1)
    assert find_chains(_graph(model.eval(), samples[0])) == []


def test_a_flatten_into_a_classifier_scales_each_channels_columns():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 2)).eval()
    with torch.no_grad():
        model[0].weight.mul_(torch.tensor([0.01, 0.1, 1.0, 3.0]).reshape(-1, 1, 1, 1))
    samples = _samples(4, 1, shape=(1, 3, 6, 6))
    graph = _graph(model, samples[0])
    (chain,) = find_chains(graph)
    assert chain.consumers[0].target == torch.ops.aten.linear.default
    reference = [graph(*sample)[0] for sample in samples]
    assert equalize(graph, samples) == 1
    for sample, expected in zip(samples, reference, strict=True):
        torch.testing.assert_close(graph(*sample)[0], expected, rtol=1e-5, atol=1e-6)


class _ConvLstm(nn.Module):
    """Convolutions ahead of an LSTM: the program runs the LSTM's steps as a loop."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.second = nn.Conv1d(8, 16, 3, padding=1), nn.Conv1d(16, 16, 3, padding=1)
        self.lstm, self.head = nn.LSTM(16, 16, batch_first=True), nn.Linear(16, 3)
        with torch.no_grad():
            self.first.weight.mul_(torch.logspace(-2, 0, 16).reshape(-1, 1, 1))

    def forward(self, x):
        hidden = torch.relu(self.second(torch.relu(self.first(x))))
        sequence, _ = self.lstm(hidden.transpose(1, 2))
        return self.head(sequence[:, -1])


def test_measuring_the_ranges_leaves_a_recurrent_loop_as_it_was():
    """The ranges are measured with recorders put into the graph and taken out; the loop runner had cached
    the loop's steps for the graph object, recorders and all, and calibration ran those stale steps (the
    output 100x further from float). It now caches them for the graph's nodes as they are."""
    model = _ConvLstm().eval()
    samples = _samples(8, 1, shape=(1, 8, 20))
    errors = {}
    for equalization in (False, True):
        result = compile(model, samples[0], "imxrt700", samples,
                         CompileOptions(show_progress=False, equalization=equalization))
        program = imxrt.runtime.load(result.pte)
        errors[equalization] = np.mean([np.abs(program.forward(*x)[0] - model(*x).detach().numpy()).max()
                                        for x in samples])
    assert errors[True] < 4 * errors[False], errors


def test_no_channel_is_scaled_past_the_tensors_least_value():
    """After a leaky ReLU the int8 range's low end is the negative side of a few channels, which the scales
    (from each channel's largest |value|) do not weigh: a quiet channel scaled up past it widened the range of
    every channel (PESTO's conv_layers.3: 7.7 -> 8.9 cents). The low end stays where it was."""
    model = _uneven_convs(nn.LeakyReLU(0.3))
    with torch.no_grad():
        model[0].bias[:4] -= 2 * CHANNEL_SPREAD[:4]  # the quiet channels mostly negative
    samples = _samples(8, 1)
    graph = _graph(model, samples[0])
    read = [node for node in graph.graph.nodes if node.target == torch.ops.aten.conv2d.default][1].args[0]
    before = min(float(_Values(graph).values_of(read, sample).min()) for sample in samples)
    assert equalize(graph, samples) == 1
    after = min(float(_Values(graph).values_of(read, sample).min()) for sample in samples)
    assert after >= before * (1 + 1e-6)
