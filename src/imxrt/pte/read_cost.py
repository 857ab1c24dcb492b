"""What a flatbuffer reader would build from an untrusted file, counted before it runs, in time bounded by the file.

A flatbuffer refers to a table or vector by offset, and any number of offsets may refer to one: a reader that
builds one object per reference (ExecuTorch's ``.pte`` reader, the flatbuffer object API then dataclasses; its
``.bpte`` reader, flatc's JSON then ``json.loads``) builds a table that a thousand offsets share a thousand times.
``ReadCost`` walks the file as a schema describes it (``Table``: the fields that refer to more data) without
building anything: each shared table or vector is priced once and counted once per reference, at the prices of
the reader that will read it (``Prices``). The schemas are described where they are read: ``program.fbs`` in
``pte/reader.py``, the bundled program's in ``bundle.py``, LiteRT's schema.fbs in ``runtime/litert_model.py``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

# The kinds of field that refer to more data
STRING, BYTES, NUMBERS, TABLE, TABLES, UNION = range(6)
U8, U16, U32, I32, U64 = (struct.Struct(f) for f in ("<B", "<H", "<I", "<i", "<Q"))


@dataclass(frozen=True)
class Prices:
    """Bytes one reader builds, at their peak while it reads: per table, per number of a vector of numbers,
    per byte of a string or byte vector."""

    table: int
    item: int
    byte: int


class Table:
    """A table of a schema as the walk sees it: (slot, kind, detail) per field that refers to more data,
    slot = 4 + 2 * field id; detail is the element width of a number vector, the table of a table field, or
    the member tables of a union by type (its type byte has the slot before)."""

    def __init__(self, name: str, *fields: tuple[int, int, object]) -> None:
        self.name, self.fields = name, fields


SCALARS = Table("a table of scalars")  # no field refers to more data: Int, Bool, Double, AllocationDetails, ...


class ReadCost:
    """Bytes a reader with ``prices`` would build from a flatbuffer, counted without building them. Every read
    is bounds-checked: an offset outside ``data`` is a ``ValueError``."""

    def __init__(self, data: bytes | memoryview, prices: Prices) -> None:
        self.data, self.prices = data, prices
        self.known: dict[tuple[int, int], int] = {}  # (id of the table kind, position) -> its cost

    def root(self, table: Table) -> int:
        """The cost of the whole file, whose root table is ``table``."""
        return self.table(table, self.read(U32, 0))

    def table(self, table: Table, position: int) -> int:
        key = (id(table), position)
        if key not in self.known:
            self.known[key] = self.prices.table + sum(self._field(position, *field) for field in table.fields)
        return self.known[key]

    def _field(self, position: int, slot: int, kind: int, detail) -> int:
        where = self.slot(position, slot)
        if where is None:
            return 0
        if kind == UNION:
            kind_at = self.slot(position, slot - 2)
            member = (self.read(U8, kind_at) if kind_at is not None else 0) - 1  # type 0 is NONE
            return self.table(detail[member], self.refer(where)) if 0 <= member < len(detail) else 0
        target = self.refer(where)
        if kind == TABLE:
            return self.table(detail, target)
        if kind == TABLES:
            key = (id(detail), -target)  # a vector of tables, keyed apart from a table at the same position
            if key not in self.known:
                self.known[key] = self._tables(detail, target)
            return self.known[key]
        count = self.read(U32, target)
        width = detail if kind == NUMBERS else 1
        self._inside(target + 4, count * width)
        return count * (self.prices.item if kind == NUMBERS else self.prices.byte)

    def _tables(self, table: Table, vector: int) -> int:
        count = self.read(U32, vector)
        self._inside(vector + 4, 4 * count)
        slots = vector + 4 + 4 * np.arange(count, dtype=np.int64)
        positions, repeats = np.unique(np.frombuffer(self.data, "<u4", count, vector + 4) + slots,
                                       return_counts=True)
        return sum(int(n) * self.table(table, int(p)) for p, n in zip(positions, repeats, strict=True))

    def slot(self, position: int, slot: int) -> int | None:
        """Where a table's field is, or None when the table leaves it out."""
        vtable = position - self.read(I32, position)
        if slot >= self.read(U16, vtable):
            return None
        offset = self.read(U16, vtable + slot)
        return position + offset if offset else None

    def scalar(self, position: int, slot: int, kind: struct.Struct, default: int = 0) -> int:
        where = self.slot(position, slot)
        return default if where is None else self.read(kind, where)

    def vector(self, position: int, slot: int, element: str) -> np.ndarray:
        """A table's vector of numbers (empty when left out), read in place."""
        where = self.slot(position, slot)
        if where is None:
            return np.zeros(0, element)
        target = self.refer(where)
        count = self.read(U32, target)
        self._inside(target + 4, count * np.dtype(element).itemsize)
        return np.frombuffer(self.data, element, count, target + 4)

    def tables(self, position: int, slot: int) -> list[int]:
        """Where the tables of a table's vector of tables are."""
        where = self.slot(position, slot)
        if where is None:
            return []
        target = self.refer(where)
        slots = target + 4 + 4 * np.arange(self.read(U32, target), dtype=np.int64)
        return [int(p) for p in self.vector(position, slot, "<u4") + slots]

    def refer(self, where: int) -> int:
        return where + self.read(U32, where)

    def read(self, kind: struct.Struct, position: int) -> int:
        self._inside(position, kind.size)
        return kind.unpack_from(self.data, position)[0]

    def _inside(self, position: int, size: int) -> None:
        if position < 0 or position + size > len(self.data):
            raise ValueError(f"an offset points outside the file ({position:,} + {size:,} bytes)")
