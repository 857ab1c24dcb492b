"""``NeutronBackend``: the ExecuTorch backend that turns one NPU partition into a delegate payload.

edge partition -> LiteRT subgraph (``npu.litert``) -> Neutron compiler (reference, or the eIQ SDK) ->
payload bytes + a debug-handle map (reference: LiteRT op index -> edge debug handles; eIQ with profiling:
Neutron kernel index -> edge debug handles) + ``NeutronDelegateInfo`` on the lowered module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from executorch.exir import EdgeProgramManager
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.export import ExportedProgram
from torch.fx import Node

from imxrt import macs
from imxrt.errors import BadOption
from imxrt.npu import microcode_payload, reference_payload
from imxrt.npu.compilers import eiq, eiq_kernels, reference
from imxrt.npu.litert import lower_partition
from imxrt.passes.qdq import is_compute
from imxrt.placement import DelegateInfo
from imxrt.targets import get_target


def _spec(compile_specs: list[CompileSpec], key: str, default: str | None = None) -> str:
    for spec in compile_specs:
        if spec.key == key:
            return bytes(spec.value).decode()
    if default is None:
        raise KeyError(key)
    return default


# The converter options as compile specs (what the partitioner's delegation spec carries besides the
# target and the compiler). Only options that are on are written, so a program compiled without them has
# the same compile specs, and bytes, as before they existed.
_CONVERTER_SPECS = {
    "fetch_constants_to_sram": "fetch_constants_to_sram",
    "dump_kernel_selection_code": "dump_kernel_selection_code",
    "profiling": "neutron_profiling",
}


def converter_compile_specs(options: eiq.ConverterOptions) -> list[CompileSpec]:
    """Compile specs for the converter options that are on."""
    return [CompileSpec(key, b"1") for name, key in _CONVERTER_SPECS.items() if getattr(options, name)]


def _converter_options(compile_specs: list[CompileSpec]) -> eiq.ConverterOptions:
    on = {name: _spec(compile_specs, key, "0") == "1" for name, key in _CONVERTER_SPECS.items()}
    return eiq.ConverterOptions(**on)


@dataclass(frozen=True)
class NeutronDelegateInfo(DelegateInfo):
    """What ``preprocess`` knows about a delegate beyond its bytes. ExecuTorch keeps it on the lowered module
    (``meta["_delegate_info_meta"]``), out of the ``.pte``; the CPU lowering reads its ``DelegateInfo`` part
    (the input format flags)."""

    compiler: str  # "reference" or "eiq": which kind of payload the delegate holds
    tflite: bytes  # the partition's LiteRT subgraph: the Neutron converter's input
    converter_files: dict[str, bytes] = field(default_factory=dict)  # files the converter wrote, by name
    kernel_map: dict | None = None  # eIQ with profiling: eiq_kernels.KernelMap.to_json()
    op_debug_handles: tuple[tuple[int, ...], ...] = ()  # per LiteRT op, the edge nodes it came from


def delegate_info(module: LoweredBackendModule) -> NeutronDelegateInfo | None:
    info = getattr(module, "meta", None) and module.meta.get("_delegate_info_meta")
    return info if isinstance(info, NeutronDelegateInfo) else None


def _neutron_calls(edge: EdgeProgramManager) -> list[tuple[Node, LoweredBackendModule]]:
    """The program's ``NeutronBackend`` delegate calls and their modules, in execution order."""
    gm = edge.exported_program().graph_module
    calls = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and getattr(node.target, "__name__", "") == "executorch_call_delegate":
            module = getattr(gm, node.args[0].target)
            if module.backend_id == DELEGATE_ID:
                calls.append((node, module))
    return calls


def neutron_delegates(edge: EdgeProgramManager) -> list[LoweredBackendModule]:
    """The program's ``NeutronBackend`` delegates in execution order: the report's partition order."""
    return [module for _, module in _neutron_calls(edge)]


def _input_format_flags(blob: bytes) -> tuple[int, ...]:
    """Per input argument of a delegate call, the format flag the payload ``blob`` gives it
    (``DelegateInfo.input_format_flags``)."""
    if reference_payload.is_reference(blob):
        return tuple(int(io["format_flag"]) for io in reference_payload.unpack(blob).metadata["inputs"])
    parsed = microcode_payload.parse(blob)
    flags = [0] * parsed.n_args
    for arg, flag in zip(parsed.input_map, parsed.input_flags, strict=True):
        flags[arg] = flag
    return tuple(flags)


def check_device_layouts(edge: EdgeProgramManager) -> None:
    """Invariant: the stock runtime accepts every tensor a microcode delegate reads or writes. It takes a
    contiguous or a channels_last tensor where the format flag is 1 and there is more than one channel, and
    only a contiguous one elsewhere. The flags come from the partition; the CPU lowering fixes the final dim
    orders after it, so the two are checked together here."""
    for node, module in _neutron_calls(edge):
        blob = bytes(module.processed_bytes)
        if reference_payload.is_reference(blob):
            continue  # runs on the host, whose runtime takes any dim order
        parsed = microcode_payload.parse(blob)
        outputs = {user.args[1]: user for user in node.users}  # getitem(call, j)
        tensors = [(node.args[1 + i], flag) for i, flag in zip(parsed.input_map, parsed.input_flags, strict=True)]
        tensors += [(outputs[j], flag) for j, flag in zip(parsed.output_map, parsed.output_flags, strict=True)]
        for tensor, flag in tensors:
            value = tensor.meta["val"]
            order, contiguous = tuple(value.dim_order()), tuple(range(value.dim()))
            transposable = flag == 1 and value.dim() >= 3 and value.shape[-3] != 1
            allowed = {contiguous, (0, 2, 3, 1)} if transposable else {contiguous}
            assert order in allowed, (f"{module.backend_id} delegate {node.name}: {tensor.name} has dim order {order}, "
                                      f"format flag {flag}; the board's runtime accepts only {sorted(allowed)}")


