"""The upstream peer for the compile benchmark: ExecuTorch's own NXP backend on the same model.

``run_upstream(model, example_inputs)`` runs ``executorch.backends.nxp`` the way its own test pipeline
composes it (``executorch/backends/nxp/tests/executorch_pipeline.py``): strict ``torch.export``,
``NeutronQuantizer`` with its default observers, calibration, ``NeutronPartitioner`` inside
``to_edge_transform_and_lower`` with ``NeutronEdgePassManager``, then ``to_executorch``. It times each stage
and reports what upstream delegated.

Two things stand in for NXP's proprietary eIQ Neutron SDK, which upstream needs even to import:

* ``benchmarks/_neutron_sdk_standin/eiq_neutron_sdk`` answers the target query
  (``getNeutronTarget("imxrt700")``: Neutron-C, N3, 1 unit, 8 pipes, 8 MACs). It is loaded into
  ``sys.modules`` of this process only, and only when the real SDK cannot be imported.
* The Neutron converter call itself (TFLite -> NeutronGraph microcode) is not available. While
  ``run_upstream`` runs, ``NeutronConverterManager.convert`` is replaced by a function that keeps the
  partition's TFLite model (the output of upstream's edge->TFLite conversion, which does run) and returns a
  placeholder model: one ``NeutronGraph`` custom op with the partition's inputs and outputs and *empty*
  microcode, weights and kernels. That lets upstream's payload composer and ``to_executorch`` finish, so
  serialisation can be timed, but the resulting ``.pte`` has no NPU code and cannot run. With the real SDK
  installed, upstream's converter call runs unchanged (the TFLite model is still captured on the way in).

So the "lower" time covers upstream's to_edge, partitioning and edge->TFLite conversion, not the proprietary
converter; the TFLite op counts are of the models upstream would hand to that converter.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

TARGET = "imxrt700"
_STANDIN_DIR = Path(__file__).resolve().parent / "_neutron_sdk_standin" / "eiq_neutron_sdk"
_NUM_DEFAULT_CALIBRATION_SAMPLES = 4  # upstream's get_random_calibration_inputs default


@dataclass
class UpstreamResult:
    # "export", "quantize" (prepare + calibrate + convert), "lower" (re-export of the quantized module +
    # to_edge + partition + edge->TFLite per partition), "serialize" (to_executorch + buffer).
    # A stage that was not reached is missing.
    seconds: dict[str, float] = field(default_factory=dict)
    # NeutronBackend delegates
    partitions: int = 0
    # builtin op -> count over all partition TFLite models (what upstream hands to the Neutron converter)
    tflite_ops: dict[str, int] = field(default_factory=dict)
    # "compute" = every call_function node except quantize/dequantize, getitem and the delegate call itself
    delegated_nodes: int = 0  # compute nodes inside NeutronBackend delegates
    delegated_ops: dict[str, int] = field(default_factory=dict)  # edge target -> count inside delegates
    cpu_nodes: list[str] = field(default_factory=list)  # compute ops (edge targets) left outside delegates
    error: str | None = None  # one-line reason if upstream failed on this model, prefixed with the stage
    sdk: str = ""  # "stand-in" or "real": which eiq_neutron_sdk was used
    # per partition, the TFLite model before the Neutron converter
    tflite_models: list[bytes] = field(default_factory=list, repr=False)


# ----------------------------------------------------------------------------------------------------
# SDK stand-in
# ----------------------------------------------------------------------------------------------------


def _sdk_is_standin() -> bool:
    return bool(getattr(sys.modules.get("eiq_neutron_sdk"), "IS_STANDIN", False))


def ensure_neutron_sdk() -> str:
    """Make ``eiq_neutron_sdk`` importable: the real SDK if installed, else the stand-in. Returns which."""
    if "eiq_neutron_sdk" not in sys.modules:
        try:
            import eiq_neutron_sdk.neutron_converter  # noqa: F401
            import eiq_neutron_sdk.neutron_library_utils  # noqa: F401
        except ImportError:
            for name in list(sys.modules):
                if name == "eiq_neutron_sdk" or name.startswith("eiq_neutron_sdk."):
                    del sys.modules[name]
            spec = importlib.util.spec_from_file_location(
                "eiq_neutron_sdk",
                _STANDIN_DIR / "__init__.py",
                submodule_search_locations=[str(_STANDIN_DIR)],
            )
            module = importlib.util.module_from_spec(spec)
            sys.modules["eiq_neutron_sdk"] = module
            spec.loader.exec_module(module)
            import eiq_neutron_sdk.neutron_converter  # noqa: F401
            import eiq_neutron_sdk.neutron_library_utils  # noqa: F401
    return "stand-in" if _sdk_is_standin() else "real"


# ----------------------------------------------------------------------------------------------------
# TFLite helpers (upstream's generated flatbuffer bindings)
# ----------------------------------------------------------------------------------------------------


def tflite_op_counts(tflite: bytes) -> Counter:
    from executorch.backends.nxp.backend.ir.lib.tflite.BuiltinOperator import BuiltinOperator
    from executorch.backends.nxp.backend.ir.lib.tflite.Model import Model

    names = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
    model = Model.GetRootAs(tflite, 0)
    codes = []
    for i in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(i)
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        name = names.get(code, str(code))
        if code == BuiltinOperator.CUSTOM and oc.CustomCode():
            name = f"CUSTOM:{oc.CustomCode().decode()}"
        codes.append(name)
    counts: Counter = Counter()
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        for o in range(sg.OperatorsLength()):
            counts[codes[sg.Operators(o).OpcodeIndex()]] += 1
    return counts


def placeholder_neutron_model(tflite: bytes) -> bytes:
    """A TFLite model shaped like the converter's output for ``tflite``, with no NPU code in it.

    One subgraph, one ``NeutronGraph`` custom op whose inputs are the graph inputs followed by empty uint8
    microcode, weights and kernels tensors, and whose outputs are the graph outputs followed by scratch,
    profile and debug tensors (payload version 1, the layout current converters produce). Tensor names, types
    and shapes of the graph inputs and outputs are kept, because upstream's payload composer matches them
    against the partition's I/O formats.
    """
    import flatbuffers
    import numpy as np
    from executorch.backends.nxp.backend.ir.lib.tflite import (
        Buffer as B,
    )
    from executorch.backends.nxp.backend.ir.lib.tflite import (
        Model as M,
    )
    from executorch.backends.nxp.backend.ir.lib.tflite import (
        Operator as O,
    )
    from executorch.backends.nxp.backend.ir.lib.tflite import (
        OperatorCode as OC,
    )
    from executorch.backends.nxp.backend.ir.lib.tflite import (
        SubGraph as SG,
    )
    from executorch.backends.nxp.backend.ir.lib.tflite import (
        Tensor as T,
    )
    from executorch.backends.nxp.backend.ir.lib.tflite.BuiltinOperator import BuiltinOperator
    from executorch.backends.nxp.backend.ir.lib.tflite.TensorType import TensorType

    src = M.Model.GetRootAs(tflite, 0)
    sg = src.Subgraphs(0)
    io = [("in", int(i)) for i in sg.InputsAsNumpy()] + [("out", int(i)) for i in sg.OutputsAsNumpy()]
    # A tensor that is both a graph input and output appears once.
    tensors_src: list[int] = []
    for _, idx in io:
        if idx not in tensors_src:
            tensors_src.append(idx)

    b = flatbuffers.Builder(1024)

    def ivec(start, values):
        start(b, len(values))
        for v in reversed(values):
            b.PrependInt32(v)
        return b.EndVector()

    def tensor(name: bytes, shape: list[int], ttype: int, buffer: int):
        n = b.CreateString(name)
        sh = ivec(T.TensorStartShapeVector, shape)
        T.TensorStart(b)
        T.TensorAddShape(b, sh)
        T.TensorAddType(b, ttype)
        T.TensorAddBuffer(b, buffer)
        T.TensorAddName(b, n)
        return T.TensorEnd(b)

    # Buffers: 0 = the conventional empty buffer, 1..3 = microcode, weights, kernels (all empty).
    buffers = []
    for with_data in (False, True, True, True):
        data = b.CreateNumpyVector(np.zeros(0, dtype=np.uint8)) if with_data else None
        B.BufferStart(b)
        if data is not None:
            B.BufferAddData(b, data)
        buffers.append(B.BufferEnd(b))

    tensor_offsets = []
    new_index: dict[int, int] = {}
    for idx in tensors_src:
        t = sg.Tensors(idx)
        shape = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
        new_index[idx] = len(tensor_offsets)
        tensor_offsets.append(tensor(t.Name() or f"t{idx}".encode(), shape, t.Type(), 0))
    extra = {}
    for i, name in enumerate((b"microcode", b"weights", b"kernels")):
        extra[name] = len(tensor_offsets)
        tensor_offsets.append(tensor(name, [0], TensorType.UINT8, 1 + i))
    for name in (b"scratch", b"profile", b"debug"):
        extra[name] = len(tensor_offsets)
        tensor_offsets.append(tensor(name, [0], TensorType.UINT8, 0))

    graph_inputs = [new_index[int(i)] for i in sg.InputsAsNumpy()]
    graph_outputs = [new_index[int(i)] for i in sg.OutputsAsNumpy()]
    op_inputs = graph_inputs + [extra[b"microcode"], extra[b"weights"], extra[b"kernels"]]
    op_outputs = graph_outputs + [extra[b"scratch"], extra[b"profile"], extra[b"debug"]]

    oi = ivec(O.OperatorStartInputsVector, op_inputs)
    oo = ivec(O.OperatorStartOutputsVector, op_outputs)
    O.OperatorStart(b)
    O.OperatorAddOpcodeIndex(b, 0)
    O.OperatorAddInputs(b, oi)
    O.OperatorAddOutputs(b, oo)
    op = O.OperatorEnd(b)

    SG.SubGraphStartTensorsVector(b, len(tensor_offsets))
    for t in reversed(tensor_offsets):
        b.PrependUOffsetTRelative(t)
    tv = b.EndVector()
    gi = ivec(SG.SubGraphStartInputsVector, graph_inputs)
    go = ivec(SG.SubGraphStartOutputsVector, graph_outputs)
    SG.SubGraphStartOperatorsVector(b, 1)
    b.PrependUOffsetTRelative(op)
    ov = b.EndVector()
    SG.SubGraphStart(b)
    SG.SubGraphAddTensors(b, tv)
    SG.SubGraphAddInputs(b, gi)
    SG.SubGraphAddOutputs(b, go)
    SG.SubGraphAddOperators(b, ov)
    subgraph = SG.SubGraphEnd(b)

    cc = b.CreateString("NeutronGraph")
    OC.OperatorCodeStart(b)
    OC.OperatorCodeAddDeprecatedBuiltinCode(b, BuiltinOperator.CUSTOM)
    OC.OperatorCodeAddBuiltinCode(b, BuiltinOperator.CUSTOM)
    OC.OperatorCodeAddCustomCode(b, cc)
    OC.OperatorCodeAddVersion(b, 1)
    opcode = OC.OperatorCodeEnd(b)

    desc = b.CreateString("placeholder: Neutron converter not available, no NPU code")
    M.ModelStartOperatorCodesVector(b, 1)
    b.PrependUOffsetTRelative(opcode)
    ocv = b.EndVector()
    M.ModelStartSubgraphsVector(b, 1)
    b.PrependUOffsetTRelative(subgraph)
    sgv = b.EndVector()
    M.ModelStartBuffersVector(b, len(buffers))
    for buf in reversed(buffers):
        b.PrependUOffsetTRelative(buf)
    bv = b.EndVector()
    M.ModelStart(b)
    M.ModelAddVersion(b, 3)
    M.ModelAddOperatorCodes(b, ocv)
    M.ModelAddSubgraphs(b, sgv)
    M.ModelAddDescription(b, desc)
    M.ModelAddBuffers(b, bv)
    b.Finish(M.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


@contextlib.contextmanager
def _intercept_converter(captured: list[bytes]):
    """Capture each partition's TFLite model at the Neutron converter call, then run upstream's own
    converter call (real SDK: in a child process, as upstream does) or answer with a placeholder
    NeutronGraph model (stand-in)."""
    from executorch.backends.nxp.backend import neutron_converter_manager as ncm

    original = ncm.NeutronConverterManager.convert

    def convert(self, tflite_model, target, delegation_tag, *args, **kwargs):
        model = bytes(tflite_model)
        captured.append(model)
        if _sdk_is_standin():
            return placeholder_neutron_model(model)
        return original(self, tflite_model, target, delegation_tag, *args, **kwargs)

    ncm.NeutronConverterManager.convert = convert
    try:
        yield
    finally:
        ncm.NeutronConverterManager.convert = original


# ----------------------------------------------------------------------------------------------------
# Graph accounting
# ----------------------------------------------------------------------------------------------------


def _op_name(target) -> str:
    """Edge target name, e.g. ``aten.convolution.default``."""
    return getattr(target, "__name__", None) or str(target)


_NON_COMPUTE_SUBSTRINGS = ("quantize_per_", "dequantize_per_", "getitem", "executorch_call_delegate")


def _is_compute(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    name = _op_name(node.target)
    return not any(s in name for s in _NON_COMPUTE_SUBSTRINGS)


def _account(edge_manager, result: UpstreamResult) -> None:
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    gm = edge_manager.exported_program().graph_module
    for node in gm.graph.nodes:
        if node.op == "call_function" and "executorch_call_delegate" in str(node.target):
            lowered = getattr(gm, node.args[0].target)
            assert isinstance(lowered, LoweredBackendModule)
            if lowered.backend_id != "NeutronBackend":
                continue
            result.partitions += 1
            for n in lowered.original_module.graph.nodes:
                if _is_compute(n):
                    result.delegated_nodes += 1
                    name = _op_name(n.target)
                    result.delegated_ops[name] = result.delegated_ops.get(name, 0) + 1
        elif _is_compute(node):
            result.cpu_nodes.append(_op_name(node.target))


# ----------------------------------------------------------------------------------------------------
# Pipeline
# ----------------------------------------------------------------------------------------------------


def error_line(stage: str, exc: BaseException) -> str:
    """The first line of an exception, prefixed with the stage that raised it (300 characters at most)."""
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    line = f"{stage}: {type(exc).__name__}" + (f": {msg}" if msg else "")
    return line if len(line) <= 300 else line[:297] + "..."


def _default_calibration(example_inputs: tuple[torch.Tensor, ...]) -> list[tuple[torch.Tensor, ...]]:
    """Upstream's default: a few standard-normal samples of the input shapes (seeded here, to repeat)."""
    g = torch.Generator().manual_seed(0)
    samples = []
    for _ in range(_NUM_DEFAULT_CALIBRATION_SAMPLES):
        samples.append(
            tuple(
                torch.randn(x.shape, generator=g, dtype=x.dtype) if x.is_floating_point() else x.clone()
                for x in example_inputs
            )
        )
    return samples


