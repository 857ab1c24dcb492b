"""``docs/supported_ops.md``: what each device runs, generated from the NPU's capability table and the CPU
lowering's table (``python -m imxrt.supported_ops > docs/supported_ops.md``; a test checks the file is current).
"""

from __future__ import annotations

from imxrt.cpu import lowering_rules
from imxrt.npu import support


def markdown() -> str:
    header = ("# Operators imxrt runs in int8\n\n"
              "Generated from the tables themselves (`python -m imxrt.supported_ops > docs/supported_ops.md`); a test\n"
              "checks this file is current.\n\n")
    return header + support.supported_ops_markdown() + "\n" + lowering_rules.supported_ops_markdown()


if __name__ == "__main__":
    print(markdown(), end="")
