"""imxrt explore: a compiled folder in Model Explorer through ExecuTorch's adapters, with our overlays.

The adapters need the explorer extra, which cannot share an environment with the test extra's TOSA
serializer (flatbuffers pins): the adapter tests run where it is installed; the error without it runs here."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from edited_programs import SMALL_CONV_NET_SOURCE

from imxrt.cli import main

pytestmark = pytest.mark.slow  # compiles a program through the command line

INSTALLED = all(importlib.util.find_spec(m) for m in ("model_explorer", "executorch_extension_model_explorer"))
needs_explorer = pytest.mark.skipif(not INSTALLED, reason="the explorer extra (pip install -e '.[explorer]')")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("explore")
    (tmp / "net.py").write_text(SMALL_CONV_NET_SOURCE)
    out = tmp / "out"
    assert main(["compile", str(tmp / "net.py"), "--target", "imxrt700", "-o", str(out), "--quiet"]) == 0
    np.save(tmp / "x.npy", np.ones((1, 3, 6, 6), np.float32))
    etdump = tmp / "run.etdump"
    assert main(["run", str(out / "model.pte"), "--input", str(tmp / "x.npy"), "--etdump", str(etdump)]) == 0
    return out, etdump


@pytest.mark.skipif(INSTALLED, reason="the explorer extra is installed here")
def test_without_the_extra_explore_says_how_to_install_it(folder, capsys):
    out, _ = folder
    assert main(["explore", str(out), "--no-browser"]) == 1
    assert 'pip install -e ".[explorer]"' in capsys.readouterr().err


@needs_explorer
def test_the_adapters_read_our_three_files_and_the_overlays_carry_our_names_and_times(folder):
    from executorch_extension_model_explorer.main import PTEAdapter

    from imxrt import explorer

    out, etdump = folder
    report = json.loads((out / "report.json").read_text())
    graph = explorer.etrecord_graph(out / "model.etrecord")
    labels = {node.label for node in graph.nodes}
    assert {"Conv2d", "Linear"} <= labels  # the adapter labels nodes by module class
    pte = PTEAdapter().convert(str(out / "model.pte"), {})["graphCollections"][0].graphs[0]
    assert any(node.label == "NeutronBackend" for node in pte.nodes)

    data = explorer.overlays(report, graph)
    times = data[explorer.ESTIMATE][graph.id]["results"]
    modules = data[explorer.MODULE][graph.id]["results"]
    conv = next(node.id for node in graph.nodes if node.label == "Conv2d")
    conv_us = next(op["us"] for op in report["latency"]["ops"] if op["name"] == conv.removesuffix("_"))
    assert times[conv]["value"] == pytest.approx(conv_us, abs=1e-3) and conv_us > 0
    assert modules[conv]["value"] == "0 (Conv2d)"
    quantize = next(node.id for node in graph.nodes if node.id.startswith("quantized_decomposed_quantize"))
    assert times[quantize]["value"] > 0  # the CPU's input quantize, renamed by the lowering, found by handle

    profiled = explorer.etdump_overlays(out / "model.etrecord", etdump, graph)
    assert any(result["value"] > 0 for overlay in profiled.values() for result in overlay[graph.id]["results"].values())
    assert explorer.url(explorer.config(out, report, etdump), 8080).startswith("http://127.0.0.1:8080/?data=")
