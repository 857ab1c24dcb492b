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
CANDIDATES = 64  # ends tried on each side of the range by the share of values they cut off
FRACTION_FROM = 0.3  # and at fractions of the extreme from this one to 1


class ClippedRangeObserver(FiniteMinMaxObserver):
    """Per-tensor affine int8 observer whose range minimises expected int8 error over a histogram."""

    def __init__(self, *args, bins: int = BINS, **kwargs):
        super().__init__(*args, **kwargs)
        self.bins = bins
        self.register_buffer("histogram", torch.zeros(bins, dtype=torch.float64))
        self.register_buffer("histogram_range", torch.tensor([float("inf"), float("-inf")], dtype=torch.float64))
        self.register_buffer("zeros", torch.zeros((), dtype=torch.float64))  # values exactly 0: never rounded
        self._searched: tuple[tuple[float, float, float], tuple[float, float]] | None = None  # (key, range)

    def forward(self, x_orig):
        result = super().forward(x_orig)  # min/max over the finite values
        if not isinstance(x_orig, torch.Tensor) or x_orig.numel() == 0 or not bool(torch.isfinite(self.min_val)):
            return result
        x = x_orig.detach().reshape(-1).to(torch.float64)
        x = x[torch.isfinite(x)]
        if x.numel() == 0:
            return result
        low, high = self._span()
        if (low, high) != tuple(self.histogram_range.tolist()):
            self._rebin(low, high)
        self.zeros += int((x == 0).sum())
        if high > low:
            self.histogram += torch.histc(x, bins=self.bins, min=low, max=high)
        else:
            self.histogram[0] += x.numel()
        return result

    def _span(self) -> tuple[float, float]:
        """min/max seen, widened to hold 0, as int8 qparams always do."""
        return min(float(self.min_val), 0.0), max(float(self.max_val), 0.0)

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
        min/max (with 0) when the histogram does not describe the current range (one set after calibration)."""
        low, high = self._span()
        total = float(self.histogram.sum())
        if (low, high) != tuple(self.histogram_range.tolist()) or not high > low or total == 0:
            return low, high
        key = (low, high, total)  # the search runs once per histogram, not once per reader of the qparams
        if self._searched is None or self._searched[0] != key:
            self._searched = (key, best_range(self.histogram, low, high, float(self.zeros)))
        return self._searched[1]

    def calculate_qparams(self):
        low, high = self.clipped_range()
        return self._calculate_qparams(torch.tensor(low, dtype=self.min_val.dtype),
                                       torch.tensor(high, dtype=self.max_val.dtype))


def best_range(histogram: torch.Tensor, low: float, high: float, zeros: float = 0.0) -> tuple[float, float]:
    """Search the pairs of candidate ends (bin edges cutting off a share of the values on each side, from
    none to half, denser near none) for the least expected squared error: values inside are rounded (error
    step²/12 each, but the ``zeros`` values exactly 0, which every range holds exactly), values outside clipped
    (their distance to the end, squared). Bins count as their centres;
    with prefix sums of n, n·c and n·c² over the bins, each pair's error is a few products."""
    bins = histogram.numel()
    width = (high - low) / bins
    centres = low + (torch.arange(bins, dtype=torch.float64) + 0.5) * width
    edges = low + torch.arange(bins + 1, dtype=torch.float64) * width
    zero = torch.zeros(1, dtype=torch.float64)
    n, nc, ncc = (torch.cat([zero, (histogram * centres ** p).cumsum(0)]) for p in (0, 1, 2))  # below edge k
    below = n / n[-1]
    shares = 0.5 * torch.linspace(0.0, 1.0, CANDIDATES + 1, dtype=torch.float64) ** 4
    # edge indices: the last with at most a share below it, the first with at most a share above it
    # and the edges at fractions of each extreme: past the last few values a share tells no ends apart
    fractions = (torch.linspace(FRACTION_FROM, 1.0, CANDIDATES // 2 + 1, dtype=torch.float64) * bins).round().long()
    zero_edge = int(round(-low / width))
    lows = torch.unique(torch.cat([torch.searchsorted(below, shares, right=True) - 1,
                                   zero_edge - (fractions * zero_edge) // bins]))
    highs = torch.unique(torch.cat([torch.searchsorted(below, 1.0 - shares).clamp(max=bins),
                                    zero_edge + (fractions * (bins - zero_edge)) // bins]))
    lows = lows[edges[lows] <= 0]  # the range holds 0
    highs = highs[edges[highs] >= 0]
    if lows.numel() == 0 or highs.numel() == 0:
        return low, high
    i, j = lows[:, None], highs[None, :]
    lo, hi = edges[i], edges[j]
    clipped_low = ncc[i] - 2 * lo * nc[i] + lo ** 2 * n[i]  # Σ n (c - lo)² over the bins below lo
    above = (ncc[-1] - ncc[j]) - 2 * hi * (nc[-1] - nc[j]) + hi ** 2 * (n[-1] - n[j])
    inside = (n[j] - n[i] - zeros).clamp(min=0)
    error = clipped_low + above + inside * ((hi - lo) / LEVELS) ** 2 / 12
    error = torch.where(hi > lo, error, torch.full_like(error, float("inf")))
    best = int(torch.argmin(error))
    a, b = divmod(best, highs.numel())
    return float(edges[lows[a]]), float(edges[highs[b]])
