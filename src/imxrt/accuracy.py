"""Accuracy report: the float model against the compiled int8 program on the user's labelled data.

Top-1 (or a user metric) for both, how often their top-1 agree, the SQNR of each model output, and
(best effort) the SQNR of each layer's int8 activation, from the fake-quantized program, so a user sees
where precision is lost.

With ``workers`` > 1 the host runtime runs in that many processes; the float model, the metric and the layer
SQNR stay in this process and take the program's outputs in sample order, so every sum runs in the same
order and the report is the one a single process gives.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import io
import logging
import math
import multiprocessing
import numbers
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.export import ExportedProgram
from tqdm import tqdm

from imxrt.errors import BadInput, BadModel, BadOption, ImxrtError
from imxrt.model_checks import called_exit, read_samples
from imxrt.passes._graph import constant_value
from imxrt.quantization.rules import DATA_MOVEMENT
from imxrt.report.names import module_paths

Metric = Callable[[torch.Tensor, object], float]  # (first model output, label) -> score of one sample


@dataclass
class AccuracyReport:
    samples: int
    metric: str
    float_score: float
    int8_score: float
    agreement: float  # fraction of samples whose float and int8 top-1 class agree
    output_sqnr_db: list[float]  # per model output, int8 program vs float model
    layer_sqnr_db: dict[str, float] = field(default_factory=dict)  # module path -> int8 activation SQNR
    layers: list[LayerLoss] = field(default_factory=list)  # worst own SQNR first (``_LayerSqnr.ranking``)

    def as_dict(self) -> dict:
        """The ``accuracy`` entry of report.json (SQNR as null where the int8 output equals the float one)."""
        return {"samples": self.samples, "metric": self.metric, "float": self.float_score, "int8": self.int8_score,
                "agreement": self.agreement, "output_sqnr_db": [_finite(v) for v in self.output_sqnr_db],
                "layer_sqnr_db": {k: _finite(v) for k, v in self.layer_sqnr_db.items()},
                "layers": [layer.as_dict() for layer in self.layers]}

    @property
    def advice(self) -> list[dict]:
        """The worst layer by its own SQNR with the remedy its figures point to (``report.advice.layer_advice``;
        the CLI puts it first in ``report.json`` ``advice``)."""
        from imxrt.report.advice import layer_advice

        return layer_advice(self.as_dict())

    def lines(self) -> list[str]:
        text = [f"accuracy ({self.samples} samples, {self.metric}): float {self.float_score:.2%}, "
                f"int8 {self.int8_score:.2%} ({(self.int8_score - self.float_score) * 100:+.2f} points), "
                f"top-1 agreement {self.agreement:.2%}",
                "output SQNR: " + ", ".join(f"output {i} {v:.1f} dB" for i, v in enumerate(self.output_sqnr_db))]
        if self.layer_sqnr_db:
            worst = sorted(self.layer_sqnr_db.items(), key=lambda kv: kv[1])[:3]
            text.append("lowest layer SQNR: " + ", ".join(f"{k} {v:.1f} dB" for k, v in worst))
        return text + layer_table([layer.as_dict() for layer in self.layers])


RANKED = 5  # layers the CLI lists


def layer_table(rows: list[dict], shown: int = RANKED) -> list[str]:
    """The CLI's ranked table of ``accuracy.layers`` rows: the layers that lose the most SQNR themselves."""
    if not rows:
        return []
    db = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    width = max(len(row["path"]) for row in rows[:shown])
    ops = max(len(row["op"]) for row in rows[:shown])
    lines = ["layers losing the most SQNR themselves (own: the layer alone, on the float value of its input; "
             "input: the layer on the int8 value of its input; dB):",
             f"  {'layer':{width}}  {'op':{ops}} {'SQNR':>6} {'own':>6} {'output':>6} {'weights':>7} {'input':>6}  "
             "output scale, range"]
    for row in rows[:shown]:
        low, high = row["range"]
        lines.append(f"  {row['path']:{width}}  {row['op']:{ops}} {db(row['sqnr_db']):>6} {db(row['own_sqnr_db']):>6} "
                     f"{db(row['output_sqnr_db']):>6} {db(row['weight_sqnr_db']):>7} "
                     f"{db(row.get('input_sqnr_db')):>6}  {row['scale']:.4g}, [{low:.4g}, {high:.4g}]")
    return lines


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None  # JSON has no infinity


