"""``compile()``: export -> quantize -> lower (partition + NeutronBackend) -> serialize -> report.

Each stage is one function below, called in order by ``compile``; the driver fits on one screen.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

import torch
from executorch.exir import (
    EdgeCompileConfig,
    EdgeProgramManager,
    ExecutorchBackendConfig,
    ExecutorchProgramManager,
    to_edge,
)
from torch.export import ExportedProgram
from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

from imxrt import firmware, integrity, output_folder, writer
from imxrt.cortex_m import ops as cortex_m_ops
from imxrt.cpu.lowering import lower_to_cortex_m
from imxrt.errors import BadModel, BadOption, CompilerBug, ImxrtError
from imxrt.memory.budget import check_sram_budget, check_tensors_fit
from imxrt.memory.planning import ImxrtMemoryPlanner, memory_planning_pass
from imxrt.memory.report import memory_report
from imxrt.model_checks import called_exit, check_finite_weights, non_finite
from imxrt.npu.backend import (
    check_device_layouts,
    converter_compile_specs,
    delegate_info,
    neutron_delegates,
    stamp_delegate_ids,
)
from imxrt.npu.compilers import eiq
from imxrt.npu.litert.errors import UnsupportedForLiteRT
from imxrt.npu.partitioner import NpuPartitioner, ops_to_keep_whole
from imxrt.passes import EDGE_PASSES, run_aten_passes
from imxrt.passes.int8_io import IO_CHOICES, make_io_int8
from imxrt.passes.qdq import is_compute, is_dequantize, is_quantize
from imxrt.placement import PlacementLog
from imxrt.profiling.etrecord import etrecord_bytes
from imxrt.profiling.instructions import EDGE_NAME, instruction_table
from imxrt.profiling.provenance import trim_history
from imxrt.quantization import ImxrtQuantizer, calibrate
from imxrt.quantization import qat as qat_module
from imxrt.quantization.convert import convert_and_export
from imxrt.report import html as report_html
from imxrt.report import placement
from imxrt.report.advice import advise
from imxrt.targets import Target, get_target

log = logging.getLogger("imxrt")

NEUTRON_COMPILERS = eiq.COMPILER_CHOICES  # auto: eiq when the eIQ Neutron SDK imports, else reference


@dataclass(frozen=True)
class CompileOptions:
    """Compiler choices (hardware facts live in ``Target``)."""

    neutron_compiler: str = "auto"
    calibration_samples: int | None = None  # use at most this many calibration tuples
    show_progress: bool = True
    # eIQ Neutron converter options (need the eIQ compiler)
    fetch_constants_to_sram: bool = False  # microcode copies weights from flash to SRAM before use
    dump_kernel_selection: bool = False  # write the converter's kernel selection C code next to the .pte
    neutron_profiling: bool = False  # profiling microcode + npu/partition_<i>.kernels.json (kernel -> edge ops)
    sram_budget: int | None = None  # bytes of SRAM the program may use; None: the target's SRAM
    io: str = "float"  # "int8": the program takes and returns the int8 tensors (no float I/O is planned)

    @property
    def converter(self) -> eiq.ConverterOptions:
        return eiq.ConverterOptions(fetch_constants_to_sram=self.fetch_constants_to_sram,
                                    dump_kernel_selection_code=self.dump_kernel_selection,
                                    profiling=self.neutron_profiling)


@dataclass
class CompileResult:
    """What ``compile`` produced: the program, the LiteRT subgraph of each NPU partition, the report."""

    pte: bytes
    partitions: list[bytes]
    report: dict
    stage_seconds: dict[str, float] = field(default_factory=dict)
    quantized: ExportedProgram | None = None  # the int8 program as PyTorch runs it (fake-quantized float)
    # Output-relative path -> bytes: the files the Neutron converter wrote, next to the .pte
    # (partition_<i>_kernel_selection.c), and the profiling maps (npu/partition_<i>.kernels.json).
    npu_files: dict[str, bytes] = field(default_factory=dict)
    # ExecuTorch's ETRecord of this compile (model.etrecord: what Inspector maps an ETDump's events with)
    etrecord: object | None = None

    @property
    def io(self) -> dict:
        """Each model input and output: name, shape, dtype, dim order, scale, zero point (``report["io"]``)."""
        return self.report["io"]

    def save(self, output: str | Path, c_header: bool = False, bundled: bytes | None = None) -> None:
        """Write ``model.pte``, ``model.etrecord``, ``report.json``, ``report.html``, ``npu/partition_<i>.tflite``
        and the converter's dumps into the folder ``output`` (with ``c_header``, also ``model_pte.h``/``.c``:
        the program as a C array, ``imxrt.firmware``; with ``bundled``, ``model.bpte``: the program with test cases,
        ``imxrt.bundle``, which the C array then holds instead), and ``.imxrt-manifest.json``: each file's size
        and sha256.

        The folder is checked first (``BadOption`` for the filesystem root, the home folder or above it, a path
        under a file, a place that cannot be written). Only the files the previous compile's manifest lists, and
        unchanged since, are replaced or removed; everything else in the folder is the user's and stays (a listed
        file the user has changed is kept with a warning, or refused when this compile writes that name, as is
        any existing file of one of our names that no manifest lists). The new set replaces the old at once: a
        folder holding only our files is exchanged whole for a staged copy; beside the user's files ours are
        replaced one by one under a manifest naming both sets, and an interrupt puts the old ones back
        (``imxrt.output_folder``)."""
        folder = output_folder.check_writable(output)  # before rendering anything
        files = {"model.pte": self.pte,
                 "report.json": (json.dumps(self.report, indent=2, sort_keys=True) + "\n").encode(),
                 "report.html": report_html.render(self.report).encode("utf-8")}
        if self.etrecord is not None:
            files["model.etrecord"] = etrecord_bytes(self.etrecord)
        if bundled is not None:
            files["model.bpte"] = bundled
        if c_header:
            header, source = firmware.render(self.pte, self.io, bundled=bundled)
            files["model_pte.h"], files["model_pte.c"] = header.encode("ascii"), source.encode("ascii")
        for index, tflite in enumerate(self.partitions):
            files[f"npu/partition_{index}.tflite"] = tflite
        files.update(self.npu_files)
        output_folder.write(folder, files)


def keep_failed_partition(error: eiq.NeutronConverterFailed, output: str | Path) -> Path:
    """Write the LiteRT subgraph the Neutron converter failed on to ``output/npu/failed_<tag>.tflite`` (or
    ``failed_<tag>-<n>.tflite``: a file of that name is never overwritten), for a bug report to NXP, and return
    its path. The file appears whole."""
    tag = error.partition.split(" ", 1)[0]
    return writer.write_new(Path(output) / "npu", f"failed_{tag}", ".tflite", error.tflite)


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
    options, target = _resolved(options, target)
    example_inputs = check_inputs(model, example_inputs)
    if qat is not None and not callable(qat):
        raise BadOption("qat", type(qat).__name__, "a function train_fn(prepared_module) that fine-tunes it")
    seconds: dict[str, float] = {}
    with _timed(seconds, "export"):
        exported = export_for_qat(model, example_inputs) if qat is not None else export(model, example_inputs)
    with _timed(seconds, "quantize"):
        if qat is not None:
            prepared = qat_module.prepare(exported, example_inputs, target)
            _train(qat, prepared)
            quantized = qat_module.convert(prepared, example_inputs)
        else:
            quantized = quantize(exported, example_inputs, calibration, options, target)
    return _compile_quantized(quantized, target, options, seconds)


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
    options, target = _resolved(options, target)
    example_inputs = check_example_inputs(example_inputs)
    module = qat_module.check_prepared(prepared, target, example_inputs)
    seconds: dict[str, float] = {}
    with _timed(seconds, "quantize"):
        quantized = qat_module.convert(module, example_inputs)
    return _compile_quantized(quantized, target, options, seconds)


def _resolved(options: CompileOptions | None, target: str | Target) -> tuple[CompileOptions, Target]:
    """The options, checked, with the Neutron compiler resolved, and the target."""
    options = options or CompileOptions()
    target = get_target(target) if isinstance(target, str) else target
    options = resolve_neutron_compiler(options, target)
    if options.io not in IO_CHOICES:
        raise BadOption("--io", options.io, IO_CHOICES)
    if options.sram_budget is not None and (isinstance(options.sram_budget, bool) or
                                            not isinstance(options.sram_budget, int) or options.sram_budget < 1):
        raise BadOption("--sram-budget", options.sram_budget, "a positive number of bytes (e.g. 512K, 2M)")
    return options, target


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
    """The stages after quantization: lower, check, report, serialize, plan memory."""
    placement_log = PlacementLog()
    with _timed(seconds, "lower"):
        edge = lower(quantized, target, options, placement_log)
    with _timed(seconds, "check"):
        check_tensors_fit(edge.exported_program(), target)
        check_device_layouts(edge)
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
    return CompileResult(pte=pte, partitions=partitions, report=report, stage_seconds=seconds, quantized=quantized,
                         npu_files=npu_files, etrecord=program.get_etrecord())


_CONVERTER_OPTIONS = {"fetch_constants_to_sram": "--fetch-constants-to-sram",
                      "dump_kernel_selection": "--dump-kernel-selection", "neutron_profiling": "--neutron-profiling"}


def resolve_neutron_compiler(options: CompileOptions, target: Target) -> CompileOptions:
    """``options`` with ``auto`` resolved (``eiq`` when the eIQ Neutron SDK imports). With the SDK, its
    description of the target's NPU must equal the registry's; converter options need the SDK."""
    if options.neutron_compiler not in NEUTRON_COMPILERS:
        raise BadOption("--neutron-compiler", options.neutron_compiler, NEUTRON_COMPILERS)
    compiler = eiq.resolve(options.neutron_compiler, has_npu=target.npu is not None)
    if compiler != "eiq":
        for name, flag in _CONVERTER_OPTIONS.items():
            if getattr(options, name):
                raise BadOption(flag, True, "it only with the eIQ Neutron SDK installed (--neutron-compiler eiq); "
                                            f"--neutron-compiler {options.neutron_compiler} compiles with the "
                                            "reference compiler, which makes no microcode")
    elif target.npu is not None:
        eiq.check_target(target.npu)
    return dataclasses.replace(options, neutron_compiler=compiler)


def converter_dumps(edge: EdgeProgramManager) -> dict[str, bytes]:
    """The files the Neutron converter wrote for each partition, and each partition's profiling map, by the
    path ``CompileResult.save`` writes them to."""
    files: dict[str, bytes] = {}
    for index, module in enumerate(neutron_delegates(edge)):
        info = delegate_info(module)
        if info is None:
            continue
        for name, data in info.converter_files.items():
            files[f"partition_{index}_{name.lstrip('_')}"] = data
        if info.kernel_map is not None:
            files[f"npu/partition_{index}.kernels.json"] = \
                (json.dumps(info.kernel_map, indent=2, sort_keys=True) + "\n").encode()
    return files


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


def check_inputs(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The model must be float with float tensor inputs: int8 conversion is this compiler's job."""
    if not isinstance(model, torch.nn.Module):
        raise BadModel(f"expected a torch.nn.Module, got {type(model).__name__}")
    example_inputs = check_example_inputs(example_inputs)
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if p.dtype in (torch.int64, torch.bool):
            continue  # BatchNorm's num_batches_tracked is int64
        if not p.dtype.is_floating_point:
            raise BadModel(f"parameter {name} is {p.dtype}; give the float model, imxrt quantizes it itself")
        if p.dtype != torch.float32:
            raise BadModel(f"parameter {name} is {p.dtype}; imxrt quantizes float32 models: call model.float()")
    check_finite_weights(model)
    return example_inputs


