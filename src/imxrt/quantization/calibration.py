"""Calibration: run the observed model over the user's input tuples, with a progress bar."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from tqdm import tqdm

from imxrt.errors import BadModel


def calibrate(
    observed: torch.fx.GraphModule,
    samples: Iterable[Sequence[torch.Tensor]],
    total: int | None = None,
    show_progress: bool = True,
) -> int:
    """Feed every sample (a tuple of input tensors) through ``observed``; return how many were used."""
    count = 0
    with torch.no_grad():
        for sample in tqdm(samples, total=total, desc="calibrating", unit="sample", disable=not show_progress,
                           leave=False):
            sample = tuple(sample) if isinstance(sample, (list, tuple)) else (sample,)
            try:
                observed(*sample)
            except Exception as e:  # a user's calibration tuple that does not fit the model
                raise BadModel(f"calibration sample {count} could not be run: {e}") from e
            count += 1
    if count == 0:
        raise BadModel("the calibration data is empty; give at least one input tuple")
    return count