def payload_description(blob: bytes) -> dict:
    """What a delegate holds, for the report: ``payload`` is ``reference`` (imxrt's host payload, no device
    code) or ``microcode`` (the stock runtime's payload: eIQ Neutron SDK output, with its header figures)."""
    if reference_payload.is_reference(blob):
        return {"payload": "reference"}
    try:
        parsed = microcode_payload.parse(blob)
    except ValueError as e:
        return {"payload": f"unreadable ({e})"}
    header = parsed.header
    return {"payload": "microcode", "payload_version": parsed.version, "microcode_bytes": header.microcode_bytes,
            "weights_bytes": header.weights_bytes, "npu_scratch_bytes": header.scratch_bytes}


def partition_name(edge_program: ExportedProgram) -> str:
    """How errors name a partition: its tag and the edge nodes it holds."""
    tag = next((n.meta["delegation_tag"] for n in edge_program.graph.nodes if "delegation_tag" in n.meta),
               "(untagged)")
    computes = [n.name for n in edge_program.graph.nodes if is_compute(n)]
    shown = ", ".join(computes[:3]) + (f", ... ({len(computes)} ops)" if len(computes) > 3 else "")
    return f"{tag} [{shown}]"


# The delegate id the stock ExecuTorch Neutron runtime on the board registers: what the .pte must say.
DELEGATE_ID = "NeutronBackend"


class ImxrtNeutronBackend(BackendDetails):
    """The NPU backend. ExecuTorch finds a backend by class name, and the last-defined class of a name
    wins: under the name ``NeutronBackend`` we would silently lose to ExecuTorch's own NXP backend
    whenever a user has imported it. So lowering runs under this unique name, and
    ``stamp_delegate_ids`` then writes the device's id, ``NeutronBackend``, into every delegate."""

    @staticmethod
    def preprocess(edge_program: ExportedProgram, compile_specs: list[CompileSpec]) -> PreprocessResult:
        target = get_target(_spec(compile_specs, "target"))
        choice = _spec(compile_specs, "neutron_compiler")
        if choice not in eiq.COMPILER_CHOICES:
            raise BadOption("--neutron-compiler", choice, eiq.COMPILER_CHOICES)
        compiler = eiq.resolve(choice)
        subgraph = lower_partition(edge_program)
        if compiler == "reference":
            partition_macs = sum(macs.of(n) for n in edge_program.graph.nodes)
            blob = reference.compile_partition(subgraph, target.npu, partition_macs)
            debug_handle_map = {
                index: op.debug_handles for index, op in enumerate(subgraph.ops) if op.debug_handles
            }
            info = NeutronDelegateInfo(input_format_flags=_input_format_flags(blob), compiler=compiler,
                                       tflite=subgraph.tflite,
                                       op_debug_handles=tuple(op.debug_handles for op in subgraph.ops))
            return PreprocessResult(processed_bytes=blob, debug_handle_map=debug_handle_map,
                                    _delegate_info_meta=info)
        options = _converter_options(compile_specs)
        compiled = eiq.compile_partition(subgraph, target.npu, options, partition_name(edge_program))
        debug_handle_map: dict[int, tuple[int, ...]] = {}
        kernel_map = None
        if options.profiling:  # without it the microcode records no kernel events: nothing to map
            names = eiq.tensor_names(subgraph.tflite)
            kernels = eiq_kernels.kernel_map(compiled.conversion.log, names.op_outputs,
                                             [op.builtin for op in subgraph.ops],
                                             [op.debug_handles for op in subgraph.ops])
            debug_handle_map = kernels.debug_handle_map()
            kernel_map = kernels.to_json()
        info = NeutronDelegateInfo(input_format_flags=_input_format_flags(compiled.payload), compiler=compiler,
                                   tflite=subgraph.tflite, converter_files=dict(compiled.conversion.files),
                                   kernel_map=kernel_map,
                                   op_debug_handles=tuple(op.debug_handles for op in subgraph.ops))
        return PreprocessResult(processed_bytes=compiled.payload, debug_handle_map=debug_handle_map,
                                _delegate_info_meta=info)


def stamp_delegate_ids(edge: EdgeProgramManager) -> None:
    """Give every delegate this backend produced the id the board's runtime looks up."""
    for program in (edge.exported_program(name) for name in edge.methods):
        for module in program.graph_module.modules():
            if isinstance(module, LoweredBackendModule) and module.backend_id == ImxrtNeutronBackend.__name__:
                module._backend_id = DELEGATE_ID  # no public setter; the id is plain data on the module
