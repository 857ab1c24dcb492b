"""Seeded random models through the whole compiler: how each ends, and the first examples of every defect.

Each case is `_random_models.build(seed)` (a small CNN of 2-7 random steps on an image input, see there), or
with `--family sequence` `_random_sequences.build(seed)` (2-6 steps on a [1, T, F] sequence: recurrent layers,
attention, layer norms, token-wise linear layers), calibrated on 6 random inputs at a random magnitude,
compiled for the target, then checked as the test suite checks a compile (`tests/program_checks.py`): every
NPU partition against TFLM (and LiteRT's reference kernels) on 2 inputs, the .pte's dim orders, and the .pte
against the quantized program. Cases run in worker
processes of `--batch` cases each, so a native crash (an abort in an oracle or a kernel) ends one case, not
the run. Outcomes:

- ok / refused (a clear `ImxrtError` for a model the compiler does not take) / skipped (the float model
  itself gives NaN or infinity);
- defects: crashed, internal error (`CompilerBug`), exception (any other), TFLM mismatch, odd dim order;
- beyond the rounding bound: the .pte differs from the quantized program by more than the test suite's
  bound at an output. Reported, not a defect: the bound is per op, and the random weights and scales
  amplify one op's rounding step into several at the output (README, "The .pte and the quantized program").

Exit status 1 when there is a defect.

    python benchmarks/random_models.py [--cases 200] [--seed 0] [--target imxrt700] [--family cnn|sequence]
                                       [--jobs 2] [--batch 25]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFECTS = ("crashed", "internal error", "exception", "TFLM mismatch", "odd dim order")
FAMILIES = {"cnn": "_random_models", "sequence": "_random_sequences"}  # the module whose build(seed) makes a case


def run_case(seed: int, target: str, family: str = "cnn") -> dict:
    """One case's outcome, in a worker."""
    import importlib

    import torch
    from program_checks import odd_dim_orders, output_differences_lsb, partition_mismatches, within_rounding_bound

    from imxrt.errors import CompilerBug, ImxrtError
    from imxrt.pipeline import CompileOptions, compile

    model, recipe = importlib.import_module(FAMILIES[family]).build(seed)
    row = {"seed": seed, "model": recipe.describe()}
    generator = torch.Generator().manual_seed(seed)
    magnitude = 10 ** random.Random(seed + 1).uniform(-2, 2)
    calibration = [(torch.randn(recipe.shape, generator=generator) * magnitude,) for _ in range(6)]
    with torch.no_grad():
        outputs = model(*calibration[0])
    if not all(bool(torch.isfinite(t).all()) for t in (outputs if isinstance(outputs, tuple) else (outputs,))):
        return row | {"outcome": "skipped"}
    try:
        result = compile(model, calibration[0], target, calibration, CompileOptions(show_progress=False))
    except CompilerBug as e:
        return row | {"outcome": "internal error", "detail": str(e)}
    except ImxrtError as e:
        return row | {"outcome": "refused", "detail": str(e)}
    except Exception as e:  # noqa: BLE001 (any other escape is the defect being counted)
        return row | {"outcome": "exception", "detail": f"{type(e).__name__}: {e}"}
    try:
        lsb = 0.0
        for inputs in calibration[:2]:
            mismatches = partition_mismatches(result, inputs)
            if mismatches:
                return row | {"outcome": "TFLM mismatch", "detail": "; ".join(mismatches)}
            lsb = max(lsb, *output_differences_lsb(result, inputs, model))
        odd = odd_dim_orders(result.pte)
        if odd:
            return row | {"outcome": "odd dim order", "detail": str(odd)}
    except Exception as e:  # noqa: BLE001
        return row | {"outcome": "exception", "detail": f"checking: {type(e).__name__}: {e}"}
    outcome = "ok" if within_rounding_bound(lsb) else "beyond the rounding bound"
    return row | {"outcome": outcome, "detail": f".pte vs quantized program {lsb:.6g} LSB"}


def worker(first: int, count: int, target: str, family: str) -> None:
    """Cases ``first`` .. ``first + count - 1``: a start line before each, so a crash names its case.
    ``IMXRT_RANDOM_MODELS_ABORT_AT`` = a seed: that case aborts the process (the tests' stand-in for an
    oracle's or a kernel's abort, to show the run records it)."""
    sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
    warnings.filterwarnings("ignore")
    abort_at = os.environ.get("IMXRT_RANDOM_MODELS_ABORT_AT")
    for seed in range(first, first + count):
        print(json.dumps({"start": seed}), flush=True)
        if abort_at is not None and seed == int(abort_at):
            os.abort()
        print(json.dumps(run_case(seed, target, family)), flush=True)


def run_batch(first: int, count: int, target: str, timeout: float, family: str = "cnn") -> list[dict]:
    """A worker process over one batch; cases after a crash or a timeout run in a fresh one."""
    rows: list[dict] = []
    while count > 0:
        process = subprocess.Popen([sys.executable, __file__, "--worker", str(first), str(count), target, family],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            out, _ = process.communicate(timeout=timeout * count)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
        started, finished = None, set()
        for line in out.splitlines():
            record = json.loads(line) if line.startswith("{") else {}
            if "start" in record:
                started = record["start"]
            elif "outcome" in record:
                rows.append(record)
                finished.add(record["seed"])
        if started is None:
            raise RuntimeError(f"a worker for cases {first}.. exited {process.returncode} before its first case")
        if started not in finished:
            rows.append({"seed": started, "outcome": "crashed", "detail": f"worker exit status {process.returncode}"})
        count -= started + 1 - first
        first = started + 1
    return rows


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0, help="the first case's seed; case i is seed + i")
    parser.add_argument("--target", default="imxrt700")
    parser.add_argument("--family", default="cnn", choices=sorted(FAMILIES), help="random CNNs or sequence models")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    parser.add_argument("--batch", type=int, default=25, help="cases per worker process")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    parser.add_argument("--examples", type=int, default=5, help="examples shown per outcome that is not ok")
    args = parser.parse_args(argv)

    start = time.monotonic()
    batches = [(first, min(args.batch, args.seed + args.cases - first))
               for first in range(args.seed, args.seed + args.cases, args.batch)]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = [row for batch in pool.map(lambda b: run_batch(*b, args.target, args.timeout, args.family), batches)
                for row in batch]
    counts = Counter(row["outcome"] for row in rows)
    print(f"random {args.family} models: seeds {args.seed}..{args.seed + args.cases - 1}, target {args.target}, "
          f"{args.jobs} workers, {time.monotonic() - start:.0f} s")
    print(", ".join(f"{outcome} {count}" for outcome, count in counts.most_common()))
    for outcome in sorted(counts):
        if outcome == "ok":
            continue
        print(f"\n{outcome}{' (defect)' if outcome in DEFECTS else ''}:")
        for row in [r for r in rows if r["outcome"] == outcome][:args.examples]:
            print(f"  seed {row['seed']}: {row.get('model', '')}\n    {row.get('detail', '')[:300]}")
    return 1 if any(counts[d] for d in DEFECTS) else 0


if __name__ == "__main__":
    sys.exit(main())
