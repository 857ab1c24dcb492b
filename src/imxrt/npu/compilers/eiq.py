"""The eIQ Neutron SDK compiler: one partition's LiteRT subgraph -> NXP's converter -> device microcode.

NXP's converter (Python package ``eiq_neutron_sdk``, from NXP's package index) is proprietary and can crash
its process, so it runs in a child process (``python -m imxrt.npu.compilers.eiq WORKDIR``) that imports the
SDK from where this process found it. Given a fully convertible subgraph it returns a TFLite model of one
``NeutronGraph`` custom op whose last three inputs hold the microcode, weights and kernels; those, with the
partition's I/O maps and format flags, make the stock runtime's payload (``npu/microcode_payload.py``).

Without the SDK nothing here is needed: ``--neutron-compiler auto`` picks the reference compiler.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imxrt.errors import BadOption, ImxrtError
from imxrt.npu import microcode_payload

if TYPE_CHECKING:
    from imxrt.npu.litert import LiteRTSubgraph
    from imxrt.targets import NeutronConfig

SDK_PACKAGE = "eiq_neutron_sdk"
NEUTRON_GRAPH = b"NeutronGraph"
COMPILER_CHOICES = ("auto", "reference", "eiq")

# The converter's TFLite graph passes ExecuTorch's NXP backend turns off for delegates (NXP's validated
# delegate flow); one op per graph is enough for a NeutronGraph.
_CONVERTER_DEFAULTS = {"minNumOpsPerGraph": 1, "excludeGraphPasses": "HoistSliceAboveTranspose,MergeTranspose"}
# Files of the parent <-> child protocol in the work folder; any other file there the converter wrote.
_INPUT, _REQUEST, _OUTPUT, _ERROR, _LOG = "input.tflite", "request.json", "output.tflite", "error.txt", "converter.log"
_EXIT_CONVERTER_RAISED, _EXIT_NO_SDK = 2, 3
# The SDK's hardware version numbers (its NeutronHWVersion enum) in our target registry's terms.
_HW_VERSIONS = {1: "N1", 2: "N3"}


class NeutronSdkError(ImxrtError):
    """The eIQ Neutron SDK is missing, or describes the target's NPU differently from our registry."""


class NeutronConverterFailed(ImxrtError):
    """NXP's converter crashed, raised, or returned something that is not one NeutronGraph.

    ``tflite`` is the converter's input, kept for a bug report (``imxrt compile`` writes it to disk)."""

    def __init__(self, partition: str, problem: str, tflite: bytes):
        super().__init__(f"NPU partition {partition}: {problem}")
        self.partition, self.problem, self.tflite = partition, problem, tflite


@dataclass(frozen=True)
class ConverterOptions:
    """The converter's optional behaviours (``CompilationContext`` fields)."""

    fetch_constants_to_sram: bool = False  # microcode prefetches weights from flash into SRAM
    dump_kernel_selection_code: bool = False  # the converter writes the C file that selects the used kernels
    profiling: bool = False  # profiling microcode (payload version 1) and the per-kernel dump for the map


@dataclass(frozen=True)
class Conversion:
    """What one converter run produced."""

    tflite: bytes  # the converted model
    log: str  # everything the converter printed
    files: dict[str, bytes]  # files it wrote into its working folder, by name (the kernel selection code)


@dataclass(frozen=True)
class NeutronGraph:
    """The ``NeutronGraph`` op of a converted model: data I/O tensor names and the three device blobs."""

    input_names: tuple[str, ...]  # data inputs, in the op's order
    output_names: tuple[str, ...]  # data outputs, in the op's order
    microcode: bytes
    weights: bytes
    kernels: bytes
    version: int  # 0: outputs + scratch; 1: outputs + scratch, profile, debug


# -- the SDK ------------------------------------------------------------------------------------------------


def _converter_module():
    """The SDK's ``neutron_converter`` module; ``ImportError`` if the SDK does not import."""
    return importlib.import_module(f"{SDK_PACKAGE}.neutron_converter")