@dataclass
class LayerLoss:
    """One layer's figures: its cumulative SQNR (``sqnr_db``, None where the float model has no tensor to
    compare with) and what it loses itself (``own_sqnr_db``), which combines the rounding of its output on the
    float value of its input (``output_sqnr_db``, saturation included) and of its int8 weights
    (``weight_sqnr_db``), as noise powers add. ``scale`` and ``range`` are its output's quantization; ``p9999``
    the 99.99th percentile of its float output's magnitude over the evaluation data, ``saturated`` the share
    of those values outside the range; ``weight_levels`` the int8 levels its weights' narrowest output channel
    uses (its largest magnitude, of 127). For a conv / linear layer reading an int8 activation,
    ``input_sqnr_db``: its output on the int8 value of its input against it on the float value (``input_
    rounding_db`` the input's own rounding; ``reads_model_input`` whether that input is a model input). For a
    convolution, ``channel_levels``: the int8 steps a quarter of its live output channels span less than
    (``CHANNEL_QUANTILE``), ``channel_spread`` the widest channel's range over that one's."""

    path: str
    op: str
    sqnr_db: float | None
    own_sqnr_db: float
    output_sqnr_db: float
    weight_sqnr_db: float | None
    scale: float
    range: tuple[float, float]
    p9999: float
    saturated: float
    weight_levels: int | None
    input_sqnr_db: float | None = None
    input_rounding_db: float | None = None
    reads_model_input: bool = False
    channel_levels: float | None = None
    channel_spread: float | None = None

    def as_dict(self) -> dict:
        return {"path": self.path, "op": self.op, "sqnr_db": _finite(self.sqnr_db),
                "own_sqnr_db": _finite(self.own_sqnr_db), "output_sqnr_db": _finite(self.output_sqnr_db),
                "weight_sqnr_db": _finite(self.weight_sqnr_db), "scale": self.scale, "range": list(self.range),
                "p9999": self.p9999, "saturated": self.saturated, "weight_levels": self.weight_levels,
                "input_sqnr_db": _finite(self.input_sqnr_db), "input_rounding_db": _finite(self.input_rounding_db),
                "reads_model_input": self.reads_model_input, "channel_levels": self.channel_levels,
                "channel_spread": self.channel_spread}


class _Sqnr:
    """Signal and noise energy summed over every sample: SQNR of the whole evaluation set."""

    def __init__(self):
        self.signal = 0.0
        self.noise = 0.0

    def add(self, reference: torch.Tensor, approximate: torch.Tensor) -> None:
        reference = reference.detach().double()
        self.signal += float(reference.square().sum())
        self.noise += float((reference - approximate.detach().double()).square().sum())

    @property
    def db(self) -> float:
        if self.noise == 0.0:
            return math.inf
        return 10 * math.log10(max(self.signal, 1e-30) / self.noise)


def top1(output: torch.Tensor, label) -> float:
    return float(int(output.reshape(-1).argmax()) == int(label))


def evaluate(model: torch.nn.Module, program, data: Iterable[tuple[Sequence[torch.Tensor], object]],
             example_inputs: Sequence[torch.Tensor], metric: Metric | None = None,
             quantized: ExportedProgram | None = None, workers: int = 1, show_progress: bool = True) -> AccuracyReport:
    """Run ``model`` (float) and ``program`` (an ``imxrt.runtime`` program) on every ``(inputs, label)`` of
    ``data``; with ``quantized`` (``CompileResult.quantized``), also each layer's SQNR.

    Inputs must have the example inputs' shapes; for top-1, a label is a class index below the model's
    output size. This process evaluates on one torch and one BLAS thread. ``workers`` > 1 runs ``program``
    (then an ``imxrt.runtime.Program``) in that many processes, each loading its ``.pte`` once; the report is
    the same as with one. A worker takes seconds to start (importing torch and ExecuTorch): worth it when the
    evaluation takes a minute or more."""
    workers = _checked_workers(workers, program)
    model = model.eval()
    shapes = [tuple(x.shape) for x in example_inputs]
    layers = _LayerSqnr(model, quantized) if quantized is not None else None
    float_total = int8_total = agree = 0.0
    outputs_sqnr: list[_Sqnr] = []
    count = 0
    samples = _checked_samples(data, shapes)
    runs = _run_here(program, layers, samples) if workers == 1 else _run_in_workers(program, layers, samples,
                                                                                     workers)
    with contextlib.closing(runs), _one_thread():  # closing: on any error the worker processes end too
        for index, inputs, label, run_program in tqdm(runs, total=_length(data), desc="evaluating", unit="sample",
                                                      disable=not show_progress, leave=False):
            with torch.no_grad():
                try:
                    output, floats, folded, unrounded = layers.float_forward(inputs) if layers else (
                        model(*inputs), {}, set(), {})
                except SystemExit as e:  # not an Exception: it would end imxrt silently, with the user's status
                    raise BadModel(f"model(...) {called_exit(e)} while evaluating on evaluation sample {index}; "
                                   "forward() must return its outputs, not exit the process") from None
            reference = _as_list(output)
            outputs, rounded = run_program()
            actual = [torch.as_tensor(np.asarray(a)).to(torch.float32) for a in outputs]
            if metric is None:
                _check_label(index, label, reference[0])
            score = metric or top1
            float_total += score(reference[0], label)
            int8_total += score(actual[0], label)
            agree += float(int(reference[0].reshape(-1).argmax()) == int(actual[0].reshape(-1).argmax()))
            if not outputs_sqnr:
                outputs_sqnr = [_Sqnr() for _ in reference]
            for sqnr, ref, act in zip(outputs_sqnr, reference, actual, strict=True):
                sqnr.add(ref, act.reshape(ref.shape))
            if layers is not None:
                layers.add(floats, folded, rounded, unrounded)
            count += 1
    if count == 0:
        raise BadInput("the evaluation data is empty; give at least one (inputs, label) pair")
    return AccuracyReport(samples=count, metric=getattr(metric, "__name__", "metric") if metric else "top-1",
                          float_score=float_total / count, int8_score=int8_total / count, agreement=agree / count,
                          output_sqnr_db=[s.db for s in outputs_sqnr],
                          layer_sqnr_db=layers.result() if layers is not None else {},
                          layers=layers.ranking() if layers is not None else [])


