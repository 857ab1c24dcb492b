"""Cortex-M side: the cortex_m op library, the CPU lowering to it, CMSIS-NN scratch sizes per ISA."""
