"""Integer and boolean model inputs: token indices and masks are the program's inputs as they are, and the
lookups reading them (embedding, index_select, masked_fill, index_put) run as their portable kernels on
int8 values, output sharing the table's qparams; a mask computed from an int8 tensor (``x > t``) is the
comparison of its int8 values with an integer threshold.

The models are those of ExecuTorch's backend suite (``backends/test/suite/operators/test_embedding.py``,
``test_masked_fill.py``, ``test_index_select.py``, ``test_index_put.py``) and a token classifier
(``examples/intent.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import program_checks
import pytest
import torch
from torch import nn

import imxrt.runtime
from imxrt.cli import EXIT_USER_ERROR, main
from imxrt.errors import BadInput, BadModel
from imxrt.pipeline import CompileOptions, compile
from imxrt.runtime.inputs import quantize_inputs
from imxrt.source import import_file

pytestmark = pytest.mark.slow  # compiles

TARGETS = ("imxrt700", "imxrt700-cpu")
INTENT = Path(__file__).resolve().parent.parent / "examples" / "intent.py"


class Embedding(nn.Module):
    def __init__(self, num_embeddings=100, embedding_dim=50):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)

    def forward(self, x):
        return self.embedding(x)


class MaskedFill(nn.Module):
    def __init__(self, value):
        super().__init__()
        self.value = value

    def forward(self, x, mask):
        return x.masked_fill(mask, self.value)


class MaskedFillOfComputedMask(nn.Module):
    """The mask computed in the graph from the input (an attention-style ``x > t``)."""

    def __init__(self, compare, threshold, value):
        super().__init__()
        self.compare, self.threshold, self.value = compare, threshold, value

    def forward(self, x):
        return x.masked_fill(self.compare(x, self.threshold), self.value)


class IndexSelect(nn.Module):
    def __init__(self, dim=0):
        super().__init__()
        self.dim = dim

    def forward(self, x, indices):
        return torch.index_select(x, self.dim, indices)


class IndexPut(nn.Module):
    def forward(self, x, rows, columns, values):
        return torch.index_put(x, (rows, columns), values)


def _rows(count: int):
    """Two distinct indices below ``count`` (index_put with a repeated index has no defined result)."""
    return lambda g: torch.randperm(count, generator=g)[:2]


# name: (model, a function of a generator making one input sample)
CASES = {
    "embedding_5x3": (lambda: Embedding(5, 3), lambda g: (torch.randint(0, 5, (2, 8), generator=g),)),
    "embedding_1000x50": (lambda: Embedding(1000, 50), lambda g: (torch.randint(0, 1000, (2, 4), generator=g),)),
    "embedding_1d_indices": (lambda: Embedding(), lambda g: (torch.randint(0, 100, (5,), generator=g),)),
    "embedding_3d_indices": (lambda: Embedding(), lambda g: (torch.randint(0, 100, (2, 3, 4), generator=g),)),
    "masked_fill_0": (lambda: MaskedFill(0.0), lambda g: (
        torch.rand(16, 32, generator=g), torch.randint(0, 2, (16, 32), generator=g).bool())),
    "masked_fill_minus_5": (lambda: MaskedFill(-5.0), lambda g: (
        torch.randn(16, 32, generator=g), torch.randint(0, 2, (16, 32), generator=g).bool())),
    "masked_fill_int_1": (lambda: MaskedFill(1), lambda g: (
        torch.randn(16, 32, generator=g), torch.randint(0, 2, (16, 32), generator=g).bool())),
    "masked_fill_3d": (lambda: MaskedFill(0.0), lambda g: (
        torch.randn(4, 8, 16, generator=g), torch.randint(0, 2, (4, 8, 16), generator=g).bool())),
    "masked_fill_broadcast_mask": (lambda: MaskedFill(0.0), lambda g: (
        torch.randn(16, 32, generator=g), torch.randint(0, 2, (32,), generator=g).bool())),
    "masked_fill_where_x_gt": (lambda: MaskedFillOfComputedMask(torch.gt, 0.3, -1.0), lambda g: (
        torch.randn(16, 32, generator=g),)),
    "masked_fill_where_x_le": (lambda: MaskedFillOfComputedMask(torch.le, -0.5, 2.0), lambda g: (
        torch.randn(16, 32, generator=g),)),
    "masked_fill_where_never": (lambda: MaskedFillOfComputedMask(torch.lt, -100.0, 0.0), lambda g: (
        torch.randn(16, 32, generator=g),)),
    "index_select_dim_1": (lambda: IndexSelect(1), lambda g: (torch.randn(5, 3, generator=g), _rows(3)(g))),
    "index_select_dim_2": (lambda: IndexSelect(2), lambda g: (torch.randn(3, 4, 5, generator=g), _rows(5)(g))),
    "index_put_2d": (lambda: IndexPut(), lambda g: (
        torch.randn(5, 3, 2, generator=g), _rows(5)(g), _rows(3)(g), torch.randn(2, 2, generator=g))),
}
LOOKUP_OPS = {"aten.embedding.default", "aten.index_select.default", "aten.masked_fill.Scalar",
              "aten.index_put.default"}


def _samples(make, count: int, seed: int) -> list[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(seed)
    return [make(generator) for _ in range(count)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_backend_suite_lookups_run_in_int8_on_the_cpu_and_match_the_quantized_program(case, target):
    build, make = CASES[case]
    torch.manual_seed(0)
    model = build().eval()
    calibration = _samples(make, 4, seed=1)
    result = compile(model, calibration[0], target, calibration, CompileOptions(show_progress=False))
    lookups = [op for op in result.report["ops"] if op["op"] in LOOKUP_OPS]
    assert lookups, result.report["ops"]
    assert all(op["execution"] == "cpu int8" and op["kernel"].startswith(op["op"]) for op in lookups), lookups
    assert result.report["summary"]["ops_cpu_float"] == 0
    for info, given in zip(result.io["inputs"], calibration[0], strict=True):
        if not given.is_floating_point():  # indices and masks: the program's inputs as they are
            assert (info["dtype"], info["scale"]) == (str(given.dtype).removeprefix("torch."), None)
    for inputs in _samples(make, 2, seed=2):
        program_checks.check_case(result, inputs, model)


@pytest.mark.parametrize("case", ["embedding_3d_indices", "index_put_2d", "index_select_dim_2",
                                  "masked_fill_broadcast_mask", "masked_fill_where_x_gt", "masked_fill_where_never"])
def test_with_int8_io_the_stock_runtime_runs_the_lookups_to_the_host_runtime_bytes(case):
    """With --io int8 such a program is the lookup alone on its portable kernel: ExecuTorch's own runtime (its
    pybindings, the portable kernels) takes the int8 table and the indices or mask and gives the host
    runtime's bytes."""
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    build, make = CASES[case]
    torch.manual_seed(0)
    calibration = _samples(make, 4, seed=1)
    result = compile(build().eval(), calibration[0], "imxrt700-cpu", calibration,
                     CompileOptions(show_progress=False, io="int8"))
    assert {op["execution"] for op in result.report["ops"]} == {"cpu int8"}
    inputs = quantize_inputs([x.numpy() for x in _samples(make, 1, seed=2)[0]], result.io["inputs"])
    ours = imxrt.runtime.load(result.pte).forward(*inputs)
    stock = _load_for_executorch_from_buffer(result.pte).forward([torch.from_numpy(x) for x in inputs])
    assert len(ours) == len(stock) and all(np.array_equal(a, b.numpy()) for a, b in zip(ours, stock, strict=True))


