"""A `.pte` is untrusted input: what the host runtime checks before it allocates or runs anything.

Each hostile file here is small and would take unbounded memory or time, or end in an internal error, if a
check were missing. The ones that would eat memory or never end are loaded in one child process with a
capped address space and a per-file alarm, so a missing check fails its test instead of the test run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import flatbuffers
import numpy as np
import pytest
import torch
from ai_edge_litert import schema_py_generated as tflite_schema
from edited_programs import Packed, edited, shared, shared_constant
from executorch.exir import schema
from executorch.exir._serialize.generated.executorch_flatbuffer.EValue import EValueT
from executorch.exir._serialize.generated.executorch_flatbuffer.KernelTypes import KernelTypes
from executorch.exir._serialize.generated.executorch_flatbuffer.Tensor import TensorT

import imxrt
import imxrt.runtime
from imxrt.errors import BadFile
from imxrt.kernels import conv, pooling
from imxrt.npu import reference_payload
from imxrt.pte import reader
from imxrt.runtime import interpreter

INPUT_SHAPE = (1, 3, 6, 6)
CAP = f"more than the host runtime's cap of {reader.HOST_MEMORY_CAP:,}"


def _model() -> torch.nn.Module:
    """conv, relu, a 2x2 max pool (4x4 -> 2x2), linear: small, with a pooling window to tamper with."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 2 * 2, 2)).eval()


def _compile(target: str) -> bytes:
    inputs = (torch.randn(INPUT_SHAPE, generator=torch.Generator().manual_seed(1)),)
    return imxrt.compile(_model(), inputs, target, [inputs], imxrt.CompileOptions(show_progress=False)).pte


@pytest.fixture(scope="module")
def cpu() -> bytes:
    """Every op a cortex_m kernel call (the pool is cortex_m::quantized_max_pool2d)."""
    return _compile("imxrt700-cpu")


@pytest.fixture(scope="module")
def delegated() -> bytes:
    """One NeutronBackend delegate whose LiteRT subgraph holds the MAX_POOL_2D."""
    return _compile("imxrt700")


def _append(plan: schema.ExecutionPlan, value) -> int:
    plan.values.append(schema.EValue(value))
    return len(plan.values) - 1


def _int_list(plan: schema.ExecutionPlan, numbers: list[int]) -> int:
    return _append(plan, schema.IntList([_append(plan, schema.Int(n)) for n in numbers]))


def _call(plan: schema.ExecutionPlan, op: str) -> schema.KernelCall:
    return next(i.instr_args for i in plan.chains[0].instructions if isinstance(i.instr_args, schema.KernelCall)
                and plan.operators[i.instr_args.op_index].name == op)


# -- hostile files, each built from a compiled program

def _unplanned_tensor(cpu: bytes, delegated: bytes) -> bytes:
    """A 3.5 GB tensor with no place in the plan: the runtime would allocate it."""
    def edit(program):
        _append(program.execution_plan[0], schema.Tensor(
            scalar_type=schema.ScalarType.CHAR, storage_offset=0, sizes=[50_000, 70_000], dim_order=[0, 1],
            requires_grad=False, layout=0, data_buffer_idx=0, allocation_info=None,
            shape_dynamism=schema.TensorShapeDynamism.STATIC))
    return edited(cpu, edit)


def _negative_buffer(cpu: bytes, delegated: bytes) -> bytes:
    """Buffer sizes that sum below 4 GiB: 6.7 GB, then -3 GB."""
    def edit(program):
        program.execution_plan[0].non_const_buffer_sizes += [6_700_000_000, -3_000_000_000]
    return edited(cpu, edit)


def _shared_constant(cpu: bytes, delegated: bytes) -> bytes:
    """20,000 constant buffers that are one 200 KB buffer: 80 KB of offsets, 4 GB once each is read."""
    return shared_constant(cpu)


