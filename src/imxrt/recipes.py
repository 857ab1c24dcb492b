"""ExecuTorch export recipes for imxrt's targets: ``executorch.export.export(model, [inputs], recipe)``.

Two backends register with ExecuTorch's recipe registry when this module is imported:

- ``imxrt_neutron`` (``NeutronRecipeType.INT8``): the NPU's quantization rules, ``NpuPartitioner`` and the
  ``NeutronBackend`` delegate;
- ``imxrt_cortex_m`` (``CortexMRecipeType.INT8``): the Cortex-M's quantization rules and the CPU lowering
  to ``cortex_m::*`` ops for the core's CMSIS-NN path.

``recipe_for(target)`` gives a target's recipe: a CPU-only target's is the Cortex-M recipe; ``imxrt700``'s
is ``ExportRecipe.combine([neutron, cortex_m])``, the two composed by ExecuTorch itself. The program it
exports equals ``imxrt.compile``'s for the same model, calibration data and target.

Both recipes share the steps around quantization and lowering (the aten passes before annotation, the edge
passes, calibration): a recipe made to be combined leaves them to its partner, since ``combine`` would
otherwise run each twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from executorch.exir import EdgeCompileConfig, EdgeProgramManager, ExecutorchBackendConfig
from executorch.export import (
    BackendRecipeProvider,
    ExportRecipe,
    LoweringRecipe,
    QuantizationRecipe,
    RecipeType,
    recipe_registry,
)

from imxrt.cpu.lowering import LowerToCortexMPass
from imxrt.memory.planning_pass import ImxrtMemoryPlanner, memory_planning_pass
from imxrt.npu.backend import stamp_delegate_ids
from imxrt.npu.partitioner import KEEP_WHOLE, NpuPartitioner
from imxrt.passes import EDGE_PASSES, run_aten_passes
from imxrt.quantization import ImxrtQuantizer
from imxrt.quantization.calibration import narrow, settle_zero_ranges, widen
from imxrt.quantization.convert import share_equal_constants
from imxrt.quantization.rules import CPU_ONLY, NPU_AND_CPU, NPU_ONLY, Device, qparam_flow
from imxrt.targets import Target, get_target

CalibrationFn = Callable[[], Iterable[Sequence[torch.Tensor]]]
TrainFn = Callable[[torch.fx.GraphModule], object]  # fine-tunes the fake-quantized module in place (QAT)


class NeutronRecipeType(RecipeType):
    INT8 = "imxrt_neutron_int8"  # int8 PTQ, every op the target's Neutron supports on the NPU

    @classmethod
    def get_backend_name(cls) -> str:
        return "imxrt_neutron"


class CortexMRecipeType(RecipeType):
    INT8 = "imxrt_cortex_m_int8"  # int8 PTQ, every op with a CMSIS-NN kernel as a cortex_m op

    @classmethod
    def get_backend_name(cls) -> str:
        return "imxrt_cortex_m"


def _without_guards(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``ExportedProgram.module()`` calls a ``_guards_fn`` submodule first; pt2e annotation rejects it and
    a static-shape program needs no guard."""
    for node in list(graph_module.graph.nodes):
        if node.op == "call_module" and node.target == "_guards_fn" and not node.users:
            graph_module.graph.erase_node(node)
    graph_module.graph.eliminate_dead_code()
    graph_module.recompile()
    return graph_module


