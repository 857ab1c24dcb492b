"""The int8 program of a calibrated (or trained) pt2e module: pt2e's convert, then the export ``to_edge`` reads."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.export import ExportedProgram
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

from imxrt.passes.share_equal_constants import ShareEqualConstantsPass


def share_equal_constants(converted: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """After ``convert_pt2e`` (here and as the export recipes' post-convert pass): equal constants become one,
    fewer placeholders for every later pass to carry."""
    return ShareEqualConstantsPass()(converted).graph_module


def convert(prepared: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Observers to quantize / dequantize nodes (``convert_pt2e``), equal constants shared."""
    return share_equal_constants(convert_pt2e(prepared))


def export_quantized(converted: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> ExportedProgram:
    """The converted module exported again: the program ``to_edge`` reads (a stage of its own, as upstream's
    NXP flow counts it in lowering, not quantization)."""
    return torch.export.export(converted, tuple(example_inputs), strict=False)
