"""Evaluation throughput: `imxrt.evaluate` with the host runtime in this process, then in worker processes.

The model is `examples/mobilenet_v2.py`'s MobileNetV2 compiled for `imxrt700-cpu`, where every op is a
Cortex-M kernel the host runtime runs. By default the bundled example's size (width 0.35, 96x96 RGB: about
2 ms a sample in the host runtime, 1 ms in the float model) over 10,000 samples; `--width 1.0 --size 224`
is an ImageNet-sized one (23 ms and 8 ms). A worker takes about 4 s of CPU to start (importing torch and
ExecuTorch), so the speed-up needs an evaluation long enough to pay for it: `examples/digits.py`, at 0.1 ms a
sample, is slower with workers. Both runs take the same seeded samples from a generator. `--layers` adds each
layer's SQNR (`quantized=`, as `imxrt compile` does): it runs in this process and costs more than the host
runtime, which bounds the speed-up. The script prints samples/s of each run, the speed-up, and checks that
the two reports are equal. The labels are arbitrary (index mod 10): the figure is throughput, not accuracy.

`--threads` sets this process's torch threads before evaluating (default: torch's own, as a user's script
has); `evaluate` runs on one thread either way, so the figures should not move with it.

    python benchmarks/evaluate.py [--samples 10000] [--workers 2] [--width 0.35] [--size 96] [--layers]
                                  [--threads N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# Only what this module needs at import: each worker process imports it again (the "spawn" start method).
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SEED = 0
CLASSES = 10


def samples(count: int, size: int):
    """``count`` seeded random images in [-1, 1) with arbitrary labels, made one at a time (a generator, as a
    data loader is)."""
    import torch

    generator = torch.Generator().manual_seed(SEED)
    for index in range(count):
        yield (torch.rand(1, 3, size, size, generator=generator) * 2 - 1,), index % CLASSES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--width", type=float, default=0.35)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--target", default="imxrt700-cpu")
    parser.add_argument("--layers", action="store_true", help="also each layer's SQNR (quantized=, as imxrt compile)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of this process (default: torch's own, as a user's script has)")
    args = parser.parse_args()

    import torch

    import imxrt
    from imxrt.accuracy import evaluate
    from imxrt.runtime import load

    sys.path.insert(0, str(EXAMPLES))
    import mobilenet_v2

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model = mobilenet_v2.build_mobilenet_v2(args.width, args.size, CLASSES)
    calibration = [inputs for inputs, _ in samples(16, args.size)]
    start = time.perf_counter()
    result = imxrt.compile(model, calibration[0], args.target, calibration, imxrt.CompileOptions(show_progress=False))
    print(f"compiled MobileNetV2 {args.width} at {args.size}x{args.size} for {args.target} in "
          f"{time.perf_counter() - start:.1f} s; {args.samples} samples, {torch.get_num_threads()} torch thread(s) "
          f"in this process{', with layer SQNR' if args.layers else ''}")
    program = load(result.pte)
    reports, rates = [], []
    for workers in (1, args.workers):
        start = time.perf_counter()
        reports.append(evaluate(model, program, samples(args.samples, args.size), calibration[0],
                                quantized=result.quantized if args.layers else None, workers=workers,
                                show_progress=False))
        seconds = time.perf_counter() - start
        rates.append(args.samples / seconds)
        print(f"workers={workers}: {seconds:6.1f} s, {rates[-1]:6.1f} samples/s")
        sys.stdout.flush()
    print(f"speed-up with {args.workers} workers: {rates[1] / rates[0]:.2f}x")
    assert reports[0].as_dict() == reports[1].as_dict(), (reports[0].as_dict(), reports[1].as_dict())
    print("the two reports are equal: " + reports[0].lines()[0])


if __name__ == "__main__":
    main()
