"""Host runtime: run a compiled ``.pte`` bit-exactly on a PC, in the memory plan the device would use.

``imxrt.runtime.load(path_or_bytes).forward(*inputs)`` takes numpy arrays or torch tensors and returns
numpy arrays. The file is read by ``imxrt.pte.reader`` (which the report, ETDump, C header and bundle use
without this package); the cortex_m kernels it calls are ``imxrt.cortex_m``'s. Modules: ``memory`` (planned
arena), ``ops`` (kernel calls), ``neutron`` (NeutronBackend delegates), ``litert`` (LiteRT subgraphs),
``plan_check`` (lifetimes for poisoning), ``interpreter``.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from imxrt import integrity
from imxrt.errors import BadFile, ImxrtError
from imxrt.pte.reader import ProgramFile, read_program
from imxrt.runtime.inputs import warn_non_finite
from imxrt.runtime.interpreter import Interpreter

__all__ = ["Program", "load"]


class Program:
    """A loaded ``.pte``, ready to run; loading checks the file and prepares every kernel and delegate."""

    def __init__(self, program: ProgramFile, check_plan: bool = False) -> None:
        self.file = program
        self.check_plan = check_plan
        self._interpreter = Interpreter(program, check_plan=check_plan)

    @property
    def name(self) -> str:
        return self.file.name

    def forward(self, *inputs: np.ndarray | torch.Tensor) -> list[np.ndarray]:
        """Run the program once on ``inputs`` (in the program's order); its outputs as numpy arrays. NaN or
        Inf in a float input is run, with a warning naming the input. An argument that is a tuple or list of
        arrays (the model's ``forward`` took one) stands for its arrays in order, as the program takes them."""
        if any(isinstance(value, (tuple, list)) for value in inputs):
            inputs = tuple(_flat(inputs))
        warn_non_finite(inputs)
        try:
            return self._interpreter.run(inputs)
        except ImxrtError:
            raise
        except Exception as e:  # a kernel or delegate that cannot run what the file asks: one BadFile
            raise refusal(self.file, "fails while running", e) from e

    __call__ = forward

    def signature(self) -> str:
        """The inputs the program takes, e.g. ``shape (1, 3, 96, 96) float32``."""
        return self._interpreter.signature()


def _flat(inputs):
    for value in inputs:
        if isinstance(value, (tuple, list)):
            yield from _flat(value)
        else:
            yield value


def load(source: bytes | bytearray | str | os.PathLike | ProgramFile, check_plan: bool = False,
         name: str | None = None) -> Program:
    """Load a ``.pte`` from its bytes, a path, or as ``read_program`` read it. ``check_plan`` poisons each
    planned tensor's bytes when its lifetime ends, so a memory plan with overlapping live tensors gives wrong
    outputs. ``name``: how errors name bytes."""
    program = source if isinstance(source, ProgramFile) else read_program(source, name)
    try:
        return Program(program, check_plan=check_plan)
    except ImxrtError:
        raise
    except Exception as e:  # the structure checks passed, but a value is impossible: said as such, not a crash
        raise refusal(program, "cannot be prepared", e) from e


def refusal(program: ProgramFile, what: str, error: Exception) -> BadFile:
    """The one-line ``BadFile`` for a program the runtime failed on past its checks. A matching checksum rules
    out accidental damage, not a crafted file (anyone can compute one), so it says no more than that."""
    detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(program.seal, integrity.Sealed):
        why = ("its checksum matches, so it is not damaged by accident, but a checksum does not prove who made the "
               "file; if imxrt compile wrote it, this is an imxrt bug: please report it")
    else:
        why = "the file has no imxrt checksum, so it may be damaged or not a program of ours; compile the model again"
    return BadFile(program.name, f"{what} ({type(error).__name__}: {detail}); {why}")