def run_upstream(
    model: torch.nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    calibration: list[tuple[torch.Tensor, ...]] | None = None,
) -> UpstreamResult:
    """Run ExecuTorch's NXP backend on ``model`` for imxrt700 and measure it.

    Never raises for upstream failures: they end up in ``result.error`` (one line, prefixed with the stage)
    next to whatever was measured before. ``calibration`` defaults to upstream's own default: four
    standard-normal samples of the example inputs' shapes."""
    result = UpstreamResult()
    stage = "import"
    try:
        result.sdk = ensure_neutron_sdk()
        # Out variants of the Q/DQ ops left on the CPU, registered the way upstream's own flow does.
        import executorch.kernels.quantized  # noqa: F401
        from executorch.backends.nxp.backend.custom_delegation_options import CustomDelegationOptions
        from executorch.backends.nxp.backend.neutron_target_spec import NeutronTargetSpec
        from executorch.backends.nxp.edge_passes.neutron_edge_pass_manager import NeutronEdgePassManager
        from executorch.backends.nxp.edge_passes.remove_additional_quantize_dequantize_nodes_pass import (
            RemoveAdditionalQDQClustersPass,
        )
        from executorch.backends.nxp.neutron_partitioner import NeutronPartitioner
        from executorch.backends.nxp.nxp_backend import (
            core_aten_ops_exception_list,
            generate_neutron_compile_spec,
        )
        from executorch.backends.nxp.quantizer.neutron_quantizer import NeutronQuantizer
        from executorch.backends.nxp.quantizer.utils import calibrate_and_quantize
        from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower

        example_inputs = tuple(example_inputs)
        if calibration is None:
            calibration = _default_calibration(example_inputs)
        target_spec = NeutronTargetSpec(TARGET)
        model = model.eval()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")

            stage = "export"
            t = time.perf_counter()
            exported = torch.export.export(model, example_inputs, strict=True)
            result.seconds["export"] = time.perf_counter() - t

            stage = "quantize"
            t = time.perf_counter()
            quantized = calibrate_and_quantize(
                model=exported,
                calibration_inputs=calibration,
                quantizer=NeutronQuantizer(target_spec),
            )
            result.seconds["quantize"] = time.perf_counter() - t

            stage = "lower"
            t = time.perf_counter()
            with _intercept_converter(result.tflite_models):
                compile_spec = generate_neutron_compile_spec(TARGET)
                partitioner = NeutronPartitioner(
                    compile_spec,
                    target_spec,
                    CustomDelegationOptions(),
                    quantized.state_dict(),
                    preserve_ops=[
                        torch.ops.aten.prelu.default,
                        torch.ops.aten.pad.default,
                        torch.ops.aten.hardswish.default,
                    ],
                )
                edge = to_edge_transform_and_lower(
                    torch.export.export(quantized, example_inputs, strict=True),
                    transform_passes=NeutronEdgePassManager(),
                    partitioner=[partitioner],
                    compile_config=EdgeCompileConfig(
                        _check_ir_validity=False,
                        _core_aten_ops_exception_list=core_aten_ops_exception_list,
                    ),
                )
                edge = edge.transform(NeutronEdgePassManager([RemoveAdditionalQDQClustersPass()]))
            result.seconds["lower"] = time.perf_counter() - t

            stage = "account"
            counts: Counter = Counter()
            for tfl in result.tflite_models:
                counts.update(tflite_op_counts(tfl))
            result.tflite_ops = dict(sorted(counts.items()))
            _account(edge, result)

            stage = "serialize"
            t = time.perf_counter()
            et = edge.to_executorch(config=ExecutorchBackendConfig(extract_delegate_segments=False))
            _ = et.buffer
            result.seconds["serialize"] = time.perf_counter() - t
    except Exception as exc:  # upstream failures must not crash the benchmark
        result.error = error_line(stage, exc)
    return result


