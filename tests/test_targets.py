import pytest

from imxrt.cpu.isa import CORES, Isa
from imxrt.errors import BadOption
from imxrt.targets import TARGETS, get_target


def test_imxrt700_is_neutron_n3_64_with_a_dsp_cortex_m33():
    target = get_target("imxrt700")
    assert target.npu.hw_version == "N3"
    assert (target.npu.num_pipes, target.npu.num_macs, target.npu.macs_per_cycle) == (8, 8, 64)
    assert target.npu.clock_hz == 325_000_000
    assert (target.cpu.core.name, target.cpu.isa) == ("cortex-m33", Isa.DSP)
    assert target.sram_bytes == 7_680 * 1024


def test_unknown_target_is_an_error_listing_the_valid_ones():
    with pytest.raises(BadOption) as error:
        get_target("imxrt600")
    assert "imxrt600" in str(error.value)
    for name in TARGETS:
        assert name in str(error.value)


def test_imxrt700_cpu_is_the_same_chip_without_its_npu():
    chip, cpu_only = get_target("imxrt700"), get_target("imxrt700-cpu")
    assert cpu_only.npu is None
    assert (cpu_only.cpu, cpu_only.sram_bytes, cpu_only.flash_bytes) == (chip.cpu, chip.sram_bytes, chip.flash_bytes)


@pytest.mark.parametrize("core", sorted(CORES))
def test_every_cortex_m_core_is_a_cpu_only_target_on_its_own_cmsis_nn_path(core):
    target = get_target(core)
    assert target.npu is None
    assert target.cpu.core is CORES[core] and target.cpu.isa is CORES[core].isa


@pytest.mark.parametrize(("name", "isa"), [("cortex-m33", "scalar"), ("imxrt700", "scalar"), ("cortex-m55", "dsp"),
                                           ("cortex-m85", "dsp")])
def test_an_isa_override_the_core_allows_changes_only_the_isa(name, isa):
    target = get_target(name, isa)
    assert target.cpu.isa is Isa(isa)
    assert target.cpu.core is TARGETS[name].cpu.core and target.npu == TARGETS[name].npu
    assert TARGETS[name].cpu.isa is not Isa(isa)  # the registry itself is unchanged


@pytest.mark.parametrize(("name", "isa"), [("cortex-m0", "mve"), ("cortex-m0", "dsp"), ("cortex-m4", "mve"),
                                           ("cortex-m4", "scalar"), ("imxrt700", "mve"), ("cortex-m55", "scalar")])
def test_an_isa_the_core_cannot_run_is_an_error_naming_the_core_and_what_it_can_run(name, isa):
    with pytest.raises(BadOption) as error:
        get_target(name, isa)
    message = str(error.value)
    assert "--isa" in message and TARGETS[name].cpu.core.name in message
    for allowed in TARGETS[name].cpu.core.allowed:
        assert allowed.value in message


def test_an_unknown_isa_is_an_error():
    with pytest.raises(BadOption, match="--isa"):
        get_target("cortex-m33", "neon")