def _shared_tensor(cpu: bytes, delegated: bytes) -> bytes:
    """20,000 values that are one tensor of rank 50,000: 10^9 sizes once read, each a Python int."""
    def add(program_t, builder):
        tensor = TensorT()
        tensor.scalarType, tensor.sizes = schema.ScalarType.CHAR, np.ones(50_000, np.int32)
        value = EValueT()
        value.valType, value.val = KernelTypes.Tensor, tensor
        program_t.executionPlan[0].values += [Packed(value.Pack(builder))] * 20_000
    return shared(cpu, add)


def _huge_cortex_m_pool(cpu: bytes, delegated: bytes) -> bytes:
    """The 2x2 max pool made 65535x65535 with padding 32767: still a 2x2 output, 4.3 * 10^9 taps."""
    def edit(program):
        plan = program.execution_plan[0]
        call = _call(plan, "cortex_m::quantized_max_pool2d")
        call.args[1], call.args[3] = _int_list(plan, [65535, 65535]), _int_list(plan, [32767, 32767])
    return edited(cpu, edit)


def _huge_litert_pool(cpu: bytes, delegated: bytes) -> bytes:
    """The subgraph's MAX_POOL_2D made 65535x65535 SAME: still a 2x2 output, 4.3 * 10^9 taps."""
    def edit(program):
        reference = reference_payload.unpack(program.backend_delegate_data[0].data)
        model = tflite_schema.ModelT.InitFromPackedBuf(bytearray(reference.tflite), 0)
        for op in model.subgraphs[0].operators:
            if model.operatorCodes[op.opcodeIndex].builtinCode == tflite_schema.BuiltinOperator.MAX_POOL_2D:
                op.builtinOptions.filterHeight = op.builtinOptions.filterWidth = 65535
                op.builtinOptions.padding = tflite_schema.Padding.SAME
        builder = flatbuffers.Builder(1024)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        program.backend_delegate_data[0].data = reference_payload.pack(reference.metadata, bytes(builder.Output()))
    return edited(delegated, edit)


def _jump_to_itself(cpu: bytes, delegated: bytes) -> bytes:
    """A first instruction that jumps to itself while a False value stays False."""
    def edit(program):
        plan = program.execution_plan[0]
        never = _append(plan, schema.Bool(False))
        plan.chains[0].instructions.insert(0, schema.Instruction(schema.JumpFalseCall(never, 0)))
    return edited(cpu, edit)


HOSTILE = {
    "unplanned_tensor": _unplanned_tensor,
    "negative_buffer": _negative_buffer,
    "shared_constant": _shared_constant,
    "shared_tensor": _shared_tensor,
    "cortex_m_pool": _huge_cortex_m_pool,
    "litert_pool": _huge_litert_pool,
    "jump_to_itself": _jump_to_itself,
}

_CHILD = textwrap.dedent("""
    import json, resource, signal, sys
    import numpy as np
    import imxrt.runtime
    from imxrt.errors import BadFile

    files, warm_up, shape = json.loads(sys.argv[1])

    def run(path):
        imxrt.runtime.load(path).forward(np.zeros(shape, np.float32))

    def alarm(*_):
        raise TimeoutError("still running after 60 s")

    for path in warm_up:  # every module loaded and BLAS started before the address space is capped
        run(path)
    with open("/proc/self/statm") as statm:
        in_use = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (in_use + (2 << 30), resource.RLIM_INFINITY))
    signal.signal(signal.SIGALRM, alarm)
    outcomes = {}
    for name, path in files.items():
        signal.alarm(60)
        try:
            run(path)
            outcomes[name] = "ran"
        except BadFile as e:
            outcomes[name] = f"BadFile: {e}"
        except BaseException as e:
            outcomes[name] = f"{type(e).__name__}: {e}"
        finally:
            signal.alarm(0)
    print(json.dumps(outcomes))
""")


