"""Fuzzing the loader and host runtime: how damaged and crafted `.pte` files end, per kind of damage.

Compiles a few small programs (conv/relu/linear on the NPU and on the Cortex-M, max and average pools on both,
a projected LSTM left in float with a softmax on both), makes N seeded damaged or crafted files from them, and
runs each through `imxrt.runtime.load(bytes).forward(inputs)` in a pool of worker processes under a per-trial
timeout and an address-space cap. Three runs, each a table:

- the damaged and crafted files as they are (one row per mutation, one column per outcome);
- the same mutations with the seal computed again after each one (`--reseal-trials`), as anyone can: a matching
  checksum proves nothing, so these must fail as cleanly (running with other outputs is then undetectable);
- the argument sweep (`--sweep-trials`, `_argument_sweep.py`): every operator the runtime admits, called by a
  sealed one-instruction program with arguments of the right kinds and hostile values.

Then the first examples of every defect (a sealed file running with other outputs, an exception other than
ImxrtError, a crash, a hang, the cap reached). Exit status 1 when there is a defect. `_fuzz_harness.py` holds
the mutations and the pool; `tests/test_fuzz.py` runs the same harness on fewer trials.

    python benchmarks/fuzz.py [--trials 2000] [--reseal-trials 2000] [--sweep-trials 5000] [--seed 0]
                              [--jobs N] [--timeout 20] [--cap-gib 4] [--only INDEX ...] [--reseal]
                              [--sweep] [--save-dir DIR] [--examples 5]

`--seed S --only I` makes trial I of seed S again (the same file; with `--reseal` or `--sweep`, of that run);
with `--save-dir` every defective trial's file is written there, named after its seed, index and program,
beside each program's inputs:

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

import _argument_sweep as sweep  # noqa: E402
import _fuzz_harness as harness  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000, help="damaged and crafted files")
    parser.add_argument("--reseal-trials", type=int, default=2000, help="the same, sealed again after the damage")
    parser.add_argument("--sweep-trials", type=int, default=5000, help="argument sweep programs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--timeout", type=float, default=harness.TIMEOUT_SECONDS, help="seconds per trial")
    parser.add_argument("--cap-gib", type=float, default=harness.ADDRESS_SPACE_CAP / (1 << 30),
                        help="each worker's address-space cap")
    parser.add_argument("--only", type=int, nargs="+", metavar="INDEX", help="run these trials only")
    parser.add_argument("--reseal", action="store_true", help="with --only: trials of the resealed run")
    parser.add_argument("--sweep", action="store_true", help="with --only: trials of the argument sweep")
    parser.add_argument("--save-dir", type=Path, help="write each defective trial's file here")
    parser.add_argument("--examples", type=int, default=5, help="examples shown per defect class")
    args = parser.parse_args(argv)

    start = time.monotonic()
    cap = int(args.cap_gib * (1 << 30))
    runs = {"damaged and crafted": args.trials, "resealed": args.reseal_trials, "argument sweep": args.sweep_trials}
    if args.only:
        chosen = "argument sweep" if args.sweep else "resealed" if args.reseal else "damaged and crafted"
        runs = {name: args.only if name == chosen else 0 for name in runs}
    bases = harness.compile_bases() if runs["damaged and crafted"] or runs["resealed"] else {}
    defects = 0
    with harness.WorkerPool(args.jobs, cap) as pool:
        print(f"fuzz: seed {args.seed}, {args.jobs} workers, {args.timeout:g} s per trial, cap {args.cap_gib:g} GiB")
        if bases:
            programs = ", ".join(f"{name} {hashlib.sha256(base.sealed).hexdigest()[:8]}"
                                 for name, base in bases.items())
            print(f"programs (sha256 of the sealed file): {programs}")
        for name, trials in runs.items():
            if not trials:
                continue
            indices = trials if isinstance(trials, list) else range(trials)
            print(f"\n== {name}")
            if name == "argument sweep":
                report = sweep.sweep(pool, args.seed, indices, args.timeout, args.save_dir)
                print(report.format(args.examples))
            else:
                report = harness.fuzz(pool, bases, args.seed, indices, args.timeout, args.save_dir,
                                      reseal=name == "resealed")
                print(f"{len(report.results)} trials, {report.seconds:.0f} s ({report.restarts} worker restarts)")
                print(report.format(args.examples))
            defects += len(report.defects())
            if args.only:
                for result in report.results:
                    print(f"\n#{result.trial.index}: {result.trial.description}\n  {result.outcome}: {result.detail}")
    print(f"\n{time.monotonic() - start:.0f} s in all; {defects} defect(s)")
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
