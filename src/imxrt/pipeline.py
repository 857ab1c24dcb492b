"""``compile()``: export -> quantize -> lower (partition + NeutronBackend) -> serialize -> report.

Each stage is one function, called in order by ``compile``; the driver fits on one screen. The stages that are
concepts of their own live in their modules: the options (``options``), the input checks (``model_checks``),
``export``, ``serialization`` and what a compile produces (``artifacts``); their public names are importable
from here too.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager

import torch
from executorch.exir import EdgeCompileConfig, EdgeProgramManager, to_edge
from torch.export import ExportedProgram
from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

from imxrt import integrity
from imxrt.artifacts import CompileResult, converter_dumps, keep_failed_partition
from imxrt.cortex_m import ops as cortex_m_ops
from imxrt.cpu.lowering import lower_to_cortex_m
from imxrt.errors import BadModel, BadOption, CompilerBug, ImxrtError
from imxrt.export import export, export_for_qat
from imxrt.memory.budget import check_sram_budget, check_tensors_fit
from imxrt.memory.planning_pass import ImxrtMemoryPlanner
from imxrt.memory.report import memory_report
from imxrt.model_checks import called_exit, check_example_inputs, check_inputs
from imxrt.npu.backend import check_device_layouts, converter_compile_specs, stamp_delegate_ids
from imxrt.npu.litert.errors import UnsupportedForLiteRT
from imxrt.npu.partitioner import NpuPartitioner, ops_to_keep_whole
from imxrt.options import NEUTRON_COMPILERS, CompileOptions, resolve_neutron_compiler, resolve_options
from imxrt.passes import EDGE_PASSES, run_aten_passes
from imxrt.passes.int8_io import make_io_int8
from imxrt.passes.qdq import is_compute, is_dequantize, is_quantize
from imxrt.passes.recurrent_loops import eager_program, has_loops, roll_loops, run_loops
from imxrt.placement import PlacementLog
from imxrt.profiling.instructions import instruction_table
from imxrt.profiling.provenance import trim_history
from imxrt.quantization import ImxrtQuantizer, calibrate, rules
from imxrt.quantization import qat as qat_module
from imxrt.quantization.bias_correction import BiasCorrection
from imxrt.quantization.convert import convert, export_quantized
from imxrt.quantization.equalization import equalize
from imxrt.quantization.float_layers import keep_float_layers
from imxrt.report import logit_steps, placement
from imxrt.report.advice import advise
from imxrt.serialization import check_stock_kernels, serialize, to_executorch
from imxrt.targets import Target, get_target

__all__ = [
    "NEUTRON_COMPILERS", "CompileOptions", "CompileResult", "check_example_inputs", "check_inputs", "check_lowered",
    "check_stock_kernels", "compile", "compile_qat", "converter_dumps", "export", "export_for_qat",
    "keep_failed_partition", "lower", "package", "prepare_qat", "quantize", "resolve_neutron_compiler", "serialize",
    "to_executorch",
]

log = logging.getLogger("imxrt")


def compile(
    model: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    target: str | Target = "imxrt700",
    calibration: Iterable[Sequence[torch.Tensor]] | None = None,
    options: CompileOptions | None = None,
    qat: Callable[[torch.fx.GraphModule], object] | None = None,
) -> CompileResult:
    """Compile a float ``model`` to an int8 ExecuTorch program for ``target``.

    ``calibration`` is an iterable of input tuples; without it the example inputs calibrate (and a warning
    says so, since one sample rarely gives representative ranges).

    ``qat``: quantization-aware training instead of calibration, the one-call form of ``prepare_qat`` and
    ``compile_qat``. ``qat(module)`` fine-tunes the module ``prepare_qat`` makes (the same quantizer rules;
    conv+BN fused so BN stays trainable) in place, like any ``nn.Module``; its observers then give the int8
    qparams.
    """
    options, target = resolve_options(options, target)
    example_inputs = check_inputs(model, example_inputs)
    if qat is not None and not callable(qat):
        raise BadOption("qat", type(qat).__name__, "a function train_fn(prepared_module) that fine-tunes it")
    seconds: dict[str, float] = {}
    with _timed(seconds, "export"):
        exported = export_for_qat(model, example_inputs) if qat is not None else export(model, example_inputs)
    gaps = logit_steps.DecisionGaps() if qat is None else None  # what argmax/softmax decide on, as calibrated
    with _timed(seconds, "quantize"):
        if qat is not None:
            prepared = qat_module.prepare(exported, example_inputs, target)
            _train(qat, prepared)
            converted = qat_module.convert(prepared)
        else:
            converted = quantize_module(exported, example_inputs, calibration, options, target, gaps)
    with _timed(seconds, "export_quantized"):
        quantized = export_quantized(converted, example_inputs)
    result = _compile_quantized(quantized, target, options, seconds)
    if gaps is not None:
        logit_steps.add_to_report(result.report, gaps)
    return result


def prepare_qat(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor], target: str | Target = "imxrt700"
                ) -> torch.fx.GraphModule:
    """The first half of QAT: ``model`` with fake quantization under ``target``'s rules, as an ``nn.Module`` in
    training mode for the user's own loop (``.to(device)``, DDP, any optimizer, ``state_dict`` checkpoints;
    ``train()``/``eval()``: the observers' statistics move in training mode only). Under ``torch.distributed``
    every training forward reduces the activation statistics over all ranks, so DDP's ``broadcast_buffers``
    may stay on. ``compile_qat`` makes the program of it."""
    target = get_target(target) if isinstance(target, str) else target
    example_inputs = check_inputs(model, example_inputs)
    with _timed({}, "export"):
        exported = export_for_qat(model, example_inputs)
    with _timed({}, "quantize"):
        return qat_module.prepare(exported, example_inputs, target)


def compile_qat(prepared: torch.nn.Module, example_inputs: Sequence[torch.Tensor],
                target: str | Target = "imxrt700", options: CompileOptions | None = None) -> CompileResult:
    """The second half of QAT: the int8 program of a module ``prepare_qat`` made for ``target`` and these
    example inputs (also inside DDP or DataParallel, on any device), as ``compile`` returns it. The module
    itself is left as it is: a copy is moved to the CPU and converted, so training can go on. Under
    ``torch.distributed``, call it on one rank (rank 0): every rank holds the same statistics."""
    options, target = resolve_options(options, target)
    example_inputs = check_example_inputs(example_inputs)
    module = qat_module.check_prepared(prepared, target, example_inputs)
    seconds: dict[str, float] = {}
    with _timed(seconds, "quantize"):
        converted = qat_module.convert(module)
    with _timed(seconds, "export_quantized"):
        quantized = export_quantized(converted, example_inputs)
    return _compile_quantized(quantized, target, options, seconds)


def _train(train_fn: Callable[[torch.fx.GraphModule], object], prepared: torch.fx.GraphModule) -> None:
    """Run the user's QAT ``train_fn``; whatever it raises is a ``BadModel`` of one line."""
    try:
        train_fn(prepared)
    except SystemExit as e:
        raise BadModel(f"the QAT train_fn {called_exit(e)}; it must return when training is done") from None
    except Exception as e:  # user code: report it in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise BadModel(f"the QAT train_fn raised {type(e).__name__}: {first}") from e


