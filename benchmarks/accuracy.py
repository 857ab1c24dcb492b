"""Accuracy on real data: float vs int8 top-1 on the held-out split of scikit-learn's handwritten digits.

Two tasks on the same fixed 75/25 split of `examples/digits.py` (fixed seed, 449 held-out images):
- cnn: the small CNN of `examples/digits.py` on the 8x8 images;
- sequence: each image read row by row, an 8-step sequence of 8 pixels (`[1, 8, 8]`), for a GRU, an LSTM and
  a one-layer transformer (hand-written matmul attention, LayerNorm, GELU MLP), trained here in seconds.
Rows:
- float: the trained model;
- imxrt PTQ / QAT: the `.pte` compiled for the target, run on the host runtime (bit-exact with the device),
  with where its ops run (NPU partitions, compute ops left in float on the CPU);
- XNNPACK PTQ / QAT: ExecuTorch's upstream `XNNPACKQuantizer` (`get_symmetric_quantization_config`,
  per-channel weights) on the same model with the same calibration samples and the same QAT fine-tuning,
  as its fake-quantized converted model (what its int8 kernels compute, up to rounding): the baseline, with
  how many of its compute ops its quantizer made int8.
QAT (cnn task) fine-tunes the prepared model for `--qat-epochs` on the training split at a low learning rate.

    python benchmarks/accuracy.py [--task cnn|sequence|all] [--target imxrt700] [--qat-epochs 1]
"""

from __future__ import annotations

import argparse
import copy
import operator
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)
from torch import nn
from torchao.quantization.pt2e import move_exported_model_to_eval, move_exported_model_to_train
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

import imxrt
from imxrt.accuracy import AccuracyReport, evaluate
from imxrt.pipeline import CompileOptions
from imxrt.runtime import load

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))
import digits  # noqa: E402
from _sequence_models import EncoderBlock, RecurrentClassifier  # noqa: E402

QAT_LR = 1e-4
ROWS, PIXELS = digits.INPUT_SHAPE[2], digits.INPUT_SHAPE[3]  # the sequence task: 8 steps of 8 features
CLASSES = 10


def fine_tune(epochs: int):
    return lambda module: digits.train(module, epochs=epochs, lr=QAT_LR)


def xnnpack(model: nn.Module, example_inputs, calibration, train: Callable | None = None) -> nn.Module:
    """The upstream baseline: XNNPACK's symmetric int8 config, PTQ (calibrated) or, with ``train``, QAT."""
    qat = train is not None
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_qat=qat))
    model = model.train() if qat else model.eval()
    exported = torch.export.export(model, tuple(example_inputs), strict=False).module(check_guards=False)
    if qat:
        prepared = prepare_qat_pt2e(exported, quantizer)
        move_exported_model_to_train(prepared)
        train(prepared)
        move_exported_model_to_eval(prepared)
    else:
        prepared = prepare_pt2e(exported, quantizer)
        with torch.no_grad():
            for sample in calibration:
                prepared(*sample)
    return convert_pt2e(prepared)


class _Fake:
    """A fake-quantized module, run like a runtime program (numpy outputs)."""

    def __init__(self, module):
        self.module = module

    def forward(self, *inputs):
        with torch.no_grad():
            return [self.module(*inputs).numpy()]


def _placement(result) -> str:
    summary = result.report["summary"]
    return f"{summary['partitions']} NPU partition(s), {summary['ops_cpu_float']} float CPU op(s)"


def _xnnpack_placement(converted: torch.fx.GraphModule) -> str:
    """How much of the model XNNPACK's quantizer made int8: the compute ops it annotated (their annotation stays
    in the converted graph's node meta); the rest, an `aten.gru` it has no rule for, say, stay float."""
    compute = [node for node in converted.graph.nodes if node.op == "call_function"
               and "quantize_per_" not in str(node.target) and node.target is not operator.getitem]
    annotated = [node for node in compute if "quantization_annotation" in node.meta]
    return f"{len(annotated)} of {len(compute)} compute op(s) int8"


def _print_table(title: str, float_score: float, rows: list[tuple[str, AccuracyReport, float, str]]) -> None:
    print(f"\n{title}")
    print(f"{'model':24s} {'top-1':>7s} {'vs float':>9s} {'agree':>7s} {'SQNR dB':>8s} {'seconds':>8s}  placement")
    print(f"{'float':24s} {float_score:7.2%}")
    for name, report, seconds, placement in rows:
        print(f"{name:24s} {report.int8_score:7.2%} {(report.int8_score - float_score) * 100:+8.2f}p "
              f"{report.agreement:7.2%} {report.output_sqnr_db[0]:8.1f} {seconds:8.1f}  {placement}")
    sys.stdout.flush()


