"""Quantization stage: pt2e int8 quantization of an exported model (PTQ, and QAT with the same rules)."""

from imxrt.quantization.calibration import calibrate, settle_zero_ranges
from imxrt.quantization.quantizer import ImxrtQuantizer

__all__ = ["ImxrtQuantizer", "calibrate", "settle_zero_ranges"]