def _compile_quantized(quantized: ExportedProgram, target: Target, options: CompileOptions,
                       seconds: dict[str, float]) -> CompileResult:
    """The stages after quantization: lower, check, then ``package``."""
    placement_log = PlacementLog()
    with _timed(seconds, "lower"):
        edge = lower(quantized, target, options, placement_log)
    with _timed(seconds, "check"):
        check_lowered(edge, target)
    return package(edge, quantized, target, options, placement_log, seconds)


def check_lowered(edge: EdgeProgramManager, target: Target) -> None:
    """What a lowered program must hold before it is written: every tensor fits the target's memory, and each
    delegate's inputs come in the layout its payload was compiled for."""
    check_tensors_fit(edge.exported_program(), target)
    check_device_layouts(edge)


def package(edge: EdgeProgramManager, quantized: ExportedProgram, target: Target, options: CompileOptions,
            placement_log: PlacementLog, seconds: dict[str, float]) -> CompileResult:
    """A lowered program's artifacts: the placement report, the ``.pte`` (memory planned, serialized, sealed),
    the memory report and the advice. ``quantized`` is the program ``lower`` was given."""
    with _timed(seconds, "report"):
        # Read the placement before serialization: to_executorch rewrites the edge graph in place.
        report, partitions = placement.build_report(edge, placement_log, target, options.neutron_compiler)
        npu_files = converter_dumps(edge)
    with _timed(seconds, "serialize"):
        planner = ImxrtMemoryPlanner()
        program = to_executorch(edge, planner)
        pte = integrity.seal(bytes(program.buffer))
    with _timed(seconds, "memory"):
        report["profiling"] = instruction_table(program, report["latency"])  # what imxrt run --etdump reads
        # The plan exists only once to_executorch has run; an over-budget program is an error, not an artifact.
        report["memory"] = memory_report(planner.plans, pte, target, options.sram_budget)
        check_sram_budget(report["memory"])
        report["advice"] = advise(report, has_npu=target.npu is not None)  # the estimate and the memory plan
    if has_loops(quantized.graph):  # its forward runs one step of each recurrent layer: roll them for PyTorch
        quantized = eager_program(quantized, quantized.example_inputs[0])
    return CompileResult(pte=pte, partitions=partitions, report=report, stage_seconds=seconds, quantized=quantized,
                         npu_files=npu_files, etrecord=program.get_etrecord())


