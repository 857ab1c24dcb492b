"""Fuzzing the loader and host runtime: how damaged and crafted `.pte` files end, per kind of damage.

Compiles a few small programs (conv/relu/linear on the NPU and on the Cortex-M, max and average pools on both,
a projected LSTM left in float with a softmax on both), makes N seeded damaged or crafted files from them, and
runs each through `imxrt.runtime.load(bytes).forward(inputs)` in a pool of worker processes under a per-trial
timeout and an address-space cap. Prints one row per mutation, one column per outcome, then the first examples
of every defect (a sealed file running with other outputs, an exception other than ImxrtError, a crash, a
hang, the cap reached). Exit status 1 when there is a defect. `_fuzz_harness.py` holds the mutations and the
pool; `tests/test_fuzz.py` runs the same harness on fewer trials.

    python benchmarks/fuzz.py [--trials 2000] [--seed 0] [--jobs N] [--timeout 20] [--cap-gib 4]
                              [--only INDEX ...] [--save-dir DIR] [--examples 5]

`--seed S --only I` makes trial I of seed S again (the same file); with `--save-dir` every defective trial's
file is written there, named after its seed, index and program, beside each program's inputs:

    x = np.load("DIR/conv_npu-inputs.npz"); imxrt.runtime.load("DIR/seed0-trial7-conv_npu.pte").forward(*x.values())
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
import time
import warnings
from pathlib import Path

for _name in ("torchao", "torch.utils._pytree", "executorch"):
    logging.getLogger(_name).setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _fuzz_harness as harness  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--timeout", type=float, default=harness.TIMEOUT_SECONDS, help="seconds per trial")
    parser.add_argument("--cap-gib", type=float, default=harness.ADDRESS_SPACE_CAP / (1 << 30),
                        help="each worker's address-space cap")
    parser.add_argument("--only", type=int, nargs="+", metavar="INDEX", help="run these trials only")
    parser.add_argument("--save-dir", type=Path, help="write each defective trial's file here")
    parser.add_argument("--examples", type=int, default=5, help="examples shown per defect class")
    args = parser.parse_args(argv)

    start = time.monotonic()
    bases = harness.compile_bases()
    indices = args.only if args.only else range(args.trials)
    cap = int(args.cap_gib * (1 << 30))
    with harness.WorkerPool(args.jobs, cap) as pool:
        report = harness.fuzz(pool, bases, args.seed, indices, args.timeout, args.save_dir)
    programs = ", ".join(f"{name} {hashlib.sha256(base.sealed).hexdigest()[:8]}" for name, base in bases.items())
    print(f"fuzz: seed {args.seed}, {len(report.results)} trials, {args.jobs} workers, {args.timeout:g} s per "
          f"trial, cap {args.cap_gib:g} GiB; {time.monotonic() - start:.0f} s ({report.restarts} worker restarts)")
    print(f"programs (sha256 of the sealed file): {programs}")
    print()
    print(report.format(args.examples))
    if args.only:
        for result in report.results:
            print(f"\n#{result.trial.index} {result.trial.base} / {result.trial.mutation}: {result.trial.description}"
                  f"\n  {result.outcome}: {result.detail}")
    return 1 if report.defects() else 0


if __name__ == "__main__":
    sys.exit(main())
