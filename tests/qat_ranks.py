"""One rank of the distributed QAT test (tests/test_qat.py launches two with torchrun).

Each rank trains the same prepared module wrapped in DDP (gloo, loopback only, DDP's defaults: its
``broadcast_buffers`` stays on) on its own shard: rank r's inputs lie in [-1, 1] on rank 0 and [-4, 4] on
rank 1. Every rank writes its observers' statistics; rank 0 then compiles the program into the output
folder, as a user would.

    torchrun --standalone --nproc_per_node 2 tests/qat_ranks.py OUTPUT_FOLDER

A rank that fails makes torchrun stop the other; a rank left waiting on a collective fails after
COLLECTIVE_TIMEOUT (which covers rank 0's compile) instead of hanging. A rank leaves with ``os._exit`` once
its outputs are written: tearing the gloo group down (``destroy_process_group`` or the group's destructor at
interpreter exit) joins gloo's run-loop thread while holding the GIL that thread is waiting for, a deadlock
seen on a loaded machine after both ranks had finished their work.
"""

import json
import os
import sys
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import imxrt
from imxrt.pipeline import CompileOptions
from imxrt.quantization.observers import QatMovingAverageMinMaxObserver

SHAPE = (1, 2, 6, 6)
STEPS, BATCH = 4, 16
RANGES = (1.0, 4.0)  # rank r's inputs lie in [-RANGES[r], RANGES[r]]
COLLECTIVE_TIMEOUT = timedelta(minutes=5)


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16, 4)).eval()


def shard(rank: int, count: int) -> torch.Tensor:
    """Inputs spanning exactly [-r, r] in every batch: uniform values with the two ends set."""
    bound = RANGES[rank]
    values = (torch.rand((count, *SHAPE[1:]), generator=torch.Generator().manual_seed(rank)) * 2 - 1) * bound
    values[:, 0, 0, 0], values[:, 0, 0, 1] = -bound, bound
    return values


def statistics(prepared: nn.Module) -> dict[str, list[float]]:
    """Each QAT activation observer's [min, max], by module name."""
    return {name: [float(m.min_val), float(m.max_val)] for name, m in prepared.named_modules()
            if isinstance(m, QatMovingAverageMinMaxObserver)}


def main(output: Path) -> None:
    dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)
    rank = dist.get_rank()
    prepared = imxrt.prepare_qat(model(), (torch.zeros(SHAPE),), target="imxrt700")
    trained = DistributedDataParallel(prepared)
    optimizer = torch.optim.SGD(trained.parameters(), lr=1e-3)
    data = shard(rank, STEPS * BATCH)
    for batch in data.split(BATCH):
        optimizer.zero_grad()
        trained(batch).square().mean().backward()
        optimizer.step()
    (output / f"rank{rank}.json").write_text(json.dumps(statistics(prepared)))
    if rank == 0:
        result = imxrt.compile_qat(trained, (torch.zeros(SHAPE),), "imxrt700", CompileOptions(show_progress=False))
        result.save(output / "program")
    dist.barrier()


if __name__ == "__main__":
    try:
        main(Path(sys.argv[1]))
        code = 0
    except BaseException:  # noqa: BLE001  (printed, then the rank's exit code says it failed)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