@contextmanager
def _timed(seconds: dict[str, float], stage: str):
    """Time ``stage``; an exception that is not a user error leaves it as a ``CompilerBug`` naming the stage
    (no raw Python exception escapes ``compile``)."""
    start = time.perf_counter()
    try:
        yield
    except ImxrtError:
        raise
    except Exception as e:
        raise CompilerBug(stage, e) from e
    seconds[stage] = time.perf_counter() - start


def _has_npu(target: Target | None) -> bool:
    return target is None or target.npu is not None  # None: the i.MX RT700, as ImxrtQuantizer reads it


def quantize_module(
    exported: ExportedProgram,
    example_inputs: tuple[torch.Tensor, ...],
    calibration: Iterable[Sequence[torch.Tensor]] | None,
    options: CompileOptions,
    target: Target | None = None,
    gaps: logit_steps.DecisionGaps | None = None,
) -> torch.fx.GraphModule:
    """Graph passes, then pt2e int8 PTQ with ``ImxrtQuantizer`` (the target's rules; default: the
    i.MX RT700's); returns the converted int8 module (``quantize`` exports it). ``gaps``: measures, as
    calibration runs, the decisions int8 steps may flip."""
    graph_module = run_aten_passes(exported.module(check_guards=False), npu=_has_npu(target),
                                   qparam_flow=rules.qparam_flow(rules.devices_of(target)), rolled=True,
                                   float_cell_state=options.cell_state == "float")
    keep_float_layers(graph_module, options.float_layers)
    if calibration is None:
        log.warning("no calibration data given: calibrating on the example inputs alone; pass "
                    "calibration_inputs() for representative activation ranges")
        calibration = [example_inputs]
    if options.calibration_samples is not None:
        calibration = itertools.islice(calibration, options.calibration_samples)
    if options.equalization:
        calibration = list(calibration)  # read twice: the channel ranges, then calibration
        equalize(graph_module, calibration, run_loops)
    prepared = prepare_pt2e(graph_module, ImxrtQuantizer(target, ranges=options.activation_ranges))
    correction = BiasCorrection(prepared) if options.bias_correction else None
    if gaps is not None:
        gaps.watch(prepared)
    calibrate(prepared, calibration, total=options.calibration_samples, show_progress=options.show_progress)
    if gaps is not None:
        gaps.stop()
    if correction is not None:
        correction.apply()
    return convert(prepared)


