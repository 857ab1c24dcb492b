"""Stand-in for ``eiq_neutron_sdk.neutron_converter``: target descriptions only.

Only what ExecuTorch's NXP backend reads is provided:

* ``getNeutronTarget(name)`` -> object with ``name``, ``subsystem``, ``hwVersion``, ``numUnits``,
  ``numPipes``, ``numMacs`` (the flat layout of older SDKs; the backend also accepts them nested under
  ``.npu``).
* ``CompilationContext`` with ``targetOpts`` and ``compilationOpts`` fields, so the backend can fill it in.
* ``convertModel`` exists but raises: the Neutron converter itself is proprietary and not reproduced here.
"""

from dataclasses import dataclass
from types import SimpleNamespace

IS_STANDIN = True

# ``hwVersion`` is compared against ``NeutronHWVersion`` in
# executorch/backends/nxp/backend/neutron_target_spec.py, where N1 = 1 and N3 = 2.
HW_VERSION_N1 = 1
HW_VERSION_N3 = 2


@dataclass(frozen=True)
class NeutronTarget:
    name: str
    subsystem: bool  # False: Neutron-C (MCU, driven by the Cortex-M core); True: Neutron-S
    hwVersion: int
    numUnits: int
    numPipes: int
    numMacs: int  # MACs per pipe


# Public figures: i.MX RT700 carries an eIQ Neutron N3-64 ("Neutron-C"), 8 pipes x 8 MACs.
_TARGETS = {
    "imxrt700": NeutronTarget(
        name="imxrt700",
        subsystem=False,
        hwVersion=HW_VERSION_N3,
        numUnits=1,
        numPipes=8,
        numMacs=8,
    ),
}


def getNeutronTarget(name: str) -> NeutronTarget:
    try:
        return _TARGETS[name]
    except KeyError:
        raise ValueError(f"eiq_neutron_sdk stand-in knows only {sorted(_TARGETS)}, not {name!r}") from None


def getNeutronTargets() -> list[NeutronTarget]:
    return list(_TARGETS.values())


class CompilationContext:
    """Holds the fields the backend sets; nothing reads them here."""

    def __init__(self):
        self.targetOpts = None
        self.compilationOpts = SimpleNamespace(
            minNumOpsPerGraph=1,
            excludeGraphPasses="",
            fetchConstantsToSRAM=False,
            dumpKernelSelectionCode=False,
            useProfiling=False,
            dumpAfterImport="",
            dumpAfterGenerate="",
            verbose=False,
        )


def convertModel(model, cctx):  # noqa: ARG001 - signature of the real SDK call
    raise NotImplementedError(
        "eiq_neutron_sdk stand-in: the Neutron converter (TFLite -> NeutronGraph microcode) is proprietary "
        "and not available"
    )
