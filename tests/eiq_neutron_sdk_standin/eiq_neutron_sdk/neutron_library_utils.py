"""Test double of ``eiq_neutron_sdk.neutron_library_utils``: the target list."""

from .neutron_converter import getNeutronTargets


def isNeutronTarget(name: str) -> bool:
    return any(target.name == name for target in getNeutronTargets())


__all__ = ["getNeutronTargets", "isNeutronTarget"]
