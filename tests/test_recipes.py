"""ExecuTorch's export recipe API gives the same programs as ``imxrt.compile``."""

import pytest
import torch
import torch.nn as nn
from executorch.export import ExportRecipe, export, recipe_registry

from imxrt import integrity
from imxrt.errors import BadOption
from imxrt.pipeline import CompileOptions, compile
from imxrt.recipes import CortexMRecipeType, NeutronRecipeType, recipe_for


class SmallNet(nn.Module):
    """Conv + relu, a depthwise conv, a gelu (CPU only), a mean and a linear: both devices' rules apply."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = nn.functional.gelu(self.depthwise(x))
        return self.fc(x.mean(dim=(2, 3)))


def _model_and_data():
    torch.manual_seed(0)
    model = SmallNet().eval()
    generator = torch.Generator().manual_seed(1)
    calibration = [(torch.randn(1, 3, 8, 8, generator=generator),) for _ in range(3)]
    return model, calibration


@pytest.mark.slow
@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu", "cortex-m55"])
def test_the_recipe_exports_the_program_imxrt_compile_writes(target):
    model, calibration = _model_and_data()
    ours = compile(model, calibration[0], target, calibration, CompileOptions(show_progress=False))
    session = export(model, [calibration[0]], recipe_for(target, calibration=lambda: calibration))
    assert integrity.seal(session.get_pte_buffer()) == ours.pte  # compile seals what ExecuTorch serializes


def test_the_combined_target_is_the_neutron_recipe_composed_with_the_cortex_m_recipe():
    recipe = recipe_for("imxrt700")
    (partitioner,) = recipe.lowering_recipe.partitioners
    assert type(partitioner).__name__ == "NpuPartitioner"
    assert len(recipe.quantization_recipe.quantizers) == 2  # one per device, composed by ExecuTorch
    assert recipe_for("imxrt700-cpu").lowering_recipe.partitioners is None


def test_both_backends_are_registered_and_recipes_come_from_the_registry():
    assert {"imxrt_neutron", "imxrt_cortex_m"} <= set(recipe_registry.list_backends())
    recipe = ExportRecipe.get_recipe(CortexMRecipeType.INT8, target="cortex-m55", isa="dsp")
    assert recipe.name == "cortex-m55_cortex_m_dsp"
    assert ExportRecipe.get_recipe(NeutronRecipeType.INT8).lowering_recipe.partitioners


def test_recipe_options_are_checked_like_the_command_line():
    with pytest.raises(BadOption, match="--isa"):
        ExportRecipe.get_recipe(CortexMRecipeType.INT8, target="cortex-m0", isa="mve")
    with pytest.raises(BadOption, match="--target"):
        recipe_for("imxrt600")
    with pytest.raises(BadOption, match="group_size"):
        ExportRecipe.get_recipe(CortexMRecipeType.INT8, group_size=32)
