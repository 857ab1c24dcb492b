"""Test double of NXP's ``eiq_neutron_sdk`` (see ``../README.md``); importable only inside the tests that
put its folder on the path."""

IS_TEST_DOUBLE = True
__version__ = "0.0.0+testdouble"
