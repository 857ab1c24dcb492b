"""The same model, inputs and options give byte-identical artifacts.

`model.etrecord` used to differ on every compile: ExecuTorch records Python object ids as graph ids in each
node's provenance, and the zip entries carried the time of writing.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from executorch.exir.debug_handle_utils import get_greatest_ancestor_node_identifier

import imxrt
from imxrt.pipeline import CompileOptions, export, quantize
from imxrt.profiling.etrecord import etrecord_bytes
from imxrt.profiling.provenance import trim_history
from imxrt.targets import get_target


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


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mobilenet_v2.py"


def _compile_in(folder: Path, **env: str) -> dict[str, bytes]:
    """`imxrt compile` of the bundled example run from ``folder`` (a relative -o) with extra environment;
    every file it wrote, by relative path."""
    folder.mkdir()
    subprocess.run([sys.executable, "-m", "imxrt.cli", "compile", str(EXAMPLE), "--target", "imxrt700", "-o", "out",
                    "--quiet"], cwd=folder, env={**os.environ, **env}, check=True, capture_output=True)
    out = folder / "out"
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_the_example_compiles_to_the_same_bytes_whatever_the_threads_simd_level_and_folder(tmp_path):
    """Before: one thread or the scalar ATen kernels moved the output scale by a float step (the example's
    weights and BatchNorm statistics, and the calibration ranges, were float32 sums whose rounding depends
    on their order), and the ETRecord held object ids and timestamps."""
    reference = _compile_in(tmp_path / "a")
    assert {"model.pte", "model.etrecord", "report.json", "npu/partition_0.tflite"} <= set(reference)
    for name, env in (("b", {"OMP_NUM_THREADS": "1"}), ("c", {"ATEN_CPU_CAPABILITY": "default"})):
        other = _compile_in(tmp_path / name, **env)
        assert set(other) == set(reference)
        differing = [path for path in reference if other[path] != reference[path]]
        assert not differing, f"{env}: {differing} differ"
