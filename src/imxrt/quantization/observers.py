"""The observers of imxrt's activation specs: min/max over the finite values, and in QAT a moving average
whose statistics are one reduction over every rank of a distributed run.

QAT under ``torch.distributed`` (DDP over gloo or nccl): each rank sees its own shard, but the program is
compiled once, from one rank's observers. DDP's ``broadcast_buffers`` (on by default) copies rank 0's buffers
to every rank at each forward, so the other ranks' statistics were silently overwritten: a range seen only
on rank 1 never reached the program. The QAT observer instead takes each batch's min and max over all ranks
(one ``all_reduce``) before its moving average, so every rank holds the same statistics after every
training forward, and the broadcast, when on, copies equal values. Like BatchNorm's running statistics, they
move in training mode only: an evaluation forward on one rank (``prepared.eval()``) neither changes them nor
waits for the other ranks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torchao.quantization.pt2e import MinMaxObserver, MovingAverageMinMaxObserver


class _FiniteValues:
    """An observer that sees only the finite values: an int8 tensor holds no NaN or infinity, and one NaN
    (``log`` or ``sqrt`` of a negative calibration value) made the whole range NaN and calibration fail."""

    def forward(self, x_orig):
        if not isinstance(x_orig, torch.Tensor) or x_orig.numel() == 0:
            return x_orig
        if x_orig.is_floating_point() and bool(torch.isfinite(torch.stack(torch.aminmax(x_orig.detach()))).all()):
            return super().forward(x_orig)  # a NaN or an infinity shows in the min or the max: one pass, not five
        finite = torch.isfinite(x_orig.detach())
        if bool(finite.all()):
            return super().forward(x_orig)
        if bool(finite.any()):
            super().forward(x_orig.detach()[finite])
        return x_orig


class FiniteMinMaxObserver(_FiniteValues, MinMaxObserver):
    """MinMaxObserver over the finite values (PTQ calibration)."""


def on_observed(observer: torch.nn.Module, record: Callable[[torch.Tensor], None]):
    """Call ``record`` with each tensor ``observer`` sees while calibration runs; returns the hook's handle.
    Only ``observer`` itself records: a deep copy of the model keeps its original's hooks, and calibration's
    float64 trial of a copy would otherwise record too."""

    def hook(module: torch.nn.Module, args: tuple, output) -> None:
        if module is observer and args and isinstance(args[0], torch.Tensor):
            record(args[0])

    return observer.register_forward_hook(hook)


def _reduce_over_ranks(low: torch.Tensor, high: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The least ``low`` and greatest ``high`` over the ranks of the default process group (as they are
    outside a distributed run): one MAX reduction of (-low, high)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return low, high
    both = torch.stack([-low, high])
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    return -both[0], both[1]


class QatMovingAverageMinMaxObserver(MovingAverageMinMaxObserver):
    """MovingAverageMinMaxObserver over the finite values of a batch of every rank, in training mode only."""

    def forward(self, x_orig):
        if not self.training or not isinstance(x_orig, torch.Tensor):
            return x_orig
        x = x_orig.detach().to(self.min_val.dtype)
        x = x[torch.isfinite(x)]
        if x.numel():
            low, high = torch.aminmax(x)
        else:  # still take part in the reduction: the other ranks wait for it
            low = torch.tensor(float("inf"), device=x.device)
            high = torch.tensor(float("-inf"), device=x.device)
        low, high = _reduce_over_ranks(low, high)
        if not bool(torch.isfinite(low)):
            return x_orig  # no rank saw a finite value
        if self.min_val == float("inf") and self.max_val == float("-inf"):
            self.min_val.copy_(low)
            self.max_val.copy_(high)
        else:
            self.min_val.copy_(self.min_val + self.averaging_constant * (low - self.min_val))
            self.max_val.copy_(self.max_val + self.averaging_constant * (high - self.max_val))
        return x_orig
