"""The profiling map of a microcode delegate (``npu/compilers/eiq_kernels.py``): Neutron kernel index -> edge
debug handles, from the converter's per-kernel dump and our LiteRT ops; merges, splits, converter-inserted and
dropped ops are said, not guessed."""

from __future__ import annotations

import textwrap

from imxrt.npu.compilers.eiq_kernels import kernel_map

# Our LiteRT subgraph: 0 PAD -> p, 1 CONV_2D -> c, 2 RESHAPE -> r, 3 FULLY_CONNECTED -> f, 4 SOFTMAX -> s
OUTPUTS = [("p",), ("c",), ("r",), ("f",), ("s",)]
TYPES = ["PAD", "CONV_2D", "RESHAPE", "FULLY_CONNECTED", "SOFTMAX"]
HANDLES = [(1,), (2, 3), (4,), (5,), (6,)]


def operator(num: int, operators: list[str], kernels: list[str]) -> str:
    lines = [f'    NeutronOperator "subgraph_{num:03d}":', "        Operators:"]
    lines += [f"            {o}" for o in operators] + ["        Kernels:"] + [f"            {k}" for k in kernels]
    return "\n".join(lines)


def generated(num: int, nodes: list[tuple[str, str]]) -> str:
    lines = [f"Name: subgraph_{num:03d}"]
    for location, (op_type, output) in enumerate(nodes):
        lines += [f"  Type: {op_type}", "  Inputs:", "    [0]: somewhere", "  Outputs:", f"    [0]: {output}",
                  f"  Location: {location}"]
    return "\n".join(lines)


def dump(operators: list[str], subgraphs: list[str]) -> str:
    return "\n".join(["Graphs:", "(imported)", "= Optimize Graph =", "= Extract Graphs =",
                      'NeutronGraph "subgraph_000":', *operators, "", 'Generate code for NeutronGraph "subgraph_000"',
                      "Graphs:", *subgraphs, 'Statistics for NeutronGraph "subgraph_000":'])


def test_one_kernel_per_op_maps_each_kernel_to_its_ops_handles():
    log = dump([operator(1, ["SOFTMAX"], ["Softmax"])], [generated(1, [("SOFTMAX", "s")])])
    result = kernel_map(log, OUTPUTS, TYPES, HANDLES)
    assert [(r.index, r.kernel, r.litert_ops, r.debug_handles, r.note) for r in result.rows] == [
        (0, "Softmax", (4,), (6,), ""), (1, "", (), (), "the runtime's final profiling-dump event")]
    assert result.ops_in_no_kernel == (0, 1, 2, 3)


def test_a_merge_and_a_split_are_said_in_the_map():
    log = dump([operator(1, ["PAD", "CONV_2D"], ["Pad", "Conv2DStandardV2"]),
                operator(2, ["FULLY_CONNECTED"], ["FullyConnected"]),
                operator(3, ["SOFTMAX"], ["Softmax"])],
               [generated(1, [("PAD", "p"), ("CONV_2D", "c")]), generated(2, [("FULLY_CONNECTED", "f")]),
                generated(3, [("SOFTMAX", "s")])])
    result = kernel_map(log, OUTPUTS, TYPES, HANDLES)
    first, second = result.rows[0], result.rows[1]
    assert (first.kernel, second.kernel) == ("Pad", "Conv2DStandardV2")
    assert first.litert_ops == second.litert_ops == (0, 1) and first.debug_handles == (1, 2, 3)
    assert "merged: LiteRT ops 0 PAD, 1 CONV_2D run as one Neutron operator" in first.note
    assert "split: its operator runs as 2 kernels (Pad, Conv2DStandardV2)" in first.note
    assert result.rows[2].note == "" and result.rows[2].debug_handles == (5,)
    assert result.ops_in_no_kernel == (2,)  # the RESHAPE the converter folded away
    assert result.debug_handle_map() == {0: (1, 2, 3), 1: (1, 2, 3), 2: (5,), 3: (6,), 4: ()}


def test_tensors_the_converter_derived_from_ours_still_map():
    log = dump([operator(1, ["FULLY_CONNECTED"], ["FullyConnected"])], [generated(1, [("FULLY_CONNECTED", "f/bias")])])
    assert kernel_map(log, OUTPUTS, TYPES, HANDLES).rows[0].litert_ops == (3,)


def test_an_operator_of_the_converters_own_is_unmapped_not_guessed():
    log = dump([operator(1, ["TRANSPOSE"], ["Transpose"])], [generated(1, [("TRANSPOSE", "converter_tensor_7")])])
    row = kernel_map(log, OUTPUTS, TYPES, HANDLES).rows[0]
    assert row.debug_handles == () and row.litert_ops == ()
    assert row.note.startswith("unmapped: the converter's operator subgraph_001 (TRANSPOSE) produces no tensor")


def test_an_op_split_over_two_operators_names_the_other_kernels():
    log = dump([operator(1, ["FULLY_CONNECTED"], ["FcPart"]), operator(2, ["FULLY_CONNECTED"], ["FcPart"])],
               [generated(1, [("FULLY_CONNECTED", "f/0")]), generated(2, [("FULLY_CONNECTED", "f")])])
    rows = kernel_map(log, OUTPUTS, TYPES, HANDLES).rows
    assert rows[0].note == "split: the same LiteRT op(s) also run in kernel(s) 1"
    assert rows[1].note == "split: the same LiteRT op(s) also run in kernel(s) 0"


def test_no_per_kernel_dump_gives_an_empty_map_with_its_reason():
    result = kernel_map(textwrap.dedent("converted 5 operators\n"), OUTPUTS, TYPES, HANDLES)
    assert result.rows == () and result.debug_handle_map() == {}
    assert "no profiling map" in result.note


def test_an_operator_the_converter_added_to_one_of_ours_is_said():
    log = dump([operator(1, ["TRANSPOSE", "CONV_2D"], ["Conv2DStandardV2"])],
               [generated(1, [("TRANSPOSE", "converter_tensor_3"), ("CONV_2D", "c")])])
    row = kernel_map(log, OUTPUTS, TYPES, HANDLES).rows[0]
    assert row.litert_ops == (1,) and row.note == "converter-inserted: TRANSPOSE"
