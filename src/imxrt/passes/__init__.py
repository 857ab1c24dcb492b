"""Graph passes on the exported aten graph, run once before quantization."""

from __future__ import annotations

from torch.fx import GraphModule

from imxrt.passes.convert_conv1d_to_conv2d import ConvertConv1dToConv2dPass
from imxrt.passes.convert_div_to_mul import ConvertDivToMulPass
from imxrt.passes.fold_batch_norm import FoldBatchNormPass
from imxrt.passes.remove_noops import RemoveNoOpsPass

# Order matters: no-ops go first so a dropout between conv and batch norm does not block folding;
# batch norms fold before conv1d becomes conv2d, whose trailing squeeze would separate them.
ATEN_PASSES = (RemoveNoOpsPass, FoldBatchNormPass, ConvertConv1dToConv2dPass, ConvertDivToMulPass)


def run_aten_passes(gm: GraphModule) -> GraphModule:
    """Apply ``ATEN_PASSES`` in order; each returns a ``PassResult``."""
    for pass_type in ATEN_PASSES:
        gm = pass_type()(gm).graph_module
    return gm


__all__ = ["ATEN_PASSES", "run_aten_passes"]
