"""ETRecord: ExecuTorch's record of a compile (the edge program the debug handles name, the instruction ->
debug handle map and each delegate's kernel -> debug handle map), the file Inspector pairs with an ETDump.

``to_edge(generate_etrecord=True)`` records the programs and ``to_executorch`` adds the maps; this module
only turns that record into deterministic bytes.
"""

from __future__ import annotations

import io
import zipfile

_EPOCH = (1980, 1, 1, 0, 0, 0)  # the oldest time a zip entry holds


def etrecord_bytes(etrecord) -> bytes:
    """The ETRecord as the zip file ``ETRecord.save`` writes, with fixed entry times (``save`` stamps the
    current time, so the same compile would give different bytes)."""
    written = io.BytesIO()
    etrecord.save(written)
    stable = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(written.getvalue())) as source, zipfile.ZipFile(stable, "w") as target:
        for entry in source.infolist():
            info = zipfile.ZipInfo(entry.filename, date_time=_EPOCH)
            info.compress_type, info.external_attr = entry.compress_type, entry.external_attr
            target.writestr(info, source.read(entry))
    return stable.getvalue()
