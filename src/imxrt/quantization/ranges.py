"""Activation ranges chosen from the calibration data's distribution, not only its extremes.

Min/max gives a tensor the widest range calibration saw: one rare large value (a loud sample in a waveform,
an outlier channel) stretches the int8 step for every other value. ``ClippedRangeObserver`` keeps a
histogram of the finite values seen and, when the qparams are asked for, picks the range [lo, hi] (holding 0,
within min/max) that minimises the expected squared error of int8 rounding plus clipping over that
histogram: the "MSE" calibration of TensorRT and AIMET, searched exactly over the histogram's bin edges.

The histogram has a fixed number of bins over [min, max] seen so far; when a batch widens the range, the
counts move to the new bins by their centres (as torchao's HistogramObserver does), so memory and time per
batch stay constant.
"""

from __future__ import annotations

import torch

from imxrt.quantization.observers import FiniteMinMaxObserver

BINS = 2048
LEVELS = 255  # int8 steps across a range
CANDIDATES = 64  # ends tried on each side of the range: its quantiles from the median outwards


class ClippedRangeObserver(FiniteMinMaxObserver):
    """Per-tensor affine int8 observer whose range minimises expected int8 error over a histogram."""

    def __init__(self, *args, bins: int = BINS, **kwargs):
        super().__init__(*args, **kwargs)
        self.bins = bins
        self.register_buffer("histogram", torch.zeros(bins, dtype=torch.float64))
        self.register_buffer("histogram_range", torch.tensor([float("inf"), float("-inf")], dtype=torch.float64))

    def forward(self, x_orig):
        result = super().forward(x_orig)  # min/max over the finite values
        if not isinstance(x_orig, torch.Tensor) or x_orig.numel() == 0 or not bool(torch.isfinite(self.min_val)):
            return result
        x = x_orig.detach().reshape(-1).to(torch.float64)
        x = x[torch.isfinite(x)]
        if x.numel() == 0:
            return result
        low, high = float(self.min_val), float(self.max_val)
        if (low, high) != tuple(self.histogram_range.tolist()):
            self._rebin(low, high)
        if high > low:
            self.histogram += torch.histc(x, bins=self.bins, min=low, max=high)
        else:
            self.histogram[0] += x.numel()
        return result

    def _rebin(self, low: float, high: float) -> None:
        """Move the counts gathered over the old range to bins over [low, high], each by its bin's centre."""
        old_low, old_high = self.histogram_range.tolist()
        counts = self.histogram
        self.histogram = torch.zeros(self.bins, dtype=torch.float64)
        if counts.sum() > 0:
            width = (old_high - old_low) / self.bins if old_high > old_low else 0.0
            centres = old_low + (torch.arange(self.bins, dtype=torch.float64) + 0.5) * width
            if high > low:
                index = ((centres - low) / (high - low) * self.bins).floor().clamp(0, self.bins - 1).long()
            else:
                index = torch.zeros(self.bins, dtype=torch.long)
            self.histogram.index_add_(0, index, counts)
        self.histogram_range = torch.tensor([low, high], dtype=torch.float64)

    def clipped_range(self) -> tuple[float, float]:
        """The [lo, hi] (lo <= 0 <= hi) whose int8 rounding and clipping error over the histogram is least;
        min/max when the histogram does not describe the current range (a range set after calibration)."""
        low, high = float(self.min_val), float(self.max_val)
        if (low, high) != tuple(self.histogram_range.tolist()) or not high > low or self.histogram.sum() == 0:
            return low, high
        return best_range(self.histogram, low, high)

    def calculate_qparams(self):
        low, high = self.clipped_range()
        return self._calculate_qparams(torch.tensor(low, dtype=self.min_val.dtype),
                                       torch.tensor(high, dtype=self.max_val.dtype))


def best_range(histogram: torch.Tensor, low: float, high: float) -> tuple[float, float]:
    """Search the pairs of candidate ends (bin edges cutting off a share of the values on each side, from
    none to half, denser near none) for the least expected squared error: values inside are rounded (error
    step²/12 each), values outside clipped (their distance to the end, squared)."""
    bins = histogram.numel()
    width = (high - low) / bins
    centres = low + (torch.arange(bins, dtype=torch.float64) + 0.5) * width
    edges = low + torch.arange(bins + 1, dtype=torch.float64) * width
    below = torch.cat([torch.zeros(1, dtype=torch.float64), histogram.cumsum(0) / histogram.sum()])
    shares = 0.5 * torch.linspace(0.0, 1.0, CANDIDATES + 1, dtype=torch.float64) ** 4
    # the last edge with at most a share below it, and the first with at most a share above it
    lows = torch.unique(edges[torch.searchsorted(below, shares, right=True) - 1]).clamp(max=0.0).unique()
    highs = torch.unique(edges[torch.searchsorted(below, 1.0 - shares).clamp(max=bins)]).clamp(min=0.0).unique()
    best, best_error = (low, high), float("inf")
    for lo in lows.tolist():
        hi = highs[highs > lo][:, None]
        if hi.numel() == 0:
            continue
        step = (hi - lo) / LEVELS
        clipped = (centres - centres.clamp(min=lo)[None, :].clamp(max=hi)) ** 2
        inside = (centres >= lo) & (centres <= hi)
        error = (histogram * torch.where(inside, step ** 2 / 12, clipped)).sum(-1)
        index = int(torch.argmin(error))
        if float(error[index]) < best_error:
            best, best_error = (lo, float(hi[index])), float(error[index])
    return best
