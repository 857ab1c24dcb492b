"""Op families are the same files in every layer: the CPU lowering's rules and the host runtime's LiteRT
preparers are split into the family modules of the NPU's converters, and each table refuses a duplicate op."""

from __future__ import annotations

import pkgutil

import pytest

import imxrt.cpu.lowering_rules as cpu_rules
import imxrt.npu.litert.converters as npu_converters
import imxrt.runtime.litert_preparers as litert_preparers
from imxrt.op_tables import one_row_per_op
from imxrt.runtime.litert_model import BUILTIN_NAMES


def _modules(package) -> set[str]:
    return {module.name for module in pkgutil.iter_modules(package.__path__)}


@pytest.mark.parametrize("package", [cpu_rules, litert_preparers], ids=["cpu_lowering_rules", "litert_preparers"])
def test_every_family_module_is_one_of_the_npu_converters(package):
    assert _modules(package) - _modules(npu_converters) == set()


def test_a_duplicate_cpu_lowering_row_raises():
    op, row = cpu_rules._TABLE[0]
    with pytest.raises(ValueError, match="two CPU lowering rows for"):
        one_row_per_op([(op, row), (op, row)], "CPU lowering rows")


def test_a_duplicate_litert_preparer_raises():
    builtin, prepare = litert_preparers._TABLE[0]
    with pytest.raises(ValueError, match="two preparers for CONV_2D"):
        one_row_per_op([(builtin, prepare), (builtin, prepare)], "preparers", BUILTIN_NAMES.__getitem__)
