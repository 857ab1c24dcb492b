"""Defects the conformance suite (benchmarks/conformance.py: ExecuTorch's own NXP and Cortex-M test models)
found, each as the smallest model that showed it, on both targets."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from program_checks import assert_pte_matches_quantized, check_case, odd_dim_orders

import imxrt.runtime
from imxrt.kernels import activations
from imxrt.npu.compilers.reference import litert_ops
from imxrt.pipeline import CompileOptions, compile

TARGETS = ("imxrt700", "imxrt700-cpu")


def _compile(model, shapes, target, seed=0):
    generator = torch.Generator().manual_seed(seed)
    cal = [tuple(torch.randn(s, generator=generator) for s in shapes) for _ in range(8)]
    result = compile(model.eval(), cal[0], target, cal, CompileOptions(show_progress=False))
    return result, cal


class LinearTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, y):
        return self.fc(x), self.fc(10 * y)


@pytest.mark.parametrize("target", TARGETS)
def test_a_layer_applied_twice_reads_each_bias_at_its_own_scale(target):
    """The second use's input scale is ~10x the first's: a bias shared at the first use's s_in * s_w was
    off by about a quarter of the second output's range."""
    torch.manual_seed(0)
    model = LinearTwice()
    result, cal = _compile(model, [(1, 8), (1, 8)], target)
    for inputs in cal:
        assert_pte_matches_quantized(result, inputs)
        second = model(*inputs)[1].detach().numpy()
        scale = result.io["outputs"][1]["scale"]
        ours = imxrt.runtime.load(result.pte).forward(*inputs)[1]
        assert np.abs(ours - second).max() <= 3 * scale


@pytest.mark.parametrize("target", TARGETS)
def test_a_grouped_transposed_conv_holds_only_dim_orders_kernels_take(target):
    """Its [4, 1, 3, 3] weight came out of a transpose with strides (9, 36, 3, 1), serialized as dim order
    [1, 0, 2, 3]; ExecuTorch's dequantize_per_channel wrote out of bounds on it and the process died
    (``double free or corruption``) after a few forwards."""
    torch.manual_seed(0)
    result, cal = _compile(nn.ConvTranspose2d(4, 4, 3, groups=4, bias=False), [(1, 4, 6, 6)], target)
    assert odd_dim_orders(result.pte) == []
    for inputs in cal:
        assert_pte_matches_quantized(result, inputs)


