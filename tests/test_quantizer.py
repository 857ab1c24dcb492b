"""The int8 scheme the quantizer produces, read off the edge graph's quantize / dequantize nodes."""

import pytest
import torch
import torch.nn as nn
from edge_graphs import int8_edge_program, nodes_named

from imxrt.passes.qdq import find_clusters, qparams_of_dequantize, qparams_of_quantize


def _calibration(*shapes, scale=1.0, count=8):
    generator = torch.Generator().manual_seed(0)
    return [tuple(scale * torch.randn(*s, generator=generator) for s in shapes) for _ in range(count)]


class Mul(nn.Module):
    def forward(self, x, y):
        return x * y


def test_mul_inputs_keep_calibrated_qparams():
    """Upstream pins both mul inputs to scale 1/256 (clipping to +-0.5); ours follow calibration."""
    data = _calibration((1, 16), (1, 16), scale=4.0)
    program = int8_edge_program(Mul(), data[0], data)
    (mul,) = nodes_named(program, "aten.mul.Tensor")
    for arg in mul.args:
        qparams = qparams_of_dequantize(arg)
        assert qparams.scale * 255 > 8.0, f"mul input range {qparams.scale * 255} clips the data"


class SoftmaxMean(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1).mean(dim=-1, keepdim=True)


def test_op_after_softmax_shares_its_fixed_qparams_without_requantizing():
    data = _calibration((2, 10))
    program = int8_edge_program(SoftmaxMean(), data[0], data)
    (softmax,) = nodes_named(program, "aten._softmax.default")
    (q,) = softmax.users
    assert (qparams_of_quantize(q).scale, qparams_of_quantize(q).zero_point) == (1 / 256, -128)
    (mean,) = nodes_named(program, "aten.mean.dim")
    assert qparams_of_dequantize(mean.args[0]) == qparams_of_quantize(q)
    (mean_q,) = mean.users
    assert qparams_of_quantize(mean_q) == qparams_of_quantize(q)


class ConvRelu6Pool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return nn.functional.max_pool2d(nn.functional.relu6(self.conv(x)), 2)


def test_conv_weights_bias_fused_activation_and_shared_pool_qparams():
    data = _calibration((1, 3, 8, 8))
    program = int8_edge_program(ConvRelu6Pool(), data[0], data)
    (conv,) = nodes_named(program, "aten.convolution.default")
    activation_dq, weight_dq, bias_dq = conv.args[:3]
    # weights: int8 per output channel, symmetric in [-127, 127]
    assert weight_dq.args[3:] == (0, -127, 127, torch.int8)
    # bias: int32 at s_in * s_w[c], zero point 0
    constants = dict(program.named_buffers())
    weight_scales = constants[program.graph_signature.inputs_to_buffers[weight_dq.args[1].name]]
    bias_scales = constants[program.graph_signature.inputs_to_buffers[bias_dq.args[1].name]]
    assert bias_dq.args[-1] == torch.int32
    torch.testing.assert_close(bias_scales, weight_scales * qparams_of_dequantize(activation_dq).scale)
    # relu6 is fused: the conv's only user is the activation, and only then a quantize
    (relu6,) = conv.users
    assert relu6.target.__name__ == "aten.hardtanh.default"
    cluster = find_clusters(program.graph)[conv]
    assert cluster.activation is relu6
    # max pool shares its input's qparams
    (pool,) = nodes_named(program, "aten.max_pool2d_with_indices.default")
    pool_cluster = find_clusters(program.graph)[pool]
    assert pool_cluster.output_qparams() == pool_cluster.input_qparams(0)


def test_each_target_has_the_rules_of_exactly_the_ops_its_devices_run():
    """One row per op, so an op both devices run has one rule; a target's rules are the rows of its devices."""
    from imxrt.quantization import rules
    from imxrt.targets import get_target

    aten = torch.ops.aten
    npu, cpu = rules.Device.NPU, rules.Device.CPU
    rt700, cpu_only = rules.rules_for(get_target("imxrt700")), rules.rules_for(get_target("imxrt700-cpu"))
    for table, devices in ((rt700, {npu, cpu}), (cpu_only, {cpu})):
        assert set(table) == {op for op, row in rules.QUANTIZATION.items() if row.devices & devices}
        assert all(rule == rules.QUANTIZATION[op].rule for op, rule in table.items())
    assert rules.QUANTIZATION[aten.gelu.default].devices == {cpu}  # a CPU table lookup; Neutron has no GELU
    assert aten.gelu.default in rt700  # quantized on the RT700 because its CPU runs it
    assert rules.QUANTIZATION[aten.upsample_bilinear2d.vec].devices == {npu}  # no CMSIS-NN kernel
    assert aten.upsample_bilinear2d.vec in rt700 and aten.upsample_bilinear2d.vec not in cpu_only
    assert rules.QUANTIZATION[aten.prelu.default].devices == {npu, cpu}  # Neutron's PRELU; a CPU table
    assert aten.sub.Tensor in cpu_only  # quantized_add with the second multiplier negated
    assert rules.POINTWISE_UNARY in rt700 and rules.POINTWISE_UNARY in cpu_only
    assert rt700[aten.relu_.default] == rt700[aten.relu.default]  # in place quantizes like functional
    assert rt700[aten.add_.Tensor] == rt700[aten.add.Tensor]


