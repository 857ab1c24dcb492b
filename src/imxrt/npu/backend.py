"""``NeutronBackend``: the ExecuTorch backend that turns one NPU partition into a delegate payload.

edge partition -> LiteRT subgraph (``npu.litert``) -> Neutron compiler (reference, or the eIQ SDK) ->
payload bytes + a debug-handle map from each NPU op to the edge nodes it came from.
"""

from __future__ import annotations

from executorch.exir import EdgeProgramManager
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.export import ExportedProgram

from imxrt import macs
from imxrt.errors import BadOption
from imxrt.npu.compilers import reference
from imxrt.npu.litert import lower_partition
from imxrt.targets import get_target


def _spec(compile_specs: list[CompileSpec], key: str) -> str:
    for spec in compile_specs:
        if spec.key == key:
            return bytes(spec.value).decode()
    raise KeyError(key)


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
        compiler = _spec(compile_specs, "neutron_compiler")
        if compiler != "reference":
            raise BadOption("--neutron-compiler", compiler, ["reference"])
        subgraph = lower_partition(edge_program)
        partition_macs = sum(macs.of(n) for n in edge_program.graph.nodes)
        blob = reference.compile_partition(subgraph, target.npu, partition_macs)
        debug_handle_map = {
            index: op.debug_handles for index, op in enumerate(subgraph.ops) if op.debug_handles
        }
        return PreprocessResult(processed_bytes=blob, debug_handle_map=debug_handle_map)


def stamp_delegate_ids(edge: EdgeProgramManager) -> None:
    """Give every delegate this backend produced the id the board's runtime looks up."""
    for program in (edge.exported_program(name) for name in edge.methods):
        for module in program.graph_module.modules():
            if isinstance(module, LoweredBackendModule) and module.backend_id == ImxrtNeutronBackend.__name__:
                module._backend_id = DELEGATE_ID  # no public setter; the id is plain data on the module
