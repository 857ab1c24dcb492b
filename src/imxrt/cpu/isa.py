"""Cortex-M cores and the CMSIS-NN code path (ISA) each one runs: hardware facts as data.

CMSIS-NN picks one of three implementations of every kernel at build time: plain C (``SCALAR``), the DSP
extension's SIMD multiply-accumulates (``DSP``, ``ARM_MATH_DSP``) or Helium vectors (``MVE``,
``ARM_MATH_MVEI``). The path decides scratch-buffer sizes and some constant tensors (``kernel_sum`` on MVE),
so a program is specific to it. Where an extension is optional on a core (DSP on the M33 and M35P, Helium
on the M52, M55 and M85), a part without it runs the next path down; ``resolve_isa`` accepts exactly those
overrides.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from imxrt.errors import BadOption


class Isa(enum.Enum):
    """A CMSIS-NN code path."""

    SCALAR = "scalar"
    DSP = "dsp"
    MVE = "mve"


@dataclass(frozen=True)
class Core:
    name: str  # "cortex-m33"
    isa: Isa  # the path of a part with every optional extension
    overrides: tuple[Isa, ...]  # other paths a part of this core may need (optional extension absent)

    @property
    def allowed(self) -> tuple[Isa, ...]:
        return (self.isa, *self.overrides)


CORES: dict[str, Core] = {
    core.name: core
    for core in (
        Core("cortex-m0", Isa.SCALAR, ()),
        Core("cortex-m0plus", Isa.SCALAR, ()),
        Core("cortex-m3", Isa.SCALAR, ()),
        Core("cortex-m23", Isa.SCALAR, ()),
        Core("cortex-m4", Isa.DSP, ()),
        Core("cortex-m7", Isa.DSP, ()),
        Core("cortex-m33", Isa.DSP, (Isa.SCALAR,)),  # the DSP extension is optional
        Core("cortex-m35p", Isa.DSP, (Isa.SCALAR,)),
        Core("cortex-m52", Isa.MVE, (Isa.DSP,)),  # Helium is optional; the DSP extension is not
        Core("cortex-m55", Isa.MVE, (Isa.DSP,)),
        Core("cortex-m85", Isa.MVE, (Isa.DSP,)),
    )
}


def resolve_isa(core: Core, isa: str | Isa | None) -> Isa:
    """The path to compile for: the core's own, or an override the core allows (``--isa``)."""
    if isa is None:
        return core.isa
    names = [allowed.value for allowed in core.allowed]
    try:
        chosen = isa if isinstance(isa, Isa) else Isa(isa)
    except ValueError:
        raise BadOption("--isa", isa, f"one of {', '.join(names)} for {core.name}") from None
    if chosen not in core.allowed:
        raise BadOption("--isa", chosen.value, f"one of {', '.join(names)}: {core.name} cannot run the "
                                               f"{chosen.value} path of CMSIS-NN")
    return chosen
