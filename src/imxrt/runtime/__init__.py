"""Host runtime: run a compiled ``.pte`` bit-exactly on a PC, in the memory plan the device would use.

``imxrt.runtime.load(path_or_bytes).forward(*inputs)`` takes numpy arrays or torch tensors and returns
numpy arrays. Modules: ``program`` (reader), ``memory`` (planned arena), ``ops`` (kernel calls),
``neutron`` (NeutronBackend delegates), ``plan_check`` (lifetimes for poisoning), ``interpreter``.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from imxrt.errors import BadFile, ImxrtError
from imxrt.runtime.inputs import warn_non_finite
from imxrt.runtime.interpreter import Interpreter
from imxrt.runtime.program import ProgramFile, read_program

__all__ = ["Program", "load"]


class Program:
    """A loaded ``.pte``, ready to run; loading checks the file and prepares every kernel and delegate."""

    def __init__(self, program: ProgramFile, check_plan: bool = False) -> None:
        self.file = program
        self._interpreter = Interpreter(program, check_plan=check_plan)

    @property
    def name(self) -> str:
        return self.file.name

    def forward(self, *inputs: np.ndarray | torch.Tensor) -> list[np.ndarray]:
        """Run the program once on ``inputs`` (in the program's order); its outputs as numpy arrays. NaN or
        Inf in a float input is run, with a warning naming the input."""
        warn_non_finite(inputs)
        return self._interpreter.run(inputs)

    __call__ = forward

    def signature(self) -> str:
        """The inputs the program takes, e.g. ``shape (1, 3, 96, 96) float32``."""
        return self._interpreter.signature()


def load(source: bytes | bytearray | str | os.PathLike, check_plan: bool = False) -> Program:
    """Load a ``.pte`` from its bytes or a path. ``check_plan`` poisons each planned tensor's bytes when
    its lifetime ends, so a memory plan with overlapping live tensors gives wrong outputs."""
    program = read_program(source)
    try:
        return Program(program, check_plan=check_plan)
    except ImxrtError:
        raise
    except (TypeError, ValueError, KeyError, IndexError) as e:
        # The structure checks passed, but a value is impossible (an enum out of range, a missing list):
        # a damaged file, said as such rather than as a crash deep inside.
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BadFile(program.name, f"is corrupted: a value cannot be prepared ({type(e).__name__}: {detail}); "
                                    "compile the model again") from e
