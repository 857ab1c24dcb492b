"""Accuracy on real data: float vs int8 top-1 on the held-out split of scikit-learn's handwritten digits.

`examples/digits.py` trains a small CNN (fixed seed, fixed 75/25 split, 449 held-out images). Rows:
- float: the trained model;
- imxrt PTQ / QAT: the `.pte` compiled for the target, run on the host runtime (bit-exact with the device);
- XNNPACK PTQ / QAT: ExecuTorch's upstream `XNNPACKQuantizer` (`get_symmetric_quantization_config`,
  per-channel weights) on the same model with the same calibration samples and the same QAT fine-tuning,
  as its fake-quantized converted model (what its int8 kernels compute, up to rounding): the baseline.
QAT fine-tunes the prepared model for `--qat-epochs` on the training split at a low learning rate.

    python benchmarks/accuracy.py [--target imxrt700] [--qat-epochs 1]
"""

import argparse
import sys
import time
from pathlib import Path

import torch
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)
from torchao.quantization.pt2e import move_exported_model_to_eval, move_exported_model_to_train
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

import imxrt
from imxrt.accuracy import evaluate
from imxrt.pipeline import CompileOptions
from imxrt.runtime import load

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import digits  # noqa: E402

QAT_LR = 1e-4


def fine_tune(epochs: int):
    return lambda module: digits.train(module, epochs=epochs, lr=QAT_LR)


def xnnpack(model: torch.nn.Module, qat_epochs: int | None) -> torch.nn.Module:
    """The upstream baseline: XNNPACK's symmetric int8 config, PTQ (calibrated) or QAT (fine-tuned)."""
    inputs = digits.example_inputs()
    qat = qat_epochs is not None
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_qat=qat))
    model = model.train() if qat else model.eval()
    exported = torch.export.export(model, inputs, strict=False).module(check_guards=False)
    if qat:
        prepared = prepare_qat_pt2e(exported, quantizer)
        move_exported_model_to_train(prepared)
        fine_tune(qat_epochs)(prepared)
        move_exported_model_to_eval(prepared)
    else:
        prepared = prepare_pt2e(exported, quantizer)
        with torch.no_grad():
            for sample in digits.calibration_inputs():
                prepared(*sample)
    return convert_pt2e(prepared)


class _Fake:
    """A fake-quantized module, run like a runtime program (numpy outputs)."""

    def __init__(self, module):
        self.module = module

    def forward(self, *inputs):
        with torch.no_grad():
            return [self.module(*inputs).numpy()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="imxrt700")
    parser.add_argument("--qat-epochs", type=int, default=1)
    args = parser.parse_args()

    start = time.perf_counter()
    model = digits.model()
    print(f"trained the float model in {time.perf_counter() - start:.1f} s")
    data, inputs = digits.evaluation_data(), digits.example_inputs()
    options = CompileOptions(show_progress=False)
    rows = []
    for name, compile_kwargs in (("imxrt PTQ", {"calibration": digits.calibration_inputs()}),
                                 ("imxrt QAT", {"qat": fine_tune(args.qat_epochs)})):
        start = time.perf_counter()
        result = imxrt.compile(digits.model() if "QAT" in name else model, inputs, args.target,
                               options=options, **compile_kwargs)
        report = evaluate(model, load(result.pte), data, inputs)
        rows.append((name, report, time.perf_counter() - start))
    for name, epochs in (("XNNPACK PTQ", None), ("XNNPACK QAT", args.qat_epochs)):
        start = time.perf_counter()
        report = evaluate(model, _Fake(xnnpack(digits.model(), epochs)), data, inputs)
        rows.append((name, report, time.perf_counter() - start))

    float_score = rows[0][1].float_score
    print(f"digits held-out split: {rows[0][1].samples} images, target {args.target}, QAT {args.qat_epochs} epoch(s)")
    print(f"{'model':12s} {'top-1':>7s} {'vs float':>9s} {'agree':>7s} {'SQNR dB':>8s} {'seconds':>8s}")
    print(f"{'float':12s} {float_score:7.2%} {'':>9s} {'':>7s} {'':>8s} {'':>8s}")
    for name, report, seconds in rows:
        print(f"{name:12s} {report.int8_score:7.2%} {(report.int8_score - float_score) * 100:+8.2f}p "
              f"{report.agreement:7.2%} {report.output_sqnr_db[0]:8.1f} {seconds:8.1f}")


if __name__ == "__main__":
    main()