@pytest.fixture(scope="module")
def outcomes(cpu, delegated, tmp_path_factory) -> dict[str, str]:
    """Each hostile file loaded and run once in a child with 2 GiB of address space to spare and 60 s each:
    "BadFile: <message>", "ran", or the error it ended in."""
    folder = tmp_path_factory.mktemp("hostile")
    paths = {}
    for name, build in {**HOSTILE, "cpu": lambda c, d: c, "delegated": lambda c, d: d}.items():
        paths[name] = folder / f"{name}.pte"
        paths[name].write_bytes(build(cpu, delegated))
    files = {name: str(paths[name]) for name in HOSTILE}
    argument = json.dumps([files, [str(paths["cpu"]), str(paths["delegated"])], INPUT_SHAPE])
    child = subprocess.run([sys.executable, "-c", _CHILD, argument], capture_output=True, text=True, timeout=900)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_a_huge_unplanned_tensor_is_refused_before_it_is_allocated(outcomes):
    assert outcomes["unplanned_tensor"].startswith("BadFile: ")
    assert re.search(f"would need 3,500,[0-9,]{{7}} bytes to load and run, {CAP}", outcomes["unplanned_tensor"])


def test_a_negative_buffer_size_is_refused(outcomes):
    assert outcomes["negative_buffer"].startswith("BadFile: ")
    assert "memory buffer 3 has size -3,000,000,000" in outcomes["negative_buffer"]


@pytest.mark.parametrize("case", ["shared_constant", "shared_tensor"])
def test_shared_flatbuffer_offsets_count_once_per_reference(outcomes, case):
    """Under 300 KB of file each: the total the reader would build is over the cap, not any one part."""
    assert outcomes[case].startswith("BadFile: ")
    assert "bytes to read" in outcomes[case] and CAP in outcomes[case]


@pytest.mark.parametrize("case, where", [
    ("cortex_m_pool", "cortex_m::quantized_max_pool2d"),
    ("litert_pool", "NeutronBackend delegate 0: LiteRT subgraph: operator 2 (MAX_POOL_2D)"),
])
def test_a_pooling_window_the_kernels_cannot_take_is_refused_at_load(outcomes, case, where):
    assert outcomes[case].startswith("BadFile: ")
    assert where in outcomes[case]
    assert f"65535x65535 window has 4,294,836,225 taps, more than the host's kernels take " \
           f"({conv.MAX_WINDOW_TAPS:,})" in outcomes[case]


def test_a_jump_to_itself_stops_at_the_step_budget(outcomes):
    assert outcomes["jump_to_itself"].startswith("BadFile: ")
    assert (f"instruction 0 (JumpFalseCall) jumped back to instruction 0 more than {interpreter.MAX_JUMPS_BACK:,} "
            "times in one forward") in outcomes["jump_to_itself"]


# -- in this process: files that fail fast either way, and each rule at its boundary

def test_our_programs_need_little(cpu, delegated):
    for pte in (cpu, delegated):
        assert 0 < reader.read_program(pte).required_bytes < 4 << 20


@pytest.mark.parametrize("spare, loads", [(0, True), (-1, False)], ids=["at_the_cap", "one_byte_over"])
def test_required_bytes_against_the_cap(cpu, monkeypatch, spare, loads):
    required = reader.read_program(cpu).required_bytes
    monkeypatch.setattr(reader, "HOST_MEMORY_CAP", required + spare)
    if loads:
        imxrt.runtime.load(cpu).forward(np.zeros(INPUT_SHAPE, np.float32))
    else:
        with pytest.raises(BadFile, match=f"would need {required:,} bytes to load and run, more than the host "
                                          f"runtime's cap of {required - 1:,}"):
            imxrt.runtime.load(cpu)


@pytest.mark.parametrize("size, loads", [(0, True), (-1, False)])
def test_buffer_sizes_are_not_negative(cpu, size, loads):
    def edit(program):
        program.execution_plan[0].non_const_buffer_sizes.append(size)
    pte = edited(cpu, edit)
    if loads:
        imxrt.runtime.load(pte)
    else:
        with pytest.raises(BadFile, match="memory buffer 2 has size -1"):
            imxrt.runtime.load(pte)


