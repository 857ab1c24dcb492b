"""Shared test setup: quiet third-party import noise (edge-graph builders live in edge_graphs.py).

``IMXRT_FINGERPRINTS=PATH python -m pytest`` appends one line per program a test compiles to ``PATH``: the
test's id and the SHA-256 of the ``.pte`` and its partitions. Two runs compared (``sort -u``) show whether a
refactor changed any compiled byte.
"""

from __future__ import annotations

import logging
import os

import pytest
import torch

for _name in ("torchao", "torch.utils._pytree"):
    logging.getLogger(_name).setLevel(logging.ERROR)


@pytest.fixture(autouse=True)
def _seeded_torch() -> None:
    """Every test starts from one torch seed: a model built with unseeded weights compiles to the same
    program every run (and a failure found once is found again)."""
    torch.manual_seed(0)


def _record_fingerprints(path: str) -> None:
    from program_checks import program_digest

    from imxrt.pipeline import CompileResult

    original = CompileResult.__init__

    def init(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
        with open(path, "a") as out:
            out.write(f"{program_digest(self)} {test}\n")

    CompileResult.__init__ = init


if os.environ.get("IMXRT_FINGERPRINTS"):
    _record_fingerprints(os.environ["IMXRT_FINGERPRINTS"])