@contextlib.contextmanager
def _one_thread():
    """torch and BLAS on one thread in this process while it evaluates, as in the workers. Batch-1 inference
    is per-op overhead: a second thread only waits for a busy core. On two cores torch's two threads beside
    the host runtime's two BLAS threads made one process 2-4x slower, and beside two workers the workers
    gained nothing. One thread also makes the float figures the same on every machine and with any number
    of workers (a float sum's rounding depends on the thread count)."""
    from imxrt.runtime.threads import one_thread  # the hold each program run takes too

    hold = one_thread()
    threads = hold.enter()
    try:
        yield
    finally:
        hold.leave(threads)


def _checked_workers(workers, program) -> int:
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1:
        raise BadOption("workers", workers, "a whole number of processes, 1 or more")
    if workers > 1:
        from imxrt.runtime import Program

        if not isinstance(program, Program) or not program.file.data:
            raise BadOption("workers", workers, f"1 for a program that imxrt.runtime.load did not load (got "
                                                f"{type(program).__name__}): the worker processes load its .pte bytes")
    return int(workers)


def _length(data) -> int | None:
    """How many samples ``data`` holds, for the progress bar, when it says."""
    if not isinstance(data, Sized):
        return None
    try:
        return len(data)
    except TypeError:  # a torch DataLoader over an IterableDataset has __len__ but no length
        return None


Sample = tuple[int, tuple[torch.Tensor, ...], object]  # index, inputs, label


def _checked_samples(data: Iterable, shapes: list[tuple[int, ...]]) -> Iterator[Sample]:
    for index, sample in read_samples(data, "evaluation"):
        yield index, *_checked_sample(index, sample, shapes)


Run = Callable[[], tuple[list[np.ndarray], dict[str, torch.Tensor] | None]]  # the program's outputs, layers'


def _run_here(program, layers: _LayerSqnr | None, samples: Iterator[Sample]) -> Iterator[tuple[int, tuple, object,
                                                                                              Run]]:
    """Each sample with a call that runs ``program`` on it in this process (and the fake-quantized program,
    for the layers' int8 values)."""
    def run(inputs):
        return program.forward(*inputs), layers.capture(inputs) if layers is not None else None

    for index, inputs, label in samples:
        yield index, inputs, label, functools.partial(run, inputs)


# A worker runs a chunk of samples per task: one queue round trip per chunk, not per sample. Chunks in flight
# per worker: enough that a worker never waits for this process, few enough that a generator of samples is
# read only a bounded window ahead.
_CHUNK = 16
_CHUNKS_IN_FLIGHT = 3


def _run_in_workers(program, layers: _LayerSqnr | None, samples: Iterator[Sample],
                    workers: int) -> Iterator[tuple[int, tuple, object, Run]]:
    """Each sample with a call that returns the outputs a worker process computed for it, in sample order
    (with ``layers``, the worker also runs the fake-quantized program, the per-sample cost that otherwise
    stayed in this process).

    Reading ``data`` runs ahead of the evaluation; an error reading or checking a sample is raised when the
    evaluation reaches that sample, after the samples before it (whose own errors come first, as in one
    process). The workers are shut down when this generator is closed or fails."""
    executor = ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"),  # forking a process that runs torch is unsafe
        initializer=_start_worker, initargs=(program.file.data, program.name, program.check_plan, _LogSettings.here(),
                                             layers.saved() if layers is not None else None))
    pending: collections.deque = collections.deque()  # (chunk of samples, future of its results), in order
    ended, failure = False, None
    try:
        while True:
            while not ended and len(pending) < workers * _CHUNKS_IN_FLIGHT:
                chunk, ended, failure = _next_chunk(samples)
                if chunk:
                    inputs = [tuple(x.detach().numpy() for x in sample[1]) for sample in chunk]
                    pending.append((chunk, executor.submit(_run_chunk, inputs)))
            if not pending:
                break
            chunk, future = pending.popleft()
            results = future.result()
            for (index, inputs, label), ran in zip(chunk[:len(results)], results, strict=True):
                yield index, inputs, label, functools.partial(_replay, ran, layers)
        if failure is not None:
            raise failure
    except BrokenProcessPool as e:  # from a result or a submit, whichever comes first
        raise ImxrtError(f"an evaluation worker process ended abruptly ({e}): out of memory, killed, or a script "
                         "that calls evaluate(workers=...) outside `if __name__ == \"__main__\":`; use fewer "
                         "workers, or guard the script") from e
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def _next_chunk(samples: Iterator[Sample]) -> tuple[list[Sample], bool, Exception | None]:
    """Up to ``_CHUNK`` samples; whether the data ended; the error that ended it, if one did."""
    chunk: list[Sample] = []
    try:
        for sample in samples:
            chunk.append(sample)
            if len(chunk) == _CHUNK:
                return chunk, False, None
    except Exception as e:  # raised by the evaluation once it reaches this sample
        return chunk, True, e
    return chunk, True, None