CONV1D_FORMS = {
    "default": lambda: nn.Conv1d(4, 8, 3),
    "no_bias": lambda: nn.Conv1d(4, 8, 3, bias=False),
    "stride_2": lambda: nn.Conv1d(4, 8, 3, stride=2),
    "dilation_2": lambda: nn.Conv1d(4, 8, 3, dilation=2),
    "padding_1": lambda: nn.Conv1d(4, 8, 3, padding=1),
    "same_odd": lambda: nn.Conv1d(4, 8, 3, padding="same"),
    "same_even": lambda: nn.Conv1d(4, 8, 4, padding="same", dilation=1),
    "valid": lambda: nn.Conv1d(4, 8, 5, padding="valid"),
    "conv2d_valid": lambda: nn.Conv2d(4, 8, 3, padding="valid"),
    "conv2d_same_even": lambda: nn.Conv2d(4, 8, (2, 4), padding="same"),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("form", sorted(CONV1D_FORMS))
def test_every_conv_argument_form_compiles_to_int8(form, target):
    """Arguments are read from the schema: conv1d with defaults was refused ("non-positive dilation/groups",
    stride and dilation landed in the wrong positions), string padding stayed float (conv1d) or raised an
    IndexError in the LiteRT converter (conv2d "valid", one-element padding)."""
    torch.manual_seed(0)
    model = CONV1D_FORMS[form]()
    shape = (1, 4, 9, 10) if "conv2d" in form else (1, 4, 20)
    result, cal = _compile(model, [shape], target)
    summary = result.report["summary"]
    assert summary["ops_cpu_float"] == 0
    if target == "imxrt700":
        assert summary["partitions"] == 1 and summary["npu_mac_fraction"] == 1.0
    for inputs in cal[:3]:
        check_case(result, inputs)


UNBOUNDED_CLAMPS = {
    "hardtanh_0_inf": lambda: nn.Hardtanh(0.0, float("inf")),
    "hardtanh_-inf_1": lambda: nn.Hardtanh(float("-inf"), 1.0),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("clamp", sorted(UNBOUNDED_CLAMPS))
def test_an_infinite_clamp_bound_is_no_bound(clamp, target):
    """Quantizing the infinite bound raised OverflowError on imxrt700-cpu; the int8 range bounds it."""
    torch.manual_seed(0)
    result, cal = _compile(nn.Sequential(nn.Linear(4, 4), UNBOUNDED_CLAMPS[clamp]()), [(1, 4)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:3]:
        check_case(result, inputs)



@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("slope", [float("inf"), float("-inf")])
def test_a_leaky_relu_slope_too_steep_for_a_multiplier_saturates_every_negative_code(slope, target):
    """alpha = inf (one of upstream's NXP test cases): its multiplier s_in * alpha / s_out has no Q31 form,
    so the CPU lowering raised an internal error and the host runtime refused the NPU partition (TFLM's own
    QuantizeMultiplier is undefined on it). Every clearly negative input saturates, as in float."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 4, 1), nn.LeakyReLU(slope))
    result, cal = _compile(model, [(1, 4, 6, 6)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    output = result.io["outputs"][0]
    extreme = output["scale"] * ((-128 if slope > 0 else 127) - output["zero_point"])
    program = imxrt.runtime.load(result.pte)
    for inputs in cal[:3]:
        check_case(result, inputs)
        negative = model[0](*inputs).detach().numpy() < -0.1
        assert negative.any()
        assert np.all(program.forward(*inputs)[0][negative] == np.float32(extreme))


@pytest.mark.parametrize("slope", [1.0, -1.0])
def test_a_finite_leaky_relu_multiplier_past_q31_saturates_like_an_infinite_one(slope):
    """The sibling: a finite slope whose multiplier needs a shift past 31 (a tiny negative input range)."""
    s_in, s_out = 1e-6, 1.0
    steep = activations.leaky_relu_lut(s_in, 0, s_out, 0, slope * 2.0**45 / s_in)
    infinite = activations.leaky_relu_lut(s_in, 0, s_out, 0, slope * float("inf"))
    assert np.array_equal(steep.table, infinite.table)
    assert set(steep.table[:128]) == {-128 if slope > 0 else 127}  # every q < zero point = 0
    assert activations.saturating_leaky_alpha(s_in, s_out, 0.3) == 0.3
    with pytest.raises(ValueError, match="NaN"):
        activations.saturating_leaky_alpha(s_in, s_out, float("nan"))



class DeadRelu(nn.Module):
    def forward(self, x):
        return torch.relu(x - 100.0), torch.relu(x - x)


@pytest.mark.parametrize("target", TARGETS)
def test_an_activation_calibration_saw_only_as_zero_takes_its_inputs_range(target):
    """relu(x - 100) on N(0, 1) data is 0 on every sample: the observer's scale was float32's epsilon, which
    gave the fused SUB an output multiplier of about 10**7 and TFLM aborted the process preparing it (its
    ADD/SUB take only multipliers below 1)."""
    result, cal = _compile(DeadRelu(), [(1, 4, 6, 6)], target)
    input_scale = result.io["inputs"][0]["scale"]
    assert [output["scale"] for output in result.io["outputs"]] == [input_scale, input_scale]
    for inputs in cal[:2]:
        check_case(result, inputs)


def _int8_on_the_cpu(result, op: str, target: str, *reason_words: str) -> dict:
    """The report row of ``op``: in int8 on the CPU, and on imxrt700 (where it could have been delegated) for a
    reason holding every one of ``reason_words``."""
    [row] = [row for row in result.report["ops"] if row["op"] == op]
    assert row["placement"] == "cpu" and row["execution"] == "cpu int8"
    if target == "imxrt700":
        for words in reason_words:
            assert words in row["reason"]
    return row


class TinyDifference(nn.Module):
    """y - (y + 1e-6): an output range about 1e-6 wide from inputs about 100 wide."""

    def forward(self, x):
        y = torch.relu(x * 100.0)
        return y - (y + 1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_a_sub_whose_output_scale_tflm_cannot_prepare_runs_on_the_cpu(target):
    """An output scale below the larger input scale / 2^19 gives TFLM's ADD / SUB an output multiplier of 1
    or more, which it refuses to prepare by aborting the process: such a SUB was delegated and TFLM aborted
    on the partition. The SUB now runs on the CPU, its reason naming TFLM's rule; the rest stays on the NPU."""
    result, cal = _compile(TinyDifference(), [(1, 4, 6, 6)], target)
    _int8_on_the_cpu(result, "aten.sub.Tensor", target, "output scale must exceed the larger input scale / 2^19",
                     "output multiplier 25.7")
    if target == "imxrt700":
        assert result.report["summary"]["ops_npu"] == 3  # relu, mul, add
    for inputs in cal[:2]:
        check_case(result, inputs)


class WideSoftmax(nn.Module):
    """A 600-way softmax, as a classifier head over many classes (ImageNet's 1000) has."""

    def forward(self, x):
        return torch.softmax(torch.relu(x), -1)


@pytest.mark.parametrize("target", TARGETS)
def test_a_softmax_row_tflm_cannot_sum_runs_on_the_cpu(target):
    """TFLM's int8 SOFTMAX aborts the process when a row's exponentials sum to 512 or more: a 600-value row
    of equal values (here relu of an input at or below 0) was delegated and TFLM aborted on it. The
    softmax now runs on the CPU, its reason naming TFLM's limit, and the program runs such an input."""
    result, cal = _compile(WideSoftmax(), [(1, 600)], target)
    _int8_on_the_cpu(result, "aten._softmax.default", target, "at most 511 values per row as well")
    for inputs in [(-cal[0][0].abs(),), cal[1]]:
        check_case(result, inputs)
    output = imxrt.runtime.load(result.pte).forward(-cal[0][0].abs())[0]
    assert np.allclose(output, 1 / 600, atol=1 / 256)


def test_the_lowering_refuses_to_emit_an_add_tflm_cannot_prepare():
    """The capability table sees the cluster's qparams; what the lowering itself emits (a quantized constant
    operand, SUB(0, x) for neg) is checked where every operator is made, against TFLM's own arithmetic."""
    from imxrt.npu.litert import tflm_limits
    from imxrt.npu.litert.ir import PerChannel, PerTensor, Tensor

    def int8(scale):
        return Tensor("t", (1, 4), np.dtype(np.int8), PerTensor(scale, 0))

    limit = 0.5 / 2**19  # an input scale of 0.5 needs an output scale above 9.5e-7
    assert tflm_limits.problem("ADD", [int8(0.5), int8(0.01)], [int8(limit * 1.001)]) is None
    assert "needs an output scale above 9.54e-07" in tflm_limits.problem("SUB", [int8(0.01), int8(0.5)],
                                                                          [int8(limit)])
    assert tflm_limits.problem("MUL", [int8(0.5), int8(0.5)], [int8(0.25 / 2**15 * 1.001)]) is None
    assert "would shift past int32" in tflm_limits.problem("MUL", [int8(0.5), int8(0.5)], [int8(0.25 / 2**15)])
    row = Tensor("t", (4, 512), np.dtype(np.int8), PerTensor(1 / 256, -128))
    assert "row of 512 values" in tflm_limits.problem("SOFTMAX", [int8(0.1)], [row])
    # FULLY_CONNECTED: the bias scale within 0.02 output steps of s_in * s_w, and a per-channel filter unchecked
    def bias(scale):
        return Tensor("b", (4,), np.dtype(np.int32), PerTensor(scale, 0))

    product = 0.5 * 0.25
    above = float(np.nextafter(np.float32(product), np.float32(1)))  # the float32 after s_in * s_w
    diff = above - product
    assert tflm_limits.problem("FULLY_CONNECTED", [int8(0.5), int8(0.25), bias(above)], [int8(diff / 0.019)]) is None
    assert "within 0.02 of an output step" in tflm_limits.problem(
        "FULLY_CONNECTED", [int8(0.5), int8(0.25), bias(above)], [int8(diff / 0.021)])
    per_channel = Tensor("w", (4, 8), np.dtype(np.int8), PerChannel((0.25,) * 4, 0))
    assert tflm_limits.problem("FULLY_CONNECTED", [int8(0.5), per_channel, bias(above)], [int8(diff / 0.021)]) is None


class CatWithItsOwnSlice(nn.Module):
    def forward(self, x):
        return torch.cat([x[:, 4:], x], 1).mean((2, 3))


@pytest.mark.parametrize("target", TARGETS)
def test_a_cat_of_a_tensor_and_its_own_slice_quantizes(target):
    """cat([x[:, 4:], x]): the slice shares x's qparams and the cat shares its first input's; pt2e's
    union-find recursed until Python's limit resolving the chain (an internal error in the quantize stage).
    Every shared spec now names the concrete one its chain ends in."""
    result, cal = _compile(CatWithItsOwnSlice(), [(1, 8, 4, 4)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


class TinyHardswish(nn.Module):
    def forward(self, x):
        return nn.functional.hardswish(x * 1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_hardswish_of_a_tiny_range_is_tflm_exact(target):
    """An input scale near 1e-8 gives HARD_SWISH a 'reluish' multiplier exponent of -16 or below, where TFLM's
    int16 RoundingDivideByPOT truncates its mask to int16 (-1): every value rounds to 1 or -1. The host
    runtime divided exactly and was 1 LSB off TFLM on about a quarter of the values."""
    result, cal = _compile(TinyHardswish(), [(1, 4, 3, 3)], target)
    for inputs in cal[:3]:
        check_case(result, inputs)


class Hardswish(nn.Module):
    def forward(self, x):
        return nn.functional.hardswish(x)


@pytest.mark.parametrize("target", TARGETS)
def test_a_hardswish_whose_output_range_tflm_cannot_prepare_compiles(target):
    """Inputs over [-10, -2.99] give hardswish outputs within 0.005 of 0: an output scale below the input scale
    / 128, a multiplier TFLM refuses (its output exponent must be at most 0). The NPU lowering emitted the
    HARD_SWISH (the host runtime then refused the file as corrupted) and the CPU lowering's table asserted
    (an internal error). The op now runs on the CPU with the function's own rounded table."""
    calibration = [(torch.linspace(-10.0, -2.99, 36).reshape(1, 4, 3, 3) + 0.001 * k,) for k in range(4)]
    result = compile(Hardswish().eval(), calibration[0], target, calibration, CompileOptions(show_progress=False))
    _int8_on_the_cpu(result, "aten.hardswish.default", target, "output scale must exceed the input scale / 128")
    for inputs in calibration[:2]:
        check_case(result, inputs)


class WideGate(nn.Module):
    """sigmoid or tanh of inputs thousands wide: an int8 input scale past 8."""

    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x):
        return self.function(x * 1000.0)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("function", [torch.sigmoid, torch.tanh], ids=["sigmoid", "tanh"])
def test_a_sigmoid_or_tanh_of_an_input_scale_past_8_keeps_zero_at_its_value(function, target):
    """From an input scale of 8 on, TFLM's int8 LOGISTIC / TANH saturate every value, the zero point to the low
    end (tanh(0) = -1, sigmoid(0) = 0), and never rescale one. The NPU lowering emitted the op; the host
    runtime then rescaled every value, shifted past int32 and called the file corrupted, and the CPU
    lowering's table raised (an internal error). The op now runs on the CPU with the function's own table.
    Found by random models (a tanh after a scale by 387)."""
    result, cal = _compile(WideGate(function), [(1, 4, 3, 3)], target)
    name = "aten.sigmoid.default" if function is torch.sigmoid else "aten.tanh.default"
    _int8_on_the_cpu(result, name, target, "an input scale below 8")
    for inputs in cal[:2]:
        check_case(result, inputs)
    (zero,) = imxrt.runtime.load(result.pte).forward(torch.zeros(1, 4, 3, 3))
    assert np.array_equal(zero, function(torch.zeros(1, 4, 3, 3)).numpy())


class BiasBeyondInt32(nn.Module):
    """A linear layer on inputs about 1e-6 wide (an input scale at float32's epsilon, s_in * s_w about 1e-9):
    its bias of +-3 is past 2^31 steps."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        with torch.no_grad():
            self.fc.weight.copy_(torch.tensor([[1.0, -0.5, 0.25, -1.0], [0.5, 1.0, -1.0, 0.75]]))
            self.fc.bias.copy_(torch.tensor([3.0, -3.0]))

    def forward(self, x):
        return self.fc(x * 1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_a_bias_past_int32_keeps_its_sign_and_leaves_the_accumulator_room(target):
    """pt2e clamps and rounds the int32 bias in float32, where INT32_MAX reads as 2^31: the +3 bias became
    -2^31 when cast, so the output came out near -2 instead of +2 (the clamped +3), the .pte and the quantized
    program agreeing on the wrong sign; and a bias at -2^31 overflowed TFLM's int32 accumulator.
    The bias now stops at ``specs.bias_limit``: positive stays positive, and the products fit beside it."""
    result, cal = _compile(BiasBeyondInt32(), [(1, 4)], target)
    for inputs in cal[:3]:
        check_case(result, inputs)
        output = imxrt.runtime.load(result.pte).forward(*inputs)[0]
        assert output[0, 0] > 1.5 and output[0, 1] < -1.5  # the float model gives +-3: clamped, not flipped


class DeadRelu6OfWideValues(nn.Module):
    """relu6 of values at most 0 and as low as -10^4: its output is 0 (scale float32's epsilon), its input's
    scale about 40."""

    def forward(self, x):
        y = -(x * 30) ** 2
        return F.relu6(torch.cat([y, y], 1))


@pytest.mark.parametrize("target", TARGETS)
def test_a_requantize_tflm_would_shift_past_int32_runs_on_the_cpu(target):
    """The relu6's input is requantized to its output scale with a multiplier near 3e8: TFLM shifts the
    centred value left by 29 in int32 and wraps (values due at -128 came out at 127, 255 steps off the host
    runtime). Such a QUANTIZE (and a MUL past 2^15) is refused: the relu6 runs on the CPU."""
    result, cal = _compile(DeadRelu6OfWideValues(), [(1, 2, 4, 4)], target)
    _int8_on_the_cpu(result, "aten.hardtanh.default", target, "would shift past int32")
    for inputs in cal[:2]:
        check_case(result, inputs)


class CancellingLinear(nn.Module):
    """A linear layer over [1024 x, 4096 x, x] with weights [w, -w / 4, 1e-6]: the first two parts cancel
    exactly in float, so the output is 1e-6 * sum(x), and its scale (float32's epsilon) is 1.2e7 times finer
    than s_in * s_w."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(24, 4)
        w = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            self.fc.weight.copy_(torch.cat([w, -w / 4, torch.full((4, 8), 1e-6)], 1))
            self.fc.bias.zero_()

    def forward(self, x):
        return self.fc(torch.cat([x * 1024, x * 4096, x], 1))


@pytest.mark.parametrize("target", TARGETS)
def test_a_fully_connected_tflm_cannot_prepare_for_its_bias_scale_runs_on_the_cpu(target):
    """TFLM prepares a per-tensor FULLY_CONNECTED only if its bias scale is s_in * s_w to within 2% of an output
    step; the float32 bias scale is off by up to 6e-8 of it (here 1e-8), too much at an output scale 1.2e7
    times finer (0.11 of a step). Such an FC was delegated, and TFLM refused the partition. It now runs on the
    CPU with TFLM's rule as its reason, and the program matches TFLM and the quantized program."""
    result, cal = _compile(CancellingLinear(), [(1, 8)], target)
    _int8_on_the_cpu(result, "aten.linear.default", target, "prepares only a bias scale within 0.02")
    for inputs in cal[:2]:
        check_case(result, inputs)


class PadAfterGlobalPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 4, 3)

    def forward(self, x):
        pooled = F.pad(x.mean((2, 3), keepdim=True), [2, 2, 2, 2])
        return pooled, self.conv(pooled)


@pytest.mark.parametrize("target", TARGETS)
def test_a_pad_after_a_global_pool_pads_height_and_width(target):
    """A channels_last [1, 8, 1, 1] tensor is contiguous to torch as well: the cortex_m pad's shape function
    and the host runtime read it as NCHW and padded channels and height ([1, 12, 5, 1], or an internal error
    when a conv read it), while the board's kernel takes the dim order [0, 2, 3, 1] the program records."""
    result, cal = _compile(PadAfterGlobalPool(), [(1, 8, 4, 4)], target)
    for inputs in cal[:2]:
        check_case(result, inputs)


def test_an_internal_error_is_one_compiler_bug_naming_its_stage(monkeypatch):
    """No raw Python exception escapes compile: an internal failure is an ImxrtError (one CLI line) that
    names the stage and keeps the cause chained for the bug report."""
    import imxrt.pipeline
    from imxrt.errors import CompilerBug

    def broken(*args, **kwargs):
        raise TypeError("unexpected")

    monkeypatch.setattr(imxrt.pipeline, "lower_to_cortex_m", broken)
    with pytest.raises(CompilerBug, match=r"lower stage \(TypeError: unexpected\)") as error:
        _compile(nn.Linear(4, 4), [(1, 4)], "imxrt700-cpu")
    assert isinstance(error.value.__cause__, TypeError)


class ShuffleBlock(nn.Module):
    """ShuffleNetV2's channel shuffle between two convolutions, after an in-place dropout."""

    def __init__(self, groups=2):
        super().__init__()
        self.groups = groups
        self.a, self.b = nn.Conv2d(4, 8, 1), nn.Conv2d(8, 8, 1)
        self.drop = nn.Dropout(0.2, inplace=True)

    def forward(self, x):
        x = self.drop(torch.relu(self.a(x)))
        b, c, h, w = x.shape
        x = x.view(b, self.groups, c // self.groups, h, w).transpose(1, 2).contiguous().view(b, c, h, w)
        return self.b(x)


@pytest.mark.parametrize("target", TARGETS)
def test_channel_shuffle_and_in_place_dropout_compile_to_one_int8_program(target):
    """Dropping the ``contiguous()`` left a ``view`` of transposed strides that failed at calibration ("view
    size is not compatible"); ``nn.Dropout(inplace=True)`` (``aten.dropout_``) stayed in the graph, a
    dequantize/quantize pair that split the partition."""
    torch.manual_seed(0)
    result, cal = _compile(ShuffleBlock(), [(1, 4, 5, 5)], target)
    summary = result.report["summary"]
    assert summary["ops_cpu_float"] == 0
    if target == "imxrt700":
        assert summary["partitions"] == 1
    for inputs in cal[:3]:
        check_case(result, inputs)


def test_a_training_mode_dropout_is_kept():
    """Only an inference-mode dropout is a no-op (every dropout form, in place or not)."""
    from imxrt.passes.remove_noops import _DROPOUTS, RemoveNoOpsPass

    for op in sorted(_DROPOUTS, key=str):
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        x.meta["val"] = torch.empty(1, 4)
        kept, dropped = graph.call_function(op, (x, 0.5, True)), graph.call_function(op, (x, 0.5, False))
        for node in (kept, dropped):
            node.meta["val"] = torch.empty(1, 4)
        graph.output((kept, dropped))
        gm = RemoveNoOpsPass()(torch.fx.GraphModule(torch.nn.Module(), graph)).graph_module
        assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [op], op


def test_a_collapsed_permutation_moves_the_same_bytes():
    """Seeded: any shape (with size-1 dimensions) and permutation, the collapsed transpose of the reshaped
    tensor reads the same elements in the same order."""
    from imxrt.cpu.lowering_rules import collapsed_permutation

    rng = np.random.default_rng(0)
    for _ in range(2000):
        rank = int(rng.integers(1, 7))
        shape = [int(rng.choice([1, 1, 2, 3])) for _ in range(rank)]
        perm = [int(d) for d in rng.permutation(rank)]
        x = np.arange(int(np.prod(shape))).reshape(shape)
        small_shape, small_perm = collapsed_permutation(shape, perm)
        assert len(small_shape) <= rank
        assert (x.transpose(perm).ravel() == x.reshape(small_shape).transpose(small_perm).ravel()).all()


_ONE_CHANNEL_POOLS = """
import hashlib, json, sys, torch
if sys.argv[1] == "executorch":
    import executorch.backends.cortex_m.passes  # noqa: F401  (ExecuTorch's cortex_m op module)
from imxrt.pipeline import CompileOptions, compile

def programs():
    out = []
    for model in (torch.nn.AvgPool2d(3, 2, padding=1, count_include_pad=True), torch.nn.MaxPool2d(2)):
        x = (torch.randn(1, 1, 4, 4, generator=torch.Generator().manual_seed(0)),)
        result = compile(model.eval(), x, "imxrt700-cpu", [x], CompileOptions(show_progress=False))
        out.append(hashlib.sha256(result.pte).hexdigest())
    return out

out = programs()
if sys.argv[1] == "executorch_after":
    import executorch.backends.cortex_m.passes  # noqa: F401
    out = programs()
print(json.dumps(out))
"""


def test_a_program_does_not_depend_on_executorchs_cortex_m_module_being_imported():
    """With ExecuTorch's cortex_m op module imported, its fakes traced our one-channel pad (planned as
    (1, 3, 4, 6) for a (1, 1, 6, 6) result: the runtime refused the program) and pools (dim order
    [0, 2, 1, 3]); imported after a first compile, it left stale edge ops and the second compile killed
    the process (std::bad_alloc). The same model gives the same bytes every way."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("tosa_serializer") is None:
        pytest.skip("ExecuTorch's cortex_m op module needs tosa-tools")
    modes = ("plain", "executorch", "executorch_after")
    runs = [subprocess.Popen([sys.executable, "-c", _ONE_CHANNEL_POOLS, mode], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for mode in modes]
    results = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, stderr[-3000:]
        results.append(stdout.strip().splitlines()[-1])
    assert results[0] == results[1] == results[2]


def test_one_channel_values_are_serialized_contiguous():
    """A [N, 1, H, W] value laid out channels_last reads as dim order [0, 2, 1, 3] (its C and W strides tie),
    which no kernel takes; it is given the contiguous order, the same bytes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.AvgPool2d(3, 1, 1))
    for target in TARGETS:
        result, cal = _compile(model, [(1, 3, 8, 8)], target)
        assert odd_dim_orders(result.pte) == []
        check_case(result, cal[0])


class SubInPlace(nn.Module):
    def forward(self, x, y):
        return x.sub_(y)


class SqrtInPlace(nn.Module):
    def forward(self, x):
        return x.abs_().sqrt_()


class ReadAfterWrite(nn.Module):
    """A reader after the write reads the written value."""

    def forward(self, x, y):
        z = x.mul_(y)
        return z + x


IN_PLACE = {"sub_": (SubInPlace, [(1, 8), (1, 8)]), "sqrt_": (SqrtInPlace, [(1, 16)]),
            "read_after_write": (ReadAfterWrite, [(1, 8), (1, 8)]),
            "silu_inplace": (lambda: nn.SiLU(inplace=True), [(2, 8)])}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(IN_PLACE))
def test_a_write_into_an_input_gives_the_models_outputs_and_leaves_the_inputs_alone(case, target):
    """x.sub_(y) returned the mutated input as a second output on imxrt700-cpu; x.sqrt_() (ExecuTorch's
    sqrt_inplace) failed to serialize (the planner was asked to overlap the live input with the output);
    calibration modified the caller's samples."""
    factory, shapes = IN_PLACE[case]
    generator = torch.Generator().manual_seed(0)
    cal = [tuple(torch.randn(s, generator=generator) for s in shapes) for _ in range(8)]
    kept = [tuple(t.clone() for t in sample) for sample in cal]
    result = compile(factory().eval(), cal[0], target, cal, CompileOptions(show_progress=False))
    assert all(torch.equal(a, b) for sample, copy in zip(cal, kept, strict=True)
               for a, b in zip(sample, copy, strict=True)), "calibration wrote into the caller's samples"
    program = imxrt.runtime.load(result.pte)
    for inputs in kept[:3]:
        before = [t.clone() for t in inputs]
        outputs = program.forward(*inputs)
        assert len(outputs) == 1
        assert all(torch.equal(a, b) for a, b in zip(inputs, before, strict=True))
        check_case(result, inputs)
        expected = factory().eval()(*[t.clone() for t in inputs]).detach().numpy()
        assert np.abs(outputs[0] - expected).max() <= 0.05 * np.abs(expected).max()


class Elementwise(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x):
        return self.function(x)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", ["log", "rsqrt", "sqrt", "log2"])
def test_calibration_ignores_nan_and_infinite_values(op, target):
    """log/rsqrt of ExecuTorch's randn test inputs gave NaN activations: the min/max observer's range went
    NaN and quantization failed ("min nan should be less than max nan"). An int8 tensor holds neither."""
    model = Elementwise(getattr(torch, op))
    result, cal = _compile(model, [(1, 16)], target)
    for inputs in cal[:3]:  # in the op's domain: TFLite's int8 RSQRT fails on a negative input
        check_case(result, [x.abs() + 0.01 for x in inputs], model)


class MaximumWithScalar(nn.Module):
    def forward(self, x, y):
        return torch.maximum(x, y)


def test_the_checks_take_a_rank_0_partition_input_and_a_clamp_onto_a_finer_scale():
    """ExecuTorch's maximum broadcast_scalar case: a rank-0 input reached TFLM as a 1-d array (refused).
    conv2d_hardtanh_narrow: Hardtanh(-0.5, 0.5) requantizes the conv's ~4x coarser int8 output onto its
    own scale, so one rounding step of the conv is ~4 of the output's (README's bound)."""
    torch.manual_seed(0)
    result, cal = _compile(MaximumWithScalar(), [(), (4, 1, 1, 3)], "imxrt700")
    for inputs in cal[:3]:
        check_case(result, inputs)
    result, cal = _compile(nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.Hardtanh(-0.5, 0.5)), [(1, 4, 8, 8)],
                           "imxrt700")
    for inputs in cal:
        check_case(result, inputs)


class MeanWithDtype(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1)

    def forward(self, x):
        return self.conv(x).mean([2, 3], dtype=torch.float32)


class PlusBufferStatistic(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1)
        self.register_buffer("stats", torch.randn(4, 8, generator=torch.Generator().manual_seed(1)))

    def forward(self, x):
        return torch.relu(self.conv(x)).mean([2, 3]) + self.stats.mean([0])


def test_a_node_the_litert_lowering_refuses_stays_on_the_cpu_with_the_reason(monkeypatch):
    """Both failed the whole compile ("LiteRT lowering: ..."): the capability table accepted a node the
    lowering then refused (the buffer statistic is now folded as the constant it is; a dtype equal to the
    reduction's own is no conversion: all on the NPU). Any node the lowering still refuses is left on the
    CPU with its reason: here MEAN is made to refuse."""
    from imxrt.npu.litert import converters
    from imxrt.npu.litert.errors import UnsupportedForLiteRT

    torch.manual_seed(0)
    result, cal = _compile(MeanWithDtype(), [(1, 3, 6, 6)], "imxrt700")
    assert result.report["summary"]["partitions"] == 1 and result.report["summary"]["ops_cpu_float"] == 0
    assert all(op["placement"] == "npu" for op in result.report["ops"] if "quantize" not in op["op"])
    check_case(result, cal[0])
    result, cal = _compile(PlusBufferStatistic(), [(1, 3, 6, 6)], "imxrt700")
    for inputs in cal[:2]:
        check_case(result, inputs)

    def refuse(ctx, node):
        raise UnsupportedForLiteRT(node, "refused for this test")

    (mean_op,) = [op for op in converters.CONVERTERS if getattr(op, "__name__", "") == "aten.mean.dim"]
    monkeypatch.setitem(converters.CONVERTERS, mean_op, refuse)
    result, cal = _compile(PlusBufferStatistic(), [(1, 3, 6, 6)], "imxrt700")
    means = [op for op in result.report["ops"] if op["op"] == "aten.mean.dim"]
    assert means and all(op["placement"] == "cpu" and "the LiteRT lowering refused it: refused for this test"
                         in op["reason"] for op in means)
    assert result.report["summary"]["partitions"] >= 1
    for inputs in cal[:2]:
        check_case(result, inputs)


# (kernel, stride, padding, output_padding, input size): seeded over the forms TRANSPOSE_CONV's SAME,
# VALID and VALID+SLICE cover
TRANSPOSE_CONVS = [(4, 2, 1, 1, 6), (4, 2, 1, 0, 6), (3, 2, 1, 1, 5), (3, 2, 0, 0, 5), (2, 2, 0, 0, 4),
                   (3, 1, 1, 0, 6), (5, 3, 2, 2, 4), (3, 3, 0, 2, 3), (4, 2, 2, 1, 7)]


@pytest.mark.parametrize("kernel, stride, padding, output_padding, size", TRANSPOSE_CONVS)
def test_every_transposed_conv_partition_passes_litert_and_tflm(kernel, stride, padding, output_padding, size):
    """ConvTranspose2d(4, 8, 4, stride=2, padding=1, output_padding=1) on 6x6 was written with SAME
    padding, whose implied input (7) LiteRT's prepare refuses; TFLM ran it. check_case runs every
    partition in both."""
    torch.manual_seed(0)
    model = nn.ConvTranspose2d(4, 8, kernel, stride=stride, padding=padding, output_padding=output_padding)
    result, cal = _compile(model, [(1, 4, size, size)], "imxrt700")
    # Neutron's transposed conv: stride <= 2, output_padding <= padding (else int8 on the CPU)
    on_npu = stride <= 2 and output_padding <= padding
    assert result.report["summary"]["partitions"] == int(on_npu)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


class SubForms(nn.Module):
    def forward(self, x, y):
        return torch.relu(x - y), torch.sub(x, y, alpha=2), 1.0 - x, x - 0.5


@pytest.mark.parametrize("target", TARGETS)
def test_sub_runs_in_int8_on_the_cpu(target):
    """sub had no CPU rule: one subtraction kept a whole model float on imxrt700-cpu (ExecuTorch's
    Cortex-M backend lowers it to quantized_add with the second multiplier negated, as here)."""
    torch.manual_seed(0)
    result, cal = _compile(SubForms(), [(1, 4, 5, 5), (1, 4, 5, 5)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:3]:
        check_case(result, inputs)


def test_add_with_the_second_multiplier_negated_is_tflms_sub_on_every_int8_pair():
    """The stock kernel library has no SUB: quantized_add with -M2 computes it. Equal to TFLM's SUB
    arithmetic (elementwise.add(subtract=True), itself checked against TFLM in test_kernels_ops) on all
    65,536 input pairs for 100 seeded scale and zero-point draws."""
    import dataclasses

    from imxrt.kernels import elementwise

    rng = np.random.default_rng(0)
    x1, x2 = (a.ravel() for a in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128)))
    for _ in range(100):
        s1, s2, s_out = np.exp(rng.uniform(-6, 0, 3))
        z1, z2, z_out = (int(z) for z in rng.integers(-128, 128, 3))
        sub = elementwise.prepare_add(s1, z1, s2, z2, s_out, z_out, -128, 127, subtract=True)
        negated = dataclasses.replace(sub, input2_multiplier=-sub.input2_multiplier, subtract=False)
        assert np.array_equal(elementwise.add(x1, x2, sub), elementwise.add(x1, x2, negated))


POINTWISE = {
    "silu": nn.SiLU, "hardsigmoid": nn.Hardsigmoid, "mish": nn.Mish, "elu": nn.ELU,
    "sqrt": lambda: Elementwise(lambda x: torch.sqrt(x.abs() + 0.01)),
    "log2": lambda: Elementwise(lambda x: torch.log2(x.abs() + 0.01)),
    "log10": lambda: Elementwise(lambda x: torch.log10(x.abs() + 0.01)),
    "log1p": lambda: Elementwise(lambda x: torch.log1p(x.abs())),
    "square": lambda: Elementwise(lambda x: x ** 2),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", sorted(POINTWISE))
def test_every_pointwise_op_of_one_tensor_is_one_int8_table(op, target):
    """silu, hardsigmoid, sqrt, log2/log10/log1p stayed float on both targets (ExecuTorch's Cortex-M backend
    lowers them to quantized_activation): any deterministic pointwise op of one tensor is a 256-entry table
    on the Cortex-M, kept whole through to_edge so its decomposition does not run in float."""
    torch.manual_seed(0)
    result, cal = _compile(nn.Sequential(nn.Linear(8, 8), POINTWISE[op]()), [(2, 8)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:3]:
        check_case(result, inputs)


class Broadcasts(nn.Module):
    """Squeeze-excite's channel scale, a row bias, and a subtraction of a per-channel mean."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x, row):
        y = torch.relu(self.conv(x))
        scale = torch.sigmoid(y.mean((2, 3), keepdim=True))
        return y * scale, y + row, y - y.mean((2, 3), keepdim=True)


@pytest.mark.parametrize("target", TARGETS)
def test_broadcasting_add_sub_mul_run_in_int8_on_the_cpu(target):
    """[1, 8, 1, 1] * [1, 8, 5, 5] (the squeeze-excite pattern) and other broadcasts were float on the CPU
    (the CMSIS-NN kernels take equal shapes): the broadcast operand is expanded in int8 first."""
    torch.manual_seed(0)
    result, cal = _compile(Broadcasts(), [(1, 4, 5, 5), (1, 1, 1, 5)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:3]:
        check_case(result, inputs)


class Transposed(nn.Module):
    def forward(self, x):
        return torch.relu(x).t()


@pytest.mark.parametrize("target", TARGETS)
def test_t_is_int8_data_movement(target):
    """x.t() (ExecuTorch's t_operator case) had no int8 rule and ran in float on both targets."""
    result, cal = _compile(Transposed(), [(4, 3)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


def _batch_norm(module):
    torch.manual_seed(0)
    module.running_mean.normal_()
    module.running_var.uniform_(0.5, 2.0)
    module.weight.data.normal_()
    module.bias.data.normal_()
    return module


@pytest.mark.parametrize("target", TARGETS)
def test_a_batch_norm_on_its_own_is_an_int8_depthwise_convolution(target):
    """A standalone nn.BatchNorm2d stayed float and took 40-110 s to compile (torchao's QAT conv-BN matcher
    on an unfused BN); it is a per-channel affine map: a depthwise 1x1 convolution."""
    for module, shape in ((nn.BatchNorm2d(4), (1, 4, 5, 5)), (nn.BatchNorm1d(4), (1, 4, 10))):
        result, cal = _compile(_batch_norm(module), [shape], target)
        assert result.report["summary"]["ops_cpu_float"] == 0
        for inputs in cal[:3]:
            check_case(result, inputs)
        float_out = module.eval()(cal[0][0]).detach().numpy()
        ours = imxrt.runtime.load(result.pte).forward(*cal[0])[0]
        assert np.abs(ours - float_out).max() <= 0.03 * np.abs(float_out).max()


REDUCTIONS_TO_RANK_4 = {
    "amax_5d_dim0": (lambda x: torch.amax(x, 0), (2, 3, 4, 5, 6)),
    "amin_6d": (lambda x: torch.amin(x, (1, -1)), (1, 2, 3, 4, 5, 6)),
    "mean_5d_dim0": (lambda x: torch.mean(x, 0), (2, 3, 4, 5, 6)),
    "sum_6d": (lambda x: torch.sum(x, (1, -1)), (1, 2, 3, 4, 5, 6)),
}


@pytest.mark.parametrize("case", sorted(REDUCTIONS_TO_RANK_4))
def test_a_reduction_to_a_rank_4_result_lands_in_nhwc(case):
    """ExecuTorch's TestKeepDimFalseFormatHandling cases: a 5-D or 6-D reduction without keepdim left its
    result in the input's dim order, where the rank-4 result is stored NHWC; TFLM agreed with the
    partition (it was self-consistent) and the .pte was 30-167 LSB off the quantized program."""
    function, shape = REDUCTIONS_TO_RANK_4[case]
    result, cal = _compile(Elementwise(lambda x: F_max_pool_identity(function(x))), [shape], "imxrt700")
    assert result.report["summary"]["partitions"] == 1
    for inputs in cal[:2]:
        check_case(result, inputs)


def F_max_pool_identity(x):
    """A 1x1 max pool: keeps the result rank-4 and on the NPU, as the upstream models do."""
    return torch.nn.functional.max_pool2d(x, 1)


class AddmmRowBias(nn.Module):
    def __init__(self, bias_shape):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(6, 7)), nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight)


@pytest.mark.parametrize("target", TARGETS)
def test_addmm_with_a_2d_bias_and_a_mean_over_every_dim(target):
    """addmm with a (1, 7) or (3, 7) bias became a linear layer with a 2-D bias, which the host runtime
    could not bind; mean(x, keepdim=True) over every dim (dim None) raised a TypeError in the CPU lowering."""
    for bias_shape in ((1, 7), (3, 7)):
        result, cal = _compile(AddmmRowBias(bias_shape), [(3, 6)], target)
        for inputs in cal[:2]:
            check_case(result, inputs)
    result, cal = _compile(Elementwise(lambda x: torch.mean(x, None, keepdim=True)), [(2, 4, 6, 8)], target)
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.parametrize("target", TARGETS)
def test_a_grouped_transposed_conv_bias_has_a_scale_per_output_channel(target):
    """ConvTranspose2d(9, 3, 3, groups=3) (an upstream NXP case): the bias got one scale for its three
    channels (the weight's per-group scale), and ExecuTorch's C++ dequantize_per_channel aborted the
    process (signal 6) on it."""
    torch.manual_seed(0)
    result, cal = _compile(nn.ConvTranspose2d(9, 3, 3, groups=3), [(3, 9, 11, 13)], target)
    for inputs in cal[:2]:
        check_case(result, inputs)


def test_the_host_runtime_refuses_a_per_channel_count_the_c_kernel_would_abort_on():
    from imxrt.runtime import preconditions

    name = "quantized_decomposed::dequantize_per_channel.out"
    op = torch.ops.quantized_decomposed.dequantize_per_channel.out
    values = torch.zeros(3, 1, 2, dtype=torch.int8)
    problem = preconditions.check(name, op._schema, op,
                                  [values, torch.ones(1, dtype=torch.float64), torch.zeros(1, dtype=torch.int64), 0,
                                   -127, 127, torch.int8], {"out_dtype": None, "out": torch.empty(3, 1, 2)})
    assert problem is not None and "scales must be 3 float64 or float32 values (one per channel)" in problem


@pytest.mark.parametrize("target", TARGETS)
def test_amax_and_amin_pick_int8_values_on_the_cpu(target):
    """amax / amin were float on imxrt700-cpu (32 of ExecuTorch's NXP cases that its Cortex-M backend
    lowers to int8): they pick values, so input and output share qparams and ExecuTorch's portable
    kernels run them on the int8 bytes."""
    model = Elementwise(lambda x: (torch.amax(x, -1), torch.amin(x, (1, 2), keepdim=True)))
    result, cal = _compile(model, [(2, 3, 4, 5)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


def _round_half_away(values: torch.Tensor) -> torch.Tensor:
    return torch.sign(values) * torch.floor(values.abs() + 0.5)


POOLS = {  # ExecuTorch's Cortex-M ceil-mode cases, and windows that overhang the padding
    "avg 2x2 ceil": nn.AvgPool2d(2, ceil_mode=True),
    "avg 3x3 s2 pad1 ceil": nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False),
    "avg 3x3 s2 pad1 counting ceil": nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=True),
    "avg 2x3 s2x3 ceil": nn.AvgPool2d((2, 3), (2, 3), ceil_mode=True),
    "max 3x3 s2 pad1 ceil": nn.MaxPool2d(3, 2, padding=1, ceil_mode=True),
    "max 2x2 ceil": nn.MaxPool2d(2, ceil_mode=True),
    "max 3x2 s2x3 ceil": nn.MaxPool2d((3, 2), (2, 3), ceil_mode=True),
    "max 3x3 dilation 2": nn.MaxPool2d(3, 1, dilation=2),
    "max 2x2 s2 dilation 2 pad1 ceil": nn.MaxPool2d(2, 2, padding=1, dilation=2, ceil_mode=True),
}


@pytest.mark.parametrize("name", POOLS)
def test_ceil_mode_and_dilated_pools_take_pytorchs_windows_in_int8(name):
    """Ceil-mode pools were float on the CPU (ExecuTorch's Cortex-M backend lowers them to int8): an average
    pool is the kernel's own ceil mode (it averages the taps inside its input: PyTorch's divisor), a max pool
    pads with -128 and pools in floor mode; a dilated max pool is ExecuTorch's portable kernel on the int8
    values (CMSIS-NN has no dilation). Input and output share qparams, so with int8 I/O each output
    is exactly PyTorch's pool of the int8 values (the mean of the stored bytes rounded half away from zero,
    as CMSIS-NN and TFLM average)."""
    pool = POOLS[name]
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(1, 3, 7, 11, generator=generator),) for _ in range(8)]
    result = compile(pool.eval(), cal[0], "imxrt700-cpu", cal, CompileOptions(show_progress=False, io="int8"))
    assert result.report["summary"]["ops_cpu_float"] == 0
    (given,) = result.report["io"]["inputs"]
    zero_point = given["zero_point"]
    program = imxrt.runtime.load(result.pte)
    rng = np.random.default_rng(1)
    for _ in range(3):
        q = rng.integers(-128, 128, size=(1, 3, 7, 11), dtype=np.int8)
        (got,) = program.forward(q)
        centered = torch.from_numpy(q).double() - zero_point
        expected = _round_half_away(pool(centered) + zero_point)  # padding counts as the zero point
        np.testing.assert_array_equal(got, expected.numpy().astype(np.int8))


class Binary(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x, y):
        return self.function(x, y)


@pytest.mark.parametrize("target", TARGETS)
def test_division_by_a_tensor_is_int8_on_the_cpu(target):
    """x / y was float (ExecuTorch's Cortex-M backend lowers it to its quantized_div kernel): it is that
    kernel now, with a broadcast operand expanded first (the kernel takes equal shapes)."""
    model = Binary(lambda x, y: (x / y, x / y[:, :1]))
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(2, 3, 4, 5, generator=generator), torch.rand(2, 3, 4, 5, generator=generator) + 0.5)
           for _ in range(8)]
    result = compile(model.eval(), cal[0], target, cal, CompileOptions(show_progress=False))
    assert result.report["summary"]["ops_cpu_float"] == 0
    assert "cortex_m.quantized_div.default" in {op["kernel"] for op in result.report["ops"]}
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("pads, shape", [((1, 2), (2, 3, 6)), ((1, 1, 2, 0), (1, 3, 5, 6)),
                                         ((1, 1, 1, 1, 1, 1), (1, 2, 3, 4, 5))])
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_reflection_and_replication_pads_are_int8_data_movement(mode, pads, shape, target):
    """A reflect pad was float on imxrt700-cpu (6 of ExecuTorch's NXP cases its Cortex-M backend lowers to
    int8), and a 3-D one was decomposed into index arithmetic: every reflect / replicate pad is its core op
    on ExecuTorch's portable kernel, on the int8 values."""
    model = Elementwise(lambda x: torch.nn.functional.pad(x, pads, mode))
    result, cal = _compile(model, [shape], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


MATMULS = {  # ExecuTorch's Cortex-M matmul cases (rank 3, rank 4, broadcast batch) and an mm of activations
    "rank 3": ((2, 4, 8), (2, 8, 3)),
    "rank 4": ((2, 2, 4, 8), (2, 2, 8, 3)),
    "broadcast batch": ((1, 4, 8), (3, 8, 5)),
    "rank 2": ((4, 8), (8, 3)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", MATMULS)
def test_a_product_of_two_activations_is_an_int8_batch_matmul(name, target):
    """matmul / mm of two activations was float on both targets (to_edge decomposes matmul after
    quantization, and mm has only a fully connected kernel): it is one bmm over rank-3 views now."""
    result, cal = _compile(Binary(torch.matmul), MATMULS[name], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    if target == "imxrt700":  # operands quantized at zero point 0: Neutron's BATCH_MATMUL
        assert "BATCH_MATMUL" in {op for tflite in result.partitions for op in litert_ops(tflite)}
    else:
        assert "cortex_m.quantized_batch_matmul.default" in {op["kernel"] for op in result.report["ops"]}
    for inputs in cal[:2]:
        check_case(result, inputs)


CLAMPS = {
    "full_like bounds": lambda x, y: torch.clamp(x, torch.full_like(x, -0.5), torch.full_like(x, 1.0)),
    "zeros_like lower bound": lambda x, y: torch.clamp(x, min=torch.zeros_like(x)),
    "tensor bounds": lambda x, y: torch.clamp(x, min=y, max=y + 1.0),
    "broadcast upper bound": lambda x, y: torch.clamp(x, max=y[:, :1]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", CLAMPS)
def test_a_clamp_with_tensor_bounds_is_int8(name, target):
    """clamp.Tensor had no int8 rule (ExecuTorch's Cortex-M case standalone_clamp_tensor): uniform bounds
    make it a scalar clamp, other bounds an element-wise maximum / minimum."""
    result, cal = _compile(Binary(CLAMPS[name]), [(2, 3, 4, 5), (2, 3, 4, 5)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


def test_rsqrt_goes_to_the_npu_only_when_no_input_is_negative():
    """TFLM's and LiteRT's int8 RSQRT fail on an input below its zero point; on random-signed inputs the
    NPU partition could not even be checked (8 of ExecuTorch's cases). RSQRT is delegated only when the
    input's zero point is -128, and otherwise is the CPU's table, defined for every int8 input."""
    model = Elementwise(torch.rsqrt)
    signed, cal = _compile(model, [(2, 8)], "imxrt700")
    assert signed.report["summary"]["partitions"] == 0
    assert signed.report["summary"]["ops_cpu_float"] == 0
    (rsqrt,) = [op for op in signed.report["ops"] if op["op"] == "aten.rsqrt.default"]
    assert "input zero point" in rsqrt["reason"]
    for inputs in cal[:2]:
        check_case(signed, inputs, model)  # NaN where PyTorch's rsqrt is NaN: not compared
    positive, cal = _compile(Elementwise(lambda x: torch.rsqrt(x.abs() + 0.25)), [(2, 8)], "imxrt700")
    assert [op["placement"] for op in positive.report["ops"] if op["op"] == "aten.rsqrt.default"] == ["npu"]
    for inputs in cal[:2]:
        check_case(positive, inputs)


@pytest.mark.parametrize("target", TARGETS)
def test_a_float_alpha_folds_into_the_second_operands_scale(target):
    """add(x, y, alpha=0.5) stayed float on both targets (ExecuTorch's Cortex-M backend declines it too):
    any finite alpha scales the second operand's scale, as an integer one did."""
    model = Binary(lambda x, y: (torch.add(x, y, alpha=0.5), torch.sub(x, y, alpha=-1.75)))
    result, cal = _compile(model, [(4, 5), (4, 5)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


FORMS_1D_AND_SPLITS = {  # float on the CPU before (ExecuTorch's Cortex-M backend lowers them to int8)
    "grouped conv": (lambda: nn.Conv2d(8, 8, 3, groups=2), [(1, 8, 6, 6)]),
    "grouped conv without bias": (lambda: nn.Conv2d(6, 9, 3, groups=3, bias=False), [(1, 6, 5, 5)]),
    "split": (lambda: Elementwise(lambda x: [t * 2 for t in torch.split(x, [3, 5], 1)]), [(1, 8, 4, 4)]),
    "chunk": (lambda: Elementwise(lambda x: torch.chunk(x, 3, -1)), [(2, 8)]),
    "unbind": (lambda: Elementwise(lambda x: torch.unbind(x, 1)[1:]), [(2, 3, 4)]),
    "conv_transpose1d": (lambda: nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1),
                         [(1, 4, 10)]),
    "max_pool1d": (lambda: nn.MaxPool1d(3, 2, padding=1), [(1, 4, 10)]),
    "avg_pool1d": (lambda: nn.AvgPool1d(3, 2, ceil_mode=True), [(1, 4, 10)]),
    "adaptive_avg_pool1d": (lambda: nn.AdaptiveAvgPool1d(5), [(1, 4, 10)]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", FORMS_1D_AND_SPLITS)
def test_grouped_convs_1d_ops_and_splits_are_int8(name, target):
    """A grouped conv is CMSIS-NN's grouped arm_convolve_s8 (a zero bias where the model has none), split /
    chunk / unbind are slices and selects, 1-D transposed convs and pools their 2-D forms over a height of 1."""
    make, shapes = FORMS_1D_AND_SPLITS[name]
    result, cal = _compile(make(), shapes, target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.parametrize("pool", [nn.MaxPool2d(3, 2, padding=1, ceil_mode=True), nn.MaxPool2d(2, ceil_mode=True),
                                  nn.MaxPool2d((3, 2), (2, 3), ceil_mode=True), nn.AvgPool2d(2, ceil_mode=True),
                                  nn.AvgPool2d((2, 3), (2, 3), ceil_mode=True)], ids=str)
def test_a_ceil_mode_pool_runs_on_the_npu(pool):
    """Ceil-mode pools stayed on the CPU on imxrt700 (SqueezeNet's pools): a max pool is a -128 PAD that ends
    where PyTorch's last window does and a VALID MAX_POOL_2D; an average pool whose overhang windows TFLite's
    SAME reproduces (it counts only real inputs, as PyTorch does past the padding) is a SAME AVERAGE_POOL_2D.
    Both bit-exact with TFLM."""
    result, cal = _compile(Elementwise(pool), [(1, 3, 7, 11)], "imxrt700")
    assert [op["placement"] for op in result.report["ops"] if "pool" in op["op"]] == ["npu"]
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.parametrize("target", TARGETS)
def test_a_division_by_an_int8_zero_is_zero_in_both_programs(target):
    """ExecuTorch's TwoPartitionPReLUModel divides by a random-signed tensor: where the int8 divisor is its
    zero point the stock quantized_div gives 0 and PyTorch's float ±inf saturated, 150 to 9,506 LSB apart.
    The checks take the deployed kernel's rule (README), and every other element stays within rounding."""
    model = Binary(lambda x, y: torch.relu(x / y))
    generator = torch.Generator().manual_seed(3)
    cal = [(torch.randn(4, 64, generator=generator), torch.randn(4, 64, generator=generator)) for _ in range(8)]
    result = compile(model.eval(), cal[0], target, cal, CompileOptions(show_progress=False))
    zero_divisors = 0
    for inputs in cal[:3]:
        check_case(result, inputs)
        scale, zero_point = (lambda q: (q["scale"], q["zero_point"]))(result.io["inputs"][1])
        zero_divisors += int((torch.round(inputs[1] / scale) + zero_point == zero_point).sum())
    assert zero_divisors > 0  # the case the rule is for did occur


def test_a_python_number_as_an_input_is_refused_naming_it():
    """ExecuTorch's scalar_tensor / tensor_scalar cases pass a Python float as an input: a program's inputs
    are tensors, so that is refused, with which input and what to do instead."""
    from imxrt.errors import BadModel

    with pytest.raises(BadModel, match=r"example input 1 is a float, not a tensor.*constant of the model"):
        compile(Binary(torch.add).eval(), (torch.randn(3), 2.0), "imxrt700-cpu", None,
                CompileOptions(show_progress=False))


UNBATCHED = {  # ExecuTorch's implicit-batch conv cases, and the other ops that take an unbatched input
    "conv2d": (lambda: nn.Conv2d(4, 6, 3, stride=2), [(4, 7, 9)]),
    "conv_transpose2d": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2), [(4, 5, 7)]),
    "conv1d": (lambda: nn.Conv1d(4, 6, 3), [(4, 12)]),
    "max_pool2d": (lambda: nn.MaxPool2d(2), [(3, 6, 8)]),
    "avg_pool1d": (lambda: nn.AvgPool1d(2), [(3, 8)]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", UNBATCHED)
def test_an_unbatched_input_is_a_batch_of_one(name, target):
    """nn.Conv2d on a [C, H, W] input ran in float on both targets (to_edge added the batch dimension after
    quantization, between the conv and its Q/DQ): the batch dimension is made explicit before quantization."""
    make, shapes = UNBATCHED[name]
    result, cal = _compile(make(), shapes, target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    if target == "imxrt700":
        assert result.report["summary"]["partitions"] == 1
    for inputs in cal[:2]:
        check_case(result, inputs)


def test_a_sum_over_every_dim_is_int8_on_the_npu():
    """x.sum() (aten.sum.default, ExecuTorch's default-parameter SUM cases) had no rule and ran in float; it
    quantizes like the sum over dims it becomes."""
    result, cal = _compile(Elementwise(lambda x: x.sum()), [(2, 3, 4)], "imxrt700")
    assert result.report["summary"]["ops_cpu_float"] == 0
    assert [op["placement"] for op in result.report["ops"] if "sum" in op["op"]] == ["npu"]
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.parametrize("size, out", [((4, 5), (25, 9)), ((3, 3), (5, 9))])
def test_an_align_corners_bilinear_resize_scales_by_its_corner_spacing(size, out):
    """align_corners maps corner pixels onto each other, so its scale is (out - 1) / (in - 1): 4 -> 25 is 8,
    a Neutron scale (ExecuTorch's NXP backend delegates it); out / in rejected it and it ran in float."""
    model = Elementwise(lambda x: F_interpolate(x, size=out, mode="bilinear", align_corners=True))
    result, cal = _compile(model, [(1, 3, *size)], "imxrt700")
    assert [op["placement"] for op in result.report["ops"] if "upsample" in op["op"]] == ["npu"]
    for inputs in cal[:2]:
        check_case(result, inputs)


def F_interpolate(x, **kwargs):
    return torch.nn.functional.interpolate(x, **kwargs)


def test_a_max_pool_kernel_wider_than_4096_runs_on_the_npu():
    """Neutron bounds a max pool's stride (4096), not its kernel (ExecuTorch's NXP case test__large_kernel_size
    delegates a 1x5000 window); the kernel bound kept it on the CPU."""
    result, cal = _compile(Elementwise(nn.MaxPool2d((1, 5000), stride=1)), [(1, 4, 1, 5000)], "imxrt700")
    assert [op["placement"] for op in result.report["ops"] if "max_pool" in op["op"]] == ["npu"]
    for inputs in cal[:1]:
        check_case(result, inputs)


@pytest.mark.parametrize("output_padding", [(1, 1), (1, 0)])
def test_an_unpadded_transposed_conv_with_output_padding_runs_on_the_npu(output_padding):
    """ExecuTorch's conv_transpose2d_output_padding cases stayed on the CPU: without padding, TRANSPOSE_CONV's
    VALID output of the larger size leaves the output_padding rows at the bias alone, as PyTorch does."""
    conv = nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=output_padding)
    result, cal = _compile(conv, [(1, 4, 5, 6)], "imxrt700")
    assert result.report["summary"]["partitions"] == 1 and result.report["summary"]["ops_cpu_float"] == 0
    assert [op["placement"] for op in result.report["ops"] if "convolution" in op["op"]] == ["npu"]
    for inputs in cal[:2]:
        check_case(result, inputs)