# ----------------------------------------------------------------------------------------------------
# Quick check: python benchmarks/upstream_nxp.py
# ----------------------------------------------------------------------------------------------------


def _mobilenet_v2_like(width: float = 0.35, num_classes: int = 10) -> torch.nn.Module:
    """Small MobileNetV2-style network (inverted residuals, ReLU6, 1x1 expand, 3x3 depthwise, 1x1 project)."""
    from torch import nn

    def ch(c: int) -> int:
        return max(8, int(c * width + 4) // 8 * 8)

    def cbr(cin, cout, k=1, s=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.ReLU6())
        return layers

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            layers = [] if expand == 1 else cbr(cin, hidden)
            layers += cbr(hidden, hidden, 3, stride, groups=hidden)
            layers += cbr(hidden, cout, act=False)
            self.block = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.block(x)
            return x + y if self.residual else y

    # (expand, channels, repeats, stride), as in MobileNetV2
    settings = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]
    cin = ch(32)
    layers = cbr(3, cin, 3, 2)
    for t, c, n, s in settings:
        cout = ch(c)
        for i in range(n):
            layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
            cin = cout
    last = 1280 if width <= 1.0 else ch(1280)
    layers += cbr(cin, last)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Linear(last, num_classes)

        def forward(self, x):
            return self.classifier(torch.flatten(self.pool(self.features(x)), 1))

    return Net().eval()


