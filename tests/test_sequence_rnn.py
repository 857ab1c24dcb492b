"""GRU, LSTM and Elman RNN keyword spotters (MFCC frames in, class scores out): before quantization a recurrent
layer becomes one step of a loop (``UnrollRecurrentLayersPass`` with ``rolled``, ``passes.recurrent_loops``)
and a cell loop its steps, in ops the NPU and CMSIS-NN run in int8; the loop is rolled into a ``scan`` the stock
runtime executes. Exported whole, each layer decomposed only inside ``to_edge`` and ran as ~700 float CPU ops."""

import time

import numpy as np
import pytest
import torch
import torch.nn as nn
from edge_graphs import aten_passes
from executorch.exir._serialize._program import deserialize_pte_binary
from program_checks import check_case, odd_dim_orders, partition_mismatches
from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

import imxrt.runtime
from imxrt.npu.compilers.reference import litert_ops
from imxrt.passes.recurrent_loops import find_loops, run_loops
from imxrt.passes.unroll_recurrent_layers import UnrollRecurrentLayersPass
from imxrt.perf import loop_placement
from imxrt.pipeline import CompileOptions, compile
from imxrt.placement import FLOAT_CELL_STATE
from imxrt.quantization.quantizer import ImxrtQuantizer

pytestmark = pytest.mark.slow  # every test here compiles models

FEATURES = 10  # MFCC coefficients per frame


_LAYERS = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN,
           "rnn_relu": lambda *args, **kwargs: nn.RNN(*args, nonlinearity="relu", **kwargs)}
_CELLS = {"gru": nn.GRUCell, "lstm": nn.LSTMCell, "rnn": nn.RNNCell,
          "rnn_relu": lambda *args: nn.RNNCell(*args, nonlinearity="relu")}


class RecurrentKWS(nn.Module):
    """A GRU / LSTM over the frames, then a linear layer on the last step's hidden state."""

    def __init__(self, cell="gru", layers=1, batch_first=True, hidden=16, classes=12):
        super().__init__()
        self.batch_first = batch_first
        self.rnn = _LAYERS[cell](FEATURES, hidden, num_layers=layers, batch_first=batch_first)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):  # [1, T, FEATURES]
        if not self.batch_first:
            x = x.transpose(0, 1)
        y, _ = self.rnn(x)
        return self.fc(y[:, -1] if self.batch_first else y[-1])


class CellKWS(nn.Module):
    """The same with a GRUCell / LSTMCell called once per frame from a zero state."""

    def __init__(self, cell="gru", hidden=16, steps=6):
        super().__init__()
        self.cell = _CELLS[cell](FEATURES, hidden)
        self.kind, self.hidden, self.steps = cell, hidden, steps
        self.fc = nn.Linear(hidden, 12)

    def forward(self, x):
        h = torch.zeros(x.shape[0], self.hidden)
        c = torch.zeros(x.shape[0], self.hidden)
        for t in range(self.steps):
            if self.kind != "lstm":
                h = self.cell(x[:, t], h)
            else:
                h, c = self.cell(x[:, t], (h, c))
        return self.fc(h)


class WholeSequence(nn.Module):
    """Every output of the layer used: the sequence (mean over time), h_n and, for an LSTM, c_n; the
    initial state is a model input."""

    def __init__(self, cell="gru", layers=2, batch_first=False, hidden=8):
        super().__init__()
        self.cell = cell
        self.rnn = (nn.GRU if cell == "gru" else nn.LSTM)(FEATURES, hidden, num_layers=layers,
                                                          batch_first=batch_first)

    def forward(self, x, h0):
        if self.cell == "gru":
            y, h_n = self.rnn(x, h0)
            return y.mean(0 if not self.rnn.batch_first else 1), h_n
        y, (h_n, c_n) = self.rnn(x, (h0, torch.tanh(h0)))
        return y.sum(), h_n, c_n