@dataclass
class _Ran:
    """What running the program on one sample in a worker gave: its outputs or the error, and its log records."""

    outputs: list[np.ndarray] | None
    error: ImxrtError | None
    records: list[logging.LogRecord]
    layers: list[np.ndarray] | None = None  # the int8 tensor of each layer output ``_Capture`` takes


def _replay(ran: _Ran, layers: _LayerSqnr | None) -> tuple[list[np.ndarray], dict[str, torch.Tensor] | None]:
    """The worker's outputs, its warnings (NaN inputs, ...) logged here as one process would, or its error."""
    for record in ran.records:
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno):
            logger.handle(record)
    if ran.error is not None:
        raise ran.error
    return ran.outputs, layers.capture_program.dequantize(ran.layers) if layers is not None else None


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None  # the arguments need not pickle
        record.exc_info = record.exc_text = None
        self.records.append(record)


@dataclass(frozen=True)
class _LogSettings:
    """This process's logger levels and warning filters, for the workers: the third-party noise it silences
    (torchao, ExecuTorch, deprecations) stays silent there too."""

    levels: dict[str, int]
    warning_filters: list

    @staticmethod
    def here() -> _LogSettings:
        loggers = logging.Logger.manager.loggerDict.items()
        levels = {name: logger.level for name, logger in loggers if isinstance(logger, logging.Logger) and logger.level}
        return _LogSettings({"": logging.getLogger().level, **levels}, list(warnings.filters))

    def apply(self) -> None:
        for name, level in self.levels.items():
            logging.getLogger(name or None).setLevel(level)
        warnings.resetwarnings()
        for action, message, category, module, lineno in reversed(self.warning_filters):
            warnings.filterwarnings(action, _pattern(message), category, _pattern(module), lineno)


def _pattern(text) -> str:
    """A warning filter's message or module: a compiled pattern, a string, or None for any."""
    return getattr(text, "pattern", text) or ""


@dataclass
class _Worker:
    pte: bytes
    name: str
    check_plan: bool
    log: _Records
    layers: tuple[bytes, frozenset[str]] | None  # the fake-quantized program (torch.export.save) and its nodes
    program: object = None  # imxrt.runtime.Program, loaded by the first chunk: its errors come back with it
    quantized: _Capture | None = None


_worker: _Worker | None = None  # a worker process's program: a pool initializer has no other place to keep it


def _start_worker(pte: bytes, name: str, check_plan: bool, settings: _LogSettings,
                  layers: tuple[bytes, frozenset[str]] | None) -> None:
    global _worker
    settings.apply()  # before importing the runtime, whose imports log
    log = _Records()  # what a run logs here is logged again in the evaluating process
    logging.getLogger().addHandler(log)
    # One thread of each, as the evaluating process (_one_thread), for the worker's life: two workers with
    # OpenBLAS's two threads each ran 15x slower on two cores. Each program run holds them at one anyway; this
    # covers the fake-quantized program too, and leaves the runs nothing to switch.
    from imxrt.runtime.threads import one_thread

    one_thread().enter()
    _worker = _Worker(pte, name, check_plan, log, layers)


def _run_chunk(chunk: list[tuple[np.ndarray, ...]]) -> list[_Ran]:
    """Run the worker's program on each sample of ``chunk``, up to the first that fails."""
    if _worker.program is None:
        from imxrt.runtime import load

        _worker.program = load(_worker.pte, check_plan=_worker.check_plan, name=_worker.name)
        if _worker.layers is not None:
            _worker.quantized = _LayerSqnr.load(_worker.layers)
        _worker.log.records = []  # the imports' and the load's: the evaluating process has logged them once
    results = []
    for inputs in chunk:
        try:
            outputs, error = _worker.program.forward(*inputs), None
        except ImxrtError as e:
            outputs, error = None, e
        layers = None
        if error is None and _worker.quantized is not None:
            tensors = [torch.from_numpy(x) for x in inputs]
            layers = _worker.quantized.int8(tensors)
        results.append(_Ran(outputs, error, _worker.log.records, layers))
        _worker.log.records = []
        if error is not None:
            break
    return results


def _as_list(output) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    return [o for o in output if isinstance(o, torch.Tensor)]


def _checked_sample(index: int, sample, shapes: list[tuple[int, ...]]) -> tuple[tuple[torch.Tensor, ...], object]:
    if not isinstance(sample, (tuple, list)) or len(sample) != 2:
        raise BadInput(f"evaluation sample {index} is not an (inputs, label) pair")
    inputs, label = sample
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    got = [tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__ for x in inputs]
    if got != shapes:
        raise BadInput(f"evaluation sample {index}: inputs of shape {got}, the model takes {shapes} (the example "
                       "inputs' shapes, batch included)")
    # float data as float32 (the model's dtype); indices and masks as they are
    return tuple(x.to(torch.float32) if x.is_floating_point() else x for x in inputs), label


def _check_label(index: int, label, output: torch.Tensor) -> None:
    classes = output.numel()
    try:
        value = int(label)
    except (TypeError, ValueError):
        value = None
    if value is None or value != label or not 0 <= value < classes:
        raise BadInput(f"evaluation sample {index}: label {label!r} is not a class index in [0, {classes}) "
                       "(top-1 needs one integer label per sample; pass metric= for other labels)")


