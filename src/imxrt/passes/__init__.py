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
from imxrt.passes.convert_pools_to_2d import ConvertPoolsTo2dPass
from imxrt.passes.convert_scalar_operands_to_float import ConvertScalarOperandsToFloatPass
from imxrt.passes.convert_split_to_slices import ConvertSplitToSlicesPass
from imxrt.passes.convert_stack_to_cat import ConvertStackToCatPass
from imxrt.passes.decompose_attention import DecomposeAttentionPass
from imxrt.passes.decompose_gelu import DecomposeGeluPass
from imxrt.passes.decompose_hardsigmoid import DecomposeHardsigmoidPass
from imxrt.passes.decompose_layer_norm import DecomposeLayerNormPass
from imxrt.passes.decompose_magnitude import DecomposeMagnitudePass
from imxrt.passes.decompose_median import DecomposeMedianPass
from imxrt.passes.decompose_silu import DecomposeSiluPass
from imxrt.passes.decompose_square import DecomposeSquarePass
from imxrt.passes.decompose_vector_norm import DecomposeVectorNormPass
from imxrt.passes.fold_batch_norm import FoldBatchNormPass
from imxrt.passes.fold_constants import FoldConstantsPass
from imxrt.passes.fold_hardsigmoid import FoldHardsigmoidPass
from imxrt.passes.fold_layer_norm_affine import FoldLayerNormAffinePass
from imxrt.passes.functionalize_in_place import FunctionalizeInPlacePass
from imxrt.passes.remove_identity_copies import RemoveIdentityCopiesPass
from imxrt.passes.remove_noops import RemoveNoOpsPass
from imxrt.passes.rescale_bmm_operands import QparamFlow, RescaleBatchMatmulOperandsPass
from imxrt.passes.sink_batch_views import SinkBatchViewsPass
from imxrt.passes.sink_squeeze import SinkSqueezePass
from imxrt.passes.unroll_recurrent_layers import UnrollRecurrentLayersPass
from imxrt.passes.unshare_parameters import UnshareParametersPass

# Order matters: in-place ops become functional first, so every later pass sees values, not writes; no-ops
# go next so a dropout between conv and batch norm does not block folding; values computed from constants
# alone fold next, so no later pass sees their ops; GRU / LSTM layers unroll next, into
# the linear layers, slices and elementwise ops later passes and the quantizer know; an unbatched input gets its batch
# dimension before the passes that read a conv's input rank;
# batch norms fold before conv1d becomes conv2d, whose trailing squeeze would separate them, and before a
# hardsigmoid folds into the conv (a BN between them would block it) and only the hardsigmoids left decompose;
# a layer norm's affine map folds into the linear layers reading it before the norm decomposes (after that
# it is a mul and an add no pass recognises); a 2-vector's magnitude becomes its largest projection before squares
# become products (its pattern reads them in every form);
# the decompositions go before scalar operands become constants; F.pad becomes the core op of its mode before
# the 1-D conversions, which turn a 1-D reflection pad into the 2-D one; the squeezes the 1-D conversions leave
# sink right after them, so a 1-D net's activations and pools meet on rank-4 values (adaptive max and 3-D pools
# become 2-D pools before that sinking too, an adaptive 1-D one leaving the same squeeze); addmm goes before
# matmul, as its non-linear form is an mm of two activations; attention (SDPA) decomposes before matmuls
# become bmm, and the batch views bmm leaves sink right after, so attention scores stay rank 3 (and a softmax
# a bmm reads is rescaled to zero point 0 before its scalar 1 becomes a constant); parameters are
# unshared last, after the passes that read or replace them, so each use is quantized at its own scale;
# splits and stacks become slices and concatenations just before, whatever made them.
ATEN_PASSES = (FunctionalizeInPlacePass, RemoveNoOpsPass, FoldConstantsPass, UnrollRecurrentLayersPass,
               AddBatchDimensionPass,
               FoldBatchNormPass,
               FoldHardsigmoidPass, FoldLayerNormAffinePass, DecomposeLayerNormPass, DecomposeVectorNormPass,
               DecomposeGeluPass,
               DecomposeHardsigmoidPass, DecomposeSiluPass, DecomposeMagnitudePass, DecomposeSquarePass,
               ConvertPadToCoreOpPass,
               ConvertConv1dToConv2dPass, Convert1dOpsTo2dPass, ConvertPoolsTo2dPass, SinkSqueezePass,
               DecomposeMedianPass, ConvertAddmmToLinearPass,
               DecomposeAttentionPass, ConvertMatmulToBmmPass, SinkBatchViewsPass, RescaleBatchMatmulOperandsPass,
               ConvertClampTensorPass, ConvertDivToMulPass, ConvertScalarOperandsToFloatPass,
               ConvertSplitToSlicesPass, ConvertStackToCatPass, UnshareParametersPass)

# Passes for targets with an NPU only: they trade a CPU kernel (one table) for ops the NPU runs.
NPU_ATEN_PASSES = (DecomposeGeluPass, DecomposeHardsigmoidPass, DecomposeSiluPass, DecomposeSquarePass,
                   RescaleBatchMatmulOperandsPass)

# Run by to_edge_transform_and_lower after decomposition, before the partitioners see the graph.
EDGE_PASSES = (RemoveIdentityCopiesPass,)


# Passes that rewrite parameters into new constants: QAT skips them, its parameters must stay trainable
# (pt2e's conv+BN fusion trains the batch norms and convert folds them; a hardsigmoid then decomposes for
# the NPU, or stays one table on a CPU-only target; a layer norm keeps its affine map as a mul and an add;
# a GRU / LSTM stays whole, and float).
PARAMETER_FOLDING_PASSES = (FoldConstantsPass, FoldBatchNormPass, FoldHardsigmoidPass, FoldLayerNormAffinePass,
                            UnrollRecurrentLayersPass)


def run_aten_passes(gm: GraphModule, qat: bool = False, npu: bool = True,
                    qparam_flow: QparamFlow | None = None, rolled: bool = False, float_cell_state: bool = False
                    ) -> GraphModule:
    """Apply ``ATEN_PASSES`` in order (``NPU_ATEN_PASSES`` only for a target with an NPU; with ``qat``, no
    ``PARAMETER_FOLDING_PASSES``); each returns a ``PassResult``. ``qparam_flow``: the quantizer's fixed and
    shared qparams, which ``RescaleBatchMatmulOperandsPass`` needs (on a target with an NPU). ``rolled``: a
    recurrent layer becomes one step of a loop (``recurrent_loops``), which only ``run_loops`` runs as the
    layer, instead of all of its steps; ``float_cell_state``: a rolled LSTM's cell update stays float."""
    if npu and qparam_flow is None:
        raise ValueError("run_aten_passes for a target with an NPU needs the quantizer's qparam_flow")
    for pass_type in ATEN_PASSES:
        if (qat and pass_type in PARAMETER_FOLDING_PASSES) or (not npu and pass_type in NPU_ATEN_PASSES):
            continue
        if pass_type is RescaleBatchMatmulOperandsPass:
            graph_pass = pass_type(qparam_flow)
        elif pass_type is UnrollRecurrentLayersPass:
            graph_pass = pass_type(rolled, float_cell_state)
        else:
            graph_pass = pass_type()
        gm = graph_pass(gm).graph_module
    return gm


__all__ = ["ATEN_PASSES", "EDGE_PASSES", "NPU_ATEN_PASSES", "PARAMETER_FOLDING_PASSES", "QparamFlow",
           "run_aten_passes"]