def sdk_available() -> bool:
    try:
        _converter_module()
    except ImportError:
        return False
    return True


def resolve(choice: str, has_npu: bool = True) -> str:
    """The compiler ``--neutron-compiler choice`` means: ``auto`` is ``eiq`` when the SDK imports, else
    ``reference``. ``eiq`` without the SDK is an error (only for a target with an NPU, where it matters)."""
    if choice == "reference":
        return choice
    if choice == "auto":
        return "eiq" if sdk_available() else "reference"
    if choice != "eiq":
        raise BadOption("--neutron-compiler", choice, COMPILER_CHOICES)
    if has_npu:
        try:
            _converter_module()
        except ImportError as e:
            raise NeutronSdkError(f"--neutron-compiler eiq: the eIQ Neutron SDK ({SDK_PACKAGE}) does not import "
                                  f"({e}); install it from NXP's package index, in the version of the board's "
                                  "Neutron firmware, or use --neutron-compiler reference") from None
    return choice


@dataclass(frozen=True)
class SdkTarget:
    """The SDK's answer to ``getNeutronTarget(name)``, in our terms."""

    name: str
    neutron_c: bool  # no subsystem: the host core drives every kernel
    hw_version: str
    num_units: int
    num_pipes: int
    num_macs: int


def _field(target: object, name: str):
    # Newer SDKs nest the NPU description under ``.npu``.
    return getattr(target.npu, name) if hasattr(target, "npu") else getattr(target, name)


def query_target(name: str) -> SdkTarget:
    """Ask the SDK how it describes the NPU of target ``name`` (an unknown name crashes some converters, so
    it is checked against the SDK's list first)."""
    converter = _converter_module()
    try:
        utils = importlib.import_module(f"{SDK_PACKAGE}.neutron_library_utils")
    except ImportError:
        utils = None
    if utils is not None and not utils.isNeutronTarget(name):
        known = sorted(t.name for t in utils.getNeutronTargets())
        raise NeutronSdkError(f"target {name}: the eIQ Neutron SDK knows no such NPU (it knows {', '.join(known)}); "
                              "this SDK release does not support the part, install the one for the board")
    raw = converter.getNeutronTarget(name)
    version = _field(raw, "hwVersion")
    version = getattr(version, "value", version)  # an enum member in some releases
    return SdkTarget(name=str(raw.name), neutron_c=not bool(_field(raw, "subsystem")),
                     hw_version=_HW_VERSIONS.get(int(version), f"hardware version {version}"),
                     num_units=int(_field(raw, "numUnits")), num_pipes=int(_field(raw, "numPipes")),
                     num_macs=int(_field(raw, "numMacs")))


def check_target(npu: NeutronConfig) -> SdkTarget:
    """The SDK's description of ``npu``; a ``NeutronSdkError`` naming every field where it differs from the
    target registry (the partitioner's constraints and the cost model use the registry's figures)."""
    sdk = query_target(npu.name)
    ours = {"flavour": npu.flavour, "hardware version": npu.hw_version, "pipes": npu.num_pipes,
            "MACs per pipe": npu.num_macs, "MACs per cycle": npu.macs_per_cycle}
    theirs = {"flavour": "Neutron-C" if sdk.neutron_c else "Neutron-S", "hardware version": sdk.hw_version,
              "pipes": sdk.num_pipes, "MACs per pipe": sdk.num_macs,
              "MACs per cycle": sdk.num_units * sdk.num_pipes * sdk.num_macs}
    differ = [f"{key} {theirs[key]} (registry: {ours[key]})" for key in ours if ours[key] != theirs[key]]
    if differ:
        raise NeutronSdkError(f"target {npu.name}: the eIQ Neutron SDK describes its NPU differently from imxrt's "
                              f"target registry: {'; '.join(differ)}. Install the SDK release for this part, or "
                              "use --neutron-compiler reference")
    return sdk


# -- the converter, in a child process ----------------------------------------------------------------------


