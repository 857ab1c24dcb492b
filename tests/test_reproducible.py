"""The same model, inputs and options give byte-identical artifacts.

`model.etrecord` used to differ on every compile: ExecuTorch records Python object ids as graph ids in each
node's provenance, and the zip entries carried the time of writing.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import reproducible_compiles
import torch
from executorch.exir.debug_handle_utils import get_greatest_ancestor_node_identifier

import imxrt
from imxrt.pipeline import CompileOptions, export, quantize
from imxrt.profiling.etrecord import etrecord_bytes
from imxrt.profiling.provenance import trim_history
from imxrt.targets import get_target

pytestmark = pytest.mark.slow  # every test here compiles models


def _model_and_inputs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 4 * 4, 2)).eval()
    return model, (torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1)),)


def _compile(target: str) -> imxrt.CompileResult:
    model, inputs = _model_and_inputs()
    return imxrt.compile(model, inputs, target, [inputs], CompileOptions(show_progress=False))


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_two_compiles_write_the_same_etrecord_and_program(target):
    first, second = _compile(target), _compile(target)
    assert first.pte == second.pte
    first_record, second_record = etrecord_bytes(first.etrecord), etrecord_bytes(second.etrecord)
    if first_record != second_record:  # name the entry that differs
        a, b = zipfile.ZipFile(io.BytesIO(first_record)), zipfile.ZipFile(io.BytesIO(second_record))
        differing = [e.filename for e in a.infolist() if a.read(e.filename) != b.read(e.filename)
                     or e.date_time != b.getinfo(e.filename).date_time]
        pytest.fail(f"model.etrecord differs between two compiles in {differing}")
    assert etrecord_bytes(first.etrecord) == first_record  # writing it again changes nothing


def test_trimmed_provenance_keeps_every_nodes_greatest_ancestor():
    """Debug handles are made from each node's greatest ancestor: the trimmed history must keep it."""
    model, inputs = _model_and_inputs()
    target = get_target("imxrt700")
    quantized = quantize(export(model, inputs), inputs, [inputs], CompileOptions(show_progress=False), target)
    nodes = [n for n in quantized.graph.nodes if "from_node" in n.meta and n.meta["from_node"]]
    before = {n.name: get_greatest_ancestor_node_identifier(n) for n in nodes}
    depth_before = max(_depth(n.meta["from_node"]) for n in nodes)
    trim_history(quantized.graph)
    assert {n.name: get_greatest_ancestor_node_identifier(n) for n in nodes} == before
    assert depth_before > 1 and max(_depth(n.meta["from_node"]) for n in nodes) == 1


def _depth(history) -> int:
    return 1 + max((_depth(source.from_node) for source in history), default=0) if history else 0


def test_etrecord_digest_is_stable_within_a_process():
    """A record written twice from one compile, with other compiles in between, is the same file."""
    result = _compile("imxrt700")
    digest = hashlib.sha256(etrecord_bytes(result.etrecord)).hexdigest()
    _compile("imxrt700")
    assert hashlib.sha256(etrecord_bytes(result.etrecord)).hexdigest() == digest


COMPILES = Path(__file__).resolve().parent / "reproducible_compiles.py"


def _settings() -> dict[str, dict[str, str]]:
    """The settings compared, by name: the machine's best SIMD level on two threads (the reference), the
    scalar kernels, one thread. Thread counts are explicit, so a one-core machine still compares 1 with 2."""
    best = "best level" if "ATEN_CPU_CAPABILITY" in os.environ else torch.backends.cpu.get_cpu_capability().lower()
    return {f"{best}, 2 threads": {"OMP_NUM_THREADS": "2"},
            "default, 2 threads": {"OMP_NUM_THREADS": "2", "ATEN_CPU_CAPABILITY": "default"},
            f"{best}, 1 thread": {"OMP_NUM_THREADS": "1"}}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_models_compile_to_the_same_bytes_whatever_the_simd_level_threads_and_folder(tmp_path):
    """Every file of each compile of ``reproducible_compiles.MODELS`` (four examples, the autoencoder on both
    targets, and a sequence model) is the same under the machine's SIMD level on two threads, the scalar
    kernels (ATEN_CPU_CAPABILITY=default) and one thread, each compiled in a process and folder of its own.

    Before: under ATEN_CPU_CAPABILITY=default the autoencoder's and CifarNet's output scales moved by a float
    step, and DS-CNN's program: their examples drew weights with torch's initializers (``uniform_(a, b)`` rounds
    in float32 on the scalar kernels, in double on AVX2 and AVX-512) and BatchNorm statistics from float32
    passes over ``randn`` noise, which also moved the autoencoder's on one thread. Earlier, one thread or the
    scalar kernels moved the bundled MobileNetV2's output scale (float32 calibration), and the ETRecord held
    object ids and timestamps."""
    environment = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS")}
    runs = {}
    for index, (name, settings) in enumerate(_settings().items()):
        folder = tmp_path / str(index)
        folder.mkdir()
        with open(folder / "stderr.txt", "w") as stderr:  # a file, not a pipe: the runs go on side by side
            process = subprocess.Popen([sys.executable, str(COMPILES)], cwd=folder, env={**environment, **settings},
                                       stdout=subprocess.DEVNULL, stderr=stderr)
        runs[name] = folder, process
    for name, (folder, process) in runs.items():
        assert process.wait() == 0, f"{name}: {(folder / 'stderr.txt').read_text()[-2000:]}"
    (reference_name, (reference_folder, _)), *others = runs.items()
    reference = _files(reference_folder / "out")
    models = json.loads((reference_folder / "models.json").read_text())
    for model, (_, targets) in reproducible_compiles.MODELS.items():
        for target in targets:
            assert {"model.pte", "model.etrecord", "report.json"} <= {
                path.split("/", 2)[2] for path in reference if path.startswith(f"{model}/{target}/")}
    assert any(path.endswith(".tflite") for path in reference)
    problems = []
    for name, (folder, _) in others:
        other_models = json.loads((folder / "models.json").read_text())
        if other_models != models:  # not the compiler's doing: the model was built differently
            problems.append(f"{name}: the models themselves differ from {reference_name}'s: "
                            f"{[model for model in models if other_models[model] != models[model]]}")
        other = _files(folder / "out")
        differing = sorted(path for path in set(reference) | set(other) if other.get(path) != reference.get(path))
        if differing:
            problems.append(f"{name}: {differing} differ from {reference_name}'s")
    assert not problems, "\n".join(problems)
