"""ExecuTorch's backend test suite (``executorch/backends/test/suite``) through imxrt's flows and the peers'.

    python benchmarks/backend_suite.py [--suite operators models] [--flow imxrt700 imxrt700_cpu nxp xnnpack]
                                       [--filter REGEX] [--every K] [--cases FILE] [--jobs 2] [--timeout S]
                                       [--json PATH]
    python benchmarks/backend_suite.py --records A.json B.json      # the tables of earlier runs, side by side

Every test function of the suite's ``operators/`` (and ``models/``: torchvision's and torchaudio's models, with the
``zoo`` extra) runs for each flow in a forked child process of its own, with the suite's time limit (120 s per
operator test, 1200 s per model, all its subtests; a hang or a crash is counted, not the end of the run). Inside,
the suite's own runner does the work (``runner.run_test``: quantize, export the reference, lower, serialize, run,
compare with atol 0.1 and rtol 0.04), with the inputs of the suite's seeded generator, the same for every flow.
Unlike the suite under pytest, every subtest of a function runs even after one fails, so each flow is counted over
the same cases.

Flows:
    imxrt700, imxrt700_cpu   imxrt's (``tests/backend_suite_flow.py``): imxrt.compile, run by imxrt's host runtime
    nxp                      upstream's ``nxp_neutron_imxrt700_int8_ptq`` with the eIQ SDK stand-in of
                             ``upstream_nxp`` (its converter call answers a placeholder: no NPU code, so a program
                             with a delegate cannot run; the table says how far each case gets)
    xnnpack                  upstream's ``xnnpack_static_int8_per_channel`` (ops its quantizer leaves float run float)

Prints one row per flow: cases, passes (with an NPU / backend delegate), and each failure class; then, for imxrt's
flows, every case that did not pass with its one-line reason, and how many compared outputs are bit-identical to
the suite's reference.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import itertools
import json
import multiprocessing
import pkgutil
import re
import sys
import time
import unittest
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # backend_suite_flow: imxrt's flows

IMXRT_FLOWS = ("imxrt700", "imxrt700_cpu")
PEER_FLOWS = {"nxp": "nxp_neutron_imxrt700_int8_ptq", "xnnpack": "xnnpack_static_int8_per_channel"}
SUITES = {"operators": 120.0, "models": 1200.0}  # the suite's own time limit per test (conftest)
SEED = 0  # the suite's run seed: each case's inputs are seeded by its name plus this
# What each result becomes in the table, in its column order.
# "not run": the suite passes a case with nothing delegated without running it (imxrt's flows run every case).
COLUMNS = ("pass", "not run (nothing delegated)", "wrong output", "refused at quantize", "refused at lower",
           "run failed", "internal error", "timeout or crash", "skipped by the suite")


@dataclass(frozen=True)
class Case:
    """One test function of the suite with one choice of its pytest parameters (other than the flow)."""

    suite: str
    module: str  # e.g. "test_add"
    function: str
    params: tuple[tuple[str, object], ...] = ()

    @property
    def name(self) -> str:
        values = "-".join(_param_id(value) for _, value in self.params)
        return f"{self.suite}/{self.module}::{self.function}" + (f"[{values}]" if values else "")


def _param_id(value) -> str:
    return str(value).removeprefix("torch.") if not isinstance(value, bool) else str(value)


def suite_package(suite: str) -> str:
    return f"executorch.backends.test.suite.{suite}"


def discover(suites) -> list[Case]:
    """Every test function of ``suites``, expanded over its ``pytest.mark.parametrize`` marks; a module that does
    not import (``models`` without torchvision) is left out with a line on stderr."""
    cases = []
    for suite in suites:
        package = importlib.import_module(suite_package(suite))
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if not info.name.startswith("test_"):
                continue
            try:
                module = importlib.import_module(f"{package.__name__}.{info.name}")
            except Exception as e:  # noqa: BLE001 - an optional dependency of the suite is missing
                print(f"{suite}/{info.name}: not run ({type(e).__name__}: {e})", file=sys.stderr)
                continue
            for name, function in sorted(vars(module).items()):
                if name.startswith("test_") and callable(function) and \
                        "test_runner" in inspect.signature(function).parameters:
                    cases.extend(Case(suite, info.name, name, params) for params in _parametrizations(function))
    return cases


def _parametrizations(function) -> list[tuple[tuple[str, object], ...]]:
    """The cartesian product of a function's ``parametrize`` marks, as (name, value) pairs."""
    axes = []
    for mark in getattr(function, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        values = [getattr(v, "values", v) for v in values]  # pytest.param(...) -> its values
        axes.append([tuple(zip(names, v if len(names) > 1 else (v,), strict=True)) for v in values])
    return [tuple(itertools.chain.from_iterable(combo)) for combo in itertools.product(*axes)]


# --- in the child process -------------------------------------------------------------------------------------


def load_flows(flow_keys) -> dict:
    """The suite's ``TestFlow`` of each key: imxrt's from the plugin, each peer's from its own flow module (not the
    whole registry, which imports every backend the wheel has). Also imports the suite's runner, whose conftest
    builds the registry once: done here, before the children fork, it is not paid per case."""
    import backend_suite_flow
    import executorch.backends.test.suite.conftest  # noqa: F401

    flows = {flow.name: flow for flow in backend_suite_flow.imxrt_flows() if flow.name in flow_keys}
    if "xnnpack" in flow_keys:
        from executorch.backends.test.suite.flows.xnnpack import XNNPACK_STATIC_INT8_PER_CHANNEL_TEST_FLOW

        flows["xnnpack"] = XNNPACK_STATIC_INT8_PER_CHANNEL_TEST_FLOW
    if "nxp" in flow_keys:
        import upstream_nxp
        from _conformance_cases import _nxp_test_environment

        upstream_nxp.ensure_neutron_sdk()
        with _nxp_test_environment():  # NXP's test modules look up its simulator and board runner at import
            from executorch.backends.test.suite.flows.nxp import NEUTRON_IMXRT700_INT8_PTQ_FLOW
        flows["nxp"] = NEUTRON_IMXRT700_INT8_PTQ_FLOW
    return flows


def run_case(case: Case, flow_key: str, flow) -> list[dict]:
    """Run ``case`` for ``flow`` with the suite's runner; one record per subtest."""
    import pytest
    from executorch.backends.test.suite import reporting
    from executorch.backends.test.suite.conftest import TestRunner

    if reporting.get_active_test_session() is None:
        reporting.begin_test_session(None, seed=SEED)
    module = importlib.import_module(f"{suite_package(case.suite)}.{case.module}")
    function = getattr(module, case.function)
    params = dict(case.params)
    skip, reason = flow.should_skip_test(case.function, params)
    if skip:
        return [_record(case, flow_key, "skipped by the suite", reason)]
    factory = flow.tester_factory  # imxrt's keeps its last tester (TesterFactory.last); the peers' keep none

    class EveryCase(TestRunner):
        """The suite's runner, going on to the next subtest after a failure (each is recorded)."""

        def __init__(self) -> None:
            super().__init__(flow, f"{case.function}[{flow.name}]", case.function)
            self.npu_delegates: list[int | None] = []

        def lower_and_run_model(self, *args, **kwargs):
            before = getattr(factory, "last", None)
            try:
                super().lower_and_run_model(*args, **kwargs)
            except (RuntimeError, pytest.skip.Exception):
                pass  # the runner recorded the subtest
            finally:
                tester = getattr(factory, "last", None)  # a new one: this subtest got as far as making it
                self.npu_delegates.append(tester.compile.npu_delegates if tester is not before else None)

    runner = EveryCase()
    try:
        with _peer_context(flow_key):
            function(runner, **params)
    except (pytest.skip.Exception, unittest.SkipTest) as e:  # the suite's own skips (NaN inputs, in-place ops)
        if not runner._results:
            return [_record(case, flow_key, "skipped by the suite", str(e))]
    except Exception as e:  # noqa: BLE001 - the test function itself failed (not a subtest)
        return [_record(case, flow_key, "internal error", f"the test raised {type(e).__name__}: {_first_line(e)}")]
    return [_subtest_record(case, flow_key, summary, npu) for summary, npu in
            zip(runner._results, runner.npu_delegates, strict=True)]


@contextlib.contextmanager
def _peer_context(flow_key: str):
    if flow_key == "nxp":  # the stand-in SDK has no converter: answer its call with a placeholder
        import upstream_nxp

        with upstream_nxp._intercept_converter([]):
            yield
    else:
        yield


def _first_line(error: BaseException | None) -> str:
    text = str(error).strip().splitlines() if error is not None else []
    return (text[0] if text else type(error).__name__ if error is not None else "")[:300]


def _record(case: Case, flow_key: str, outcome: str, message: str = "", **extra) -> dict:
    return {"case": case.name, "flow": flow_key, "outcome": outcome, "message": message[:300], **extra}


def _subtest_record(case: Case, flow_key: str, summary, npu_delegates: int | None) -> dict:
    from executorch.backends.test.suite.reporting import TestResult

    from imxrt.errors import CompilerBug, ImxrtError

    error, result = summary.error, summary.result
    ours = flow_key in IMXRT_FLOWS
    # Ours: an ImxrtError other than CompilerBug is a refusal that says why; anything else is our bug.
    refused = not ours or (isinstance(error, ImxrtError) and not isinstance(error, CompilerBug))
    outcome = {
        TestResult.SUCCESS: "pass", TestResult.SUCCESS_UNDELEGATED: "not run (nothing delegated)",
        TestResult.SKIPPED: "skipped by the suite",
        TestResult.OUTPUT_MISMATCH_FAIL: "wrong output",
        TestResult.QUANTIZE_FAIL: "refused at quantize" if refused else "internal error",
        TestResult.LOWER_FAIL: "refused at lower" if refused else "internal error",
        TestResult.PTE_LOAD_FAIL: "internal error" if ours else "run failed",
        TestResult.PTE_RUN_FAIL: "internal error" if ours else "run failed",
        # to_executorch / serialize: ours refuses there what the stock runtime could not run
        TestResult.UNKNOWN_FAIL: "refused at lower" if ours and refused else "internal error",
    }.get(result, "internal error")
    delegated = bool(npu_delegates) if ours else summary.is_delegated()
    compared = [stats.error_max for stats in summary.tensor_error_statistics]
    return _record(case, flow_key, outcome, _first_line(error) if outcome != "pass" else "",
                   subtest=summary.subtest_index, delegated=delegated, error_max=compared,
                   error_type=type(error).__name__ if error is not None else None)


def _child(case: Case, flow_key: str, flow, connection) -> None:
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)
    connection.send(run_case(case, flow_key, flow))
    connection.close()