STEPS = 6
MODELS = {
    "gru": lambda: RecurrentKWS("gru"),
    "lstm": lambda: RecurrentKWS("lstm"),
    "gru_2_layers_time_major": lambda: RecurrentKWS("gru", layers=2, batch_first=False),
    "lstm_2_layers": lambda: RecurrentKWS("lstm", layers=2),
    "lstm_time_major": lambda: RecurrentKWS("lstm", batch_first=False),
    "gru_cell": lambda: CellKWS("gru", steps=STEPS),
    "lstm_cell": lambda: CellKWS("lstm", steps=STEPS),
}
ELMAN_MODELS = {  # nn.RNN, tanh or relu: one gate, so no SPLIT_V per step
    "rnn": lambda: RecurrentKWS("rnn"),
    "rnn_relu_2_layers_time_major": lambda: RecurrentKWS("rnn_relu", layers=2, batch_first=False),
    "rnn_cell": lambda: CellKWS("rnn", steps=STEPS),
    "rnn_relu_cell": lambda: CellKWS("rnn_relu", steps=STEPS),
}


def _calibration(shape, samples=8):
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(shape, generator=generator),) for _ in range(samples)]


# The all-int8 step these tests check (an LSTM's cell state in int8, not the default float one).
INT8 = CompileOptions(show_progress=False, cell_state="int8")


def _compile(model, target, steps=STEPS):
    cal = _calibration((1, steps, FEATURES))
    return compile(model.eval(), cal[0], target, cal, INT8), cal


