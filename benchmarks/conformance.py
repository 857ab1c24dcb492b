"""Conformance: ExecuTorch's own NXP and Cortex-M test models, compiled for imxrt700 and imxrt700-cpu.

    python benchmarks/conformance.py [--target T] [--filter SUBSTR] [--limit N] [--jobs 2] [--json PATH]

For each upstream test case (``_conformance_cases``) and target, in a child process of its own (a crash or a
hang is a counted failure, not the end of the run): compile with 8 seeded random calibration samples, run
the ``.pte`` on the host runtime, run every NPU partition in TFLM on the int8 tensors it received and
compare bit for bit, and compare the ``.pte``'s outputs with ``CompileResult.quantized`` (README: at most
2 LSB of each output's scale). Prints the counts and one line per failing case:

    compiled       compiled and every check passed or was measured
    refused        refused with an ImxrtError (the message says which limit)
    raw            a Python exception other than ImxrtError escaped imxrt.compile
    crashed        the child process died (signal) or timed out
    int8-only      no float op left on the CPU
    all-NPU        every compute op in NeutronBackend partitions (imxrt700)
    TFLM bit-exact every partition call equals TFLM on the same int8 tensors
    pte≈quantized  the .pte's outputs within the rounding bound of the quantized program

Beside them, the peers on the same cases: ``upstream-cortex-m`` (ExecuTorch's Cortex-M backend: int8-only
when no float op is left) and ``upstream-nxp`` (ExecuTorch's NXP backend with the SDK stand-in of
``upstream_nxp``: all-NPU when every compute op is delegated); the cases a peer does better are listed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # program_checks, oracles: the same checks the tests make

TARGETS = ("imxrt700", "imxrt700-cpu")
# ExecuTorch's own Cortex-M backend on the same case, as the peer's figure: does it lower it to int8?
UPSTREAM_CORTEX_M = "upstream-cortex-m"
UPSTREAM_NXP = "upstream-nxp"
UPSTREAM = (UPSTREAM_CORTEX_M, UPSTREAM_NXP)
CALIBRATION_SAMPLES = 8
_QDQ_OPS = ("quantize_per_tensor", "dequantize_per_tensor")


def run_case(case, target: str) -> dict:
    """Compile ``case`` for ``target`` and check it (in the child process)."""
    import program_checks
    import torch

    from imxrt.errors import ImxrtError
    from imxrt.pipeline import CompileOptions, compile

    record = {"case": case.name, "target": target}
    shapes = case.shapes()
    generator = torch.Generator().manual_seed(0)
    if shapes is None:
        calibration, example = None, case.example
    else:
        calibration = [tuple(torch.randn(s, generator=generator) for s in shapes)
                       for _ in range(CALIBRATION_SAMPLES)]
        example = calibration[0]
    try:
        # The reference compiler explicitly: the NXP cases load the SDK stand-in, which "auto" would pick.
        options = CompileOptions(show_progress=False, neutron_compiler="reference")
        result = compile(case.model.eval(), example, target, calibration, options)
    except ImxrtError as e:
        return {**record, "status": "refused", "message": str(e).splitlines()[0]}
    except Exception as e:  # noqa: BLE001  (what this suite counts)
        return {**record, "status": "raw", "message": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                "traceback": traceback.format_exc()[-1500:]}
    summary = result.report["summary"]
    record["sha256"] = program_checks.program_digest(result)  # compared before/after a refactor
    compute = [op for op in result.report["ops"] if not any(q in op["op"] for q in _QDQ_OPS)]
    record.update(status="compiled", partitions=summary["partitions"], int8_only=summary["ops_cpu_float"] == 0,
                  all_npu=bool(compute) and all(op["placement"] == "npu" for op in compute))
    problems = []
    try:
        mismatches = [m for inputs in calibration[:2] for m in program_checks.partition_mismatches(result, inputs)]
        record["tflm_exact"] = not mismatches
        problems += mismatches[:2]
        lsb = max(max(program_checks.output_differences_lsb(result, inputs, case.model), default=0.0)
                  for inputs in calibration[:2])
        record["pte_lsb"] = lsb
        record["pte_matches"] = program_checks.within_rounding_bound(lsb)
        if not record["pte_matches"]:
            problems.append(f".pte differs from the quantized program by {lsb:.1f} LSB")
        odd = program_checks.odd_dim_orders(result.pte)
        if odd:
            problems.append(f"dim orders kernels do not take: {odd[:2]}")
    except ImxrtError as e:
        problems.append(f"the host runtime refused the program: {str(e).splitlines()[0]}")
        record["tflm_exact"] = record["pte_matches"] = False
    except Exception as e:  # noqa: BLE001
        problems.append(f"checking raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        record["tflm_exact"] = record["pte_matches"] = False
    record["problems"] = problems
    return record


def run_upstream_cortex_m(case) -> dict:
    """ExecuTorch's Cortex-M flow on ``case`` (its test harness: CortexMQuantizer, its edge config and pass
    manager): compiled, and int8-only when no float compute op is left in the final edge graph."""
    import torch
    from executorch.backends.cortex_m.test.tester import CortexMTester

    record = {"case": case.name, "target": UPSTREAM_CORTEX_M}
    shapes = case.shapes()
    example = case.example if shapes is None else tuple(
        torch.randn(s, generator=torch.Generator().manual_seed(0)) for s in shapes)
    try:
        tester = CortexMTester(case.model.eval(), example)
        tester.quantize().export().to_edge().run_passes()
        graph = tester.get_artifact().exported_program().graph
    except Exception as e:  # noqa: BLE001  (the peer's failures are counted, not ours to fix)
        first = str(e).splitlines()[0] if str(e) else ""
        return {**record, "status": "refused", "message": f"{type(e).__name__}: {first}"}
    floating = []
    for node in graph.nodes:
        value = node.meta.get("val")
        name = str(node.target)
        if node.op != "call_function" or "quantize" in name or "getitem" in name or "alloc" in name:
            continue
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
            floating.append(name)
    return {**record, "status": "compiled", "int8_only": not floating, "float_ops": sorted(set(floating))[:4],
            "problems": []}


def run_upstream_nxp(case) -> dict:
    """ExecuTorch's NXP backend on ``case`` (``upstream_nxp.run_upstream``: its own pipeline, the SDK stand-in
    for the target query, the converter call intercepted), with our calibration samples: all-NPU when every
    compute op is inside a NeutronBackend delegate. Upstream's NXP flow has no int8 CPU kernels, so an op
    left outside a delegate runs in float: int8-only is all-NPU there."""
    import torch
    import upstream_nxp

    record = {"case": case.name, "target": UPSTREAM_NXP}
    shapes = case.shapes()
    if shapes is None:
        calibration, example = None, case.example
    else:
        generator = torch.Generator().manual_seed(0)
        calibration = [tuple(torch.randn(s, generator=generator) for s in shapes)
                       for _ in range(CALIBRATION_SAMPLES)]
        example = calibration[0]
    result = upstream_nxp.run_upstream(case.model.eval(), example, calibration)
    if result.error is not None and "lower" not in result.seconds:
        return {**record, "status": "refused", "message": result.error}
    whole = result.partitions > 0 and not result.cpu_nodes
    return {**record, "status": "compiled", "partitions": result.partitions, "int8_only": whole, "all_npu": whole,
            "float_ops": sorted(set(result.cpu_nodes))[:4], "problems": []}


_UPSTREAM_RUNS = {UPSTREAM_CORTEX_M: run_upstream_cortex_m, UPSTREAM_NXP: run_upstream_nxp}


def _child(case, targets, connection) -> None:
    warnings.filterwarnings("ignore")
    import logging
    logging.disable(logging.WARNING)
    for target in targets:
        run = _UPSTREAM_RUNS.get(target)
        connection.send(run(case) if run is not None else run_case(case, target))
    connection.close()


def run_all(cases, targets, jobs: int, timeout: float, progress=True) -> list[dict]:
    """Each case in a forked child (all targets in turn); at most ``jobs`` at once."""
    context = multiprocessing.get_context("fork")
    pending = list(cases)
    running: list[tuple] = []
    results: list[dict] = []
    done = 0
    while pending or running:
        while pending and len(running) < jobs:
            case = pending.pop(0)
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(case, targets, send), daemon=True)
            process.start()
            send.close()
            running.append((case, process, receive, time.monotonic(), []))
        time.sleep(0.05)
        for entry in list(running):
            case, process, receive, started, got = entry
            try:
                while receive.poll():
                    got.append(receive.recv())
            except (EOFError, OSError):
                pass
            timed_out = time.monotonic() - started > timeout
            if process.is_alive() and not timed_out:
                continue
            if timed_out:
                process.kill()
            process.join()
            for target in targets[len(got):]:
                status = "timeout" if timed_out else f"signal {-process.exitcode}" if process.exitcode and \
                    process.exitcode < 0 else f"exit {process.exitcode}"
                got.append({"case": case.name, "target": target, "status": "crashed", "message": status})
            results.extend(got)
            running.remove(entry)
            done += 1
            if progress:
                print(f"\r{done}/{len(cases)} cases", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return results


def summarize(results: list[dict], targets) -> list[str]:
    lines = [f"{'target':14} {'cases':>6} {'compiled':>9} {'refused':>8} {'raw':>5} {'crashed':>8} "
             f"{'int8-only':>10} {'all-NPU':>8} {'TFLM exact':>11} {'pte≈quant':>10}"]
    for target in targets:
        rows = [r for r in results if r["target"] == target]
        compiled = [r for r in rows if r["status"] == "compiled"]

        def count(key, rows=compiled):
            return sum(bool(r.get(key)) for r in rows)

        lines.append(
            f"{target:14} {len(rows):>6} {len(compiled):>9} {sum(r['status'] == 'refused' for r in rows):>8} "
            f"{sum(r['status'] == 'raw' for r in rows):>5} {sum(r['status'] == 'crashed' for r in rows):>8} "
            f"{count('int8_only'):>10} {count('all_npu'):>8} {count('tflm_exact'):>11} {count('pte_matches'):>10}")
    return lines


def behind_upstream(results: list[dict]) -> list[str]:
    """Cases ExecuTorch's Cortex-M backend lowers to int8 that leave a float op here (imxrt700-cpu)."""
    upstream = {r["case"] for r in results if r["target"] == UPSTREAM_CORTEX_M and r.get("int8_only")}
    return sorted(f"{r['case']}: " + (f"refused here ({r.get('message', '')})" if r["status"] == "refused" else
                                      f"{r['status']} here" if r["status"] != "compiled" else "float here")
                  + ", int8 in ExecuTorch's Cortex-M backend" for r in results
                  if r["target"] == "imxrt700-cpu" and r["case"] in upstream and not r.get("int8_only"))


