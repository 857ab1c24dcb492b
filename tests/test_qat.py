"""QAT in the user's own loop: ``imxrt.prepare_qat`` / ``imxrt.compile_qat``, on one process or several (DDP)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import qat_ranks
import torch
from program_checks import partition_mismatches

import imxrt
from imxrt.errors import BadModel, BadOption
from imxrt.pipeline import CompileOptions
from imxrt.quantization.observers import QatMovingAverageMinMaxObserver

pytestmark = pytest.mark.slow  # every test here trains and compiles models

OPTIONS = CompileOptions(show_progress=False)
SHAPE = qat_ranks.SHAPE


def example():
    return (torch.zeros(SHAPE),)


def train(module, steps: int = 4, seed: int = 0) -> None:
    """The user's loop: SGD on a fixed random regression."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-2)
    for _ in range(steps):
        x = torch.randn((8, *SHAPE[1:]), generator=generator)
        optimizer.zero_grad()
        module(x).square().mean().backward()
        optimizer.step()


def test_the_two_halves_make_the_program_the_one_call_form_makes():
    prepared = imxrt.prepare_qat(qat_ranks.model(), example(), target="imxrt700")
    train(prepared)
    two_calls = imxrt.compile_qat(prepared, example(), "imxrt700", OPTIONS)
    one_call = imxrt.compile(qat_ranks.model(), example(), "imxrt700", options=OPTIONS, qat=train)
    assert two_calls.pte == one_call.pte and two_calls.partitions == one_call.partitions
    assert two_calls.report["summary"]["partitions"] == 1
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(1))
    assert partition_mismatches(two_calls, (x,)) == []


def test_qat_leaves_the_float_model_as_it_was():
    model = qat_ranks.model()
    before = {name: value.clone() for name, value in model.state_dict().items()}
    prepared = imxrt.prepare_qat(model, example())
    train(prepared)
    assert not model.training
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())
    imxrt.compile(model, example(), options=OPTIONS, qat=train)
    assert not model.training
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())


def test_a_checkpoint_taken_mid_training_compiles_and_training_goes_on_after_compile(tmp_path):
    prepared = imxrt.prepare_qat(qat_ranks.model(), example())
    train(prepared, steps=2)
    torch.save(prepared.state_dict(), tmp_path / "checkpoint.pt")
    compiled = imxrt.compile_qat(prepared, example(), options=OPTIONS)

    restored = imxrt.prepare_qat(qat_ranks.model(), example())
    restored.load_state_dict(torch.load(tmp_path / "checkpoint.pt"))
    assert imxrt.compile_qat(restored, example(), options=OPTIONS).pte == compiled.pte

    # compile_qat converted a copy: the module still fake-quantizes, trains and moves its statistics
    observer = next(m for m in prepared.modules() if isinstance(m, QatMovingAverageMinMaxObserver))
    low = float(observer.min_val)
    train(prepared, steps=2, seed=5)
    assert float(observer.min_val) != low
    assert imxrt.compile_qat(prepared, example(), options=OPTIONS).pte != compiled.pte


def test_the_statistics_move_in_training_mode_only():
    prepared = imxrt.prepare_qat(qat_ranks.model(), example())
    train(prepared, steps=1)
    observers = qat_ranks.statistics(prepared)
    prepared.eval()
    with torch.no_grad():
        prepared(torch.full(SHAPE, 100.0))
    assert qat_ranks.statistics(prepared) == observers
    prepared.train()
    with torch.no_grad():
        prepared(torch.full(SHAPE, 100.0))
    assert float(prepared.get_submodule(next(iter(observers))).max_val) > observers[next(iter(observers))][1]


def test_every_tensor_the_graph_reads_moves_with_to():
    """``.to(device)`` moves parameters and buffers only: a constant the export lifted (a plain tensor
    attribute of the model) must be one of them (prepare_qat_pt2e registers it), or training on a GPU would
    read it from the CPU."""
    class WithConstant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)
            self.gain = torch.arange(8.0)  # neither a parameter nor a buffer

        def forward(self, x):
            return self.linear(x) * self.gain

    prepared = imxrt.prepare_qat(WithConstant(), (torch.zeros(1, 8),))
    registered = {id(t) for t in prepared.parameters()} | {id(t) for t in prepared.buffers()}
    read = [getattr(prepared.get_submodule(owner), name) for owner, _, name in
            (node.target.rpartition(".") for node in prepared.graph.nodes if node.op == "get_attr")]
    tensors = [t for t in read if isinstance(t, torch.Tensor)]
    assert any(torch.equal(t, torch.arange(8.0)) for t in tensors)
    assert all(id(t) in registered for t in tensors)
    train_step = torch.optim.SGD(prepared.parameters(), lr=1e-3)
    prepared(torch.randn(4, 8)).sum().backward()
    train_step.step()
    imxrt.compile_qat(prepared, (torch.zeros(1, 8),), options=OPTIONS)