class GeluBilinear(nn.Module):
    def forward(self, x):
        return torch.nn.functional.interpolate(torch.nn.functional.gelu(x), scale_factor=2, mode="bilinear")


def _annotated_ops(quantizers) -> set[str]:
    """The ops of ``GeluBilinear``'s aten graph that the quantizers annotate, composed as ExecuTorch's recipes
    compose them: every ``transform_for_annotation`` first, then every ``annotate``."""
    gm = torch.export.export(GeluBilinear(), (torch.randn(1, 2, 4, 4),)).module(check_guards=False)
    for quantizer in quantizers:
        gm = quantizer.transform_for_annotation(gm)
    for quantizer in quantizers:
        quantizer.annotate(gm)
    return {n.target.__name__ for n in gm.graph.nodes if "quantization_annotation" in n.meta}


@pytest.mark.parametrize(("target", "annotated"), [("imxrt700", {"gelu.default", "upsample_bilinear2d.vec"}),
                                                   ("imxrt700-cpu", {"gelu.default"})])
def test_a_target_quantizes_the_ops_of_its_devices(target, annotated):
    """gelu is int8 on the RT700 because its CPU runs it; bilinear upsampling only where the NPU is."""
    from imxrt.quantization import ImxrtQuantizer, rules
    from imxrt.targets import get_target

    assert _annotated_ops([ImxrtQuantizer(get_target(target))]) == annotated
    devices = sorted(rules.devices_of(get_target(target)), key=lambda device: device.value)
    per_device = [ImxrtQuantizer(devices=frozenset({device})) for device in devices]
    assert _annotated_ops(per_device) == annotated  # the recipes' per-device quantizers, composed
    assert _annotated_ops(per_device[::-1]) == annotated


class BilinearElu(nn.Module):
    def forward(self, x, y):
        return torch.nn.functional.elu(x), torch.nn.functional.interpolate(y, scale_factor=2, mode="bilinear")


@pytest.mark.parametrize(("target", "bilinear_is_int8"), [("imxrt700", True), ("imxrt700-cpu", False)])
def test_an_op_only_the_npu_runs_in_int8_stays_float_on_a_cpu_only_target(target, bilinear_is_int8):
    from imxrt.pipeline import CompileOptions, export, quantize
    from imxrt.targets import get_target

    data = _calibration((1, 16), (1, 2, 4, 4))
    # the quantized program, where a float bilinear upsampling is still one node
    program = quantize(export(BilinearElu(), data[0]), data[0], data, CompileOptions(show_progress=False),
                       get_target(target))
    (bilinear,) = nodes_named(program, "upsample_bilinear2d.vec")
    (elu,) = nodes_named(program, "elu.default")
    dequantize = torch.ops.quantized_decomposed.dequantize_per_tensor.default
    assert (bilinear.args[0].target == dequantize) == bilinear_is_int8
    assert elu.args[0].target == dequantize  # elu is an int8 table lookup on both


class AddRelu(nn.Module):
    def forward(self, x, y):
        return torch.relu(x + y)


def test_relu_after_add_is_fused_into_the_add_like_after_a_conv():
    """ADD and cortex_m quantized_add clamp their own output: no Q/DQ pair between add and relu, and the
    relu's observer gives the add's output qparams (zero point -128: nothing below 0 is representable)."""
    data = _calibration((1, 16), (1, 16))
    program = int8_edge_program(AddRelu(), data[0], data)
    (add,) = nodes_named(program, "aten.add.Tensor")
    (relu,) = add.users
    assert relu.target.__name__ == "aten.relu.default"
    (q,) = relu.users
    assert qparams_of_quantize(q).zero_point == -128
