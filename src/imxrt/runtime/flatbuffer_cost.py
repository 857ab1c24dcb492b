"""What a flatbuffer reader would build from untrusted bytes, priced without building it.

A flatbuffer object API builds one Python object per table, and a list, bytes or str per vector or string,
for every offset that refers to it: a table that a thousand offsets share is built a thousand times, so a
small file can ask for gigabytes. ``ReadCost`` walks a schema's tables (described as ``Table`` values) in
the file itself and prices every field, each shared table or vector once and multiplied by its references,
so its own time and memory are bounded by the file's size. The ``.pte`` reader (``program.py``) and the
LiteRT reader (``litert.py``) describe their schemas with it.
"""

from __future__ import annotations

import struct

import numpy as np

TABLE_BYTES = 600  # the object-API object of one table (and a dataclass made from it), at their peak
ITEM_BYTES = 40  # one number of a vector: a list slot and an int object
STRING, BYTES, NUMBERS, TABLE, TABLES, UNION = range(6)
U8, U16, U32, I32, U64 = (struct.Struct(f) for f in ("<B", "<H", "<I", "<i", "<Q"))


class Table:
    """A table of a schema as the walk sees it: (slot, kind, detail) per field that refers to more data,
    slot = 4 + 2 * field id; detail is the element width of a number vector, the table of a table field, or
    the member tables of a union by type (its type byte has the slot before)."""

    def __init__(self, name: str, *fields: tuple[int, int, object]) -> None:
        self.name, self.fields = name, fields


class ReadCost:
    """Bytes a flatbuffer object API would build from ``data``, counted without building them. Every read
    is checked against the file: an offset outside it raises ``ValueError``."""

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = data
        self.known: dict[tuple[int, int], int] = {}  # (id of the table kind, position) -> its cost

    def table(self, table: Table, position: int) -> int:
        key = (id(table), position)
        if key not in self.known:
            self.known[key] = TABLE_BYTES + sum(self._field(position, *field) for field in table.fields)
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
        return count * (ITEM_BYTES if kind == NUMBERS else 1)

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
