"""Graph passes: on the exported aten graph before quantization, and on the edge graph before partitioning."""

from __future__ import annotations

from torch.fx import GraphModule

from imxrt.passes.add_batch_dimension import AddBatchDimensionPass
from imxrt.passes.convert_1d_ops_to_2d import Convert1dOpsTo2dPass
from imxrt.passes.convert_addmm_to_linear import ConvertAddmmToLinearPass
from imxrt.passes.convert_clamp_tensor import ConvertClampTensorPass
from imxrt.passes.convert_conv1d_to_conv2d import ConvertConv1dToConv2dPass
from imxrt.passes.convert_div_to_mul import ConvertDivToMulPass
from imxrt.passes.convert_matmul_to_bmm import ConvertMatmulToBmmPass
from imxrt.passes.convert_pad_to_core_op import ConvertPadToCoreOpPass
from imxrt.passes.convert_scalar_operands_to_float import ConvertScalarOperandsToFloatPass
from imxrt.passes.convert_split_to_slices import ConvertSplitToSlicesPass
from imxrt.passes.decompose_hardsigmoid import DecomposeHardsigmoidPass
from imxrt.passes.decompose_silu import DecomposeSiluPass
from imxrt.passes.fold_batch_norm import FoldBatchNormPass
from imxrt.passes.fold_hardsigmoid import FoldHardsigmoidPass
from imxrt.passes.functionalize_in_place import FunctionalizeInPlacePass
from imxrt.passes.remove_identity_copies import RemoveIdentityCopiesPass
from imxrt.passes.remove_noops import RemoveNoOpsPass
from imxrt.passes.sink_squeeze import SinkSqueezePass
from imxrt.passes.unroll_recurrent_layers import UnrollRecurrentLayersPass
from imxrt.passes.unshare_parameters import UnshareParametersPass

# Order matters: in-place ops become functional first, so every later pass sees values, not writes; no-ops
# go next so a dropout between conv and batch norm does not block folding; GRU / LSTM layers unroll next, into
# the linear layers, slices and elementwise ops later passes and the quantizer know; an unbatched input gets its batch
# dimension before the passes that read a conv's input rank;
# batch norms fold before conv1d becomes conv2d, whose trailing squeeze would separate them, and before a
# hardsigmoid folds into the conv (a BN between them would block it) and only the hardsigmoids left decompose;
# the decompositions go before scalar operands become constants; the squeezes the 1-D conversions leave
# sink right after them, so a 1-D net's activations and pools meet on rank-4 values; addmm goes before
# matmul, as its non-linear form is an mm of two activations; parameters are
# unshared last, after the passes that read or replace them, so each use is quantized at its own scale.
ATEN_PASSES = (FunctionalizeInPlacePass, RemoveNoOpsPass,
               UnrollRecurrentLayersPass,
               AddBatchDimensionPass, FoldBatchNormPass,
               FoldHardsigmoidPass, DecomposeHardsigmoidPass, DecomposeSiluPass, ConvertConv1dToConv2dPass,
               Convert1dOpsTo2dPass, SinkSqueezePass, ConvertAddmmToLinearPass, ConvertMatmulToBmmPass,
               ConvertClampTensorPass, ConvertDivToMulPass, ConvertScalarOperandsToFloatPass, ConvertPadToCoreOpPass,
               ConvertSplitToSlicesPass, UnshareParametersPass)

# Passes for targets with an NPU only: they trade a CPU kernel (one table) for ops the NPU runs.
NPU_ATEN_PASSES = (DecomposeHardsigmoidPass, DecomposeSiluPass)

# Run by to_edge_transform_and_lower after decomposition, before the partitioners see the graph.
EDGE_PASSES = (RemoveIdentityCopiesPass,)


# Passes that rewrite parameters into new constants: QAT skips them, its parameters must stay trainable
# (pt2e's conv+BN fusion trains the batch norms and convert folds them; a hardsigmoid then decomposes for
# the NPU, or stays one table on a CPU-only target; a GRU / LSTM stays whole, and float).
PARAMETER_FOLDING_PASSES = (FoldBatchNormPass, FoldHardsigmoidPass, UnrollRecurrentLayersPass)


def run_aten_passes(gm: GraphModule, qat: bool = False, npu: bool = True) -> GraphModule:
    """Apply ``ATEN_PASSES`` in order (``NPU_ATEN_PASSES`` only for a target with an NPU; with ``qat``, no
    ``PARAMETER_FOLDING_PASSES``); each returns a ``PassResult``."""
    for pass_type in ATEN_PASSES:
        if (qat and pass_type in PARAMETER_FOLDING_PASSES) or (not npu and pass_type in NPU_ATEN_PASSES):
            continue
        gm = pass_type()(gm).graph_module
    return gm


__all__ = ["ATEN_PASSES", "EDGE_PASSES", "NPU_ATEN_PASSES", "PARAMETER_FOLDING_PASSES", "run_aten_passes"]