def _format_table(rows: list[tuple[str, UpstreamResult]]) -> str:
    header = (
        "model",
        "export s",
        "quant s",
        "lower s",
        "ser. s",
        "parts",
        "deleg",
        "cpu ops",
        "TRANSPOSE",
        "PAD/PADV2",
        "tflite ops",
    )
    lines = []
    body = []
    for name, r in rows:

        def sec(k, s=r.seconds):
            return f"{s[k]:.2f}" if k in s else "-"

        ops = r.tflite_ops
        body.append(
            (
                name,
                sec("export"),
                sec("quantize"),
                sec("lower"),
                sec("serialize"),
                str(r.partitions),
                str(r.delegated_nodes),
                str(len(r.cpu_nodes)),
                str(ops.get("TRANSPOSE", 0)),
                f"{ops.get('PAD', 0)}/{ops.get('PADV2', 0)}",
                str(sum(ops.values())),
            )
        )
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
    lines.append(
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True))
        )
    )
    for b in body:
        lines.append(
            "  ".join(
                v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(b, widths, strict=True))
            )
        )
    for name, r in rows:
        if r.cpu_nodes:
            lines.append(f"{name}: on CPU: {dict(Counter(r.cpu_nodes))}")
        lines.append(f"{name}: delegated: {r.delegated_ops}")
        lines.append(f"{name}: TFLite ops: {r.tflite_ops}")
        if r.error:
            lines.append(f"{name}: upstream failed: {r.error}")
    return "\n".join(lines)


def main() -> None:
    logging.disable(logging.WARNING)  # upstream logs per-node warnings; the table is what matters here
    from executorch.examples.models import mlperf_tiny as mt

    torch.manual_seed(0)
    cases = []
    for name, wrapper in (
        ("DS-CNN KWS", mt.DSCNNKWSModel),
        ("MobileNetV1-0.25 96", mt.MobileNetV1025Model),
        ("ResNet-8", mt.ResNet8Model),
        ("DeepAutoEncoder", mt.DeepAutoEncoderModel),
    ):
        w = wrapper()
        cases.append((name, w.get_eager_model(), w.get_example_inputs()))
    cases.append(("MobileNetV2-0.35 64", _mobilenet_v2_like(), (torch.rand(1, 3, 64, 64) * 2 - 1,)))

    rows = []
    for name, model, inputs in cases:
        r = run_upstream(model, inputs)
        rows.append((name, r))
        print(
            f"{name}: done ({sum(r.seconds.values()):.1f} s){' - ' + r.error if r.error else ''}", flush=True
        )
    print(f"\nupstream executorch.backends.nxp, target {TARGET}, eiq_neutron_sdk: {rows[0][1].sdk}")
    print(_format_table(rows))


if __name__ == "__main__":
    main()
