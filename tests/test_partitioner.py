"""NPU placement decisions: one test per capability rule at its boundary, asserting which rule rejected."""

import pytest
import torch
import torch.nn as nn
from edge_graphs import int8_edge_program

from imxrt.npu.partitioner import NpuPartitioner
from imxrt.targets import get_target


class Lambda(nn.Module):
    def __init__(self, function, *modules):
        super().__init__()
        self.function = function
        self.layers = nn.ModuleList(modules)

    def forward(self, *xs):
        return self.function(self.layers, *xs)


def _decide(model, *shapes):
    """Partition ``model`` and return ({op name: (npu?, reason)}, partition tags)."""
    generator = torch.Generator().manual_seed(0)
    data = [tuple(torch.randn(*s, generator=generator) for s in shapes) for _ in range(4)]
    program = int8_edge_program(model.eval(), data[0], data)
    partitioner = NpuPartitioner(get_target("imxrt700"))
    result = partitioner.partition(program)
    decisions = {d.op: (d.npu, d.reason) for d in partitioner.log.decisions.values()}
    return decisions, result.partition_tags


def _conv(c_in, kernel=1, **kw):
    return Lambda(lambda layers, x: layers[0](x), nn.Conv2d(c_in, 2, kernel, **kw))


CASES = {
    # name: (model, input shapes, op, delegated?, words in the reason)
    "conv_mac_bound_last_accepted": (_conv(65528), [(1, 65528, 1, 1)], "aten.convolution.default", True, ""),
    "conv_mac_bound_first_rejected": (_conv(65529), [(1, 65529, 1, 1)], "aten.convolution.default", False,
                                      "roundup(C_in, 8) = 65536"),
    "softmax_channel_dim": (Lambda(lambda _, x: torch.softmax(x, 1)), [(1, 8, 2, 2)], "aten._softmax.default",
                            True, ""),
    "softmax_height_dim": (Lambda(lambda _, x: torch.softmax(x, 2)), [(1, 8, 2, 2)], "aten._softmax.default",
                           True, ""),
    "softmax_4097_rows": (Lambda(lambda _, x: torch.softmax(x, 2)), [(1, 4097, 2, 1)], "aten._softmax.default",
                          False, "at most 4096 rows"),
    "softmax_511_values": (Lambda(lambda _, x: torch.softmax(x, -1)), [(1, 511)], "aten._softmax.default",
                           True, ""),
    "softmax_512_values": (Lambda(lambda _, x: torch.softmax(x, -1)), [(1, 512)], "aten._softmax.default",
                           False, "at most 511 values per row"),
    "softmax_2041_channels": (Lambda(lambda _, x: torch.softmax(x, -1)), [(1, 2041)], "aten._softmax.default",
                              False, "C <= 2040"),
    "transpose_conv_stride_2": (Lambda(lambda m, x: m[0](x), nn.ConvTranspose2d(4, 4, 3, stride=2)),
                                [(1, 4, 4, 4)], "aten.convolution.default", True, ""),
    "transpose_conv_stride_3": (Lambda(lambda m, x: m[0](x), nn.ConvTranspose2d(4, 4, 3, stride=3)),
                                [(1, 4, 4, 4)], "aten.convolution.default", False, "stride <= kernel and <= 2"),
    "transpose_conv_output_padding_within_padding": (
        Lambda(lambda m, x: m[0](x), nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1)),
        [(1, 4, 4, 4)], "aten.convolution.default", True, ""),
    "transpose_conv_output_padding_unpadded": (
        Lambda(lambda m, x: m[0](x), nn.ConvTranspose2d(4, 4, 3, stride=2, padding=0, output_padding=1)),
        [(1, 4, 4, 4)], "aten.convolution.default", True, ""),
    "transpose_conv_output_padding_over_padding": (
        Lambda(lambda m, x: m[0](x), nn.ConvTranspose2d(4, 4, 3, stride=2, padding=(1, 0), output_padding=(0, 1))),
        [(1, 4, 4, 4)], "aten.convolution.default", False, "output_padding <= padding"),
    "adaptive_pool_divisible": (Lambda(lambda _, x: nn.functional.adaptive_avg_pool2d(x, 4)), [(1, 4, 8, 8)],
                                "aten._adaptive_avg_pool2d.default", True, ""),
    "adaptive_pool_not_divisible": (Lambda(lambda _, x: nn.functional.adaptive_avg_pool2d(x, 4)), [(1, 4, 8, 6)],
                                    "aten._adaptive_avg_pool2d.default", False, "W_in % W_out == 0"),
    "add_broadcast_one_full_input": (Lambda(lambda _, x, y: x + y), [(1, 4, 4, 4), (1, 4, 1, 1)],
                                     "aten.add.Tensor", True, ""),
    "add_broadcast_both_partial": (Lambda(lambda _, x, y: x + y), [(1, 4, 1, 4), (1, 1, 4, 1)],
                                   "aten.add.Tensor", False, "one input has the output's element count"),
    "max_pool": (Lambda(lambda _, x: nn.functional.max_pool2d(x, 2)), [(1, 4, 8, 8)],
                 "aten.max_pool2d_with_indices.default", True, ""),
    "max_pool_ceil_mode": (Lambda(lambda _, x: nn.functional.max_pool2d(x, 3, 2, ceil_mode=True)), [(1, 4, 8, 8)],
                           "aten.max_pool2d_with_indices.default", True, ""),
    "max_pool_dilation": (Lambda(lambda _, x: nn.functional.max_pool2d(x, 3, 1, dilation=2)), [(1, 4, 8, 8)],
                          "aten.max_pool2d_with_indices.default", False, "dilation 1"),
    "avg_pool_ceil_mode": (Lambda(lambda _, x: nn.functional.avg_pool2d(x, 3, 2, ceil_mode=True)), [(1, 4, 8, 8)],
                           "aten.avg_pool2d.default", True, ""),
    "avg_pool_ceil_mode_padded": (
        Lambda(lambda _, x: nn.functional.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True)), [(1, 4, 8, 8)],
        "aten.avg_pool2d.default", False, "ceil-mode pool without padding"),
    "elu": (Lambda(lambda _, x: nn.functional.elu(x)), [(1, 16)], "aten.elu.default", False,
            "has no eIQ Neutron kernel"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_capability_rule_boundary(case):
    model, shapes, op, delegated, reason_words = CASES[case]
    decisions, _ = _decide(model, *shapes)
    npu, reason = decisions[op]
    assert npu == delegated, reason
    assert reason_words in reason


def test_lone_reshape_forms_no_partition():
    decisions, tags = _decide(Lambda(lambda _, x: x.reshape(1, 4, 16)), (1, 4, 4, 4))
    assert tags == {}
    npu, reason = decisions["aten.view_copy.default"]
    assert not npu and "data-movement ops alone" in reason


def test_grouped_conv_is_one_delegated_op_with_no_cpu_split():
    model = Lambda(lambda m, x: torch.relu(m[0](x)), nn.Conv2d(8, 8, 3, padding=1, groups=4))
    decisions, tags = _decide(model, (1, 8, 6, 6))
    assert len(tags) == 1
    assert all(npu for npu, _ in decisions.values()), decisions
    assert not any("split" in op for op in decisions)