def test_a_fill_far_outside_the_data_saturates_instead_of_widening_its_range():
    """An attention-style fill of -1e4: the output keeps the input's qparams (the fill becomes -128), so the
    values kept are stored as finely as without the fill."""
    generator = torch.Generator().manual_seed(0)
    samples = [(torch.randn(16, 32, generator=generator), torch.randint(0, 2, (16, 32), generator=generator).bool())
               for _ in range(3)]
    qparams = {}
    for value in (0.0, -1e4):
        result = compile(MaskedFill(value).eval(), samples[0], "imxrt700-cpu", samples,
                         CompileOptions(show_progress=False))
        ends = result.io["inputs"][:1] + result.io["outputs"]
        qparams[value] = [(info["scale"], info["zero_point"]) for info in ends]
        program_checks.assert_pte_matches_quantized(result, samples[2])
    assert qparams[-1e4] == qparams[0.0] and qparams[0.0][0] == qparams[0.0][1]
    (filled,) = imxrt.runtime.load(result.pte).forward(*(x.numpy() for x in samples[2]))
    scale, zero_point = qparams[-1e4][1]
    assert set(filled[samples[2][1].numpy()].tolist()) == {float(np.float32((-128 - zero_point) * np.float32(scale)))}


def test_index_put_that_accumulates_stays_float_and_says_why():
    class Accumulate(nn.Module):
        def forward(self, x, rows, values):
            return torch.index_put(x, (rows,), values, accumulate=True)

    samples = [(torch.randn(5, 2), torch.tensor([0, 2]), torch.randn(2, 2)) for _ in range(2)]
    result = compile(Accumulate().eval(), samples[0], "imxrt700-cpu", samples, CompileOptions(show_progress=False))
    (put,) = [op for op in result.report["ops"] if op["op"] == "aten.index_put.default"]
    assert put["execution"] == "cpu float" and "accumulate=True adds values" in put["reason"]
    program_checks.assert_pte_matches_quantized(result, samples[1])


