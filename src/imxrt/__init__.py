"""imxrt: compile a PyTorch model to an int8 ExecuTorch program for the NXP i.MX RT700.

``imxrt.compile(model, example_inputs, target="imxrt700", calibration=...)`` returns a ``CompileResult``
with the ``.pte`` bytes, each NPU partition's LiteRT subgraph, and the placement report.
``imxrt.prepare_qat`` / ``imxrt.compile_qat``: QAT in the user's own training loop (DDP included).
"""

from __future__ import annotations

import importlib

# Exports resolved on first use, so `imxrt targets` and `--help` do not pay for importing torch.
_EXPORTS = {
    "compile": "imxrt.pipeline",
    "compile_qat": "imxrt.pipeline",
    "prepare_qat": "imxrt.pipeline",
    "evaluate": "imxrt.accuracy",
    "CompileOptions": "imxrt.pipeline",
    "CompileResult": "imxrt.pipeline",
    "ImxrtError": "imxrt.errors",
    "TARGETS": "imxrt.targets",
    "Target": "imxrt.targets",
    "get_target": "imxrt.targets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'imxrt' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
