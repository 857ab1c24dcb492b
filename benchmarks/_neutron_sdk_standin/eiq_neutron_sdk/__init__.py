"""Stand-in for NXP's proprietary ``eiq_neutron_sdk`` (target query only, no converter).

See ``../README.md``. Loaded into ``sys.modules`` by ``benchmarks/upstream_nxp.py`` when the real SDK is
absent.
"""

IS_STANDIN = True
__version__ = "0.0.0+standin"


def merge_kernel_selection_files(files, output):  # noqa: ARG001 - signature of the real SDK helper
    raise NotImplementedError(
        "eiq_neutron_sdk stand-in: kernel selection code comes from the proprietary converter"
    )
