"""Cost model calibration points: the published latencies the constants were fitted on or are checked against.

Each anchor names a bundled example, the target and clock it was measured at, the published figure and
whether it calibrated constants (which ones) or only checks them. ``benchmarks/latency.py`` prints the
estimate next to each; docs/cost_model.md carries the same table; the tests hold the calibration points
to within 25%.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from imxrt.targets import Target, get_target

TOLERANCE = 0.25  # a calibration point's estimate must land within 25% of its published figure


@dataclass(frozen=True)
class Anchor:
    model: str  # examples/<model>.py
    target: str  # the imxrt target whose hardware ran it
    clock_hz: int  # the clock of the measurement
    published_us: tuple[float, float]  # (low, high) of the published figure; equal for a single value
    source: str
    calibrates: str  # the constants fitted on it; "" for a check

    @property
    def midpoint_us(self) -> float:
        return sum(self.published_us) / 2

    def target_at_clock(self) -> Target:
        """The target with its clocks set to the measurement's."""
        target = get_target(self.target)
        npu = dataclasses.replace(target.npu, clock_hz=self.clock_hz) if target.npu else None
        return dataclasses.replace(target, npu=npu, cpu=dataclasses.replace(target.cpu, clock_hz=self.clock_hz))

    def error(self, estimate_us: float) -> float:
        """Relative error against the nearest end of the published range (0 inside it)."""
        low, high = self.published_us
        nearest = min(max(estimate_us, low), high)
        return (estimate_us - nearest) / nearest


_RT700 = "RT700 NPU, TFLM + NeutronGraph, MCUXpresso SDK example"
_M33 = "Cortex-M33 (STM32U575), vendor engine, MLPerf Tiny v1.2"
_M85 = "Cortex-M85, TFLM + CMSIS-NN, MLPerf Tiny"
_NPU_OVERHEADS = "NPU per-inference and per-kernel overheads"

ANCHORS: tuple[Anchor, ...] = (
    Anchor("ds_cnn", "imxrt700", 324_000_000, (576.0, 595.0), _RT700, _NPU_OVERHEADS),
    Anchor("cifarnet", "imxrt700", 324_000_000, (1027.0, 1027.0), _RT700, _NPU_OVERHEADS),
    Anchor("resnet8", "cortex-m33", 160_000_000, (111_070.0, 111_070.0), _M33, "DSP conv MAC rate"),
    Anchor("autoencoder", "cortex-m33", 160_000_000, (3_430.0, 3_430.0), _M33, "DSP fully connected MAC rate"),
    Anchor("ds_cnn", "cortex-m33", 160_000_000, (29_060.0, 29_060.0), _M33, ""),
    Anchor("mobilenet_v1", "cortex-m33", 160_000_000, (59_280.0, 59_280.0), _M33, ""),
    Anchor("resnet8", "cortex-m85", 480_000_000, (8_480.0, 8_480.0), _M85, "MVE conv MAC rate"),
    Anchor("autoencoder", "cortex-m85", 480_000_000, (530.0, 530.0), _M85, "MVE fully connected MAC rate"),
    Anchor("ds_cnn", "cortex-m85", 480_000_000, (3_460.0, 3_460.0), _M85, ""),
    Anchor("mobilenet_v1", "cortex-m85", 480_000_000, (13_390.0, 13_390.0), _M85, ""),
)