def _aten_passes(npu: bool, qat: bool):
    """The pre-prepare pass of a recipe: imxrt.compile's aten passes (QAT keeps its batch norms)."""
    devices = NPU_AND_CPU if npu else CPU_ONLY  # the target's: the aten passes run once for both recipes

    def prepare(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
        return run_aten_passes(_without_guards(graph_module), qat=qat, npu=npu, qparam_flow=qparam_flow(devices))
    return prepare


def _edge_passes(method_name: str, program) -> list:
    return [pass_type() for pass_type in EDGE_PASSES]


def _stamp_delegate_ids(edge: EdgeProgramManager) -> list:
    """Not a graph pass: writes the device's delegate id into the lowered modules, nothing to transform."""
    stamp_delegate_ids(edge)
    return []


def _recipe(name: str, devices: frozenset[Device], calibration: CalibrationFn | None, shared_steps: bool, npu: bool,
            partitioners=None, edge_manager_passes=None, qat: TrainFn | bool | None = None) -> ExportRecipe:
    """``qat``: the train_fn (QAT instead of calibration), or True on the side that does not own the shared
    steps: ExecuTorch's ``combine`` requires every side to agree on ``is_qat`` and one to give train_fn."""
    train_fn = qat if callable(qat) else None
    prepare = _aten_passes(npu, bool(qat))
    quantization = QuantizationRecipe(
        quantizers=[ImxrtQuantizer(devices=devices, qat=bool(qat))],
        calibration_inputs_fn=calibration if shared_steps and not qat else None,
        pre_prepare_passes=[prepare] if shared_steps else None,
        # calibration in float64, as imxrt.compile calibrates: ranges that do not move with the thread count
        post_prepare_passes=[widen] if shared_steps and not qat else None,
        pre_convert_passes=([] if qat else [narrow]) + [settle_zero_ranges] if shared_steps else None,
        post_convert_passes=[share_equal_constants] if shared_steps else None,
        is_qat=bool(qat),
        train_fn=train_fn if shared_steps else None,
    )
    lowering = LoweringRecipe(
        partitioners=partitioners,
        edge_transform_passes=[_edge_passes] if shared_steps else None,
        edge_manager_transform_passes=edge_manager_passes,
        # The ops imxrt.compile keeps whole through to_edge (the partitioner adds prelu where it can).
        edge_compile_config=EdgeCompileConfig(_check_ir_validity=False, preserve_ops=list(KEEP_WHOLE),
                                              _core_aten_ops_exception_list=list(KEEP_WHOLE)),
    )
    return ExportRecipe(
        name=name,
        quantization_recipe=quantization,
        lowering_recipe=lowering,
        executorch_backend_config=ExecutorchBackendConfig(
            extract_delegate_segments=True, memory_planning_pass=memory_planning_pass(ImxrtMemoryPlanner())),
        strict=False,
    )


def neutron_recipe(target: Target, calibration: CalibrationFn | None = None, neutron_compiler: str = "reference",
                   shared_steps: bool = True, qat: TrainFn | bool | None = None) -> ExportRecipe:
    """The NPU side of ``target``: its rules, its partitioner, the ``NeutronBackend`` delegate id."""
    if target.npu is None:
        raise ValueError(f"target {target.name} has no NPU")
    return _recipe(f"{target.name}_neutron", NPU_ONLY, calibration, shared_steps, npu=True,
                   partitioners=[NpuPartitioner(target, neutron_compiler)],
                   edge_manager_passes=[_stamp_delegate_ids], qat=qat)


def cortex_m_recipe(target: Target, calibration: CalibrationFn | None = None,
                    shared_steps: bool = True, qat: TrainFn | bool | None = None) -> ExportRecipe:
    """The CPU side of ``target``: the Cortex-M's rules and the lowering for its CMSIS-NN path."""
    isa = target.cpu.isa
    return _recipe(f"{target.name}_cortex_m_{isa.value}", CPU_ONLY, calibration, shared_steps,
                   npu=target.npu is not None, edge_manager_passes=[lambda edge: [LowerToCortexMPass(isa)]], qat=qat)


def recipe_for(target: str | Target = "imxrt700", isa: str | None = None, calibration: CalibrationFn | None = None,
               neutron_compiler: str = "reference", train_fn: TrainFn | None = None) -> ExportRecipe:
    """The recipe of a target (``imxrt targets`` lists them): with an NPU, the Neutron recipe composed with
    the Cortex-M recipe by ``ExportRecipe.combine``; without, the Cortex-M recipe alone. With ``train_fn``,
    QAT (``QuantizationRecipe(is_qat=True, train_fn=...)``) instead of calibration."""
    target = get_target(target, isa) if isinstance(target, str) else target
    if target.npu is None:
        return cortex_m_recipe(target, calibration, qat=train_fn)
    return ExportRecipe.combine(
        [neutron_recipe(target, calibration, neutron_compiler, qat=train_fn),
         cortex_m_recipe(target, shared_steps=False, qat=train_fn is not None)],
        recipe_name=target.name,
    )


class NeutronRecipeProvider(BackendRecipeProvider):
    """``ExportRecipe.get_recipe(NeutronRecipeType.INT8, target="imxrt700", calibration=fn)``."""

    @property
    def backend_name(self) -> str:
        return NeutronRecipeType.get_backend_name()

    def get_supported_recipes(self) -> Sequence[RecipeType]:
        return [NeutronRecipeType.INT8]

    def create_recipe(self, recipe_type: RecipeType, target: str = "imxrt700",
                      calibration: CalibrationFn | None = None, neutron_compiler: str = "reference",
                      **kwargs) -> ExportRecipe | None:
        if recipe_type not in self.get_supported_recipes():
            return None
        _no_other_options(kwargs)
        return neutron_recipe(get_target(target), calibration, neutron_compiler)


class CortexMRecipeProvider(BackendRecipeProvider):
    """``ExportRecipe.get_recipe(CortexMRecipeType.INT8, target="cortex-m55", isa=None, calibration=fn)``."""

    @property
    def backend_name(self) -> str:
        return CortexMRecipeType.get_backend_name()

    def get_supported_recipes(self) -> Sequence[RecipeType]:
        return [CortexMRecipeType.INT8]

    def create_recipe(self, recipe_type: RecipeType, target: str = "imxrt700-cpu", isa: str | None = None,
                      calibration: CalibrationFn | None = None, **kwargs) -> ExportRecipe | None:
        if recipe_type not in self.get_supported_recipes():
            return None
        _no_other_options(kwargs)
        return cortex_m_recipe(get_target(target, isa), calibration)


def _no_other_options(kwargs: dict) -> None:
    if kwargs:
        from imxrt.errors import BadOption

        name = sorted(kwargs)[0]
        raise BadOption(name, kwargs[name], "target, isa, calibration (and neutron_compiler for the NPU)")


def register() -> None:
    """Register both providers with ExecuTorch's recipe registry (once per process)."""
    for provider in (NeutronRecipeProvider(), CortexMRecipeProvider()):
        if provider.backend_name not in recipe_registry.list_backends():
            recipe_registry.register_backend_recipe_provider(provider)


register()
