"""Calibration: run the observed model over the user's input tuples, with a progress bar.

The observed model runs in float64 and its observers' ranges are rounded to float32 at the end. In float32
the activations (and so the ranges, the scales and every artifact) moved by a float step with the thread
count or SIMD level (OMP_NUM_THREADS=1, ATEN_CPU_CAPABILITY=default): a float32 sum's rounding depends on
its order. In float64 that noise lies far below float32's resolution, so the rounded ranges are the same on
every machine. A model that cannot run in float64 (an op with a float32 constant it cannot mix) calibrates
in float32, as before.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Sequence

import torch
from tqdm import tqdm

from imxrt.errors import BadModel
from imxrt.model_checks import check_finite_sample, read_samples

log = logging.getLogger("imxrt")


def calibrate(
    observed: torch.fx.GraphModule,
    samples: Iterable[Sequence[torch.Tensor]],
    total: int | None = None,
    show_progress: bool = True,
) -> int:
    """Feed every sample (a tuple of input tensors) through ``observed``; return how many were used.

    A sample holding NaN or Inf is refused: the observers skip non-finite values (the model's own), so they
    would silently calibrate on the rest of it."""
    count, wide = 0, False
    try:
        with torch.no_grad():
            for index, sample in tqdm(read_samples(samples, "calibration"), total=total, desc="calibrating",
                                      unit="sample", disable=not show_progress, leave=False):
                sample = tuple(sample) if isinstance(sample, (list, tuple)) else (sample,)
                check_finite_sample(f"calibration sample {index}", sample)
                if index == 0 and _runs_in_float64(observed, sample):
                    wide = True
                    observed.to(torch.float64)
                try:
                    observed(*(_widened(sample) if wide else sample))
                except Exception as e:  # a user's calibration tuple that does not fit the model
                    raise BadModel(f"calibration sample {index} could not be run: {e}") from e
                count = index + 1
    finally:
        if wide:
            observed.to(torch.float32)  # the ranges rounded to float32: what the quantized model computes with
    if count == 0:
        raise BadModel("the calibration data is empty; give at least one input tuple")
    return count


def _widened(sample: Sequence[object]) -> tuple:
    return tuple(x.to(torch.float64) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x
                 for x in sample)


def _runs_in_float64(observed: torch.fx.GraphModule, sample: Sequence[object]) -> bool:
    """Whether a float64 copy of the observed model runs the first sample (the copy's observers are thrown
    away with it)."""
    tensors = [*observed.parameters(), *observed.buffers()]
    if any(t.is_floating_point() and t.dtype != torch.float32 for t in tensors):
        return False  # a float64 or half model: widening and narrowing back would change its weights
    try:
        copy.deepcopy(observed).to(torch.float64)(*_widened(sample))
    except Exception as e:  # noqa: BLE001  (any failure means: calibrate in float32)
        log.info("calibrating in float32: the model does not run in float64 (%s)", e)
        return False
    return True