def quantize(
    exported: ExportedProgram,
    example_inputs: tuple[torch.Tensor, ...],
    calibration: Iterable[Sequence[torch.Tensor]] | None,
    options: CompileOptions,
    target: Target | None = None,
    gaps: logit_steps.DecisionGaps | None = None,
) -> ExportedProgram:
    """``quantize_module``, exported again: the int8 program ``lower`` takes."""
    return export_quantized(quantize_module(exported, example_inputs, calibration, options, target, gaps),
                            example_inputs)


def lower(
    quantized: ExportedProgram, target: Target, options: CompileOptions, placement_log: PlacementLog
) -> EdgeProgramManager:
    """to_edge + NPU partitioning + ``NeutronBackend`` lowering of every partition + the CPU lowering of
    what is left (cortex_m ops for the target's CMSIS-NN path).

    ``to_edge`` with the ops to keep whole, then ``to_backend``: the same program as
    ``to_edge_transform_and_lower``, whose per-node decomposition filter costs two more decomposition
    passes over the whole graph (about half of this stage's time on MobileNetV2)."""
    keep = ops_to_keep_whole(quantized)
    trim_history(quantized.graph)  # to_edge's retraces copy each node's provenance: keep what ExecuTorch reads

    def edge_program() -> EdgeProgramManager:
        return to_edge(
            quantized,
            compile_config=EdgeCompileConfig(_check_ir_validity=False, preserve_ops=keep,
                                             _core_aten_ops_exception_list=keep),
            generate_etrecord=True,  # records the edge graph every debug handle names, before partitioning
        ).transform([pass_type() for pass_type in EDGE_PASSES])

    edge = edge_program()
    if target.npu is not None:
        edge = _delegate_to_npu(edge, edge_program, target, options, placement_log)
    stamp_delegate_ids(edge)
    with cortex_m_ops.own_fakes():
        lowered = lower_to_cortex_m(edge, target.cpu.isa, placement_log)
    if options.io == "int8":
        make_io_int8(lowered.exported_program())
    roll_loops(lowered.exported_program().graph_module)  # each recurrent layer's step becomes its loop
    lowered._etrecord = edge._etrecord  # a new manager: carry the record on, as ExecuTorch's own stages do
    return lowered


def _delegate_to_npu(edge: EdgeProgramManager, edge_program: Callable[[], EdgeProgramManager], target: Target,
                     options: CompileOptions, placement_log: PlacementLog) -> EdgeProgramManager:
    """``to_backend`` with the NPU partitioner.

    A safety net: every limit of the LiteRT lowering is a rule of the capability table (``npu.support``), so
    the lowering should refuse nothing the table accepts. Should it (a table bug, or a rule only the lowering
    can check, on a folded constant), the node stays on the CPU with the lowering's reason, a warning says so,
    and partitioning runs again on a fresh edge program (``to_backend`` edits the one it is given): a model
    never fails to compile because one node cannot be expressed for the NPU."""
    refused: dict[str, str] = {}
    while True:
        partitioner = NpuPartitioner(target, options.neutron_compiler, placement_log, refused)
        partitioner.delegation_spec.compile_specs.extend(converter_compile_specs(options.converter))
        try:
            return edge.to_backend(partitioner)
        except UnsupportedForLiteRT as e:
            edge = edge_program()
            names = _compute_nodes_of(edge.exported_program().graph, e.node_name)
            if not names or all(name in refused for name in names):
                raise
            log.warning("the capability table accepted a node the LiteRT lowering refused (a table bug, unless "
                        "only the lowering can see the rule's numbers): %s; keeping %s on the CPU", e,
                        ", ".join(names))
            refused.update({name: e.problem for name in names})


def _compute_nodes_of(graph: torch.fx.Graph, name: str) -> list[str]:
    """The compute nodes a refused node stands for: itself, or the op that writes the int8 tensor a
    quantize node makes, or the ops that read the tensor a dequantize node makes."""
    node = next((n for n in graph.nodes if n.name == name), None)
    if node is None:
        return []
    if is_quantize(node) and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    if is_dequantize(node):
        return [user.name for user in node.users if is_compute(user)]
    return [node.name] if is_compute(node) else []
