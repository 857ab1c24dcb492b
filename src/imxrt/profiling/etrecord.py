"""ETRecord: ExecuTorch's record of a compile (the edge program the debug handles name, the instruction ->
debug handle map and each delegate's kernel -> debug handle map), the file Inspector pairs with an ETDump.

``to_edge(generate_etrecord=True)`` records the programs and ``to_executorch`` adds the maps; this module
only turns that record into bytes, reproducibly: the Python object ids ExecuTorch records as graph ids are
renumbered (``provenance.canonical_graph_ids``) and every zip entry gets one fixed timestamp.
"""

from __future__ import annotations

import io
import zipfile

from imxrt.profiling.provenance import canonical_graph_ids

_TIMESTAMP = (1980, 1, 1, 0, 0, 0)  # the earliest a zip entry can hold: the same for every compile


def etrecord_bytes(etrecord) -> bytes:
    """The ETRecord as the zip file ``ETRecord.save`` writes (``model.etrecord``), byte-identical for the
    same compile."""
    canonical_graph_ids(etrecord)
    written = io.BytesIO()
    etrecord.save(written)
    stamped = io.BytesIO()
    with zipfile.ZipFile(written) as source, zipfile.ZipFile(stamped, "w") as target:
        for entry in source.infolist():
            fixed = zipfile.ZipInfo(entry.filename, _TIMESTAMP)
            fixed.compress_type, fixed.external_attr = entry.compress_type, entry.external_attr
            target.writestr(fixed, source.read(entry.filename))
    return stamped.getvalue()