@pytest.mark.parametrize("destination, loads", [(-1, False), ("end", True), ("past_end", False)])
def test_jump_destinations_are_refused_at_load_outside_the_chain(cpu, destination, loads):
    """A JumpFalseCall on a True value, first in the chain: to -1 (Python would take the last instruction),
    to the end of the chain (allowed: it ends the chain, but never jumps here), past the end."""
    def edit(program):
        plan = program.execution_plan[0]
        count = len(plan.chains[0].instructions) + 1
        target = {"end": count, "past_end": count + 1}.get(destination, destination)
        plan.chains[0].instructions.insert(0, schema.Instruction(schema.JumpFalseCall(
            _append(plan, schema.Bool(True)), target)))
    pte = edited(cpu, edit)
    if loads:
        x = np.random.default_rng(0).standard_normal(INPUT_SHAPE).astype(np.float32)
        np.testing.assert_array_equal(imxrt.runtime.load(pte).forward(x)[0], imxrt.runtime.load(cpu).forward(x)[0])
    else:
        with pytest.raises(BadFile, match="instruction 0 jumps to instruction -?[0-9]+, but the chain has"):
            imxrt.runtime.load(pte)


@pytest.mark.parametrize("jumps_back, runs", [(interpreter.MAX_JUMPS_BACK, True),
                                               (interpreter.MAX_JUMPS_BACK + 1, False)])
def test_a_loop_may_jump_back_up_to_the_budget(cpu, jumps_back, runs):
    """c += 1; done = c >= limit; jump back to the start while not done: limit - 1 jumps back."""
    def edit(program):
        plan = program.execution_plan[0]
        counter, one, limit, done = (_append(plan, value) for value in (
            schema.Int(0), schema.Int(1), schema.Int(jumps_back + 1), schema.Bool(False)))
        plan.operators += [schema.Operator("executorch_prim::add", "Scalar"),
                           schema.Operator("executorch_prim::ge", "Scalar")]
        add, at_least = len(plan.operators) - 2, len(plan.operators) - 1
        plan.chains[0].instructions[:0] = [schema.Instruction(schema.KernelCall(add, [counter, one, counter])),
                                           schema.Instruction(schema.KernelCall(at_least, [counter, limit, done])),
                                           schema.Instruction(schema.JumpFalseCall(done, 0))]
    loaded = imxrt.runtime.load(edited(cpu, edit))
    x = np.zeros(INPUT_SHAPE, np.float32)
    if runs:
        loaded.forward(x)
    else:
        with pytest.raises(BadFile, match="instruction 2 \\(JumpFalseCall\\) jumped back to instruction 0 more than"):
            loaded.forward(x)


def _with_metadata_text(delegated: bytes, text: bytes) -> bytes:
    """The delegate's payload with its metadata JSON replaced by ``text`` (padded with spaces)."""
    def edit(program):
        reference = reference_payload.unpack(program.backend_delegate_data[0].data)
        blob = reference_payload.pack({"x": "x" * (len(text) + 16)}, reference.tflite)
        placeholder = json.dumps({"x": "x" * (len(text) + 16)}, separators=(",", ":")).encode()
        program.backend_delegate_data[0].data = blob.replace(placeholder, text.ljust(len(placeholder)))
    return edited(delegated, edit)


def test_deeply_nested_payload_json_is_one_bad_file(delegated):
    nested = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(BadFile, match="NeutronBackend delegate 0: reference payload metadata nests 100000 deep, "
                                      f"more than {reference_payload.MAX_METADATA_DEPTH}"):
        imxrt.runtime.load(_with_metadata_text(delegated, nested))


@pytest.mark.parametrize("depth, parses", [(reference_payload.MAX_METADATA_DEPTH, True),
                                           (reference_payload.MAX_METADATA_DEPTH + 1, False)])
def test_metadata_depth_boundary(depth, parses):
    """An object holding arrays: '{"a":' + '[' * (depth - 1) + ']' * (depth - 1) + '}', with '[' in a string
    that must not count."""
    text = b'{"s":"[[[[","a":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
    if parses:
        assert reference_payload.parse_metadata(text)["s"] == "[[[["
    else:
        with pytest.raises(ValueError, match=f"nests {depth} deep"):
            reference_payload.parse_metadata(text)


