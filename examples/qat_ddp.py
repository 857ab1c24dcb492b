"""QAT in your own training loop, on one process or several with PyTorch's DDP.

The float CNN of ``digits.py`` (scikit-learn's handwritten digits) is prepared with ``imxrt.prepare_qat``,
fine-tuned by an ordinary PyTorch loop (wrapped in ``DistributedDataParallel`` when launched by torchrun,
each rank training on its own shard of every batch), and compiled once, on rank 0, with ``imxrt.compile_qat``:

    python examples/qat_ddp.py                                 # one process
    torchrun --nproc_per_node 2 examples/qat_ddp.py            # two processes (gloo on CPU, nccl on GPUs)

Both runs see the same batches in the same order: a global batch of 32 is split across the ranks, and DDP
averages their gradients, so one process and two give the same training up to float rounding. The observers
of the prepared module reduce their statistics over all ranks at each training forward, so DDP's default
``broadcast_buffers=True`` is fine. Prints the float and int8 top-1 on the 449 held-out images (the int8
program run bit-exactly on the host runtime) and, with ``-o``, writes the compiled program.

This file is a program to run, not a SOURCE for ``imxrt compile`` (that is ``digits.py``).
"""

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import digits  # noqa: E402

import imxrt  # noqa: E402
from imxrt.runtime import load  # noqa: E402

GLOBAL_BATCH = 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2, help="QAT epochs over the training split")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--target", default="imxrt700")
    parser.add_argument("-o", "--output", help="write the compiled program into this folder (rank 0)")
    args = parser.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1  # set by torchrun
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', 0)}" if torch.cuda.is_available() else "cpu")
    if GLOBAL_BATCH % world:
        sys.exit(f"the global batch of {GLOBAL_BATCH} does not split over {world} processes")

    model, example_inputs = digits.model(), digits.example_inputs()  # the same float model on every rank
    prepared = imxrt.prepare_qat(model, example_inputs, target=args.target).to(device)
    trained = DistributedDataParallel(prepared) if distributed else prepared
    optimizer = torch.optim.Adam(trained.parameters(), lr=args.lr)
    images, labels, _, _ = digits._split()
    order = torch.Generator().manual_seed(digits.SEED)  # one permutation per epoch, the same on every rank
    start = time.perf_counter()
    for _ in range(args.epochs):
        for batch in torch.randperm(len(labels), generator=order).split(GLOBAL_BATCH):
            mine = batch[rank::world]  # this rank's shard of the global batch
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(trained(images[mine].to(device)), labels[mine].to(device))
            loss.backward()
            optimizer.step()
    seconds = time.perf_counter() - start

    if rank == 0:
        result = imxrt.compile_qat(trained, example_inputs, target=args.target)
        if args.output:
            result.save(args.output)
        report = imxrt.evaluate(model, load(result.pte), digits.evaluation_data(), example_inputs,
                                show_progress=False)
        print(f"QAT on {world} process(es), {args.epochs} epoch(s) in {seconds:.1f} s; "
              f"{result.report['summary']['partitions']} NPU partition(s)")
        print(f"top-1 on {report.samples} held-out images: float {report.float_score:.2%}, "
              f"int8 {report.int8_score:.2%} ({(report.int8_score - report.float_score) * 100:+.2f} points)")
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