def _request(target: str, options: ConverterOptions) -> dict:
    fields = dict(_CONVERTER_DEFAULTS, fetchConstantsToSRAM=options.fetch_constants_to_sram,
                  dumpKernelSelectionCode=options.dump_kernel_selection_code)
    if options.profiling:
        # The per-kernel dump (imported graph, generated graph, kernels per operator) the profiling map reads.
        fields.update(useProfiling=True, dumpAfterImport="console", dumpAfterGenerate="console", verbose=True)
    return {"target": target, "fields": fields}


def _child_environment() -> dict[str, str]:
    """This environment, with the folders this process imported the SDK and imxrt from first on the path:
    the child imports the same SDK, however it was found here."""
    import imxrt

    paths = [str(Path(imxrt.__file__).resolve().parents[1])]
    spec = importlib.util.find_spec(SDK_PACKAGE)
    if spec is not None and spec.origin:
        location = Path(spec.origin).resolve().parent  # a package's folder, or a one-file module's
        paths.insert(0, str(location.parent if spec.submodule_search_locations else location))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])


def convert(tflite: bytes, target: str, options: ConverterOptions, partition: str) -> Conversion:
    """Run ``convertModel`` on ``tflite`` in a child process; a crash or an exception there is a
    ``NeutronConverterFailed`` naming the partition and carrying its ``.tflite``."""
    with tempfile.TemporaryDirectory(prefix="imxrt-neutron-") as folder:
        work = Path(folder)
        (work / _INPUT).write_bytes(tflite)
        (work / _REQUEST).write_text(json.dumps(_request(target, options)))
        with open(work / _LOG, "wb") as log:
            process = subprocess.run([sys.executable, "-m", __name__, str(work)], cwd=work, env=_child_environment(),
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, check=False)
        output = (work / _LOG).read_text(errors="replace")
        if process.returncode != 0 or not (work / _OUTPUT).exists():
            raise NeutronConverterFailed(partition, _failure(process.returncode, work, output), tflite)
        files = {p.name: p.read_bytes() for p in sorted(work.iterdir())
                 if p.is_file() and p.name not in {_INPUT, _REQUEST, _OUTPUT, _ERROR, _LOG}}
        return Conversion(tflite=(work / _OUTPUT).read_bytes(), log=output, files=files)


def _failure(returncode: int, work: Path, output: str) -> str:
    error = (work / _ERROR).read_text().strip() if (work / _ERROR).exists() else ""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        said = f"; its last output: {_last_lines(output)}" if output.strip() else ""
        return f"the eIQ Neutron converter crashed ({name}){said}. Report it to NXP with the partition's .tflite"
    if returncode == _EXIT_NO_SDK:
        return f"the converter process could not import the eIQ Neutron SDK ({error})"
    if returncode == _EXIT_CONVERTER_RAISED:
        return (f"the eIQ Neutron converter failed: {error}. Report it to NXP with the partition's .tflite, or "
                "use --neutron-compiler reference")
    said = error or _last_lines(output) or "no output"
    return f"the eIQ Neutron converter process exited with status {returncode} ({said})"


def _child(work: Path) -> int:
    """The child process: import the SDK, convert, write the result. Everything it prints goes to the log."""
    import traceback

    request = json.loads((work / _REQUEST).read_text())
    try:
        converter = _converter_module()
    except ImportError as e:
        (work / _ERROR).write_text(str(e))
        return _EXIT_NO_SDK
    try:
        context = converter.CompilationContext()
        context.targetOpts = converter.getNeutronTarget(request["target"])
        # Newer SDKs group the options under ``compilationOpts``; older ones have them on the context.
        fields = getattr(context, "compilationOpts", context)
        for name, value in request["fields"].items():
            if name == "useProfiling" and not hasattr(fields, name):
                raise RuntimeError("this eIQ Neutron SDK release cannot build profiling microcode (no useProfiling "
                                   "option); compile without --neutron-profiling")
            setattr(fields, name, value)
        converted = converter.convertModel(list((work / _INPUT).read_bytes()), context)
    except Exception as e:  # the SDK's own exceptions: reported by the parent in one line
        traceback.print_exc()
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        (work / _ERROR).write_text(f"{type(e).__name__}: {first}" if first else type(e).__name__)
        return _EXIT_CONVERTER_RAISED
    sys.stdout.flush()
    (work / _OUTPUT).write_bytes(bytes(converted))
    return 0


