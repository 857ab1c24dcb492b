"""Cortex-M side: the CPU lowering to the cortex_m op set (``imxrt.cortex_m``), CMSIS-NN scratch sizes per ISA."""
