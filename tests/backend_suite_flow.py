"""imxrt's flows for ExecuTorch's backend test suite (``executorch/backends/test/suite``), as a pytest plugin.

The suite runs each operator and model case through every registered flow: a ``TestFlow`` whose ``Tester``
quantizes, exports (the reference: the quantized program run in eager PyTorch), lowers, serializes and runs the
program, and compares its outputs with the reference (atol 0.1, rtol 0.04), filing each case under one of its
result classes (``TestResult``). Upstream registers its flows in ``flow.all_flows``; this plugin adds two,
without editing the installed package:

    imxrt700       imxrt.compile for the i.MX RT700 (NeutronBackend + cortex_m), run by imxrt's host runtime
    imxrt700_cpu   the same for the RT700 without its NPU (cortex_m and portable kernels only)

Each stage is the stage of ``imxrt.compile`` it names (``pipeline.quantize``, ``lower`` + ``check_lowered``,
``package``), with the options a user gets by default; the suite's calibration is its example inputs, as for
every flow. Run the suite with the plugin loaded before the suite's conftest reads the registry::

    python -m pytest -p backend_suite_flow -m flow_imxrt700 \\
        <site-packages>/executorch/backends/test/suite/operators -c /dev/null --rootdir .

(``tests`` on ``sys.path``, e.g. ``PYTHONPATH=tests``). ``benchmarks/backend_suite.py`` runs every case in a
process of its own beside upstream's NXP and XNNPACK flows; ``tests/test_backend_suite.py`` runs a fixed sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import pytest
import torch
from executorch.backends.test.harness import Tester
from executorch.backends.test.harness.stages import Stage, StageType
from executorch.backends.test.suite import flow as suite_flow
from executorch.backends.test.suite.flow import TestFlow
from torch.export import ExportedProgram

from imxrt import pipeline
from imxrt.export import export
from imxrt.passes.recurrent_loops import eager_program, has_loops
from imxrt.placement import PlacementLog
from imxrt.targets import Target, get_target

BACKEND = "imxrt"
TARGETS = {"imxrt700": "imxrt700", "imxrt700_cpu": "imxrt700-cpu"}  # flow name -> imxrt target


@dataclass
class _Compile:
    """One ``imxrt.compile`` split into the suite's stages: what each stage leaves for the next."""

    target: Target
    options: pipeline.CompileOptions = field(default_factory=lambda: pipeline.CompileOptions(show_progress=False))
    seconds: dict[str, float] = field(default_factory=dict)
    quantized: ExportedProgram | None = None  # the program lower takes (a recurrent layer: one step of it)
    placement_log: PlacementLog = field(default_factory=PlacementLog)
    npu_delegates: int = 0  # NeutronBackend calls in the lowered program


class _Quantize(Stage):
    """imxrt's export and PTQ (``pipeline.quantize``), calibrated on the case's example inputs."""

    def __init__(self, compile_: _Compile) -> None:
        self.compile = compile_

    def stage_type(self) -> StageType:
        return StageType.QUANTIZE

    def run(self, artifact: torch.nn.Module, inputs) -> None:
        inputs = pipeline.check_inputs(artifact, inputs)
        self.compile.quantized = pipeline.quantize(export(artifact, inputs), inputs, [inputs], self.compile.options,
                                                   self.compile.target)

    @property
    def artifact(self) -> ExportedProgram:
        return self.compile.quantized

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        return self.compile.quantized.graph_module

    def run_artifact(self, inputs):
        return self.artifact.module()(*inputs)


class _Export(Stage):
    """The suite's reference: the quantized program as PyTorch runs it (``CompileResult.quantized``: a recurrent
    layer's step rolled into its loop)."""

    def __init__(self, compile_: _Compile, dynamic_shapes=None) -> None:
        self.compile = compile_
        self.reference: ExportedProgram | None = None

    def stage_type(self) -> StageType:
        return StageType.EXPORT

    def run(self, artifact: ExportedProgram, inputs) -> None:
        quantized = self.compile.quantized
        self.reference = eager_program(quantized, quantized.example_inputs[0]) if has_loops(quantized.graph) \
            else quantized

    @property
    def artifact(self) -> ExportedProgram:
        return self.reference

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        return self.reference.graph_module


class _Lower(Stage):
    """``pipeline.lower`` (partition, NeutronBackend, the cortex_m lowering) and ``check_lowered``."""

    def __init__(self, compile_: _Compile) -> None:
        self.compile = compile_
        self.edge = None

    def stage_type(self) -> StageType:
        return StageType.TO_EDGE_TRANSFORM_AND_LOWER

    def run(self, artifact, inputs=None, generate_etrecord: bool = False) -> None:
        compile_ = self.compile
        self.edge = pipeline.lower(compile_.quantized, compile_.target, compile_.options, compile_.placement_log)
        pipeline.check_lowered(self.edge, compile_.target)
        compile_.npu_delegates = sum(node.target is torch._higher_order_ops.executorch_call_delegate
                                     for node in self.graph_module.graph.nodes)

    @property
    def artifact(self):
        return self.edge  # an EdgeProgramManager carrying the ETRecord, which the suite counts ops from

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        return self.edge.exported_program().graph_module


