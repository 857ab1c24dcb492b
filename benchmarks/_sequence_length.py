"""`benchmarks/sequence.py --length`: compile time and peak memory of a recurrent layer against its length.

A speaker-encoder-sized stack (3 `nn.LSTM` layers, 40 mel bands in, hidden 256, a linear embedding on the last
step), and the 49-frame GRU / LSTM keyword spotters, compiled by imxrt for each target and by ExecuTorch's
upstream NXP pipeline, each compile in a fresh process (its own peak RSS, no warm caches shared), with a time
limit per compile. Also the estimated latency and the NPU partitions (with how many times per inference the
step partition runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

_CHILD = r"""
import json, sys, time, resource, torch
sys.path.insert(0, {bench!r})
torch.manual_seed(0)
from torch import nn
kind, steps, pipeline = {kind!r}, {steps}, {pipeline!r}

class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(40, 256, num_layers=3, batch_first=True)
        self.embedding = nn.Linear(256, 256)
    def forward(self, x):
        y, _ = self.lstm(x)
        return self.embedding(y[:, -1])

if kind == "encoder":
    model, shape = Encoder().eval(), (1, steps, 40)
else:
    from _sequence_models import RecurrentClassifier
    model, shape = RecurrentClassifier(kind).eval(), (1, steps, 10)
generator = torch.Generator().manual_seed(1)
calibration = [(torch.randn(*shape, generator=generator),) for _ in range(8)]
started = time.perf_counter()
row = {{}}
if pipeline == "upstream":
    import upstream_nxp
    result = upstream_nxp.run_upstream(model, calibration[0], calibration)
    row["error"] = result.error
    row["partitions"] = result.partitions
else:
    import imxrt
    result = imxrt.compile(model, calibration[0], pipeline, calibration, imxrt.CompileOptions(show_progress=False))
    row["latency_ms"] = result.report["latency"]["total"]["us"] / 1000
    row["partitions"] = [p["calls"] for p in result.report["partitions"]]
row["seconds"] = time.perf_counter() - started
row["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("ROW" + json.dumps(row))
"""


def compile_in_child(kind: str, steps: int, pipeline: str, limit: float) -> dict:
    """One compile in a new interpreter: its seconds (the compile alone), peak RSS and figures."""
    code = _CHILD.format(bench=os.path.dirname(os.path.abspath(__file__)), kind=kind, steps=steps, pipeline=pipeline)
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"error": f"> {limit:.0f} s (stopped)"}
    rows = [line[3:] for line in done.stdout.splitlines() if line.startswith("ROW")]
    if not rows:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {done.returncode}: {last[:120]}", "wall": time.perf_counter() - started}
    return json.loads(rows[0])


def _cell(row: dict) -> str:
    if "seconds" not in row:
        return row["error"][:24]
    text = f"{row['seconds']:6.1f} s {row['rss_mb']:6.0f} MB"
    return text + (" (refused)" if row.get("error") else "")


def main(lengths=(40, 160, 400), pipelines=("imxrt700", "imxrt700-cpu", "upstream"), limit: float = 600.0) -> None:
    print("3-layer nn.LSTM(40, 256), last step -> linear(256): compile seconds and peak RSS per length, one process"
          " per compile")
    header = f"{'pipeline':<14}" + "".join(f"{f'{steps} steps':>26}" for steps in lengths) + \
        f"   growth {lengths[0]}->{lengths[-1]}"
    print(header)
    print("-" * len(header))
    for pipeline in pipelines:
        rows = [compile_in_child("encoder", steps, pipeline, limit) for steps in lengths]
        growth = ""
        if all("seconds" in r for r in (rows[0], rows[-1])):
            growth = (f"   time {rows[-1]['seconds'] / rows[0]['seconds']:.2f}x, "
                      f"RSS {rows[-1]['rss_mb'] / rows[0]['rss_mb']:.2f}x")
        print(f"{pipeline:<14}" + "".join(f"{_cell(r):>26}" for r in rows) + growth)
        for steps, row in zip(lengths, rows, strict=True):
            if row.get("error") and "seconds" in row:
                print(f"{'':14}{steps} steps: {row['error'][:150]}")
        for steps, row in zip(lengths, rows, strict=True):
            if "latency_ms" in row:
                print(f"{'':14}{steps} steps: estimated {row['latency_ms']:.1f} ms, partitions (calls per "
                      f"inference) {row['partitions']}")
    print()
    print("49-frame keyword spotters (hidden 64, 10 MFCC): compile seconds, peak RSS, estimated latency at 325 MHz")
    for kind in ("gru", "lstm"):
        for pipeline in pipelines:
            row = compile_in_child(kind, 49, pipeline, limit)
            extra = f", estimated {row['latency_ms']:.2f} ms, partitions {row['partitions']}" if "latency_ms" in row \
                else (f", {row['error']}" if row.get("error") else "")
            print(f"  {kind} {pipeline:<13} {_cell(row)}{extra}")
