"""Shared test setup: quiet third-party import noise, and small helpers to build int8 edge graphs."""

from __future__ import annotations

import logging

for _name in ("torchao", "torch.utils._pytree"):
    logging.getLogger(_name).setLevel(logging.ERROR)
