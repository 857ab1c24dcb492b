"""What every per-op table has in common (the CPU lowering's rows, the LiteRT converters, the host runtime's
LiteRT preparers): written as an ordered list of rows, read as a dict, one row per op."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)
Row = TypeVar("Row")


def one_row_per_op(rows: Iterable[tuple[Key, Row]], what: str, name: Callable[[Key], str] = str) -> dict[Key, Row]:
    """``rows`` as a dict; a second row for an op is a bug of the table and raises ``two <what> for <op>``."""
    table: dict[Key, Row] = {}
    for op, row in rows:
        if op in table:
            raise ValueError(f"two {what} for {name(op)}")
        table[op] = row
    return table
