"""Stand-in for ``eiq_neutron_sdk.neutron_library_utils``: target name checks only."""

from .neutron_converter import getNeutronTargets

IS_STANDIN = True


def isNeutronTarget(name: str) -> bool:
    return any(t.name == name for t in getNeutronTargets())


__all__ = ["getNeutronTargets", "isNeutronTarget"]
