"""docs/architecture.md's "Modules" table matches the modules under src/imxrt.

The rules, checked without compiling anything:

- Every ``.py`` file under src/imxrt has exactly one row, whose first cell is its path relative to src/imxrt
  in backticks. A package's ``__init__.py`` is listed only when it holds code: its body defines a function or
  a class, or assigns a name other than ``__all__`` (a docstring, imports and ``__all__`` alone are not listed).
- Every row names an existing file, listed or not by the rule above.
- Every row's description is one sentence: it ends with a period and, outside `code spans`, holds no
  sentence end inside it (a ".", "!" or "?" followed by a space and a capital letter).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "imxrt"
DOC = ROOT / "docs" / "architecture.md"

ROW = re.compile(r"^\| `(?P<path>[^`]+)` \| (?P<description>.*) \|$")
CODE_SPAN = re.compile(r"`[^`]*`")
SENTENCE_END = re.compile(r"[.!?] +[A-Z]")


def holds_code(init: Path) -> bool:
    """Whether a package's ``__init__.py`` defines or assigns anything beyond ``__all__``."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(not (isinstance(t, ast.Name) and t.id == "__all__") for t in targets):
                return True
    return False


def listed_modules() -> set[str]:
    """The paths the table must list, relative to src/imxrt."""
    return {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
            if path.name != "__init__.py" or holds_code(path)}


def table_rows() -> list[tuple[str, str]]:
    """(path, description) of each row of the "## Modules" section's table."""
    text = DOC.read_text()
    start = text.index("\n## Modules\n")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    rows = []
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            rows.append((match["path"], match["description"].strip()))
    return rows


def test_every_module_has_exactly_one_row():
    paths = [path for path, _ in table_rows()]
    duplicates = sorted({path for path in paths if paths.count(path) > 1})
    assert not duplicates, f"listed more than once in docs/architecture.md: {duplicates}"
    missing = sorted(listed_modules() - set(paths))
    assert not missing, f"modules without a row in docs/architecture.md's Modules table: {missing}"


def test_every_row_names_an_existing_file():
    unknown = sorted(path for path, _ in table_rows() if not (PACKAGE / path).is_file())
    assert not unknown, f"rows naming no file under src/imxrt: {unknown}"


def test_every_description_is_one_sentence():
    wrong = []
    for path, description in table_rows():
        prose = CODE_SPAN.sub("code", description)
        if not description.endswith(".") or SENTENCE_END.search(prose):
            wrong.append(f"{path}: {description}")
    assert not wrong, "descriptions that are not one sentence ending with a period:\n" + "\n".join(wrong)


def test_init_rule_sees_code():
    """The ``__init__.py`` rule itself: the package root's lazy exports are code, a re-export is not."""
    assert holds_code(PACKAGE / "__init__.py")
    assert not holds_code(PACKAGE / "quantization" / "__init__.py")