def check_example_inputs(example_inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """A non-empty tuple of finite float32 tensors."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    if not example_inputs:
        raise BadModel("example inputs must be a non-empty tuple of tensors")
    for index, value in enumerate(example_inputs):
        if not isinstance(value, torch.Tensor):
            raise BadModel(f"example input {index} is a {type(value).__name__}, not a tensor: a program's inputs "
                           "are tensors; make a Python number a constant of the model, or pass it as a tensor")
    for index, x in enumerate(example_inputs):
        if not x.dtype.is_floating_point:
            raise BadModel(f"example input {index} is {x.dtype}; give the float model and float inputs, "
                           "imxrt quantizes them itself")
        if x.dtype != torch.float32:
            raise BadModel(f"example input {index} is {x.dtype}; imxrt quantizes float32 models: pass "
                           "float32 inputs (x.float()) and a float32 model (model.float())")
        found = non_finite(x)
        if found:  # they calibrate when no calibration data is given, and trace forward()
            raise BadModel(f"example input {index} holds {found}; give finite example inputs")
    return example_inputs


def export(model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...], training: bool = False
           ) -> ExportedProgram:
    """Capture the model with ``torch.export`` (``training``: in training mode, for QAT); a model it cannot
    capture, or one with dynamic shapes, is a ``BadModel`` naming the cause."""
    model = model.train() if training else model.eval()
    try:
        exported = _export_without_partial_graph(model, example_inputs)
    except SystemExit as e:  # not an Exception: it would end imxrt silently, with the user's status
        raise BadModel(f"model(...) {called_exit(e)} while torch.export ran forward() on the example inputs; "
                       "forward() must return its outputs, not exit the process") from None
    except Exception as e:  # torch.export raises many types; the first line names the cause
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BadModel(f"torch.export could not capture the model ({type(e).__name__}: {first}); "
                       "remove data-dependent control flow or shapes from forward()") from e
    for node in exported.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and any(not isinstance(d, int) for d in value.shape):
            raise BadModel("dynamic shapes are not supported: the NPU and the memory plan need static "
                           f"shapes (symbolic shape {tuple(value.shape)})", node=node.name)
    return exported


def _export_without_partial_graph(model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...]
                                  ) -> ExportedProgram:
    """``torch.export.export``, without the graph it prints to stderr before raising on data-dependent control
    flow (``partial_fx_graph``: some twenty lines, twice, before the one line that names the problem; the
    exception still carries it). Whatever else is written to stderr meanwhile (the model's own prints) is
    passed on after."""
    written = StringIO()
    graph = None
    try:
        with redirect_stderr(written):
            return torch.export.export(model, example_inputs, strict=False)
    except BaseException as e:
        graph = getattr(e, "partial_fx_graph", None)
        raise
    finally:
        text = written.getvalue()
        sys.stderr.write(text.replace(f"{graph}\n", "") if graph is not None else text)


def export_for_qat(model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...]) -> ExportedProgram:
    """``export`` in training mode of a copy of ``model``: the exported program shares its parameters with the
    module it traced, and QAT trains them, so the user's float model (their reference for accuracy) stays as it
    was, weights and mode."""
    try:
        model = copy.deepcopy(model)
    except Exception as e:  # a module holding an uncopyable object (a file, a lock)
        raise BadModel(f"QAT trains a copy of the model, and copy.deepcopy(model) failed ({type(e).__name__}: "
                       f"{e}); keep objects that cannot be copied out of the module") from e
    return export(model, example_inputs, training=True)


def _has_npu(target: Target | None) -> bool:
    return target is None or target.npu is not None  # None: the i.MX RT700, as ImxrtQuantizer reads it


def quantize(
    exported: ExportedProgram,
    example_inputs: tuple[torch.Tensor, ...],
    calibration: Iterable[Sequence[torch.Tensor]] | None,
    options: CompileOptions,
    target: Target | None = None,
) -> ExportedProgram:
    """Graph passes, then pt2e int8 PTQ with ``ImxrtQuantizer`` (the target's rules; default: the
    i.MX RT700's); returns the re-exported int8 program."""
    graph_module = run_aten_passes(exported.module(check_guards=False), npu=_has_npu(target))
    prepared = prepare_pt2e(graph_module, ImxrtQuantizer(target))
    if calibration is None:
        log.warning("no calibration data given: calibrating on the example inputs alone; pass "
                    "calibration_inputs() for representative activation ranges")
        calibration = [example_inputs]
    if options.calibration_samples is not None:
        calibration = itertools.islice(calibration, options.calibration_samples)
    calibrate(prepared, calibration, total=options.calibration_samples, show_progress=options.show_progress)
    return convert_and_export(prepared, example_inputs)


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
    lowered._etrecord = edge._etrecord  # a new manager: carry the record on, as ExecuTorch's own stages do
    return lowered


def _delegate_to_npu(edge: EdgeProgramManager, edge_program: Callable[[], EdgeProgramManager], target: Target,
                     options: CompileOptions, placement_log: PlacementLog) -> EdgeProgramManager:
    """``to_backend`` with the NPU partitioner. A node the capability table accepts but the LiteRT lowering
    refuses (a reduction with a dtype, an operand that is no int8 tensor) stays on the CPU with the lowering's
    reason, and partitioning runs again on a fresh edge program (``to_backend`` edits the one it is given):
    a model never fails to compile because one node cannot be expressed for the NPU."""
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
            log.info("%s; keeping %s on the CPU", e, ", ".join(names))
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


def check_stock_kernels(program: ExecutorchProgramManager) -> None:
    """Every operator the program calls is one the stock runtime has a kernel for (the host runtime's
    allowlist): a program the board cannot load is refused here, not written."""
    from imxrt.runtime import allowlist
    from imxrt.runtime.ops import OWN_OPERATORS, qualified_name

    known = allowlist.allowed_operators() | OWN_OPERATORS
    missing = sorted({qualified_name(op) for plan in program.executorch_program.execution_plan
                      for op in plan.operators} - known)
    if missing:
        raise BadModel(f"the program would call {', '.join(missing)} on the CPU, which the stock ExecuTorch "
                       "runtime has no kernel for (an op left in float that imxrt cannot express with the portable "
                       "kernels); please report it with the model")


def serialize(edge: EdgeProgramManager, memory_planner: ImxrtMemoryPlanner | None = None) -> bytes:
    """The ``.pte`` bytes of ``to_executorch``, sealed (``integrity.seal``)."""
    return integrity.seal(bytes(to_executorch(edge, memory_planner).buffer))


def to_executorch(edge: EdgeProgramManager, memory_planner: ImxrtMemoryPlanner | None = None
                  ) -> ExecutorchProgramManager:
    """Memory planning (ExecuTorch's pass with our placement, ``memory.planning``) and flatbuffer
    serialization with ExecuTorch's own ``to_executorch``; a program calling an operator the stock runtime
    lacks is refused (``check_stock_kernels``)."""
    # The out variants of quantize/dequantize (the model-I/O conversions on the CPU) are registered with
    # torch by this import; to_executorch needs them to emit the kernel calls.
    import executorch.kernels.quantized  # noqa: F401
    # to_executorch's passes retrace the graph and name nodes afresh; the report (cost model, profiling)
    # knows them by their edge names, kept here in the metadata the passes carry over.
    for name in edge.methods:
        for node in edge.exported_program(name).graph.nodes:
            node.meta.setdefault(EDGE_NAME, node.name)
    planning = memory_planning_pass(memory_planner or ImxrtMemoryPlanner())
    with cortex_m_ops.own_fakes():  # the retrace must lay the cortex_m results out as the lowering did
        program = edge.to_executorch(ExecutorchBackendConfig(extract_delegate_segments=True,
                                                             memory_planning_pass=planning))
    check_stock_kernels(program)
    return program