class _ToExecutorch(Stage):
    """``pipeline.package``: the placement report, memory planning, the sealed ``.pte``, the memory report."""

    def __init__(self, compile_: _Compile) -> None:
        self.compile = compile_
        self.result: pipeline.CompileResult | None = None

    def stage_type(self) -> StageType:
        return StageType.TO_EXECUTORCH

    def run(self, artifact, inputs=None) -> None:
        compile_ = self.compile
        self.result = pipeline.package(artifact, compile_.quantized, compile_.target, compile_.options,
                                       compile_.placement_log, compile_.seconds)

    @property
    def artifact(self) -> pipeline.CompileResult:
        return self.result

    @property
    def graph_module(self) -> None:
        return None


class _Serialize(Stage):
    """The ``.pte`` bytes, run by imxrt's host runtime."""

    def __init__(self, compile_: _Compile) -> None:
        self.pte: bytes | None = None

    def stage_type(self) -> StageType:
        return StageType.SERIALIZE

    def run(self, artifact: pipeline.CompileResult, inputs=None) -> None:
        self.pte = artifact.pte

    @property
    def artifact(self) -> bytes:
        return self.pte

    @property
    def graph_module(self) -> None:
        return None

    def run_artifact(self, inputs):
        from imxrt.runtime import load

        flat, _ = torch.utils._pytree.tree_flatten(inputs)
        return tuple(torch.from_numpy(output) for output in load(self.pte, name="the suite's program").forward(*flat))

    def dump_artifact(self, path_to_dump: str | None) -> None:
        with open(path_to_dump, "wb") as file:
            file.write(self.pte)


class ImxrtTester(Tester):
    """The suite's ``Tester`` with imxrt's stages; ``compile`` holds what they pass on."""

    def __init__(self, module: torch.nn.Module, example_inputs, target: str) -> None:
        self.compile = _Compile(get_target(target))
        stages = {StageType.QUANTIZE: _Quantize, StageType.EXPORT: _Export,
                  StageType.TO_EDGE_TRANSFORM_AND_LOWER: _Lower, StageType.TO_EXECUTORCH: _ToExecutorch,
                  StageType.SERIALIZE: _Serialize}
        super().__init__(module, tuple(example_inputs),
                         stage_classes={kind: partial(stage, self.compile) for kind, stage in stages.items()})


class TesterFactory:
    """``TestFlow.tester_factory`` for one target; keeps the tester it made last (only that one: a session runs
    hundreds of cases), so a runner can read what a case compiled to (``ImxrtTester.compile``)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.last: ImxrtTester | None = None

    def __call__(self, model: torch.nn.Module, inputs) -> ImxrtTester:
        self.last = ImxrtTester(model, inputs, self.target)
        return self.last


def imxrt_flows() -> list[TestFlow]:
    """One flow per target. ``is_delegated=False``: every case runs, also where the NPU takes no op (the suite
    would otherwise pass it unrun); the NPU's share is ``ImxrtTester.compile.npu_delegates``."""
    return [TestFlow(name, backend=BACKEND, tester_factory=TesterFactory(target), quantize=True,
                     is_delegated=False, param_skip_reasons=STATIC_SHAPES_ONLY) for name, target in TARGETS.items()]


# The suite's model tests run each model with dynamic shapes too; a program of ours has static shapes (the NPU's
# payload and the memory plan are sized for them), so those variants are skipped the suite's way, saying why.
STATIC_SHAPES_ONLY = {"use_dynamic_shapes": {True: "imxrt compiles static shapes only: the NPU payload and the memory "
                                                   "plan are sized for the example input's shapes"}}


def _with_imxrt_flows(stock_all_flows):
    flows = imxrt_flows()

    def all_flows() -> dict[str, TestFlow]:
        return {**stock_all_flows(), **{flow.name: flow for flow in flows}}

    all_flows.imxrt = True
    return all_flows


def register() -> None:
    """Add imxrt's flows to the suite's registry (once); call before the suite's conftest is imported."""
    if not getattr(suite_flow.all_flows, "imxrt", False):
        suite_flow.all_flows = _with_imxrt_flows(suite_flow.all_flows)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    """As a ``-p`` plugin: register before the suite's conftest reads the registry to parametrize its cases."""
    register()
