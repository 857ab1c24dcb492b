"""The peers' own test models as conformance cases: ExecuTorch's Cortex-M backend tests (the ``McuTestCase``
tables of ``executorch/backends/cortex_m/test/ops`` and ``.../models``) and its NXP backend's node converter
tests (``executorch/backends/nxp/tests/ir/converter/node_converter/test_*.py``), with the models and input
shapes those tests use.

The NXP tests build their models inside the test functions, so they are collected by running them with
pytest, their pipeline entry points (``lower_run_compare``, ``to_quantized_edge_program``, ...) replaced by
a recorder that keeps (model, input shapes) and skips the rest of the test. ``executorch.backends.nxp`` needs
NXP's SDK even to import; ``upstream_nxp.ensure_neutron_sdk`` puts the SDK stand-in in its place.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass
class Case:
    name: str  # the upstream test's id
    source: str  # "cortex_m" or "nxp"
    model: torch.nn.Module
    example: tuple  # the upstream example inputs (tensors, or other Python values a test passes)

    def shapes(self) -> list[tuple[int, ...]] | None:
        """The input shapes, or None when an input is not a float32 tensor (a fair refusal)."""
        if not all(isinstance(x, torch.Tensor) and x.dtype == torch.float32 for x in self.example):
            return None
        return [tuple(x.shape) for x in self.example]


def cortex_m_cases() -> list[Case]:
    """Every ``McuTestCase`` of the Cortex-M backend's op and model tests (modules whose optional
    dependency is missing are left out, as pytest skips them)."""
    import executorch.backends.cortex_m.test.models as models
    import executorch.backends.cortex_m.test.ops as ops
    from executorch.backends.cortex_m.test.tester import McuTestCase

    cases = []
    for package in (ops, models):
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
            try:
                module = importlib.import_module(f"{package.__name__}.{info.name}")
            except BaseException:  # noqa: BLE001  (pytest.importorskip raises a BaseException)
                continue
            for table_name, table in sorted(vars(module).items()):
                if not isinstance(table, dict) or not table or \
                        not all(isinstance(c, McuTestCase) for c in table.values()):
                    continue
                for case_name, case in table.items():
                    example = case.get_example_inputs()
                    example = example if isinstance(example, tuple) else (example,)
                    cases.append(Case(f"cortex_m/{info.name}::{table_name}[{case_name}]", "cortex_m",
                                      case.model, example))
    return cases


class _Recorded(Exception):
    pass


def _spec_shapes(spec) -> list[tuple[int, ...]]:
    """Input shapes from an NXP test's input spec: a shape, a list of shapes or of ``ModelInputSpec``s."""
    if isinstance(spec, tuple) and all(isinstance(d, int) for d in spec):
        return [spec]
    shapes = []
    for item in spec:
        shapes.append(tuple(item.shape) if hasattr(item, "shape") else tuple(item))
    return shapes


def nxp_cases() -> list[Case]:
    """(model, input shapes) of every NXP node converter test that lowers a model."""
    import pytest
    import upstream_nxp

    upstream_nxp.ensure_neutron_sdk()
    import executorch.backends.nxp.tests.ir.converter.node_converter as tests_package

    recorded: list[Case] = []
    entry_points = ("lower_run_compare", "lower_run_compare_ptq_qat", "to_quantized_edge_program",
                    "to_edge_program")

    def recorder(nodeid: str) -> Callable:
        def record(model, input_spec, *args, **kwargs):
            shapes = _spec_shapes(input_spec)
            generator = torch.Generator().manual_seed(len(recorded))
            example = tuple(torch.randn(s, generator=generator) for s in shapes)
            recorded.append(Case(f"nxp/{nodeid.split('node_converter/')[-1]}", "nxp", model, example))
            pytest.skip("recorded")
        return record

    class Plugin:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_call(self, item):
            module = item.module
            saved = {name: getattr(module, name) for name in entry_points if hasattr(module, name)}
            for name in saved:
                setattr(module, name, recorder(item.nodeid))
            try:
                yield
            finally:
                for name, value in saved.items():
                    setattr(module, name, value)

    folder = Path(tests_package.__file__).parent
    with _nxp_test_environment(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        pytest.main([str(folder), "-q", "-p", "no:cacheprovider", "-W", "ignore"], plugins=[Plugin()])
    return _dedupe(recorded)


@contextlib.contextmanager
def _nxp_test_environment():
    """What the NXP tests' modules look up at import, for runs we never reach: NXP's simulator (``nsys``) and
    board runner paths must exist, and Model Explorer (a visualisation hook) must import. Stand-ins, here
    only while the tests are collected."""
    import os
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="nxp-test-env-")
    fake = Path(folder) / "nsys"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    saved_env = {k: os.environ.get(k) for k in ("PATH", "NXP_RUNNER_PATH")}
    os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ["NXP_RUNNER_PATH"] = str(fake)
    finder = None
    if importlib.util.find_spec("model_explorer") is None:
        finder = _ModelExplorerStandIn()
        sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if finder is not None:
            sys.meta_path.remove(finder)
            for name in [n for n in sys.modules if n.split(".")[0] == "model_explorer"]:
                del sys.modules[name]
        shutil.rmtree(folder, ignore_errors=True)


def _dedupe(cases: list[Case]) -> list[Case]:
    """One case per (model class, its state's shapes, input shapes): parametrizations over options a
    compile does not see (QAT, calibration data) give the same model."""
    seen, kept = set(), []
    for case in cases:
        key = (type(case.model).__name__, repr(case.model), tuple(case.shapes() or ()),
               tuple((k, tuple(v.shape)) for k, v in case.model.state_dict().items()))
        if key not in seen:
            seen.add(key)
            kept.append(case)
    return kept


def all_cases() -> list[Case]:
    return cortex_m_cases() + nxp_cases()


class _ModelExplorerStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``model_explorer`` and its submodules as empty packages whose every name is a placeholder class:
    ExecuTorch's visualisation hook imports them at module level; the tests we collect never call it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] != "model_explorer":
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = []
        module.__getattr__ = lambda name: type(name, (), {})
