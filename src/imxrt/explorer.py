"""Model Explorer: a compiled folder's ``model.etrecord`` and ``model.pte`` in Google's Model Explorer through
ExecuTorch's adapters (``executorch-extension-model-explorer``: the PTE and ETRecord adapters and the ETDump
profiling overlay), with imxrt's own overlays on the ETRecord graph.

The ETRecord adapter draws the edge graph (each node labelled by its PyTorch module class, delegated nodes
grouped by partition) and gives every node its edge name and debug handle. The overlays key the same nodes:

    estimated µs (imxrt)   the cost model's time of each op (report.json ``latency``), fused ops on their op
    module (imxrt)         the op's module path and class (report.json ``module``), e.g. features.3 (Conv2d)
    ETDump ...             with ``--etdump``: the provider's per-node figures of an ``imxrt run --etdump`` file

Needs the optional extra: ``pip install -e ".[explorer]"``. The server listens on the loopback address only.
"""

from __future__ import annotations

import json
from pathlib import Path

from imxrt.errors import BadFile, BadOption
from imxrt.report.names import label

EXTENSION = "executorch_extension_model_explorer"
HOST = "127.0.0.1"
ESTIMATE = "estimated µs (imxrt)"
MODULE = "module (imxrt)"


def _missing(e: ImportError) -> BadOption:
    return BadOption("explore", str(e.name or e), "Model Explorer and ExecuTorch's adapters installed: "
                                                  "pip install -e \".[explorer]\"")


def _require():
    """Model Explorer and ExecuTorch's adapters (imported: their classes register here)."""
    try:
        import model_explorer
        from executorch_extension_model_explorer import main as adapters
    except ImportError as e:
        raise _missing(e) from None
    return model_explorer, adapters


def _require_server():
    """Model Explorer, and the adapters' package found but not imported (the server imports it)."""
    import importlib.util

    try:
        import model_explorer
    except ImportError as e:
        raise _missing(e) from None
    if importlib.util.find_spec(EXTENSION) is None:
        raise _missing(ImportError(name=EXTENSION))
    return model_explorer, None


def etrecord_graph(etrecord: Path):
    """The ETRecord adapter's graph of ``etrecord`` (its ``forward``)."""
    _, adapters = _require()
    try:
        result = adapters.ETRecordAdapter().convert(str(etrecord), {})
    except Exception as e:  # noqa: BLE001  (the adapter's own error: the file is not a readable ETRecord)
        raise BadFile(str(etrecord), f"is not an ETRecord Model Explorer can read ({type(e).__name__}: {e}); "
                                     "recompile with imxrt compile") from None
    return result["graphCollections"][0].graphs[0]


def _attr(node, key: str) -> str | None:
    return next((str(attr.value) for attr in node.attrs if attr.key == key), None)


def _kind(op: str) -> str:
    """``quantize_per_tensor.default`` of ``cortex_m.quantize_per_tensor.default``: an op without namespace."""
    return ".".join(op.split(".")[-2:])


def _report_op(node, by_name: dict, by_handle: dict) -> dict | None:
    """The report.json op a graph node draws: by edge name (the adapter writes it with a trailing ``_``), or,
    for an op the CPU lowering renamed (``cortex_m_quantize_per_tensor_default``), by debug handle and kind."""
    name = (_attr(node, "Node Name") or "").removesuffix("_")
    if name in by_name:
        return by_name[name]
    return by_handle.get((_attr(node, "debug_handle"), _kind(_attr(node, "Op Type") or "")))


def overlays(report: dict, graph) -> dict[str, dict]:
    """Model Explorer node data (``{graph id: {"results": {node id: {"value": ...}}}}``) per overlay name:
    the estimated µs of every op the estimate times, and the module of every op that has one."""
    us = {op["name"]: float(op["us"]) for op in report["latency"]["ops"]}
    by_name = {op["name"]: op for op in report["ops"]}
    by_handle = {(str(op.get("debug_handle")), _kind(op["op"])): op for op in report["ops"]}
    estimate, module = {}, {}
    for node in graph.nodes:
        op = _report_op(node, by_name, by_handle)
        if op is None:
            continue
        if us.get(op["name"], 0) > 0:
            estimate[node.id] = {"value": round(us[op["name"]], 3)}
        if op.get("module_type"):
            module[node.id] = {"value": label(op)}
    gradient = [{"stop": 0, "bgColor": "#e8f5e9"}, {"stop": 1, "bgColor": "#ef9a9a"}]
    # the last overlay is the one the web app shows first: the times, which colour the graph
    return {MODULE: {graph.id: {"results": module}},
            ESTIMATE: {graph.id: {"results": estimate, "gradient": gradient}}}


def etdump_overlays(etrecord: Path, etdump: Path, graph) -> dict[str, dict]:
    """The ETDump provider's overlays (per-node times of an ``imxrt run --etdump`` file), by name."""
    _, adapters = _require()
    run = adapters.ETDumpProfilingOverlayProvider().run(
        provider_id="etdump_data_provider", model_path=str(etrecord), graph_id=graph.id,
        config_values={"etdump_path": str(etdump)}, graph=graph)
    if run.error:
        raise BadFile(str(etdump), f"Model Explorer's ETDump provider refused it ({run.error}); write it with "
                                   "imxrt run --etdump from this folder's model.pte")
    return {f"ETDump {data.name}": {graph.id: json.loads(data.to_json_string())} for data in run.result}


def folder_overlays(outdir: Path, report: dict, etdump: Path | None = None) -> dict[str, dict]:
    """Every overlay of a compiled folder's ETRecord graph, by name."""
    etrecord = outdir / "model.etrecord"
    graph = etrecord_graph(etrecord)
    return overlays(report, graph) | (etdump_overlays(etrecord, etdump, graph) if etdump else {})


def config(outdir: Path, report: dict, etdump: Path | None = None):
    """The Model Explorer config of a compiled folder: its ETRecord with the overlays, and its ``.pte``.

    The overlays are made in a child process: Model Explorer's server registers an extension by the classes
    its import defines, so one already imported here (to convert the graph) would not be registered there."""
    import multiprocessing

    from imxrt.files import check_regular
    from imxrt.pte.reader import HOST_MEMORY_CAP, PROGRAM_FILE

    model_explorer, _ = _require_server()
    etrecord, pte = outdir / "model.etrecord", outdir / "model.pte"
    check_regular(etrecord, HOST_MEMORY_CAP, "an ETRecord", "give the folder imxrt compile -o wrote")
    check_regular(pte, HOST_MEMORY_CAP, PROGRAM_FILE, "give the folder imxrt compile -o wrote")
    if etdump is not None:
        check_regular(etdump, HOST_MEMORY_CAP, "an ETDump (imxrt run --etdump)")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        data = pool.apply(folder_overlays, (outdir, report, etdump))
    cfg = model_explorer.config()
    cfg.add_model_from_path(str(etrecord))
    cfg.add_model_from_path(str(pte))
    for name, node_data in data.items():  # for the first model, the ETRecord (the web app names it otherwise)
        cfg.add_node_data(name, json.dumps(node_data))
    return cfg


def url(cfg, port: int) -> str:
    """The address that opens the config's models and overlays."""
    return f"http://{HOST}:{port}/?data={cfg.to_url_param_value()}"


def serve(cfg, port: int, open_browser: bool) -> None:
    """Run Model Explorer's server on the loopback address until interrupted."""
    model_explorer, _ = _require_server()
    model_explorer.visualize_from_config(config=cfg, host=HOST, port=port, extensions=[EXTENSION],
                                         no_open_in_browser=not open_browser)
