"""Quantization stage: pt2e int8 quantization of an exported model (PTQ, and QAT with the same rules)."""

from imxrt.quantization.calibration import calibrate
from imxrt.quantization.quantizer import ImxrtQuantizer

__all__ = ["ImxrtQuantizer", "calibrate"]
