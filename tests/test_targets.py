import pytest

from imxrt.errors import BadOption
from imxrt.targets import TARGETS, get_target


def test_imxrt700_is_neutron_n3_64_with_a_dsp_cortex_m33():
    target = get_target("imxrt700")
    assert target.npu.hw_version == "N3"
    assert (target.npu.num_pipes, target.npu.num_macs, target.npu.macs_per_cycle) == (8, 8, 64)
    assert target.npu.clock_hz == 325_000_000
    assert (target.cpu.core, target.cpu.isa) == ("cortex-m33", "dsp")
    assert target.sram_bytes == 7_680 * 1024


def test_unknown_target_is_an_error_listing_the_valid_ones():
    with pytest.raises(BadOption) as error:
        get_target("imxrt600")
    assert "imxrt600" in str(error.value)
    for name in TARGETS:
        assert name in str(error.value)
