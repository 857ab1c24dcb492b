"""Target registry: hardware facts of each part we compile for, as frozen data keyed by name.

Compiler choices live in ``pipeline.CompileOptions``; this module only says what the silicon is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from imxrt.cpu.isa import CORES, Core, Isa, resolve_isa
from imxrt.errors import BadOption


@dataclass(frozen=True)
class NeutronConfig:
    """An eIQ Neutron NPU instance, in the terms NXP's converter uses (``getNeutronTarget``)."""

    name: str  # the converter's target name
    flavour: str  # "Neutron-C": no subsystem, the host core drives every kernel
    hw_version: str
    num_pipes: int  # MAC pipelines
    num_macs: int  # MACs per pipeline: the figure the converter's constraints use
    clock_hz: int

    @property
    def macs_per_cycle(self) -> int:
        return self.num_pipes * self.num_macs


@dataclass(frozen=True)
class CpuConfig:
    """The Cortex-M core that runs the Neutron firmware (if any) and every op the NPU does not take."""

    core: Core
    isa: Isa  # the CMSIS-NN path the program is built for (``--isa`` may pick another the core allows)
    clock_hz: int


@dataclass(frozen=True)
class Target:
    """One compile target: an optional NPU, the CPU, and the memories a program can use."""

    name: str
    description: str
    npu: NeutronConfig | None
    cpu: CpuConfig
    sram_bytes: int | None  # on-chip SRAM available to the program (arena + scratch); None: part unknown
    flash_bytes: int | None  # flash for the program and its constants; None: part unknown


_RT700_CLOCK_HZ = 325_000_000  # COMPUTE_MAIN_CLK in high-speed run (1.1 V); shared by CPU0 and the NPU
_RT700_NPU = NeutronConfig(
    name="imxrt700",
    flavour="Neutron-C",
    hw_version="N3",
    num_pipes=8,
    num_macs=8,
    clock_hz=_RT700_CLOCK_HZ,
)
_RT700_CPU = CpuConfig(core=CORES["cortex-m33"], isa=Isa.DSP, clock_hz=_RT700_CLOCK_HZ)
_RT700_SRAM = 7_680 * 1024  # 7.5 MiB of on-chip SRAM shared by the cores
_RT700_FLASH = 64 * 1024 * 1024  # external XSPI flash on the EVK

# A generic core's clock: a common maximum for parts built on it (the cost model's default; a part's own
# figure belongs in a part target like imxrt700). Memory sizes vary by part, so they are unknown here.
_GENERIC_CLOCK_HZ = {
    "cortex-m0": 48_000_000,
    "cortex-m0plus": 48_000_000,
    "cortex-m3": 72_000_000,
    "cortex-m23": 48_000_000,
    "cortex-m4": 168_000_000,
    "cortex-m7": 480_000_000,
    "cortex-m33": 160_000_000,
    "cortex-m35p": 160_000_000,
    "cortex-m52": 200_000_000,
    "cortex-m55": 400_000_000,
    "cortex-m85": 480_000_000,
}


def _generic(core: Core) -> Target:
    return Target(
        name=core.name,
        description=f"any {core.name} part: CPU only, CMSIS-NN {core.isa.value} path",
        npu=None,
        cpu=CpuConfig(core=core, isa=core.isa, clock_hz=_GENERIC_CLOCK_HZ[core.name]),
        sram_bytes=None,
        flash_bytes=None,
    )


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            name="imxrt700",
            description="NXP i.MX RT700: eIQ Neutron N3-64 NPU first, the rest on the Cortex-M33 (DSP)",
            npu=_RT700_NPU,
            cpu=_RT700_CPU,
            sram_bytes=_RT700_SRAM,
            flash_bytes=_RT700_FLASH,
        ),
        Target(
            name="imxrt700-cpu",
            description="NXP i.MX RT700 without its NPU: every op on the Cortex-M33 (DSP)",
            npu=None,
            cpu=_RT700_CPU,
            sram_bytes=_RT700_SRAM,
            flash_bytes=_RT700_FLASH,
        ),
        *(_generic(core) for core in CORES.values()),
    )
}


def get_target(name: str, isa: str | Isa | None = None) -> Target:
    """The target called ``name``, built for the CMSIS-NN path ``isa`` if given (``--isa``: one the core
    allows). An unknown name is a ``BadOption`` listing the valid ones; an ISA the core cannot run, one
    naming the ISAs it can."""
    try:
        target = TARGETS[name]
    except KeyError:
        raise BadOption("--target", name, sorted(TARGETS)) from None
    chosen = resolve_isa(target.cpu.core, isa)
    if chosen is target.cpu.isa:
        return target
    return dataclasses.replace(target, cpu=dataclasses.replace(target.cpu, isa=chosen))