def _leaves_module(quantize: torch.fx.Node, path: str) -> bool:
    """Whether the value ``quantize`` rounds is read outside the module ``path``: it is that module's output,
    not a value inside it (a transformer layer's attention scores are not the layer's output)."""
    readers = [user for dq in quantize.users for user in dq.users] + list(quantize.users)
    return any(r.op == "output" or (r.op == "call_function" and "dequantize" not in str(r.target)
                                    and path not in module_paths(r)) for r in readers)


def _unit_free(shape) -> tuple[int, ...]:
    """A shape without its 1s: a Conv1d's value is [N, C, 1, L] inside, as its conv2d computes it."""
    return tuple(size for size in shape if size != 1)


def _layer_of(quantize: torch.fx.Node, graph_module: torch.fx.GraphModule) -> tuple[str | None, bool]:
    """The module whose output ``quantize`` rounds (None where the value is inside one, or of none), and
    whether an activation outside that module came first: ``F.relu(self.conv(x))`` in the parent's forward
    fuses the ReLU into the conv's rounding, so the value is the conv layer's, though its module returned it
    before the ReLU."""
    value = quantize.args[0]
    if not isinstance(value, torch.fx.Node):
        return None, False
    paths = module_paths(value)
    if paths and _leaves_module(quantize, paths[-1]):
        return paths[-1], False
    if value.target in DATA_MOVEMENT:  # a part or reshape of a layer's output is not that layer's output
        return None, False
    weights = _cluster_weights(quantize, graph_module)
    inner = module_paths(weights[0][0]) if weights else []
    if inner and inner[-1] not in paths and _leaves_module(quantize, inner[-1]):
        return inner[-1], True
    return None, False