def cnn_task(target: str, qat_epochs: int) -> None:
    start = time.perf_counter()
    model = digits.model()
    print(f"trained the digits CNN in {time.perf_counter() - start:.1f} s")
    data, inputs, calibration = digits.evaluation_data(), digits.example_inputs(), digits.calibration_inputs()
    options = CompileOptions(show_progress=False)
    rows = []
    for name, compile_kwargs in (("imxrt PTQ", {"calibration": calibration}),
                                 ("imxrt QAT", {"qat": fine_tune(qat_epochs)})):
        start = time.perf_counter()
        result = imxrt.compile(digits.model() if "QAT" in name else model, inputs, target,
                               options=options, **compile_kwargs)
        report = evaluate(model, load(result.pte), data, inputs, show_progress=False)
        rows.append((name, report, time.perf_counter() - start, _placement(result)))
    for name, train in (("XNNPACK PTQ", None), ("XNNPACK QAT", fine_tune(qat_epochs))):
        start = time.perf_counter()
        converted = xnnpack(digits.model(), inputs, calibration, train)
        report = evaluate(model, _Fake(converted), data, inputs, show_progress=False)
        rows.append((name, report, time.perf_counter() - start, _xnnpack_placement(converted)))
    _print_table(f"cnn: digits held-out split, {rows[0][1].samples} images, target {target}, "
                 f"QAT {qat_epochs} epoch(s)", rows[0][1].float_score, rows)


# ----------------------------------------------------------------------------------------------------
# The sequence task: digits rows as time steps
# ----------------------------------------------------------------------------------------------------


class DigitsTransformer(nn.Module):
    """One pre-norm encoder layer over the 8 rows: a linear row embedding plus a learned position embedding,
    `_sequence_models.EncoderBlock` (hand-written matmul attention, LayerNorm, GELU MLP), LayerNorm, mean
    over rows, linear head."""

    def __init__(self, dim: int = 32, heads: int = 2):
        super().__init__()
        self.embedding = nn.Linear(PIXELS, dim)
        self.position = nn.Parameter(torch.randn(1, ROWS, dim) * 0.02)
        self.block = EncoderBlock(dim, heads, attention="matmul")
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, x):
        return self.head(self.norm(self.block(self.embedding(x) + self.position)).mean(1))


class _RowsAsSequence(nn.Module):
    """Gives a sequence model digits' `[N, 1, 8, 8]` training images as `[N, 8, 8]` rows, so `digits.train`
    (the same split, batches and seed as the CNN's) trains it."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images):
        return self.model(images.squeeze(1))


# name -> (builder, epochs, learning rate): each trains in a few seconds to over 90% held-out top-1
SEQUENCE_MODELS: dict[str, tuple[Callable[[], nn.Module], int, float]] = {
    "GRU": (lambda: RecurrentClassifier("gru", features=PIXELS, hidden=32, classes=CLASSES), 20, 1e-2),
    "LSTM": (lambda: RecurrentClassifier("lstm", features=PIXELS, hidden=32, classes=CLASSES), 30, 1e-2),
    "transformer": (DigitsTransformer, 20, 3e-3),
}


def train_sequence_model(name: str) -> nn.Module:
    builder, epochs, lr = SEQUENCE_MODELS[name]
    threads = torch.get_num_threads()
    # One thread, as in main(): the weights (a thread count changes reduction order) are the same whoever
    # calls this, a test included.
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):  # seed without touching the caller's random state
            torch.manual_seed(digits.SEED)
            model = builder().train()
            digits.train(_RowsAsSequence(model), epochs=epochs, lr=lr)
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def _as_rows(sample: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """One digits input tuple, `[1, 1, 8, 8]`, as the sequence models take it: `[1, 8, 8]`."""
    return tuple(x.squeeze(1) for x in sample)


def sequence_task(target: str) -> None:
    data = [(_as_rows(sample), label) for sample, label in digits.evaluation_data()]
    inputs = _as_rows(digits.example_inputs())
    calibration = [_as_rows(sample) for sample in digits.calibration_inputs()]
    options = CompileOptions(show_progress=False)
    for name in SEQUENCE_MODELS:
        start = time.perf_counter()
        model = train_sequence_model(name)
        print(f"trained the digits-rows {name} in {time.perf_counter() - start:.1f} s")
        rows = []
        start = time.perf_counter()
        try:
            result = imxrt.compile(model, inputs, target, calibration=calibration, options=options)
            report = evaluate(model, load(result.pte), data, inputs, show_progress=False)
            rows.append((f"{name} imxrt PTQ", report, time.perf_counter() - start, _placement(result)))
        except Exception as exc:  # a model the compiler refuses is a line in the table, not the end of the run
            print(f"{name} imxrt PTQ failed after {time.perf_counter() - start:.1f} s: "
                  f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        start = time.perf_counter()
        converted = xnnpack(copy.deepcopy(model), inputs, calibration)
        report = evaluate(model, _Fake(converted), data, inputs, show_progress=False)
        rows.append((f"{name} XNNPACK PTQ", report, time.perf_counter() - start, _xnnpack_placement(converted)))
        _print_table(f"sequence: {name} on digits rows ({ROWS} steps x {PIXELS} pixels), {report.samples} "
                     f"held-out images, target {target}", report.float_score, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=("cnn", "sequence", "all"), default="all")
    parser.add_argument("--target", default="imxrt700")
    parser.add_argument("--qat-epochs", type=int, default=1)
    args = parser.parse_args()
    # Batch-1 inference and 32-sample training batches are per-op overhead: a second intra-op thread only
    # waits for a busy core (on a loaded 2-core machine the sequence task took 8x longer, one row 60x). One
    # thread also makes the trained weights, hence every figure, the same on any core count.
    torch.set_num_threads(1)
    if args.task in ("cnn", "all"):
        cnn_task(args.target, args.qat_epochs)
    if args.task in ("sequence", "all"):
        sequence_task(args.target)


if __name__ == "__main__":
    main()
