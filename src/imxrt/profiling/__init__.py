"""Profiling: the ETRecord ``imxrt compile`` writes and the ETDump ``imxrt run --etdump`` synthesizes from
the cost model, which ExecuTorch's Inspector reads together.

``instructions`` (compile time: which report entry each instruction of the ``.pte`` stands for),
``etrecord`` (ExecuTorch's ETRecord, as bytes), ``etdump`` (estimated profile events per instruction and
per NPU kernel, in ExecuTorch's ETDump flatbuffer).
"""
