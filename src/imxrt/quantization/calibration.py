"""Calibration: run the observed model over the user's input tuples, with a progress bar."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from tqdm import tqdm

from imxrt.errors import BadModel
from imxrt.model_checks import check_finite_sample, read_samples


def calibrate(
    observed: torch.fx.GraphModule,
    samples: Iterable[Sequence[torch.Tensor]],
    total: int | None = None,
    show_progress: bool = True,
) -> int:
    """Feed every sample (a tuple of input tensors) through ``observed``; return how many were used.

    A sample holding NaN or Inf is refused: the observers skip non-finite values (the model's own), so they
    would silently calibrate on the rest of it."""
    count = 0
    with torch.no_grad():
        for index, sample in tqdm(read_samples(samples, "calibration"), total=total, desc="calibrating",
                                  unit="sample", disable=not show_progress, leave=False):
            sample = tuple(sample) if isinstance(sample, (list, tuple)) else (sample,)
            check_finite_sample(f"calibration sample {index}", sample)
            try:
                observed(*sample)
            except Exception as e:  # a user's calibration tuple that does not fit the model
                raise BadModel(f"calibration sample {index} could not be run: {e}") from e
            count = index + 1
    if count == 0:
        raise BadModel("the calibration data is empty; give at least one input tuple")
    return count