# -- the NeutronGraph op ------------------------------------------------------------------------------------


def _indices(array) -> list[int]:
    """A tensor index vector of the object API (a numpy array, or None when empty)."""
    return [] if array is None else [int(i) for i in array]


def extract_neutron_graph(converted: bytes) -> NeutronGraph:
    """The ``NeutronGraph`` op of a converted model; ``ValueError`` saying what else the converter returned
    (a delegate needs exactly one subgraph holding exactly that one op)."""
    from ai_edge_litert import schema_py_generated as tfl

    try:
        model = tfl.ModelT.InitFromPackedBuf(converted, 0)
    except Exception as e:  # flatbuffers raises struct/index errors on bytes that are no model
        raise ValueError(f"the converter returned no TFLite model ({type(e).__name__})") from None
    subgraphs = model.subgraphs or []
    if len(subgraphs) != 1:
        raise ValueError(f"the converter returned {len(subgraphs)} subgraphs; a delegate needs one")
    graph = subgraphs[0]
    operators = graph.operators or []

    builtin_names = {v: k for k, v in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}

    def describe(op) -> str:
        code = model.operatorCodes[op.opcodeIndex]
        if code.customCode:
            return f"custom {bytes(code.customCode).decode(errors='replace')}"
        name = builtin_names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "an unknown builtin")
        outputs = ", ".join(graph.tensors[t].name.decode(errors="replace") for t in _indices(op.outputs))
        return f"{name} -> {outputs}" if outputs else name

    graphs = [op for op in operators if model.operatorCodes[op.opcodeIndex].customCode == NEUTRON_GRAPH]
    if len(operators) != 1 or len(graphs) != 1:
        left = [describe(op) for op in operators if op not in graphs]
        found = f"{len(graphs)} NeutronGraph op(s) and {len(left)} op(s) it did not convert: {'; '.join(left)}" \
            if left else f"{len(operators)} operators"
        raise ValueError(f"the converter returned {found}; a delegate needs every op of the partition in one "
                         "NeutronGraph (these ops are not supported by this SDK release: keep them off the NPU or "
                         "use --neutron-compiler reference)")
    op = graphs[0]
    inputs = _indices(op.inputs)
    outputs = _indices(op.outputs)
    if len(inputs) < 3:
        raise ValueError(f"the NeutronGraph op has {len(inputs)} inputs; it needs microcode, weights and kernels")

    def blob(tensor_index: int, what: str) -> bytes:
        tensor = graph.tensors[tensor_index]
        buffer = model.buffers[tensor.buffer] if 0 < tensor.buffer < len(model.buffers) else None
        if tensor.type != tfl.TensorType.UINT8 or buffer is None:
            raise ValueError(f"the NeutronGraph {what} input (tensor {tensor.name.decode(errors='replace')}) is not "
                             "a constant uint8 buffer")
        if buffer.data is not None:
            return bytes(buffer.data)
        if buffer.offset > 1:  # a model over 2 GB keeps buffers after the flatbuffer
            return bytes(converted[buffer.offset:buffer.offset + buffer.size])
        return b""

    microcode, weights, kernels = (blob(t, what) for t, what in zip(inputs[-3:], ("microcode", "weights", "kernels"),
                                                                     strict=True))
    graph_inputs = _indices(graph.inputs)
    graph_outputs = _indices(graph.outputs)
    data_inputs = inputs[:-3]
    # Data outputs come first, then scratch (version 0) or scratch, profile and debug (version 1).
    extra_outputs = len(outputs) - len(graph_outputs)
    versions = {1: 0, 3: 1}
    if extra_outputs not in versions:
        raise ValueError(f"the NeutronGraph op has {len(outputs)} outputs for {len(graph_outputs)} model outputs; "
                         "the runtime knows 1 (scratch) or 3 (scratch, profile, debug) more")
    data_outputs = outputs[:len(graph_outputs)]
    if sorted(data_inputs) != sorted(graph_inputs) or sorted(data_outputs) != sorted(graph_outputs):
        raise ValueError("the NeutronGraph op's data inputs and outputs are not the model's inputs and outputs")

    def names(indices: list[int]) -> tuple[str, ...]:
        return tuple(graph.tensors[t].name.decode() for t in indices)

    return NeutronGraph(input_names=names(data_inputs), output_names=names(data_outputs), microcode=microcode,
                        weights=weights, kernels=kernels, version=versions[extra_outputs])


