"""ETRecord: ExecuTorch's record of a compile (the edge program the debug handles name, the instruction ->
debug handle map and each delegate's kernel -> debug handle map), the file Inspector pairs with an ETDump.

``to_edge(generate_etrecord=True)`` records the programs and ``to_executorch`` adds the maps; this module
only turns that record into bytes. They are not byte-identical across compiles: ExecuTorch records Python
object ids (``graph_id``) in each node's provenance.
"""

from __future__ import annotations

import io


def etrecord_bytes(etrecord) -> bytes:
    """The ETRecord as the zip file ``ETRecord.save`` writes (``model.etrecord``)."""
    written = io.BytesIO()
    etrecord.save(written)
    return written.getvalue()