def run_all(cases: list[Case], flows: dict, jobs: int, timeouts: dict[str, float], progress=True) -> list[dict]:
    """Each case for each flow in a forked child of its own, under the suite's time limit per test; at most
    ``jobs`` at once. A child past its limit or one that dies is one "timeout or crash" record."""
    context = multiprocessing.get_context("fork")  # each child starts with everything imported
    pending = [(case, key) for case in cases for key in flows]
    running, results, done = [], [], 0
    while pending or running:
        while pending and len(running) < jobs:
            case, key = pending.pop(0)
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(case, key, flows[key], send), daemon=True)
            process.start()
            send.close()
            running.append((case, key, process, receive, time.monotonic(), []))
        time.sleep(0.05)
        for entry in list(running):
            case, key, process, receive, started, got = entry
            try:
                while receive.poll():
                    got.extend(receive.recv())
            except (EOFError, OSError):
                pass
            timed_out = time.monotonic() - started > timeouts[case.suite]
            if process.is_alive() and not timed_out:
                continue
            if timed_out:
                process.kill()
            process.join()
            if not got:
                got.append(_record(case, key, "timeout or crash", "timeout" if timed_out else
                                   f"exit {process.exitcode}"))
            results.extend(got)
            running.remove(entry)
            done += 1
            if progress:
                print(f"\r{done}/{len(cases) * len(flows)} test functions x flows", end="", file=sys.stderr,
                      flush=True)
    if progress:
        print(file=sys.stderr)
    return results