class _LayerSqnr:
    """SQNR of each module's int8 output, the activation the fake-quantized program rounds where the value
    leaves the module, against the float model's output of the same module (matched by module path; a
    module whose output a folded batch norm rewrites is skipped: the float model has no tensor to compare
    with).

    That SQNR is cumulative: a deep layer inherits every earlier layer's noise. What a layer loses itself
    (``ranking``) is measured on the fake-quantized program with every activation rounding taken out (its
    float path: each activation's dequantize(quantize(x)) read as x; weights stay int8), which gives each
    layer the float value of its input: its own output rounding is that value rounded with its output's
    qparams, saturation included; its own weight rounding is int8 rounding noise (step^2 / 12 per weight)
    against its int8 weights' energy, per output channel, averaged over channels (each channel makes its
    own outputs). Both are exact or analytic, and cost one float run of the program per sample."""

    def __init__(self, model: torch.nn.Module, quantized: ExportedProgram):
        self.model = model
        self.quantized = quantized
        graph_module = quantized.module(check_guards=False)
        self.producers: dict[str, str] = {}  # quantize node name -> module path whose output it rounds
        self.activated: set[str] = set()  # modules whose output is rounded after an activation outside them
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and "quantize_per_tensor" in str(node.target) and \
                    "dequantize" not in str(node.target):
                path, outside = _layer_of(node, graph_module)
                if path is not None:
                    self.producers[node.name] = path
                    if outside:
                        self.activated.add(path)
        self.paths = set(self.producers.values())
        self.capture_program = _Capture(graph_module, self.producers)
        self.sqnr: dict[str, _Sqnr] = {}
        by_name = {node.name: node for node in graph_module.graph.nodes}
        self.own: dict[str, _OwnLoss] = {}  # module path -> what it loses itself
        for name, path in self.producers.items():
            if path not in self.own:  # a module called twice: the first call's qparams
                self.own[path] = _OwnLoss(by_name[name], graph_module)
        self.weighted = {own.weighted: path for path, own in self.own.items() if own.weighted is not None}
        self.float_path = _FloatPath(graph_module, self.producers, self.weighted)

    def float_forward(self, inputs: tuple[torch.Tensor, ...]) -> tuple[object, dict[str, torch.Tensor], set[str],
                                                                      dict[str, torch.Tensor | tuple]]:
        """The float model's output, each module's output by path, the modules a folded batch norm rewrites
        (one forward, with hooks), and the value each captured quantize node rounds on the program's float
        path."""
        floats: dict[str, torch.Tensor] = {}
        folded: set[str] = set()
        by_id: dict[int, str] = {}
        handles = []
        for name, module in self.model.named_modules():
            # Only the modules compared and the batch norms that may rewrite them: a hook takes a module off
            # torch's fast call path, and hooks on all of them made this forward 5x the model's own.
            if not name or (name not in self.paths and not isinstance(module, torch.nn.modules.batchnorm._BatchNorm)):
                continue

            def hook(module, args, output, name=name):
                if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and args and id(args[0]) in by_id:
                    folded.add(by_id[id(args[0])])
                if isinstance(output, torch.Tensor):
                    floats[name] = output
                    by_id[id(output)] = name
            handles.append(module.register_forward_hook(hook))
        try:
            with torch.no_grad():
                output = self.model(*inputs)
        finally:
            for handle in handles:
                handle.remove()
        return output, floats, folded | self.activated, self.float_path(inputs)

    def capture(self, inputs: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
        """The value each layer's int8 output stands for, from the fake-quantized program."""
        return self.capture_program.dequantize(self.capture_program.int8(inputs))

    def saved(self) -> tuple[bytes, frozenset[str]]:
        """The fake-quantized program as ``torch.export.save`` writes it, and the nodes to capture: what a
        worker process needs to ``capture`` (the names survive the round trip)."""
        buffer = io.BytesIO()
        torch.export.save(self.quantized, buffer)
        return buffer.getvalue(), frozenset(self.producers)

    @staticmethod
    def load(saved: tuple[bytes, frozenset[str]]) -> _Capture:
        """``capture`` in a worker process, from what ``saved`` gave."""
        import torchao.quantization.pt2e  # noqa: F401  (registers the quantized_decomposed ops it calls)

        program, names = saved
        return _Capture(torch.export.load(io.BytesIO(program)).module(check_guards=False), names)

    def add(self, floats: dict[str, torch.Tensor], folded: set[str], rounded: dict[str, torch.Tensor],
            unrounded: dict[str, torch.Tensor]) -> None:
        for node_name, value in unrounded.items():
            if node_name in self.producers:
                self.own[self.producers[node_name]].add(value)
            else:  # a weighted op on the float and on the int8 value of its input (``_FloatPath``)
                self.own[self.weighted[node_name]].add_input(*value)
        for node_name, value in rounded.items():
            path = self.producers[node_name]
            reference = floats.get(path)
            if path in folded or reference is None or _unit_free(reference.shape) != _unit_free(value.shape):
                continue
            self.sqnr.setdefault(path, _Sqnr()).add(reference, value.reshape(reference.shape))

    def result(self) -> dict[str, float]:
        return {path: sqnr.db for path, sqnr in self.sqnr.items()}

    def ranking(self) -> list[LayerLoss]:
        """Every layer, the one that loses the most SQNR itself first (ties by path)."""
        cumulative = self.result()
        layers = [own.loss(path, cumulative.get(path)) for path, own in self.own.items() if own.values]
        return sorted(layers, key=lambda layer: (layer.own_sqnr_db, layer.path))


CHANNEL_QUANTILE = 0.25  # the channel whose range ``channel_levels`` reports: a quarter of the channels span less
_BINS = 4096  # |x| histogram over [0, _SPAN x the range's half width): the 99.99th percentile to 1/1024
_SPAN = 4.0


class _OwnLoss:
    """What one layer loses itself, summed over the evaluation data (see ``_LayerSqnr``)."""

    def __init__(self, quantize: torch.fx.Node, graph_module: torch.fx.GraphModule):
        self.scale, self.zero_point = float(quantize.args[1]), int(quantize.args[2])
        self.qmin, self.qmax = int(quantize.args[3]), int(quantize.args[4])
        self.range = ((self.qmin - self.zero_point) * self.scale, (self.qmax - self.zero_point) * self.scale)
        self.half = max(abs(self.range[0]), abs(self.range[1]))
        weights = _cluster_weights(quantize, graph_module)
        self.op, self.weight_nsr, self.weight_levels = _weight_rounding(quantize, weights)
        self.rounding = _Sqnr()
        # The weighted op's output on the int8 value of its input against it on the float value: what the
        # input's rounding costs through the weights (``input``), and that rounding itself (``input_rounding``).
        reads = _activation_input(weights[0][0]) if weights else None
        self.weighted = weights[0][0].name if reads is not None else None
        self.reads_model_input = reads is not None and _from_model_input(reads)
        self.input, self.input_rounding = _Sqnr(), _Sqnr()
        # a convolution's output per channel (axis 1): the range each channel's values span
        self.channels: tuple[torch.Tensor, torch.Tensor] | None = None
        self.histogram = np.zeros(_BINS + 1, dtype=np.int64)  # the last bin: at or beyond _SPAN half widths
        self.outside = 0
        self.values = 0

    def add(self, value: torch.Tensor) -> None:
        value = value.detach().double()
        rounded = (torch.clamp(torch.round(value / self.scale) + self.zero_point, self.qmin, self.qmax)
                   - self.zero_point) * self.scale
        self.rounding.add(value, rounded)
        magnitude = value.abs().numpy().reshape(-1) / self.half
        self.histogram += np.bincount(np.minimum((magnitude * (_BINS / _SPAN)).astype(np.int64), _BINS),
                                      minlength=_BINS + 1)
        self.outside += int(((value < self.range[0]) | (value > self.range[1])).sum())
        self.values += value.numel()
        if self.op.startswith("conv") and value.dim() >= 3:
            per_channel = value.movedim(1, 0).reshape(value.shape[1], -1)
            low, high = per_channel.amin(dim=1), per_channel.amax(dim=1)
            self.channels = (low, high) if self.channels is None else (torch.minimum(self.channels[0], low),
                                                                        torch.maximum(self.channels[1], high))

    def channel_levels(self) -> tuple[float | None, float | None]:
        """The int8 steps the range of its quarter-narrowest live output channel spans (a quarter of its
        channels span fewer), and the widest channel's range over that one's (None for a layer other than a
        convolution, or one with no channel that varies)."""
        if self.channels is None:
            return None, None
        spans = (self.channels[1] - self.channels[0]).clamp(min=0)
        live = spans[spans > 0]
        if live.numel() == 0:
            return None, None
        quarter = float(torch.quantile(live, CHANNEL_QUANTILE))
        return round(quarter / self.scale, 1), round(float(live.max()) / quarter, 1)

    def add_input(self, output: torch.Tensor, from_int8: torch.Tensor, value: torch.Tensor,
                  rounded: torch.Tensor) -> None:
        self.input.add(output, from_int8)
        self.input_rounding.add(value, rounded)

    def loss(self, path: str, cumulative: float | None) -> LayerLoss:
        output_nsr = 10 ** (-self.rounding.db / 10) if math.isfinite(self.rounding.db) else 0.0
        own_nsr = output_nsr + (self.weight_nsr or 0.0)
        levels, spread = self.channel_levels()
        bin_of = int(np.searchsorted(np.cumsum(self.histogram), 0.9999 * self.values))
        return LayerLoss(
            path=path, op=self.op, sqnr_db=cumulative,
            own_sqnr_db=-10 * math.log10(own_nsr) if own_nsr > 0 else math.inf,
            output_sqnr_db=self.rounding.db,
            weight_sqnr_db=None if self.weight_nsr is None else (
                -10 * math.log10(self.weight_nsr) if self.weight_nsr > 0 else math.inf),
            scale=self.scale, range=self.range, p9999=float(f"{(bin_of + 1) * _SPAN / _BINS * self.half:.4g}"),
            saturated=self.outside / max(self.values, 1), weight_levels=self.weight_levels,
            input_sqnr_db=self.input.db if self.weighted is not None else None,
            input_rounding_db=self.input_rounding.db if self.weighted is not None else None,
            reads_model_input=self.reads_model_input, channel_levels=levels, channel_spread=spread)


def _is_qdq(node: torch.fx.Node, name: str) -> bool:
    return node.op == "call_function" and str(node.target).startswith(f"quantized_decomposed.{name}")


def _cluster_weights(quantize: torch.fx.Node, graph_module: torch.fx.GraphModule
                     ) -> list[tuple[torch.fx.Node, torch.fx.Node, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(op, dequantize, int8 weight, scales, zero points) of each int8 constant the ops that compute
    ``quantize``'s input read (back to the dequantizes of their activations); through a reshape of a layer's
    output at its scale (a Conv1d's squeeze after its conv2d), that layer's."""
    value = quantize.args[0]
    if isinstance(value, torch.fx.Node) and value.op == "call_function" and value.target in DATA_MOVEMENT \
            and isinstance(value.args[0], torch.fx.Node) and _is_qdq(value.args[0], "dequantize"):
        moved = value.args[0].args[0]
        if _is_qdq(moved, "quantize_per_tensor") and tuple(moved.args[1:3]) == tuple(quantize.args[1:3]):
            return _cluster_weights(moved, graph_module)
    found, stack, seen = [], [value], set()
    while stack:
        node = stack.pop()
        if not isinstance(node, torch.fx.Node) or node in seen or node.op != "call_function":
            continue
        seen.add(node)
        for arg in node.all_input_nodes:
            if _is_qdq(arg, "dequantize") and arg.args[0].op == "get_attr" and arg.args[-1] == torch.int8:
                weight = constant_value(graph_module, arg.args[0])
                per_channel = isinstance(arg.args[1], torch.fx.Node)  # its scales and zero points are constants
                scales, zero_points = (constant_value(graph_module, arg.args[i]) if per_channel
                                       else torch.tensor([arg.args[i]]) for i in (1, 2))
                found.append((node, arg, weight, scales, zero_points))
            elif not _is_qdq(arg, "dequantize"):
                stack.append(arg)
    return found


def _activation_input(op: torch.fx.Node) -> torch.fx.Node | None:
    """The dequantize of the int8 activation a conv / linear ``op`` reads, or None."""
    value = op.args[0] if op.args else None
    if isinstance(value, torch.fx.Node) and _is_qdq(value, "dequantize") and \
            isinstance(value.args[0], torch.fx.Node) and _is_qdq(value.args[0], "quantize_per_tensor"):
        return value
    return None


def _from_model_input(dequantize: torch.fx.Node) -> bool:
    """Whether the int8 value ``dequantize`` gives is a model input, moved (padded, reshaped) but not computed:
    its rounding is the input's."""
    value = dequantize.args[0].args[0]
    while isinstance(value, torch.fx.Node) and value.op == "call_function" and value.target in DATA_MOVEMENT:
        source = value.args[0]
        if not (isinstance(source, torch.fx.Node) and _is_qdq(source, "dequantize")):
            return False
        value = source.args[0].args[0]
    return isinstance(value, torch.fx.Node) and value.op == "placeholder"


def _weight_rounding(quantize: torch.fx.Node, weights: list) -> tuple[str, float | None, int | None]:
    """The op that names the layer (the one with int8 weights, else the one ``quantize`` rounds), its
    weights' rounding noise over their energy (int8 rounding, step^2 / 12 per weight, against the mean square
    of each output channel's int8 values, averaged over channels; None without weights) and the int8 levels
    its narrowest non-zero channel uses."""
    if not weights:
        return str(getattr(quantize.args[0].target, "__name__", quantize.args[0].target)).split(".")[0], None, None
    ratios, levels = [], []
    op = weights[0][0]
    for _, dequantize, weight, _, zero_points in weights:
        if weight.dim() < 2:
            continue
        axis = int(dequantize.args[3]) if isinstance(dequantize.args[1], torch.fx.Node) else 0
        centred = weight.to(torch.float64).movedim(axis, 0).reshape(weight.shape[axis], -1)
        centred = centred - zero_points.to(torch.float64).reshape(-1, 1)
        energy = centred.square().mean(dim=1)
        # A per-channel weight's zero row was zero in float (its scale would have resolved it); a per-tensor
        # weight's is a channel rounded away, all noise. No channel's noise is counted above its signal.
        per_channel = isinstance(dequantize.args[1], torch.fx.Node)
        kept = energy > 0 if per_channel else torch.ones_like(energy, dtype=torch.bool)
        ratios += torch.clamp(1 / (12 * energy[kept]), max=1.0).tolist()
        levels += centred[kept].abs().amax(dim=1).tolist()
    if not ratios:
        return op.target.__name__.split(".")[0], None, None
    return op.target.__name__.split(".")[0], float(np.mean(ratios)), int(min(levels))


def _flat_copy(graph_module: torch.fx.GraphModule) -> torch.fx.Graph:
    """A copy of the program's graph to cut, called with flat inputs and outputs (no pytree wrapping)."""
    graph = copy.deepcopy(graph_module.graph)
    graph._codegen = torch.fx.graph.CodeGen()
    return graph


def _returning(graph_module: torch.fx.GraphModule, graph: torch.fx.Graph, values: list[torch.fx.Node]
               ) -> torch.fx.GraphModule:
    """``graph`` (a ``_flat_copy``) cut to return ``values``, in order, with ``graph_module``'s constants."""
    graph.output_node().args = (tuple(values),)
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(graph_module, graph)


class _FloatPath:
    """The fake-quantized program with its activations unrounded (each activation's dequantize(quantize(x))
    read as x, int8 weights kept), returning the value each quantize node in ``names`` would round: each
    layer's output computed from the float value of its input. For each conv / linear op in ``weighted``, also
    (its output, its output on the int8 value of its input, that input's float value, its int8 value)."""

    def __init__(self, graph_module: torch.fx.GraphModule, names: Iterable[str], weighted: Iterable[str] = ()):
        graph = _flat_copy(graph_module)
        weighted = set(weighted)
        ops = {node.name: node for node in graph.nodes if node.name in weighted}
        int8_inputs = {name: op.args[0] for name, op in ops.items()}  # their dequantizes, before the rewrite
        for node in list(graph.nodes):
            if _is_qdq(node, "dequantize") and isinstance(node.args[0], torch.fx.Node) and \
                    _is_qdq(node.args[0], "quantize_per_tensor"):
                node.replace_all_uses_with(node.args[0].args[0])
        wanted = set(names)
        captured = [node for node in graph.nodes if node.name in wanted]
        self.names = [node.name for node in captured]
        self.weighted = list(ops)
        values = [node.args[0] for node in captured]
        for name, op in ops.items():
            with graph.inserting_after(op):
                from_int8 = graph.call_function(op.target, (int8_inputs[name], *op.args[1:]), op.kwargs)
            values += [op, from_int8, op.args[0], int8_inputs[name]]
        self.module = _returning(graph_module, graph, values)

    def __call__(self, inputs) -> dict[str, torch.Tensor | tuple[torch.Tensor, ...]]:
        with torch.no_grad():
            values = list(self.module(*inputs))
        count = len(self.names)
        found: dict = dict(zip(self.names, values[:count], strict=True))
        for index, name in enumerate(self.weighted):
            found[name] = tuple(values[count + 4 * index: count + 4 * index + 4])
        return found


class _Capture:
    """The fake-quantized program cut to return the int8 tensor of each quantize node in ``names`` (``int8``);
    ``dequantize`` gives what each stands for. A graph call (no pytree wrapping), not an ``fx.Interpreter``,
    whose per-node Python made it twice as slow."""

    def __init__(self, graph_module: torch.fx.GraphModule, names: Iterable[str]):
        graph = _flat_copy(graph_module)
        wanted = set(names)
        captured = [node for node in graph.nodes if node.name in wanted]
        self.module = _returning(graph_module, graph, captured)
        self.qparams = [(node.name, node.args[1], node.args[2]) for node in captured]

    def int8(self, inputs) -> list[np.ndarray]:
        """Each captured node's int8 tensor: what a worker sends back, a quarter of the float values' bytes."""
        with torch.no_grad():
            return [value.numpy() for value in self.module(*inputs)]

    def dequantize(self, values: list[np.ndarray]) -> dict[str, torch.Tensor]:
        return {name: (torch.from_numpy(value).to(torch.float32) - zero_point) * scale
                for (name, scale, zero_point), value in zip(self.qparams, values, strict=True)}
