"""Cost model: estimated cycles per op on the Neutron NPU and the Cortex-M, per partition and in total."""

from imxrt.perf.estimate import estimate_latency, latency_line

__all__ = ["estimate_latency", "latency_line"]