# --- the table --------------------------------------------------------------------------------------------------


def table(results: list[dict], flow_keys) -> list[str]:
    header = ("flow", "cases", *COLUMNS)
    rows = [header]
    for key in flow_keys:
        mine = [r for r in results if r["flow"] == key]
        counts = Counter(r["outcome"] for r in mine)
        delegated = sum(r["outcome"] == "pass" and r.get("delegated", False) for r in mine)
        cells = [key, str(len(mine))]
        for column in COLUMNS:
            cell = str(counts.get(column, 0))
            if column == "pass":
                cell += f" ({delegated} delegated)"
            cells.append(cell)
        rows.append(tuple(cells))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return ["  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in
                      enumerate(zip(row, widths, strict=True))) for row in rows]


def exactness(results: list[dict], flow_key: str) -> str:
    outputs = [e for r in results if r["flow"] == flow_key and r["outcome"] == "pass" for e in r.get("error_max", [])]
    exact = sum(e == 0 for e in outputs if e is not None)
    return f"{flow_key}: {exact} of {len(outputs)} compared outputs bit-identical to the suite's reference"


def not_passed(results: list[dict], flow_key: str) -> list[str]:
    """What did not pass, one line per (outcome, reason) with its count and the test modules it came from."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in results:
        if r["flow"] == flow_key and r["outcome"] not in ("pass", "not run (nothing delegated)",
                                                          "skipped by the suite"):
            reason = re.sub(r"\(\d[\d, ]*\)|\d+x\d+(x\d+)?", "...", r["message"])  # shapes: one line per reason
            groups.setdefault((r["outcome"], reason), []).append(r["case"].split("::")[0].split("/")[-1])
    return [f"  {len(modules):>3} {outcome}: {message} ({', '.join(sorted(set(modules)))})"
            for (outcome, message), modules in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", nargs="+", choices=tuple(SUITES), default=["operators"])
    parser.add_argument("--flow", nargs="+", choices=(*IMXRT_FLOWS, *PEER_FLOWS), default=list(IMXRT_FLOWS))
    parser.add_argument("--filter", help="a regular expression a case's name must match")
    parser.add_argument("--every", type=int, default=1, help="every K-th test function (in name order): a sample")
    parser.add_argument("--cases", type=Path, help="a file of case names, one per line: run just these")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, help="seconds per test function and flow (default: the suite's)")
    parser.add_argument("--json", type=Path, help="write every record here")
    parser.add_argument("--records", nargs="+", type=Path,
                        help="print the tables of earlier runs' --json files instead of running (over the test "
                             "functions every flow in them ran)")
    args = parser.parse_args(argv)
    if args.records:
        return print_records([r for path in args.records for r in json.loads(path.read_text())])

    warnings.filterwarnings("ignore")
    if "models" in args.suite:
        import _zoo_models

        _zoo_models._torchvision()  # the suite's model tests import torchvision
    cases = discover(args.suite)
    if args.filter:
        cases = [c for c in cases if re.search(args.filter, c.name)]
    cases = cases[::args.every]
    if args.cases:
        wanted = {line.strip() for line in args.cases.read_text().splitlines() if line.strip()}
        cases = [c for c in cases if c.name in wanted]
        missing = wanted - {c.name for c in cases}
        if missing:
            print(f"not in the suite: {', '.join(sorted(missing))}", file=sys.stderr)
            return 2
    timeouts = {suite: args.timeout or limit for suite, limit in SUITES.items()}
    flows = load_flows(args.flow)
    flow_keys = tuple(key for key in args.flow if key in flows)
    started = time.monotonic()
    results = run_all(cases, {key: flows[key] for key in flow_keys}, args.jobs, timeouts)
    print(f"ExecuTorch backend suite ({', '.join(args.suite)}): {len(cases)} test functions, "
          f"{time.monotonic() - started:.0f} s, {args.jobs} jobs")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return report(results, flow_keys)


def print_records(records: list[dict]) -> int:
    """The tables of stored records, over the test functions (case names without the subtest) every flow ran."""
    flow_keys = tuple(dict.fromkeys(r["flow"] for r in records))
    ran = [{r["case"] for r in records if r["flow"] == key} for key in flow_keys]
    common = set.intersection(*ran) if ran else set()
    print(f"{len(common)} test functions run by every flow of {', '.join(flow_keys)}")
    return report([r for r in records if r["case"] in common], flow_keys)


def report(results: list[dict], flow_keys) -> int:
    """Print the table, imxrt's exactness and what did not pass; 1 if imxrt had a wrong output, an internal error,
    a crash or a timeout."""
    print("\n".join(table(results, flow_keys)))
    for key in flow_keys:
        if key in IMXRT_FLOWS:
            print(exactness(results, key))
            lines = not_passed(results, key)
            if lines:
                print(f"{key}: not passed")
                print("\n".join(lines))
    bad = [r for r in results if r["flow"] in IMXRT_FLOWS and r["outcome"] in
           ("wrong output", "internal error", "timeout or crash")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
