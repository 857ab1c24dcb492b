"""Test double of ``eiq_neutron_sdk.neutron_converter`` (see ``../README.md``): the target query, the
compilation context and a ``convertModel`` that wraps the whole model in one ``NeutronGraph`` op."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

from ai_edge_litert import schema_py_generated as tfl

IS_TEST_DOUBLE = True
HW_VERSION_N3 = 2  # the SDK's NeutronHWVersion numbering: N1 = 1, N3 = 2


def _graph_builder():
    """tests/neutron_graph_double.py, loaded by path: this package is on the path, the tests folder is not."""
    path = Path(__file__).resolve().parents[2] / "neutron_graph_double.py"
    spec = importlib.util.spec_from_file_location("neutron_graph_double", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def getNeutronTargets():
    pipes = int(os.environ.get("EIQ_TEST_DOUBLE_NUM_PIPES", "8"))
    return [SimpleNamespace(name="imxrt700", subsystem=False, hwVersion=HW_VERSION_N3, numUnits=1, numPipes=pipes,
                            numMacs=8)]


def getNeutronTarget(name: str):
    for target in getNeutronTargets():
        if target.name == name:
            return target
    raise ValueError(f"unknown Neutron target {name}")


_OPTIONS = dict(minNumOpsPerGraph=1, excludeGraphPasses="", fetchConstantsToSRAM=False,
                dumpKernelSelectionCode=False, useProfiling=False, dumpAfterImport="", dumpAfterGenerate="",
                verbose=False)


class CompilationContext:
    def __init__(self):
        self.targetOpts = None
        if os.environ.get("EIQ_TEST_DOUBLE_FLAT_CONTEXT") == "1":
            for name, value in _OPTIONS.items():
                setattr(self, name, value)
        else:
            self.compilationOpts = SimpleNamespace(**_OPTIONS)


_NAMES = {v: k for k, v in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}
_CONVS = ("CONV_2D", "DEPTHWISE_CONV_2D")


def _kernel_groups(types: list[str]) -> list[tuple[list[int], list[str]]]:
    """Neutron operators as (our op indices, kernel names): PAD merges into the conv after it, a
    FULLY_CONNECTED runs as two kernels, RESHAPE is folded away (no kernel)."""
    groups: list[tuple[list[int], list[str]]] = []
    index = 0
    while index < len(types):
        op_type = types[index]
        if op_type == "RESHAPE":
            index += 1
            continue
        if op_type == "PAD" and index + 1 < len(types) and types[index + 1] in _CONVS:
            groups.append(([index, index + 1], ["Pad", "Conv2DStandardV2"]))
            index += 2
            continue
        kernels = ["FullyConnectedPrepare", "FullyConnected"] if op_type == "FULLY_CONNECTED" else \
            ["".join(part.capitalize() for part in op_type.split("_"))]
        groups.append(([index], kernels))
        index += 1
    return groups


def _log(graph, types: list[str], groups) -> str:
    def names(indices) -> list[str]:
        return [graph.tensors[t].name.decode() for t in ([] if indices is None else indices)]

    lines = ["Graphs:", "(imported graph)", "= Optimize Graph =", "= Extract Graphs =", 'NeutronGraph "subgraph_000":']
    for number, (ops, kernels) in enumerate(groups, start=1):
        lines += [f'    NeutronOperator "subgraph_{number:03d}":', "        Operators:"]
        lines += [f"            {types[i]}" for i in ops] + ["        Kernels:"] + [f"            {k}" for k in kernels]
    lines += ["", 'Generate code for NeutronGraph "subgraph_000"', "Graphs:"]
    for number, (ops, _) in enumerate(groups, start=1):
        lines.append(f"Name: subgraph_{number:03d}")
        for location, i in enumerate(ops):
            op = graph.operators[i]
            lines += [f"  Type: {types[i]}", "  Inputs:"] + [f"    [{k}]: {n}" for k, n in enumerate(names(op.inputs))]
            lines += ["  Outputs:"] + [f"    [{k}]: {n}" for k, n in enumerate(names(op.outputs))]
            lines.append(f"  Location: {location}")
    lines.append('Statistics for NeutronGraph "subgraph_000":')
    return "\n".join(lines)


def convertModel(model, cctx):
    mode = os.environ.get("EIQ_TEST_DOUBLE_MODE", "")
    options = getattr(cctx, "compilationOpts", cctx)
    if mode == "crash":
        print("NeutronConverter: internal error while selecting kernels", flush=True)
        ctypes.string_at(0)  # SIGSEGV, as a native converter bug would
    if mode == "raise":
        raise RuntimeError("Unsupported operator configuration: test double told to refuse")
    builder = _graph_builder()
    source = tfl.ModelT.InitFromPackedBuf(bytes(model), 0)
    graph = source.subgraphs[0]

    def io(index: int):
        tensor = graph.tensors[index]
        quant = tensor.quantization
        return builder.Io(tensor.name.decode(), tuple(int(d) for d in tensor.shape), float(quant.scale[0]),
                          int(quant.zeroPoint[0]))

    inputs = [io(int(t)) for t in graph.inputs]
    outputs = [io(int(t)) for t in graph.outputs]
    types = []
    for op in graph.operators:
        code = source.operatorCodes[op.opcodeIndex]
        types.append(_NAMES[max(code.builtinCode, code.deprecatedBuiltinCode)])
    groups = _kernel_groups(types)
    kernel_names = [k for _, kernels in groups for k in kernels]
    profiling = bool(getattr(options, "useProfiling", False))
    version = 1 if profiling or os.environ.get("EIQ_TEST_DOUBLE_PAYLOAD_VERSION") == "1" else 0
    weights = b"".join(bytes(b.data) for b in source.buffers if b.data is not None)
    kernels = "\0".join(kernel_names).encode()
    body = bytes((7 * i + len(types)) % 251 for i in range(4 * len(types) + 3))  # odd: needs padding
    flags = (int(bool(options.fetchConstantsToSRAM)) | int(bool(options.dumpKernelSelectionCode)) << 1
             | int(profiling) << 2)
    microcode = builder.microcode(len(inputs), len(outputs), version, body, weights_bytes=len(weights),
                                  scratch=4096, sram_scratch=len(weights) if options.fetchConstantsToSRAM else 0,
                                  profile=16 * (len(kernel_names) + 1) if version == 1 else 0, word8=flags)
    reverse = os.environ.get("EIQ_TEST_DOUBLE_REVERSE_IO") == "1"
    left_out = [builder.LeftOut(types[-1], "left_out_" + types[-1].lower())] if mode == "leave_op" else []
    if profiling:
        print(_log(graph, types, groups), flush=True)
    if options.dumpKernelSelectionCode:
        Path("_kernel_selection.c").write_text("".join(f"#define NEUTRON_KERNEL_{k.upper()} 1\n"
                                                       for k in sorted(set(kernel_names))))
    return builder.neutron_graph_model(
        inputs, outputs, microcode, weights, kernels, version,
        op_inputs=list(reversed(range(len(inputs)))) if reverse else None,
        op_outputs=list(reversed(range(len(outputs)))) if reverse else None,
        left_out=left_out,
    )


__all__ = ["CompilationContext", "convertModel", "getNeutronTarget", "getNeutronTargets"]
