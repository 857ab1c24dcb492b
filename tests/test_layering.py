"""The layering DESIGN.md draws, checked on the source: no module imports a package its layer must not see.

Every module under src/imxrt is parsed (nothing is imported), and every import in it, at module or function
level, absolute or relative, is resolved to the first package below ``imxrt`` it names (``imxrt.npu.support``
-> ``npu``; ``firmware.py`` is the package ``firmware``). A ``from imxrt import x`` names the package ``x``.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parent.parent / "src" / "imxrt"

# The shared layers below both devices and the runtime: they read files, name ops and hold the cortex_m op set.
_DEVICE_NEUTRAL = {"runtime", "cpu", "npu"}

# importer package -> {imported package: why it must not}
FORBIDDEN = {
    "cpu": {"npu": "the Cortex-M lowering knows nothing of the NPU (placement and format flags arrive as data)"},
    "npu": {"cpu": "the NPU side knows nothing of the Cortex-M lowering (shared shapes live in kernels/)"},
    "passes": {"quantization": "graph passes are shared by both sides and run on any quantization"},
    "memory": {"runtime": "reading a .pte is imxrt.pte's, not the host runtime's"},
    "profiling": {"runtime": "reading a .pte is imxrt.pte's, not the host runtime's"},
    "firmware": {"runtime": "reading a .pte is imxrt.pte's, not the host runtime's"},
    "report": {"runtime": "reading a .pte is imxrt.pte's, not the host runtime's"},
    "placement": dict.fromkeys(_DEVICE_NEUTRAL, "placement decisions belong to no device"),
    "cortex_m": dict.fromkeys(_DEVICE_NEUTRAL, "the cortex_m op set is shared by the CPU lowering and the runtime"),
    "pte": dict.fromkeys(_DEVICE_NEUTRAL, "the .pte reader belongs to no device and not to the runtime"),
}

# kernels/ is the numeric layer every other one stands on: it may import itself and the error family only.
KERNELS_MAY_IMPORT = {"kernels", "errors"}


def _package_of(path: Path) -> str:
    """The package below imxrt a source file belongs to (a top-level module is its own package)."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return parts[0]


def _module_name(path: Path) -> tuple[list[str], bool]:
    """``src/imxrt/npu/litert/writer.py`` -> ``["imxrt", "npu", "litert", "writer"]``, and whether it is a
    package's ``__init__`` (named as the package)."""
    parts = ["imxrt", *path.relative_to(SRC).with_suffix("").parts]
    if parts[-1] == "__init__":
        return parts[:-1], True
    return parts, False


def imported_packages(source: str, module: list[str], is_package: bool) -> list[tuple[int, str]]:
    """(line, package below imxrt) for every import of an imxrt module in `source`, the text of `module`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # `from . import x` in a.b.c resolves against a.b; in a package's __init__, against the package.
                base = module if is_package else module[:-1]
                base = base[: len(base) - (node.level - 1)]
            else:
                base = []
            stem = base + (node.module.split(".") if node.module else [])
            # `from imxrt import runtime` imports the package runtime, not just imxrt.
            targets = [stem + [alias.name] for alias in node.names] if stem == ["imxrt"] else [stem]
        else:
            continue
        found += [(node.lineno, target[1]) for target in targets if len(target) > 1 and target[0] == "imxrt"]
    return sorted(found)


def violations() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        importer = _package_of(path)
        rules = FORBIDDEN.get(importer, {})
        for line, imported in imported_packages(path.read_text(), *_module_name(path)):
            where = f"{path.relative_to(SRC.parent)}:{line}"
            if imported in rules:
                found.append(f"{where} imports imxrt.{imported}: {importer} -> {imported} ({rules[imported]})")
            if importer == "kernels" and imported not in KERNELS_MAY_IMPORT:
                found.append(
                    f"{where} imports imxrt.{imported}: kernels -> {imported} "
                    f"(kernels may import only {sorted(KERNELS_MAY_IMPORT)})"
                )
    return found


def test_no_module_imports_a_package_its_layer_must_not():
    found = violations()
    assert not found, f"{len(found)} forbidden imports:\n" + "\n".join(found)


def test_every_import_form_is_resolved():
    """The checker sees the forms a forbidden import can take, so the test above can fail."""
    source = "\n".join(
        [
            "import imxrt.npu.support",
            "from imxrt.runtime.program import read_program",
            "from imxrt import runtime",
            "from .. import npu",
            "from ..npu.support import op_name",
            "from . import lowering",
            "def f():",
            "    from imxrt.npu import backend",
        ]
    )
    found = imported_packages(source, ["imxrt", "cpu", "example"], is_package=False)
    assert found == [(1, "npu"), (2, "runtime"), (3, "runtime"), (4, "npu"), (5, "npu"), (6, "cpu"), (8, "npu")]
    # In a package's __init__, `.` is the package itself.
    assert imported_packages("from . import x\nfrom .. import npu", ["imxrt", "cpu"], is_package=True) == [
        (1, "cpu"),
        (2, "npu"),
    ]