@pytest.mark.parametrize("name", sorted(MODELS | ELMAN_MODELS))
def test_the_unrolled_steps_equal_the_float_module(name):
    """The rewrite is exact up to float addition order (the folded biases): no gru / lstm / rnn node is left,
    and only ops both devices run in int8 remain."""
    torch.manual_seed(0)
    model = (MODELS | ELMAN_MODELS)[name]().eval()
    x = torch.randn(1, STEPS, FEATURES)
    graph_module = torch.export.export(model, (x,), strict=False).module()
    unrolled = UnrollRecurrentLayersPass()(graph_module).graph_module
    ops = {str(n.target).split(".")[1] for n in unrolled.graph.nodes if n.op == "call_function"}
    assert ops <= {"linear", "slice", "select", "sigmoid", "tanh", "relu", "add", "sub", "mul", "view", "cat",
                   "transpose"}, ops
    torch.testing.assert_close(unrolled(x), model(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_every_output_and_a_given_initial_state_stay_exact(cell):
    """The whole output sequence, h_n and c_n of a two-layer, time-major layer started from a given state."""
    torch.manual_seed(0)
    model = WholeSequence(cell).eval()
    inputs = (torch.randn(STEPS, 1, FEATURES), torch.randn(2, 1, 8))
    graph_module = torch.export.export(model, inputs, strict=False).module()
    unrolled = UnrollRecurrentLayersPass()(graph_module).graph_module
    assert not [n for n in unrolled.graph.nodes if n.target in (torch.ops.aten.gru.input, torch.ops.aten.lstm.input)]
    torch.testing.assert_close(unrolled(*inputs), model(*inputs), rtol=1e-5, atol=1e-5)


class Encoder(nn.Module):
    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.encoder = rnn

    def forward(self, x):
        y, _ = self.encoder(x)
        return y[:, -1], y.mean(1)


@pytest.mark.parametrize("name", sorted(name for name in MODELS | ELMAN_MODELS if "cell" not in name))
def test_the_rolled_step_run_as_its_loop_equals_the_float_module(name):
    """Rolled, a layer is one step between loop markers; run as its loop (``run_loops``, as calibration runs
    it) it is the layer, up to float addition order, and no layer's op is left; the graph holds one step."""
    torch.manual_seed(0)
    model = (MODELS | ELMAN_MODELS)[name]().eval()
    x = torch.randn(1, STEPS, FEATURES)
    exported = torch.export.export(model, (x,), strict=False)
    rolled = aten_passes(exported.module(check_guards=False), rolled=True)
    assert not any(n.target in (torch.ops.aten.gru.input, torch.ops.aten.lstm.input, torch.ops.aten.rnn_tanh.input,
                                torch.ops.aten.rnn_relu.input) for n in rolled.graph.nodes)
    loops = find_loops(rolled.graph)
    assert len(loops) == _rolled_layers(model) and all(loop.steps == STEPS for loop in loops)
    torch.testing.assert_close(run_loops(rolled, x), model(x), rtol=1e-5, atol=1e-5)


def program_operator(plan, instruction) -> str:
    call = instruction.instr_args
    return plan.operators[call.op_index].name if hasattr(call, "op_index") else type(call).__name__


def test_a_rolled_layer_compiles_to_the_same_program_at_any_length():
    """Compile work does not grow with the sequence: 6 and 60 frames give programs of the same instructions
    (the loop's step count is a tensor size), where the unrolled steps had grown 10x."""
    programs = []
    for steps in (STEPS, 10 * STEPS):
        torch.manual_seed(0)
        result, _ = _compile(RecurrentKWS("lstm", layers=2), "imxrt700-cpu", steps=steps)
        plan = deserialize_pte_binary(result.pte).program.execution_plan[0]
        programs.append([program_operator(plan, i) for i in plan.chains[0].instructions])
    assert programs[0] == programs[1] and len(programs[0]) < 100, len(programs[0])


@pytest.mark.parametrize("cell", [nn.GRU, nn.LSTM, nn.RNN])
@pytest.mark.parametrize("layers", [1, 2])
def test_a_bidirectional_layer_equals_the_float_module(cell, layers):
    """Unrolled, and rolled (one loop per direction: the reverse one over the time-flipped input, its outputs
    flipped back) run as its loops."""
    torch.manual_seed(0)
    model = Encoder(cell(FEATURES, 8, num_layers=layers, batch_first=True, bidirectional=True)).eval()
    x = torch.randn(1, STEPS, FEATURES)
    unrolled = UnrollRecurrentLayersPass()(torch.export.export(model, (x,), strict=False).module()).graph_module
    torch.testing.assert_close(unrolled(x), model(x), rtol=1e-5, atol=1e-5)
    rolled = UnrollRecurrentLayersPass(rolled=True)(
        torch.export.export(model, (x,), strict=False).module()).graph_module
    assert len(find_loops(rolled.graph)) == 2 * layers
    torch.testing.assert_close(run_loops(rolled, x), model(x), rtol=1e-5, atol=1e-5)


def test_an_lstm_projection_is_left_whole():
    """proj_size adds a weight the steps do not cover: the layer stays one node (float on the CPU, as
    ``test_compile`` checks the report says)."""
    model = Encoder(nn.LSTM(FEATURES, 8, batch_first=True, proj_size=4)).eval()
    graph_module = torch.export.export(model, (torch.randn(1, 4, FEATURES),), strict=False).module()
    result = UnrollRecurrentLayersPass()(graph_module)
    assert not result.modified
    assert [n.target for n in result.graph_module.graph.nodes].count(torch.ops.aten.lstm.input) == 1


def test_every_step_of_the_hidden_state_reads_one_scale():
    """All steps of h (the zero initial state included, which the first step drops) share one observer: every
    linear layer reading a hidden state (the W_hh parts and the classifier) reads it at one scale, and a given
    initial state (a model input) is quantized at that scale too."""
    model = WholeSequence("gru", layers=1, batch_first=True).eval()
    inputs = (torch.randn(1, STEPS, FEATURES), torch.randn(1, 1, 8))
    exported = torch.export.export(model, inputs, strict=False)
    prepared = prepare_pt2e(aten_passes(exported.module(check_guards=False)), ImxrtQuantizer())
    # a linear layer's first argument is its input's observer, which reads the value itself
    hidden_readers = [n for n in prepared.graph.nodes if n.target == torch.ops.aten.linear.default
                      and n.args[0].args[0].meta["val"].shape[-1] == 8]
    assert len(hidden_readers) == 2 * STEPS  # W_hrz and W_hn at every step
    # pt2e inserts one call per edge; a shared observer is one module object behind them
    observers = {id(getattr(prepared, n.args[0].target)) for n in hidden_readers}
    assert len(observers) == 1, observers
    (h0,) = [n for n in prepared.graph.nodes if n.op == "placeholder" and n.name == "h0"]
    assert {id(getattr(prepared, u.target)) for u in h0.users} == observers


def _rolled_layers(model) -> int:
    """How many loops a model compiles to: one per layer of an ``nn.GRU`` / ``nn.LSTM`` / ``nn.RNN`` (a
    hand-written cell loop is the user's own loop, traced step by step)."""
    rnn = getattr(model, "rnn", None)
    return rnn.num_layers if isinstance(rnn, nn.RNNBase) else 0


def _assert_int8_loops(result, layers: int, steps: int = STEPS) -> None:
    """No float op; what runs on the CPU is the model's quantize / dequantize (and each loop's initial-state
    quantize) or a step's op the cost model placed there, saying so; an NPU partition runs once per inference
    or, inside a layer's loop, once per step (at most one per layer); the advice never asks to move a
    deliberately placed op to the NPU."""
    summary = result.report["summary"]
    assert summary["ops_cpu_float"] == 0, [op for op in result.report["ops"] if op["execution"] == "cpu float"]
    cpu = [op for op in result.report["ops"] if op["placement"] != "npu"]
    assert all("quantize" in op["op"] or op["reason"].startswith(loop_placement.CHOSEN) for op in cpu), cpu
    calls = [p["calls"] for p in result.report["partitions"]]
    assert set(calls) <= {1, steps} and calls.count(steps) <= layers, calls
    assert not any(item["kind"] == "cpu_op" and "recurrent layer's step" in item["change"]
                   for item in result.report["advice"])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_recurrent_kws_runs_in_int8_with_its_step_where_it_is_fastest(name):
    """Every gate in int8, the input projection and classifier on the NPU, each step where the cost model
    places it (a 16-unit step: on the Cortex-M); TFLM's numbers on every partition call."""
    torch.manual_seed(0)
    model = MODELS[name]()
    result, cal = _compile(model, "imxrt700")
    _assert_int8_loops(result, _rolled_layers(model))
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.parametrize(("hidden", "expected"), [(64, "its matrix products on the NPU"),
                                                   (2, "the whole step on the CPU")])
def test_a_steps_placement_is_the_cheapest_by_the_cost_model(hidden, expected):
    """A keyword spotter's LSTM step (64 hidden units) puts its matrix product on the NPU, one partition
    called per step, and its elementwise ops on the CPU, where a kernel call costs less; a toy one (2 units)
    runs on the CPU alone. The report says which placement won and the estimates it weighed; TFLM's numbers."""
    torch.manual_seed(0)
    result, cal = _compile(RecurrentKWS("lstm", hidden=hidden), "imxrt700")
    reasons = {op["reason"].split("; runs in int8")[0] for op in result.report["ops"]
               if op["reason"].startswith(loop_placement.CHOSEN)}
    (reason,) = reasons
    assert expected in reason.split(" is the cheapest")[0] and "the whole step on the NPU: " in reason, reason
    step_partitions = [tflite for tflite, p in zip(result.partitions, result.report["partitions"], strict=True)
                       if p["calls"] == STEPS]
    if expected.startswith("its matrix products"):
        (step,) = step_partitions
        assert set(litert_ops(step)) <= {"FULLY_CONNECTED", "RESHAPE"}, litert_ops(step)
    else:
        assert step_partitions == []
    check_case(result, cal[1])


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
@pytest.mark.parametrize("name", sorted(ELMAN_MODELS))
def test_an_elman_rnn_runs_in_int8(name, target):
    """nn.RNN and nn.RNNCell, tanh or relu: each step one FULLY_CONNECTED on the hidden state, an ADD and the
    nonlinearity, in one partition on the NPU and in int8 on the CPU; TFLM's numbers. Exported whole, the
    layer had run as float CPU ops."""
    torch.manual_seed(0)
    model = ELMAN_MODELS[name]()
    result, cal = _compile(model, target)
    summary = result.report["summary"]
    assert summary["ops_cpu_float"] == 0, [op["op"] for op in result.report["ops"] if op["execution"] == "cpu float"]
    if target == "imxrt700":
        _assert_int8_loops(result, _rolled_layers(model))
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_every_output_from_a_given_state_runs_on_the_npu(cell):
    """Two time-major layers from a state given as a model input: the whole sequence (the loop's stacked
    output), h_n and c_n (its last carries) leave the loops; TFLM's numbers."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(STEPS, 1, FEATURES, generator=generator), torch.randn(2, 1, 8, generator=generator))
           for _ in range(8)]
    result = compile(WholeSequence(cell).eval(), cal[0], "imxrt700", cal, INT8)
    _assert_int8_loops(result, layers=2)
    check_case(result, cal[1])


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_a_bidirectional_gru_is_two_int8_loops(target):
    """Both directions as loops (the reverse one walks the flipped input, an int8 flip on the CPU) and the
    joined outputs read (the last time, the mean over time), all int8; TFLM's numbers."""
    torch.manual_seed(0)
    model = Encoder(nn.GRU(FEATURES, 8, batch_first=True, bidirectional=True))
    result, cal = _compile(model, target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    if target == "imxrt700":  # on the CPU besides the steps placed there: the flips, the joins, the conversions
        cpu = {op["op"] for op in result.report["ops"]
               if op["placement"] != "npu" and not op["reason"].startswith(loop_placement.CHOSEN)}
        assert cpu <= {"aten.flip.default", "aten.cat.default", "cortex_m.quantize_per_tensor.default",
                       "cortex_m.dequantize_per_tensor.default"}, cpu
    for inputs in cal[:2]:
        check_case(result, inputs)


class UnbatchedKWS(nn.Module):
    """Frames [T, F] without a batch dim: a layer (nn.GRU / nn.LSTM unsqueeze the input themselves) or a cell
    loop from ``torch.zeros(H)``, which reaches each cell unsqueezed."""

    def __init__(self, form: str, hidden=16):
        super().__init__()
        self.form, self.hidden = form, hidden
        self.rnn = {"gru": nn.GRU, "lstm": nn.LSTM}[form](FEATURES, hidden) if form != "cell" else \
            nn.GRUCell(FEATURES, hidden)
        self.fc = nn.Linear(hidden, 12)

    def forward(self, x):
        if self.form != "cell":
            return self.fc(self.rnn(x)[0][-1])
        h = torch.zeros(self.hidden)
        for t in range(x.shape[0]):
            h = self.rnn(x[t], h)
        return self.fc(h)


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
@pytest.mark.parametrize("form", ["gru", "lstm", "cell"])
def test_an_unbatched_recurrence_is_int8(form, target):
    """No float op is left: an unsqueezed ``zeros`` initial state is a zero state too, so the first step drops
    the terms it zeroes (it had stayed a float ``full`` on the CPU, read by the first step's layers)."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(STEPS, FEATURES, generator=generator),) for _ in range(8)]
    result = compile(UnbatchedKWS(form).eval(), cal[0], target, cal, INT8)
    assert result.report["summary"]["ops_cpu_float"] == 0, [
        op["op"] for op in result.report["ops"] if op["execution"] == "cpu float"]
    check_case(result, cal[1])


class StackedStates(nn.Module):
    """A hand-written LSTMCell loop that keeps every step's output with ``torch.stack`` and returns its state
    stacked, as a streaming model (Silero VAD) does: ``stack([h, c])``, fed back on the next call."""

    def __init__(self, hidden=16):
        super().__init__()
        self.cell = nn.LSTMCell(FEATURES, hidden)
        self.fc = nn.Linear(hidden, 4)

    def forward(self, x, state):
        h, c = state[0], state[1]
        outputs = []
        for t in range(x.shape[1]):
            h, c = self.cell(x[:, t], (h, c))
            outputs.append(h)
        return self.fc(torch.stack(outputs, 1)), torch.stack([h, c])


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_stacked_outputs_and_states_are_int8(target):
    """torch.stack had no int8 rule: the stacked states ran as float cat and view ops on the CPU, after the
    NPU partition. A stack is now a concatenation and a view: with an int8 cell state, one partition on the
    NPU, no float op."""
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(1, STEPS, FEATURES, generator=generator), torch.randn(2, 1, 16, generator=generator))
           for _ in range(8)]
    torch.manual_seed(0)
    result = compile(StackedStates().eval(), cal[0], target, cal,
                     CompileOptions(show_progress=False, cell_state="int8"))
    summary = result.report["summary"]
    assert summary["ops_cpu_float"] == 0, [op["op"] for op in result.report["ops"] if op["execution"] == "cpu float"]
    assert summary["partitions"] == (1 if target == "imxrt700" else 0)
    check_case(result, cal[1])


class _StatesOut(nn.Module):
    """ExecuTorch's LSTM example (examples/models/lstm: torch.ao's quantizable LSTM, 2 layers, gates written
    as linear layers and float functionals, outputs stacked per step), its state returned flat."""

    def __init__(self):
        super().__init__()
        from executorch.examples.models.lstm.model import LSTMModel

        self.lstm = LSTMModel().get_eager_model()

    def forward(self, x, h, c):
        y, (h, c) = self.lstm(x, (h, c))
        return y, h, c


def test_executorchs_lstm_example_is_int8_and_tflm_exact_on_both_targets():
    """Its per-step outputs and states are joined with torch.stack, which had run as 8 float cat / view ops on
    the CPU after the NPU partition; now one partition, no float op. Its partition is TFLM's to the bit, and
    the CPU-only program gives the same bytes. (Against the quantized program, c_n is 3 steps off: five steps
    of c's recurrence compound one op's rounding, past the per-op bound of ``check_case``.)"""
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(5, 3, 10, generator=generator), torch.randn(2, 3, 20, generator=generator),
            torch.randn(2, 3, 20, generator=generator)) for _ in range(6)]
    results = {}
    for target in ("imxrt700", "imxrt700-cpu"):
        torch.manual_seed(0)
        results[target] = compile(_StatesOut().eval(), cal[0], target, cal, CompileOptions(show_progress=False))
        summary = results[target].report["summary"]
        assert summary["ops_cpu_float"] == 0, [
            op["op"] for op in results[target].report["ops"] if op["execution"] == "cpu float"]
        assert summary["partitions"] == (1 if target == "imxrt700" else 0)
        assert odd_dim_orders(results[target].pte) == []
    npu, cpu = (imxrt.runtime.load(results[t].pte) for t in ("imxrt700", "imxrt700-cpu"))
    for inputs in cal[:2]:
        assert partition_mismatches(results["imxrt700"], inputs) == []
        arrays = [x.numpy() for x in inputs]
        for ours, theirs in zip(cpu.forward(*arrays), npu.forward(*arrays), strict=True):
            assert np.array_equal(np.asarray(ours), np.asarray(theirs))


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_executorchs_silero_vad_example_is_int8(target):
    """ExecuTorch's own Silero VAD (examples/models/silero_vad, random weights): a reflect-padded waveform, a
    strided STFT convolution, |X| as sqrt(re² + im²), a 1-D CNN, an LSTMCell from a given state, a stacked
    state out and a mean. With an int8 cell state every op runs in int8 in one NPU partition: the 1-D
    reflection pad is MIRROR_PAD, the magnitude its largest projection (ABS, MAXIMUM, MINIMUM, MUL, ADD; its
    sqrt had run between two partitions as a CPU table); the stacked state and the CPU target's last mean over
    time had been float."""
    from executorch.examples.models.silero_vad.export_silero_vad import SileroVAD16k

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(1, 576, generator=generator) * 0.3, torch.randn(2, 1, 128, generator=generator) * 0.5)
           for _ in range(6)]
    result = compile(SileroVAD16k().eval(), cal[0], target, cal,
                     CompileOptions(show_progress=False, cell_state="int8"))
    summary = result.report["summary"]
    assert summary["ops_cpu_float"] == 0, [op["op"] for op in result.report["ops"] if op["execution"] == "cpu float"]
    if target == "imxrt700":
        cpu = {op["op"] for op in result.report["ops"] if op["placement"] != "npu" and "quantize" not in op["op"]}
        assert summary["partitions"] == 1 and cpu == set(), cpu
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_a_streaming_lstm_cells_state_crosses_the_boundary_in_float(target):
    """With a float cell state (the default), an LSTMCell's c stays float from the state input to the state
    output, and h is quantized at its own scale: one int8 tensor for stack([h, c]) had given c an int8 step
    between calls and h (within ±1) the step of c's range (ExecuTorch's Silero VAD example with its official
    weights: 96.4% -> 99.1% of frames deciding as the float model on synthesized speech). The state's parts
    are taken and stacked in float; the rest of the step is int8."""
    generator = torch.Generator().manual_seed(0)
    scale = torch.tensor([1.0, 20.0]).reshape(2, 1, 1)  # h within ±1, c over ±20
    cal = [(torch.randn(1, STEPS, FEATURES, generator=generator), torch.randn(2, 1, 16, generator=generator) * scale)
           for _ in range(8)]
    torch.manual_seed(0)
    model = StackedStates().eval()
    result = compile(model, cal[0], target, cal, CompileOptions(show_progress=False))
    floats = {op["op"] for op in result.report["ops"] if op["execution"] == "cpu float"}
    assert floats <= {"aten.select_copy.int", "aten.mul.Tensor", "aten.add.Tensor", "aten.tanh.default",
                      "aten.cat.default", "aten.view_copy.default", "aten.unsqueeze_copy.default"}, floats
    reasons = [op["reason"] for op in result.report["ops"] if op["execution"] == "cpu float"]
    assert all(FLOAT_CELL_STATE in reason for reason in reasons), reasons  # the state's parts too
    state_scales = [float(n.args[1]) for n in result.quantized.graph.nodes
                    if n.op == "call_function" and "quantize_per_tensor" in str(n.target)
                    and getattr(n.args[0], "target", None) == torch.ops.aten.select.int]
    assert state_scales and max(state_scales) < 0.05  # h's own range, not c's (20 / 127)
    program = imxrt.runtime.load(result.pte)
    _, state = program.forward(*cal[1])
    _, reference = model(*cal[1])
    assert np.abs(state[1] - reference[1].detach().numpy()).max() < 0.5  # c, with int8 gates, no int8 step of 0.3


@pytest.mark.parametrize("name", ["gru", "lstm_2_layers", "gru_cell", "lstm_cell"])
def test_recurrent_kws_is_int8_on_the_cpu(name):
    """int8 on the CPU, TFLM's numbers; the steps read one copy of each weight (pt2e's convert had made one
    per step, each a tensor the program carried and the runtime allocated)."""
    torch.manual_seed(0)
    result, cal = _compile(MODELS[name](), "imxrt700-cpu")
    assert result.report["summary"]["ops_cpu_float"] == 0, [
        op["op"] for op in result.report["ops"] if op["execution"] == "cpu float"]
    program = result.quantized
    constants = [program.state_dict.get(t, program.constants.get(t)) for t in
                 (*program.graph_signature.inputs_to_buffers.values(),
                  *program.graph_signature.inputs_to_lifted_tensor_constants.values())]
    assert len({(c.dtype, tuple(c.shape), c.numpy().tobytes()) for c in constants}) == len(constants)
    check_case(result, cal[1])


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_a_49_frame_kws_is_one_int8_loop(cell):
    """The full-size spotter (49 frames, 64 hidden units): one loop of 49 steps, no float op; prints its
    figures."""
    torch.manual_seed(0)
    started = time.perf_counter()
    result, cal = _compile(RecurrentKWS(cell, hidden=64), "imxrt700", steps=49)
    seconds = time.perf_counter() - started
    summary = result.report["summary"]
    print(f"{cell} KWS, 49 frames: compile {seconds:.1f} s, latency {result.report['latency']['total']['us']:.0f} us, "
          f"partitions {summary['partitions']}, float CPU ops {summary['ops_cpu_float']}")
    _assert_int8_loops(result, layers=1, steps=49)
    check_case(result, cal[1])


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_a_float_cell_state_keeps_the_cell_update_in_float(target):
    """The default float cell state: c = f c + i g and tanh(c) run in float on the CPU (four ops per layer),
    carried in float from step to step, between int8 gates and an int8 hidden state; the .pte still equals
    the quantized program within rounding and every partition call TFLM."""
    torch.manual_seed(0)
    model = RecurrentKWS("lstm", layers=2).eval()
    cal = _calibration((1, STEPS, FEATURES))
    result = compile(model, cal[0], target, cal, CompileOptions(show_progress=False))
    floats = sorted(op["op"] for op in result.report["ops"] if op["execution"] == "cpu float")
    assert floats == sorted(["aten.mul.Tensor", "aten.mul.Tensor", "aten.add.Tensor", "aten.tanh.default"] * 2)
    for inputs in cal[:2]:
        check_case(result, inputs)


def test_an_unknown_cell_state_is_refused():
    with pytest.raises(imxrt.errors.BadOption, match="--cell-state"):
        compile(RecurrentKWS("lstm").eval(), _calibration((1, STEPS, FEATURES))[0], "imxrt700",
                options=CompileOptions(cell_state="int16"))


@pytest.mark.parametrize(("quantizable", "layers", "shape"), [(False, 2, (1, 10, 64)), (False, 1, (8, 10, 64)),
                                                              (False, 1, (1, 50, 64)), (True, 1, (1, 5, 64))])
def test_executorchs_backend_suite_lstm_cases_compile_and_agree(quantizable, layers, shape):
    """Cases of ExecuTorch's backend test suite (``backends/test/suite/operators/test_lstm.py``): its nn.LSTM
    model, and torch.ao's QuantizableLSTM that the suite gives quantizing flows (a Python loop over the
    steps, which unrolls); the suite's tolerance against the quantized program, TFLM's numbers on every call."""
    from executorch.backends.test.suite.operators.test_lstm import Model

    torch.manual_seed(0)
    model = Model(num_layers=layers, use_quantizable_lstm=quantizable).eval()
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(*shape, generator=generator),) for _ in range(4)]
    result = compile(model, cal[0], "imxrt700", cal, CompileOptions(show_progress=False))
    ours = imxrt.runtime.load(result.pte).forward(*cal[1])[0]
    reference = result.quantized.module()(*cal[1]).detach().numpy()
    assert np.allclose(ours, reference, atol=0.1, rtol=0.04)  # the suite's tolerance
    assert partition_mismatches(result, cal[1]) == []
