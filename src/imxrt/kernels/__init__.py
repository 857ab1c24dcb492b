"""Int8 kernels with TFLM / CMSIS-NN semantics (double rounding): the one source of numeric truth.

Each module holds one op family. A kernel is a function of numpy arrays and a params dataclass; the params
are computed once from the tensors' scales and zero points (``prepare_*``), the kernel does integer math
only (or float math that is provably exact: integer operands whose partial sums stay below 2**24 / 2**53).
"""