@pytest.mark.parametrize("target", TARGETS)
def test_a_tuple_of_index_tensors_is_the_programs_inputs_in_order(target):
    """ExecuTorch's backend suite passes index_put's indices as one tuple argument: the program takes its tensors
    as inputs of their own, in order (as torch.export flattens them), and the host runtime takes the tuple too."""
    class IndexPutTuple(nn.Module):
        def forward(self, x, indices, values):
            return torch.index_put(x, indices, values)

    generator = torch.Generator().manual_seed(0)
    samples = [(torch.randn(5, 3, generator=generator), (_rows(5)(generator), _rows(3)(generator)),
                torch.randn(2, generator=generator)) for _ in range(3)]
    result = compile(IndexPutTuple().eval(), samples[0], target, samples, CompileOptions(show_progress=False))
    assert [info["dtype"] for info in result.io["inputs"]] == ["float32", "int64", "int64", "float32"]
    assert result.report["summary"]["ops_cpu_float"] == 0
    program_checks.check_case(result, samples[2], IndexPutTuple())
    flat = [samples[2][0], *samples[2][1], samples[2][2]]
    assert all(np.array_equal(a, b) for a, b in zip(imxrt.runtime.load(result.pte).forward(*flat),
                                                    imxrt.runtime.load(result.pte).forward(*samples[2]), strict=True))


def test_a_tuple_holding_a_number_is_refused_naming_it():
    with pytest.raises(BadModel, match=r"example input 1 is a tuple of 2 that is not all tensors"):
        compile(nn.Identity(), (torch.randn(2), (torch.tensor([0]), 3)), "imxrt700-cpu",
                options=CompileOptions(show_progress=False))


@pytest.fixture(scope="module")
def intent():
    return import_file(str(INTENT), INTENT)


@pytest.fixture(scope="module")
def intent_model(intent):
    return intent.model()


@pytest.mark.parametrize("target", TARGETS)
def test_a_token_classifier_is_int8_with_its_token_ids_as_input_and_decides_as_the_float_model(
        intent, intent_model, target):
    calibration = list(intent.calibration_inputs())
    result = compile(intent_model, intent.example_inputs(), target, calibration, CompileOptions(show_progress=False))
    assert [(i["dtype"], i["scale"]) for i in result.io["inputs"]] == [("int64", None)]
    assert result.report["summary"]["ops_cpu_float"] == 0, [
        op for op in result.report["ops"] if op["execution"] == "cpu float"]
    (embedding,) = [op for op in result.report["ops"] if op["op"] == "aten.embedding.default"]
    assert embedding["execution"] == "cpu int8"
    program = imxrt.runtime.load(result.pte)
    tokens, _ = intent.utterances(8, seed=5)
    with torch.no_grad():
        expected = intent_model(tokens).argmax(1)
    decided = [int(np.argmax(program.forward(row.unsqueeze(0).numpy())[0])) for row in tokens]
    assert decided == expected.tolist()
    program_checks.check_case(result, (tokens[:1],), intent_model)


@pytest.fixture(scope="module")
def intent_program(tmp_path_factory):
    folder = tmp_path_factory.mktemp("intent")
    assert main(["compile", str(INTENT), "--target", "imxrt700-cpu", "-o", str(folder / "out"), "--quiet",
                 "--bundle", "2"]) == 0
    return folder


def test_imxrt_run_takes_int64_token_ids(intent, intent_program, capsys):
    tokens = intent.utterances(1, seed=9)[0].numpy()
    np.save(intent_program / "tokens.npy", tokens)
    pte = intent_program / "out" / "model.pte"
    assert main(["run", str(pte), "--input", str(intent_program / "tokens.npy"),
                 "--output-dir", str(intent_program / "o")]) == 0
    (expected,) = imxrt.runtime.load(pte).forward(tokens)
    assert np.array_equal(np.load(intent_program / "o" / "output_0.npy"), expected)
    assert capsys.readouterr().out.startswith("output 0: shape (1, 4) float32 crc32 ")


def test_imxrt_run_refuses_float_data_for_token_ids_saying_what_it_takes(intent_program, capsys):
    np.save(intent_program / "floats.npy", np.zeros((1, 10), np.float32))
    status = main(["run", str(intent_program / "out" / "model.pte"), "--input", str(intent_program / "floats.npy")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == EXIT_USER_ERROR and len(err) == 1
    assert "expects shape (1, 10) int64, got shape (1, 10) float32; it takes integer indices" in err[0]
    assert "numpy.int64" in err[0]


def test_a_bundle_holds_int64_token_ids_and_its_cases_check(intent_program, capsys):
    """``--bundle``: the test cases are calibration samples, their token ids stored as int64."""
    assert main(["run", str(intent_program / "out" / "model.bpte")]) == 0
    assert "all 2 test case(s) give the bundled outputs exactly" in capsys.readouterr().out


def test_a_token_id_beyond_the_table_is_a_bad_input_not_a_damaged_file(intent, intent_program):
    program = imxrt.runtime.load(intent_program / "out" / "model.pte")
    tokens = intent.utterances(1, seed=9)[0].numpy()
    tokens[0, 3] = intent.VOCABULARY  # one past the last row, which the device's kernel refuses too
    with pytest.raises(BadInput, match=r"aten::embedding.out.*index within the model's tables"):
        program.forward(tokens)
