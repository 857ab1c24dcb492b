"""The op tables agree with each other: what one layer emits, the next one has a row for.

Static: no model is compiled. NPU side: every op of the capability table (``npu.support.SUPPORTED``) has a
LiteRT converter; every builtin a row emits has a host-runtime preparer, a Neutron entry and a cost rule; every
builtin a converter can write is in some row's ``emits``; a row emitting a builtin TFLM can refuse lists the
table rule that states the limit. CPU side: every cortex_m kernel has a cost row, is emitted by the CPU
lowering, and the aten ops lowered to it have a quantization rule.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest
import torch
from ai_edge_litert import schema_py_generated as tfl
from executorch.exir.dialects._ops import ops as exir_ops

import imxrt.npu.litert
from imxrt.npu import support
from imxrt.npu.compilers.reference import NEUTRON_LITERT_OPS
from imxrt.npu.litert import tflm_limits
from imxrt.npu.litert.converters import CONVERTERS
from imxrt.perf import cpu as cpu_perf
from imxrt.perf import npu as npu_perf
from imxrt.quantization.rules import Device, runs_in_int8
from imxrt.runtime.litert import PREPARERS

BUILTINS = {name: code for name, code in vars(tfl.BuiltinOperator).items() if not name.startswith("_")}
EMITTED = sorted({builtin for row in support.SUPPORTED.values() for builtin in row.emits})
LITERT = Path(imxrt.npu.litert.__file__).parent
# The modules that create LiteRT operators: the converters and the helpers they and the lowering's passes use.
EMITTING_SOURCES = sorted([*(LITERT / "converters").glob("*.py"), LITERT / "context.py", LITERT / "fold.py",
                           LITERT / "join_slices.py"])


def _name(op: object) -> str:
    return getattr(op, "__name__", str(op))


def _cpu_module(name: str) -> ModuleType:
    """``imxrt.cortex_m.<name>``, or ``imxrt.cpu.<name>`` where the Cortex-M layer has not moved."""
    for package in ("imxrt.cortex_m", "imxrt.cpu"):
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(f"no Cortex-M module {name}")


# ---- NPU ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(support.SUPPORTED), ids=_name)
def test_every_supported_op_has_a_litert_converter(op):
    assert op in CONVERTERS, f"{_name(op)} is in the capability table (npu.support.SUPPORTED) but has no LiteRT " \
        "converter (npu.litert.converters)"


@pytest.mark.parametrize("op", list(support.SUPPORTED), ids=_name)
def test_every_row_emits_builtins_by_their_schema_name(op):
    unknown = [b for b in support.SUPPORTED[op].emits if b not in BUILTINS]
    assert not unknown, f"{_name(op)}'s row emits {unknown}: no such BuiltinOperator"


@pytest.mark.parametrize("builtin", EMITTED)
def test_every_emitted_builtin_has_a_host_runtime_preparer(builtin):
    assert BUILTINS[builtin] in PREPARERS, f"{builtin} is emitted by the capability table but missing from the host " \
        "runtime's PREPARERS (runtime/litert.py)"


@pytest.mark.parametrize("builtin", EMITTED)
def test_every_emitted_builtin_has_a_neutron_entry(builtin):
    assert builtin in NEUTRON_LITERT_OPS, f"{builtin} is emitted by the capability table but missing from the " \
        "Neutron converter's ops (npu/compilers/reference.py NEUTRON_LITERT_OPS)"


@pytest.mark.parametrize("builtin", EMITTED)
def test_every_emitted_builtin_has_an_npu_cost_rule(builtin):
    assert BUILTINS[builtin] in npu_perf.COSTED_OPS, f"{builtin} is emitted by the capability table but has no " \
        "cost rule (perf/npu.py COSTED_OPS)"


def _builtins_named_in(path: Path) -> set[str]:
    """Every string constant of a module that is a BuiltinOperator name (what a converter passes to ``emit``)."""
    tree = ast.parse(path.read_text())
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in BUILTINS}


@pytest.mark.parametrize("path", EMITTING_SOURCES, ids=lambda p: p.name)
def test_every_builtin_a_converter_can_emit_is_in_a_row(path):
    missing = sorted(_builtins_named_in(path) - set(EMITTED))
    assert not missing, f"{path.name} can emit {missing}, which no row of the capability table lists in its emits"


def test_the_converter_sources_are_scanned():
    """The scan above reads the files that create operators: it finds the builtins everyone knows are there."""
    named = set().union(*(_builtins_named_in(p) for p in EMITTING_SOURCES))
    assert {"CONV_2D", "QUANTIZE", "SPLIT_V", "LOGISTIC", "PADV2", "CONCATENATION"} <= named


@pytest.mark.parametrize("op", list(support.SUPPORTED), ids=_name)
def test_a_row_emitting_a_builtin_tflm_can_refuse_lists_the_rule(op):
    """The lowering re-checks TFLM's limits on every operator it writes (``tflm_limits``); the rule it names
    is a constraint of the table, listed in the row of each op that can emit the builtin (so the docs show
    it, and the table refuses what it can see of it)."""
    row = support.SUPPORTED[op]
    listed = {c.__name__ for c in row.constraints}
    missing = {tflm_limits.CHECKS[b].rule for b in row.emits if b in tflm_limits.CHECKS} - listed
    assert not missing, f"{_name(op)} emits builtins TFLM can refuse, but its row lacks the rules {sorted(missing)}"


@pytest.mark.parametrize("builtin", sorted(tflm_limits.CHECKS))
def test_every_tflm_limit_names_a_rule_of_the_table(builtin):
    rule = getattr(support, tflm_limits.CHECKS[builtin].rule, None)
    assert callable(rule) and rule.__doc__, f"tflm_limits names {tflm_limits.CHECKS[builtin].rule} for {builtin}: " \
        "no such constraint in npu.support"


# ---- Cortex-M -----------------------------------------------------------------------------------------

OPS = _cpu_module("ops")
LOWERING = _cpu_module("lowering_rules")
# The model's I/O conversions: the pipeline emits them around the program, not the lowering's table.
IO_OPS = {"quantize_per_tensor", "dequantize_per_tensor"}
# Edge ops whose name differs from the aten op the quantizer annotates (to_edge's decompositions and
# functionalization): the quantization rule is keyed by the latter.
_edge, _aten = exir_ops.edge.aten, torch.ops.aten
QUANTIZED_AS = {
    _edge.convolution.default: (_aten.conv2d.default, _aten.conv_transpose2d.input),
    _edge._adaptive_avg_pool2d.default: (_aten.adaptive_avg_pool2d.default,),
    _edge.max_pool2d_with_indices.default: (_aten.max_pool2d.default,),
    _edge.permute_copy.default: (_aten.permute.default,),
}


def _cortex_m_kernels_of(function, seen: set) -> set[str]:
    """The cortex_m ops a lowering function emits: ``cortex_m("name")`` in its source or in that of the
    functions of the lowering's family modules it calls or closes over (a name passed in a closure counts too)."""
    module = getattr(function, "__module__", None) or ""
    if function in seen or not inspect.isfunction(function) or not module.startswith(LOWERING.__name__):
        return set()
    seen.add(function)
    names = set(re.findall(r'cortex_m\("(\w+)"\)', inspect.getsource(function)))
    closure = inspect.getclosurevars(function)
    names |= {v for v in closure.nonlocals.values() if isinstance(v, str)}
    for value in (*closure.nonlocals.values(), *closure.globals.values()):
        names |= _cortex_m_kernels_of(value, seen)
    return names


