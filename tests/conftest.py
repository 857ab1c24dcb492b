"""Shared test setup: quiet third-party import noise (edge-graph builders live in edge_graphs.py)."""

from __future__ import annotations

import logging

for _name in ("torchao", "torch.utils._pytree"):
    logging.getLogger(_name).setLevel(logging.ERROR)
