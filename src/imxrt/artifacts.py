"""What a compile produces and which files hold it: ``CompileResult`` and its ``save`` into the output folder
(``output_folder`` writes them), the Neutron converter's dumps, and a failed partition kept for a bug report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from executorch.exir import EdgeProgramManager
from torch.export import ExportedProgram

from imxrt import c_array, output_folder, writer
from imxrt.npu.backend import delegate_info, neutron_delegates
from imxrt.npu.compilers import eiq
from imxrt.profiling.etrecord import etrecord_bytes
from imxrt.report import html as report_html


@dataclass
class CompileResult:
    """What ``compile`` produced: the program, the LiteRT subgraph of each NPU partition, the report."""

    pte: bytes
    partitions: list[bytes]
    report: dict
    stage_seconds: dict[str, float] = field(default_factory=dict)
    quantized: ExportedProgram | None = None  # the int8 program as PyTorch runs it (fake-quantized float)
    # Output-relative path -> bytes: the files the Neutron converter wrote, next to the .pte
    # (partition_<i>_kernel_selection.c), and the profiling maps (npu/partition_<i>.kernels.json).
    npu_files: dict[str, bytes] = field(default_factory=dict)
    # ExecuTorch's ETRecord of this compile (model.etrecord: what Inspector maps an ETDump's events with)
    etrecord: object | None = None

    @property
    def io(self) -> dict:
        """Each model input and output: name, shape, dtype, dim order, scale, zero point (``report["io"]``)."""
        return self.report["io"]

    def save(self, output: str | Path, c_header: bool = False, bundled: bytes | None = None) -> None:
        """Write ``model.pte``, ``model.etrecord``, ``report.json``, ``report.html``, ``npu/partition_<i>.tflite``
        and the converter's dumps into the folder ``output`` (with ``c_header``, also ``model_pte.h``/``.c``:
        the program as a C array, ``imxrt.c_array``; with ``bundled``, ``model.bpte``: the program with test cases,
        ``imxrt.bundle``, which the C array then holds instead), and ``.imxrt-manifest.json``: each file's size
        and sha256.

        The folder is checked first (``BadOption`` for the filesystem root, the home folder or above it, a path
        under a file, a place that cannot be written). Only the files the previous compile's manifest lists, and
        unchanged since, are replaced or removed; everything else in the folder is the user's and stays (a listed
        file the user has changed is kept with a warning, or refused when this compile writes that name, as is
        any existing file of one of our names that no manifest lists). The new set replaces the old at once: a
        folder holding only our files is exchanged whole for a staged copy; beside the user's files ours are
        replaced one by one under a manifest naming both sets, and an interrupt puts the old ones back
        (``imxrt.output_folder``)."""
        folder = output_folder.check_writable(output)  # before rendering anything
        files = {"model.pte": self.pte,
                 "report.json": (json.dumps(self.report, indent=2, sort_keys=True) + "\n").encode(),
                 "report.html": report_html.render(self.report).encode("utf-8")}
        if self.etrecord is not None:
            files["model.etrecord"] = etrecord_bytes(self.etrecord)
        if bundled is not None:
            files["model.bpte"] = bundled
        if c_header:
            header, source = c_array.render(self.pte, self.io, bundled=bundled)
            files["model_pte.h"], files["model_pte.c"] = header.encode("ascii"), source.encode("ascii")
        for index, tflite in enumerate(self.partitions):
            files[f"npu/partition_{index}.tflite"] = tflite
        files.update(self.npu_files)
        output_folder.write(folder, files)


def keep_failed_partition(error: eiq.NeutronConverterFailed, output: str | Path) -> Path:
    """Write the LiteRT subgraph the Neutron converter failed on to ``output/npu/failed_<tag>.tflite`` (or
    ``failed_<tag>-<n>.tflite``: a file of that name is never overwritten), for a bug report to NXP, and return
    its path. The file appears whole."""
    tag = error.partition.split(" ", 1)[0]
    return writer.write_new(Path(output) / "npu", f"failed_{tag}", ".tflite", error.tflite)


def converter_dumps(edge: EdgeProgramManager) -> dict[str, bytes]:
    """The files the Neutron converter wrote for each partition, and each partition's profiling map, by the
    path ``CompileResult.save`` writes them to."""
    files: dict[str, bytes] = {}
    for index, module in enumerate(neutron_delegates(edge)):
        info = delegate_info(module)
        if info is None:
            continue
        for name, data in info.converter_files.items():
            files[f"partition_{index}_{name.lstrip('_')}"] = data
        if info.kernel_map is not None:
            files[f"npu/partition_{index}.kernels.json"] = \
                (json.dumps(info.kernel_map, indent=2, sort_keys=True) + "\n").encode()
    return files
