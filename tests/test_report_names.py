"""The report speaks the user's language: each op is named by the PyTorch module it came from."""

from __future__ import annotations

import pytest
import torch
from compiled_examples import compiled_example
from torch import nn

from imxrt.pipeline import CompileOptions, compile
from imxrt.report.html import render
from imxrt.report.names import label
from imxrt.report.placement import summary_lines

pytestmark = pytest.mark.slow  # every test here compiles models


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU6()))
        self.classifier = nn.Linear(8, 4)

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


def _compile(target: str):
    torch.manual_seed(0)
    inputs = (torch.randn(1, 3, 10, 10),)
    return compile(Stem().eval(), inputs, target, [inputs], CompileOptions(show_progress=False))


def _ops(result) -> dict[str, dict]:
    return {op["op"].rsplit(".", 2)[-2]: op for op in result.report["ops"]}


def test_each_npu_op_carries_its_module_and_a_fused_activation_names_its_conv():
    result = _compile("imxrt700")
    ops = _ops(result)
    conv, relu6 = ops["convolution"], ops["hardtanh"]
    assert (conv["module"], conv["module_type"]) == ("features.0.0", "Conv2d")  # the batch norm folded into it
    assert (relu6["module"], relu6["module_type"], relu6["fused_into"]) == ("features.0.2", "ReLU6", conv["name"])
    assert (ops["linear"]["module"], ops["linear"]["module_type"]) == ("classifier", "Linear")
    assert label(ops["mean"]) == "Stem.forward"  # called in Stem.forward itself
    assert "fused_into" not in conv and "fused_into" not in ops["linear"]
    # the model-input conversion is not any module's
    assert "module" not in ops["quantize_per_tensor"]
    page = render(result.report).replace("<wbr>", "")
    assert "features.0.0 (Conv2d) + features.0.2 (ReLU6)" in page  # one row for the conv and its ReLU6
    assert page.count(f'<div class="sub">{relu6["name"]}</div>') == 0


def test_cpu_ops_are_named_by_module_in_the_summary_and_the_profiling_table():
    result = _compile("imxrt700-cpu")
    lines = summary_lines(result.report)
    assert any(line.startswith("  features.0.0 (Conv2d) aten.convolution.default: cpu int8") for line in lines)
    assert any(line.startswith("  classifier (Linear) aten.linear.default: cpu int8") for line in lines)
    rows = [row for row in result.report["profiling"]["instructions"] if "module" in row]
    assert {(row["module"], row["module_type"]) for row in rows} >= {("features.0.0", "Conv2d"),
                                                                     ("classifier", "Linear")}


def test_mobilenet_v2_rows_are_its_module_paths():
    _, _, result = compiled_example("mobilenet_v2")
    convs = [op for op in result.report["ops"] if op["op"] == "aten.convolution.default"]
    assert len(convs) == 25 and all(op["module_type"] == "Conv2d" for op in convs)
    assert [op["module"] for op in convs[:4]] == ["features.0.0", "features.1.block.0.0", "features.1.block.1.0",
                                                  "features.2.block.0.0"]
    residuals = [op for op in result.report["ops"] if op["op"] == "aten.add.Tensor"]
    assert residuals[0]["module"] == "features.3" and residuals[0]["module_type"] == "InvertedResidual"
    # every activation is fused into the conv before it: no row of its own in the HTML
    activations = [op for op in result.report["ops"] if op["op"] == "aten.hardtanh.default"]
    assert activations and all(op.get("fused_into") for op in activations)