# -- one partition ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EiqPartition:
    """One partition compiled by the SDK."""

    payload: bytes  # the stock runtime's payload
    conversion: Conversion
    graph: NeutronGraph


@dataclass(frozen=True)
class TensorNames:
    """Tensor names of a one-subgraph model: its inputs, outputs, and each operator's outputs, in order."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    op_outputs: tuple[tuple[str, ...], ...]


def tensor_names(tflite: bytes) -> TensorNames:
    from ai_edge_litert import schema_py_generated as tfl

    graph = tfl.ModelT.InitFromPackedBuf(tflite, 0).subgraphs[0]

    def names(indices) -> tuple[str, ...]:
        return tuple(graph.tensors[t].name.decode() for t in _indices(indices))

    return TensorNames(names(graph.inputs), names(graph.outputs), tuple(names(op.outputs) for op in graph.operators))


def compile_partition(subgraph: LiteRTSubgraph, npu: NeutronConfig, options: ConverterOptions,
                      partition: str) -> EiqPartition:
    """Convert ``subgraph`` with the SDK and compose its payload: NeutronGraph input i reads the partition
    input of the same tensor name, output j writes the partition output of that name; format flag 1 where
    the partition tensor is channels_last (its bytes are NHWC already), 0 where the subgraph transposes."""
    check_target(npu)
    conversion = convert(subgraph.tflite, npu.name, options, partition)
    try:
        graph = extract_neutron_graph(conversion.tflite)
    except ValueError as e:
        raise NeutronConverterFailed(partition, str(e), subgraph.tflite) from None
    ours = tensor_names(subgraph.tflite)

    def positions(found: tuple[str, ...], partition_names: tuple[str, ...], what: str) -> tuple[int, ...]:
        missing = [name for name in found if name not in partition_names]
        if missing:
            raise NeutronConverterFailed(partition, f"the NeutronGraph {what} {', '.join(missing)} are not tensors "
                                                    f"of the partition (its {what}: {', '.join(partition_names)})",
                                         subgraph.tflite)
        return tuple(partition_names.index(name) for name in found)

    input_map = positions(graph.input_names, ours.inputs, "inputs")
    output_map = positions(graph.output_names, ours.outputs, "outputs")
    fields = microcode_payload.MicrocodePayload(
        n_args=len(subgraph.inputs),
        input_flags=tuple(int(subgraph.inputs[i].channels_last) for i in input_map),
        output_flags=tuple(int(subgraph.outputs[j].channels_last) for j in output_map),
        input_map=input_map,
        output_map=output_map,
        version=graph.version,
        microcode=graph.microcode,
        weights=graph.weights,
        kernels=graph.kernels,
    )
    try:
        payload = microcode_payload.compose(fields)
    except ValueError as e:
        raise NeutronConverterFailed(partition, f"the converter's NeutronGraph cannot make a device payload: {e}",
                                     subgraph.tflite) from None
    return EiqPartition(payload=payload, conversion=conversion, graph=graph)


if __name__ == "__main__":
    sys.exit(_child(Path(sys.argv[1])))
