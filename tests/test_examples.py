"""Every examples/*.py SOURCE follows the SOURCE contract `imxrt compile SOURCE` relies on.

Contract: `model()` returns an nn.Module in eval mode, `example_inputs()` a tuple of tensors it runs on,
and the optional `calibration_inputs()` an iterable of tuples shaped like the example inputs. All three
are deterministic, so two compiles of one example give the same bytes.
"""

from pathlib import Path

import pytest
import torch

from imxrt.source import import_file

pytestmark = pytest.mark.slow  # every test here builds, calibrates or compiles the bundled examples

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PROGRAMS = {"qat_ddp.py"}  # scripts to run (torchrun), not SOURCEs; tests/test_qat.py runs them
SOURCES = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("_") and p.name not in PROGRAMS)

# The bundled examples and the input each must take; other files in examples/ get the generic checks.
INPUT_SHAPES = {
    "mobilenet_v2": (1, 3, 96, 96),
    "channels_last": (1, 3, 96, 96),
    "ds_cnn": (1, 1, 49, 10),
    "mobilenet_v1": (1, 3, 96, 96),
    "resnet8": (1, 3, 32, 32),
    "autoencoder": (1, 640),
}


def load(path: Path):
    """Load an example the way the CLI does: by file path, not as a package member."""
    return import_file(str(path), path)


def signature(inputs):
    return [(x.shape, x.dtype, x.stride()) for x in inputs]


def test_bundled_examples_exist():
    assert set(INPUT_SHAPES) <= {p.stem for p in SOURCES}


class Example:
    """A loaded example with its model built once (building runs BN warm-up passes)."""

    def __init__(self, path: Path) -> None:
        self.name, self.module = path.stem, load(path)
        self.net = self.module.model()
        self.inputs = self.module.example_inputs()


@pytest.fixture(scope="module", params=SOURCES, ids=lambda p: p.stem)
def example(request):
    return Example(request.param)


def test_model_in_eval_mode_runs_on_example_inputs(example):
    net, inputs = example.net, example.inputs
    assert isinstance(net, torch.nn.Module)
    assert not any(m.training for m in net.modules())
    assert isinstance(inputs, tuple) and all(isinstance(x, torch.Tensor) for x in inputs)
    with torch.no_grad():
        out = net(*inputs)
    assert torch.isfinite(out).all()
    if example.name in INPUT_SHAPES:
        assert [tuple(x.shape) for x in inputs] == [INPUT_SHAPES[example.name]]


def test_deterministic(example):
    first, second = example.net.state_dict(), example.module.model().state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert all(
        torch.equal(a, b) for a, b in zip(example.inputs, example.module.example_inputs(), strict=True)
    )


def test_batch_norm_is_not_the_identity(example):
    """BN folding must have work to do: running statistics moved away from (mean 0, var 1). A mean may be
    exactly 0 where its values are zero-mean by construction (a bias-free layer reading a batch norm's
    normalized output: ``_seeded.refresh_batch_norm`` clears the rounding noise of its sum), not every mean."""
    norms = [m for m in example.net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        pytest.skip("no BatchNorm in this model")
    for bn in norms:
        assert (bn.running_var - 1).abs().max() > 0
    assert any(bn.running_mean.abs().max() > 0 for bn in norms)


def test_calibration_inputs_match_example_inputs(example):
    if not hasattr(example.module, "calibration_inputs"):
        pytest.skip("no calibration_inputs()")
    samples = list(example.module.calibration_inputs())
    assert 16 <= len(samples) <= 32
    expected = signature(example.inputs)
    for sample in samples:
        assert isinstance(sample, tuple) and signature(sample) == expected
    again = list(example.module.calibration_inputs())
    assert all(
        torch.equal(a, b) for s, t in zip(samples, again, strict=True) for a, b in zip(s, t, strict=True)
    )
    assert not torch.equal(samples[0][0], samples[1][0])


def test_mobilenet_v2_shape():
    """Eight inverted residual blocks, three with a residual add, ten classes."""
    module = load(EXAMPLES / "mobilenet_v2.py")
    net = module.model()
    blocks = [m for m in net.modules() if isinstance(m, module.InvertedResidual)]
    assert len(blocks) == 8
    assert sum(b.residual for b in blocks) == 3
    with torch.no_grad():
        assert net(*module.example_inputs()).shape == (1, 10)


def test_channels_last_is_mobilenet_v2_in_nhwc():
    base, nhwc = load(EXAMPLES / "mobilenet_v2.py"), load(EXAMPLES / "channels_last.py")
    net = nhwc.model()
    convs = [m.weight for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(w.is_contiguous(memory_format=torch.channels_last) for w in convs)
    (x,) = nhwc.example_inputs()
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    torch.testing.assert_close(x, base.example_inputs()[0], rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(net(x), base.model()(*base.example_inputs()))


def test_example_exports(example):
    """`torch.export` is the compiler's first step; every example must get through it."""
    torch.export.export(example.net, example.inputs)


def test_model_leaves_global_random_state_alone(example):
    before = torch.random.get_rng_state()
    example.module.model()
    assert torch.equal(torch.random.get_rng_state(), before)