def test_metadata_size_boundary():
    text = b'{"a":"' + b"x" * (reference_payload.MAX_METADATA_BYTES - 8) + b'"}'
    assert len(reference_payload.parse_metadata(text)["a"]) == reference_payload.MAX_METADATA_BYTES - 8
    with pytest.raises(ValueError, match=f"more than {reference_payload.MAX_METADATA_BYTES:,}"):
        reference_payload.parse_metadata(text[:-2] + b'x"}')


@pytest.mark.parametrize("arguments, problem", [
    # (input NHWC, filter, stride, dilation, padding) -> what is refused, or None
    (((1, 4, 4, 1), (2, 2), (1, 1), (1, 1), ((0, 0), (0, 0))), None),
    (((1, 4, 4, 1), (2, 2), (0, 1), (1, 1), ((0, 0), (0, 0))), "its stride is 0x1; it must be at least 1"),
    (((1, 4, 4, 1), (2, 2), (1, 1), (1, 0), ((0, 0), (0, 0))), "its dilation is 1x0; it must be at least 1"),
    (((1, 4, 4, 1), (0, 2), (1, 1), (1, 1), ((0, 0), (0, 0))), "its filter size is 0x2; it must be at least 1"),
    (((1, 4, 4, 1), (2, 2), (1, 1), (1, 1), ((0, -1), (0, 0))), "its padding is \\[\\[0, -1\\], \\[0, 0\\]\\]"),
    (((1, 4, 4, 1), (6, 2), (1, 1), (1, 1), ((1, 1), (0, 0))), None),  # the window is the padded input
    (((1, 4, 4, 1), (7, 2), (1, 1), (1, 1), ((1, 1), (0, 0))), "its 7x2 window .* larger than its 6x4 padded"),
    (((1, 4, 4, 1), (3, 2), (1, 1), (3, 1), ((1, 1), (0, 0))), "its 7x2 window \\(dilation 3x1\\) is larger"),
    (((1, 512, 512, 1), (512, 512), (1, 1), (1, 1), ((0, 0), (0, 0))), None),  # MAX_WINDOW_TAPS taps
    (((1, 512, 513, 1), (512, 513), (1, 1), (1, 1), ((0, 0), (0, 0))), "has 262,656 taps, more than"),
    (((1, 8192, 16384, 1), (1, 1), (1, 1), (1, 1), ((0, 0), (0, 0))), None),  # MAX_PADDED_VALUES values
    (((1, 8192, 16384, 1), (1, 1), (1, 1), (1, 1), ((0, 1), (0, 0))), "holds 134,234,112 values, more than"),
], ids=["fits", "stride_0", "dilation_0", "filter_0", "padding_negative", "window_is_padded_input",
        "window_over_padded_input", "dilated_window_over_padded_input", "most_taps", "taps_over",
        "most_padded_values", "padded_values_over"])
def test_window_rules_at_their_boundaries(arguments, problem):
    if problem is None:
        conv.check_window(*arguments)
    else:
        with pytest.raises(ValueError, match=problem):
            conv.check_window(*arguments)


def test_a_pool_window_of_padding_only_is_refused():
    """A 2-row window with 2 rows of padding before a 1-row input: the first window reads only padding."""
    window = conv.Window(stride=(1, 1), dilation=(1, 1), pad_before=(2, 0), output_size=(2, 1), filter_size=(2, 1))
    with pytest.raises(ValueError, match="a window of the pool covers only padding"):
        pooling.prepare_pool(window, (1, 1), -128, 127)


def test_a_delegate_io_map_pointing_outside_the_call_is_refused(delegated):
    """Argument -1 would read the call's last argument (its output) as the subgraph's input."""
    def edit(program):
        reference = reference_payload.unpack(program.backend_delegate_data[0].data)
        reference.metadata["inputs"][0]["arg"] = -1
        program.backend_delegate_data[0].data = reference_payload.pack(reference.metadata, reference.tflite)
    with pytest.raises(BadFile, match="NeutronBackend delegate 0: its input .* is argument -1 of the call's 1 inputs"):
        imxrt.runtime.load(edited(delegated, edit))
