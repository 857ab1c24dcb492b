"""Target registry: hardware facts of each part we compile for, as frozen data keyed by name.

Compiler choices live in ``pipeline.CompileOptions``; this module only says what the silicon is.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """The Cortex-M core that runs the Neutron firmware and every op the NPU does not take."""

    core: str  # "cortex-m33"
    isa: str  # CMSIS-NN path: "scalar" | "dsp" | "mve"
    clock_hz: int


@dataclass(frozen=True)
class Target:
    """One compile target: an optional NPU, the CPU, and the memories a program can use."""

    name: str
    description: str
    npu: NeutronConfig | None
    cpu: CpuConfig
    sram_bytes: int  # on-chip SRAM available to the program (arena + scratch)
    flash_bytes: int  # XIP flash for the program and its constants


_RT700_CLOCK_HZ = 325_000_000  # COMPUTE_MAIN_CLK in high-speed run (1.1 V); shared by CPU0 and the NPU

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            name="imxrt700",
            description="NXP i.MX RT700: eIQ Neutron N3-64 NPU + Cortex-M33 (DSP)",
            npu=NeutronConfig(
                name="imxrt700",
                flavour="Neutron-C",
                hw_version="N3",
                num_pipes=8,
                num_macs=8,
                clock_hz=_RT700_CLOCK_HZ,
            ),
            cpu=CpuConfig(core="cortex-m33", isa="dsp", clock_hz=_RT700_CLOCK_HZ),
            sram_bytes=7_680 * 1024,  # 7.5 MiB of on-chip SRAM shared by the cores
            flash_bytes=64 * 1024 * 1024,  # external XSPI flash on the EVK
        ),
    )
}


def get_target(name: str) -> Target:
    """The target called ``name``; an unknown name is a ``BadOption`` listing the valid ones."""
    try:
        return TARGETS[name]
    except KeyError:
        raise BadOption("--target", name, sorted(TARGETS)) from None