def _lowered_to() -> dict[str, list[object]]:
    """cortex_m op name -> the edge ops the CPU lowering's table maps to it."""
    kernel_names = {op.name for op in OPS.OPS}
    lowered: dict[str, list[object]] = {}
    for edge_op, row in LOWERING.CPU_KERNELS.items():
        for name in _cortex_m_kernels_of(row.lower, set()) & kernel_names:
            lowered.setdefault(name, []).append(edge_op)
    return lowered


LOWERED_TO = _lowered_to()
KERNELS = sorted(op.name for op in OPS.OPS if op.name not in IO_OPS)


@pytest.mark.parametrize("name", [op.name for op in OPS.OPS])
def test_every_cortex_m_kernel_has_a_cost_row(name):
    assert f"cortex_m.{name}.default" in cpu_perf.KERNEL_WORK, f"cortex_m::{name} has no row in perf/cpu.py KERNEL_WORK"


@pytest.mark.parametrize("name", KERNELS)
def test_every_cortex_m_kernel_is_emitted_by_the_cpu_lowering(name):
    """An NHWC twin is the layout pass's rewrite of the kernel the table emits."""
    base = name.removesuffix("_nhwc")
    assert LOWERED_TO.get(base), f"cortex_m::{name}: no row of the CPU lowering's table (CPU_KERNELS) emits it"


@pytest.mark.parametrize("name", KERNELS)
def test_the_aten_ops_lowered_to_a_cortex_m_kernel_have_a_quantization_rule(name):
    missing = []
    for edge_op in LOWERED_TO.get(name.removesuffix("_nhwc"), []):
        aten = QUANTIZED_AS.get(edge_op, (getattr(edge_op, "_op", edge_op),))
        if not any(runs_in_int8(op, Device.CPU) for op in aten):
            missing.append(_name(aten[0]))
    assert not missing, f"the CPU lowering maps {missing} to cortex_m::{name}, but quantization/rules.QUANTIZATION " \
        "has no CPU row for them"


def test_the_cortex_m_scan_finds_what_the_table_names():
    """The source scan above sees the kernels the table's own text names (a scan finding nothing checks nothing)."""
    for edge_op, row in LOWERING.CPU_KERNELS.items():
        for named in re.findall(r"cortex_m::(\w+)", row.kernel):
            assert edge_op in LOWERED_TO.get(named, []), f"{_name(edge_op)}'s row names cortex_m::{named}"
    assert _edge.convolution.default in LOWERED_TO["quantized_depthwise_conv2d"]