def test_a_wrapped_module_compiles_as_the_module_inside():
    prepared = imxrt.prepare_qat(qat_ranks.model(), example())
    train(prepared)
    expected = imxrt.compile_qat(prepared, example(), options=OPTIONS).pte
    assert imxrt.compile_qat(torch.nn.DataParallel(prepared), example(), options=OPTIONS).pte == expected


def test_a_module_not_prepared_by_prepare_qat_for_this_target_and_shape_is_refused():
    prepared = imxrt.prepare_qat(qat_ranks.model(), example(), target="imxrt700")
    with pytest.raises(BadModel, match="observers have seen no data"):
        imxrt.compile_qat(prepared, example(), options=OPTIONS)
    train(prepared)
    with pytest.raises(BadOption, match="'imxrt700', the target the module was prepared for"):
        imxrt.compile_qat(prepared, example(), "imxrt700-cpu", OPTIONS)
    with pytest.raises(BadModel, match=r"example inputs \(2, 2, 6, 6\) float32 differ from the \(1, 2, 6, 6\)"):
        imxrt.compile_qat(prepared, (torch.zeros(2, *SHAPE[1:]),), options=OPTIONS)
    with pytest.raises(BadModel, match="Sequential given to compile_qat was not prepared by imxrt.prepare_qat"):
        imxrt.compile_qat(qat_ranks.model(), example(), options=OPTIONS)
    with torch.no_grad():
        next(prepared.parameters()).fill_(float("nan"))
    with pytest.raises(BadModel, match="parameter 0.weight holds 144 NaN.*diverged"):
        imxrt.compile_qat(prepared, example(), options=OPTIONS)


def torchrun(script: Path, *arguments: str) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node 2`` on the loopback interface; a rank that fails stops the
    other, and every rank's output comes back."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script), *arguments], env=env, capture_output=True, text=True, timeout=900)


def test_two_ranks_under_ddp_compile_a_program_whose_input_range_covers_both_shards(tmp_path):
    """Two gloo processes under torchrun on the loopback interface; rank 0's inputs lie in [-1, 1], rank 1's
    in [-4, 4]. DDP keeps its default ``broadcast_buffers=True``."""
    run = torchrun(Path(qat_ranks.__file__), str(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr

    statistics = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert statistics[0] == statistics[1]  # one reduction: the ranks never disagree
    report = json.loads((tmp_path / "program" / "report.json").read_text())
    scale, zero_point = report["io"]["inputs"][0]["scale"], report["io"]["inputs"][0]["zero_point"]
    bound = qat_ranks.RANGES[1]
    assert (-128 - zero_point) * scale <= -bound + scale and (127 - zero_point) * scale >= bound - scale

    program = tmp_path / "program"
    result = types.SimpleNamespace(pte=(program / "model.pte").read_bytes(),
                                   partitions=[p.read_bytes() for p in sorted((program / "npu").glob("*.tflite"))])
    for rank in range(2):
        for x in qat_ranks.shard(rank, 3):
            assert partition_mismatches(result, (x.unsqueeze(0),)) == []


def test_the_ddp_example_runs_under_torchrun_and_keeps_float_accuracy(tmp_path):
    """The README's command, on the loopback interface: two gloo processes, one compile on rank 0."""
    example = Path(__file__).resolve().parent.parent / "examples" / "qat_ddp.py"
    run = torchrun(example, "--epochs", "1", "-o", str(tmp_path / "out"))
    assert run.returncode == 0, run.stdout + run.stderr
    float_score, int8_score = (float(v) for v in re.search(r"float ([\d.]+)%, int8 ([\d.]+)%", run.stdout).groups())
    assert "QAT on 2 process(es)" in run.stdout and float_score > 95
    assert abs(int8_score - float_score) <= 0.5
    assert (tmp_path / "out" / "model.pte").is_file()