def behind_upstream_npu(results: list[dict]) -> list[str]:
    """Cases ExecuTorch's NXP backend delegates whole that imxrt700 does not put wholly on the NPU."""
    upstream = {r["case"] for r in results if r["target"] == UPSTREAM_NXP and r.get("all_npu")}
    return sorted(f"{r['case']}: partly on the CPU here, all on the NPU in ExecuTorch's NXP backend"
                  for r in results if r["target"] == "imxrt700" and r["case"] in upstream and not r.get("all_npu"))


def failures(results: list[dict]) -> list[str]:
    """One line per case that failed a check (refusals are listed too: each should name a real limit)."""
    lines = []
    for r in sorted(results, key=lambda r: (r["status"], r["case"], r["target"])):
        if r["target"] in UPSTREAM:
            continue
        if r["status"] in ("raw", "crashed", "refused"):
            lines.append(f"{r['case']} {r['target']}: {r['status']}: {r.get('message', '')}")
        elif r.get("problems") or not r.get("int8_only", True):
            detail = "; ".join(r.get("problems") or []) or "float op left on the CPU"
            lines.append(f"{r['case']} {r['target']}: check: {detail}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=(*TARGETS, *UPSTREAM), action="append",
                        help=f"default: both imxrt targets, {UPSTREAM_CORTEX_M} (the peer's int8 figure) and "
                             f"{UPSTREAM_NXP} (the peer's all-NPU figure)")
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--case", action="append", help="only this case (its full name; repeatable)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many cases (in name order)")
    parser.add_argument("--source", choices=("cortex_m", "nxp", "all"), default="all")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per case (all targets)")
    parser.add_argument("--json", type=Path, help="write every case's record here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import logging
    logging.disable(logging.WARNING)

    import torch

    # One intra-op thread from the start: each case runs in a forked child, and an OpenMP pool the parent
    # had started hangs a forked child's first parallel op. Two children at a time use the cores instead.
    torch.set_num_threads(1)

    import _conformance_cases

    import imxrt.pipeline  # noqa: F401  (imported once here, inherited by every child)

    # the upstream cases build their modules with torch's global generator: the same weights every run
    torch.manual_seed(0)
    cases = {"cortex_m": _conformance_cases.cortex_m_cases, "nxp": _conformance_cases.nxp_cases,
             "all": _conformance_cases.all_cases}[args.source]()
    cases = [c for c in cases if args.filter in c.name and (not args.case or c.name in args.case)]
    cases.sort(key=lambda c: c.name)
    if args.limit is not None:
        cases = cases[:args.limit]
    targets = tuple(args.target or (*TARGETS, *UPSTREAM))
    start = time.perf_counter()
    results = run_all(cases, targets, args.jobs, args.timeout)
    print(f"{len(cases)} upstream test cases x {len(targets)} targets in {time.perf_counter() - start:.0f} s")
    print("\n".join(summarize(results, targets)))
    if UPSTREAM_CORTEX_M in targets:
        behind = behind_upstream(results)
        print(f"\n{len(behind)} cases ExecuTorch's Cortex-M backend lowers to int8 and imxrt700-cpu does not:")
        print("\n".join(behind))
    if UPSTREAM_NXP in targets:
        behind = behind_upstream_npu(results)
        print(f"\n{len(behind)} cases ExecuTorch's NXP backend puts wholly on the NPU and imxrt700 does not:")
        print("\n".join(behind))
    failing = failures(results)
    print(f"\n{len(failing)} failing or refused:")
    print("\n".join(failing))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
